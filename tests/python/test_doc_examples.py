"""Every ```python block of README.md and docs/*.md runs, against a tiny package (an MLP from
"observation" [3] to "action" [2], the keys the docs use), or is listed in NOT_RUN with the reason
it cannot run here. The blocks of one file run in order in one namespace, in one folder, as a
reader would type them; a block that builds builds through one artifact cache, so the docs'
builds of the tiny policy compile it once."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot.builder.cache import ArtifactCache

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)

# (file relative to the root, block index in it) -> why it is not run here.
NOT_RUN = {
    ("docs/contract.md", 0): "builds a 12-joint robot's policy with its contract (names, limits, offsets); "
    "test_contract.py builds the legged package's contract and checks load, order and clipping",
    ("docs/contract.md", 1): "binds a 12-joint robot's package whose observation has joint terms, with a "
    "supervisor; test_supervisor.py binds the rehearsal's arm with one and checks the same calls",
    ("docs/install.md", 0): "a test function for a user's pytest with the tdaot plugin's fixtures; "
    "test_pytest_plugin.py runs such a test in a pytester session",
    ("docs/from-training.md", 0): "reads a trained run directory and its robot's MJCF; "
    "test_deploy_contract.py builds such a run with rsl_rl and reads it the same way",
    ("docs/from-training.md", 1): "reads trained skrl, rl_games and SB3 runs; test_skrl.py, test_rl_games.py "
    "and test_sb3.py train runs with each library's own code and read them the same way",
    ("docs/python-api.md", 1): "reads a trained rsl_rl run directory; "
    "test_rsl_rl.py writes runs with rsl_rl's own runner and reads them the same way",
}


def _blocks() -> list[tuple[str, list[tuple[int, str]]]]:
    found = []
    for path in FILES:
        blocks = [(i, m.group(1)) for i, m in enumerate(BLOCK.finditer(path.read_text()))]
        if blocks:
            found.append((path.relative_to(ROOT).as_posix(), blocks))
    return found


def test_every_block_is_found_and_every_exclusion_names_a_block():
    found = {(name, i) for name, blocks in _blocks() for i, _ in blocks}
    assert ("README.md", 0) in found and ("docs/python-api.md", 0) in found
    assert set(NOT_RUN) <= found, set(NOT_RUN) - found


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    """What the blocks take as given: a policy and its example TensorDict, an observation, a
    retrained copy of the policy, a robot's joint names, gains and offsets; and the folder they
    run in."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4])
    retrained = copy.deepcopy(policy)
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(0.01)
    joints = [f"joint_{i}" for i in range(12)]
    given = {
        "policy": policy,
        "example_td": example,
        "obs": torch.randn(1, 3),
        "retrained": retrained,
        "JOINTS": joints,
        "DEFAULT_POS": [0.1] * 12,
        "KP": [20.0] * 12,
        "KD": [0.5] * 12,
    }
    folder, cache = (
        tmp_path_factory.mktemp("doc-examples"),
        ArtifactCache(tmp_path_factory.mktemp("doc-cache")),
    )
    # The package the blocks load, so each file's blocks run alone too; their own builds of it
    # find it in the cache.
    tdaot.build(policy, example, folder / "policy.pt2", cache=cache)
    return given, folder, cache


@pytest.mark.parametrize(("name", "blocks"), _blocks(), ids=[name for name, _ in _blocks()])
def test_the_python_examples_run(name, blocks, namespace, monkeypatch):
    given, folder, cache = namespace
    monkeypatch.chdir(folder)
    monkeypatch.setattr(tdaot, "build", functools.partial(tdaot.build, cache=cache))
    scope = {"tdaot": tdaot, "torch": torch, **given}
    ran = 0
    for index, code in blocks:
        if (name, index) in NOT_RUN:
            continue
        try:
            exec(compile(code, f"{name} block {index}", "exec"), scope)  # noqa: S102 - the docs' own code
        except Exception as error:
            raise AssertionError(
                f"{name}, python block {index}, fails: {type(error).__name__}: {error}"
            ) from error
        ran += 1
    assert ran or all((name, i) in NOT_RUN for i, _ in blocks)
