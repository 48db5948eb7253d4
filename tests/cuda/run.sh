#!/usr/bin/env bash
# `make test-cuda STEP=...` on a GPU machine of this workplace (bare, no network, torch 2.11 +
# CUDA 13 in its python3): sets up what .gpu/ (`make gpu-bundle`) brings, builds tdaot against
# the machine's torch, and runs one step. Each step rebuilds: the machine is bare at each call.
#   STEP=test   the CUDA tests: tests/python/test_cuda.py (example and torchrl policies built for
#               device="cuda", assert_parity on the GPU, bound runs with and without a CUDA
#               graph) and the cuda-device case of test_bad_inputs.py; then the C++ Cuda* tests
#               (tests/cpp/test_cuda.cpp) on packages built here for cuda.
#   STEP=bench  benchmarks/gpu.py: batch 1, 64, 4096 on the GPU (benchmarks/results/).
#   STEP=build  the build alone (BUILD_TARGETS, default _C tdaot_tests tdaot-run).
#   STEP=suite  the whole CPU test suite (pytest and ctest) under this machine's torch: the check
#               that tdaot builds and passes with torch 2.11.
# Logs and results go to $OUT (the device tool brings back at most 8 files) or build/cuda-out.
set -uo pipefail
STEP=${STEP:-${1:-test}}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=${TDAOT_GPU_BUNDLE:-$ROOT/.gpu}
LOGS=${OUT:-$ROOT/build/cuda-out}
WORK=${TDAOT_GPU_WORK:-/tmp/tdaot-gpu}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
BUILD=$WORK/build
mkdir -p "$LOGS" "$WORK"
cd "$ROOT"
SUMMARY=$LOGS/summary.txt
note() { echo "$*" | tee -a "$SUMMARY"; }

context() {
  note "== $(date -u +%FT%TZ) STEP=$STEP on $(hostname)"
  { cat /etc/os-release 2>/dev/null | grep PRETTY; uname -r; nproc; "$PY" --version;
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1;
    command -v nvcc && nvcc --version | tail -1; cmake --version | head -1; g++ --version | head -1;
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
               torch.cuda.is_available() and torch.cuda.get_device_name(0))'; } 2>&1 | tee -a "$SUMMARY"
}

# The wheels into a --target directory (never into the machine's environment); tdaot itself from
# a copy of python/tdaot into which the freshly built tdaot._C goes (see build()).
setup_python() {
  if [ -z "${TDAOT_GPU_SKIP_WHEELS:-}" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$WORK/site" "$BUNDLE"/wheels/*.whl || return 1
  fi
  rm -rf "$WORK/py" && mkdir -p "$WORK/py" && cp -r python/tdaot "$WORK/py/"
  export PYTHONPATH=$WORK/py:$WORK/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
}

# The Debian packages unpacked into a prefix that CMake is pointed at; a runtime library the
# machine lacks is reached through LD_LIBRARY_PATH (a directory holding only those).
setup_debs() {
  PREFIX=$WORK/deps
  LIB=$PREFIX/usr/lib/x86_64-linux-gnu
  for deb in "$BUNDLE"/debs/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$deb" "$PREFIX" || return 1
    else
      (rm -rf "$WORK/ar" && mkdir -p "$WORK/ar" && cd "$WORK/ar" && ar x "$deb" &&
       tar -xf data.tar.* -C "$PREFIX") || return 1
    fi
  done
  rm -rf "$WORK/missing" && mkdir -p "$WORK/missing"
  local cache name
  cache=$(ldconfig -p)
  for lib in "$LIB"/lib*.so.[0-9]*; do
    name=$(basename "$lib")
    [ "$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')" = "$name" ] || continue
    grep -q "^[[:space:]]*$name " <<< "$cache" || ln -sf "$lib" "$WORK/missing/$name"
  done
  note "libraries taken from the bundle: $(ls "$WORK/missing" | tr '\n' ' ')"
  export LD_LIBRARY_PATH=$WORK/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# The CMake arguments of every build here: the prefix's libraries, CUDA's toolkit from nvcc.
cmake_args() {
  local nvcc root
  CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$PY")"
    -DCMAKE_PREFIX_PATH="$PREFIX/usr"
    -DOPENSSL_INCLUDE_DIR="$PREFIX/usr/include" -DOPENSSL_CRYPTO_LIBRARY="$LIB/libcrypto.so"
    -DCMAKE_CXX_FLAGS="-isystem $PREFIX/usr/include/x86_64-linux-gnu"
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$LIB" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$LIB")
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
  if [ -n "$nvcc" ]; then
    root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    CMAKE_ARGS+=(-DCUDAToolkit_ROOT="$root" -DCUDA_TOOLKIT_ROOT_DIR="$root"
                 -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=native)
  fi
}

# configure SOURCE BUILD ARGS...: fails when torch's CMake config found no CUDA (it turns CUDA
# off quietly, and every CUDA test would skip); TDAOT_ALLOW_NO_CUDA=1 goes on without.
configure() {
  local source=$1 build=$2; shift 2
  cmake -S "$source" -B "$build" "${CMAKE_ARGS[@]}" "$@" | tee "$build.configure.log" || return 1
  if [ -z "${TDAOT_ALLOW_NO_CUDA:-}" ] && ! grep -q "tdaot: CUDA code paths on" "$build.configure.log"; then
    echo "FAILED: the build has no CUDA (see above); TDAOT_ALLOW_NO_CUDA=1 to go on without"
    return 1
  fi
}

# The runtime and the targets asked for (tdaot._C, tdaot-run, the C++ tests), against the
# machine's torch.
build() {
  configure . "$BUILD" -DTDAOT_WERROR=ON -DTDAOT_BUILD_PYTHON=ON \
    -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" || return 1
  grep -E "^(libzip_DIR|pkgcfg_lib_minizip_minizip|pkgcfg_lib_sodium_sodium|GTest_DIR|nlohmann_json_DIR|CLI11_DIR|pybind11_DIR)" \
    "$BUILD/CMakeCache.txt" | tee -a "$SUMMARY"
  cmake --build "$BUILD" -j "$JOBS" --target "$@" || return 1
  if ls "$BUILD"/_C*.so >/dev/null 2>&1; then cp "$BUILD"/_C*.so "$WORK/py/tdaot/"; fi
}

setup_and_build() {
  context
  setup_python || { note "FAILED: installing the wheels"; return 1; }
  setup_debs || { note "FAILED: unpacking the Debian packages"; return 1; }
  cmake_args
  local start=$SECONDS
  build "$@" > "$LOGS/build.log" 2>&1 || { tail -40 "$LOGS/build.log"; note "FAILED: build (build.log)"; return 1; }
  note "built in $((SECONDS - start)) s"
}

pytest_run() {  # pytest_run LOG ARGS...: xdist where the machine has it (PYTEST_WORKERS=0: none)
  local log=$1; shift
  local parallel=()
  if [ "${PYTEST_WORKERS:-12}" != 0 ] && "$PY" -c 'import xdist' 2>/dev/null; then
    parallel=(-n "${PYTEST_WORKERS:-12}")
  fi
  # Each worker compiles with a few threads, not one per core each.
  PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2} \
    timeout "${PYTEST_TIMEOUT:-420}" "$PY" -m pytest -p no:cacheprovider "${parallel[@]}" "$@" \
    > "$LOGS/$log" 2>&1
  local rc=$?
  tail -25 "$LOGS/$log"
  note "pytest $*: exit $rc ($(grep -E '^=+ .*(passed|failed|error)' "$LOGS/$log" | tail -1))"
  return "$rc"
}

# The packages the C++ CUDA tests load: tutorial and recurrent built for cuda, and the CPU
# tutorial (a CUDA tensor given to a CPU package).
cpp_packages() {
  local dir=$WORK/packages policies=examples/policies.py
  mkdir -p "$dir/cuda"
  "$PY" -m tdaot build $policies:tutorial_policy -o "$dir/tutorial.pt2" --batch 1:64 --tuning throughput &&
  "$PY" -m tdaot build $policies:tutorial_policy -o "$dir/cuda/tutorial.pt2" --batch 1:64 --device cuda &&
  "$PY" -m tdaot build $policies:recurrent_policy -o "$dir/cuda/recurrent.pt2" --batch 1:64 --device cuda
}

cpp_tests() {
  TDAOT_TEST_PACKAGES=$WORK/packages TDAOT_TEST_CUDA_PACKAGES=$WORK/packages/cuda \
    timeout 180 "$BUILD/tests/cpp/tdaot_tests" --gtest_filter='Cuda*' > "$LOGS/ctest.log" 2>&1
  local rc=$?
  tail -30 "$LOGS/ctest.log"
  note "C++ Cuda* tests: exit $rc ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOGS/ctest.log" | tr '\n' ' '))"
  return "$rc"
}

# The C++ side (packages, then the Cuda* tests) and the cuda-device cases of test_bad_inputs.py
# (CPU fixture packages: one process, so each compiles once) run beside the xdist run of
# test_cuda.py (each test compiles its own package).
step_test() {
  setup_and_build _C tdaot_tests || return 1
  local rc=0
  ( cpp_packages > "$LOGS/cpp_packages.log" 2>&1 || { note "FAILED: building the C++ test packages"; exit 1; }
    cpp_tests || exit 1
    PYTEST_WORKERS=0 pytest_run pytest_bad_inputs.log tests/python/test_bad_inputs.py -k cuda -q ) &
  local side=$!
  pytest_run pytest.log tests/python/test_cuda.py -rs || rc=1
  wait "$side" || rc=1
  return "$rc"
}

step_bench() {
  setup_and_build _C || return 1
  configure benchmarks/cpp "$WORK/bench" \
    -DTorch_DIR="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch" \
    >> "$LOGS/build.log" 2>&1 &&
  cmake --build "$WORK/bench" -j "$JOBS" --target tdaot-bench-server >> "$LOGS/build.log" 2>&1 ||
    { tail -30 "$LOGS/build.log"; note "FAILED: bench server build"; return 1; }
  PYTHONUNBUFFERED=1 "$PY" benchmarks/gpu.py --server "$WORK/bench/tdaot-bench-server" \
    --out "$LOGS" ${BENCH_ARGS:-} 2>&1 | tee "$LOGS/bench.log" | tail -40
  local rc=${PIPESTATUS[0]}
  note "bench: exit $rc"
  return "$rc"
}

step_suite() {
  setup_and_build _C tdaot-run tdaot_tests tdaot_zero_alloc_tests tdaot_manifest_corpus_tests \
    tdaot_stats_tests tdaot_test_ops || return 1
  local rc=0 side
  # ctest (its fixture compiles its packages first) beside pytest.
  (cd "$BUILD" && timeout "${CTEST_TIMEOUT:-360}" ctest -j 4 --output-on-failure \
    -E '^(install_package|installed_tdaot_run|robot_service\..*)$') > "$LOGS/ctest.log" 2>&1 &
  side=$!
  TDAOT_TEST_OPS_LIB=$(ls "$BUILD"/tests/ops/libtdaot_test_ops.so) PYTEST_WORKERS=${PYTEST_WORKERS:-10} \
    PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-360} pytest_run pytest.log -q -m "not slow" || rc=1
  wait "$side" || rc=1
  note "ctest: $(grep -E 'tests passed|tests failed' "$LOGS/ctest.log" | tail -1)"
  return "$rc"
}

case "$STEP" in
  build) setup_and_build ${BUILD_TARGETS:-_C tdaot_tests tdaot-run} ;;
  test) step_test ;;
  bench) step_bench ;;
  suite) step_suite ;;
  *) echo "STEP must be build, test, bench or suite, not '$STEP'" >&2; exit 2 ;;
esac
rc=$?
note "== STEP=$STEP exit $rc after $SECONDS s"
exit "$rc"
