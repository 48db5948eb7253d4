"""A test harness for the lite runtime (``tdaot::lite``, no libtorch): its tool ``tdaot-lite`` run
in a subprocess. Not a runtime: a Python service runs packages with :func:`tdaot.load`.

Python cannot load the lite runtime into its own process (``import torch`` maps libtorch), so
:func:`run` runs ``tdaot-lite run`` in a subprocess: inputs go in as JSON (Python floats, whose
``repr`` round-trips, so float32 and float64 values arrive exact), outputs come back as JSON, and
the child copies its ``/proc/self/maps`` after the run, so the caller can check that no libtorch
or c10 library was mapped (:func:`torch_libraries`). ``tdaot.testing.assert_parity(...,
runtime="lite")`` is built on it.

Where the tool is found (:func:`find_tool`): the ``TDAOT_LITE`` environment variable, else the
``tdaot-lite`` installed inside this package by the wheel (``tdaot/_cpp/bin``), else
``tdaot-lite`` on PATH, else ``build/cpp/tdaot-lite`` of a source checkout.

A package built for another architecture than this host's (``cpu_target="aarch64"`` on x86) runs
in that architecture's ``tdaot-lite`` under qemu-user (:func:`emulation`): the tool from
``TDAOT_LITE_AARCH64``, else a source checkout's ``build/aarch64/prefix/bin/tdaot-lite`` (``make
lite-aarch64``); ``qemu-aarch64-static`` (Debian's qemu-user-static) with the cross toolchain's
loader folder. qemu's timings say nothing of an ARM core's.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tdaot.errors import TdaotError
from tdaot.tools import package_dirs

ENV = "TDAOT_LITE"
TOOL = "tdaot-lite"
# Inside the installed package (CMakeLists.txt installs it there under scikit-build).
PACKAGED = Path("_cpp") / "bin" / TOOL
# A source checkout's build (make build, ninja -C build/cpp tdaot-lite).
CHECKOUT = Path(__file__).resolve().parents[3] / "build" / "cpp" / TOOL
RESET = "__reset__"
# The aarch64 tool: the environment variable naming it, and where `make lite-aarch64` installs it.
AARCH64_ENV = "TDAOT_LITE_AARCH64"
AARCH64_CHECKOUT = Path(__file__).resolve().parents[3] / "build" / "aarch64" / "prefix" / "bin" / TOOL
QEMU = {"aarch64": "qemu-aarch64-static"}
# The cross toolchain's loader and C++ runtime (qemu -L), and the arm64 multiarch libraries (SLEEF).
AARCH64_ROOT = "/usr/aarch64-linux-gnu"
AARCH64_LIBRARIES = "/usr/lib/aarch64-linux-gnu"
# A mapped file of libtorch or c10 (libtorch.so, libtorch_cpu.so, libtorch_cuda.so.2,
# libc10.so, libc10_cuda.so, ...).
_TORCH_LIBRARY = re.compile(r"^lib(torch|c10)([_.-][^/]*)?\.so(\.[0-9.]+)?$")


class LiteToolError(TdaotError):
    """``tdaot-lite`` failed (its message is the error's); ``returncode`` and ``command`` say how."""

    def __init__(self, message: str, returncode: int = 0, command: Sequence[str] = ()):
        super().__init__(message)
        self.returncode = returncode
        self.command = tuple(command)


@dataclass(frozen=True)
class LiteRun:
    """One ``tdaot-lite run``: its outputs (one dict of manifest key -> nested lists per step),
    the files its process had mapped after the run, and how long the subprocess took."""

    outputs: tuple[dict[str, Any], ...]
    libraries: tuple[str, ...]
    seconds: float


def find_tool() -> str:
    """The path of ``tdaot-lite``; FileNotFoundError saying how to get it when there is none."""
    given = os.environ.get(ENV)
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise FileNotFoundError(f"{ENV}={given!r} is not an executable file")
        return given
    for candidate in [*(Path(d) / PACKAGED for d in package_dirs()), shutil.which(TOOL), CHECKOUT]:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.fspath(candidate)
    raise FileNotFoundError(
        f"{TOOL} (the lite runtime's tool) was not found: not in ${ENV}, not installed inside the tdaot "
        f"package ({PACKAGED}), not on PATH, not at {CHECKOUT}. Install tdaot from its wheel "
        "(pip install builds it), or build it from a source checkout (make build, or "
        f"ninja -C build/cpp {TOOL}), or point {ENV} at it"
    )


def host_architecture() -> str:
    """This machine's architecture as manifests name it ("x86_64", "aarch64")."""
    import platform

    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def find_tool_for(architecture: str) -> str:
    """The ``tdaot-lite`` built for ``architecture``: :func:`find_tool` for this host's, else (for
    aarch64) ``$TDAOT_LITE_AARCH64`` or a checkout's ``make lite-aarch64`` prefix;
    FileNotFoundError saying how to get it."""
    if not architecture or architecture == host_architecture():
        return find_tool()
    if architecture != "aarch64":
        raise FileNotFoundError(f"no {TOOL} for architecture {architecture!r} (tdaot builds aarch64 only)")
    given = os.environ.get(AARCH64_ENV)
    candidate = given or os.fspath(AARCH64_CHECKOUT)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    where = f"{AARCH64_ENV}={given!r} is not an executable file" if given else f"not at {AARCH64_CHECKOUT}"
    raise FileNotFoundError(
        f"the aarch64 {TOOL} (to run an aarch64 package on this {host_architecture()} host under qemu) "
        f"was not found: {where}. Build it with `make lite-aarch64` in a source checkout, or point "
        f"{AARCH64_ENV} at the bundle's bin/{TOOL}"
    )


def emulation(architecture: str) -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment that run an ``architecture`` program on this host: none
    for this host's own; qemu-user for aarch64 on another (FileNotFoundError naming the Debian
    package when it is missing)."""
    if not architecture or architecture == host_architecture():
        return [], {}
    qemu = QEMU.get(architecture)
    found = shutil.which(qemu) if qemu else None
    if found is None:
        raise FileNotFoundError(
            f"running an {architecture} package on this {host_architecture()} host needs "
            f"{qemu or 'an emulator'}, which is not on PATH (Debian: apt-get install qemu-user-static; "
            "`make lite-aarch64` installs it)"
        )
    paths = [AARCH64_LIBRARIES, os.environ.get("LD_LIBRARY_PATH", "")]
    return [found, "-L", AARCH64_ROOT], {"LD_LIBRARY_PATH": ":".join(filter(None, paths))}


def package_architecture(package: str | os.PathLike) -> str:
    """The architecture the package's manifest records ("" before it was recorded)."""
    from tdaot.manifest import read_manifest

    return read_manifest(os.fspath(package)).architecture


def mapped_files(maps: str) -> list[str]:
    """The files named in the text of a ``/proc/<pid>/maps``, in order of first mapping."""
    files = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            files.append(fields[5].removesuffix(" (deleted)"))
    return list(dict.fromkeys(files))


def torch_libraries(files: Sequence[str]) -> list[str]:
    """Those of ``files`` (paths) that are libtorch or c10 libraries."""
    return [f for f in files if _TORCH_LIBRARY.match(os.path.basename(f))]


def run(
    package: str | os.PathLike,
    batch: int,
    steps: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    *,
    weights: str | os.PathLike | None = None,
    trusted_keys: Sequence[str | os.PathLike] = (),
    tool: str | None = None,
    timeout: float = 600.0,
) -> LiteRun:
    """Runs ``tdaot-lite run PACKAGE --batch BATCH`` on ``steps``: one dict of manifest key ->
    nested lists (or a list of them, a rollout: a step may hold ``"__reset__"``, True or one bool
    per row, applied before it; a recurrent package's state is carried where a step omits it).
    ``weights``: a weight file (:func:`tdaot.export_weights`) swapped in first, with the lite
    runtime's checks; ``trusted_keys``: public key files the package (and the weight file) must
    be signed by. Raises LiteToolError with the tool's message when it fails, ValueError for a
    non-finite input (JSON has none)."""
    architecture = package_architecture(package)
    tool = tool or find_tool_for(architecture)
    prefix, env = emulation(architecture)
    rollout = not isinstance(steps, Mapping)
    try:
        text = json.dumps(list(steps) if rollout else dict(steps), allow_nan=False)
    except ValueError as e:
        raise ValueError(f"{TOOL} reads its inputs as JSON, which holds no NaN or infinity: {e}") from None
    with tempfile.TemporaryDirectory(prefix="tdaot-lite-") as scratch:
        inputs, maps = os.path.join(scratch, "inputs.json"), os.path.join(scratch, "maps")
        with open(inputs, "w") as f:
            f.write(text)
        command = [*prefix, tool, "run", os.fspath(package), "--batch", str(batch), "--inputs", inputs]
        command += ["--maps", maps]
        if weights is not None:
            command += ["--weights", os.fspath(weights)]
        for key in trusted_keys:
            command += ["--public-key", os.fspath(key)]
        start = time.perf_counter()
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **env}
        )
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            message = done.stderr.strip().removeprefix(f"{TOOL}: ") or f"exit status {done.returncode}"
            raise LiteToolError(
                f"{TOOL} run {os.fspath(package)!r} --batch {batch}: {message}", done.returncode, command
            )
        with open(maps) as f:
            libraries = tuple(mapped_files(f.read()))
    try:
        outputs = json.loads(done.stdout)
    except json.JSONDecodeError as e:
        raise LiteToolError(f"{TOOL} printed no JSON ({e}): {done.stdout[:200]!r}", 0, command) from None
    return LiteRun(tuple(outputs) if rollout else (outputs,), libraries, seconds)


def flatten(value: Any) -> list:
    """Nested lists of numbers, flattened row-major; None (how the tool prints NaN and infinities,
    which JSON lacks) becomes NaN."""
    if isinstance(value, list):
        return [x for item in value for x in flatten(item)]
    return [math.nan if value is None else value]


__all__ = [
    "AARCH64_CHECKOUT",
    "AARCH64_ENV",
    "CHECKOUT",
    "ENV",
    "PACKAGED",
    "RESET",
    "TOOL",
    "LiteRun",
    "LiteToolError",
    "emulation",
    "find_tool",
    "find_tool_for",
    "host_architecture",
    "flatten",
    "mapped_files",
    "package_architecture",
    "run",
    "torch_libraries",
]
