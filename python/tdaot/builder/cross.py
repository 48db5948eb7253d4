"""The cross toolchain a package for another architecture than the build host's is compiled with:
which compiler, and the headers that must come before torch's.

Only 64-bit ARM (``cpu_target="aarch64"``) is built this way: on an x86 host inductor generates
its kernels for NEON (tdaot._torch_compat_cross) and Debian's ``aarch64-linux-gnu-g++`` compiles
them against torch's own headers. Torch's wheel bundles the ``sleef.h`` of its own (x86) build,
which declares no NEON function, while torch's NEON headers call SLEEF's ``Sleef_*f4_u10``; the
arm64 ``sleef.h`` of Debian's ``libsleef-dev:arm64`` declares them, and its ``libsleef.so.3``
defines them under those names (the lite runtime for aarch64 links it). So that header is put in
a folder of tdaot's own that each compile searches first. Nothing here runs a compiled model.

On an aarch64 host the same target compiles natively (the host's g++ and SLEEF header).
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from tdaot.builder.inductor_dir import BUILD_CACHE_DIR, private_dir
from tdaot.cache_folder import write_atomically
from tdaot.errors import BuildError

# The environment variable naming another aarch64 C++ compiler (a path or a name on PATH).
COMPILER_ENV = "TDAOT_AARCH64_CXX"
CROSS_COMPILER = "aarch64-linux-gnu-g++"
# Where Debian's libsleef-dev:arm64 puts its header (multiarch), then a sysroot's.
SLEEF_HEADERS = ("/usr/include/aarch64-linux-gnu/sleef.h", "/usr/aarch64-linux-gnu/include/sleef.h")
INSTALL_HINT = (
    "on Debian or Ubuntu: dpkg --add-architecture arm64 && apt-get update && apt-get install "
    "g++-aarch64-linux-gnu libsleef-dev:arm64 (or `make lite-aarch64`, which installs them)"
)


@dataclass(frozen=True)
class Toolchain:
    compiler: str  # the C++ compiler inductor runs
    include_first: str | None  # a folder each compile searches before torch's headers, or None


def host_architecture() -> str:
    """This machine's architecture as tdaot's manifests name it ("x86_64", "aarch64")."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def toolchain(architecture: str) -> Toolchain:
    """The toolchain that compiles a package's models for ``architecture`` on this host; raises
    BuildError naming what is missing."""
    if architecture != "aarch64":
        raise BuildError(f"tdaot cross-compiles for aarch64 only, not {architecture!r}")
    native = host_architecture() == "aarch64"
    compiler = os.environ.get(COMPILER_ENV) or ("g++" if native else CROSS_COMPILER)
    found = shutil.which(compiler)
    if found is None:
        via = f" ({COMPILER_ENV})" if os.environ.get(COMPILER_ENV) else ""
        raise BuildError(
            f"cpu_target 'aarch64' needs the C++ compiler {compiler!r}{via}, which is not on PATH; "
            + INSTALL_HINT
        )
    if native:
        return Toolchain(found, None)
    header = next((h for h in SLEEF_HEADERS if os.path.isfile(h)), None)
    if header is None:
        raise BuildError(
            "cpu_target 'aarch64' needs the arm64 SLEEF header ("
            + " or ".join(SLEEF_HEADERS)
            + "), which torch's NEON kernels call; "
            + INSTALL_HINT
        )
    return Toolchain(found, _include_folder(header))


def _include_folder(header: str) -> str:
    """A folder under tdaot's build cache holding only a copy of ``header`` as sleef.h (a copy,
    not the system's multiarch folder, whose other headers would shadow the cross compiler's)."""
    with open(header, "rb") as f:
        text = f.read()
    folder = os.path.join(BUILD_CACHE_DIR, "aarch64-include")
    target = os.path.join(folder, "sleef.h")
    try:
        with open(target, "rb") as f:
            if f.read() == text:
                return folder
    except FileNotFoundError:
        pass
    problem = private_dir(BUILD_CACHE_DIR)
    if problem is not None:
        raise BuildError(f"cpu_target 'aarch64': no folder for the arm64 SLEEF header: {problem}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    write_atomically(Path(target), text, 0o644)
    return folder
