"""tdaot.Contract.from_deploy: unitree_rl_lab's / Isaac Lab's deploy.yaml and mjlab's ONNX
metadata read into a contract, every field's mapping checked (joint_ids_map, gains moved to the
policy's order, clip-then-scale made exact, command ranges, history, aliases) and every refusal's
message; and the training armature of an env.yaml (Python tags) that ``tdaot rehearse`` compares.
No package is built here: the contracts are checked as values."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest
import torch

import tdaot
from tdaot.trained.isaac_env import (
    ARMATURE_KEY,
    armature_mismatches,
    training_joint_properties,
)
from tdaot.trained.mjcf import mjcf_joint_names

# A G1/H1-like subset: the robot's (SDK's, the MJCF's) order is side by side, the policy's
# (Isaac Lab's) joint by joint: joint_pos[i] = motor[joint_ids_map[i]].
ROBOT = ["left_hip_pitch_joint", "left_knee_joint", "right_hip_pitch_joint", "right_knee_joint"]
IDS = [0, 2, 1, 3]
POLICY = ("left_hip_pitch_joint", "right_hip_pitch_joint", "left_knee_joint", "right_knee_joint")

DEPLOY = """\
joint_ids_map: [0, 2, 1, 3]
step_dt: 0.02
stiffness: [100.0, 150.0, 101.0, 151.0]
damping: [2.0, 4.0, 2.5, 4.5]
default_joint_pos: [-0.1, -0.12, 0.3, 0.32]
commands:
  base_velocity:
    ranges:
      lin_vel_x: [-0.5, 1.0]
      lin_vel_y: [-0.3, 0.3]
      ang_vel_z: [-0.2, 0.2]
      heading: null
actions:
  JointPositionAction:
    clip: [[-1.0, 1.0], [-1.1, 1.1], [-0.5, 2.0], [-0.6, 2.1]]
    joint_names: [.*]
    scale: [0.25, 0.25, 0.5, 0.5]
    offset: [-0.1, -0.12, 0.3, 0.32]
    joint_ids: !!python/object/apply:builtins.slice [null, null, null]
observations:
  base_ang_vel:
    params: {}
    clip: [-10.0, 10.0]
    scale: [0.2, 0.2, 0.2]
    history_length: 5
  projected_gravity:
    params: {}
    clip: [-0.5, 0.8]
    scale: [-1.0, 1.0, 1.0]
    history_length: 5
  velocity_commands:
    params: {command_name: base_velocity}
    clip: null
    scale: [2.0, 2.0, 0.25]
    history_length: 1
  joint_pos_rel:
    params: {}
    clip: null
    scale: [1.0, 1.0, 1.0, 1.0]
    history_length: 0
  joint_vel_rel:
    params:
      asset_cfg:
        name: robot
        joint_names: null
        joint_ids: !!python/object/apply:builtins.slice [null, null, null]
    clip: [-.inf, .inf]
    scale: [0.05, 0.05, 0.05, 0.05]
    history_length: 2
  last_action:
    params: {}
    clip: null
    scale: [1.0, 1.0, 1.0, 1.0]
    history_length: 1
"""

MJCF = """\
<mujoco model="legs">
  <default><joint armature="0.01"/></default>
  <worldbody>
    <body name="pelvis" pos="0 0 1">
      <freejoint/>
      <geom type="sphere" size="0.1"/>
      <body name="left_thigh"><joint name="left_hip_pitch_joint" axis="0 1 0"/>
        <geom type="capsule" size="0.04" fromto="0 0.1 0 0 0.1 -0.4"/>
        <body name="left_shin" pos="0 0.1 -0.4"><joint name="left_knee_joint" axis="0 1 0" armature="0"/>
          <geom type="capsule" size="0.04" fromto="0 0 0 0 0 -0.4"/></body></body>
      <body name="right_thigh"><joint name="right_hip_pitch_joint" axis="0 1 0"/>
        <geom type="capsule" size="0.04" fromto="0 -0.1 0 0 -0.1 -0.4"/>
        <body name="right_shin" pos="0 -0.1 -0.4"><joint name="right_knee_joint" axis="0 1 0"/>
          <geom type="capsule" size="0.04" fromto="0 0 0 0 0 -0.4"/></body></body>
    </body>
  </worldbody>
  <actuator>
    <motor name="lhp" joint="left_hip_pitch_joint"/><motor name="lk" joint="left_knee_joint"/>
    <motor name="rhp" joint="right_hip_pitch_joint"/><motor name="rk" joint="right_knee_joint"/>
  </actuator>
</mujoco>
"""

# Isaac Lab's env.yaml as its dumper writes it: tuples, slices and class names as Python tags.
ENV_YAML = """\
sim:
  dt: 0.005
  gravity: !!python/tuple [0.0, 0.0, -9.81]
decimation: 4
scene:
  num_envs: 4096
  robot:
    class_type: !!python/name:isaaclab.assets.articulation.articulation.Articulation ''
    init_state:
      pos: !!python/tuple [0.0, 0.0, 1.05]
    actuators:
      legs:
        class_type: !!python/name:isaaclab.actuators.actuator_pd.ImplicitActuator ''
        joint_names_expr: [.*_hip_pitch_joint, .*_knee_joint]
        stiffness: {.*_hip_pitch_joint: 100.0, .*_knee_joint: 150.0}
        armature: {.*_hip_.*: 0.01, .*_knee_joint: 0.02}
      arms:
        joint_names_expr: !!python/tuple [.*_shoulder_.*]
        armature: null
observations:
  policy:
    joint_ids: !!python/object/apply:builtins.slice [null, null, null]
"""


def write(tmp_path: Path, text: str, name: str = "deploy.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def deploy_clip_then_scale(raw: torch.Tensor, clip, scale) -> torch.Tensor:
    """unitree_rl_lab's ObservationTermCfg::get: each frame clipped, then scaled."""
    value = raw if clip is None else raw.clamp(clip[0], clip[1])
    return value * torch.tensor(scale)


def test_deploy_yaml_fields_become_the_contract(tmp_path):
    contract = tdaot.Contract.from_deploy(write(tmp_path, DEPLOY), joint_names=ROBOT)
    assert contract.control_dt == 0.02
    action = contract.outputs["action"]
    assert action.names == POLICY
    # stiffness/damping were in SDK order; the rest is in the policy's order already.
    assert action.stiffness == (100.0, 101.0, 150.0, 151.0)
    assert action.damping == (2.0, 2.5, 4.0, 4.5)
    assert action.scale == (0.25, 0.25, 0.5, 0.5)
    assert action.offset == (-0.1, -0.12, 0.3, 0.32)
    assert action.low == (-1.0, -1.1, -0.5, -0.6) and action.high == (1.0, 1.1, 2.0, 2.1)
    terms = {term.name: term for term in contract.inputs["policy"].terms}
    assert list(terms) == [
        "base_ang_vel",
        "projected_gravity",
        "velocity_commands",
        "joint_pos_rel",
        "joint_vel_rel",
        "last_action",
    ]
    assert [t.history for t in terms.values()] == [5, 5, 1, 1, 2, 1]
    # clip then scale becomes scale then clip with the bounds scaled (swapped where negative).
    assert terms["base_ang_vel"].low == pytest.approx(-2.0) and terms["base_ang_vel"].high == pytest.approx(
        2.0
    )
    assert terms["projected_gravity"].low == pytest.approx((-0.8, -0.5, -0.5))
    assert terms["projected_gravity"].high == pytest.approx((0.5, 0.8, 0.8))
    # velocity_commands: clamped to the command's ranges, then scaled.
    assert terms["velocity_commands"].low == pytest.approx((-1.0, -0.6, -0.05))
    assert terms["velocity_commands"].high == pytest.approx((2.0, 0.6, 0.05))
    # An infinite clip is none.
    assert terms["joint_vel_rel"].low is None and terms["joint_vel_rel"].high is None
    assert terms["joint_pos_rel"].offset == 0.0 and terms["joint_pos_rel"].output == "action"
    assert contract.inputs["policy"].history_layout == "term-major"
    assert len(contract.inputs["policy"].names) == 3 * 5 + 3 * 5 + 3 + 4 + 4 * 2 + 4
    assert contract.inputs["policy"].names[:4] == (
        "base_ang_vel.x@-4",
        "base_ang_vel.y@-4",
        "base_ang_vel.z@-4",
        "base_ang_vel.x@-3",
    )
    # An ordinary contract: its dict (TOML, manifest) states the layout and reads back equal.
    data = contract.to_dict()
    assert data["inputs"]["policy"]["history_layout"] == "term-major"
    assert tdaot.Contract.from_dict(data) == contract
    assert any("term velocity_commands [3]" in line for line in contract.describe())
    assert contract.metadata == {"deployment": "deploy.yaml"}


def test_the_history_layout_is_stated_and_only_term_major_is_carried():
    action = tdaot.Signal(names=("a", "b"))
    data = {
        "control_dt": 0.02,
        "inputs": {
            "obs": {"terms": [{"name": "joint_pos_rel", "history": 3}], "history_layout": "frame-major"}
        },
        "outputs": {"action": action.to_dict()},
    }
    message = (
        r"contract input 'obs': field 'history_layout': unknown history layout 'frame-major' "
        r"\(known: term-major"
    )
    with pytest.raises(tdaot.ContractError, match=message):
        tdaot.Contract.from_dict(data)
    with pytest.raises(tdaot.ContractError, match=message):
        tdaot.Contract(
            0.02,
            inputs={"obs": tdaot.Signal(terms=[tdaot.Term("joint_pos_rel")], history_layout="frame-major")},
            outputs={"action": action},
        )
    data["inputs"]["obs"]["history_layout"] = "term-major"
    assert tdaot.Contract.from_dict(data).inputs["obs"].history_layout == "term-major"


def test_the_contract_map_is_the_deploy_codes_arithmetic(tmp_path):
    """The compiled map (Signal.apply: scale, offset, clip) equals clip-then-scale per frame,
    with the command clamped first and joint_pos_rel relative to the file's default pose."""
    text = DEPLOY.replace("offset: [-0.1, -0.12, 0.3, 0.32]", "offset: [0.0, 0.0, 0.0, 0.0]")
    contract = tdaot.Contract.from_deploy(write(tmp_path, text), joint_names=ROBOT)
    signal = contract.inputs["policy"]
    torch.manual_seed(0)
    ang = torch.randn(5, 3) * 80  # five frames, well past the clip
    gravity = torch.randn(5, 3)
    command = torch.tensor([3.0, -1.0, 0.1])
    q = torch.randn(4)
    dq = torch.randn(2, 4) * 50
    last = torch.randn(4)
    default = torch.tensor([-0.1, -0.12, 0.3, 0.32])
    expected = torch.cat(
        [
            *(deploy_clip_then_scale(f, (-10.0, 10.0), [0.2] * 3) for f in ang),
            *(deploy_clip_then_scale(f, (-0.5, 0.8), [-1.0, 1.0, 1.0]) for f in gravity),
            deploy_clip_then_scale(
                torch.maximum(
                    torch.minimum(command, torch.tensor([1.0, 0.3, 0.2])), torch.tensor([-0.5, -0.3, -0.2])
                ),
                None,
                [2.0, 2.0, 0.25],
            ),
            q - default,
            *(f * 0.05 for f in dq),
            last,
        ]
    )
    assert contract.outputs["action"].offset == 0.0  # tdaot's joint_pos_rel raw: q - the action offset
    raw = torch.cat([ang.flatten(), gravity.flatten(), command, q, dq.flatten(), last])
    assert torch.allclose(signal.apply(raw), expected, atol=1e-6)


def test_joint_names_from_an_mjcf_with_mujoco_and_from_its_xml(tmp_path, monkeypatch):
    mjcf = write(tmp_path, MJCF, "robot.xml")
    # An MJCF that includes the robot: the XML reader follows <include>.
    scene = write(tmp_path, '<mujoco model="scene"><include file="robot.xml"/></mujoco>\n', "scene.xml")
    with_mujoco = tdaot.Contract.from_deploy(write(tmp_path, DEPLOY), mjcf=scene)
    assert with_mujoco.outputs["action"].names == POLICY
    monkeypatch.setitem(sys.modules, "mujoco", None)  # import mujoco fails: the XML is read
    assert mjcf_joint_names(scene) == ROBOT
    assert tdaot.Contract.from_deploy(write(tmp_path, DEPLOY), mjcf=mjcf) == with_mujoco


def test_a_deployment_files_contract_carries_the_default_supervisor(tmp_path, monkeypatch):
    """A 0.1 s soft start, the damp fallback, and the MJCF's joint ranges (degrees, as MJCF's
    default angle unit) as the limits, in the policy's joint order; with MuJoCo and from the XML
    alike. supervisor=False: none."""
    ranged = MJCF
    for side in ("left", "right"):
        ranged = ranged.replace(
            f'name="{side}_hip_pitch_joint" axis="0 1 0"',
            f'name="{side}_hip_pitch_joint" axis="0 1 0" range="-90 45"',
        )
        ranged = ranged.replace(
            f'name="{side}_knee_joint" axis="0 1 0"', f'name="{side}_knee_joint" axis="0 1 0" range="0 150"'
        )
    mjcf = write(tmp_path, ranged, "robot.xml")
    deploy = write(tmp_path, DEPLOY)
    contract = tdaot.Contract.from_deploy(deploy, mjcf=mjcf)
    low, high = (
        (-math.pi / 2, -math.pi / 2, 0.0, 0.0),
        (math.pi / 4, math.pi / 4, math.radians(150), math.radians(150)),
    )
    assert contract.supervisor == tdaot.Supervisor(
        output="action", blend_seconds=0.1, fallback="damp", low=low, high=high
    )
    assert contract.supervisor.low == pytest.approx(low) and contract.supervisor.high == pytest.approx(high)
    assert (
        "  supervisor output action, soft start 0.1 s from gain 1, low [-1.5708, -1.5708, 0, 0], "
        in "\n".join(contract.describe())
    )
    monkeypatch.setitem(sys.modules, "mujoco", None)  # the XML's ranges: the same
    assert tdaot.Contract.from_deploy(deploy, mjcf=mjcf).supervisor.high == pytest.approx(high)
    # Without an MJCF (joint names given): the soft start and the fallback, no limits; an MJCF
    # whose joints have no range gives none either.
    assert tdaot.Contract.from_deploy(deploy, joint_names=ROBOT).supervisor == tdaot.Supervisor(
        output="action", blend_seconds=0.1, fallback="damp"
    )
    assert tdaot.Contract.from_deploy(deploy, mjcf=write(tmp_path, MJCF, "bare.xml")).supervisor.low is None
    assert tdaot.Contract.from_deploy(deploy, mjcf=mjcf, supervisor=False).supervisor is None


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "  last_action:\n",
            "  height_scan:\n",
            r"observations\.height_scan: unknown observation term "
            r"'height_scan' \(tdaot's vocabulary: base_lin_vel base_ang_vel .* gait_phase; also read: "
            r"joint_pos = joint_pos_rel",
        ),
        (
            "step_dt: 0.02\n",
            "step_dt: 0.02\nuse_gym_history: true\n",
            r"'use_gym_history: true' lays "
            r"history out frame-major .* tdaot carries term-major history only",
        ),
        (
            "joint_ids_map: [0, 2, 1, 3]",
            "joint_ids_map: [0, 2, 1, 4]",
            r"field 'joint_ids_map': index 4 is "
            r"not one of the robot's 4 joints",
        ),
        (
            "joint_ids_map: [0, 2, 1, 3]",
            "joint_ids_map: [0, 2, 2, 3]",
            r"'joint_ids_map': index 2 appears twice",
        ),
        (
            "joint_ids_map: [0, 2, 1, 3]",
            "joint_ids_map: [0.5, 2, 1, 3]",
            r"'joint_ids_map': expected a list "
            r"of joint indices",
        ),
        ("step_dt: 0.02\n", "", r"field 'step_dt' is missing"),
        (
            "stiffness: [100.0, 150.0, 101.0, 151.0]",
            "stiffness: [100.0, 150.0]",
            r"field 'stiffness': has 2 "
            r"values, expected 4 \(one per robot joint",
        ),
        (
            "default_joint_pos: [-0.1, -0.12, 0.3, 0.32]",
            "default_joint_pos: [0.1]",
            r"'default_joint_pos': "
            r"has 1 values, expected 4",
        ),
        (
            "actions:\n",
            "actions:\n  JointVelocityAction: {scale: 1.0}\n",
            r"field 'actions': expected one "
            r"joint position action term, got JointVelocityAction, JointPositionAction",
        ),
        (
            "clip: [[-1.0, 1.0], [-1.1, 1.1], [-0.5, 2.0], [-0.6, 2.1]]",
            "clip: [-1.0, 1.0]",
            r"'actions\.JointPositionAction\.clip': expected 4 \[low, high\] pairs",
        ),
        (
            "scale: [0.2, 0.2, 0.2]",
            "scale: [0.2, 0.2]",
            r"'observations\.base_ang_vel\.scale': has 2 values, "
            r"expected 3 \(base_ang_vel has 3\)",
        ),
        (
            "clip: [-10.0, 10.0]",
            "clip: [-10.0]",
            r"'observations\.base_ang_vel\.clip': expected \[low, high\]",
        ),
        ("clip: [-10.0, 10.0]", "clip: [10.0, -10.0]", r"observations\.base_ang_vel: clip low 10\.0 > high"),
        (
            "clip: [-0.5, 0.8]",  # projected_gravity's scale is [-1, 1, 1]
            "clip: [-.inf, 0.8]",
            r"observations\.projected_gravity: clip: the low bound is "
            r"infinite for some elements and finite for others",
        ),
        (
            "history_length: 5\n  projected",
            "history_length: -1\n  projected",
            r"'observations\.base_ang_vel"
            r"\.history_length': expected an integer >= 0, got -1",
        ),
        (
            "command_name: base_velocity",
            "command_name: twist",
            r"observations\.velocity_commands': its "
            r"command 'twist' is not under 'commands' \(it has: base_velocity\)",
        ),
        (
            "lin_vel_y: [-0.3, 0.3]",
            "lin_vel_y: null",
            r"'commands\.base_velocity\.ranges\.lin_vel_y': "
            r"expected \[low, high\]",
        ),
        ("lin_vel_y: [-0.3, 0.3]", "lin_vel_y: [0.3, -0.3]", r"ranges\.lin_vel_y': low 0\.3 > high -0\.3"),
        (
            "  joint_pos_rel:\n    params: {}",
            "  joint_pos_rel:\n    params: {asset_cfg: {name: robot, joint_ids: [0, 1]}}",
            r"'observations\.joint_pos_rel\.params\.asset_cfg': .* is a parameter "
            r"tdaot's 'joint_pos_rel' does not take",
        ),
        (  # deploy code forked from unitree_rl_lab's: several ONNX inputs, a group of terms each
            "observations:\n  base_ang_vel:",
            "observations:\n  obs:\n    base_ang_vel: {scale: [1.0, 1.0, 1.0]}\n  base_ang_vel:",
            r"'observations\.obs' is a group of observation terms \(one per ONNX input\)",
        ),
        (
            "observations:\n",
            "observations:\n  scale_first: true\n",
            r"'observations\.scale_first' is true: each frame scaled, then clipped",
        ),
    ],
)
def test_deploy_yaml_refusals_name_the_field(tmp_path, old, new, message):
    assert old in DEPLOY
    path = write(tmp_path, DEPLOY.replace(old, new, 1))
    with pytest.raises(tdaot.ContractError, match=message):
        tdaot.Contract.from_deploy(path, joint_names=ROBOT)


def test_deploy_yaml_joint_names_refusals(tmp_path):
    path = write(tmp_path, DEPLOY)
    with pytest.raises(
        tdaot.ContractError, match=r"gives joints by index \(joint_ids_map\); pass joint_names"
    ):
        tdaot.Contract.from_deploy(path)
    with pytest.raises(tdaot.ContractError, match="give joint_names or mjcf .*, not both"):
        tdaot.Contract.from_deploy(path, joint_names=ROBOT, mjcf=write(tmp_path, MJCF, "robot.xml"))
    with pytest.raises(tdaot.ContractError, match=r"mjcf '.*absent\.xml': no such file"):
        tdaot.Contract.from_deploy(path, mjcf=tmp_path / "absent.xml")
    with pytest.raises(
        tdaot.ContractError, match=r"mjcf '.*sensor\.xml': has no actuator that drives a joint"
    ):
        tdaot.Contract.from_deploy(path, mjcf=write(tmp_path, "<mujoco/>", "sensor.xml"))
    with pytest.raises(tdaot.ContractError, match="expected a mapping of deployment fields, got list"):
        tdaot.Contract.from_deploy(write(tmp_path, "[1, 2]\n", "list.yaml"), joint_names=ROBOT)


def test_a_reserved_slot_in_the_robots_joint_order(tmp_path):
    """unitree_rl_lab's H1 motor order has an unnamed slot (index 9 of its joint_sdk_names is
    ""): its deploy.yaml has a stiffness/damping entry there (0) and no joint_ids_map entry
    points at it. The slot is given as an empty name, here as at the command line (a,,b)."""
    robot = [ROBOT[0], ROBOT[1], "", ROBOT[2], ROBOT[3]]
    text = (
        DEPLOY.replace("joint_ids_map: [0, 2, 1, 3]", "joint_ids_map: [0, 3, 1, 4]")
        .replace("stiffness: [100.0, 150.0, 101.0, 151.0]", "stiffness: [100.0, 150.0, 0.0, 101.0, 151.0]")
        .replace("damping: [2.0, 4.0, 2.5, 4.5]", "damping: [2.0, 4.0, 0.0, 2.5, 4.5]")
    )
    contract = tdaot.Contract.from_deploy(write(tmp_path, text), joint_names=robot)
    action = contract.outputs["action"]
    assert action.names == POLICY
    assert action.stiffness == (100.0, 101.0, 150.0, 151.0) and action.damping == (2.0, 2.5, 4.0, 4.5)
    with pytest.raises(tdaot.ContractError, match=r"entry 1 is index 2, a reserved \(unnamed\) slot"):
        tdaot.Contract.from_deploy(
            write(tmp_path, text.replace("[0, 3, 1, 4]", "[0, 2, 1, 4]")), joint_names=robot
        )
    with pytest.raises(
        tdaot.ContractError, match=r"expected joint names \(an empty one for a reserved slot\)"
    ):
        tdaot.Contract.from_deploy(write(tmp_path, text), joint_names=["", ""])
    from tdaot.trained.run import RslRlRun

    assert RslRlRun("run", joint_names=tuple(robot)).joint_names == tuple(robot)


def test_the_shape_unitree_rl_lab_exports(tmp_path):
    """Its export_deploy_cfg: every clip null, the command's ``heading: null``, the action's
    ``joint_ids`` a slice or null, and (in deploy code that reads it) ``use_gym_history: false``
    among the terms."""
    text = DEPLOY.replace(
        "    clip: [[-1.0, 1.0], [-1.1, 1.1], [-0.5, 2.0], [-0.6, 2.1]]\n", "    clip: null\n"
    )
    text = text.replace(
        "joint_ids: !!python/object/apply:builtins.slice [null, null, null]\nobs", "joint_ids: null\nobs"
    )
    text = text.replace("observations:\n", "observations:\n  use_gym_history: false\n  scale_first: false\n")
    for clip in ("[-10.0, 10.0]", "[-0.5, 0.8]", "[-.inf, .inf]"):
        text = text.replace(f"clip: {clip}", "clip: null")
    contract = tdaot.Contract.from_deploy(write(tmp_path, text), joint_names=ROBOT)
    action = contract.outputs["action"]
    assert action.low is None and action.high is None
    terms = contract.inputs["policy"].terms
    assert [t.name for t in terms][0] == "base_ang_vel" and len(terms) == 6
    assert all(t.low is None for t in terms if t.name != "velocity_commands")


def test_joint_pos_rel_about_a_default_pose_other_than_the_action_offset(tmp_path):
    text = DEPLOY.replace("offset: [-0.1, -0.12, 0.3, 0.32]", "offset: [0.0, 0.0, 0.0, 0.0]").replace(
        "scale: [1.0, 1.0, 1.0, 1.0]\n    history_length: 0",
        "scale: [2.0, 2.0, 2.0, 2.0]\n    history_length: 0",
    )
    contract = tdaot.Contract.from_deploy(write(tmp_path, text), joint_names=ROBOT)
    term = next(t for t in contract.inputs["policy"].terms if t.name == "joint_pos_rel")
    # tdaot's raw is q - action offset (0 here): (q - default) * 2 = q * 2 + (0 - default) * 2
    assert term.offset == pytest.approx((0.2, 0.24, -0.6, -0.64))


def mjlab_onnx(path: Path, **changes: str | None) -> Path:
    """An ONNX file as mjlab's exporter leaves it: a tiny graph, metadata_props of
    comma-separated strings (';' inside one entry)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["obs"], ["actions"])],
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, 2])],
    )
    model = helper.make_model(graph)
    meta = {
        "run_path": "local",
        "joint_names": "left_knee_joint,right_knee_joint",
        "joint_stiffness": "40.000,41.000",
        "joint_damping": "1.000,1.500",
        "default_joint_pos": "0.300,0.320",
        "action_scale": "0.250",
        "command_names": "twist",
        "observation_names": "base_ang_vel,projected_gravity,command,joint_pos,joint_vel,actions",
        "observation_terms_scale": "0.200,1.000,1.000;1.000;0.250,1.000,0.050,1.000",
        "observation_terms_clip": "-inf;inf,-inf;inf,-inf;inf,-5.000;5.000,-inf;inf,-inf;inf",
        "observation_terms_history_length": "3.000,0.000,0.000,0.000,0.000,0.000",
        "observation_terms_flatten_history_dim": "1.000,1.000,1.000,1.000,1.000,1.000",
    }
    meta.update(changes)
    for key, value in meta.items():
        if value is not None:
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def test_mjlab_onnx_metadata_becomes_the_contract(tmp_path):
    pytest.importorskip("onnx")
    contract = tdaot.Contract.from_deploy(mjlab_onnx(tmp_path / "policy.onnx"), control_dt=0.02)
    action = contract.outputs["action"]
    assert action.names == ("left_knee_joint", "right_knee_joint")
    assert action.scale == 0.25 and action.offset == (0.3, 0.32)
    assert action.stiffness == (40.0, 41.0) and action.damping == (1.0, 1.5)
    assert action.low is None
    terms = contract.inputs["policy"].terms
    # mjlab's names: command, joint_pos, joint_vel, actions.
    assert [t.name for t in terms] == [
        "base_ang_vel",
        "projected_gravity",
        "velocity_commands",
        "joint_pos_rel",
        "joint_vel_rel",
        "last_action",
    ]
    assert terms[0].scale == 0.2 and terms[0].history == 3
    assert terms[2].scale == (1.0, 1.0, 0.25) and terms[2].low is None  # no ranges in the metadata
    assert terms[3].low == -5.0 and terms[3].high == 5.0
    assert terms[4].scale == 0.05 and terms[4].low is None
    assert contract.metadata == {"deployment": "mjlab ONNX metadata (policy.onnx)", "run_path": "local"}
    assert contract.control_dt == 0.02


def test_mjlab_onnx_control_dt_and_armature_from_the_run_directory(tmp_path):
    pytest.importorskip("onnx")
    run = tmp_path / "run"
    write(run / "params", ENV_YAML, "env.yaml")
    contract = tdaot.Contract.from_deploy(mjlab_onnx(run / "exported" / "policy.onnx"))
    assert contract.control_dt == pytest.approx(0.02)  # decimation 4 * sim.dt 0.005
    assert contract.metadata[ARMATURE_KEY] == '{"left_knee_joint":0.02,"right_knee_joint":0.02}'
    assert (
        ARMATURE_KEY
        not in tdaot.Contract.from_deploy(
            mjlab_onnx(run / "exported" / "policy.onnx"), env_yaml=False, control_dt=0.02
        ).metadata
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"joint_names": None, "action_scale": None},
            r"its metadata_props lack joint_names, action_scale "
            r"\(an mjlab export carries .*; found: .*command_names",
        ),
        (
            {"observation_names": "base_ang_vel,motion_anchor_pos_b,command,joint_pos,joint_vel,actions"},
            r"metadata observation_names\[1\] 'motion_anchor_pos_b': unknown observation term",
        ),
        (
            {"command_names": "motion"},
            r"observation_names\[2\] 'command': the command is motion; tdaot's "
            r"velocity_commands is a velocity command",
        ),
        (
            {"observation_terms_history_length": "3.000,0.000,0.000,0.000,0.000,2.500"},
            r"'observation_terms_history_length' of 'actions': expected an integer >= 0, got '2.500'",
        ),
        (
            {"observation_terms_flatten_history_dim": "0.000,1.000,1.000,1.000,1.000,1.000"},
            r"'observation_terms_flatten_history_dim' of 'base_ang_vel': a history kept as its own dimension",
        ),
        ({"observation_terms_clip": "-inf;inf"}, r"'observation_terms_clip': has 1 entries, expected 6"),
        (
            {"observation_terms_clip": "-inf;inf,-inf;inf,-inf;inf,5.000,-inf;inf,-inf;inf"},
            r"'observation_terms_clip' of 'joint_pos': expected low;high, got '5.000'",
        ),
        (
            {"observation_terms_scale": "0.200,1.000,1.000;0.250,1.000,0.050,1.000"},
            r"'observation_terms_scale' of 'command': has 2 values, expected 3",
        ),
        ({"default_joint_pos": "0.300,0.320,0.1"}, r"metadata 'default_joint_pos': has 3 values, expected 2"),
        ({"joint_stiffness": "40.000,abc"}, r"metadata 'joint_stiffness': expected numbers, got 'abc'"),
    ],
)
def test_mjlab_onnx_refusals_name_the_key(tmp_path, changes, message):
    pytest.importorskip("onnx")
    with pytest.raises(tdaot.ContractError, match=message):
        tdaot.Contract.from_deploy(mjlab_onnx(tmp_path / "policy.onnx", **changes), control_dt=0.02)


def test_mjlab_onnx_file_refusals(tmp_path, monkeypatch):
    pytest.importorskip("onnx")
    path = mjlab_onnx(tmp_path / "policy.onnx")
    with pytest.raises(tdaot.ContractError, match=r"metadata has no control step; pass control_dt"):
        tdaot.Contract.from_deploy(path)
    with pytest.raises(
        tdaot.ContractError, match=r"joint 'left_knee_joint' is not one of the robot's joints"
    ):
        tdaot.Contract.from_deploy(path, control_dt=0.02, joint_names=["a", "b"])
    assert tdaot.Contract.from_deploy(path, control_dt=0.02, mjcf=write(tmp_path, MJCF, "robot.xml"))
    bad = write(tmp_path, "not a protobuf", "bad.onnx")
    with pytest.raises(tdaot.ContractError, match=r"bad\.onnx: not an ONNX file onnx can read"):
        tdaot.Contract.from_deploy(bad, control_dt=0.02)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(
        tdaot.MissingDependencyError,
        match=r"policy\.onnx: reading an ONNX file's metadata needs onnx, which is not installed: "
        r'pip install "tensordict-aot\[deploy\]" \(or: pip install "onnx>=1\.16"\)',
    ):
        tdaot.Contract.from_deploy(path, control_dt=0.02)


def test_training_armature_from_an_isaac_lab_env_yaml(tmp_path):
    env = write(tmp_path, ENV_YAML, "env.yaml")
    found = training_joint_properties(env, [*ROBOT, "left_shoulder_pitch_joint", "torso_joint"])
    # The first pattern of a group's mapping that matches gives the value; a null armature (the
    # arms) and a joint no group names (torso) record nothing.
    assert found == {
        "armature": {
            "left_hip_pitch_joint": 0.01,
            "left_knee_joint": 0.02,
            "right_hip_pitch_joint": 0.01,
            "right_knee_joint": 0.02,
        }
    }
    assert training_joint_properties(env, ["torso_joint"]) == {}
    scalar = ENV_YAML.replace("armature: {.*_hip_.*: 0.01, .*_knee_joint: 0.02}", "armature: 0.03")
    assert training_joint_properties(write(tmp_path, scalar, "scalar.yaml"), ROBOT[:1]) == {
        "armature": {"left_hip_pitch_joint": 0.03}
    }


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "armature: {.*_hip_.*: 0.01, .*_knee_joint: 0.02}",
            "armature: [0.01]",
            r"field 'scene\.robot\.actuators\.legs\.armature': expected a number or a mapping",
        ),
        (
            "armature: {.*_hip_.*: 0.01, .*_knee_joint: 0.02}",
            "armature: {.*_hip_.*: fast}",
            r"field 'scene\.robot\.actuators\.legs\.armature\.\.\*_hip_\.\*': expected a number, got 'fast'",
        ),
        (
            "joint_names_expr: [.*_hip_pitch_joint, .*_knee_joint]",
            "joint_names_expr: ['*_knee']",
            r"field 'scene\.robot\.actuators\.legs': pattern '\*_knee' is not a regular expression",
        ),
        (
            "joint_names_expr: [.*_hip_pitch_joint, .*_knee_joint]",
            "joint_names_expr: 3",
            r"field 'scene\.robot\.actuators\.legs\.joint_names_expr': expected joint-name patterns, got 3",
        ),
    ],
)
def test_training_armature_refusals(tmp_path, old, new, message):
    with pytest.raises(tdaot.ContractError, match=message):
        training_joint_properties(write(tmp_path, ENV_YAML.replace(old, new), "env.yaml"), ROBOT)


def test_from_deploy_records_the_armature_and_rehearse_names_each_mismatch(tmp_path, monkeypatch, capsys):
    pytest.importorskip("mujoco")
    params = tmp_path / "run" / "params"
    write(params, ENV_YAML, "env.yaml")
    contract = tdaot.Contract.from_deploy(write(params, DEPLOY), joint_names=ROBOT)
    assert contract.metadata[ARMATURE_KEY] == (
        '{"left_hip_pitch_joint":0.01,"right_hip_pitch_joint":0.01,'
        '"left_knee_joint":0.02,"right_knee_joint":0.02}'
    )
    mjcf = write(tmp_path, MJCF, "robot.xml")  # hips 0.01 (the default class), knees 0 and 0.01
    expected = [
        "armature left_knee_joint: MJCF 0, training 0.02",
        "armature right_knee_joint: MJCF 0.01, training 0.02",
    ]
    assert armature_mismatches(contract.metadata, mjcf) == expected
    with pytest.raises(tdaot.ContractError, match=r"metadata 'training\.armature': expected a JSON object"):
        armature_mismatches({ARMATURE_KEY: "[1]"}, mjcf)

    # tdaot rehearse prints them before the tool runs.
    from tdaot import cli, manifest, rehearse

    ran = []
    monkeypatch.setattr(manifest, "read_manifest", lambda path: types.SimpleNamespace(contract=contract))

    def tool(package, mjcf_path, trajectory, args):
        ran.append(capsys.readouterr().out)
        return types.SimpleNamespace(stdout="rehearsed\n")

    monkeypatch.setattr(rehearse, "run", tool)
    assert cli.main(["rehearse", "walk.pt2", "--mjcf", str(mjcf)]) == 0
    assert ran == ["\n".join(expected) + "\n"]
    assert capsys.readouterr().out == "rehearsed\n"


# --- end to end: a run directory made by rsl_rl, one build, inspect, rehearse's armature check ---

H1 = Path(__file__).resolve().parents[2].parent / "shared" / "robots" / "unitree_h1"


def test_a_run_directory_with_deploy_yaml_builds_in_one_command(tmp_path, monkeypatch, capsys):
    """examples/rsl_rl/make_run.py's run (rsl_rl's own runner, the H1's deploy.yaml and env.yaml)
    built by ``tdaot build --rsl-rl``: the package carries the deploy.yaml's contract, ``tdaot
    inspect`` shows its terms, and ``tdaot rehearse`` names the joints whose MJCF armature is not
    training's. One AOTInductor compile."""
    pytest.importorskip("rsl_rl")
    pytest.importorskip("mujoco")
    if not (H1 / "scene.xml").is_file():
        pytest.skip(f"{H1} (the H1 model, beside the repository) is absent")
    import importlib.util

    from tdaot import cli, rehearse

    spec = importlib.util.spec_from_file_location(
        "make_run", Path(__file__).resolve().parents[2] / "examples" / "rsl_rl" / "make_run.py"
    )
    make_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_run)
    run = make_run.make_run(str(tmp_path / "run"), str(H1 / "scene.xml"), iterations=2)
    env = Path(run) / "params" / "env.yaml"  # the ankles trained with another armature than the MJCF's
    env.write_text(
        env.read_text().replace("armature: {.*_ankle_joint: 0.01}", "armature: {.*_ankle_joint: 0.02}")
    )
    out = tmp_path / "h1.pt2"
    assert cli.main(["build", "--rsl-rl", run, "--mjcf", str(H1 / "scene.xml"), "-o", str(out)]) == 0
    expected = tdaot.Contract.from_deploy(Path(run) / "params" / "deploy.yaml", mjcf=H1 / "scene.xml")
    assert tdaot.read_manifest(out).contract == expected
    assert expected.outputs["action"].names[:2] == ("left_hip_yaw_joint", "right_hip_yaw_joint")
    capsys.readouterr()
    assert cli.main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    for line in (
        "term base_ang_vel [3 x 2 steps]: scale 0.25",
        "term velocity_commands [3]: scale [2, 2, 0.25], offset 0, low [-1, -0.6, -0.125], "
        "high [2, 0.6, 0.125]",
        "term joint_pos_rel [10] of action",
        "term joint_vel_rel [10] of action: scale 0.05, offset 0, low -5, high 5",
        "term last_action [10] of action",
        "supervisor output action, soft start 0.1 s from gain 1, low [-0.43, -0.43, -0.43, -0.43, ...], "
        "high [0.43, 0.43, 0.43, 0.43, ...], fallback damp",
    ):
        assert line in shown, shown
    # --no-supervisor: the same contract without it (the build stopped once the run is read).
    from tdaot.trained.run import RslRlRun

    bare = RslRlRun(run, mjcf=str(H1 / "scene.xml"), supervisor=False).load()[2]
    assert bare.supervisor is None and bare.outputs == expected.outputs
    asked = []

    def load(self):
        asked.append(self.supervisor)
        raise tdaot.CliError("read")

    monkeypatch.setattr(RslRlRun, "load", load)
    argv = ["build", "--rsl-rl", run, "--mjcf", str(H1 / "scene.xml"), "-o", str(tmp_path / "x.pt2")]
    assert cli.main([*argv, "--no-supervisor"]) != 0 and cli.main(argv) != 0
    assert asked == [False, True]
    monkeypatch.setattr(rehearse, "run", lambda *args: types.SimpleNamespace(stdout=""))
    assert cli.main(["rehearse", str(out), "--mjcf", str(H1 / "scene.xml")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "armature left_ankle_joint: MJCF 0.01, training 0.02",
        "armature right_ankle_joint: MJCF 0.01, training 0.02",
    ]
