"""What the training simulator used per joint, read from a run's ``params/env.yaml`` (Isaac Lab;
mjlab's entity layout too), for the rehearsal's simulator to match: today the joint armature.

Isaac Lab keeps it per actuator group, ``scene.robot.actuators.<group>.armature``: one number
or a mapping of joint-name regular expressions to numbers, for the joints the group's
``joint_names_expr`` patterns match (Python ``re.fullmatch``, as Isaac Lab resolves them; the
first group and the first pattern that match a joint give its value). A group whose armature is
null leaves the joint at the robot file's value, which the env.yaml does not say: no value is
recorded for it. The contract carries the values in its metadata (:data:`ARMATURE_KEY`, a JSON
object of joint name -> armature) and ``tdaot rehearse`` compares them with the MJCF's
(:func:`armature_mismatches`) before it runs. An MJCF whose armature is 0 where training used
0.01 makes a trained humanoid fall in about a second.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tdaot.errors import ContractError
from tdaot.trained.isaac_yaml import load_isaac_yaml

#: The contract metadata entry holding the training armature (JSON: joint name -> number).
ARMATURE_KEY = "training.armature"


def training_joint_properties(env_yaml: str | os.PathLike, joint_names: Sequence[str]) -> dict[str, dict]:
    """``{"armature": {joint: value}}`` for the joints of ``joint_names`` an actuator group of
    ``env_yaml`` sets; an empty dict when none does. ContractError naming the field for an
    armature that is neither a number nor a mapping of patterns to numbers, or a pattern that is
    not a regular expression."""
    env = load_isaac_yaml(env_yaml)
    where = os.fspath(env_yaml)
    groups = _actuator_groups(env)
    armature: dict[str, float] = {}
    for group_name, group in groups:
        at = f"{group_name}.armature"
        value = group.get("armature")
        if value is None:
            continue
        patterns = group.get("joint_names_expr", group.get("target_names_expr"))
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ContractError(
                f"{where}: field '{group_name}.joint_names_expr': expected joint-name patterns, "
                f"got {patterns!r}"
            )
        for joint in joint_names:
            if joint in armature or not any(_matches(where, group_name, p, joint) for p in patterns):
                continue
            found = _value_for(where, at, value, joint)
            if found is not None:
                armature[joint] = found
    if not armature:
        return {}
    return {"armature": {joint: armature[joint] for joint in joint_names if joint in armature}}


def armature_metadata(properties: Mapping[str, Mapping[str, float]]) -> str:
    """The :data:`ARMATURE_KEY` metadata value of :func:`training_joint_properties`'s result."""
    return json.dumps(dict(properties["armature"]), separators=(",", ":"))


def armature_mismatches(metadata: Mapping[str, str], mjcf: str | os.PathLike) -> list[str]:
    """One line per joint whose MJCF armature differs from the training armature a contract's
    ``metadata`` records (none when it records none): ``armature JOINT: MJCF a, training b``.
    Needs MuJoCo's Python bindings (the mujoco-core wheel)."""
    text = metadata.get(ARMATURE_KEY)
    if not text:
        return []
    try:
        trained = json.loads(text)
    except ValueError:
        trained = None
    if not isinstance(trained, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in trained.values()
    ):
        raise ContractError(
            f"contract metadata {ARMATURE_KEY!r}: expected a JSON object of numbers, got {text!r}"
        )
    import mujoco

    try:
        model = mujoco.MjModel.from_xml_path(os.fspath(mjcf))
    except ValueError as err:
        raise ContractError(f"mjcf {os.fspath(mjcf)!r}: MuJoCo cannot load it: {err}") from None
    lines = []
    for joint, value in trained.items():
        try:
            index = model.joint(joint).id
        except KeyError:
            lines.append(f"armature {joint}: not a joint of the MJCF, training {value:g}")
            continue
        simulated = float(model.dof_armature[model.jnt_dofadr[index]])
        if not math.isclose(simulated, value, rel_tol=1e-6, abs_tol=1e-12):
            lines.append(f"armature {joint}: MJCF {simulated:g}, training {value:g}")
    return lines


def _actuator_groups(env: Any) -> list[tuple[str, Mapping]]:
    """(field path, group) of each actuator group: Isaac Lab's ``scene.robot.actuators`` mapping,
    or mjlab's ``scene.entities.robot.articulation.actuators`` list."""
    scene = env.get("scene") if isinstance(env, Mapping) else None
    if not isinstance(scene, Mapping):
        return []
    robot = scene.get("robot")
    if isinstance(robot, Mapping) and isinstance(robot.get("actuators"), Mapping):
        return [
            (f"scene.robot.actuators.{name}", group)
            for name, group in robot["actuators"].items()
            if isinstance(group, Mapping)
        ]
    entities = scene.get("entities")
    robot = entities.get("robot") if isinstance(entities, Mapping) else None
    articulation = robot.get("articulation") if isinstance(robot, Mapping) else None
    actuators = articulation.get("actuators") if isinstance(articulation, Mapping) else None
    if isinstance(actuators, list):
        return [
            (f"scene.entities.robot.articulation.actuators[{i}]", group)
            for i, group in enumerate(actuators)
            if isinstance(group, Mapping)
        ]
    return []


def _matches(where: str, group: str, pattern: str, joint: str) -> bool:
    try:
        return re.fullmatch(pattern, joint) is not None
    except re.error as err:
        raise ContractError(
            f"{where}: field '{group}': pattern {pattern!r} is not a regular expression: {err}"
        ) from None


def _value_for(where: str, at: str, value: Any, joint: str) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Mapping):
        for pattern, item in value.items():
            if not isinstance(pattern, str) or not _matches(where, at, pattern, joint):
                continue
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ContractError(f"{where}: field '{at}.{pattern}': expected a number, got {item!r}")
            return float(item)
        return None
    raise ContractError(
        f"{where}: field {at!r}: expected a number or a mapping of joint patterns to numbers, got {value!r}"
    )
