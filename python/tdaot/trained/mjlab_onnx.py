"""An mjlab ONNX export's ``metadata_props`` read into a tdaot.Contract (Contract.from_deploy
for a ``.onnx`` path): comma-separated joint names, gains, default pose, action scale and the
observation terms with their scale, clip and history. The deploy.yaml reader and the term
mapping both kinds share are in tdaot.trained.deploy."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tdaot import optional
from tdaot.contract_signal import Signal
from tdaot.contract_terms import TERM_ELEMENTS
from tdaot.errors import ContractError
from tdaot.trained.deploy_terms import (
    MJLAB_REQUIRED,
    VELOCITY_COMMANDS,
    ContractFields,
    clipped_term,
    collapse,
    is_int,
    is_number,
    maybe,
    term_name,
)
from tdaot.trained.isaac_yaml import load_isaac_yaml


def contract_fields_from_mjlab_onnx(
    path: Path,
    robot: list[str] | None,
    input_key: str,
    output_key: str,
    control_dt: float | None,
    env_path: Path | None,
) -> ContractFields:
    optional.require(f"{path}: reading an ONNX file's metadata", optional.ONNX)
    import onnx

    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as err:  # onnx raises DecodeError, OSError, ... by version
        raise ContractError(f"{path}: not an ONNX file onnx can read: {err}") from None
    meta = {p.key: p.value for p in model.metadata_props}
    missing = [key for key in MJLAB_REQUIRED if key not in meta]
    if missing:
        raise ContractError(
            f"{path}: its metadata_props lack {', '.join(missing)} (an mjlab export carries "
            f"{', '.join(MJLAB_REQUIRED)}; found: {', '.join(sorted(meta)) or 'none'})"
        )

    def csv(key: str) -> list[str]:
        return [item.strip() for item in meta[key].split(",")] if meta.get(key, "").strip() else []

    def floats(key: str, text: str) -> tuple[float, ...]:
        try:
            return tuple(float(v) for v in text.split(";"))
        except ValueError:
            raise ContractError(f"{path}: metadata {key!r}: expected numbers, got {text!r}") from None

    joints = tuple(csv("joint_names"))
    n = len(joints)
    if robot is not None:
        absent = next((j for j in joints if j not in robot), None)
        if absent is not None:
            raise ContractError(
                f"{path}: metadata 'joint_names': joint {absent!r} is not one of the robot's joints "
                f"({', '.join(robot[:4])}{', ...' if len(robot) > 4 else ''})"
            )

    def per_joint(key: str) -> tuple[float, ...] | None:
        if key not in meta:
            return None
        values = tuple(v for item in csv(key) for v in floats(key, item))
        if len(values) == 1:
            values = values * n
        if len(values) != n:
            raise ContractError(
                f"{path}: metadata {key!r}: has {len(values)} values, expected {n} "
                "(one per joint_names entry)"
            )
        return values

    default = per_joint("default_joint_pos")
    output = Signal(
        names=joints,
        scale=collapse(per_joint("action_scale")),
        offset=collapse(default),
        stiffness=maybe(per_joint("joint_stiffness")),
        damping=maybe(per_joint("joint_damping")),
    )
    names = csv("observation_names")
    count = len(names)

    def per_term(key: str, fallback: str) -> list[str]:
        items = csv(key) if key in meta else [fallback] * count
        if len(items) != count:
            raise ContractError(
                f"{path}: metadata {key!r}: has {len(items)} entries, expected {count} (one per "
                "observation_names entry)"
            )
        return items

    scales = per_term("observation_terms_scale", "1")
    clips = per_term("observation_terms_clip", "-inf;inf")
    histories = per_term("observation_terms_history_length", "0")
    flatten = per_term("observation_terms_flatten_history_dim", "1")
    command_names = csv("command_names")
    terms = []
    for index, name in enumerate(names):
        where = f"observation_names[{index}] {name!r}"
        term = term_name(path, name, f"metadata {where}")
        if name == "command" and not (len(command_names) == 1 and command_names[0] in VELOCITY_COMMANDS):
            raise ContractError(
                f"{path}: metadata {where}: the command is {', '.join(command_names) or 'unnamed'}; "
                f"tdaot's velocity_commands is a velocity command ({', '.join(VELOCITY_COMMANDS)})"
            )
        size = n if TERM_ELEMENTS[term] is None else len(TERM_ELEMENTS[term])
        scale = floats("observation_terms_scale", scales[index])
        if len(scale) == 1:
            scale = scale * size
        if len(scale) != size:
            raise ContractError(
                f"{path}: metadata 'observation_terms_scale' of {name!r}: has {len(scale)} values, "
                f"expected {size} ({term} has {size}) or one"
            )
        clip = floats("observation_terms_clip", clips[index])
        if len(clip) != 2:
            raise ContractError(
                f"{path}: metadata 'observation_terms_clip' of {name!r}: expected low;high, "
                f"got {clips[index]!r}"
            )
        history = floats("observation_terms_history_length", histories[index])[0]
        if history != int(history) or history < 0:
            raise ContractError(
                f"{path}: metadata 'observation_terms_history_length' of {name!r}: expected an "
                f"integer >= 0, got {histories[index]!r}"
            )
        if history > 1 and floats("observation_terms_flatten_history_dim", flatten[index])[0] == 0:
            raise ContractError(
                f"{path}: metadata 'observation_terms_flatten_history_dim' of {name!r}: a history "
                "kept as its own dimension is not a flat observation; tdaot carries term-major "
                "flattened history only"
            )
        terms.append(
            clipped_term(
                path,
                f"metadata {where}",
                term,
                scale,
                list(clip),
                None,
                max(1, int(history)),
                {},
                None,
                output_key,
            )
        )
    if control_dt is None:
        control_dt = _env_step(env_path) if env_path is not None else None
    if control_dt is None:
        raise ContractError(
            f"{path}: an mjlab export's metadata has no control step; pass control_dt (seconds per "
            "step) or keep the run directory's params/env.yaml beside it"
        )
    metadata = {"deployment": f"mjlab ONNX metadata ({path.name})"}
    if meta.get("run_path"):
        metadata["run_path"] = meta["run_path"]
    return {
        "control_dt": control_dt,
        "inputs": {input_key: Signal(terms=terms)},
        "outputs": {output_key: output},
        "metadata": metadata,
    }


def _env_step(env_path: Path) -> float | None:
    """decimation * the physics step of an Isaac Lab (``sim.dt``) or mjlab
    (``sim.mujoco.timestep``) env.yaml."""
    env = load_isaac_yaml(env_path)
    if not isinstance(env, Mapping):
        return None
    sim = env.get("sim") if isinstance(env.get("sim"), Mapping) else {}
    dt = sim.get("dt")
    if dt is None and isinstance(sim.get("mujoco"), Mapping):
        dt = sim["mujoco"].get("timestep")
    decimation = env.get("decimation")
    if is_number(dt) and is_int(decimation):
        return float(dt) * decimation
    return None


# --- shared ----------------------------------------------------------------------------------
