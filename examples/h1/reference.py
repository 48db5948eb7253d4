"""The H1 rehearsal's eager twin: the same loop as tdaot-rehearse (cpp/tools/tdaot_rehearse), in
Python with MuJoCo's Python bindings (the mujoco-core wheel carries them) and the eager torchrl
policy of build_h1.py, compared with the C++ loop's trajectory file::

    python examples/h1/reference.py --h1 ../shared/robots/unitree_h1 --trajectory dist/h1_walk.csv

Reports (1) the largest action difference along the C++ trajectory: the eager policy fed the
observations the C++ loop recorded, its output mapped as the contract says, against the joint
targets the package computed; (2) the base position difference after --steps control steps of
the eager loop of its own, closed in MuJoCo, against the C++ loop's.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_h1  # noqa: E402


def _terms(contract):
    signal = contract.inputs["observation"]
    return signal, list(signal.terms)


def observe(model, data, contract, command, raw_action, t):
    """The raw observation (before the contract's scale), as tdaot-rehearse computes it."""
    import mujoco

    _, terms = _terms(contract)
    joints = contract.outputs["action"].names
    offset = np.asarray(contract.outputs["action"].offset, dtype=np.float64)
    qpos_adr = [model.joint(name).qposadr[0] for name in joints]
    dof_adr = [model.joint(name).dofadr[0] for name in joints]
    quat = data.qpos[3:7].copy()
    conjugate = np.zeros(4)
    mujoco.mju_negQuat(conjugate, quat)
    parts = []
    for term in terms:
        if term.name == "base_ang_vel":
            parts.append(data.qvel[3:6])
        elif term.name == "base_lin_vel":
            v = np.zeros(3)
            mujoco.mju_rotVecQuat(v, data.qvel[0:3].copy(), conjugate)
            parts.append(v)
        elif term.name == "projected_gravity":
            g = np.zeros(3)
            mujoco.mju_rotVecQuat(g, np.array([0.0, 0.0, -1.0]), conjugate)
            parts.append(g)
        elif term.name == "velocity_commands":
            parts.append(np.asarray(command, dtype=np.float64))
        elif term.name == "joint_pos_rel":
            parts.append(data.qpos[qpos_adr] - offset)
        elif term.name == "joint_vel_rel":
            parts.append(data.qvel[dof_adr])
        elif term.name == "last_action":
            parts.append(np.asarray(raw_action, dtype=np.float64))
        elif term.name == "gait_phase":
            period = term.params["period"]
            phase = math.fmod(t, period) / period
            parts.append(np.array([math.sin(2 * math.pi * phase), math.cos(2 * math.pi * phase)]))
        else:
            raise ValueError(f"term {term.name!r}")
    return np.concatenate(parts)


class Eager:
    """The torchrl policy stepped one control step at a time, its state carried."""

    def __init__(self, h1: str, contract):
        self.policy = build_h1.torchrl_policy(torch.jit.load(os.path.join(h1, "motion.pt")).eval())
        self.td = build_h1.example_input()
        self.obs_signal = contract.inputs["observation"]
        self.action_signal = contract.outputs["action"]

    def __call__(self, raw_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(raw action, joint targets) for a raw observation."""
        obs = torch.tensor(raw_obs, dtype=torch.float32).unsqueeze(0)
        with torch.no_grad():
            self.td["observation"] = self.obs_signal.apply(obs)
            out = self.policy(self.td.clone())
            self.td["recurrent_state_h"] = out["next", "recurrent_state_h"]
            self.td["recurrent_state_c"] = out["next", "recurrent_state_c"]
            self.td["is_init"] = torch.zeros(1, 1, dtype=torch.bool)
            raw = out["action"]
            target = self.action_signal.apply(raw)
        return raw[0].double().numpy(), target[0].double().numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--h1", default="../shared/robots/unitree_h1")
    parser.add_argument("--trajectory", default="dist/h1_walk.csv", help="tdaot-rehearse --trajectory")
    parser.add_argument("--steps", type=int, default=1000, help="control steps of the eager loop")
    parser.add_argument("--command", default="0.5,0,0")
    args = parser.parse_args(argv)
    import mujoco

    contract = build_h1.contract()
    command = [float(c) for c in args.command.split(",")]
    joints = contract.outputs["action"].names
    with open(args.trajectory, newline="") as file:
        rows = list(csv.DictReader(file))
    obs_columns = [c for c in rows[0] if c.startswith("obs.observation.")]

    # (1) the eager policy along the C++ trajectory.
    eager = Eager(args.h1, contract)
    worst = 0.0
    for row in rows:
        _, target = eager(np.array([float(row[c]) for c in obs_columns]))
        cpp = np.array([float(row[f"target.{j}"]) for j in joints])
        worst = max(worst, float(np.abs(target - cpp).max()))
    print(
        f"largest action difference, eager fed the C++ loop's observations ({len(rows)} steps): {worst:.2e}"
    )

    # (2) the eager loop of its own.
    model = mujoco.MjModel.from_xml_path(os.path.join(args.h1, "scene.xml"))
    data = mujoco.MjData(model)
    decimation = round(contract.control_dt / model.opt.timestep)
    action = contract.outputs["action"]
    kp = np.asarray(action.stiffness, dtype=np.float64)
    kd = np.asarray(action.damping, dtype=np.float64)
    qpos_adr = [model.joint(n).qposadr[0] for n in joints]
    dof_adr = [model.joint(n).dofadr[0] for n in joints]
    ctrl = [model.actuator(n).id for n in joints]  # H1's motors are named as their joints
    eager = Eager(args.h1, contract)
    raw = np.zeros(len(joints))
    steps = min(args.steps, len(rows) - 1)
    worst_closed = 0.0
    for step in range(steps):
        row = rows[step]
        raw, target = eager(observe(model, data, contract, command, raw, data.time))
        worst_closed = max(
            worst_closed, float(np.abs(target - [float(row[f"target.{j}"]) for j in joints]).max())
        )
        for _ in range(decimation):
            tau = kp * (target - data.qpos[qpos_adr]) - kd * data.qvel[dof_adr]
            data.ctrl[ctrl] = tau
            mujoco.mj_step(model, data)
    # The C++ loop's base at the start of control step `steps`: after as many steps as the eager one.
    cpp_base = np.array([float(rows[steps][f"base_{a}"]) for a in "xyz"])
    path = float(np.abs(data.qpos[0:3] - cpp_base).max())
    print(
        f"eager loop of its own: base position difference after {steps} control steps {path:.2e} m; "
        f"largest action difference along the way {worst_closed:.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
