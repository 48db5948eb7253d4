"""tdaot's pytest plugin (tdaot.pytest_plugin), as a user meets it: registered as the ``pytest11``
entry point ``tdaot``, loaded by a plain ``pytest`` run (no ``-p``), its example parity suite
(examples/pytest_plugin) passing on both runtimes, the second run served from the artifact cache,
a parity failure reported as a test failure, a bad --tdaot-runtime refused."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

EXAMPLE = ROOT / "examples" / "pytest_plugin"

# The example's policy built by the plugin, then compared with other weights: a parity failure.
DIFFERENT_WEIGHTS = """
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn


def make():
    net = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 2))
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def test_other_weights_differ(tdaot_package, tdaot_parity):
    torch.manual_seed(0)  # the example's policy and example, as it makes them
    policy = make()
    example = TensorDict({"observation": torch.randn(4, 6)}, batch_size=[4])
    tdaot_parity(make(), tdaot_package(policy, example), example)
"""


def _pytest(tests: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    """A plain pytest session on ``tests`` with its own (empty) config, the plugin found through
    its entry point, building through the artifact cache at ``cache``."""
    config = cache.parent / "pytest.ini"
    config.write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(config)]
    env = {**os.environ, "TDAOT_CACHE_DIR": str(cache)}
    return subprocess.run(
        [*command, str(tests), *args], capture_output=True, text=True, env=env, timeout=900, check=False
    )


def _cached(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*.pt2")}


def test_the_plugin_is_a_pytest11_entry_point():
    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "tdaot"]
    assert entry.value == "tdaot.pytest_plugin"


@pytest.mark.slow
def test_the_example_suite_passes_on_both_runtimes_through_the_cache(tmp_path):
    cache = tmp_path / "cache"
    done = _pytest(EXAMPLE, cache, "--tdaot-runtime=torch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    compiled = _cached(cache)
    assert compiled  # the session built through the cache
    done = _pytest(EXAMPLE, cache, "--tdaot-runtime=lite")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert _cached(cache) == compiled  # a new session: every model from the cache, none compiled

    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "test_failing.py").write_text(DIFFERENT_WEIGHTS)
    done = _pytest(failing, cache, "--tdaot-runtime=torch")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout
    assert "differs from the eager policy" in done.stdout and "action" in done.stdout
    # The failure points at the test's line, not into the helper (__tracebackhide__). (Torch's
    # empty structured-trace DEBUG records still reach pytest's log capture: not fixed yet.)
    assert "tdaot_parity(make(), tdaot_package(policy, example), example)" in done.stdout
    assert "if runtime not in RUNTIMES" not in done.stdout, done.stdout
    assert _cached(cache) == compiled


def test_an_unknown_runtime_is_refused_naming_the_choices(tmp_path):
    done = _pytest(EXAMPLE, tmp_path / "cache", "--tdaot-runtime=gpu")
    assert done.returncode == 4  # pytest's usage error
    assert "--tdaot-runtime: invalid choice: 'gpu' (choose from" in done.stderr
    assert "'torch'" in done.stderr and "'lite'" in done.stderr
