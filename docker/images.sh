#!/usr/bin/env bash
# The container images (docker/README.md), for `make images` and `make test-images`:
#   docker/images.sh build          the build image (docker/Dockerfile), the full runtime's image
#                                   (docker/Dockerfile.runtime-full) from it, then build-lite
#   docker/images.sh build-lite     the runtime image (docker/Dockerfile.runtime): the lite runtime,
#                                   no libtorch; its files staged from the build image
#   docker/images.sh test           test-lite, test-runtime-full (one set of test packages), test-build
#   docker/images.sh test-lite      packages built in the build image, run in the lite runtime image;
#                                   no libtorch or c10 file anywhere in it
#   docker/images.sh test-runtime-full   the same packages in the full runtime's image
#   docker/images.sh test-build     `make test` inside the build image
# The engine is docker where `docker info` succeeds, else podman (installed here, with runc, when
# missing). The base is the public Debian 12 image where it can be pulled, else a local one made
# with mmdebstrap. Environment: ENGINE=docker|podman, BASE=IMAGE, BUILD_IMAGE, RUNTIME_IMAGE (the
# lite one), FULL_RUNTIME_IMAGE, WHEELS=DIR (default: $PIP_FIND_LINKS when it names a directory),
# WHEELS_PORT, HOST_CA=FILE. FROM_HOST=1 (build-lite, test-lite): the lite files and the test
# packages from this machine's build (build/cpp, .venv) instead of the build image, for a Debian
# 12 host where the build image is not built.
set -euo pipefail
cd "$(dirname "$0")/.."

PUBLIC_BASE=docker.io/library/debian:bookworm-slim
LOCAL_BASE=localhost/debian:bookworm
BUILD_IMAGE=${BUILD_IMAGE:-localhost/tdaot-build}
RUNTIME_IMAGE=${RUNTIME_IMAGE:-localhost/tdaot-runtime}
FULL_RUNTIME_IMAGE=${FULL_RUNTIME_IMAGE:-localhost/tdaot-runtime-full}
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
  timed "built $FULL_RUNTIME_IMAGE" "${E[@]}" build "${args[@]}" --build-arg "BUILD_IMAGE=$BUILD_IMAGE" \
    -f docker/Dockerfile.runtime-full -t "$FULL_RUNTIME_IMAGE" .
  build_lite
  say "sizes: $BUILD_IMAGE $(image_size "$BUILD_IMAGE"), $FULL_RUNTIME_IMAGE" \
    "$(image_size "$FULL_RUNTIME_IMAGE"), $RUNTIME_IMAGE $(image_size "$RUNTIME_IMAGE")"
}

# The lite runtime's files, in the layout Dockerfile.runtime copies: opt/tdaot/bin/{tdaot-lite,
# robot_service} and opt/tdaot/lib/libtdaot_lite.so. From the build image: its C++ build
# installed, robot_service built against the installed tree as a downstream project would. With
# FROM_HOST=1: this machine's build/cpp and robot_service compiled against it (the base is
# Debian 12, so the host must be too: the same glibc and libsleef3, and libminizip1 and
# libsodium23 where the host lacked their static archives; Dockerfile.runtime installs what ldd
# finds missing).
stage_lite() {
  local out=$WORK/lite
  rm -rf "$out" && mkdir -p "$out/opt/tdaot/bin" "$out/opt/tdaot/lib"
  if [ "${FROM_HOST:-}" = 1 ]; then
    grep -qs '^VERSION_ID="12"' /etc/os-release || die "FROM_HOST=1 needs a Debian 12 host (the image's base)"
    local lib=build/cpp/libtdaot_lite.so tool=build/cpp/tdaot-lite
    [ -f "$lib" ] && [ -x "$tool" ] || die "FROM_HOST=1: $tool and $lib are not built (make cpp)"
    cp "$tool" "$out/opt/tdaot/bin/" && cp "$lib" "$out/opt/tdaot/lib/"
    ${CXX:-c++} -std=c++17 -O2 -DNDEBUG -Icpp/include cpp/examples/robot_service/main.cpp \
      -L"$out/opt/tdaot/lib" -ltdaot_lite -o "$out/opt/tdaot/bin/robot_service"
    say "lite files: from this machine ($tool, $lib; robot_service compiled against them)"
  else
    # The network as Dockerfile.runtime-full's `make install` has it (host): nothing should be
    # fetched, but a stale stamp must not fail the staging where the image build would not.
    "${E[@]}" run --rm --network host -v "$PWD/$out:/out" "$BUILD_IMAGE" sh -ec '
      make install PREFIX=/opt/tdaot >/dev/null
      .venv/bin/cmake -S cpp/examples/robot_service -B build/robot_service -G Ninja \
        -DCMAKE_MAKE_PROGRAM=$PWD/.venv/bin/ninja -DCMAKE_PREFIX_PATH=/opt/tdaot -DCMAKE_BUILD_TYPE=Release >/dev/null
      .venv/bin/cmake --build build/robot_service >/dev/null
      cp /opt/tdaot/bin/tdaot-lite build/robot_service/robot_service /out/opt/tdaot/bin/
      cp -a /opt/tdaot/lib/libtdaot_lite.so* /out/opt/tdaot/lib/'
    say "lite files: from $BUILD_IMAGE (make install, robot_service against the installed tree)"
  fi
}

build_lite() {
  [ -n "${E:-}" ] || pick_engine
  [ -n "${BASE:-}" ] || pick_base
  stage_lite
  timed "built $RUNTIME_IMAGE" "${E[@]}" build --network host --build-arg "BASE=$BASE" \
    -f docker/Dockerfile.runtime -t "$RUNTIME_IMAGE" "$WORK/lite"
  say "size: $RUNTIME_IMAGE $(image_size "$RUNTIME_IMAGE")"
}

# --- tests ------------------------------------------------------------------------------------
# expect IMAGE CODE REGEX ENTRYPOINT ARGS...: runs IMAGE as its own (non-root) user, with no
# network and the test packages read-only in /pkg; fails unless it exits with CODE and its
# output matches REGEX.
expect() {
  local image=$1 code=$2 regex=$3 entrypoint=$4 out rc=0
  shift 4
  say "$image: $entrypoint $*"
  out=$("${E[@]}" run --rm --network none -v "$PWD/$WORK/pkg:/pkg:ro" --entrypoint "$entrypoint" \
    "$image" "$@" 2>&1) || rc=$?
  sed 's/^/    /' <<<"$out" | tail -n 12
  [ "$rc" = "$code" ] || die "exit code $rc, expected $code"
  grep -Ezq -- "$regex" <<<"$out" || die "the output does not match '$regex'"
}

# tutorial.pt2 (tdaot build, the default tuning: a batch-1 model the lite runtime serves) and
# tampered.pt2 (one byte of each compiled library flipped), built in the build image (FROM_HOST=1: here).
test_packages() {
  local pkg=$WORK/pkg
  rm -rf "$pkg" && mkdir -p "$pkg"
  if [ "${FROM_HOST:-}" = 1 ]; then
    say "this machine: tutorial.pt2 (tdaot build) and tampered.pt2 (one byte of each compiled library flipped)"
    timed "built the test packages" sh -c ".venv/bin/tdaot build examples/policies.py:tutorial_policy -o $pkg/tutorial.pt2 &&
      .venv/bin/python docker/tamper.py $pkg/tutorial.pt2 $pkg/tampered.pt2"
  else
    say "build image: tutorial.pt2 (tdaot build) and tampered.pt2 (one byte of each compiled library flipped)"
    timed "built the test packages" "${E[@]}" run --rm --network none -v "$PWD/$pkg:/out" "$BUILD_IMAGE" sh -c \
      '.venv/bin/tdaot build examples/policies.py:tutorial_policy -o /out/tutorial.pt2 &&
       .venv/bin/python docker/tamper.py /out/tutorial.pt2 /out/tampered.pt2'
  fi
  chmod -R a+rX "$pkg"
  SHA=$(sha256sum "$pkg/tutorial.pt2" | cut -d' ' -f1)
}

# What both runtime images must be: a non-root user, no compiler or Python.
test_common() {
  local image=$1
  expect "$image" 0 'uid=10001\(tdaot\)' id
  expect "$image" 0 'no compiler, no Python' sh -c \
    'for t in cc gcc c++ g++ ld python3 python pip pip3; do if command -v $t; then exit 1; fi; done; echo no compiler, no Python'
}

TAMPERED="has sha256 [0-9a-f]+, but the manifest records"

test_lite() {
  local image=$RUNTIME_IMAGE
  test_common "$image"
  # No libtorch or c10 anywhere in the image (searched as root, every directory), and none in
  # what its programs load.
  "${E[@]}" run --rm --network none --user 0 --entrypoint sh "$image" -c \
    'find / -xdev \( -name "libtorch*" -o -name "libc10*" \) -print' >"$WORK/lite-torch-files" ||
    die "could not search $image for libtorch"
  [ ! -s "$WORK/lite-torch-files" ] || die "libtorch or c10 in $image: $(tr '\n' ' ' <"$WORK/lite-torch-files")"
  say "$image: no libtorch or libc10 file in the image"
  expect "$image" 0 'libtdaot_lite.so => /opt/tdaot/lib/.*no libtorch' sh -c \
    'ldd /opt/tdaot/bin/tdaot-lite /opt/tdaot/bin/robot_service > /tmp/ldd; cat /tmp/ldd;
     ! grep -E "not found|libtorch|libc10" /tmp/ldd && echo no libtorch'
  expect "$image" 0 'b1 +batch 1 +latency +lite' tdaot-lite inspect /pkg/tutorial.pt2
  expect "$image" 0 "$SHA" tdaot-lite verify /pkg/tutorial.pt2 --sha256 "$SHA"
  expect "$image" 0 '"loc":\[\[' tdaot-lite run /pkg/tutorial.pt2 --batch 1
  expect "$image" 0 'lite bound run on model b1, batch 1: p50' tdaot-lite bench /pkg/tutorial.pt2 --batch 1 --iters 1000
  expect "$image" 0 'lite bound run on model b1 \(allocation-free\).*missed deadlines [0-9]+ of 500' \
    robot_service /pkg/tutorial.pt2 --steps 500 --sha256 "$SHA"
  expect "$image" 1 "$TAMPERED" tdaot-lite verify /pkg/tampered.pt2
  expect "$image" 1 "$TAMPERED" tdaot-lite run /pkg/tampered.pt2 --batch 1
  expect "$image" 1 "but the pinned expected_sha256 is $SHA" tdaot-lite verify /pkg/tampered.pt2 --sha256 "$SHA"
  expect "$image" 1 "$TAMPERED" robot_service /pkg/tampered.pt2 --steps 10
  say "$image (lite runtime): all checks passed"
}

test_runtime_full() {
  local image=$FULL_RUNTIME_IMAGE
  test_common "$image"
  expect "$image" 0 'libtorch_cpu.so => /opt/tdaot/lib/' sh -c \
    'ldd /opt/tdaot/bin/tdaot-run /opt/tdaot/bin/robot_service > /tmp/ldd; ! grep "not found" /tmp/ldd && grep libtorch_cpu /tmp/ldd'
  expect "$image" 0 "$SHA" tdaot-run verify /pkg/tutorial.pt2 --sha256 "$SHA"
  expect "$image" 0 'loc' tdaot-run run /pkg/tutorial.pt2 --batch 2 --random --sha256 "$SHA"
  expect "$image" 0 'bound run on model b1 \(allocation-free\).*missed deadlines [0-9]+ of 500' \
    robot_service /pkg/tutorial.pt2 --steps 500 --sha256 "$SHA"
  expect "$image" 1 "$TAMPERED" tdaot-run verify /pkg/tampered.pt2
  expect "$image" 1 "$TAMPERED" tdaot-run run /pkg/tampered.pt2
  expect "$image" 1 "but the pinned expected_sha256 is $SHA" tdaot-run verify /pkg/tampered.pt2 --sha256 "$SHA"
  expect "$image" 1 "$TAMPERED" robot_service /pkg/tampered.pt2 --steps 10
  say "$image (full runtime): all checks passed"
}

test_build() {
  pick_engine
  timed "make test in $BUILD_IMAGE" "${E[@]}" run --rm --network none "$BUILD_IMAGE" make test
}

case "${1:-}" in
  build) build ;;
  build-lite) build_lite ;;
  test-lite) pick_engine && test_packages && test_lite ;;
  test-runtime-full) pick_engine && test_packages && test_runtime_full ;;
  test-build) test_build ;;
  test) pick_engine && test_packages && test_lite && test_runtime_full && test_build ;;
  *) echo "usage: $0 build|build-lite|test|test-lite|test-runtime-full|test-build" >&2; exit 2 ;;
esac
