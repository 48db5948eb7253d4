"""Observation terms of a contract's input signal (tdaot.contract): the vocabulary, the
:class:`Term` a user writes, and the checks of one term. A :class:`tdaot.Signal` of terms and
the Contract that derives its names live in tdaot.contract; the C++ twin is
cpp/src/core/manifest/contract.cpp."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from tdaot.errors import ContractError

Values = Union[float, tuple[float, ...]]
_TERM_FIELDS = ("name", "scale", "offset", "low", "high", "history", "output")

#: The observation-term vocabulary (docs/contract.md): the element names of one step of each
#: term; the joint terms have one element per joint of the joint output signal instead.
TERM_ELEMENTS: dict[str, tuple[str, ...] | None] = {
    "base_lin_vel": ("x", "y", "z"),
    "base_ang_vel": ("x", "y", "z"),
    "projected_gravity": ("x", "y", "z"),
    "velocity_commands": ("lin_vel_x", "lin_vel_y", "ang_vel_z"),
    "joint_pos_rel": None,
    "joint_vel_rel": None,
    "last_action": None,
    "gait_phase": ("sin", "cos"),
}
#: The parameters each term requires (numbers > 0).
TERM_PARAMS: dict[str, tuple[str, ...]] = {"gait_phase": ("period",)}


def plain_value(value: Any) -> Any:
    """Numbers as floats and sequences (lists, tensors, arrays) as tuples; anything else as
    given, for the Contract to refuse with the key in its message."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(
            float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value
        )
    return value


@dataclass(frozen=True, init=False)
class Term:
    """One observation term of an input :class:`Signal`: ``name`` from the vocabulary
    (:data:`TERM_ELEMENTS`), ``value = clip(raw * scale + offset, low, high)`` per element (each
    one number or one per element of a step), ``history`` steps kept (oldest first), ``output``
    the joint output signal's key for a joint term (None: the first output signal by key) and
    the term's parameters (``Term("gait_phase", period=0.8)``). ``size``, the elements of one
    step, is set when the Contract is made."""

    name: str
    scale: Values = 1.0
    offset: Values = 0.0
    low: Values | None = None
    high: Values | None = None
    history: int = 1
    output: str | None = None
    params: Mapping[str, float] = field(default_factory=dict, hash=False)
    size: int = field(default=0, compare=False)

    def __init__(
        self,
        name: str,
        scale: Values = 1.0,
        offset: Values = 0.0,
        low: Values | None = None,
        high: Values | None = None,
        history: int = 1,
        output: str | None = None,
        **params: float,
    ) -> None:
        fields = {"name": name, "history": history, "output": output, "size": 0}
        for key, value in (("scale", scale), ("offset", offset), ("low", low), ("high", high)):
            fields[key] = None if value is None else plain_value(value)
        fields["params"] = {k: plain_value(v) for k, v in params.items()}
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    def value(self, name: str, index: int) -> float | None:
        values = getattr(self, name)
        return values[index] if isinstance(values, tuple) else values

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "scale": self.scale, "offset": self.offset}
        for key in ("low", "high"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        data["history"] = self.history
        if self.output is not None:
            data["output"] = self.output
        data.update(self.params)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def _sized(self, size: int) -> Term:
        term = Term(
            self.name, self.scale, self.offset, self.low, self.high, self.history, self.output, **self.params
        )
        object.__setattr__(term, "size", size)
        return term


def _term_line(term: Term) -> str:
    line = (
        f"    term {term.name} [{term.size}" + (f" x {term.history} steps" if term.history > 1 else "") + "]"
    )
    if term.output is not None:
        line += f" of {term.output}"
    line += "".join(f", {name} {value:g}" for name, value in sorted(term.params.items()))
    line += f": scale {_short(term.scale)}, offset {_short(term.offset)}"
    line += "".join(
        f", {n} {_short(getattr(term, n))}" for n in ("low", "high") if getattr(term, n) is not None
    )
    return line


def _short(values: Values) -> str:
    if not isinstance(values, tuple):
        return f"{values:g}"
    return "[" + ", ".join(f"{v:g}" for v in values[:4]) + (", ...]" if len(values) > 4 else "]")


def term_from_dict(where: str, data: Any) -> Term:
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise ContractError(f"{where}: expected a table of term fields with a 'name', got {data!r}")
    return Term(**{k: v for k, v in data.items() if v is not None})


def term_elements(term: Term, outputs: Mapping[str, Any]) -> tuple[str, ...]:
    elements = TERM_ELEMENTS[term.name]
    if elements is None:  # a joint term: the joint output signal's names
        return outputs[term.output if term.output is not None else sorted(outputs)[0]].names
    return elements


def checked_term(where: str, key: str, index: int, term: Any, outputs: Mapping[str, Any]) -> Term:
    if not isinstance(term, Term):
        raise ContractError(f"{where}: term {index}: expected a tdaot.Term, got {type(term).__name__}", key)
    name = term.name
    at = f"{where}: term {index} {name!r}"

    def fail(field_name: str, problem: str):
        raise ContractError(f"{at}: field {field_name!r}: {problem}", key)

    if name not in TERM_ELEMENTS:
        fail("name", f"unknown term {name!r} (known: {' '.join(TERM_ELEMENTS)})")
    params = TERM_PARAMS.get(name, ())
    for param, value in term.params.items():
        if param not in params:
            fail(param, f"unknown term field (known: {' '.join((*_TERM_FIELDS, *params))})")
        if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value) or value <= 0:
            fail(param, f"{param} {value!r} is not a number > 0")
    for param in params:
        if param not in term.params:
            fail(param, "missing (seconds per gait cycle)")
    history = term.history
    if isinstance(history, bool) or not isinstance(history, int) or history < 1:
        fail("history", f"history {history!r} is not an integer >= 1 (the steps kept, newest included)")
    joint = TERM_ELEMENTS[name] is None
    if term.output is not None:
        if not joint:
            fail(
                "output",
                "takes no output (only joint_pos_rel, joint_vel_rel and last_action "
                "follow a joint output signal)",
            )
        if not isinstance(term.output, str) or term.output not in outputs:
            fail(
                "output",
                f"{term.output!r} is not one of the contract's output signals "
                f"(it has: {', '.join(sorted(outputs)) or 'none'})",
            )
    if joint and not outputs:
        fail(
            "name",
            "has one element per joint of the contract's joint output signal, but the "
            "contract has no output signal",
        )
    elements = term_elements(term, outputs)
    for field_name in ("scale", "offset", "low", "high"):
        values = getattr(term, field_name)
        if values is None:
            if field_name in ("scale", "offset"):
                fail(field_name, "expected a number or one per element, got None")
            continue
        items = values if isinstance(values, tuple) else (values,)
        if isinstance(values, tuple) and len(values) != len(elements):
            fail(
                field_name,
                f"has {len(values)} values, expected {len(elements)} (one per element) or one number",
            )
        if not all(isinstance(v, float) and math.isfinite(v) for v in items):
            fail(field_name, f"expected finite numbers, got {values!r}")
    for e, element in enumerate(elements):
        low, high = term.value("low", e), term.value("high", e)
        if low is not None and high is not None and low > high:
            fail("low", f"low {low} > high {high} for {element!r}")
    return term._sized(len(elements))


def describe_contract(
    contract: Any, value_fields: tuple[str, ...], gain_fields: tuple[str, ...]
) -> list[str]:
    """A tdaot.Contract as indented lines (Contract.describe, tdaot inspect)."""
    lines = [f"  control_dt        {contract.control_dt:g} s ({1 / contract.control_dt:g} Hz)"]
    for section in ("inputs", "outputs"):
        for key, signal in getattr(contract, section).items():
            if signal.terms:
                lines.append(f"  {section[:-1]:<6} {key} [{len(signal.names)}]: {len(signal.terms)} terms")
                lines += [_term_line(term) for term in signal.terms]
                continue
            shown = ", ".join(signal.names[:6]) + (", ..." if len(signal.names) > 6 else "")
            lines.append(f"  {section[:-1]:<6} {key} [{len(signal.names)}]: {shown}")
            parts = [
                f"{name} {_short(getattr(signal, name))}"
                for name in value_fields
                if getattr(signal, name) is not None
            ]
            lines.append("    " + ", ".join(parts))
            gains = [
                f"{n} {_short(getattr(signal, n))}" for n in gain_fields if getattr(signal, n) is not None
            ]
            if gains:
                lines.append("    gains " + ", ".join(gains))
    lines += [f"  {name}: {value}" for name, value in contract.metadata.items()]
    return lines
