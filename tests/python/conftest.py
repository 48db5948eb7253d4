"""Shared, session-scoped artifacts: each AOTInductor compile costs 5-30 s, so the
suite compiles each example policy once and every test reuses the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for `examples.policies`

from examples.policies import nested_policy, tutorial_policy  # noqa: E402

import tdaot  # noqa: E402


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def tutorial(artifacts_dir):
    """(policy, example, artifact) for the tensordict tutorial policy, dynamic batch."""
    policy, example = tutorial_policy()
    artifact = tdaot.build(policy, example, artifacts_dir / "tutorial.pt2", factory="tutorial_policy")
    return policy, example, artifact


@pytest.fixture(scope="session")
def nested(artifacts_dir):
    """(policy, example, artifact) for the nested-key policy, dynamic batch."""
    policy, example = nested_policy()
    artifact = tdaot.build(policy, example, artifacts_dir / "nested.pt2")
    return policy, example, artifact


@pytest.fixture(scope="session")
def tutorial_native(tutorial):
    return tdaot.load(tutorial[2].path)


@pytest.fixture(scope="session")
def nested_native(nested):
    return tdaot.load(nested[2].path)
