"""The rehearsal loop's pieces in Python, twins of the C++ tool's (cpp/tools/tdaot_rehearse and
tdaot/terms.h): the robot in MuJoCo (through the mujoco Python bindings), the observation terms
computed from its state, and the eager policy stepped with its recurrent state carried. Each
computes what the C++ does, in the same order, so the two loops can be compared closely."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from tensordict import TensorDict

from tdaot.contract import Contract
from tdaot.manifest import Manifest


def joint_output(contract: Contract) -> str:
    """The key of the joint output: the one the joint terms name, else the first output with
    gains, else the first output (tdaot::terms::joint_output)."""
    for signal in contract.inputs.values():
        for term in signal.terms:
            if term.name in ("joint_pos_rel", "joint_vel_rel", "last_action"):
                return term.output or min(contract.outputs)
    with_gains = [k for k, s in contract.outputs.items() if s.stiffness is not None or s.damping is not None]
    return min(with_gains) if with_gains else min(contract.outputs)


def _values(signal, name: str) -> np.ndarray:
    return np.array([signal.value(name, i) for i in range(len(signal.names))], dtype=np.float64)


class Robot:
    """An MJCF robot driven by joint torques: its free joint the base (else a fixed base), each
    contract joint's position, velocity and motor. The C++ tool has checked the match."""

    def __init__(self, mjcf: str, keyframe: str | None, joints: tuple[str, ...]):
        import mujoco

        self.mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_path(mjcf)
        self.data = mujoco.MjData(self.model)
        if keyframe:
            mujoco.mj_resetDataKeyframe(self.model, self.data, self.model.key(keyframe).id)
        m = self.model
        free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        self.base_qpos = int(m.jnt_qposadr[free[0]]) if free else None
        self.base_dof = int(m.jnt_dofadr[free[0]]) if free else None
        self.base_body = int(m.jnt_bodyid[free[0]]) if free else (1 if m.nbody > 1 else None)
        ids = [m.joint(name).id for name in joints]
        self.qpos = np.array([m.jnt_qposadr[j] for j in ids])
        self.dof = np.array([m.jnt_dofadr[j] for j in ids])
        motors = {int(m.actuator_trnid[a, 0]): a for a in range(m.nu)}
        self.ctrl = np.array([m.actuator_ctrladr[motors[j]] for j in ids])
        self.gear = np.array([m.actuator_gear[motors[j], 0] * m.actuator_gainprm[motors[j], 0] for j in ids])
        mujoco.mj_forward(m, self.data)

    @property
    def timestep(self) -> float:
        return self.model.opt.timestep

    def base_position(self) -> np.ndarray:
        if self.base_qpos is not None:
            return self.data.qpos[self.base_qpos : self.base_qpos + 3].copy()
        return self.data.xpos[self.base_body].copy() if self.base_body else np.zeros(3)

    def base_quat(self) -> np.ndarray:
        if self.base_qpos is not None:
            return self.data.qpos[self.base_qpos + 3 : self.base_qpos + 7].copy()
        return self.data.xquat[self.base_body].copy() if self.base_body else np.array([1.0, 0, 0, 0])

    def base_velocity(self) -> tuple[np.ndarray, np.ndarray]:
        """(linear velocity in the world, angular velocity in the base frame)."""
        if self.base_dof is not None:
            return self.data.qvel[self.base_dof : self.base_dof + 3].copy(), self.data.qvel[
                self.base_dof + 3 : self.base_dof + 6
            ].copy()
        if not self.base_body:
            return np.zeros(3), np.zeros(3)
        local = np.zeros(6)
        self.mujoco.mj_objectVelocity(
            self.model, self.data, self.mujoco.mjtObj.mjOBJ_BODY, self.base_body, local, 1
        )
        world = np.zeros(3)
        self.mujoco.mju_rotVecQuat(world, local[3:], self.data.xquat[self.base_body])
        return world, local[:3]

    def joints(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.qpos[self.qpos].copy(), self.data.qvel[self.dof].copy()

    def step(self, tau: np.ndarray) -> None:
        self.data.ctrl[self.ctrl] = tau / self.gear
        self.mujoco.mj_step(self.model, self.data)


def world_to_base(quat: np.ndarray, vector: np.ndarray) -> np.ndarray:
    import mujoco

    conjugate, out = np.zeros(4), np.zeros(3)
    mujoco.mju_negQuat(conjugate, quat)
    mujoco.mju_rotVecQuat(out, np.asarray(vector, dtype=np.float64), conjugate)
    return out


class Observer:
    """Every input of observation terms computed from the robot, with each term's history (the
    last K steps, oldest first, all of them the first value after the start)."""

    def __init__(self, contract: Contract, joint_key: str):
        self.offset = _values(contract.outputs[joint_key], "offset")
        self.inputs = {key: s.terms for key, s in contract.inputs.items() if s.terms}
        self.windows: dict[tuple[str, int], np.ndarray] = {}

    def __call__(self, robot: Robot, command, raw_action: np.ndarray) -> dict[str, np.ndarray]:
        lin_vel, ang_vel = robot.base_velocity()
        quat = robot.base_quat()
        q, dq = robot.joints()
        t = robot.data.time
        out = {}
        for key, terms in self.inputs.items():
            parts = []
            for index, term in enumerate(terms):
                now = {
                    "base_lin_vel": lambda: world_to_base(quat, lin_vel),
                    "base_ang_vel": lambda: ang_vel,
                    "projected_gravity": lambda: world_to_base(quat, [0.0, 0.0, -1.0]),
                    "velocity_commands": lambda: np.asarray(command, dtype=np.float64),
                    "joint_pos_rel": lambda: q - self.offset,
                    "joint_vel_rel": lambda: dq,
                    "last_action": lambda: np.asarray(raw_action, dtype=np.float64),
                    "gait_phase": lambda term=term: _phase(t, term.params["period"]),
                }[term.name]()
                window = self.windows.get((key, index))
                window = (
                    np.tile(now, term.history)
                    if window is None
                    else np.concatenate([window[len(now) :], now])
                )
                self.windows[(key, index)] = window
                parts.append(window)
            out[key] = np.concatenate(parts)
        return out


def _phase(t: float, period: float) -> np.ndarray:
    phase = math.fmod(t, period) / period
    return np.array([math.sin(2 * math.pi * phase), math.cos(2 * math.pi * phase)])


def _tdkey(key: str):
    return tuple(key.split(".")) if "." in key else key


class EagerPolicy:
    """The eager module stepped as the package runs: raw observations mapped by the contract in
    the input's dtype, its own recurrent state carried (the manifest's pairs; the runner-carried
    tdaot.* state is the observation's, computed here in full), is_init true on the first step."""

    def __init__(self, module, manifest: Manifest):
        self.module = module
        self.contract = manifest.contract
        self.joint_key = joint_output(self.contract)
        self.specs = {spec.key: spec for spec in manifest.inputs}
        recurrent = manifest.recurrent
        pairs = recurrent.state if recurrent else ()
        self.state = {p.input: p.output for p in pairs if not p.input.startswith("tdaot.")}
        self.is_init = recurrent.is_init if recurrent else None
        self.interaction = manifest.interaction_type
        self.values: dict[str, torch.Tensor] = {}
        self.first = True
        self.reset()

    def reset(self) -> None:
        self.values = {
            k: torch.zeros((1, *self.specs[k].shape), dtype=self.specs[k].torch_dtype) for k in self.state
        }
        self.first = True

    def __call__(self, raw: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(raw action, joint targets) for one step's raw observations."""
        from tensordict.nn import InteractionType, set_interaction_type

        td = TensorDict({}, batch_size=[1])
        for key, values in raw.items():
            dtype = self.specs[key].torch_dtype
            td.set(
                _tdkey(key), self.contract.inputs[key].apply(torch.tensor(values, dtype=dtype).unsqueeze(0))
            )
        for key, value in self.values.items():
            td.set(_tdkey(key), value)
        if self.is_init:
            spec = self.specs[self.is_init]
            td.set(_tdkey(self.is_init), torch.full((1, *spec.shape), self.first, dtype=torch.bool))
        with torch.no_grad(), set_interaction_type(InteractionType(self.interaction)):
            out = self.module(td)
            for key, next_key in self.state.items():
                self.values[key] = out.get(_tdkey(next_key)).clone()
            action = out.get(_tdkey(self.joint_key))
            target = self.contract.outputs[self.joint_key].apply(action)
        self.first = False
        return action[0].double().numpy(), target[0].double().numpy()
