"""tdaot's compiled parts as installed (tdaot._native): a tdaot._C built for another torch is refused
by name on import, and the C++ package the install carries (tdaot/_cpp) is found with
``python -m tdaot --cmake-prefix`` / ``tdaot.cmake_prefix_path``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tdaot
from tdaot import _native


def test_the_installed_module_records_the_torch_it_was_built_against():
    directory = _native.module_dir()
    assert directory is not None
    assert _native.built_for(directory) == torch.__version__


def test_a_module_built_for_another_torch_is_refused_naming_both(tmp_path):
    (tmp_path / _native.BUILD_INFO).write_text(json.dumps({"torch": "2.12.0+cpu"}))
    with pytest.raises(_native.TorchMismatchError) as raised:
        _native.check_torch("2.14.1+cu130", str(tmp_path))
    message = str(raised.value)
    assert "built against torch 2.12.0+cpu, but torch 2.14.1+cu130 is installed" in message
    assert str(tmp_path / "_C") in message
    assert "--no-build-isolation" in message and "make setup" in message
    assert "pip install torch==2.12.0" in message
    assert isinstance(raised.value, ImportError)
    _native.check_torch("2.12.0+cpu", str(tmp_path))  # the same torch: no error


def test_a_module_that_recorded_no_torch_is_let_through(tmp_path):
    # Built before tdaot recorded it: nothing to compare with (the import itself then decides).
    assert _native.built_for(str(tmp_path)) is None
    _native.check_torch("2.13.0", str(tmp_path))


def _copied_install(tmp_path: Path, torch_version: str) -> Path:
    """tdaot's Python package copied under tmp_path/site, beside the real compiled module (a
    symlink) and a _C_build.json that says ``torch_version``; no C++ package (tdaot/_cpp)."""
    package = tmp_path / "site" / "tdaot"
    skipped = shutil.ignore_patterns("__pycache__", "_cpp", "_lite", "_C.*", _native.BUILD_INFO)
    shutil.copytree(Path(tdaot.__file__).parent, package, ignore=skipped)
    (module,) = Path(_native.module_dir()).glob("_C.*.so")
    (package / module.name).symlink_to(module)
    (package / _native.BUILD_INFO).write_text(json.dumps({"torch": torch_version}))
    return package.parent


def _python(site: Path, *args: str) -> subprocess.CompletedProcess:
    # -S: no .pth files, so an editable install's import hook does not redirect `tdaot` to the
    # checkout; torch and the rest come from this process's path, after the copy.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, sys.path)])}
    return subprocess.run(
        [sys.executable, "-S", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_importing_tdaot_beside_another_torch_fails_by_name_not_by_symbol(tmp_path):
    site = _copied_install(tmp_path, "2.12.0+cpu")
    done = _python(site, "-c", "import tdaot")
    assert done.returncode != 0
    assert "tdaot.errors.TorchMismatchError" in done.stderr, done.stderr
    assert f"built against torch 2.12.0+cpu, but torch {torch.__version__} is installed" in done.stderr
    assert "undefined symbol" not in done.stderr
    # The same copy, recording this torch, imports (the check is what refused it above).
    (site / "tdaot" / _native.BUILD_INFO).write_text(json.dumps({"torch": torch.__version__}))
    done = _python(site, "-c", "import tdaot; print(tdaot.__file__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(site / "tdaot" / "__init__.py")


def test_cmake_prefix_is_the_installed_cpp_package():
    prefix = Path(tdaot.cmake_prefix_path)
    assert prefix == Path(_native.module_dir()) / "_cpp"
    for part in (
        "lib/cmake/tdaot/tdaotConfig.cmake",
        "lib/cmake/tdaot/tdaotLiteTargets.cmake",
        "include/tdaot/lite.h",
        "lib/libtdaot_lite.so",
        "bin/tdaot-lite",
    ):
        assert (prefix / part).is_file(), part
    done = subprocess.run(
        [sys.executable, "-m", "tdaot", "--cmake-prefix"], capture_output=True, text=True, check=True
    )
    assert done.stdout == f"{prefix}\n"


def test_an_install_without_the_cpp_package_says_so(tmp_path):
    site = _copied_install(tmp_path, torch.__version__)
    done = _python(site, "-m", "tdaot", "--cmake-prefix")
    assert done.returncode == 1
    assert done.stdout == ""
    assert f"tdaot: this tdaot install has no C++ package ({site / 'tdaot' / '_cpp'})" in done.stderr
    done = _python(site, "-c", "import tdaot; tdaot.cmake_prefix_path")
    assert "FileNotFoundError: this tdaot install has no C++ package" in done.stderr
