"""Shared, session-scoped artifacts: each AOTInductor compile costs 5-30 s, so the
suite compiles each example policy once and every test reuses the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for `examples.policies`

from examples.policies import (  # noqa: E402
    legged_contract,
    legged_policy,
    nested_policy,
    recurrent_policy,
    tutorial_policy,
)

import tdaot  # noqa: E402


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


def _build_example(artifacts_dir: Path, make, name: str, **options):
    """(policy, example, artifact) for an example factory, built once per session as NAME.pt2."""
    policy, example = make()
    artifact = tdaot.build(policy, example, artifacts_dir / f"{name}.pt2", **options)
    return policy, example, artifact


@pytest.fixture(scope="session")
def tutorial(artifacts_dir):
    """The tensordict tutorial policy, dynamic batch."""
    return _build_example(artifacts_dir, tutorial_policy, "tutorial", factory="tutorial_policy")


@pytest.fixture(scope="session")
def nested(artifacts_dir):
    """The nested-key policy, dynamic batch."""
    return _build_example(artifacts_dir, nested_policy, "nested")


@pytest.fixture(scope="session")
def recurrent(artifacts_dir):
    """The recurrent example policy, dynamic batch."""
    return _build_example(artifacts_dir, recurrent_policy, "recurrent")


@pytest.fixture(scope="session")
def legged(artifacts_dir):
    """The 12-joint locomotion policy with its deployment contract, dynamic batch."""
    return _build_example(artifacts_dir, legged_policy, "legged", contract=legged_contract())


@pytest.fixture(scope="session")
def legged_native(legged):
    return tdaot.load(legged[2].path)


@pytest.fixture(scope="session")
def tutorial_native(tutorial):
    return tdaot.load(tutorial[2].path)


@pytest.fixture(scope="session")
def nested_native(nested):
    return tdaot.load(nested[2].path)


@pytest.fixture(scope="session")
def recurrent_native(recurrent):
    return tdaot.load(recurrent[2].path)
