"""The observation terms of a trained run's deployment files, shared by their readers
(tdaot.trained.deploy: deploy.yaml; tdaot.trained.mjlab_onnx: an mjlab ONNX export's metadata):
the term names those files write and tdaot's term of each, and one clip-then-scale term built
from a file's fields."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tdaot.contract_terms import TERM_ELEMENTS, Term
from tdaot.errors import ContractError

#: What a deployment file's reader returns: the keyword arguments of ``tdaot.Contract`` (control_dt,
#: inputs, outputs, metadata, supervisor), so that the readers need not import tdaot.contract,
#: whose ``Contract.from_deploy`` calls them.
ContractFields = dict[str, Any]

#: The term names these files write -> tdaot's vocabulary term. Isaac Lab's own velocity tasks and
#: mjlab name the joint terms after the quantity (``joint_pos`` is ``joint_pos_rel``, ``actions``
#: the last action), unitree_rl_lab after the function; mjlab's ``command`` is the velocity
#: command when the task's command is a velocity twist (:data:`VELOCITY_COMMANDS`).
TERM_ALIASES: dict[str, str] = {
    **{name: name for name in TERM_ELEMENTS},
    "joint_pos": "joint_pos_rel",
    "joint_vel": "joint_vel_rel",
    "actions": "last_action",
    "command": "velocity_commands",
}
#: Command names whose ``command`` observation is (lin_vel_x, lin_vel_y, ang_vel_z).
VELOCITY_COMMANDS = ("base_velocity", "twist", "velocity")
#: The ONNX metadata keys an mjlab export must carry.
MJLAB_REQUIRED = ("joint_names", "default_joint_pos", "action_scale", "observation_names")


def term_name(path: Path, name: str, where: str) -> str:
    term = TERM_ALIASES.get(name)
    if term is None:
        known = " ".join(TERM_ELEMENTS)
        aliases = ", ".join(f"{a} = {t}" for a, t in TERM_ALIASES.items() if a != t)
        raise ContractError(
            f"{path}: {where}: unknown observation term {name!r} (tdaot's vocabulary: {known}; "
            f"also read: {aliases})"
        )
    return term


def clipped_term(
    path: Path,
    where: str,
    term: str,
    scale: tuple[float, ...],
    clip: list[float] | None,
    ranges: list[tuple[float, float]] | None,
    history: int,
    params: dict[str, float],
    rest: tuple[float, ...] | None,
    output_key: str,
) -> Term:
    """One tdaot term of a file's clip-then-scale term: the clip (intersected with a command's
    ranges, which come first) moved through the scale. ``rest`` (joint_pos_rel): the action's
    offset less the file's default pose, per joint; tdaot's raw is q - the action's offset, so
    the term's offset is ``rest * scale`` ((q - default) * scale exactly)."""
    clipped = [(-math.inf, math.inf)] * len(scale)
    if ranges is not None:
        clipped = list(ranges)
    if clip is not None:
        lo, hi = float(clip[0]), float(clip[1])
        if lo > hi:
            raise ContractError(f"{path}: {where}: clip low {lo} > high {hi}")
        clipped = [(max(a, lo), min(b, hi)) for a, b in clipped]
        empty = next((k for k, (a, b) in enumerate(clipped) if a > b), None)
        if empty is not None:
            raise ContractError(f"{path}: {where}: the clip {clip} and the command ranges leave nothing")
    scaled = []
    for (a, b), s in zip(clipped, scale):
        if s == 0:
            scaled.append((-math.inf, math.inf))  # the value is 0 whatever the clip
        else:
            scaled.append(tuple(sorted((a * s, b * s))))
    low, high = bounds(path, f"{where}: clip", scaled)
    offset = 0.0 if rest is None else collapse(tuple(r * s for r, s in zip(rest, scale)))
    output = output_key if TERM_ELEMENTS[term] is None else None
    return Term(
        term,
        scale=collapse(scale),
        offset=offset,
        low=low,
        high=high,
        history=history,
        output=output,
        **params,
    )


def bounds(path: Path, where: str, pairs: list[tuple[float, float]]) -> tuple[Any, Any]:
    """Per-element (low, high) pairs as a term's or signal's low and high: None where every
    element is unbounded on that side; a side bounded for some elements only is refused (a
    contract bound is finite per element)."""
    result = []
    for side, name in ((0, "low"), (1, "high")):
        values = [pair[side] for pair in pairs]
        finite = [math.isfinite(v) for v in values]
        if not any(finite):
            result.append(None)
        elif all(finite):
            result.append(collapse(tuple(values)))
        else:
            raise ContractError(
                f"{path}: {where}: the {name} bound is infinite for some elements and finite for "
                "others; a tdaot clip bounds every element of a term or none"
            )
    return result[0], result[1]


def collapse(values: tuple[float, ...] | None) -> Any:
    if values is None:
        return None
    return values[0] if all(v == values[0] for v in values) else values


def maybe(values: tuple[float, ...] | None) -> Any:
    return None if values is None else collapse(values)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
