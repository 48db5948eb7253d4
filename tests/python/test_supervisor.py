"""The supervisor of the joint targets (tdaot.Supervisor) from Python: refused by name when the
Contract is made, carried in the package and in tdaot inspect, and run by Policy.bind and
Policy.session, overridable when bound (a soft start from the measured pose with its gain ramp, the
limits, the damp and hold fallbacks on a velocity over its cap and on a NaN). On the rehearsal's
arm package (test_rehearse.arm: observation projected_gravity 3, velocity_commands 3,
joint_pos_rel 2, joint_vel_rel 2, last_action 2, gait_phase 2; action = 0.25 * raw + default):
no compile of its own."""

from __future__ import annotations

import math
import re

import pytest
import torch
from test_rehearse import DEFAULT, JOINTS, arm_contract, arm_policy

import tdaot
from tdaot import cli

POS, VEL = slice(6, 8), slice(8, 10)  # joint_pos_rel, joint_vel_rel in the observation


@pytest.fixture(scope="module")
def arm(build_package):
    """test_rehearse's arm package (one build per session, shared by name)."""
    return build_package("rehearse-arm", arm_policy, {"batch": 1, "contract": arm_contract()})


def _observation(q=(0.0, 0.0), dq=(0.0, 0.0)) -> torch.Tensor:
    obs = torch.zeros(1, 14)
    obs[0, 2] = -1.0  # upright
    obs[0, POS] = torch.tensor([q[j] - DEFAULT[j] for j in range(2)])
    obs[0, VEL] = torch.tensor(dq)
    return obs


def _policy_target(q, dq=(0.0, 0.0)) -> list[float]:
    """The arm policy's target: default + 0.25 * (-2 * (q - default) - 0.5 * 0.1 * dq)."""
    return [DEFAULT[j] + 0.25 * (-2.0 * (q[j] - DEFAULT[j]) - 0.05 * dq[j]) for j in range(2)]


def _with(contract: tdaot.Contract, **changes) -> dict:
    return {
        "control_dt": contract.control_dt,
        "inputs": contract.inputs,
        "outputs": contract.outputs,
        **changes,
    }


@pytest.mark.parametrize(
    "supervisor, message",
    [
        (
            tdaot.Supervisor(fallback="freeze"),
            "field 'fallback': unknown fallback 'freeze' (known: hold damp)",
        ),
        (
            tdaot.Supervisor(low=(-1.0, -1.0, -1.0)),
            "field 'low': has 3 values, expected 2 (one per joint of 'action') or one number",
        ),
        (
            tdaot.Supervisor(max_velocity=(1.0,)),
            "field 'max_velocity': has 1 values, expected 2 (one per joint of 'action') or one number",
        ),
        (
            tdaot.Supervisor(output="torque"),
            "field 'output': 'torque' is not one of the contract's output signals",
        ),
        (
            tdaot.Supervisor(low=(0.0, 0.5), high=0.55, margin=0.05),
            "field 'low': low 0.5 + margin 0.05 > high 0.55 - margin for 'elbow'",
        ),
        (
            tdaot.Supervisor(start_gain_fraction=1.5),
            "field 'start_gain_fraction': expected a fraction in [0, 1], got 1.5",
        ),
        (tdaot.Supervisor(blend_seconds=-1), "field 'blend_seconds': expected seconds >= 0"),
        (tdaot.Supervisor(max_tilt=4.0), "field 'max_tilt': expected radians in (0, pi]"),
        (tdaot.Supervisor(margin=-0.1), "field 'margin': expected radians >= 0, got -0.1"),
        (
            tdaot.Supervisor(blend_max_velocity=0.0),
            "field 'blend_max_velocity': blend_max_velocity 0 for 'shoulder'",
        ),
        (tdaot.Supervisor(max_torque=(5.0, 0.0)), "field 'max_torque': max_torque 0 for 'elbow' is not > 0"),
        (
            tdaot.Supervisor(max_rate_limited_steps=2),
            "field 'max_rate_limited_steps': counts steps the envelope",
        ),
        (tdaot.Supervisor(max_rate_limited_steps=1.5), "field 'max_rate_limited_steps': expected steps >= 1"),
        (tdaot.Supervisor(low="wide"), "field 'low': expected finite numbers, got 'wide'"),
    ],
)
def test_a_contract_refuses_a_bad_supervisor_by_field(supervisor, message):
    with pytest.raises(tdaot.ContractError, match=re.escape("contract supervisor: " + message)):
        tdaot.Contract(**_with(arm_contract(), supervisor=supervisor))


def test_what_a_supervisor_reads_must_be_in_the_observation():
    contract = arm_contract()
    without = {
        name: tdaot.Signal(terms=[t for t in contract.inputs["observation"].terms if t.name != name])
        for name in ("joint_pos_rel", "joint_vel_rel", "projected_gravity")
    }
    cases = [
        (
            "joint_pos_rel",
            tdaot.Supervisor(blend_seconds=1.0),
            "field 'blend_seconds': a soft start (blend_seconds 1)",
        ),
        (
            "joint_pos_rel",
            tdaot.Supervisor(fallback="damp"),
            "field 'fallback': fallback 'damp' targets the measured",
        ),
        (
            "joint_vel_rel",
            tdaot.Supervisor(max_velocity=5.0),
            "field 'max_velocity': reads the measured joint velocities",
        ),
        ("projected_gravity", tdaot.Supervisor(max_tilt=0.5), "field 'max_tilt': reads the base tilt"),
        (
            "joint_pos_rel",
            tdaot.Supervisor(max_torque=50.0),
            "field 'max_torque': bounds each target's distance from the measured joint position",
        ),
    ]
    for term, supervisor, message in cases:
        with pytest.raises(tdaot.ContractError) as refused:
            tdaot.Contract(
                control_dt=0.02,
                inputs={"observation": without[term]},
                outputs=contract.outputs,
                supervisor=supervisor,
            )
        assert message in str(refused.value)
    undamped = tdaot.Signal(names=JOINTS, offset=DEFAULT, stiffness=10.0)
    with pytest.raises(tdaot.ContractError, match="fallback 'damp' applies the damping of 'action'"):
        tdaot.Contract(
            **_with(contract, outputs={"action": undamped}, supervisor=tdaot.Supervisor(fallback="damp"))
        )
    stiffless = tdaot.Signal(names=JOINTS, offset=DEFAULT, damping=1.0)
    with pytest.raises(
        tdaot.ContractError, match="field 'max_torque': bounds the torque of the stiffness of 'action'"
    ):
        tdaot.Contract(
            **_with(contract, outputs={"action": stiffless}, supervisor=tdaot.Supervisor(max_torque=50.0))
        )
    with pytest.raises(tdaot.ContractError, match="expected a tdaot.Supervisor, got dict"):
        tdaot.Contract(**_with(contract, supervisor={"fallback": "hold"}))


def test_the_supervisor_round_trips_through_dicts_and_tables():
    contract = tdaot.Contract(
        **_with(
            arm_contract(),
            supervisor=tdaot.Supervisor(
                blend_seconds=1.0, low=(-1.0, -2.0), high=2.0, margin=0.1, max_torque=(5.0, 6.0)
            ),
        )
    )
    assert tdaot.Contract.from_dict(contract.to_dict()) == contract
    with pytest.raises(tdaot.ContractError, match="contract supervisor: unknown field 'blend_time'"):
        tdaot.Contract.from_dict({**contract.to_dict(), "supervisor": {"blend_time": 1.0}})
    assert (
        "  supervisor soft start 1 s from gain 1, low [-1, -2], high 2, margin 0.1, max_torque [5, 6] N m, "
        "fallback hold" in contract.describe()
    )


def test_the_package_carries_its_supervisor_and_inspect_prints_it(arm, capsys):
    native = tdaot.load(arm[2].path)
    assert native.contract == arm_contract()
    assert native.contract.supervisor == tdaot.Supervisor(
        low=-3.0, high=3.0, max_velocity=50.0, fallback="damp"
    )
    assert cli.main(["inspect", str(arm[2].path)]) in (0, None)
    assert "supervisor low -3, high 3, max_velocity 50 rad/s, fallback damp" in capsys.readouterr().out
    # The contract's supervisor runs on a plain bind and session; supervisor=False leaves it out.
    assert native.bind(1).supervised and native.session(1).supervised
    bare = native.bind(1, supervisor=False)
    assert not bare.supervised
    with pytest.raises(tdaot.InvalidArgumentError, match="has no supervisor: its contract has none"):
        _ = bare.supervisor
    with pytest.raises(tdaot.InvalidArgumentError, match="has no supervisor"):
        _ = native.session(1, supervisor=False).supervisor


def test_a_soft_start_blends_from_the_measured_pose_and_ramps_the_gains(arm):
    native = tdaot.load(arm[2].path)
    b = native.bind(1, supervisor=tdaot.Supervisor(blend_seconds=0.1, start_gain_fraction=0.5))  # 5 steps
    assert (b.supervisor.mode, b.supervisor.gain_scale, b.supervisor.steps) == ("blending", 0.5, 0)
    crouch = (DEFAULT[0] - 0.3, DEFAULT[1] + 0.3)
    goal = _policy_target(crouch)
    for k in range(1, 7):
        b.inputs["observation"].copy_(_observation(crouch))
        b.run()
        alpha = min(1.0, k / 5)
        expected = [crouch[j] + alpha * (goal[j] - crouch[j]) for j in range(2)]
        assert b.outputs["action"][0].tolist() == pytest.approx(expected, abs=1e-5), k
        assert b.supervisor.gain_scale == pytest.approx(0.5 + 0.5 * alpha), k
        assert b.supervisor.mode == ("blending" if k < 5 else "running"), k
    assert b.interventions["blended"] == 5
    # A reset starts it again.
    b.reset()
    b.inputs["observation"].copy_(_observation(crouch))
    b.run()
    assert b.supervisor.mode == "blending" and b.supervisor.steps == 1


def test_the_torque_cap_keeps_each_target_near_the_measured_position(arm):
    native = tdaot.load(arm[2].path)
    s = native.session(1, supervisor=tdaot.Supervisor(max_torque=(2.0, 10.0)))  # kp 20, 10: 0.1, 1 rad
    q = (0.4, -0.3)
    goal = _policy_target(q)
    out = s.step(observation=_observation(q))
    assert abs(goal[0] - q[0]) > 0.1 and abs(goal[1] - q[1]) < 1.0
    assert out["action"][0].tolist() == pytest.approx(
        [q[0] + math.copysign(0.1, goal[0] - q[0]), goal[1]], abs=1e-6
    )
    assert dict(s.interventions)["clipped"] == 1


def test_a_velocity_over_its_cap_damps_until_reset(arm):
    native = tdaot.load(arm[2].path)
    s = native.session(
        1, supervisor=tdaot.Supervisor(max_velocity=(2.0, 3.0), fallback="damp", low=-1.0, high=1.0)
    )
    q = (0.4, -0.3)
    out = s.step(observation=_observation(q, dq=(1.9, -2.9)))
    assert s.supervisor.mode == "running"
    assert out["action"][0].tolist() == pytest.approx(_policy_target(q, (1.9, -2.9)), abs=1e-6)
    out = s.step(observation=_observation(q, dq=(0.0, -3.5)))
    assert (s.supervisor.mode, s.supervisor.gain_scale, s.supervisor.damping_scale) == ("damped", 0.0, 1.0)
    assert out["action"][0].tolist() == pytest.approx(q, abs=1e-6)  # the measured positions
    out = s.step(observation=_observation((2.0, 0.0)))  # in domain again: still damped, clipped
    assert s.supervisor.mode == "damped"
    assert out["action"][0].tolist() == pytest.approx([1.0, 0.0], abs=1e-6)
    s.reset()
    s.step(observation=_observation(q))
    assert s.supervisor.mode == "running"
    assert dict(s.interventions)["fallback"] == 2 and dict(s.interventions)["clipped"] == 1


def test_a_nan_holds_the_last_safe_targets_and_the_envelope_counts_it(arm):
    native = tdaot.load(arm[2].path)
    b = native.bind(1, envelope=True, supervisor=tdaot.Supervisor(fallback="hold"))
    q = (0.4, -0.3)
    b.inputs["observation"].copy_(_observation(q))
    b.run()
    safe = b.outputs["action"][0].tolist()
    b.inputs["observation"][0, 6] = math.nan
    b.run()
    assert b.supervisor.mode == "held"
    assert b.outputs["action"][0].tolist() == pytest.approx(safe)
    assert dict(b.interventions) == {
        "nonfinite": 1,
        "rate_limited": 0,
        "blended": 0,
        "clipped": 0,
        "fallback": 1,
    }
    b.inputs["observation"].copy_(_observation((0.0, 0.0)))
    b.run()
    assert b.supervisor.mode == "held" and b.outputs["action"][0].tolist() == pytest.approx(safe)


def test_a_bind_time_supervisor_is_checked_against_the_contract(arm, tutorial):
    native = tdaot.load(arm[2].path)
    with pytest.raises(
        tdaot.ContractError, match=r"contract supervisor: field 'fallback': unknown fallback 'freeze'"
    ):
        native.bind(1, supervisor=tdaot.Supervisor(fallback="freeze"))
    with pytest.raises(tdaot.ContractError, match=r"field 'low': has 3 values, expected 2"):
        native.session(1, supervisor=tdaot.Supervisor(low=(0.0, 0.0, 0.0)))
    with pytest.raises(tdaot.InvalidArgumentError, match="supervisor='on': expected True"):
        native.bind(1, supervisor="on")
    with pytest.raises(
        tdaot.InvalidArgumentError, match="supervisor row 1 is outside the binding's batch of 1 rows"
    ):
        native.bind(1).supervisor_row(1)
    plain = tdaot.load(tutorial[2].path)
    with pytest.raises(tdaot.ContractError, match="which has no contract"):
        plain.bind(1, supervisor=tdaot.Supervisor())
    assert not plain.bind(1).supervised
