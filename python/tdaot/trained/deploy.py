"""Deployment files read into a :class:`tdaot.Contract`: unitree_rl_lab's / Isaac Lab's
``params/deploy.yaml`` and the ONNX ``metadata_props`` mjlab's exporter writes
(:meth:`tdaot.Contract.from_deploy` is the public entry; docs/from-training.md has the table of
what each field becomes).

What the files mean (unitree_rl_lab deploy/include/isaaclab, Isaac Lab's ObservationManager):
terms in the file's order, each with its own history (oldest first, term after term); each frame
clipped, then scaled; ``joint_pos[i] = motor[joint_ids_map[i]]`` (policy index -> robot/SDK
index); ``stiffness``/``damping`` in SDK order, ``default_joint_pos`` and the action's ``scale``
and ``offset`` in the policy's order; target = raw * scale + offset, then the action clip;
``velocity_commands`` clamped to the command's ranges. A tdaot term is ``clip(raw * scale +
offset, low, high)``: scaled, then clipped. So a file's clip ``[lo, hi]`` becomes the bounds
``lo * scale`` and ``hi * scale`` (swapped where the scale is negative), which gives exactly the
same value.

This is not a reader of Isaac Lab's env.yaml (tdaot.trained.isaac_env) and it builds no policy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tdaot.contract_signal import Signal
from tdaot.contract_supervisor import Supervisor
from tdaot.contract_terms import TERM_ELEMENTS
from tdaot.errors import ContractError
from tdaot.trained.deploy_terms import (
    TERM_ALIASES,
    ContractFields,
    bounds,
    clipped_term,
    collapse,
    is_int,
    is_number,
    term_name,
)
from tdaot.trained.isaac_yaml import load_isaac_yaml
from tdaot.trained.mjcf import mjcf_joint_names, mjcf_joint_ranges
from tdaot.trained.mjlab_onnx import contract_fields_from_mjlab_onnx

_COMMAND_AXES = ("lin_vel_x", "lin_vel_y", "ang_vel_z")


def contract_fields_from_deploy(
    path: str | os.PathLike,
    *,
    joint_names: Sequence[str] | None = None,
    mjcf: str | os.PathLike | None = None,
    input_key: str = "policy",
    output_key: str = "action",
    control_dt: float | None = None,
    env_yaml: str | os.PathLike | bool | None = None,
    supervisor: bool = True,
) -> ContractFields:
    """The fields of the contract (``tdaot.Contract(**fields)``) of a deploy.yaml or an mjlab ONNX
    file (chosen by the ``.onnx`` suffix); :meth:`tdaot.Contract.from_deploy` makes the Contract.

    ``joint_names`` (the robot's joint order, the SDK's) or ``mjcf`` (its actuated joints, in
    actuator order) name the joints of a deploy.yaml, which has only indices; for an ONNX file
    they are checked against the names its metadata carries. ``input_key`` and ``output_key``
    are the policy's observation and action keys. ``control_dt`` is needed only where the file
    has no step: an ONNX export whose run directory has no ``params/env.yaml``. ``env_yaml``:
    Isaac Lab's / mjlab's env.yaml (None: ``params/env.yaml`` beside the file or its run
    directory, when there is one; False: none), whose training joint armature the contract's
    metadata records (tdaot.trained.isaac_env) for ``tdaot rehearse`` to compare.

    ``supervisor`` (default True): the contract carries the default supervisor of the joint
    targets (:func:`default_supervisor`): a 0.1 s soft start from the measured pose, the ``damp``
    fallback, and with ``mjcf`` its joints' ranges as the limits. False: none."""
    path = Path(path)
    if joint_names is not None and mjcf is not None:
        raise ContractError(f"{path}: give joint_names or mjcf (the robot's joint order), not both")
    robot = list(joint_names) if joint_names is not None else None
    # An empty name is a reserved slot of the SDK's motor order (unitree_rl_lab's H1 has one at
    # index 9): it holds a stiffness/damping entry but no joint_ids_map entry may point at it.
    if robot is not None and (not all(isinstance(n, str) for n in robot) or not any(robot)):
        raise ContractError(
            f"{path}: joint_names: expected joint names (an empty one for a reserved slot), got {robot!r}"
        )
    if mjcf is not None:
        robot = mjcf_joint_names(mjcf)
    env_path = _env_yaml(path, env_yaml)
    if path.suffix == ".onnx":
        fields = contract_fields_from_mjlab_onnx(path, robot, input_key, output_key, control_dt, env_path)
    else:
        fields = _from_deploy_yaml(path, robot, input_key, output_key)
    if supervisor:
        fields["supervisor"] = default_supervisor(fields, output_key, mjcf)
    if env_path is None:
        return fields
    from tdaot.trained.isaac_env import ARMATURE_KEY, armature_metadata, training_joint_properties

    joints = fields["outputs"][output_key].names
    properties = training_joint_properties(env_path, joints)
    if properties:
        fields["metadata"] = {**fields["metadata"], ARMATURE_KEY: armature_metadata(properties)}
    return fields


def default_supervisor(
    fields: ContractFields, output_key: str, mjcf: str | os.PathLike | None
) -> Supervisor | None:
    """The supervisor a package from a deployment file gets: limits from the MJCF's joint ranges
    (when ``mjcf`` gives every joint of ``output_key`` one); with a joint_pos_rel term of the
    output, a soft start of 0.1 s from the measured pose and the ``damp`` fallback (given damping
    gains; else ``hold``). None when there is nothing to supervise with (no term, no ranges)."""
    inputs, outputs = fields["inputs"], fields["outputs"]
    joints = outputs[output_key].names
    ranges = mjcf_joint_ranges(mjcf, joints) if mjcf is not None else None
    positions = any(
        term.name == "joint_pos_rel" and (term.output or sorted(outputs)[0]) == output_key
        for signal in inputs.values()
        for term in signal.terms
    )
    if not positions and ranges is None:
        return None
    limits = {"low": ranges[0], "high": ranges[1]} if ranges is not None else {}
    damped = positions and outputs[output_key].damping is not None
    return Supervisor(
        output=output_key,
        # Short: a target at a bent-legged robot's measured pose holds no weight (docs/contract.md).
        blend_seconds=0.1 if positions else 0.0,
        fallback="damp" if damped else "hold",
        **limits,
    )


def _env_yaml(path: Path, given: str | os.PathLike | bool | None) -> Path | None:
    if given is False:
        return None
    if given is not None and given is not True:
        return Path(given)
    for folder in (path.parent, path.parent / "params", path.parent.parent / "params"):
        if (folder / "env.yaml").is_file():
            return folder / "env.yaml"
    if given is True:
        raise ContractError(f"{path}: no params/env.yaml beside it or in its run directory")
    return None


# --- deploy.yaml -----------------------------------------------------------------------------


def _from_deploy_yaml(path: Path, robot: list[str] | None, input_key: str, output_key: str) -> ContractFields:
    data = load_isaac_yaml(path)
    if not isinstance(data, Mapping):
        raise ContractError(f"{path}: expected a mapping of deployment fields, got {type(data).__name__}")

    def need(key: str) -> Any:
        if data.get(key) is None:
            raise ContractError(f"{path}: field {key!r} is missing")
        return data[key]

    for where in (data, data.get("observations") or {}):
        if isinstance(where, Mapping) and where.get("use_gym_history"):
            raise ContractError(
                f"{path}: 'use_gym_history: true' lays history out frame-major (every term of one "
                "step, then the next); tdaot carries term-major history only (each term's steps "
                "together, oldest first): export the policy with per-term history"
            )
    ids = need("joint_ids_map")
    if robot is None:
        raise ContractError(
            f"{path}: a deploy.yaml gives joints by index (joint_ids_map); pass joint_names (the "
            "robot's joint order) or mjcf (its actuated joints) to name them"
        )
    if not isinstance(ids, list) or not ids or not all(is_int(i) for i in ids):
        raise ContractError(f"{path}: field 'joint_ids_map': expected a list of joint indices, got {ids!r}")
    bad = next((i for i in ids if not 0 <= i < len(robot)), None)
    if bad is not None:
        raise ContractError(
            f"{path}: field 'joint_ids_map': index {bad} is not one of the robot's {len(robot)} joints "
            f"({', '.join(robot[:4])}{', ...' if len(robot) > 4 else ''})"
        )
    twice = next((i for k, i in enumerate(ids) if i in ids[:k]), None)
    if twice is not None:
        raise ContractError(f"{path}: field 'joint_ids_map': index {twice} appears twice")
    reserved = next((k for k, i in enumerate(ids) if not robot[i]), None)
    if reserved is not None:
        raise ContractError(
            f"{path}: field 'joint_ids_map': entry {reserved} is index {ids[reserved]}, a reserved "
            "(unnamed) slot of joint_names"
        )
    joints = tuple(robot[i] for i in ids)  # joint_pos[i] = motor[joint_ids_map[i]]
    n = len(joints)

    def numbers(value: Any, field: str, count: int, what: str) -> tuple[float, ...]:
        if is_number(value):
            return (float(value),) * count
        if not isinstance(value, list) or not all(is_number(v) for v in value):
            raise ContractError(f"{path}: field {field!r}: expected numbers, got {value!r}")
        if len(value) != count:
            raise ContractError(
                f"{path}: field {field!r}: has {len(value)} values, expected {count} ({what})"
            )
        return tuple(float(v) for v in value)

    step_dt = need("step_dt")
    if not is_number(step_dt):
        raise ContractError(f"{path}: field 'step_dt': expected seconds per step, got {step_dt!r}")
    sdk = f"one per robot joint, in the robot's order: joint_names/mjcf name {len(robot)}"
    stiffness = numbers(need("stiffness"), "stiffness", len(robot), sdk)
    damping = numbers(need("damping"), "damping", len(robot), sdk)
    default = numbers(need("default_joint_pos"), "default_joint_pos", n, "one per joint_ids_map entry")

    actions = need("actions")
    if not isinstance(actions, Mapping) or len(actions) != 1:
        names = ", ".join(actions) if isinstance(actions, Mapping) else repr(actions)
        raise ContractError(
            f"{path}: field 'actions': expected one joint position action term, got {names or 'none'}"
        )
    ((action_name, action),) = actions.items()
    if not isinstance(action, Mapping):
        raise ContractError(f"{path}: field 'actions.{action_name}': expected a mapping, got {action!r}")
    at = f"actions.{action_name}"
    scale = numbers(action.get("scale", 1.0), f"{at}.scale", n, "one per joint_ids_map entry")
    offset = numbers(action.get("offset", 0.0), f"{at}.offset", n, "one per joint_ids_map entry")
    low = high = None
    clip = action.get("clip")
    if clip is not None:
        pairs = clip if isinstance(clip, list) and len(clip) == n else None
        if pairs is None or not all(
            isinstance(p, list) and len(p) == 2 and all(is_number(v) for v in p) for p in pairs
        ):
            raise ContractError(
                f"{path}: field '{at}.clip': expected {n} [low, high] pairs (one per joint), got {clip!r}"
            )
        low, high = bounds(path, f"{at}.clip", [(float(lo), float(hi)) for lo, hi in pairs])
    output = Signal(
        names=joints,
        scale=collapse(scale),
        offset=collapse(offset),
        low=low,
        high=high,
        stiffness=collapse(tuple(stiffness[i] for i in ids)),
        damping=collapse(tuple(damping[i] for i in ids)),
    )

    observations = need("observations")
    if not isinstance(observations, Mapping) or not observations:
        raise ContractError(
            f"{path}: field 'observations': expected a mapping of terms, got {observations!r}"
        )
    commands = data.get("commands") or {}
    terms = []
    for name, cfg in observations.items():
        if name == "use_gym_history":
            continue
        where = f"observations.{name}"
        if name == "scale_first":  # deploy code forked from unitree_rl_lab's: scale before clip
            if cfg:
                raise ContractError(
                    f"{path}: field {where!r} is true: each frame scaled, then clipped; tdaot reads "
                    "Isaac Lab's order (clipped, then scaled) only"
                )
            continue
        if isinstance(cfg, Mapping) and name not in TERM_ALIASES and any(k in TERM_ALIASES for k in cfg):
            raise ContractError(
                f"{path}: field {where!r} is a group of observation terms (one per ONNX input); "
                "tdaot reads a deploy.yaml whose 'observations' are the terms of one input"
            )
        if not isinstance(cfg, Mapping):
            raise ContractError(f"{path}: field {where!r}: expected a mapping, got {cfg!r}")
        term = term_name(path, name, where)
        size = len(joints) if TERM_ELEMENTS[term] is None else len(TERM_ELEMENTS[term])
        params = cfg.get("params") or {}
        ranges = None
        if term == "velocity_commands":
            ranges = _command_ranges(path, where, params, commands)
        extra = _params(path, where, term, params)
        history = cfg.get("history_length", 1)
        if not is_int(history) or history < 0:
            raise ContractError(
                f"{path}: field '{where}.history_length': expected an integer >= 0, got {history!r}"
            )
        term_scale = cfg.get("scale")
        term_scale = numbers(
            1.0 if term_scale is None else term_scale, f"{where}.scale", size, f"{term} has {size}"
        )
        term_clip = cfg.get("clip")
        if term_clip is not None and not (
            isinstance(term_clip, list) and len(term_clip) == 2 and all(is_number(v) for v in term_clip)
        ):
            raise ContractError(f"{path}: field '{where}.clip': expected [low, high], got {term_clip!r}")
        rest = tuple(o - d for o, d in zip(offset, default)) if term == "joint_pos_rel" else None
        terms.append(
            clipped_term(
                path, where, term, term_scale, term_clip, ranges, max(1, history), extra, rest, output_key
            )
        )
    return {
        "control_dt": float(step_dt),
        "inputs": {input_key: Signal(terms=terms)},
        "outputs": {output_key: output},
        "metadata": {
            "deployment": "deploy.yaml" if path.name == "deploy.yaml" else f"deploy.yaml ({path.name})"
        },
    }


def _command_ranges(path: Path, where: str, params: Any, commands: Any) -> list[tuple[float, float]] | None:
    name = params.get("command_name", "base_velocity") if isinstance(params, Mapping) else "base_velocity"
    command = commands.get(name) if isinstance(commands, Mapping) else None
    if command is None:
        raise ContractError(
            f"{path}: field '{where}': its command {name!r} is not under 'commands' "
            f"(it has: {', '.join(commands) if isinstance(commands, Mapping) and commands else 'none'}); "
            "velocity_commands is clamped to the command's ranges"
        )
    ranges = command.get("ranges") if isinstance(command, Mapping) else None
    result = []
    for axis in _COMMAND_AXES:
        pair = ranges.get(axis) if isinstance(ranges, Mapping) else None
        if not (isinstance(pair, list) and len(pair) == 2 and all(is_number(v) for v in pair)):
            raise ContractError(
                f"{path}: field 'commands.{name}.ranges.{axis}': expected [low, high], got {pair!r}"
            )
        if pair[0] > pair[1]:
            raise ContractError(
                f"{path}: field 'commands.{name}.ranges.{axis}': low {pair[0]} > high {pair[1]}"
            )
        result.append((float(pair[0]), float(pair[1])))
    return result


def _params(path: Path, where: str, term: str, params: Any) -> dict[str, float]:
    """The term's tdaot parameters from the file's ``params``; a parameter that would change
    what the term measures (a joint subset, another asset) is refused by name."""
    if not isinstance(params, Mapping):
        raise ContractError(f"{path}: field '{where}.params': expected a mapping, got {params!r}")
    result: dict[str, float] = {}
    for key, value in params.items():
        if term == "velocity_commands" and key == "command_name":
            continue
        if term == "gait_phase" and key == "period" and is_number(value):
            result["period"] = float(value)
            continue
        if key == "asset_cfg" and _whole_robot(value):
            continue
        raise ContractError(
            f"{path}: field '{where}.params.{key}': {value!r} is a parameter tdaot's {term!r} does "
            "not take (a joint subset or another asset changes what the term measures)"
        )
    return result


def _whole_robot(asset: Any) -> bool:
    """An Isaac Lab SceneEntityCfg of the robot's every joint: no joint names or ``.*``, no joint
    ids or ``slice(None)`` (dumped as ``!!python/object/apply:builtins.slice [null, null, null]``)."""
    every = (None, ".*", [".*"], [None, None, None])
    return (
        isinstance(asset, Mapping)
        and asset.get("name", "robot") == "robot"
        and all(asset.get(key) in every for key in ("joint_names", "joint_ids"))
    )
