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
from tdaot.versions import same_torch_release, torch_release


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


@pytest.mark.parametrize(
    ("built", "installed"),
    [
        ("2.15.0+cu132", "2.15.0"),  # PyPI's CUDA wheel: version.py has the tag, the metadata not
        ("2.15.0", "2.15.0+cu130"),
        ("2.13.0+cpu", "2.13.0+cpu"),
        ("2.14.1+cpu", "2.14.1+cu130"),  # one release's builds share its C++ ABI
    ],
)
def test_builds_of_one_release_are_the_same_torch_whatever_their_local_tags(tmp_path, built, installed):
    (tmp_path / _native.BUILD_INFO).write_text(json.dumps({"torch": built}))
    _native.check_torch(installed, str(tmp_path))
    assert same_torch_release(built, installed)
    assert torch_release(built) == torch_release(installed)


def test_the_mismatch_advice_installs_another_release_than_the_installed_one(tmp_path):
    # The advice must change something: never `pip install torch==X` for the X already installed.
    (tmp_path / _native.BUILD_INFO).write_text(json.dumps({"torch": "2.15.0+cu132"}))
    with pytest.raises(_native.TorchMismatchError, match=r"pip install torch==2\.15\.0\)") as raised:
        _native.check_torch("2.14.1", str(tmp_path))
    assert "torch 2.14.1 is installed" in str(raised.value)


def test_a_module_that_recorded_no_torch_is_let_through(tmp_path):
    # Built before tdaot recorded it: nothing to compare with (the import itself then decides).
    assert _native.built_for(str(tmp_path)) is None
    _native.check_torch("2.13.0", str(tmp_path))


def _copied_install(tmp_path: Path, torch_version: str, *, cpp: bool = False) -> Path:
    """tdaot's Python package copied under tmp_path/site, beside the real compiled module (a
    symlink) and a _C_build.json that says ``torch_version``; the C++ package (tdaot/_cpp, a
    symlink to the real one) only with ``cpp``."""
    package = tmp_path / "site" / "tdaot"
    skipped = shutil.ignore_patterns("__pycache__", "_cpp", "_lite", "_C.*", _native.BUILD_INFO)
    shutil.copytree(Path(tdaot.__file__).parent, package, ignore=skipped)
    (module,) = Path(_native.module_dir()).glob("_C.*.so")
    (package / module.name).symlink_to(module)
    (package / _native.BUILD_INFO).write_text(json.dumps({"torch": torch_version}))
    if cpp:
        (package / _native.CPP_PREFIX).symlink_to(Path(_native.module_dir()) / _native.CPP_PREFIX)
    return package.parent


def _torch_metadata_without_local_tag(site: Path) -> str:
    """A torch distribution's metadata in ``site`` (found before the real one) whose version lacks
    the local tag that torch/version.py carries, as PyPI's CUDA wheels install; returns it."""
    release = torch_release(torch.__version__)
    info = site / f"torch-{release}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {release}\n")
    return release


def _python(site: Path, *args: str) -> subprocess.CompletedProcess:
    # -S: no .pth files, so an editable install's import hook does not redirect `tdaot` to the
    # checkout; torch and the rest come from this process's path, after the copy.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, sys.path)])}
    return subprocess.run(
        [sys.executable, "-S", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_loading_tdaot_beside_another_torch_fails_by_name_not_by_symbol(tmp_path):
    site = _copied_install(tmp_path, "2.12.0+cpu")
    done = _python(site, "-c", "import tdaot; tdaot.load")  # the runtime imports tdaot._C
    assert done.returncode != 0
    assert "tdaot.errors.TorchMismatchError" in done.stderr, done.stderr
    installed = _native.installed_torch()  # as its metadata names it: PyPI's CUDA wheels lack the local tag
    assert f"built against torch 2.12.0+cpu, but torch {installed} is installed" in done.stderr
    assert "undefined symbol" not in done.stderr
    # The same copy, recording this torch, imports (the check is what refused it above).
    (site / "tdaot" / _native.BUILD_INFO).write_text(json.dumps({"torch": torch.__version__}))
    done = _python(site, "-c", "import tdaot; tdaot.load; print(tdaot.__file__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(site / "tdaot" / "__init__.py")


def test_a_torch_whose_metadata_drops_the_local_tag_loads_and_runs(tmp_path):
    # The build recorded version.py's `2.13.0+cpu`; the metadata says `2.13.0`, as a pip user's
    # CUDA wheel would: the same release, so tdaot imports its compiled module and runs.
    if "+" not in torch.__version__:
        pytest.skip(f"torch {torch.__version__} has no local tag to drop")
    site = _copied_install(tmp_path, torch.__version__)
    release = _torch_metadata_without_local_tag(site)
    code = (
        "import importlib.metadata, sys, tdaot; tdaot.load; "  # the runtime imports tdaot._C
        "print(importlib.metadata.version('torch'), 'tdaot._C' in sys.modules)"
    )
    done = _python(site, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [release, "True"]


def test_torch_free_commands_never_check_torch(tmp_path):
    # A module built for another torch release: tdaot-lite (no torch at all) and --cmake-prefix
    # still work; only what loads tdaot._C is refused, by name.
    site = _copied_install(tmp_path, "2.12.0+cpu", cpp=True)
    lite = _python(
        site, "-c", "import sys; sys.argv = ['tdaot-lite', '--help']; from tdaot.tools import lite; lite()"
    )
    assert lite.returncode == 0, lite.stderr
    assert "TorchMismatchError" not in lite.stderr and "tdaot-lite" in lite.stdout
    prefix = _python(site, "-m", "tdaot", "--cmake-prefix")
    assert prefix.returncode == 0, prefix.stderr
    assert prefix.stdout.strip() == str(site / "tdaot" / "_cpp")
    done = _python(site, "-c", "import tdaot; tdaot.load")
    assert "tdaot.errors.TorchMismatchError" in done.stderr
    installed = _native.installed_torch()  # as its metadata names it: PyPI's CUDA wheels lack the local tag
    assert f"built against torch 2.12.0+cpu, but torch {installed} is installed" in done.stderr


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


# A policy factory and a pytest suite of a user's own project, outside the checkout.
USER_POLICY = """
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn


def policy():
    torch.manual_seed(0)
    module = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["act"])
    return module, TensorDict({"obs": torch.randn(4, 3)}, batch_size=[4])
"""

USER_TEST = """
from mypolicy import policy


def test_runs_natively(tdaot_package, tdaot_parity):
    module, example = policy()
    tdaot_parity(module, tdaot_package(module, example, tuning="throughput"), example)
"""


@pytest.mark.slow  # builds the wheel (the whole C++ build, in a temporary folder) and a package
def test_the_wheel_in_a_fresh_venv_builds_and_runs_every_tool_by_name(tmp_path):
    root = Path(__file__).resolve().parents[2]
    checkout_builds = sorted(p.name for p in (root / "build").iterdir()) if (root / "build").is_dir() else []
    wheels = tmp_path / "wheels"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Through ccache where there is one (make test's, keyed by the source and the flags) and with
    # the flags the editable build of `make setup` used (TDAOT_WERROR), so its objects serve this
    # build: what is under test is the wheel's folders and contents, not a second C++ compile.
    faster = []
    if shutil.which("ccache"):
        env["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache"
        faster = ["--config-settings=cmake.define.TDAOT_WERROR=ON"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", *faster]
        + ["-w", wheels, root],
        check=True,
        env=env,
        timeout=3600,
    )
    # A plain (non-editable) build never touches the checkout's build folders.
    assert (sorted(p.name for p in (root / "build").iterdir()) if (root / "build").is_dir() else []) == (
        checkout_builds
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    # torch, tensordict, pytest... from this environment, after the fresh venv's own packages (a
    # plain path: its .pth files, the editable install's import hook among them, are not run).
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "outer.pth").write_text(torch.__path__[0].removesuffix("/torch") + "\n")
    (wheel,) = wheels.glob("*.whl")
    bin_dir = venv / "bin"
    subprocess.run([bin_dir / "pip", "install", "-q", "--no-deps", "--no-index", wheel], check=True, env=env)

    project = tmp_path / "project"
    project.mkdir()
    (project / "mypolicy.py").write_text(USER_POLICY)
    (project / "test_mypolicy.py").write_text(USER_TEST)
    env = {**env, "TDAOT_CACHE_DIR": str(tmp_path / "cache")}

    def run(*command: str | Path) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(c) for c in command], cwd=project, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        return done

    done = run(bin_dir / "python", "-c", "import tdaot; print(tdaot.__file__)")
    assert done.stdout.startswith(str(site)), done.stdout  # the wheel's tdaot, not the checkout's
    run(bin_dir / "tdaot", "build", "mypolicy.py:policy", "-o", "p.pt2")
    # The factory is recorded with its absolute path: it resolves from any folder.
    recorded = json.loads(run(bin_dir / "tdaot-run", "inspect", "p.pt2", "--json").stdout)["source"]
    assert recorded["factory"] == f"{project / 'mypolicy.py'}:policy"
    assert "act" in run(bin_dir / "tdaot-lite", "inspect", "p.pt2").stdout
    assert "MuJoCo" in run(bin_dir / "tdaot-rehearse", "--help").stdout
    done = run(bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mypolicy.py")
    assert "1 passed" in done.stdout
