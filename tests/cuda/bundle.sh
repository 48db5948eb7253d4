#!/usr/bin/env bash
# `make gpu-bundle`: what a GPU machine of this workplace lacks to build and test tdaot, gathered
# here into DIR (default .gpu/, ignored by git) for tests/cuda/run.sh to use there, where nothing
# can be downloaded. Those machines (README "What has run on a GPU") carry Python 3.12 with
# torch 2.11 + CUDA 13, CMake, ninja, pybind11, scikit-build-core, pytest, numpy and safetensors.
#   DIR/wheels: cp312 wheels of tdaot's other Python dependencies (--no-deps: each is named
#               below, with the dependencies the machine lacks). tensordict and torchrl accept
#               any torch >= 2.1 in their metadata; torchrl's own C++ extension (prioritized
#               replay buffers, unused by tdaot) is built for torch 2.13 and is skipped with a
#               warning under 2.11.
#   DIR/debs:   the Debian 12 packages of Makefile's APT_DEPS and the shared libraries they link,
#               for `dpkg -x` into a prefix there (never into /).
set -euo pipefail
DIR=${1:-.gpu}
PY=${PY:-python3}
WHEELS=(tensordict==0.14.3 torchrl==0.14.1 hoptorch==0.1.4 pyvers==0.2.3 orjson==3.13.0
        importlib_metadata==10.2.0 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12)
DEBS=(libgtest-dev nlohmann-json3-dev libcli11-dev libzip-dev libzip4 zipcmp zipmerge ziptool
      libminizip-dev libminizip1 libsodium-dev libsodium23 zlib1g-dev libbz2-1.0)
PLATFORMS=()
for tag in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${tag}_x86_64")
done

rm -rf "$DIR/wheels" "$DIR/debs"
mkdir -p "$DIR/wheels" "$DIR/debs"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d "$DIR/wheels" "${WHEELS[@]}"
if ! apt-cache show "${DEBS[0]}" >/dev/null 2>&1; then
  SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
  $SUDO apt-get update -q
fi
(cd "$DIR/debs" && apt-get download -q "${DEBS[@]}")
ls "$DIR/wheels" "$DIR/debs"
du -sh "$DIR"
