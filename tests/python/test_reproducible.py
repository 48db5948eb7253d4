"""A package is the same bytes whenever its compiled code is: rebuilding one policy three times
in one process and once in another gives one sha256 (inductor's appended build-command comments
in the packaged sources used to make every rebuild differ, tdaot.builder.package)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot.builder.package import _reproducible

ROOT = Path(__file__).resolve().parents[2]

# A tiny one-model package: the rebuilds cost one small compile each.
BUILD = """
import torch, tdaot
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
torch.manual_seed(0)
policy = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["act"])
td = TensorDict({"obs": torch.zeros(1, 3)}, batch_size=[1])
tdaot.build(policy, td, PATH, tuning="throughput", batch=(1, 4))
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # four builds
def test_rebuilds_in_one_process_and_another_give_one_sha256(tmp_path):
    torch.manual_seed(0)
    policy = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["act"])
    td = TensorDict({"obs": torch.zeros(1, 3)}, batch_size=[1])
    digests = set()
    for i in range(3):
        path = tmp_path / f"p{i}.pt2"
        tdaot.build(policy, td, path, tuning="throughput", batch=(1, 4))
        digests.add(sha256(path))
    other = tmp_path / "other.pt2"
    subprocess.run([sys.executable, "-c", BUILD.replace("PATH", repr(str(other)))], check=True, cwd=ROOT)
    digests.add(sha256(other))
    assert len(digests) == 1


def test_build_commands_are_dropped_from_sources_only():
    source = b"int main() {}\n\n// Compile cmd\n// g++ a.cpp -o a.o\n// Link cmd\n// g++ a.o -o a.so\n"
    twice = source + b"\n// Compile cmd\n// g++ a.cpp -o a.o\n// Link cmd\n// g++ a.o -o a.so\n"
    assert _reproducible("x/k.cpp", source) == b"int main() {}\n"
    assert _reproducible("x/k.cpp", twice) == b"int main() {}\n"
    assert _reproducible("x/k.so", twice) == twice  # libraries are never touched
