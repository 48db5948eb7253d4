"""The rehearsal's eager twin and its two parity figures (``tdaot rehearse --reference``).

1. Along the C++ trajectory: the eager policy fed, step by step, the raw observations the C++
   loop recorded (its ``obs.*`` columns), its action mapped by the contract, against the joint
   targets the package computed (``target.*``): an open-loop comparison, tight. A contract with
   a supervisor has the eager targets supervised by its eager twin (supervision.py) first.
2. The eager loop closed on its own in MuJoCo (the same terms, PD torques and control period as
   the C++ loop, loop.py), against the C++ loop's base position and joint positions after
   ``steps`` control steps: closed loops amplify float differences at contacts, so this is the
   loose figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tdaot.manifest import Manifest
from tdaot.rehearse.loop import EagerPolicy, Observer, Robot, joint_output
from tdaot.rehearse.supervision import SupervisorTwin


@dataclass(frozen=True)
class Figures:
    """``along``: the largest joint-target difference along the C++ trajectory (``rows`` steps);
    ``closed_action``: the largest on the eager loop's own way; ``base``: the base position
    difference (m, largest coordinate) and ``joints`` the largest joint position difference after
    ``steps`` control steps of the eager loop (``base`` is 0 for a fixed base). ``series``, for
    plots: ``eager_targets`` (rows x joints, the eager policy along the C++ trajectory), ``along``
    (per row, the largest joint-target difference), ``closed_base`` and ``closed_joints`` (per
    control step of the eager loop, its largest base and joint position differences from the C++
    loop at the start of that step)."""

    along: float
    rows: int
    base: float
    joints: float
    closed_action: float
    steps: int
    series: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def lines(self) -> str:
        return (
            f"largest action difference, eager fed the C++ loop's observations ({self.rows} steps): "
            f"{self.along:.2e}\n"
            f"eager loop of its own, after {self.steps} control steps: base position difference "
            f"{self.base:.2e} m, joint position difference {self.joints:.2e}; largest action difference "
            f"on the way {self.closed_action:.2e}\n"
        )


def _along(policy: EagerPolicy, rows: Sequence[dict], joints: tuple[str, ...]) -> np.ndarray:
    """The eager policy's joint targets (rows x joints) fed the C++ loop's observations."""
    # Columns obs.<key>.<element>: the contract's keys say where a key with dots ends.
    keys = {key: [c for c in rows[0] if c.startswith(f"obs.{key}.")] for key in policy.contract.inputs}
    inputs = {key: columns for key, columns in keys.items() if columns}
    twin = SupervisorTwin(policy.contract, policy.joint_key) if policy.contract.supervisor else None
    targets = []
    for row in rows:
        raw = {key: np.array([row[c] for c in columns]) for key, columns in inputs.items()}
        _, target = policy(raw)
        targets.append(twin(raw, target)[0] if twin is not None else target)
    return np.array(targets).reshape(len(rows), len(joints))


def reference(
    module,
    manifest: Manifest,
    mjcf: str,
    rows: Sequence[dict],
    command: Sequence[float] = (0.0, 0.0, 0.0),
    keyframe: str | None = None,
    steps: int = 1000,
) -> Figures:
    """The two figures for the eager ``module`` of the package ``manifest`` against a C++
    trajectory ``rows`` (tool.read_trajectory) rehearsed in ``mjcf`` at ``command``."""
    contract = manifest.contract
    key = joint_output(contract)
    joints = tuple(contract.outputs[key].names)
    policy = EagerPolicy(module, manifest)
    eager_targets = _along(policy, rows, joints)
    along = np.abs(eager_targets - [[row[f"target.{j}"] for j in joints] for row in rows]).max(axis=1)

    action = contract.outputs[key]
    kp = np.array([action.value("stiffness", i) for i in range(len(joints))], dtype=np.float64)
    kd = np.array([action.value("damping", i) for i in range(len(joints))], dtype=np.float64)
    robot = Robot(mjcf, keyframe, joints)
    observe = Observer(contract, key)
    decimation = round(contract.control_dt / robot.timestep)
    policy.reset()
    steps = min(steps, len(rows) - 1)
    twin = SupervisorTwin(contract, key) if contract.supervisor else None
    raw = np.zeros(len(joints))
    worst = 0.0
    closed_base, closed_joints = np.zeros(steps + 1), np.zeros(steps + 1)
    for step in range(steps + 1):
        # The C++ loop's state at the start of control step `step`: after as many steps as the eager one.
        if robot.base_qpos is not None:
            closed_base[step] = np.abs(robot.base_position() - [rows[step][f"base_{a}"] for a in "xyz"]).max()
        closed_joints[step] = np.abs(robot.joints()[0] - [rows[step][f"q.{j}"] for j in joints]).max()
        if step == steps:
            break
        observed = observe(robot, command, raw)
        raw, target = policy(observed)
        gain, damping = 1.0, 1.0
        if twin is not None:
            target, gain, damping = twin(observed, target)
        worst = max(worst, float(np.abs(target - [rows[step][f"target.{j}"] for j in joints]).max()))
        for _ in range(decimation):
            q, dq = robot.joints()
            robot.step(gain * kp * (target - q) - damping * kd * dq)
    series = {
        "eager_targets": eager_targets,
        "along": along,
        "closed_base": closed_base,
        "closed_joints": closed_joints,
    }
    return Figures(
        float(along.max()), len(rows), float(closed_base[-1]), float(closed_joints[-1]), worst, steps, series
    )
