"""The deployment contract: tdaot.Contract and tdaot.Signal, their refusals, the build's checks
against the policy, the contract compiled into a package (examples/policies.py:legged_policy)
and the session's safety envelope."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from examples.policies import LEGGED_JOINTS, legged_contract, nested_policy, recurrent_policy, tutorial_policy

import tdaot
from tdaot.builder.config import parse_config
from tdaot.cli import main
from tdaot.testing import eager_run

MAX_DELTA = 0.2


def _contract(**signal) -> tdaot.Contract:
    return tdaot.Contract(
        control_dt=0.02, outputs={"action": tdaot.Signal(**{"names": ("a", "b"), **signal})}
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: tdaot.Contract(control_dt=0),
            r"contract field 'control_dt': expected seconds per step > 0, got 0",
        ),
        (
            lambda: tdaot.Contract(control_dt=math.nan),
            r"'control_dt': expected seconds per step > 0, got nan",
        ),
        (lambda: _contract(names=("a", "a")), r"contract output 'action': field 'names': 'a' appears twice"),
        (lambda: _contract(names=()), r"contract output 'action': field 'names': expected one or more"),
        (lambda: _contract(scale=[1, 2, 3]), r"field 'scale': has 3 values, expected 2 \(one per name\)"),
        (lambda: _contract(low=1.0, high=[2.0, 0.5]), r"field 'low': low 1.0 > high 0.5 for 'b'"),
        (lambda: _contract(max_delta=[0.1, 0.0]), r"field 'max_delta': max_delta 0.0 for 'b' is not > 0"),
        (
            lambda: _contract(offset=[0.0, math.nan]),
            r"field 'offset': expected finite numbers, got \(0.0, nan\)",
        ),
        (lambda: _contract(high="x"), r"field 'high': expected finite numbers, got 'x'"),
        (
            lambda: tdaot.Contract(0.02, inputs={"obs": {"names": ["a"]}}),
            r"input 'obs': expected a tdaot.Signal",
        ),
        (
            lambda: tdaot.Contract(0.02, metadata={"robot": 3}),
            r"field 'metadata': expected a mapping of strings",
        ),
        (
            lambda: tdaot.Contract(0.02, outputs={("a.b",): tdaot.Signal(names=["x"])}),
            r"contract outputs: key \('a.b',\): part 'a.b' is empty or contains '.'",
        ),
    ],
    ids=[
        "dt_zero",
        "dt_nan",
        "names_twice",
        "names_empty",
        "scale_length",
        "low_above_high",
        "max_delta_zero",
        "offset_nan",
        "high_text",
        "not_a_signal",
        "metadata_number",
        "dotted_key",
    ],
)
def test_a_malformed_contract_is_refused_when_made(make, message):
    with pytest.raises(tdaot.ContractError, match=message):
        make()


@pytest.mark.parametrize(
    "factory, contract, message",
    [
        (
            tutorial_policy,
            _contract(),
            r"contract output 'action': not one of the policy's outputs \(loc, scale, sample\)",
        ),
        (
            tutorial_policy,
            tdaot.Contract(0.02, inputs={"observation": tdaot.Signal(names=["x", "y"])}),
            r"contract input 'observation': field 'names' has 2 names, "
            r"but the policy's 'observation' has 3 elements",
        ),
        (
            nested_policy,
            tdaot.Contract(
                0.02, inputs={("agents", "observation"): tdaot.Signal(names=[str(i) for i in range(10)])}
            ),
            r"contract input 'agents.observation': has per-sample shape \[2, 5\]; a signal describes a "
            r"one-dimensional \[n\] key",
        ),
        (
            recurrent_policy,
            tdaot.Contract(0.02, inputs={"is_init": tdaot.Signal(names=["first"])}),
            r"contract input 'is_init': is bool; a signal scales and clips floating-point values",
        ),
    ],
    ids=["unknown_key", "names_length", "two_dimensional", "bool_key"],
)
def test_a_contract_that_does_not_fit_the_policy_is_refused_by_build(tmp_path, factory, contract, message):
    policy, example = factory()
    with pytest.raises(tdaot.ContractError, match=message):
        tdaot.build(policy, example, tmp_path / "p.pt2", contract=contract)
    assert list(tmp_path.iterdir()) == []


def test_the_contract_option_takes_a_contract_only():
    with pytest.raises(tdaot.BuildError, match=r"contract='fast': expected a tdaot.Contract, or None"):
        tdaot.BuildOptions(contract="fast")


def test_a_contract_round_trips_through_dicts_and_files(tmp_path):
    contract = legged_contract()
    assert tdaot.Contract.from_dict(contract.to_dict()) == contract
    path = tmp_path / "contract.toml"
    path.write_text(
        'control_dt = 0.01\n[outputs.action]\nnames = ["a", "b"]\nscale = 0.5\nmax_delta = [0.1, 0.2]\n'
    )
    loaded = tdaot.Contract.load(path)
    assert loaded == tdaot.Contract(
        0.01, outputs={"action": tdaot.Signal(["a", "b"], scale=0.5, max_delta=[0.1, 0.2])}
    )
    (tmp_path / "bad.toml").write_text('control_dt = 0.01\n[outputs.action]\nnames = ["a"]\nmax_delat = 1\n')
    with pytest.raises(
        tdaot.ContractError, match=r"output 'action': unknown field 'max_delat' \(known: names"
    ):
        tdaot.Contract.load(tmp_path / "bad.toml")
    with pytest.raises(tdaot.ContractError, match=r"cannot read contract file .*nope.json"):
        tdaot.Contract.load(tmp_path / "nope.json")


def test_the_config_and_the_command_line_take_a_contract(tmp_path, capsys):
    config = textwrap.dedent(
        """
        [[artifact]]
        name = "walk"
        factory = "policies.py:legged_policy"
        [artifact.contract]
        control_dt = 0.02
        [artifact.contract.outputs.action]
        names = ["a", "b"]
        low = 1.0
        high = 0.0
        """
    )
    data = __import__("tomllib").loads(config)
    with pytest.raises(
        tdaot.ConfigError,
        match=r"artifact #1 \('walk'\): field 'contract': .*field 'low': low 1.0 > high 0.0",
    ):
        parse_config(data, Path(tmp_path), "tdaot.toml")
    del data["artifact"][0]["contract"]["outputs"]
    (spec,) = parse_config(data, Path(tmp_path), "tdaot.toml")
    assert spec.options.contract == tdaot.Contract(0.02)
    policies = ROOT / "examples" / "policies.py"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "build",
                f"{policies}:legged_policy",
                "-o",
                str(tmp_path / "x.pt2"),
                "--contract",
                f"{policies}:nope",
            ]
        )
    assert exit_info.value.code == 2
    assert "has no callable 'nope'" in capsys.readouterr().err


def test_the_package_carries_the_contract_it_was_built_with(legged, legged_native):
    assert legged_native.contract == legged_contract()
    assert legged[2].manifest.contract == legged_contract()
    assert "control_dt        0.02 s (50 Hz)" in legged_native.manifest.describe()


def test_order_maps_the_services_names_to_the_policys(legged_native):
    contract = legged_native.contract
    assert contract.order("action", list(reversed(LEGGED_JOINTS))) == list(range(11, -1, -1))
    names = list(LEGGED_JOINTS)
    names[2] = "FL_hip"
    with pytest.raises(
        tdaot.ContractError, match=r"missing 'RL_hip_joint', extra 'FL_hip' \(the first of each\)"
    ) as err:
        contract.order("action", names)
    assert err.value.key == "action"
    with pytest.raises(tdaot.ContractError, match=r"list 'FL_hip_joint' twice"):
        contract.order("action", [*LEGGED_JOINTS, "FL_hip_joint"])
    with pytest.raises(
        tdaot.ContractError, match=r"the contract has no signal 'joints' \(it has: observation, action\)"
    ):
        contract.order("joints", names)


def test_every_run_path_applies_the_compiled_map_and_clip(legged, legged_native):
    policy, example, _ = legged
    observation = torch.randn(3, 48) * 100
    expected = eager_run(policy, example[:3].set("observation", observation), legged_native.contract)[
        "action"
    ]
    torch.testing.assert_close(legged_native(observation=observation)["action"], expected)
    signal = legged_native.contract.outputs["action"]
    assert (expected >= torch.tensor(signal.low) - 1e-6).all() and (
        expected <= torch.tensor(signal.high) + 1e-6
    ).all()
    bound = legged_native.bind(batch=1)
    bound.inputs["observation"].copy_(observation[:1])
    bound.run()
    torch.testing.assert_close(bound.outputs["action"], expected[:1])
    tdaot.testing.assert_parity(policy, legged_native, example)


def test_the_session_holds_nonfinite_steps_and_limits_the_rate(legged_native):
    session = legged_native.session(batch=1)
    rest = torch.tensor(legged_contract().outputs["action"].offset).unsqueeze(0)
    held = session.step(observation=torch.full((1, 48), math.nan))["action"]
    torch.testing.assert_close(held, rest)
    a, b = torch.full((1, 48), -3.0), torch.full((1, 48), 3.0)
    first = session.step(observation=a)["action"]
    torch.testing.assert_close(first, legged_native(observation=a)["action"])
    second = session.step(observation=b)["action"]
    raw = legged_native(observation=b)["action"]
    assert (raw - first).abs().max() > MAX_DELTA
    torch.testing.assert_close(second, torch.clamp(raw, first - MAX_DELTA, first + MAX_DELTA))
    infinite = b.clone()
    infinite[0, 7] = math.inf
    assert torch.equal(session.step(observation=infinite)["action"], second)
    assert session.interventions == {
        "nonfinite": 2,
        "rate_limited": 1,
        "blended": 0,
        "clipped": 0,
        "fallback": 0,
    }
    session.reset()
    torch.testing.assert_close(session.step(observation=b)["action"], raw)
    assert session.interventions == {
        "nonfinite": 2,
        "rate_limited": 1,
        "blended": 0,
        "clipped": 0,
        "fallback": 0,
    }


# --- Observation terms and gains (docs/contract.md) -------------------------------------------

KNEES = ("left_knee_joint", "right_knee_joint")
TERMS = (
    tdaot.Term("base_ang_vel", scale=0.25, low=-5, high=5),
    tdaot.Term("projected_gravity"),
    tdaot.Term("velocity_commands", scale=[2.0, 2.0, 0.25]),
    tdaot.Term("joint_pos_rel", history=3),
    tdaot.Term("joint_vel_rel", scale=[0.05, 0.05]),
    tdaot.Term("last_action", output="action"),
    tdaot.Term("gait_phase", period=0.8),
)


def _terms_contract(*terms, outputs=None, **action) -> tdaot.Contract:
    if outputs is None:
        outputs = {"action": tdaot.Signal(names=KNEES, scale=0.5, offset=0.3, **action)}
    return tdaot.Contract(0.02, inputs={"observation": tdaot.Signal(terms=terms or TERMS)}, outputs=outputs)


def test_terms_derive_the_names_and_the_map_of_an_input():
    contract = _terms_contract(stiffness=[40.0, 40.5], damping=1)
    signal = contract.inputs["observation"]
    assert len(signal.names) == 21
    assert signal.names[:3] == ("base_ang_vel.x", "base_ang_vel.y", "base_ang_vel.z")
    assert signal.names[6:9] == (
        "velocity_commands.lin_vel_x",
        "velocity_commands.lin_vel_y",
        "velocity_commands.ang_vel_z",
    )
    # History 3: the oldest step first, the newest without a suffix.
    assert signal.names[9:15] == (
        "joint_pos_rel.left_knee_joint@-2",
        "joint_pos_rel.right_knee_joint@-2",
        "joint_pos_rel.left_knee_joint@-1",
        "joint_pos_rel.right_knee_joint@-1",
        "joint_pos_rel.left_knee_joint",
        "joint_pos_rel.right_knee_joint",
    )
    assert signal.names[-4:] == (
        "last_action.left_knee_joint",
        "last_action.right_knee_joint",
        "gait_phase.sin",
        "gait_phase.cos",
    )
    assert [t.size for t in signal.terms] == [3, 3, 3, 2, 2, 2, 2]
    assert signal.scale[:3] == (0.25,) * 3 and signal.scale[6:9] == (2.0, 2.0, 0.25)
    assert signal.scale[15:17] == (0.05, 0.05) and signal.offset == 0.0
    assert signal.low[:3] == (-5.0,) * 3 and signal.low[3] == -math.inf and signal.high[20] == math.inf
    raw = torch.full((2, 21), 100.0)
    value = signal.apply(raw)  # the map compiled into a package
    assert value[0, :3].tolist() == [5.0] * 3 and value[0, 3].item() == 100.0
    assert value[0, 15].item() == pytest.approx(5.0)
    assert contract.outputs["action"].stiffness == (40.0, 40.5)
    assert contract.outputs["action"].damping == 1.0
    assert contract.order("observation", list(reversed(signal.names)))[0] == 20
    # Round trips: dicts, a contract made of the derived signals, the describe lines.
    assert tdaot.Contract.from_dict(contract.to_dict()) == contract
    assert tdaot.Contract(0.02, inputs=contract.inputs, outputs=contract.outputs) == contract
    assert contract.to_dict()["inputs"]["observation"]["terms"][6] == {
        "name": "gait_phase",
        "scale": 1.0,
        "offset": 0.0,
        "history": 1,
        "period": 0.8,
    }
    text = "\n".join(contract.describe())
    assert "input  observation [21]: 7 terms" in text
    assert "term joint_pos_rel [2 x 3 steps]: scale 1, offset 0" in text
    assert "term gait_phase [2], period 0.8: scale 1, offset 0" in text
    assert "term last_action [2] of action: scale 1" in text
    assert "gains stiffness [40, 40.5], damping 1" in text
    assert tdaot.Term("gait_phase", period=0.8).params == {"period": 0.8}
    assert "Term" in tdaot.__all__


_ACTION = {"action": tdaot.Signal(names=KNEES)}


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: _terms_contract(tdaot.Term("base_height")),
            r"contract input 'observation': term 0 'base_height': field 'name': unknown term 'base_height' "
            r"\(known: base_lin_vel base_ang_vel",
        ),
        (
            lambda: _terms_contract(tdaot.Term("base_ang_vel"), tdaot.Term("joint_pos_rel", history=0)),
            r"term 1 'joint_pos_rel': field 'history': history 0 is not an integer >= 1",
        ),
        (
            lambda: _terms_contract(tdaot.Term("joint_pos_rel", history=1.5)),
            r"term 0 'joint_pos_rel': field 'history': history 1.5 is not an integer >= 1",
        ),
        (
            lambda: _terms_contract(tdaot.Term("last_action"), outputs={}),
            r"term 0 'last_action': field 'name': has one element per joint of the contract's joint output "
            r"signal, but the contract has no output signal",
        ),
        (
            lambda: _terms_contract(tdaot.Term("last_action", output="observation")),
            r"term 0 'last_action': field 'output': 'observation' is not one of the contract's output "
            r"signals \(it has: action\)",
        ),
        (
            lambda: _terms_contract(tdaot.Term("base_lin_vel", output="action")),
            r"term 0 'base_lin_vel': field 'output': takes no output",
        ),
        (
            lambda: _terms_contract(tdaot.Term("gait_phase")),
            r"term 0 'gait_phase': field 'period': missing \(seconds per gait cycle\)",
        ),
        (
            lambda: _terms_contract(tdaot.Term("gait_phase", period=-1)),
            r"term 0 'gait_phase': field 'period': period -1.0 is not a number > 0",
        ),
        (
            lambda: _terms_contract(tdaot.Term("gait_phase", period=1, perod=1)),
            r"term 0 'gait_phase': field 'perod': unknown term field \(known: name scale offset low high "
            r"history output period\)",
        ),
        (
            lambda: _terms_contract(tdaot.Term("joint_vel_rel", scale=[1, 2, 3])),
            r"term 0 'joint_vel_rel': field 'scale': has 3 values, expected 2 \(one per element\)",
        ),
        (
            lambda: _terms_contract(tdaot.Term("base_ang_vel", low=1, high=0)),
            r"term 0 'base_ang_vel': field 'low': low 1.0 > high 0.0 for 'x'",
        ),
        (
            lambda: _terms_contract(tdaot.Term("base_ang_vel", offset=math.nan)),
            r"term 0 'base_ang_vel': field 'offset': expected finite numbers",
        ),
        (
            lambda: _terms_contract(tdaot.Term("base_ang_vel"), tdaot.Term("base_ang_vel")),
            r"term 1 'base_ang_vel': field 'name': appears twice",
        ),
        (
            lambda: _terms_contract("base_ang_vel"),
            r"contract input 'observation': term 0: expected a tdaot.Term, got str",
        ),
        (
            lambda: tdaot.Contract(
                0.02, inputs={"o": tdaot.Signal(names=["x", "y", "z"], terms=[tdaot.Term("base_ang_vel")])}
            ),
            r"contract input 'o': field 'names': a signal of terms derives its names",
        ),
        (
            lambda: tdaot.Contract(
                0.02, inputs={"o": tdaot.Signal(terms=[tdaot.Term("base_ang_vel")], max_delta=1.0)}
            ),
            r"contract input 'o': field 'max_delta': a rate limit is for outputs",
        ),
        (
            lambda: tdaot.Contract(0.02, outputs={"a": tdaot.Signal(terms=[tdaot.Term("base_ang_vel")])}),
            r"contract output 'a': field 'terms': terms describe an input's observations; 'a' is an output",
        ),
        (
            lambda: _terms_contract(stiffness=[1.0, 2.0, 3.0]),
            r"contract output 'action': field 'stiffness': has 3 values, expected 2 \(one per joint\)",
        ),
        (
            lambda: _terms_contract(damping=[1.0, -2.0]),
            r"contract output 'action': field 'damping': damping for 'right_knee_joint' is negative",
        ),
        (
            lambda: tdaot.Contract(0.02, inputs={"o": tdaot.Signal(names=["x"], stiffness=1.0)}),
            r"contract input 'o': field 'stiffness': gains belong to an output signal of joint targets; "
            r"'o' is an input",
        ),
    ],
    ids=[
        "unknown_term",
        "history_zero",
        "history_float",
        "joint_term_without_output",
        "last_action_not_a_joint_signal",
        "output_on_base_term",
        "gait_phase_no_period",
        "gait_phase_negative_period",
        "unknown_param",
        "scale_length",
        "low_above_high",
        "offset_nan",
        "term_twice",
        "not_a_term",
        "terms_and_names",
        "terms_and_max_delta",
        "terms_on_output",
        "gains_length",
        "gains_negative",
        "gains_on_input",
    ],
)
def test_a_term_or_gain_mistake_is_refused_when_made(make, message):
    with pytest.raises(tdaot.ContractError, match=message):
        make()


def test_terms_of_the_wrong_size_are_refused_by_build(tmp_path):
    policy, example = tutorial_policy()  # observation [3], sample [2]
    contract = tdaot.Contract(
        0.02,
        inputs={"observation": tdaot.Signal(terms=[tdaot.Term("base_ang_vel"), tdaot.Term("last_action")])},
        outputs={"sample": tdaot.Signal(names=("left", "right"), stiffness=10.0)},
    )
    with pytest.raises(
        tdaot.ContractError,
        match=r"contract input 'observation': field 'terms': the terms have 5 elements "
        r"\(base_ang_vel 3 \+ last_action 2\), but the policy's 'observation' has 3 elements",
    ):
        tdaot.build(policy, example, tmp_path / "p.pt2", contract=contract)
    assert list(tmp_path.iterdir()) == []


def test_the_config_and_contract_files_take_terms_and_gains(tmp_path):
    config = textwrap.dedent(
        """
        [[artifact]]
        name = "walk"
        factory = "policies.py:legged_policy"
        [artifact.contract]
        control_dt = 0.02
        [artifact.contract.inputs.observation]
        terms = [
          { name = "base_ang_vel", scale = 0.25 },
          { name = "joint_pos_rel", history = 3 },
          { name = "last_action" },
          { name = "gait_phase", period = 0.8 },
        ]
        [artifact.contract.outputs.action]
        names = ["left_knee_joint", "right_knee_joint"]
        offset = [0.3, 0.3]
        stiffness = [150.0, 150.0]
        damping = 2.0
        """
    )
    data = __import__("tomllib").loads(config)
    (spec,) = parse_config(data, Path(tmp_path), "tdaot.toml")
    expected = tdaot.Contract(
        0.02,
        inputs={
            "observation": tdaot.Signal(
                terms=[
                    tdaot.Term("base_ang_vel", scale=0.25),
                    tdaot.Term("joint_pos_rel", history=3),
                    tdaot.Term("last_action"),
                    tdaot.Term("gait_phase", period=0.8),
                ]
            )
        },
        outputs={
            "action": tdaot.Signal(names=KNEES, offset=[0.3, 0.3], stiffness=[150.0, 150.0], damping=2.0)
        },
    )
    assert spec.options.contract == expected
    assert len(expected.inputs["observation"].names) == 3 + 6 + 2 + 2
    data["artifact"][0]["contract"]["inputs"]["observation"]["terms"][1]["history"] = 0
    with pytest.raises(
        tdaot.ConfigError,
        match=r"artifact #1 \('walk'\): field 'contract': .*term 1 'joint_pos_rel': field 'history'",
    ):
        parse_config(data, Path(tmp_path), "tdaot.toml")
    (tmp_path / "c.json").write_text(__import__("json").dumps(expected.to_dict()))
    assert tdaot.Contract.load(tmp_path / "c.json") == expected


def test_the_manifest_parser_reads_terms_and_gains():
    text = (ROOT / "tests" / "manifests" / "valid" / "contract_terms.json").read_text()
    manifest = tdaot.Manifest.from_json(text, "contract_terms.json")
    signal = manifest.contract.inputs["observation"]
    assert len(signal.names) == 21 and signal.names[-1] == "gait_phase.cos"
    assert signal.terms[3] == tdaot.Term("joint_pos_rel", history=3)
    assert manifest.contract.outputs["sample"].stiffness == (40.0, 40.5)
    assert tdaot.Manifest.from_json(manifest.to_json(), "again") == manifest
    assert "term gait_phase [2], period 0.8" in manifest.describe()
    bad = text.replace('"history": 3', '"history": 0')
    with pytest.raises(
        tdaot.ManifestError,
        match=r"field 'contract.inputs.observation.terms\[3\].history': term 'joint_pos_rel': history 0",
    ):
        tdaot.Manifest.from_json(bad, "bad.json")
