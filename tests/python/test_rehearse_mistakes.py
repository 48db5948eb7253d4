"""The deployment mistakes sim2sim catches, caught by tdaot-rehearse on a robot and a policy of the
project's own: each wrong contract makes the closed loop fail visibly in the rehearsal summary,
where the right one does not.

The robot: a quadruped (an MJCF the test writes: a 4 kg box on four two-link legs, hip and knee
hinges about y, torque motors limited to 5 N m, ground contact). At q = 0 the legs point forward,
horizontally; the contract's default pose is a folded rest pose (the robot starts there, lying
low, from the keyframe "rest"), and the stance is STANCE. The policy, linear and known: an
integrator of joint targets towards the stance,

    raw = last_action - 0.3 * (joint_pos_rel - (STANCE - REST)) - 1.0 * 0.05 * joint_vel_rel

mapped to joint targets 0.25 * raw + REST, so the robot stands up from the rest pose and holds the
stance only through the previous action it is fed back.

The mistakes, each one contract change from the right one (one compile each):
- a swapped joint pair: the front-left hip and knee names exchanged (the policy's hip target
  goes to the knee): the robot tips over;
- a missing default offset: the action's offset 0 instead of the rest pose (joint_pos_rel and the
  targets lose it): the integrator drives the legs to nonsense angles, the robot crawls off
  (drifts over a metre) and ends low;
- a wrong velocity scale: joint_vel_rel at scale 1 instead of 0.05 (20x the damping the policy
  was made for, delayed a control step): the legs oscillate and the robot falls;
- a missing last action: the previous action never reaches the policy (its slot reads zeros:
  scale 0): the integrator is gone and the robot never stands up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from test_rehearse import _rehearse
from torch import nn

import tdaot

LEGS = (("fl", 0.15, 0.1), ("fr", 0.15, -0.1), ("hl", -0.15, 0.1), ("hr", -0.15, -0.1))
JOINTS = tuple(f"{leg}_{joint}" for leg, _, _ in LEGS for joint in ("hip", "knee"))
LINK = 0.15
# Folded (the foot 0.095 m below the hip) and standing (0.263 m below it, under the hip).
REST = (2.8, -2.5) * 4
STANCE = (2.07, -1.0) * 4
INTEGRATOR, DAMPING, VELOCITY_SCALE = 0.3, 1.0, 0.05
SECONDS = "5"
# The torso's height at rest: the folded legs' reach plus the foot's radius.
REST_HEIGHT = 0.116


def quadruped_mjcf(path: Path) -> str:
    legs = "".join(
        f"""
      <body name="{leg}_thigh" pos="{x} {y} 0">
        <joint name="{leg}_hip" type="hinge" axis="0 1 0" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 {LINK} 0 0" size="0.015" mass="0.3"/>
        <body name="{leg}_shank" pos="{LINK} 0 0">
          <joint name="{leg}_knee" type="hinge" axis="0 1 0" damping="0.05"/>
          <geom type="capsule" fromto="0 0 0 {LINK} 0 0" size="0.012" mass="0.2"/>
          <geom type="sphere" pos="{LINK} 0 0" size="0.02" mass="0.05" friction="1"/>
        </body>
      </body>"""
        for leg, x, y in LEGS
    )
    motors = "".join(f'<motor name="{j}_motor" joint="{j}" ctrlrange="-5 5"/>' for j in JOINTS)
    rest = " ".join(map(str, REST))
    path.write_text(
        f"""<mujoco model="tdaot test quadruped">
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <body name="torso" pos="0 0 0.3">
      <freejoint name="root"/>
      <geom type="box" size="0.2 0.1 0.03" mass="4"/>{legs}
    </body>
  </worldbody>
  <actuator>{motors}</actuator>
  <keyframe><key name="rest" qpos="0 0 {REST_HEIGHT} 1 0 0 0 {rest}"/></keyframe>
</mujoco>
"""
    )
    return str(path)


def quadruped_contract(mistake: str | None = None) -> tdaot.Contract:
    names = list(JOINTS)
    if mistake == "swapped_pair":
        names[0], names[1] = names[1], names[0]
    terms = [
        tdaot.Term("projected_gravity"),
        tdaot.Term("joint_pos_rel"),
        tdaot.Term("joint_vel_rel", scale=1.0 if mistake == "velocity_scale" else VELOCITY_SCALE),
        tdaot.Term("last_action", scale=0.0 if mistake == "no_last_action" else 1.0),
    ]
    action = tdaot.Signal(
        names=names,
        scale=0.25,
        offset=0.0 if mistake == "no_default_offset" else REST,
        stiffness=30.0,
        damping=0.3,
    )
    return tdaot.Contract(
        control_dt=0.02, inputs={"observation": tdaot.Signal(terms=terms)}, outputs={"action": action}
    )


def quadruped_policy():
    """The integrator of the module docstring: 27 observations (gravity 3, joint_pos_rel 8,
    joint_vel_rel 8, last_action 8) -> 8 raw actions, linear with a bias."""
    n = len(JOINTS)
    linear = nn.Linear(3 + 3 * n, n)
    with torch.no_grad():
        linear.weight.zero_()
        for j in range(n):
            linear.weight[j, 3 + j] = -INTEGRATOR
            linear.weight[j, 3 + n + j] = -DAMPING
            linear.weight[j, 3 + 2 * n + j] = 1.0
        linear.bias.copy_(INTEGRATOR * (torch.tensor(STANCE) - torch.tensor(REST)))
    policy = TensorDictModule(linear, in_keys=["observation"], out_keys=["action"])
    return policy, TensorDict({"observation": torch.zeros(1, 3 + 3 * n)}, batch_size=[1])


def _summary(package, mjcf: str) -> tuple[dict, str]:
    done = _rehearse(package, mjcf, "--keyframe", "rest", "--seconds", SECONDS, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout


@pytest.fixture(scope="module")
def mjcf(tmp_path_factory) -> str:
    return quadruped_mjcf(tmp_path_factory.mktemp("quadruped") / "quadruped.xml")


@pytest.fixture(scope="module")
def quadruped(build_package):
    """The package with the mistake (None: the right contract), built once each."""

    def get(mistake: str | None):
        return build_package(
            f"rehearse-quadruped-{mistake or 'right'}",
            quadruped_policy,
            {"batch": 1, "contract": quadruped_contract(mistake)},
        )[2]

    return get


def test_the_right_contract_stands_the_quadruped_up(quadruped, mjcf):
    summary, text = _summary(quadruped(None).path, mjcf)
    assert summary["start_height"] == pytest.approx(REST_HEIGHT, abs=5e-3)
    assert summary["falls"] == 0 and "falls          0" in text
    # From the rest pose to the stance (the torso 0.263 + 0.02 m up), upright, in place.
    assert summary["final_height"] > 0.27
    assert summary["min_height"] > REST_HEIGHT - 0.01
    assert summary["distance"] < 0.1
    assert summary["nonfinite"] == 0


# What each mistake does to the robot, read from the summary: (check, what it shows).
MISTAKES = {
    "swapped_pair": (lambda s: s["falls"] >= 1, "falls"),
    "no_default_offset": (lambda s: s["final_height"] < 0.22 and s["distance"] > 0.5, "distance"),
    "velocity_scale": (lambda s: s["falls"] >= 1, "falls"),
    "no_last_action": (lambda s: s["final_height"] < 0.15, "final_height"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_contract_mistake_makes_the_quadruped_fail_visibly(quadruped, mjcf, mistake):
    summary, text = _summary(quadruped(mistake).path, mjcf)
    check, shown = MISTAKES[mistake]
    assert check(summary), f"{mistake}: the rehearsal did not show it ({shown} {summary[shown]}):\n{text}"
    # Not standing where the right contract stands: fallen, or the torso well below the stance.
    assert summary["falls"] >= 1 or summary["final_height"] < 0.22, text
