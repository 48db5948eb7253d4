"""An MJCF's actuated joints, in actuator order: the robot's joint (SDK) order a deploy.yaml's
``joint_ids_map`` indexes (Contract.from_deploy's ``mjcf``, tdaot build --mjcf)."""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from tdaot.errors import ContractError


def mjcf_joint_names(mjcf: str | os.PathLike) -> list[str]:
    """The joints an MJCF's actuators drive, in actuator order (the robot's SDK order for
    Unitree's models): with MuJoCo's Python bindings when present, else from the XML (its
    ``<include>`` files followed)."""
    path = Path(mjcf)
    if not path.is_file():
        raise ContractError(f"mjcf {str(path)!r}: no such file")
    try:
        import mujoco
    except ImportError:
        mujoco = None
    if mujoco is not None:
        try:
            model = mujoco.MjModel.from_xml_path(os.fspath(path))
        except ValueError as err:
            raise ContractError(f"mjcf {str(path)!r}: MuJoCo cannot load it: {err}") from None
        names = []
        for a in range(model.nu):
            if model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT:
                continue
            names.append(model.joint(int(model.actuator_trnid[a, 0])).name)
    else:
        names = [a.get("joint") for a in _mjcf_actuators(path) if a.get("joint")]
    if not names:
        raise ContractError(f"mjcf {str(path)!r}: has no actuator that drives a joint")
    return names


def _mjcf_actuators(path: Path) -> list[ElementTree.Element]:
    """The actuators of an MJCF and of the files it includes, in document order."""
    return [actuator for element in _mjcf_elements(path) if element.tag == "actuator" for actuator in element]


def mjcf_joint_ranges(
    mjcf: str | os.PathLike, joints: list[str] | tuple[str, ...]
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The position range (low, high, in radians) of each of ``joints`` in an MJCF, for the
    supervisor's limits (Contract.from_deploy's default supervisor); None when one of them has
    no range (an unlimited joint, or one the MJCF lacks). With MuJoCo's Python bindings when
    present (every default and unit resolved), else from the XML: each joint's ``range``, in the
    ``<compiler angle>`` unit (degrees unless it says radian), its ``<include>`` files followed."""
    path = Path(mjcf)
    try:
        import mujoco
    except ImportError:
        mujoco = None
    ranges: dict[str, tuple[float, float]] = {}
    if mujoco is not None:
        try:
            model = mujoco.MjModel.from_xml_path(os.fspath(path))
        except ValueError as err:
            raise ContractError(f"mjcf {str(path)!r}: MuJoCo cannot load it: {err}") from None
        for j in range(model.njnt):
            if model.jnt_limited[j]:
                ranges[model.joint(j).name] = (float(model.jnt_range[j, 0]), float(model.jnt_range[j, 1]))
    else:
        degrees = True
        for element in _mjcf_elements(path):
            if element.tag == "compiler" and element.get("angle"):
                degrees = element.get("angle") != "radian"
        for element in _mjcf_elements(path):
            if element.tag != "joint" or not element.get("name") or not element.get("range"):
                continue
            if element.get("limited") == "false" or element.get("type") in ("free", "ball"):
                continue
            low, high = (float(v) for v in element.get("range").split())
            if degrees:
                low, high = math.radians(low), math.radians(high)
            ranges[element.get("name")] = (low, high)
    if not all(name in ranges for name in joints):
        return None
    return tuple(ranges[n][0] for n in joints), tuple(ranges[n][1] for n in joints)


def _mjcf_elements(path: Path, seen: frozenset[Path] = frozenset()) -> list[ElementTree.Element]:
    """Every element of an MJCF and of the files it includes, in document order."""
    if path.resolve() in seen:
        raise ContractError(f"mjcf {str(path)!r}: includes itself")
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as err:
        raise ContractError(f"mjcf {str(path)!r}: cannot read it: {err}") from None
    found: list[ElementTree.Element] = []
    for element in root.iter():
        if element.tag == "include" and element.get("file"):
            found += _mjcf_elements(path.parent / element.get("file"), seen | {path.resolve()})
        else:
            found.append(element)
    return found
