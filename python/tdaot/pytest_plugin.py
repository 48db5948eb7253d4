"""tdaot's pytest plugin (the ``pytest11`` entry point ``tdaot``): a parity suite in a few lines.

    def test_policy_runs_natively(tdaot_package, tdaot_parity):
        policy, example = make_policy()
        tdaot_parity(policy, tdaot_package(policy, example), example)

Fixtures (each session-wide):

- ``tdaot_package(policy, example, **options)`` builds the policy (``tdaot.build``; options are
  :class:`~tdaot.BuildOptions` fields) into the session's temporary folder through the artifact
  cache, and returns the :class:`~tdaot.Artifact`. Within a session the same (policy, example,
  options) is built once; across sessions the cache copies the compiled models instead of
  compiling them (``--tdaot-cache-dir``, default ``$TDAOT_CACHE_DIR`` or ``~/.cache/tdaot``).
- ``tdaot_parity(policy, artifact, example, **kwargs)``: :func:`tdaot.testing.assert_parity` on the
  runtime ``--tdaot-runtime`` names; ``tdaot_statistical_parity``: for sampling artifacts.
- ``tdaot_runtime``: that runtime, ``"torch"`` (the full runtime, in the test process) or ``"lite"``
  (the lite runtime, no libtorch, in a ``tdaot-lite`` subprocess).

The plugin module imports nothing of torch or tdaot until a fixture is used: pytest loads it in
every session of an environment where tdaot is installed.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

RUNTIMES = ("torch", "lite")  # as tdaot.testing.RUNTIMES, which would import torch here


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tdaot", "tdaot parity (tensordict policies as native packages)")
    group.addoption(
        "--tdaot-runtime",
        choices=RUNTIMES,
        default="torch",
        help="where tdaot_parity runs the packages: torch (the full runtime, in this process; default) "
        "or lite (the lite runtime, no libtorch, in a tdaot-lite subprocess)",
    )
    group.addoption(
        "--tdaot-cache-dir",
        default=None,
        help="the artifact cache tdaot_package builds through (default: $TDAOT_CACHE_DIR or ~/.cache/tdaot)",
    )


@pytest.fixture(scope="session")
def tdaot_runtime(pytestconfig: pytest.Config) -> str:
    """The runtime --tdaot-runtime names: "torch" or "lite"."""
    return pytestconfig.getoption("tdaot_runtime")


@pytest.fixture(scope="session")
def tdaot_package(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory):
    """tdaot_package(policy, example, **options) -> tdaot.Artifact, built once per session through
    the artifact cache."""
    from tdaot.builder import build
    from tdaot.builder.cache import ArtifactCache

    cache = ArtifactCache(pytestconfig.getoption("tdaot_cache_dir"))
    directory = tmp_path_factory.mktemp("tdaot_packages")
    built: dict[tuple, tuple[Any, Any, Any]] = {}

    def package(policy, example, **options):
        key = (id(policy), id(example), repr(sorted(options.items())))
        if key not in built:
            path = directory / f"package{len(built)}.pt2"
            # The policy and example are kept alive with the artifact, so their ids stay theirs.
            built[key] = (policy, example, build(policy, example, path, cache=cache, **options))
        return built[key][2]

    return package


@pytest.fixture(scope="session")
def tdaot_parity(tdaot_runtime: str):
    """tdaot.testing.assert_parity on the runtime --tdaot-runtime names."""
    from tdaot.testing import assert_parity

    return functools.partial(assert_parity, runtime=tdaot_runtime)


@pytest.fixture(scope="session")
def tdaot_statistical_parity():
    """tdaot.testing.assert_statistical_parity (a sampling artifact, on the full runtime)."""
    from tdaot.testing import assert_statistical_parity

    return assert_statistical_parity
