"""An rsl_rl run directory as one build's inputs: the policy, its example and the contract of its
deployment file. ``tdaot build --rsl-rl RUN_DIR`` and a CI config's ``rsl_rl = "RUN_DIR"`` entry
both go through :class:`RslRlRun`; it builds nothing itself."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tdaot.contract import Contract
from tdaot.errors import InvalidArgumentError

DEPLOY_FILE = Path("params") / "deploy.yaml"


@dataclass(frozen=True)
class RslRlRun:
    """Where a run's build comes from. ``checkpoint``: a file (absolute, or relative to the
    working directory or the run) or an iteration; None: the newest. ``deploy``: the deployment
    file (deploy.yaml, or an mjlab ONNX export) for ``tdaot.Contract.from_deploy``; None: the
    run's params/deploy.yaml when there is one and ``find_deploy``. ``mjcf`` / ``joint_names``:
    the robot's joint order for a deploy.yaml (at most one of them). ``supervisor``: the
    contract carries the default supervisor of the joint targets (tdaot.trained.deploy
    default_supervisor); False: none (``tdaot build --no-supervisor``)."""

    run_dir: str
    checkpoint: str | int | None = None
    deploy: str | None = None
    mjcf: str | None = None
    joint_names: tuple[str, ...] | None = None
    find_deploy: bool = True
    supervisor: bool = True

    def __post_init__(self) -> None:
        check_joint_order(self.mjcf, self.joint_names)

    def deploy_file(self) -> str | None:
        """The deployment file this build reads, or None."""
        if self.deploy is not None:
            if not os.path.isfile(self.deploy):
                raise InvalidArgumentError(f"deploy file '{self.deploy}' does not exist")
            return self.deploy
        found = Path(self.run_dir) / DEPLOY_FILE
        return str(found) if self.find_deploy and found.is_file() else None

    def load(self):
        """(policy, example, contract or None, one line saying where the contract came from)."""
        from tdaot.trained.rsl_rl import from_rsl_rl

        policy, example = from_rsl_rl(self.run_dir, checkpoint=self.checkpoint)
        deploy = self.deploy_file()
        if deploy is None:
            if self.mjcf is not None or self.joint_names is not None:
                given = "mjcf" if self.mjcf is not None else "joint_names"
                raise InvalidArgumentError(
                    f"{given} maps a deployment file's joints, but run '{self.run_dir}' has no "
                    f"{DEPLOY_FILE} and no deploy file was given"
                )
            where = "" if not self.find_deploy else f" (no {DEPLOY_FILE} in '{self.run_dir}')"
            return policy, example, None, f"no deployment file{where}: built without a contract"
        contract = deploy_contract(
            deploy, self.joint_names, self.mjcf, _observation_key(policy.obs_groups), self.supervisor
        )
        return policy, example, contract, f"contract from {deploy}"


def check_joint_order(mjcf: str | None, joint_names: tuple[str, ...] | None) -> None:
    """Refuses a robot's joint order given twice (``mjcf`` and ``joint_names``) or names that are
    not strings, before a run is read (rsl_rl runs and any library's TrainedRun alike)."""
    if mjcf is not None and joint_names is not None:
        raise InvalidArgumentError("give the robot's joint order once: mjcf or joint_names, not both")
    if joint_names is not None and (not all(isinstance(n, str) for n in joint_names) or not any(joint_names)):
        # An empty name is a reserved slot of the robot's motor order (Unitree H1's index 9).
        raise InvalidArgumentError(
            f"joint_names {joint_names!r}: expected joint names (an empty one for a reserved slot)"
        )


def deploy_contract(
    deploy: str, joint_names: tuple[str, ...] | None, mjcf: str | None, input_key: str, supervisor: bool
) -> Contract:
    """The contract of a run's deployment file, its joints named by ``joint_names`` or ``mjcf``,
    read into the policy's observation ``input_key`` (rsl_rl runs here, any library's through
    tdaot.trained.which_run.TrainedRun)."""
    return Contract.from_deploy(
        deploy,
        joint_names=list(joint_names) if joint_names is not None else None,
        mjcf=mjcf,
        input_key=input_key,
        supervisor=supervisor,
    )


def _observation_key(groups: tuple[str, ...]) -> str:
    """The observation group a deployment file describes: the actor's one group, else "policy"
    (Isaac Lab's and unitree_rl_lab's) when the actor reads it, else its first."""
    if len(groups) != 1 and "policy" in groups:
        return "policy"
    return groups[0]
