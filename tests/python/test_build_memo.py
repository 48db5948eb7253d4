"""The build memo (tdaot.build_memo): `tdaot build` run again with nothing changed replays the
last build without importing torch; a change to anything the build read builds again."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tdaot import build_memo

# A policy whose weights come from a checkpoint (read with torch.load), and whose width comes from
# a helper module beside it: the memo must see both.
FACTORY = textwrap.dedent(
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torch import nn

    import widths

    def policy():
        layer = nn.Linear(widths.OBS, 2)
        layer.load_state_dict(torch.load("weights.pt"))
        module = TensorDictModule(layer, in_keys=["observation"], out_keys=["action"])
        return module, TensorDict({"observation": torch.zeros(3, widths.OBS)}, batch_size=[3])
    """
)
BUILD = ["build", "policy.py:policy", "-o", "out/policy.pt2", "--tuning", "throughput", "--batch", "1:16"]
MEMO_LINE = "from the build memo"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    import torch
    from torch import nn

    folder = tmp_path_factory.mktemp("memo")
    (folder / "policy.py").write_text(FACTORY)
    (folder / "widths.py").write_text("OBS = 5\n")
    torch.manual_seed(0)
    torch.save(nn.Linear(5, 2).state_dict(), folder / "weights.pt")
    return folder


def tdaot_command(folder: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # python -X importtime: the replay's imports are checked below. (-m tdaot is the console
    # script's entry, tdaot.entry.)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tdaot", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def imported(done: subprocess.CompletedProcess) -> set[str]:
    lines = done.stderr.splitlines()
    return {line.split("|")[-1].strip() for line in lines if line.startswith("import time:")}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_an_unchanged_build_is_replayed_without_torch_and_any_change_builds_again(project):
    first = tdaot_command(project, *BUILD)
    assert MEMO_LINE not in first.stdout and "compile" in first.stdout.splitlines()[0]
    package = project / "out" / "policy.pt2"
    digest = sha256(package)

    package.unlink()  # the replay puts the output back
    again = tdaot_command(project, *BUILD)
    assert again.stdout.splitlines()[0].startswith(f"built {package} (") and MEMO_LINE in again.stdout
    assert again.stdout.splitlines()[1:] == first.stdout.splitlines()[1:]  # sha256 and manifest
    assert sha256(package) == digest
    assert "torch" in imported(first) and not {"torch", "tensordict"} & imported(again)

    # Each change below is to something the build read; none changes the exported program, so each
    # rebuild comes from the artifact cache (no compile), and the next run replays it again.
    changes = [
        lambda: (project / "policy.py").write_text(FACTORY + "\n# an edit\n"),  # the factory's file
        lambda: (project / "widths.py").write_text("OBS = 5  # an edit\n"),  # a module it imports
        lambda: (project / "weights.pt").write_bytes((project / "weights.pt").read_bytes()),  # torch.load
    ]
    for change in changes:
        change()
        rebuilt = tdaot_command(project, *BUILD)
        assert MEMO_LINE not in rebuilt.stdout and "from the cache" in rebuilt.stdout, rebuilt.stdout
        assert sha256(package) == digest
        assert MEMO_LINE in tdaot_command(project, *BUILD).stdout

    # Another environment builds again (--no-cache too: test_the_memo_applies_to_single_builds_only).
    assert MEMO_LINE not in tdaot_command(project, *BUILD, env={"POLICY_VARIANT": "b"}).stdout

    # A damaged memo is not trusted: the build runs, and the package is the right one.
    for blob in (build_memo.memo_dir(BUILD) / "blobs").iterdir():  # this test's cache folder (conftest)
        blob.write_bytes(b"not a package")
    assert MEMO_LINE not in tdaot_command(project, *BUILD).stdout
    assert sha256(package) == digest


def test_the_memo_applies_to_single_builds_only():
    assert build_memo.applies(["build", "p.py:f", "-o", "p.pt2"])
    refused = (["build", "--config", "t"], ["build", "f.py:f", "-o", "x", "--no-cache"], ["inspect", "x"])
    for argv in refused:
        assert not build_memo.applies(argv), argv
    assert build_memo.memo_dir(["build", "--cache-dir", "/c"]) == Path("/c/memo")
    assert build_memo.memo_dir(["build", "--cache-dir=/d"]) == Path("/d/memo")


@pytest.mark.parametrize(
    "entry", ["not json", "[1, 2]", '{"format": 1}', '{"format": 1, "argv": ["build"], "depends": 3}']
)
def test_an_unreadable_memo_entry_is_a_miss(tmp_path, monkeypatch, entry):
    monkeypatch.setenv("TDAOT_CACHE_DIR", str(tmp_path))
    argv = ["build", "p.py:f", "-o", "p.pt2"]
    (tmp_path / "memo").mkdir()
    (tmp_path / "memo" / f"{build_memo.command_key(argv)}.json").write_text(entry)
    assert build_memo.replay(argv) is None


def test_a_memo_that_cannot_be_written_is_said_and_the_build_stands(tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("TDAOT_CACHE_DIR", str(blocked))  # memo/ cannot be made under a file
    package = tmp_path / "p.pt2"
    package.write_bytes(b"package")
    build_memo.Recorder(["build", "p.py:f", "-o", str(package)]).built([str(package)], "")
    err = capsys.readouterr().err
    assert "tdaot build: the build memo was not written" in err and str(blocked) in err
