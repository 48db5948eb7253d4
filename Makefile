# Entry points of the README. Each target sets up what it needs, so `make demo` and
# `make test` work on a fresh Debian machine; re-running them only redoes what changed.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CMAKE := $(VENV)/bin/cmake
CTEST := $(VENV)/bin/ctest
NINJA := $(VENV)/bin/ninja
BUILD := build/cpp
JOBS ?= $(shell nproc)

# torch==2.13.0 is the CPU wheel on this machine's disk; a looser pin would pull a CUDA build.
# mcap: the `log` extra (tdaot log export --mcap), which the suite reads back.
PY_DEPS := torch==2.13.0 rsl-rl-lib==5.5.1 tensordict==0.14.3 torchrl==0.14.1 "pybind11>=2.12,<4" "cryptography>=42" \
	"scikit-build-core>=0.10" ninja "cmake>=3.25" "pytest>=8" pytest-xdist==3.8.0 ruff safetensors==0.8.0 pyelftools==0.33 pyyaml==6.0.3 onnx==1.23.2 \
	mcap==1.6.0
# libminizip-dev: the runtimes read packages with it. libzip-dev: only the C++ tests, to edit
# package copies; zipcmp/zipmerge/ziptool: Debian 12's libzip CMake config refuses to load without them.
APT_DEPS := libgtest-dev nlohmann-json3-dev libcli11-dev libminizip-dev libzip-dev zipcmp zipmerge ziptool libsodium-dev \
	libsleef-dev ccache

# ccache: the wheel's build (build/<wheel tag>, `setup`), the C++ build (build/cpp, `cpp`) and the
# suite's plain wheel build (test_native_install, in a temporary folder) compile the core,
# runtime and lite sources with the same flags and the same absolute paths, so all but the first
# compile of each are cache hits (ccache keys on the source and the command line; the working
# folder is left out of the key). The cache lives outside the checkout (CCACHE_DIR when set, else
# ~/.cache/tdaot/ccache), so a rebuilt clone in the same place recompiles only what changed;
# `make clean` keeps it. No CCACHE_BASEDIR: relative paths would differ between build folders of
# different depths (the temporary one), and no object would be shared with it.
# The same cache serves AOTInductor's compiles in every tdaot build (the test packages, pytest's
# builds): tdaot routes them through ccache with settings of its own (tdaot/builder/compiler_cache.py).
export CCACHE_DIR ?= $(HOME)/.cache/tdaot/ccache
export CCACHE_NOHASHDIR := 1
# The C++ tests compile with a precompiled header (CMake's -include cmake_pch.hxx), which ccache
# caches only with these (its manual, "Precompiled headers"): without them every test source
# compiled again in each fresh clone (about 3 minutes of `make test`).
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CXX
LAUNCHER := ccache

CPP_SOURCES := CMakeLists.txt $(shell find cpp tests/cpp tests/ops -name '*.cpp' -o -name '*.h' -o -name CMakeLists.txt 2>/dev/null)

.PHONY: help setup demo rehearse test lite-aarch64 test-packages test-python test-cpp lint bench cpp install clean docs

help:
	@echo "make demo   build the example policy, check parity, run it natively"
	@echo "make rehearse  the Unitree H1 walking policy (../shared) built and walked in MuJoCo (tdaot-rehearse)"
	@echo "make test   run every Python and C++ test (after make docs)"
	@echo "make docs   the documentation site (mkdocs.yml, docs/) into build/docs, strict"
	@echo "make bench  tdaot against other runtimes, side by side (benchmarks/results/, ~25 min)"
	@echo "make soak   a million calls per package, RSS growth after warm-up under 1 MiB (~2 min)"
	@echo "make test-torch TORCH=2.14.1  every test against another torch, in .venv-torch-2.14.1"
	@echo "make test-asan  the C++ tests under AddressSanitizer + UBSan (build/asan, ~10 min)"
	@echo "make fuzz   libFuzzer over manifests, input validation, inputs files, weight files, signatures, packages (FUZZ_SECONDS=60 each)"
	@echo "make install PREFIX=DIR  install the C++ package (find_package(tdaot)) under DIR"
	@echo "make lite-aarch64  the lite runtime cross-built for 64-bit ARM (build/aarch64/prefix, dist/tdaot-lite-*-linux-aarch64.tar.gz)"
	@echo "make images       the build image and the runtime images, lite and full (podman or docker, docker/images.sh)"
	@echo "make test-images  a package the build image builds run in both runtime images (no libtorch in the lite one); make test in the build image"
	@echo "make gpu-bundle   the wheels and Debian packages a GPU machine lacks, into .gpu/ (tests/cuda)"
	@echo "make test-cuda STEP=test|bench|suite  on a GPU machine: build there, CUDA tests / benchmark / all tests"
	@echo "make clean  remove build outputs (keeps the venv)"

# --- set-up -------------------------------------------------------------------------
build/.apt-stamp: Makefile
	@mkdir -p build
	@if ! dpkg -s $(APT_DEPS) >/dev/null 2>&1; then \
		echo "installing Debian packages: $(APT_DEPS)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(APT_DEPS); \
	fi
	@touch $@

$(VENV)/.deps-stamp: Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check $(PY_DEPS)
	@touch $@

# The package (with tdaot._C) installed editable: Python edits are live, C++ edits
# rebuild incrementally in build/<wheel tag>.
# TDAOT_WERROR: warnings in tdaot's own C++ (here the module tdaot._C) fail the build, as in
# the C++ build below; a plain `pip install .` leaves them warnings.
$(VENV)/.tdaot-stamp: $(VENV)/.deps-stamp build/.apt-stamp pyproject.toml $(CPP_SOURCES)
	$(PIP) install -q --no-build-isolation --no-deps -e . --config-settings=cmake.define.TDAOT_WERROR=ON \
		--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=$(LAUNCHER) \
		--config-settings=build-dir=build/{wheel_tag}
	@touch $@

setup: $(VENV)/.tdaot-stamp

# MuJoCo 4's C library and headers, from the mujoco-core wheel (its Python bindings too): CMake
# finds them in the venv and builds tdaot-rehearse (and its tests) only where they are.
# `tdaot rehearse --video` renders offscreen with MuJoCo's Python renderer on Mesa (EGL, else
# OSMesa: the Debian packages below) through PyOpenGL, and encodes MP4 with imageio-ffmpeg's
# ffmpeg binary; `--plots` draws with matplotlib.
REHEARSE_PY_DEPS := mujoco-core==4.0.0 PyOpenGL==3.1.10 imageio-ffmpeg==0.8.1 matplotlib==3.11.2
REHEARSE_APT_DEPS := libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6

build/.rehearse-apt-stamp: Makefile
	@mkdir -p build
	@if ! dpkg -s $(REHEARSE_APT_DEPS) >/dev/null 2>&1; then \
		echo "installing Debian packages: $(REHEARSE_APT_DEPS)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(REHEARSE_APT_DEPS); \
	fi
	@touch $@

$(VENV)/.rehearse-deps-stamp: $(VENV)/.deps-stamp build/.rehearse-apt-stamp
	$(PIP) install -q --disable-pip-version-check $(REHEARSE_PY_DEPS)
	@touch $@

# The trainers whose runs the suite reads through each library's own code (tests/python/test_skrl.py,
# test_rl_games.py, test_sb3.py, test_leapp.py): test dependencies only, tdaot imports none of them.
# torch is pinned on the same line so pip keeps the CPU wheel; rl-games goes in without its
# dependencies (it pins psutil<6, setproctitle and watchdog, which its training and play paths the
# suite runs never import; what they do import, tensorboardX and gymnasium, is on the first line).
TRAINER_PY_DEPS := torch==2.13.0 skrl==2.1.1 stable-baselines3==2.9.2 sb3-contrib==2.9.2 leapp==0.7.2 \
	gymnasium==1.4.0 tensorboard==2.21.0 tensorboardX==2.6.5
TRAINER_NO_DEPS := rl-games==1.6.5

$(VENV)/.trainer-deps-stamp: $(VENV)/.deps-stamp
	$(PIP) install -q --disable-pip-version-check $(TRAINER_PY_DEPS)
	$(PIP) install -q --disable-pip-version-check --no-deps $(TRAINER_NO_DEPS)
	@$(PY) -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '2.13.0' else f'torch {v} replaced 2.13.0')"
	@touch $@

# -DTDAOT_WERROR=ON: a warning in tdaot's own code fails `make test` (and CI).
$(BUILD)/build.ninja: $(VENV)/.deps-stamp $(VENV)/.rehearse-deps-stamp build/.apt-stamp
	$(CMAKE) -S . -B $(BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(NINJA)) \
		-DPython_EXECUTABLE=$(abspath $(PY)) -DCMAKE_BUILD_TYPE=Release -DTDAOT_WERROR=ON \
		-DCMAKE_CXX_COMPILER_LAUNCHER=$(LAUNCHER)

cpp: $(BUILD)/build.ninja setup
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# --- README entry points ------------------------------------------------------------
# Only what the demo runs (tdaot-run; tdaot.testing's lite parity uses the wheel's tdaot-lite),
# not the C++ tests, which are about half of `make cpp`.
DEMO_TARGETS := tdaot-run

demo: $(BUILD)/build.ninja setup
	$(CMAKE) --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)
	$(PY) examples/demo.py --tdaot-run $(BUILD)/tdaot-run --output dist/tutorial.pt2
	@echo "demo: the tools are commands in $(VENV)/bin: source $(VENV)/bin/activate (or export PATH=$$PWD/$(VENV)/bin:$$PATH)"

# The Unitree H1 walking policy of ../shared/robots/unitree_h1 (not in this repository) as a
# torchrl module with a contract of observation terms and gains, built, then 60 s of simulated
# walking in MuJoCo through tdaot-rehearse and the lite runtime, and the eager twin's parity
# figures (tdaot rehearse --reference; examples/h1/README.md), rendered to dist/h1_walk.mp4 and
# drawn in dist/h1_plots/ (--video, --plots: docs/rehearsal.md).
H1_DIR ?= ../shared/robots/unitree_h1
REHEARSE_ARGS ?= --seconds 60 --command 0.5,0,0
rehearse: cpp
	@if [ ! -f $(H1_DIR)/motion.pt ]; then \
		echo "rehearse: skipped, $(H1_DIR) is absent (the H1 policy and robot are not part of this repository)"; \
	elif [ ! -x $(BUILD)/tdaot-rehearse ]; then \
		echo "rehearse: $(BUILD)/tdaot-rehearse was not built (no MuJoCo found: see the CMake output)"; exit 1; \
	else \
		$(PY) examples/h1/build_h1.py --h1 $(H1_DIR) --output dist/h1_walk.pt2 && \
		TDAOT_REHEARSE=$(BUILD)/tdaot-rehearse TDAOT_H1_DIR=$(H1_DIR) $(VENV)/bin/tdaot rehearse dist/h1_walk.pt2 \
			--mjcf $(H1_DIR)/scene.xml --trajectory dist/h1_walk.csv --reference $(REHEARSE_ARGS) \
			--video dist/h1_walk.mp4 --plots dist/h1_plots; \
	fi

# --- 64-bit ARM (docs/arm.md) ---------------------------------------------------------------
# The cross compiler, qemu-user (tests run the aarch64 tdaot-lite under it) and the arm64
# libraries the lite runtime links: SLEEF (shared: the models call it), libsodium, minizip and
# zlib (their static archives are linked in). Debian's multiarch: arm64 beside the host's.
AARCH64_APT_DEPS := g++-aarch64-linux-gnu qemu-user-static libsleef-dev:arm64 libsodium-dev:arm64 \
	libminizip-dev:arm64 zlib1g-dev:arm64
AARCH64_BUILD := build/aarch64/build
AARCH64_PREFIX := build/aarch64/prefix
TDAOT_VERSION = $(shell sed -n 's/^__version__ *= *"\(.*\)"/\1/p' python/tdaot/_version.py)
AARCH64_BUNDLE = dist/tdaot-lite-$(TDAOT_VERSION)-linux-aarch64.tar.gz
LITE_SOURCES := CMakeLists.txt cmake/aarch64-linux-gnu.cmake cpp/cmake/tdaotConfig.cmake.in \
	$(shell find cpp/include cpp/src/core cpp/src/lite cpp/tools/tdaot_lite -type f 2>/dev/null)

build/.aarch64-apt-stamp: Makefile
	@mkdir -p build
	@if ! dpkg -s $(AARCH64_APT_DEPS) >/dev/null 2>&1; then \
		echo "installing Debian packages: $(AARCH64_APT_DEPS)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO dpkg --add-architecture arm64 && $$SUDO apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(AARCH64_APT_DEPS); \
	fi
	@touch $@

$(AARCH64_BUILD)/build.ninja: $(VENV)/.deps-stamp build/.apt-stamp build/.aarch64-apt-stamp
	$(CMAKE) -S . -B $(AARCH64_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(NINJA)) \
		-DCMAKE_TOOLCHAIN_FILE=$(abspath cmake/aarch64-linux-gnu.cmake) -DTDAOT_LITE_ONLY=ON \
		-DCMAKE_BUILD_TYPE=Release -DTDAOT_WERROR=ON -DCMAKE_CXX_COMPILER_LAUNCHER=$(LAUNCHER) \
		-DCMAKE_INSTALL_PREFIX=$(abspath $(AARCH64_PREFIX))

# The prefix (bin/tdaot-lite, lib/libtdaot_lite.so, include/, lib/cmake/tdaot) and the bundle a
# robot is given: the prefix with the arm64 libraries it needs beyond glibc and libstdc++
# (SLEEF), every RUNPATH relative to its file (cmake/bundle_aarch64.py).
$(AARCH64_PREFIX)/.stamp: $(AARCH64_BUILD)/build.ninja $(LITE_SOURCES)
	$(CMAKE) --build $(AARCH64_BUILD) -j $(JOBS)
	rm -rf $(AARCH64_PREFIX) && $(CMAKE) --install $(AARCH64_BUILD)
	$(PY) cmake/bundle_aarch64.py $(AARCH64_PREFIX) $(AARCH64_BUNDLE)
	@touch $@

lite-aarch64: $(AARCH64_PREFIX)/.stamp

# Headers, libtdaot_runtime.a, tdaot-run and lib/cmake/tdaot for find_package(tdaot).
PREFIX ?= $(abspath build/install)
install: cpp
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

# test-cpp includes the installed-package consumer build (robot_service, see tests/cpp), which
# pytest's robot_service test runs: hence ctest first. The suites run one after the other, each
# keeping both cores busy; side by side (make -j2) they once raced in torch inductor's shared
# cache when both compiled the same graph (seen in a fresh-clone run, 2026-11-23).
test: docs lint test-cpp test-python

lint: $(VENV)/.deps-stamp
	$(VENV)/bin/ruff check python tests examples benchmarks

# The packages both suites load (tests/cpp/build_test_packages.py, also ctest's fixture), built
# once: the script does nothing while what they are made from is unchanged, and pytest's fixtures
# of the same policies copy its cache, so neither suite compiles them again. Each suite prints
# its count of AOTInductor compiles at the end (ctest: its fixture step's).
TEST_PACKAGES := $(BUILD)/tests/cpp/packages

test-packages: setup cpp
	TDAOT_TEST_OPS_LIB=$(abspath $(BUILD))/tests/ops/libtdaot_test_ops.so \
		$(PY) tests/cpp/build_test_packages.py $(TEST_PACKAGES)

# The custom-operator tests load tests/ops' library, which the C++ build makes.
# Two workers (pytest-xdist), a test file each at a time: an AOTInductor compile keeps one core
# busy, and a file's module fixtures are compiled once, in one worker (--dist loadfile).
# The files that ran longest in the last run go first (TDAOT_TEST_DURATIONS, tests/python/conftest.py),
# so neither worker is left with a long file at the end while the other idles.
PYTEST_WORKERS ?= $(JOBS)
TDAOT_TEST_DURATIONS ?= $(HOME)/.cache/tdaot/pytest-file-seconds.json
test-python: setup cpp test-packages $(VENV)/.trainer-deps-stamp lite-aarch64
	TDAOT_TEST_PACKAGES=$(abspath $(TEST_PACKAGES)) TDAOT_TEST_DURATIONS=$(TDAOT_TEST_DURATIONS) \
		$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile

test-cpp: cpp test-packages
	$(CTEST) --test-dir $(BUILD) --output-on-failure -j $(JOBS); status=$$?; \
		echo "ctest: $$(cat $(TEST_PACKAGES)/compiles.txt 2>/dev/null)"; exit $$status

# The documentation site (mkdocs.yml, docs/; README.md links into it) built into build/docs in
# strict mode: a broken link or anchor, or a page missing from the nav, fails it. The option
# table of docs/build-options.md is rendered from tdaot.BuildOptions by a MkDocs hook
# (docs/gen_build_options.py), hence `setup`. Then every docs/ link of README.md must resolve.
DOCS_PY_DEPS := mkdocs==1.6.1 mkdocs-material==9.7.6

$(VENV)/.docs-deps-stamp: $(VENV)/.deps-stamp
	$(PIP) install -q --disable-pip-version-check $(DOCS_PY_DEPS)
	@touch $@

docs: setup $(VENV)/.docs-deps-stamp
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean
	$(PY) docs/check_readme_links.py

# Benchmark-only Python packages (pinned; torch pinned again so pip never swaps it) and the
# C++ bench server, a separate CMake project against the venv's torch (benchmarks/cpp).
# OpenVINO and ExecuTorch (issue 42): the peers, pinned, torch re-pinned on the same line so neither
# moves it; their wheels' CMake configs build the peers' C++ servers.
BENCH_PY_DEPS := torch==2.13.0 onnxruntime==1.31.1 onnx==1.23.2 onnxscript==0.7.2 matplotlib==3.11.2 \
	openvino==2026.4.1 executorch==1.5.1
BENCH_BUILD := build/bench/cpp
BENCH_ARGS ?=

# A new stamp name when BENCH_PY_DEPS grows, so venvs set up before it install the new pins.
$(VENV)/.bench-deps-peers-stamp: $(VENV)/.deps-stamp
	$(PIP) install -q --disable-pip-version-check $(BENCH_PY_DEPS)
	@touch $@

bench: cpp $(VENV)/.bench-deps-peers-stamp
	$(CMAKE) -S benchmarks/cpp -B $(BENCH_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(NINJA)) \
		-DPython_EXECUTABLE=$(abspath $(PY)) -DCMAKE_BUILD_TYPE=Release \
		-DTorch_DIR=$$($(PY) -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch \
		-DOpenVINO_DIR=$$($(PY) -c 'import openvino; print(openvino.__path__[0] + "/cmake")') \
		-Dexecutorch_DIR=$$($(PY) -c 'import executorch; print(executorch.__path__[0] + "/share/cmake")')
	$(CMAKE) --build $(BENCH_BUILD) -j $(JOBS)
	$(PY) benchmarks/run.py --server $(BENCH_BUILD)/tdaot-bench-server --tdaot-run $(BUILD)/tdaot-run $(BENCH_ARGS)

# A million calls per example package at batch 1, native (tdaot-run soak) and through the
# bindings, RSS sampled throughout; fails when it grows by more than 1 MiB after the warm-up.
# Writes benchmarks/results/<date>-<host>-soak.{json,md}. SOAK_ARGS passes options through.
.PHONY: soak
SOAK_ARGS ?=
soak: cpp
	SOAK_COMMAND="make soak $(SOAK_ARGS)" $(PY) benchmarks/soak.py --tdaot-run $(BUILD)/tdaot-run $(SOAK_ARGS)

clean:
	rm -rf build dist

# --- another torch (README "Torch versions") ------------------------------------------------
# make test-torch TORCH=2.14.1: every test, Python and C++, against that torch: its own venv
# (.venv-torch-$(TORCH), the same pins but torch), tdaot._C built into it, its own C++ build
# and inductor cache (build/torch-$(TORCH)). `make test` and CI stay on the pinned 2.13.0.
# On these machines pip caps torch at 2.14.1 (/etc/xdg/pip); for a newer one run it with
# PIP_CONFIG_FILE=/dev/null (a CUDA build of several GB; it runs on the CPU).
.PHONY: test-torch
TORCH ?=
TORCH_VENV := .venv-torch-$(TORCH)
TORCH_PY := $(TORCH_VENV)/bin/python
TORCH_BUILD := build/torch-$(TORCH)
# pip's torch is a CUDA build: its CMake config needs the CUDA toolkit's headers and cudart
# (CUDA_HOME, else /usr/local/cuda), though the tests run on the CPU.
CUDA_HOME ?= $(wildcard /usr/local/cuda)
TORCH_CMAKE_ARGS := $(if $(CUDA_HOME),-DCUDA_TOOLKIT_ROOT_DIR=$(CUDA_HOME) -DCUDAToolkit_ROOT=$(CUDA_HOME))
# Every tool and library the tests would otherwise look for in build/cpp (the 2.13 build) is
# this torch's build.
TORCH_TEST_PACKAGES := $(abspath $(TORCH_BUILD))/cpp/tests/cpp/packages
TORCH_ENV := TORCHINDUCTOR_CACHE_DIR=$(abspath $(TORCH_BUILD))/inductor \
	TDAOT_LITE=$(abspath $(TORCH_BUILD))/cpp/tdaot-lite \
	TDAOT_REHEARSE=$(abspath $(TORCH_BUILD))/cpp/tdaot-rehearse \
	TDAOT_ROBOT_SERVICE=$(abspath $(TORCH_BUILD))/cpp/robot_service/robot_service \
	TDAOT_TEST_OPS_LIB=$(abspath $(TORCH_BUILD))/cpp/tests/ops/libtdaot_test_ops.so \
	TDAOT_TEST_PACKAGES=$(TORCH_TEST_PACKAGES) \
	CMAKE_ARGS="$(TORCH_CMAKE_ARGS)"

$(TORCH_VENV)/.deps-stamp: Makefile
	@test -n "$(TORCH)" || { echo "make test-torch TORCH=X.Y.Z (a torch release)"; exit 2; }
	test -x $(TORCH_PY) || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_PY) -m pip install -q --disable-pip-version-check torch==$(TORCH) \
		$(filter-out torch==%,$(PY_DEPS)) $(REHEARSE_PY_DEPS)
	$(TORCH_PY) -m pip install -q --disable-pip-version-check torch==$(TORCH) $(filter-out torch==%,$(TRAINER_PY_DEPS))
	$(TORCH_PY) -m pip install -q --disable-pip-version-check --no-deps $(TRAINER_NO_DEPS)
	@touch $@

$(TORCH_VENV)/.tdaot-stamp: $(TORCH_VENV)/.deps-stamp build/.apt-stamp pyproject.toml $(CPP_SOURCES)
	CMAKE_ARGS="$(TORCH_CMAKE_ARGS)" $(TORCH_PY) -m pip install -q --no-build-isolation --no-deps -e . \
		--config-settings=build-dir=$(TORCH_BUILD)/{wheel_tag} --config-settings=cmake.define.TDAOT_WERROR=ON
	@touch $@

# setup: the main venv (torch 2.13) is TDAOT_OTHER_PYTHON, the other torch of the cross-torch
# lite test. lite-aarch64: torch-free, so the one `make test` builds serves (docs/arm.md's example). The test packages are built once, as in `make test`; ctest runs before pytest so
# that its robot_service.build has built the service that test_rehearse runs.
test-torch: $(TORCH_VENV)/.tdaot-stamp setup lite-aarch64
	$(TORCH_VENV)/bin/cmake -S . -B $(TORCH_BUILD)/cpp -G Ninja \
		-DCMAKE_MAKE_PROGRAM=$(abspath $(TORCH_VENV))/bin/ninja -DPython_EXECUTABLE=$(abspath $(TORCH_PY)) \
		-DCMAKE_BUILD_TYPE=Release -DTDAOT_WERROR=ON $(TORCH_CMAKE_ARGS)
	$(TORCH_VENV)/bin/cmake --build $(TORCH_BUILD)/cpp -j $(JOBS)
	$(TORCH_ENV) $(TORCH_PY) tests/cpp/build_test_packages.py $(TORCH_TEST_PACKAGES)
	@# Both suites run whatever the first gives; the target fails if either did.
	$(TORCH_ENV) $(TORCH_VENV)/bin/ctest --test-dir $(TORCH_BUILD)/cpp --output-on-failure; cpp=$$?; \
	$(TORCH_ENV) TDAOT_OTHER_PYTHON=$(abspath $(PY)) $(TORCH_PY) -m pytest -p no:cacheprovider; py=$$?; \
	echo "test-torch: torch $(TORCH): ctest exit $$cpp, pytest exit $$py"; [ $$py = 0 ] && [ $$cpp = 0 ]

# --- sanitizers and fuzzing (tests/sanitizers, tests/fuzz) -------------------------------
# make test-asan: the runtime, tdaot-run and the C++ tests built with AddressSanitizer and
# UndefinedBehaviorSanitizer in build/asan (tdaot's own code; torch stays uninstrumented), then
# their ctest suite. The options and suppressions for torch's noise are in tests/sanitizers/.
.PHONY: test-asan fuzz
ASAN_BUILD := build/asan
SANITIZERS := $(abspath tests/sanitizers)
# intercept_tls_get_addr=0: the sanitizer runtime of GCC <= 13 / LLVM <= 16 can misread a
# dynamic TLS block (a dlopen'ed library's: the compiled models are) as one with a pre-2.25
# glibc header, and LeakSanitizer's tracer then segfaults at exit scanning a bogus range
# ("Tracer caught signal 11", seen in PolicyExecution.OutputCountDifferentFromManifest). Without
# the interceptor the leak check still scans every thread's stack and static TLS.
ASAN_OPTIONS_ := detect_leaks=1:intercept_tls_get_addr=0
SAN_ENV := ASAN_OPTIONS=$(ASAN_OPTIONS_) \
	LSAN_OPTIONS=suppressions=$(SANITIZERS)/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Left out of the ASan run: the allocation-count tests (Allocations.*, *DoesNotAllocate), which
# count calls of a replaced global operator new that stays out of an ASan build
# (tests/cpp/test_support.cpp); and the installed-package consumer build, which would link the
# instrumented static library into a project built without -fsanitize.
ASAN_EXCLUDE := ^(Allocations\..*|.*DoesNotAllocate|install_package|installed_tdaot_run|robot_service\..*)$$

$(ASAN_BUILD)/build.ninja: $(VENV)/.deps-stamp build/.apt-stamp
	$(CMAKE) -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(NINJA)) \
		-DPython_EXECUTABLE=$(abspath $(PY)) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DTDAOT_SANITIZE=address,undefined

# setup: the test packages fixture runs the Python stage (`python -m tdaot build`).
test-asan: $(ASAN_BUILD)/build.ninja setup
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	$(SAN_ENV) $(CTEST) --test-dir $(ASAN_BUILD) --output-on-failure -E '$(ASAN_EXCLUDE)'

# make fuzz: libFuzzer over manifest parsing and input validation (tests/fuzz/README.md), built
# with clang in build/fuzz and run for FUZZ_SECONDS. New inputs go to build/fuzz/corpus, crashes
# to build/fuzz/artifacts; a crash belongs in tests/fuzz/regressions/ once fixed.
FUZZ_BUILD := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_ARGS ?=
FUZZ_APT_DEPS := clang libclang-rt-14-dev

build/.fuzz-apt-stamp:
	@mkdir -p build
	@if ! dpkg -s $(FUZZ_APT_DEPS) >/dev/null 2>&1; then \
		echo "installing Debian packages: $(FUZZ_APT_DEPS)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(FUZZ_APT_DEPS); \
	fi
	@touch $@

$(FUZZ_BUILD)/build.ninja: $(VENV)/.deps-stamp build/.apt-stamp build/.fuzz-apt-stamp
	$(CMAKE) -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(NINJA)) \
		-DPython_EXECUTABLE=$(abspath $(PY)) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_CXX_COMPILER=clang++ -DTDAOT_BUILD_TESTS=OFF -DTDAOT_BUILD_TOOLS=OFF \
		-DTDAOT_FUZZ=ON -DTDAOT_SANITIZE=address,undefined

# Every target runs FUZZ_SECONDS, one after the other: manifest (with the validator) over
# corpus/, and inputs, weights, signature over seeds/<name>/, package over the seeds its CMake
# configure writes (tests/fuzz/make_package_seeds.py; tests/fuzz/README.md).
FUZZ_TARGETS := inputs weights signature package
fuzz: $(FUZZ_BUILD)/build.ninja
	$(CMAKE) --build $(FUZZ_BUILD) -j $(JOBS) --target tdaot_fuzz_manifest $(addprefix tdaot_fuzz_,$(FUZZ_TARGETS))
	@mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/artifacts $(addprefix $(FUZZ_BUILD)/corpus_,$(FUZZ_TARGETS))
	$(SAN_ENV) $(FUZZ_BUILD)/tests/fuzz/tdaot_fuzz_manifest $(FUZZ_BUILD)/corpus tests/fuzz/corpus \
		-dict=tests/fuzz/manifest.dict -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		-artifact_prefix=$(abspath $(FUZZ_BUILD))/artifacts/ $(FUZZ_ARGS) \
	|| { echo "fuzz: crash input in $(FUZZ_BUILD)/artifacts/; fix it, then add it to tests/fuzz/regressions/"; exit 1; }
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz: tdaot_fuzz_$$t for $(FUZZ_SECONDS) s"; \
		seeds=tests/fuzz/seeds/$$t; [ -d $$seeds ] || seeds=$(FUZZ_BUILD)/tests/fuzz/seeds/$$t; \
		$(SAN_ENV) $(FUZZ_BUILD)/tests/fuzz/tdaot_fuzz_$$t $(FUZZ_BUILD)/corpus_$$t $$seeds \
			-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
			-artifact_prefix=$(abspath $(FUZZ_BUILD))/artifacts/$$t- $(FUZZ_ARGS) \
		|| { echo "fuzz: crash input in $(FUZZ_BUILD)/artifacts/$$t-*; fix it, then add it to tests/fuzz/findings/$$t/"; exit 1; }; \
	done

# --- container images (docker/images.sh; docker/README.md) -------------------------------------
# images: docker where `docker info` works, else podman (installed when missing); the public
# Debian 12 base, or a local mmdebstrap one where no registry answers. The build image, the full
# runtime's image and the runtime image (the lite runtime, no libtorch). test-images: both
# runtime images run a package the build image built (as a non-root user) and refuse a tampered
# one, no libtorch or c10 file is in the lite one; then `make test` inside the build image
# (~25 min on 2 cores).
.PHONY: images test-images
images:
	docker/images.sh build

test-images: images
	docker/images.sh test

# --- GPU machines (tests/cuda; README "What has run on a GPU") -------------------------------
# gpu-bundle, here: the cp312 wheels and Debian 12 packages that a GPU machine of this workplace
# (python3 with torch 2.11 + CUDA, no network) lacks, into .gpu/ (ignored; carried to it).
# test-cuda, there: sets them up, builds against its torch and runs STEP (tests/cuda/run.sh):
# test (CUDA tests, Python and C++), bench (benchmarks/gpu.py) or suite (every test, torch 2.11).
.PHONY: gpu-bundle test-cuda
STEP ?= test
gpu-bundle: $(VENV)/.deps-stamp
	PY=$(PY) tests/cuda/bundle.sh .gpu

test-cuda:
	STEP=$(STEP) tests/cuda/run.sh
