"""The supervisor of a contract's joint targets (:class:`Supervisor`, the contract's
``supervisor``): what the runner does to the targets between the policy and the motors, on every
way to run (Session, Binding, the lite runtime), allocation-free: a soft start after activation or
a reset, the joint limits, and a fallback when the robot leaves the policy's domain
(docs/contract.md, "Supervisor"). This module holds the dataclass a user writes and its checks
against a contract's signals; the C++ twin is cpp/src/core/manifest/contract_supervisor.cpp (the
rules) and cpp/src/core/run/supervisor.cpp (the run)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Union

from tdaot.contract_terms import plain_value
from tdaot.errors import ContractError

Values = Union[float, tuple[float, ...]]
#: The fallbacks a supervisor may name: ``hold`` (the last safe targets) and ``damp`` (the
#: measured positions, stiffness scale 0, the contract's damping).
FALLBACKS = ("hold", "damp")
_LIST_FIELDS = ("blend_max_velocity", "low", "high", "max_velocity", "max_torque")


@dataclass(frozen=True)
class Supervisor:
    """The supervisor of a joint output signal (``output``; None: the first output signal):

    - soft start: for ``blend_seconds`` after activation or ``reset()``, the targets move from
      the measured joint positions (the input's ``joint_pos_rel`` term) to the policy's, each at
      most ``blend_max_velocity`` rad/s; the gains' scale ramps from ``start_gain_fraction`` to 1;
    - limits: each target clipped to ``[low + margin, high - margin]`` (one number or one per
      joint) and, running or blending, to within ``max_torque / stiffness`` of the measured
      position (the PD's spring torque at full gains at most ``max_torque`` N m);
    - out of domain: a measured joint velocity (``joint_vel_rel``) over ``max_velocity``, a base
      tilt (from ``projected_gravity``) over ``max_tilt`` rad, a non-finite input or output, or
      ``max_rate_limited_steps`` consecutive rate-limited steps switch the row to ``fallback``
      (``hold`` or ``damp``) until ``reset()``.

    0 (or None) leaves a check out."""

    output: str | None = None
    blend_seconds: float = 0.0
    blend_max_velocity: Values | None = None
    start_gain_fraction: float = 1.0
    low: Values | None = None
    high: Values | None = None
    margin: float = 0.0
    max_velocity: Values | None = None
    max_torque: Values | None = None
    max_tilt: float = 0.0
    max_rate_limited_steps: int = 0
    fallback: str = "hold"

    def __post_init__(self) -> None:
        for name in (*_LIST_FIELDS, "blend_seconds", "start_gain_fraction", "margin", "max_tilt"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, plain_value(value))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items() if v is not None}
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "contract supervisor") -> Supervisor:
        """The Supervisor of a dict as :meth:`to_dict` writes it (a manifest's, a TOML table)."""
        if not isinstance(data, Mapping):
            raise ContractError(f"{where}: expected a table of supervisor fields, got {data!r}", "supervisor")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ContractError(
                f"{where}: unknown field {unknown[0]!r} (known: {' '.join(known)})", "supervisor"
            )
        return cls(**{k: v for k, v in data.items() if v is not None})

    def describe(self) -> list[str]:
        """The supervisor as indented lines (tdaot inspect)."""
        parts = [f"output {self.output}"] if self.output else []
        if self.blend_seconds:
            parts.append(f"soft start {self.blend_seconds:g} s from gain {self.start_gain_fraction:g}")
            if self.blend_max_velocity is not None:
                parts.append(f"blend_max_velocity {_short(self.blend_max_velocity)} rad/s")
        if self.low is not None:
            parts.append(f"low {_short(self.low)}")
        if self.high is not None:
            parts.append(f"high {_short(self.high)}")
        if self.margin:
            parts.append(f"margin {self.margin:g}")
        if self.max_velocity is not None:
            parts.append(f"max_velocity {_short(self.max_velocity)} rad/s")
        if self.max_torque is not None:
            parts.append(f"max_torque {_short(self.max_torque)} N m")
        if self.max_tilt:
            parts.append(f"max_tilt {self.max_tilt:g} rad")
        if self.max_rate_limited_steps:
            parts.append(f"max_rate_limited_steps {self.max_rate_limited_steps}")
        parts.append(f"fallback {self.fallback}")
        return ["  supervisor " + ", ".join(parts)]


def _short(values: Values) -> str:
    if not isinstance(values, tuple):
        return f"{values:g}"
    shown = ", ".join(f"{v:g}" for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def check_supervisor(supervisor: Any, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> Supervisor:
    """``supervisor`` checked against a contract's checked signals (the C++ parser's rules):
    ContractError ``contract supervisor: field 'low': ...`` naming the field and the value."""

    def fail(name: str, problem: str):
        raise ContractError(f"contract supervisor: field {name!r}: {problem}", "supervisor")

    if not isinstance(supervisor, Supervisor):
        raise ContractError(
            f"contract field 'supervisor': expected a tdaot.Supervisor, got {type(supervisor).__name__}",
            "supervisor",
        )
    s = supervisor
    if s.output is None:
        if not outputs:
            fail("output", "supervises a joint output signal, but the contract has no output signal")
        output = sorted(outputs)[0]
    else:
        if s.output not in outputs:
            fail(
                "output",
                f"{s.output!r} is not one of the contract's output signals "
                f"(it has: {', '.join(outputs) or 'none'})",
            )
        output = s.output
    signal = outputs[output]
    n = len(signal.names)
    for name in _LIST_FIELDS:
        values = getattr(s, name)
        if values is None:
            continue
        items = values if isinstance(values, tuple) else (values,)
        if isinstance(values, tuple) and len(values) != n:
            fail(name, f"has {len(values)} values, expected {n} (one per joint of {output!r}) or one number")
        if not all(isinstance(v, float) and math.isfinite(v) for v in items):
            fail(name, f"expected finite numbers, got {values!r}")

    def value(name: str, i: int) -> float:
        values = getattr(s, name)
        return values[i] if isinstance(values, tuple) else values

    for name in ("blend_max_velocity", "max_velocity", "max_torque"):
        for i in range(n):
            if getattr(s, name) is not None and not value(name, i) > 0:
                fail(name, f"{name} {value(name, i):g} for {signal.names[i]!r} is not > 0")
    for name, low, high, what in (
        ("blend_seconds", 0.0, math.inf, "seconds >= 0 (0: no soft start)"),
        ("start_gain_fraction", 0.0, 1.0, "a fraction in [0, 1]"),
        ("margin", 0.0, math.inf, "radians >= 0"),
        ("max_tilt", 0.0, math.pi, "radians in (0, pi] (0: unchecked)"),
    ):
        v = getattr(s, name)
        if not isinstance(v, float) or not math.isfinite(v) or not low <= v <= high:
            fail(name, f"expected {what}, got {v!r}")
    if s.low is not None and s.high is not None:
        for i in range(n):
            if value("low", i) + s.margin > value("high", i) - s.margin:
                fail(
                    "low",
                    f"low {value('low', i):g} + margin {s.margin:g} > high {value('high', i):g} - margin "
                    f"for {signal.names[i]!r}",
                )
    steps = s.max_rate_limited_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        fail("max_rate_limited_steps", f"expected steps >= 1 (0: unchecked), got {steps!r}")
    if s.fallback not in FALLBACKS:
        fail("fallback", f"unknown fallback {s.fallback!r} (known: {' '.join(FALLBACKS)})")

    def has_term(name: str, joint: bool) -> bool:
        for input_signal in inputs.values():
            for term in input_signal.terms:
                target = (term.output or sorted(outputs)[0]) if joint else None
                if term.name == name and (not joint or target == output):
                    return True
        return False

    positions = has_term("joint_pos_rel", True)
    if s.blend_seconds > 0 and not positions:
        fail(
            "blend_seconds",
            f"a soft start (blend_seconds {s.blend_seconds:g}) starts from the measured joint positions, "
            f"but no input signal has a joint_pos_rel term of {output!r}",
        )
    if s.fallback == "damp" and not positions:
        fail(
            "fallback",
            f"fallback 'damp' targets the measured joint positions, but no input signal has a "
            f"joint_pos_rel term of {output!r}",
        )
    if s.fallback == "damp" and signal.damping is None:
        fail(
            "fallback",
            f"fallback 'damp' applies the damping of {output!r}, but the signal has no damping gains",
        )
    if s.max_velocity is not None and not has_term("joint_vel_rel", True):
        fail(
            "max_velocity",
            "reads the measured joint velocities, but no input signal has a joint_vel_rel term "
            f"of {output!r}",
        )
    if s.max_torque is not None and not positions:
        fail(
            "max_torque",
            "bounds each target's distance from the measured joint position, but no input signal "
            f"has a joint_pos_rel term of {output!r}",
        )
    if s.max_torque is not None and signal.stiffness is None:
        fail(
            "max_torque",
            f"bounds the torque of the stiffness of {output!r}, but the signal has no stiffness gains",
        )
    if s.max_tilt > 0 and not has_term("projected_gravity", False):
        fail("max_tilt", "reads the base tilt from a projected_gravity term, but no input signal has one")
    if steps > 0 and signal.max_delta is None:
        fail(
            "max_rate_limited_steps",
            f"counts steps the envelope rate limits, but {output!r} has no max_delta",
        )
    return s
