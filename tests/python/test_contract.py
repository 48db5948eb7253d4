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
    assert session.interventions == {"nonfinite": 2, "rate_limited": 1}
    session.reset()
    torch.testing.assert_close(session.step(observation=b)["action"], raw)
    assert session.interventions == {"nonfinite": 2, "rate_limited": 1}
