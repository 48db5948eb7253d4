"""tdaot-rehearse (cpp/tools/tdaot_rehearse) closed loop on a robot and a policy of the project's
own: a two-link arm in a horizontal plane (an MJCF the test writes: two hinge joints about z, two
torque motors, no gravity torque) and a linear policy whose behaviour is known. Its raw action is
-2 * joint_pos_rel - 0.5 * joint_vel_rel (scaled by 0.1), mapped to joint targets
0.25 * raw + default, so the PD loop settles each joint at its default angle.

Checked from the trajectory the tool writes: each observation term as computed from the
simulation (joint_pos_rel = q - default, last_action = the previous step's raw action,
gait_phase, projected_gravity, velocity_commands), the eager policy fed the recorded
observations equal to the C++ loop's actions, and the arm settled. Refused with exit code 2 and
a message naming what is wrong: a contract joint missing from the MJCF, an actuated MJCF joint
the contract lacks, a package without a contract, a contract without gains, a control period
that is not a whole number of physics steps. The full runtime (--runtime torch) rehearses the
same trajectory as the lite runtime. One compile (the arm's package, batch 1); the
packages without a contract or gains are conftest's session packages.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot

ROOT = Path(__file__).resolve().parents[2]
JOINTS = ("shoulder", "elbow")
DEFAULT = (0.5, -0.4)
PERIOD = 0.5
COMMAND = (0.3, -0.1, 0.2)
ARM = """<mujoco model="tdaot test arm">
  <option timestep="{timestep}"/>
  <worldbody>
    <body name="upper" pos="0 0 0.5">
      <joint name="shoulder" type="hinge" axis="0 0 1" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
      <body name="lower" pos="0.3 0 0">
        <joint name="{elbow}" type="hinge" axis="0 0 1" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
        {extra}
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="shoulder_motor" joint="shoulder"/>
    <motor name="elbow_motor" joint="{elbow}"/>
    {extra_motor}
  </actuator>
</mujoco>
"""
WRIST = """<body name="hand" pos="0.3 0 0">
          <joint name="wrist" type="hinge" axis="0 0 1"/>
          <geom type="sphere" size="0.03" mass="0.1"/>
        </body>"""


def _tool() -> str:
    tool = os.environ.get("TDAOT_REHEARSE") or str(ROOT / "build/cpp/tdaot-rehearse")
    if not os.access(tool, os.X_OK):
        pytest.skip(
            f"{tool} is not built (MuJoCo from `pip install mujoco-core==4.0.0`, then the C++ build; "
            "or set TDAOT_REHEARSE)"
        )
    return tool


def arm_contract() -> tdaot.Contract:
    observation = tdaot.Signal(
        terms=[
            tdaot.Term("projected_gravity"),
            tdaot.Term("velocity_commands", scale=(1.0, 1.0, 0.5)),
            tdaot.Term("joint_pos_rel"),
            tdaot.Term("joint_vel_rel", scale=0.1),
            tdaot.Term("last_action"),
            tdaot.Term("gait_phase", period=PERIOD),
        ]
    )
    action = tdaot.Signal(
        names=JOINTS, scale=0.25, offset=DEFAULT, stiffness=(20.0, 10.0), damping=(1.0, 0.5)
    )
    # Limits far outside the arm's motion and a velocity cap it never reaches: the supervisor is
    # carried and runs on every rehearsal without changing a target (test_supervisor.py).
    supervisor = tdaot.Supervisor(low=-3.0, high=3.0, max_velocity=50.0, fallback="damp")
    return tdaot.Contract(
        control_dt=0.02,
        inputs={"observation": observation},
        outputs={"action": action},
        supervisor=supervisor,
    )


def arm_policy():
    """raw action = -2 * (scaled) joint_pos_rel - 0.5 * (scaled) joint_vel_rel: 14 -> 2, linear."""
    linear = nn.Linear(14, 2, bias=False)
    with torch.no_grad():
        linear.weight.zero_()
        for j in range(2):
            linear.weight[j, 6 + j] = -2.0
            linear.weight[j, 8 + j] = -0.5
    policy = TensorDictModule(linear, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.zeros(1, 14)}, batch_size=[1])
    return policy, example


@pytest.fixture(scope="module")
def arm(build_package):
    return build_package("rehearse-arm", arm_policy, {"batch": 1, "contract": arm_contract()})


def _mjcf(tmp_path: Path, timestep: float = 0.005, elbow: str = "elbow", wrist: bool = False) -> str:
    path = tmp_path / f"arm_{elbow}_{timestep}_{wrist}.xml"
    path.write_text(
        ARM.format(
            timestep=timestep,
            elbow=elbow,
            extra=WRIST if wrist else "",
            extra_motor='<motor name="wrist_motor" joint="wrist"/>' if wrist else "",
        )
    )
    return str(path)


def _rehearse(package, mjcf, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_tool(), str(package), "--mjcf", mjcf, *args], capture_output=True, text=True, timeout=120
    )


def test_the_arm_settles_at_its_default_pose_and_the_terms_are_what_the_contract_says(arm, tmp_path):
    policy, _, artifact = arm
    trajectory = tmp_path / "arm.csv"
    done = _rehearse(
        artifact.path,
        _mjcf(tmp_path),
        "--seconds",
        "3",
        "--command",
        ",".join(map(str, COMMAND)),
        "--trajectory",
        str(trajectory),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert "2 joints of output 'action' matched" in done.stdout
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["control_steps"] == 150 and summary["decimation"] == 4 and summary["physics_steps"] == 600
    assert summary["floating_base"] is False and summary["falls"] == 0
    assert summary["nonfinite"] == 0 and summary["rate_limited"] == 0
    assert summary["observations"] == 14 and summary["joints"] == 2

    with open(trajectory, newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 150
    names = [n for n in rows[0] if n.startswith("obs.observation.")]
    assert len(names) == 14
    contract = artifact.manifest.contract
    signal = contract.inputs["observation"]
    assert [n.removeprefix("obs.observation.") for n in names] == list(signal.names)
    previous_raw = [0.0, 0.0]
    worst = 0.0
    for row in rows:
        t = float(row["time"])
        obs = {n.removeprefix("obs.observation."): float(row[n]) for n in names}
        assert [obs[f"projected_gravity.{a}"] for a in "xyz"] == [0.0, 0.0, -1.0]
        assert [
            obs[f"velocity_commands.{a}"] for a in ("lin_vel_x", "lin_vel_y", "ang_vel_z")
        ] == pytest.approx(COMMAND)
        phase = 2 * math.pi * math.fmod(t, PERIOD) / PERIOD
        assert obs["gait_phase.sin"] == pytest.approx(math.sin(phase), abs=1e-9)
        assert obs["gait_phase.cos"] == pytest.approx(math.cos(phase), abs=1e-9)
        for j, joint in enumerate(JOINTS):
            assert obs[f"joint_pos_rel.{joint}"] == pytest.approx(
                float(row[f"q.{joint}"]) - DEFAULT[j], abs=1e-9
            )
            assert obs[f"last_action.{joint}"] == pytest.approx(previous_raw[j], abs=1e-6)
        # The eager policy on the observations the C++ loop recorded, mapped as the contract says.
        raw_obs = torch.tensor([[float(row[n]) for n in names]], dtype=torch.float64)
        with torch.no_grad():
            seen = signal.apply(raw_obs).float()
            action = policy(TensorDict({"observation": seen}, batch_size=[1]))["action"]
            target = contract.outputs["action"].apply(action.double())[0]
        for j, joint in enumerate(JOINTS):
            worst = max(worst, abs(float(row[f"target.{joint}"]) - float(target[j])))
        previous_raw = [float(row[f"raw.{joint}"]) for joint in JOINTS]
    assert worst < 1e-5, f"largest action difference to eager along the C++ trajectory: {worst:.2e}"
    # Started at q = 0, settled at the default angles.
    assert [float(rows[0][f"q.{j}"]) for j in JOINTS] == [0.0, 0.0]
    assert [float(rows[-1][f"q.{j}"]) for j in JOINTS] == pytest.approx(DEFAULT, abs=1e-3)


@pytest.mark.parametrize(
    ("mjcf", "message"),
    [
        (
            {"elbow": "knee"},
            r"contract joint 'elbow' \(output 'action'\) is not a joint of the MJCF",
        ),
        (
            {"wrist": True},
            r"MJCF actuator 'wrist_motor' drives joint 'wrist', which is not one of the contract's "
            r"joints \(output 'action': 'shoulder', 'elbow'\)",
        ),
        (
            {"timestep": 0.003},
            r"the contract's control_dt 0.02 s is not a whole number of the MJCF's physics steps "
            r"\(timestep 0.003 s",
        ),
    ],
    ids=["missing_joint", "extra_joint", "control_dt"],
)
def test_a_robot_that_does_not_match_the_contract_is_refused(arm, tmp_path, mjcf, message):
    done = _rehearse(arm[2].path, _mjcf(tmp_path, **mjcf), "--seconds", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("tdaot-rehearse: ")
    assert re.search(message, done.stderr), done.stderr


def test_a_package_without_a_contract_is_refused(tutorial, tmp_path):
    done = _rehearse(tutorial[2].path, _mjcf(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "has no contract: tdaot-rehearse needs one whose input signal is made of observation terms"
        in done.stderr
    )


def test_a_contract_without_gains_is_refused(legged, tmp_path):
    done = _rehearse(legged[2].path, _mjcf(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "contract output 'action' carries no PD gains (stiffness missing)" in done.stderr


def test_bad_options_exit_2(arm, tmp_path):
    for args, message in (
        (["--command", "1,2"], "--command: expected vx,vy,yaw_rate"),
        (["--seconds", "0"], "--seconds must be > 0"),
        (["--runtime", "jax"], "--runtime: jax not in {lite,torch}"),
    ):
        done = _rehearse(arm[2].path, _mjcf(tmp_path), *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
    done = _rehearse(arm[2].path, str(tmp_path / "absent.xml"))
    assert done.returncode == 2 and "cannot load the MJCF" in done.stderr


def test_the_full_runtime_rehearses_the_same_trajectory(arm, tmp_path):
    """--runtime torch: tdaot-rehearse-torch, the same loop on tdaot::Session (libtorch), with the
    same contract and envelope (without it: tdaot::Binding): the same trajectory as the lite
    runtime's bound run."""
    rows = {}
    for runtime, *extra in (("lite",), ("torch",), ("torch", "--no-envelope")):
        name = " ".join((runtime, *extra))
        trajectory = tmp_path / f"{len(rows)}.csv"
        done = _rehearse(
            arm[2].path,
            _mjcf(tmp_path),
            "--seconds",
            "2",
            "--runtime",
            runtime,
            *extra,
            "--command",
            ",".join(map(str, COMMAND)),
            "--trajectory",
            str(trajectory),
            "--json",
        )
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["runtime"] == runtime and summary["control_steps"] == 100
        with open(trajectory, newline="") as file:
            rows[name] = list(csv.DictReader(file))
    assert "tdaot::Binding on model" in done.stdout and "envelope off" in done.stdout
    lite = rows.pop("lite")
    for name, other in rows.items():
        assert lite[0].keys() == other[0].keys() and len(other) == 100
        # The supervisor's state by name (the arm's contract carries one: running on every run).
        assert {row["supervisor"] for row in lite} == {row["supervisor"] for row in other} == {"running"}
        numbers = [k for k in lite[0] if k != "supervisor"]
        worst = max(abs(float(a[k]) - float(b[k])) for a, b in zip(lite, other) for k in numbers)
        assert worst < 1e-6, f"lite and {name} trajectories differ by {worst:.2e}"
    # The arm moved: the comparison is not of two idle runs.
    assert abs(float(lite[-1]["q.shoulder"]) - float(lite[0]["q.shoulder"])) > 0.3


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from tdaot.cli import main

    code = main(["rehearse", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_tdaot_rehearse_reference_reports_the_eager_twins_figures(arm, tmp_path, capsys, monkeypatch):
    """`tdaot rehearse --reference`: the C++ rehearsal, then the eager policy along its trajectory
    and in a loop of its own (tdaot.rehearse, MuJoCo's Python bindings)."""
    pytest.importorskip("mujoco")
    monkeypatch.setenv("TDAOT_REHEARSE", _tool())
    factory = f"{Path(__file__)}:arm_policy"
    code, out, err = _cli(
        capsys, arm[2].path, "--mjcf", _mjcf(tmp_path), "--seconds", "2", "--command", "0.3,-0.1,0.2",
        "--reference", "--factory", factory, "--steps", "80",
    )  # fmt: skip
    assert code == 0, err
    assert "2 joints of output 'action' matched" in out and "simulated      2.00 s" in out
    along = re.search(r"eager fed the C\+\+ loop's observations \(100 steps\): (\S+)", out)
    closed = re.search(
        r"after 80 control steps: base position difference (\S+) m, joint position difference (\S+);", out
    )
    assert along and closed, out
    assert float(along[1]) < 1e-5 and float(closed[2]) < 1e-4, out
    # The arm is fixed: no base; its joints moved, so the joint figure compares motion.
    assert float(closed[1]) == 0.0


def test_tdaot_rehearse_errors_exit_2_naming_what_is_wrong(
    arm, tutorial, legged, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("TDAOT_REHEARSE", _tool())
    mjcf = _mjcf(tmp_path)
    for package, args, message in (
        (tutorial[2].path, [], "has no contract: tdaot-rehearse needs one"),
        (tutorial[2].path, ["--reference"], "has no contract: nothing to rehearse"),
        (legged[2].path, [], "contract output 'action' carries no PD gains (stiffness missing)"),
        (arm[2].path, ["--reference"], "records no factory; pass --factory FILE.py:FUNCTION"),
        (arm[2].path, ["--command", "1,2"], "--command: expected vx,vy,yaw_rate, got '1,2'"),
    ):
        code, _, err = _cli(capsys, package, "--mjcf", mjcf, "--seconds", "0.1", *args)
        assert code == 2 and message in err, (args, err)
        assert err.startswith("tdaot rehearse: error: "), err
    code, _, err = _cli(capsys, arm[2].path, "--mjcf", _mjcf(tmp_path, elbow="knee"), "--seconds", "0.1")
    assert code == 2 and "contract joint 'elbow' (output 'action') is not a joint of the MJCF" in err, err
    absent = tmp_path / "absent" / "tdaot-rehearse"
    monkeypatch.setenv("TDAOT_REHEARSE", str(absent))
    code, _, err = _cli(capsys, arm[2].path, "--mjcf", mjcf)
    assert code == 2 and f"TDAOT_REHEARSE={str(absent)!r} is not an executable file" in err, err


def test_robot_service_builds_the_observation_with_the_terms_library(arm):
    """cpp/examples/robot_service (built against the installed package by the C++ suite's
    robot_service.build) computes a contract's observation terms with tdaot/terms.h and
    commands the PD torques of its gains. $TDAOT_ROBOT_SERVICE names another build's service."""
    service = Path(os.environ.get("TDAOT_ROBOT_SERVICE") or ROOT / "build/cpp/robot_service/robot_service")
    if not os.access(service, os.X_OK):
        pytest.skip(f"{service} is not built (ctest -R robot_service.build)")
    done = subprocess.run(
        [str(service), str(arm[2].path), "--steps", "20", "--rate", "500"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "observation terms: 14 elements from the robot's state (tdaot/terms.h); commands: PD torques of the "
        "2 joints of 'action'" in done.stdout
    ), done.stdout
    # The last command is joint 0's torque, finite and acting (the stand-in joints sway).
    torque = float(re.search(r"last command action\[0\] = (\S+)", done.stdout)[1])
    assert math.isfinite(torque) and torque != 0.0
