"""The eager twin of the runner's supervisor of the joint targets (cpp/src/core/run/supervisor.cpp,
docs/contract.md "Supervisor"), for the rehearsal's eager loop (reference.py): the same soft
start, limits and fallbacks computed in Python from the same raw observations, so the eager loop
drives the robot as the package does and the two can be compared closely. The runner's
``max_rate_limited_steps`` is left out: the eager loop has no envelope to rate limit it."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from tdaot.contract import Contract


def _per_joint(value, n: int, missing: float) -> np.ndarray:
    if value is None:
        return np.full(n, missing)
    return np.array(value if isinstance(value, tuple) else (value,) * n, dtype=np.float64)


class SupervisorTwin:
    """One row's supervisor of ``contract``'s supervisor (its joint output ``joint_key``)."""

    def __init__(self, contract: Contract, joint_key: str):
        s = contract.supervisor
        signal = contract.outputs[joint_key]
        n = len(signal.names)
        self.offset = _per_joint(signal.offset, n, 0.0)
        self.low = _per_joint(s.low, n, -math.inf) + s.margin
        self.high = _per_joint(s.high, n, math.inf) - s.margin
        self.step_cap = _per_joint(s.blend_max_velocity, n, math.inf) * contract.control_dt
        self.max_velocity = _per_joint(s.max_velocity, n, math.inf)
        self.max_error = np.full(n, math.inf)  # max_torque / stiffness, rad (a stiffness of 0: no cap)
        if s.max_torque is not None:
            with np.errstate(divide="ignore"):
                self.max_error = _per_joint(s.max_torque, n, math.inf) / _per_joint(signal.stiffness, n, 0.0)
        self.blend_steps = math.ceil(s.blend_seconds / contract.control_dt - 1e-9)
        self.start_gain = s.start_gain_fraction
        self.max_tilt = s.max_tilt
        self.damp = s.fallback == "damp"
        self.slots = {
            name: self._slot(contract, joint_key, name) for name in ("joint_pos_rel", "joint_vel_rel")
        }
        self.slots["projected_gravity"] = self._slot(contract, None, "projected_gravity")
        rest = signal.offset if not isinstance(signal.offset, float) else (signal.offset,) * n
        low, high = _per_joint(signal.low, n, -math.inf), _per_joint(signal.high, n, math.inf)
        self.rest = np.clip(np.clip(np.array(rest, dtype=np.float64), low, high), self.low, self.high)
        self.reset()

    @staticmethod
    def _slot(contract: Contract, joint_key: str | None, name: str) -> tuple[str, int, int] | None:
        """(input key, first element, size) of term ``name``'s newest step (the first input by key)."""
        for key in sorted(contract.inputs):
            at = 0
            for term in contract.inputs[key].terms:
                target = term.output or min(contract.outputs)
                if term.name == name and (joint_key is None or target == joint_key):
                    return key, at + (term.history - 1) * term.size, term.size
                at += term.size * term.history
        return None

    def reset(self) -> None:
        self.mode = "blending" if self.blend_steps > 0 else "running"
        self.steps = 0
        self.safe = self.rest.copy()
        self.last = self.rest.copy()
        self.start = self.rest.copy()

    def _read(self, raw: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
        slot = self.slots[name]
        if slot is None:
            return None
        key, first, size = slot
        return np.asarray(raw[key][first : first + size], dtype=np.float64)

    def __call__(self, raw: Mapping[str, np.ndarray], target: np.ndarray) -> tuple[np.ndarray, float, float]:
        """(the supervised targets, gain scale, damping scale) for one step's raw observations and
        the policy's mapped targets."""
        positions = self._read(raw, "joint_pos_rel")
        q = positions + self.offset if positions is not None else None
        if self.mode in ("running", "blending"):
            finite = all(np.isfinite(v).all() for v in raw.values()) and np.isfinite(target).all()
            velocity = self._read(raw, "joint_vel_rel")
            gravity = self._read(raw, "projected_gravity")
            out = not finite
            if not out and velocity is not None and np.isfinite(self.max_velocity).any():
                out = bool((np.abs(velocity) > self.max_velocity).any())
            if not out and gravity is not None and self.max_tilt > 0:
                norm = float(np.linalg.norm(gravity))
                tilt = math.acos(max(-1.0, min(1.0, -gravity[2] / norm))) if norm > 0 else math.inf
                out = tilt > self.max_tilt
            if out:
                self.mode = "damped" if self.damp else "held"
        self.steps += 1
        if self.mode in ("held", "damped"):
            chosen = self.safe.copy()
            if self.mode == "damped":
                measured = np.isfinite(q)
                chosen[measured] = np.clip(q[measured], self.low[measured], self.high[measured])
            self.last = chosen
            return chosen, (0.0 if self.mode == "damped" else 1.0), 1.0
        alpha = 1.0
        chosen = np.array(target, dtype=np.float64)  # a copy: clipped in place below
        if self.mode == "blending":
            if self.steps == 1:
                self.start = q.copy()
                self.last = q.copy()
            alpha = min(1.0, self.steps / self.blend_steps)
            desired = self.start + alpha * (chosen - self.start)
            capped = np.clip(desired, self.last - self.step_cap, self.last + self.step_cap)
            reached = bool((capped == chosen).all())
            chosen = capped
        if q is not None and np.isfinite(self.max_error).any():  # the spring torque at most max_torque
            measured = np.isfinite(q)
            chosen[measured] = np.clip(
                chosen[measured], (q - self.max_error)[measured], (q + self.max_error)[measured]
            )
        chosen = np.clip(chosen, self.low, self.high)
        self.safe = chosen.copy()
        self.last = chosen.copy()
        if self.mode == "blending":
            scale = self.start_gain + (1.0 - self.start_gain) * alpha
            if alpha >= 1.0 and reached:
                self.mode = "running"
            return chosen, scale, scale
        return chosen, 1.0, 1.0
