"""``tdaot.from_run`` and ``tdaot build --run``: which library wrote a run, and its policy.

Each library leaves its own files, and these tell them apart:

=========  ===============================================================================
rsl_rl     ``model_<iteration>.pt`` (a file holding ``actor_state_dict`` or ``model_state_dict``)
skrl       ``checkpoints/agent_<timestep>.pt`` or ``best_agent.pt`` (a file holding ``policy``)
rl_games   ``nn/<name>.pth`` (a file holding ``model``)
sb3        ``model.zip`` or ``<prefix>_<steps>_steps.zip`` (a zip holding ``data`` and ``policy.pth``)
=========  ===============================================================================

A directory with the files of two libraries, or of none, is refused naming what was found. The
readers themselves (:mod:`tdaot.trained.rsl_rl`, ``skrl``, ``rl_games``, ``sb3``) choose the
checkpoint inside a directory; :class:`TrainedRun` adds the contract of a deployment file.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tdaot.errors import InvalidArgumentError
from tdaot.trained.run import RslRlRun, check_joint_order, deploy_contract
from tdaot.trained.trainer_files import key_names, load_tensors

LIBRARIES = ("rsl_rl", "skrl", "rl_games", "sb3")
_RSL_RL = re.compile(r"model_\d+\.pt")
_SKRL = re.compile(r"agent_\d+\.pt|best_agent\.pt")
_SB3 = re.compile(r"model\.zip|.*_\d+_steps\.zip")
_CHECKPOINT_KEYS = {  # a checkpoint's top-level key -> the library that saves it
    "actor_state_dict": "rsl_rl",
    "model_state_dict": "rsl_rl",
    "policy": "skrl",
    "model": "rl_games",
}


@dataclass(frozen=True)
class RunKind:
    """Which library wrote a run (one of :data:`LIBRARIES`) and what said so."""

    library: str
    evidence: str


def _file_kind(path: Path) -> RunKind:
    if path.suffix == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
        except (zipfile.BadZipFile, OSError) as err:
            raise InvalidArgumentError(f"'{path}' is a .zip but not a readable zip: {err}") from None
        if {"data", "policy.pth"} <= names:
            return RunKind("sb3", f"'{path.name}' holds data and policy.pth (a Stable-Baselines3 save)")
        raise InvalidArgumentError(
            f"'{path}' is a zip without data and policy.pth (found {key_names(names)}): not a "
            "Stable-Baselines3 save"
        )
    checkpoint = load_tensors(path, "trained")
    keys = list(checkpoint) if isinstance(checkpoint, Mapping) else []
    found = {_CHECKPOINT_KEYS[k] for k in keys if k in _CHECKPOINT_KEYS}
    if len(found) == 1:
        library = found.pop()
        return RunKind(library, f"'{path.name}' holds {key_names(k for k in keys if k in _CHECKPOINT_KEYS)}")
    raise InvalidArgumentError(
        f"'{path}': top-level keys {key_names(keys)} are no library's checkpoint tdaot knows; expected "
        "actor_state_dict or model_state_dict (rsl_rl), policy (skrl), model (rl_games), or a "
        "Stable-Baselines3 zip"
    )


def _directory_kind(path: Path) -> RunKind:
    def matching(folder: Path, pattern: re.Pattern) -> list[str]:
        if not folder.is_dir():
            return []
        return sorted(e.name for e in folder.iterdir() if pattern.fullmatch(e.name) and e.is_file())

    evidence = {}
    if names := matching(path, _RSL_RL):
        evidence["rsl_rl"] = f"{len(names)} model_<iteration>.pt"
    if names := matching(path / "checkpoints", _SKRL) or matching(path, _SKRL):
        evidence["skrl"] = f"{len(names)} skrl checkpoint(s) ({', '.join(names[:3])})"
    if (path / "nn").is_dir() and (names := sorted(p.name for p in (path / "nn").glob("*.pth"))):
        evidence["rl_games"] = f"nn/ with {len(names)} .pth ({', '.join(names[:3])})"
    if names := matching(path, _SB3):
        evidence["sb3"] = f"{', '.join(names[:3])} (Stable-Baselines3 saves)"
    if len(evidence) == 1:
        ((library, why),) = evidence.items()
        return RunKind(library, why)
    if evidence:
        said = "; ".join(f"{library}: {why}" for library, why in evidence.items())
        raise InvalidArgumentError(
            f"run directory '{path}' holds the files of several libraries ({said}); give the checkpoint "
            "file itself"
        )
    raise InvalidArgumentError(
        f"'{path}' is no run directory tdaot recognises: expected model_<iteration>.pt (rsl_rl), "
        "checkpoints/agent_<timestep>.pt (skrl), nn/<name>.pth (rl_games) or model.zip (Stable-Baselines3)"
    )


def detect_run(path: str | os.PathLike) -> RunKind:
    """Which library wrote ``path`` (a run directory or a checkpoint file)."""
    source = Path(path)
    if source.is_file():
        return _file_kind(source)
    if source.is_dir():
        return _directory_kind(source)
    raise InvalidArgumentError(f"run '{source}' does not exist")


def load_run(path: str | os.PathLike, kind: RunKind):
    """(policy, example) of the run by the reader of ``kind.library``."""
    if kind.library == "rsl_rl":
        from tdaot.trained.rsl_rl import from_rsl_rl

        return from_rsl_rl(path)
    if kind.library == "skrl":
        from tdaot.trained.skrl import from_skrl

        return from_skrl(path)
    if kind.library == "rl_games":
        from tdaot.trained.rl_games import from_rl_games

        return from_rl_games(path)
    from tdaot.trained.sb3 import from_sb3

    return from_sb3(path)


def from_run(path: str | os.PathLike):
    """The deterministic actor of a run of rsl_rl, skrl, rl_games or Stable-Baselines3 and an
    example TensorDict of batch 1, as that library's ``from_*`` reads it. Which library wrote the
    run is recognised from its files (:func:`detect_run`) and said on the policy:
    ``policy.trained_with`` (a :class:`RunKind`)."""
    kind = detect_run(path)
    policy, example = load_run(path, kind)
    policy.trained_with = kind
    return policy, example


@dataclass(frozen=True)
class TrainedRun:
    """A run of any library as one build's inputs (``tdaot build --run``): its policy, example,
    and the contract of ``deploy`` (deploy.yaml or an mjlab ONNX export) where given, with the
    default supervisor of its joint targets unless ``supervisor`` is False (``--no-supervisor``).
    An rsl_rl run goes through :class:`tdaot.trained.run.RslRlRun` (its params/deploy.yaml found
    there)."""

    path: str
    checkpoint: str | int | None = None
    deploy: str | None = None
    mjcf: str | None = None
    joint_names: tuple[str, ...] | None = None
    find_deploy: bool = True
    supervisor: bool = True

    def __post_init__(self) -> None:
        check_joint_order(self.mjcf, self.joint_names)

    def load(self):
        """(policy, example, contract or None, one line saying what was read)."""
        kind = detect_run(self.path)
        said = f"{kind.library} run ({kind.evidence})"
        if kind.library == "rsl_rl":
            run = RslRlRun(
                self.path, checkpoint=self.checkpoint, deploy=self.deploy, mjcf=self.mjcf,
                joint_names=self.joint_names, find_deploy=self.find_deploy, supervisor=self.supervisor,
            )  # fmt: skip
            policy, example, contract, note = run.load()
            policy.trained_with = kind
            return policy, example, contract, f"{said}; {note}"
        if self.checkpoint is not None:
            raise InvalidArgumentError(
                f"checkpoint={self.checkpoint!r} chooses an rsl_rl iteration; for a {kind.library} run give "
                "the checkpoint file itself as the run"
            )
        policy, example = load_run(self.path, kind)
        policy.trained_with = kind
        if self.deploy is None:
            if self.mjcf is not None or self.joint_names is not None:
                given = "mjcf" if self.mjcf is not None else "joint_names"
                raise InvalidArgumentError(
                    f"{given} maps a deployment file's joints, but no deploy file was given"
                )
            return policy, example, None, f"{said}; no deployment file: built without a contract"
        if not os.path.isfile(self.deploy):
            raise InvalidArgumentError(f"deploy file '{self.deploy}' does not exist")
        # The one observation of an MLP actor.
        contract = deploy_contract(
            self.deploy, self.joint_names, self.mjcf, policy.in_keys[0], self.supervisor
        )
        return policy, example, contract, f"{said}; contract from {self.deploy}"
