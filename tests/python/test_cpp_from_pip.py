"""The C++ runtime from the pip install: a service configured with
``-DCMAKE_PREFIX_PATH=$(python -m tdaot --cmake-prefix)`` and ``find_package(tdaot COMPONENTS lite)``
builds against the installed package and runs one, with no ``make install``.

The prefix is the one the installed tdaot carries (tdaot/_cpp beside tdaot._C): scikit-build-core
installs it with the same install rules for a wheel and for the editable install of a checkout
(``make setup``), so in the development venv this is the prefix a wheel would hold, not the
checkout's build tree (the test checks that the package CMake found, and the library the
service loads, are the prefix's). The consumer is cpp/examples/robot_service, out of tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SERVICE = ROOT / "cpp" / "examples" / "robot_service"


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name  # the venv's cmake and ninja wheels
    return str(beside) if beside.is_file() else shutil.which(name)


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> tuple[Path, Path]:
    """(robot_service built against the installed prefix, that prefix)."""
    cmake = _tool("cmake")
    if cmake is None:
        pytest.skip("no cmake in this environment")
    prefix = Path(_run([sys.executable, "-m", "tdaot", "--cmake-prefix"]).stdout.strip())
    binary = tmp_path_factory.mktemp("robot_service")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}"] if _tool("ninja") else []
    _run(
        [
            cmake,
            "-S",
            str(SERVICE),
            "-B",
            str(binary),
            *generator,
            f"-DCMAKE_PREFIX_PATH={prefix}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
    )
    _run([cmake, "--build", str(binary)])
    cache = (binary / "CMakeCache.txt").read_text()
    assert f"tdaot_DIR:PATH={prefix / 'lib' / 'cmake' / 'tdaot'}" in cache
    assert "Torch_DIR" not in cache  # the lite component looks for no Torch
    return binary / "robot_service", prefix


def test_a_service_built_from_the_pip_prefix_runs_a_package(service, tutorial):
    executable, prefix = service
    linked = _run(["ldd", str(executable)]).stdout
    assert f"libtdaot_lite.so => {prefix / 'lib' / 'libtdaot_lite.so'}" in linked
    assert "libtorch" not in linked and "libc10" not in linked
    package = tutorial[2].path
    done = _run([str(executable), os.fspath(package), "--steps", "20"])
    assert f"loaded {package} (sha256 " in done.stdout
    assert "20 ticks at 1000 Hz" in done.stdout
