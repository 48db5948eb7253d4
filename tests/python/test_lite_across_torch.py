"""Packages across torch versions: one built by another torch (in another venv) is refused by the
full runtime, naming both versions, while its lite models run on this venv's lite runtime and
match this torch's eager policy.

Needs a second environment with another torch and tdaot installed: ``TDAOT_OTHER_PYTHON`` names
its python (``make test-torch TORCH=X`` sets it to the main venv's, torch 2.13); skipped
without it.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import torch
from conftest import ROOT

import tdaot
from tdaot.testing import assert_parity

OTHER = os.environ.get("TDAOT_OTHER_PYTHON")
pytestmark = pytest.mark.skipif(
    not OTHER, reason="TDAOT_OTHER_PYTHON (a python with another torch) is not set"
)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


@pytest.fixture(scope="module")
def other_package(tmp_path_factory):
    """(the tutorial policy built by the other environment's torch, that torch's version)."""
    version = subprocess.run(
        [OTHER, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if _major_minor(version) == _major_minor(torch.__version__):
        pytest.fail(f"TDAOT_OTHER_PYTHON={OTHER} has torch {version}, the same minor release as this one")
    path = tmp_path_factory.mktemp("other_torch") / "tutorial.pt2"
    factory = f"{ROOT / 'examples' / 'policies.py'}:tutorial_policy"
    done = subprocess.run(
        [OTHER, "-m", "tdaot", "build", factory, "-o", str(path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(path.parent / "inductor")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return path, version


def test_the_full_runtime_refuses_a_package_of_another_torch_naming_both(other_package):
    path, version = other_package
    assert tdaot.read_manifest(path).torch_version == version
    runtime = _major_minor(torch.__version__)
    with pytest.raises(
        tdaot.HostMismatchError,
        match=re.escape(f"built with torch {version} but this runtime uses torch {runtime}"),
    ):
        tdaot.load(path)


def test_its_lite_models_run_on_this_lite_runtime(other_package):
    from examples.policies import tutorial_policy

    path, _ = other_package
    policy, example = tutorial_policy()
    report = assert_parity(policy, path, example, runtime="lite")
    assert report.rows and all(row.ok for row in report.rows)
