#!/usr/bin/env bash
# The container images (README "Container images"), for `make images` and `make test-images`:
#   docker/images.sh build          the build image (docker/Dockerfile), then the runtime image
#                                   (docker/Dockerfile.runtime) from it
#   docker/images.sh test           test-runtime, then test-build
#   docker/images.sh test-runtime   a package built in the build image, run in the runtime image
#   docker/images.sh test-build     `make test` inside the build image
# The engine is docker where `docker info` succeeds, else podman (installed here, with runc, when
# missing). The base is the public Debian 12 image where it can be pulled, else a local one made
# with mmdebstrap. Environment: ENGINE=docker|podman, BASE=IMAGE, BUILD_IMAGE, RUNTIME_IMAGE,
# WHEELS=DIR (default: $PIP_FIND_LINKS when it names a directory), WHEELS_PORT, HOST_CA=FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

PUBLIC_BASE=docker.io/library/debian:bookworm-slim
LOCAL_BASE=localhost/debian:bookworm
BUILD_IMAGE=${BUILD_IMAGE:-localhost/tdaot-build}
RUNTIME_IMAGE=${RUNTIME_IMAGE:-localhost/tdaot-runtime}
HOST_CA=${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}
WORK=build/images

say() { echo "images: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
  say "installing Debian packages: $*"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}
timed() {
  local what=$1 start=$SECONDS
  shift
  "$@"
  say "$what: $((SECONDS - start)) s"
}

# --- engine and base --------------------------------------------------------------------------
# Podman's default ulimits raise RLIMIT_NOFILE/NPROC, which some VMs (this project's) refuse;
# an empty list keeps the engine's own limits.
podman_conf() {
  local conf=/etc/containers/containers.conf
  grep -qs '^ *default_ulimits' "$conf" && return 0
  if grep -qs '^\[containers\]' "$conf"; then
    as_root sed -i 's/^\[containers\]/&\ndefault_ulimits = []/' "$conf"
  else
    printf '[containers]\ndefault_ulimits = []\n' | as_root tee -a "$conf" >/dev/null
  fi
  say "set default_ulimits = [] in $conf"
}

pick_engine() {
  if [ -z "${ENGINE:-}" ]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=podman; fi
  fi
  if [ "$ENGINE" = docker ]; then
    export DOCKER_BUILDKIT=1 # RUN --mount=type=secret
    E=(docker)
  else
    command -v podman >/dev/null && PATH=$PATH:/usr/sbin command -v runc >/dev/null || apt_install podman runc
    podman_conf
    # crun refuses hybrid cgroup hierarchies (this VM's); runc with cgroupfs runs on any.
    E=(podman --runtime runc --cgroup-manager=cgroupfs)
  fi
  say "engine: ${E[*]}"
}

make_local_base() {
  command -v mmdebstrap >/dev/null || apt_install mmdebstrap
  mkdir -p "$WORK"
  local debian=http://deb.debian.org/debian
  mmdebstrap --variant=minbase bookworm "$WORK/base.tar" "deb $debian bookworm main" \
    "deb $debian bookworm-updates main" "deb $debian-security bookworm-security main"
  "${E[@]}" import --change 'CMD ["/bin/bash"]' "$WORK/base.tar" "$LOCAL_BASE"
  rm -f "$WORK/base.tar"
}

pick_base() {
  if [ -n "${BASE:-}" ]; then
    say "base: $BASE (given)"
  elif timeout 120 "${E[@]}" pull -q "$PUBLIC_BASE" >/dev/null 2>&1; then
    BASE=$PUBLIC_BASE
    say "base: $BASE (the public image)"
  else
    BASE=$LOCAL_BASE
    say "base: no registry reachable ($PUBLIC_BASE cannot be pulled): using $BASE, a Debian 12 made with mmdebstrap"
    "${E[@]}" image inspect "$BASE" >/dev/null 2>&1 || timed "made $BASE" make_local_base
  fi
}

# pip inside the build reaches the host's loopback (--network host): a local wheel directory
# (this project's machines keep the CPU torch wheel in the one PIP_FIND_LINKS names) is served
# there for the build, and the torch index, then not needed, is not asked. A fixed port: the
# address is a build argument, and a build argument is part of the layer cache's key.
serve_wheels() {
  WHEEL_ARGS=()
  local dir=${WHEELS:-${PIP_FIND_LINKS:-}} port=${WHEELS_PORT:-38417}
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  python3 -m http.server --bind 127.0.0.1 --directory "$dir" "$port" >/dev/null 2>&1 &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
  sleep 1
  kill -0 "$SERVER_PID" 2>/dev/null || die "cannot serve $dir on 127.0.0.1:$port (taken? set WHEELS_PORT)"
  WHEEL_ARGS=(--build-arg "TORCH_FIND_LINKS=http://127.0.0.1:$port/" --build-arg TORCH_INDEX_URL=)
  say "wheels: $dir, served on 127.0.0.1:$port during the build"
}

image_size() { "${E[@]}" image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'; }

build() {
  pick_engine
  pick_base
  serve_wheels
  local args=(--network host --build-arg "BASE=$BASE")
  # The host's CA bundle, for pip behind a TLS-intercepting proxy; a build secret, so no layer keeps it.
  [ -s "$HOST_CA" ] && args+=(--secret "id=host_ca,src=$HOST_CA")
  timed "built $BUILD_IMAGE" "${E[@]}" build "${args[@]}" "${WHEEL_ARGS[@]}" \
    -f docker/Dockerfile -t "$BUILD_IMAGE" .
  timed "built $RUNTIME_IMAGE" "${E[@]}" build "${args[@]}" --build-arg "BUILD_IMAGE=$BUILD_IMAGE" \
    -f docker/Dockerfile.runtime -t "$RUNTIME_IMAGE" .
  say "sizes: $BUILD_IMAGE $(image_size "$BUILD_IMAGE"), $RUNTIME_IMAGE $(image_size "$RUNTIME_IMAGE")"
}

# --- tests ------------------------------------------------------------------------------------
# expect CODE REGEX ENTRYPOINT ARGS...: runs the runtime image as its own (non-root) user, with no
# network and the test packages read-only in /pkg; fails unless it exits with CODE and its
# output matches REGEX.
expect() {
  local code=$1 regex=$2 entrypoint=$3 out rc=0
  shift 3
  say "runtime: $entrypoint $*"
  out=$("${E[@]}" run --rm --network none -v "$PWD/$WORK/pkg:/pkg:ro" --entrypoint "$entrypoint" \
    "$RUNTIME_IMAGE" "$@" 2>&1) || rc=$?
  sed 's/^/    /' <<<"$out" | tail -n 12
  [ "$rc" = "$code" ] || die "exit code $rc, expected $code"
  grep -Ezq -- "$regex" <<<"$out" || die "the output does not match '$regex'"
}

test_runtime() {
  pick_engine
  local pkg=$WORK/pkg sha
  rm -rf "$pkg" && mkdir -p "$pkg"
  say "build image: tutorial.pt2 (tdaot build) and tampered.pt2 (one byte of its library flipped)"
  timed "built the test packages" "${E[@]}" run --rm --network none -v "$PWD/$pkg:/out" "$BUILD_IMAGE" sh -c \
    '.venv/bin/tdaot build examples/policies.py:tutorial_policy -o /out/tutorial.pt2 &&
     .venv/bin/python docker/tamper.py /out/tutorial.pt2 /out/tampered.pt2'
  chmod -R a+rX "$pkg"
  sha=$(sha256sum "$pkg/tutorial.pt2" | cut -d' ' -f1)

  expect 0 'uid=10001\(tdaot\)' id
  expect 0 'no compiler, no Python' sh -c \
    'for t in cc gcc c++ g++ ld python3 python pip pip3; do if command -v $t; then exit 1; fi; done; echo no compiler, no Python'
  expect 0 'libtorch_cpu.so => /opt/tdaot/lib/' sh -c \
    'ldd /opt/tdaot/bin/tdaot-run /opt/tdaot/bin/robot_service > /tmp/ldd; ! grep "not found" /tmp/ldd && grep libtorch_cpu /tmp/ldd'
  expect 0 "$sha" tdaot-run verify /pkg/tutorial.pt2 --sha256 "$sha"
  expect 0 'loc' tdaot-run run /pkg/tutorial.pt2 --batch 2 --random --sha256 "$sha"
  expect 0 'bound run on model b1 \(allocation-free\).*missed deadlines [0-9]+ of 500' \
    robot_service /pkg/tutorial.pt2 --steps 500 --sha256 "$sha"
  local tampered="has sha256 [0-9a-f]+, but the manifest records"
  expect 1 "$tampered" tdaot-run verify /pkg/tampered.pt2
  expect 1 "$tampered" tdaot-run run /pkg/tampered.pt2
  expect 1 "but the pinned expected_sha256 is $sha" tdaot-run verify /pkg/tampered.pt2 --sha256 "$sha"
  expect 1 "$tampered" robot_service /pkg/tampered.pt2 --steps 10
  say "runtime image: all checks passed"
}

test_build() {
  pick_engine
  timed "make test in $BUILD_IMAGE" "${E[@]}" run --rm --network none "$BUILD_IMAGE" make test
}

case "${1:-}" in
  build) build ;;
  test-runtime) test_runtime ;;
  test-build) test_build ;;
  test) test_runtime && test_build ;;
  *) echo "usage: $0 build|test|test-runtime|test-build" >&2; exit 2 ;;
esac
