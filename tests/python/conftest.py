"""Shared, session-scoped artifacts: each AOTInductor compile costs 5-30 s, so the
suite compiles each example policy once and every test reuses the package."""

from __future__ import annotations

import sys
import warnings
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
from tdaot.builder.cache import ArtifactCache  # noqa: E402


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def build_package(artifacts_dir):
    """build_package(name, factory, options, static_batch=None) -> (policy, example, artifact):
    ``factory()``'s policy built with ``options`` as NAME.pt2, once per session (a second call
    with the same name returns the first build; test modules prefix their names). With
    ``static_batch`` None a StaticBatchWarning (the fallback to a static batch) fails the build;
    else it is a regex the warning must match. A SpecialisationWarning (a batch-specialised model
    not built as planned) fails it but for interaction_type "random": a warning every such build
    prints is a bug to fix."""
    built: dict[str, tuple] = {}

    def get(name: str, factory, options: dict, static_batch: str | None = None):
        if name not in built:
            policy, example = factory()
            path = artifacts_dir / f"{name}.pt2"
            with warnings.catch_warnings():
                # Random sampling reaches some operators only through AOTInductor's proxy
                # executor, which the bound run cannot call: its batch-1 model is built without.
                if options.get("interaction_type") != "random":
                    warnings.simplefilter("error", tdaot.SpecialisationWarning)
                if static_batch is None:
                    warnings.simplefilter("error", tdaot.StaticBatchWarning)
                    artifact = tdaot.build(policy, example, path, **options)
                else:
                    with pytest.warns(tdaot.StaticBatchWarning, match=static_batch):
                        artifact = tdaot.build(policy, example, path, **options)
            built[name] = (policy, example, artifact)
        return built[name]

    return get


@pytest.fixture(scope="session")
def tutorial(build_package):
    """The tensordict tutorial policy, dynamic batch."""
    return build_package("tutorial", tutorial_policy, {"factory": "tutorial_policy"})


@pytest.fixture(scope="session")
def tutorial_b14(build_package, artifacts_dir):
    """(policy, example, artifact, cache): the tutorial policy, batch 1..64, with latency models
    for batches 1 and 4 (given as (4, 1)), built through ``cache`` (test_auto builds from it)."""
    cache = ArtifactCache(artifacts_dir / "cache")
    options = {"batch": (1, 64), "specialize": (4, 1), "cache": cache}
    return (*build_package("tutorial_b14", tutorial_policy, options), cache)


@pytest.fixture(scope="session")
def nested(build_package):
    """The nested-key policy, dynamic batch."""
    return build_package("nested", nested_policy, {})


@pytest.fixture(scope="session")
def recurrent(build_package):
    """The recurrent example policy, dynamic batch."""
    return build_package("recurrent", recurrent_policy, {})


@pytest.fixture(scope="session")
def legged(build_package):
    """The 12-joint locomotion policy with its deployment contract, dynamic batch."""
    return build_package("legged", legged_policy, {"contract": legged_contract()})


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
