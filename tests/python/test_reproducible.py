"""A package is the same bytes whenever its compiled code is: rebuilding one policy three times
in one process and once in another gives one sha256 (inductor's appended build-command comments
in the packaged sources used to make every rebuild differ, tdaot.builder.package), and two
processes with two inductor cache paths give one sha256 too (tdaot.builder.inductor_dir), and
compiles served by ccache make the bytes compiles without it make (tdaot.builder.compiler_cache)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot.builder.inductor_dir import build_cache_dir, private_dir
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


def ccache_stats(folder: Path) -> dict[str, int]:
    shown = subprocess.run(
        ["ccache", "--print-stats"],
        env={**os.environ, "CCACHE_DIR": str(folder)},
        capture_output=True,
        text=True,
    )
    return {name: int(value) for name, value in (line.split("\t") for line in shown.stdout.splitlines())}


@pytest.mark.slow  # four builds
def test_rebuilds_in_one_process_and_another_give_one_sha256(tmp_path, monkeypatch):
    # The rebuilds go through ccache (a cache of their own): the first compiles, the others are
    # served from it; the other process compiles without ccache. One sha256 for all of them.
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    monkeypatch.delenv("TDAOT_CCACHE", raising=False)
    torch.manual_seed(0)
    policy = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["act"])
    td = TensorDict({"obs": torch.zeros(1, 3)}, batch_size=[1])
    digests, stats = set(), []
    for i in range(3):
        path = tmp_path / f"p{i}.pt2"
        tdaot.build(policy, td, path, tuning="throughput", batch=(1, 4), cache=False)
        digests.add(sha256(path))
        stats.append(ccache_stats(tmp_path / "ccache") if shutil.which("ccache") else None)
    other = tmp_path / "other.pt2"
    env = {**os.environ, "TDAOT_CCACHE": "0"}
    subprocess.run(
        [sys.executable, "-c", BUILD.replace("PATH", repr(str(other)))], check=True, cwd=ROOT, env=env
    )
    digests.add(sha256(other))
    assert len(digests) == 1
    if stats[0] is not None:  # `make test` installs ccache
        compiled = stats[0]["cache_miss"]
        assert compiled >= 2 and stats[0]["direct_cache_hit"] == 0  # the wrapper and its kernels
        assert (stats[2]["cache_miss"], stats[2]["direct_cache_hit"]) == (compiled, 2 * compiled)


def test_build_commands_are_dropped_from_sources_only():
    source = b"int main() {}\n\n// Compile cmd\n// g++ a.cpp -o a.o\n// Link cmd\n// g++ a.o -o a.so\n"
    twice = source + b"\n// Compile cmd\n// g++ a.cpp -o a.o\n// Link cmd\n// g++ a.o -o a.so\n"
    assert _reproducible("x/k.cpp", source) == b"int main() {}\n"
    assert _reproducible("x/k.cpp", twice) == b"int main() {}\n"
    assert _reproducible("x/k.so", twice) == twice  # libraries are never touched


@pytest.mark.slow  # two builds
def test_two_inductor_cache_paths_give_one_sha256(tmp_path):
    # Two processes as two users or CI runners would run them: another user name (in inductor's
    # precompiled headers' folder), TORCHINDUCTOR_CACHE_DIR (of another length), TMPDIR and working
    # folder each, and no tdaot cache to copy from.
    digests = []
    for name in ("a", "cache-path-of-another-length"):
        folder = tmp_path / name
        (folder / "tmp").mkdir(parents=True)
        env = {
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
            "TMPDIR": str(folder / "tmp"),
            "TDAOT_CACHE_DIR": str(folder / "tdaot-cache"),
            "LOGNAME": f"user-{name}",
            "USER": f"user-{name}",
        }
        package = folder / "p.pt2"
        subprocess.run(
            [sys.executable, "-c", BUILD.replace("PATH", repr(str(package)))], check=True, cwd=folder, env=env
        )
        digests.append(sha256(package))
    assert digests[0] == digests[1]


def test_the_build_cache_must_be_a_private_directory(tmp_path):
    assert private_dir(str(tmp_path / "new")) is None
    assert oct((tmp_path / "new").stat().st_mode & 0o777) == "0o700"
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open").chmod(0o755)
    assert private_dir(str(tmp_path / "open")) == "others may write or read it (mode 755, expected 700)"
    (tmp_path / "link").symlink_to(tmp_path / "new")
    assert private_dir(str(tmp_path / "link")) == "it is not a directory"
    (tmp_path / "file").write_text("")
    assert private_dir(str(tmp_path / "file")) == "it is not a directory"


def test_a_build_cache_that_is_not_private_is_a_warning_and_inductors_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (tmp_path / "shared").mkdir(mode=0o777)
    (tmp_path / "shared").chmod(0o777)
    with pytest.warns(tdaot.ReproducibilityWarning, match=r"others may write or read it \(mode 777"):
        with build_cache_dir("k" * 64, str(tmp_path / "shared")) as used:
            assert used == str(tmp_path / "inductor")
    with build_cache_dir("k" * 64, str(tmp_path / "private")) as used:
        assert used == str(tmp_path / "private" / ("k" * 32)) == os.environ["TORCHINDUCTOR_CACHE_DIR"]
        Path(used, "kernel.so").write_bytes(b"")
    assert not Path(used).exists()  # the package holds what the compile made
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")  # restored
