"""tdaot.trained.which_run: which library wrote a run, from its files alone; what it refuses.

The checkpoints here are dicts with each library's top-level keys (enough to tell them apart;
each library's own runs are read in test_rsl_rl, test_skrl, test_rl_games and test_sb3)."""

from __future__ import annotations

import zipfile

import pytest
import torch

import tdaot
from tdaot.trained.run import RslRlRun
from tdaot.trained.which_run import TrainedRun, detect_run


def _save(path, keys):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({key: {} for key in keys}, path)


@pytest.mark.parametrize(
    ("files", "library", "evidence"),
    [
        ({"model_10.pt": ["actor_state_dict"]}, "rsl_rl", "1 model_<iteration>.pt"),
        ({"checkpoints/agent_5.pt": ["policy"]}, "skrl", "1 skrl checkpoint(s) (agent_5.pt)"),
        ({"best_agent.pt": ["policy"]}, "skrl", "(best_agent.pt)"),
        ({"nn/go.pth": ["model"]}, "rl_games", "nn/ with 1 .pth (go.pth)"),
    ],
)
def test_a_directory_is_recognised_by_its_files(tmp_path, files, library, evidence):
    for name, keys in files.items():
        _save(tmp_path / name, keys)
    kind = detect_run(tmp_path)
    assert kind.library == library and evidence in kind.evidence


def test_a_file_is_recognised_by_its_keys(tmp_path):
    for keys, library in (
        (["model_state_dict", "iter"], "rsl_rl"),
        (["policy", "value"], "skrl"),
        (["model", "epoch"], "rl_games"),
    ):
        _save(tmp_path / "x.pt", keys)
        assert detect_run(tmp_path / "x.pt").library == library
    with zipfile.ZipFile(tmp_path / "m.zip", "w") as archive:
        archive.writestr("data", "{}")
        archive.writestr("policy.pth", b"")
    assert detect_run(tmp_path / "m.zip").library == "sb3"


def test_what_is_not_a_run_is_named(tmp_path):
    with pytest.raises(tdaot.InvalidArgumentError, match=r"run '.*missing' does not exist"):
        detect_run(tmp_path / "missing")
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"is no run directory tdaot recognises: expected model_"
    ):
        detect_run(tmp_path)
    _save(tmp_path / "x.pt", ["weights"])
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"top-level keys 'weights' are no library's checkpoint tdaot knows"
    ):
        detect_run(tmp_path / "x.pt")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("readme", "")
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"zip without data and policy.pth \(found 'readme'\)"
    ):
        detect_run(tmp_path / "other.zip")
    (tmp_path / "bad.zip").write_bytes(b"no zip")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"is a .zip but not a readable zip"):
        detect_run(tmp_path / "bad.zip")


def test_a_directory_of_two_libraries_is_refused(tmp_path):
    _save(tmp_path / "model_1.pt", ["actor_state_dict"])
    _save(tmp_path / "nn" / "go.pth", ["model"])
    with pytest.raises(
        tdaot.InvalidArgumentError,
        match=r"holds the files of several libraries \(rsl_rl: 1 model_<iteration>.pt; rl_games: nn/ with",
    ):
        tdaot.from_run(tmp_path)


@pytest.mark.parametrize("run_class", [TrainedRun, RslRlRun])
def test_a_joint_order_given_twice_or_not_as_names_is_refused_before_the_run_is_read(tmp_path, run_class):
    missing = str(tmp_path / "no-such-run")  # not read: the refusal comes first
    with pytest.raises(tdaot.InvalidArgumentError, match="joint order once: mjcf or joint_names, not both"):
        run_class(missing, mjcf="robot.xml", joint_names=("hip",))
    with pytest.raises(tdaot.InvalidArgumentError, match=r"joint_names \(3,\): expected joint names"):
        run_class(missing, joint_names=(3,))
