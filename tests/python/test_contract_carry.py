"""The runner carries the contract's last_action terms and terms with history (docs/contract.md,
"What the runner carries"): the builder adds them to the package as recurrent state, so the
Session and the bound run feed back the previous raw action (zeros after a reset of the row)
and keep the last K steps of a history term (filled with the newest after a reset), while the
caller writes only the newest step. Checked against a hand-written eager loop."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot.builder.export import export_policy

JOINTS = ("hip", "knee")
BATCH = 2
HISTORY = 3


def _contract() -> tdaot.Contract:
    return tdaot.Contract(
        control_dt=0.02,
        inputs={
            "observation": tdaot.Signal(
                terms=[
                    tdaot.Term("velocity_commands", scale=2.0),
                    tdaot.Term("projected_gravity", scale=0.5, history=HISTORY),
                    tdaot.Term("joint_pos_rel"),
                    tdaot.Term("last_action", scale=0.5),
                ]
            )
        },
        # A clipped output: the raw action fed back differs from the mapped one.
        outputs={"action": tdaot.Signal(names=JOINTS, scale=0.25, offset=0.1, low=-0.2, high=0.2)},
    )


# velocity_commands 3, projected_gravity 3 x 3, joint_pos_rel 2, last_action 2
SIZE = 3 + 3 * HISTORY + 2 + 2
GRAVITY = slice(3, 3 + 3 * HISTORY)
LAST_ACTION = slice(SIZE - 2, SIZE)


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(SIZE, 2), nn.Tanh())
    with torch.no_grad():
        net[0].weight.mul_(3.0)  # large enough that the clip acts
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"]).eval()


def carry_policy():
    """The policy and example of the package that carries both terms (static batch 2)."""
    return _policy(), TensorDict({"observation": torch.randn(BATCH, SIZE)}, batch_size=[BATCH])


def build_carried(build_package):
    """(policy, contract, path) of the package; one build per session, shared by name with
    test_flight_replay's eager replay of its logs."""
    policy, _example, artifact = build_package(
        "contract-carry", carry_policy, {"batch": "static", "contract": _contract()}
    )
    return policy, _contract(), artifact.path


@pytest.fixture(scope="module")
def carried(build_package):
    return build_carried(build_package)


class _Reference:
    """The hand-written eager loop: what a caller without the carried state would do."""

    def __init__(self, policy, contract) -> None:
        self.policy, self.contract = policy, contract
        self.previous = torch.zeros(BATCH, 2)  # raw actions
        self.window = torch.zeros(BATCH, 3 * HISTORY)
        self.new = torch.ones(BATCH, dtype=torch.bool)

    def reset(self, rows: torch.Tensor) -> None:
        self.previous[rows] = 0
        self.new |= rows

    def step(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        observation = observation.clone()
        newest = observation[:, GRAVITY][:, -3:]
        window = torch.cat([self.window[:, 3:], newest], dim=1)
        window[self.new] = newest[self.new].repeat(1, HISTORY)
        observation[:, GRAVITY] = window
        observation[:, LAST_ACTION] = torch.where(self.new[:, None], 0.0, self.previous)
        seen = self.contract.inputs["observation"].apply(observation)
        with torch.no_grad():
            raw = self.policy(TensorDict({"observation": seen}, batch_size=[BATCH]))["action"]
        self.previous, self.window = raw.clone(), window
        self.new = torch.zeros(BATCH, dtype=torch.bool)
        return self.contract.outputs["action"].apply(raw), raw


def _observations(steps: int) -> list[torch.Tensor]:
    """What a caller writes: the newest steps, and garbage where the runner writes."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(BATCH, SIZE, generator=generator) * 2 for _ in range(steps)]


def test_the_manifest_declares_the_carried_state(carried):
    manifest = tdaot.load(carried[2]).manifest
    recurrent = manifest.recurrent
    pairs = {(pair.input, pair.output) for pair in recurrent.state}
    assert pairs == {
        ("tdaot.last_action.observation.last_action", "next.tdaot.last_action.observation.last_action"),
        (
            "tdaot.history.observation.projected_gravity",
            "next.tdaot.history.observation.projected_gravity",
        ),
    }
    assert recurrent.is_init == "is_init"
    shapes = {spec.key: (spec.dtype, spec.shape) for spec in manifest.inputs}
    assert shapes["tdaot.history.observation.projected_gravity"] == ("float32", (3 * HISTORY,))
    assert shapes["tdaot.last_action.observation.last_action"] == ("float32", (2,))
    assert shapes["is_init"] == ("bool", (1,))


def test_a_session_carries_last_action_and_history(carried):
    policy, contract, path = carried
    session = tdaot.load(path).session(batch=BATCH)
    reference = _Reference(policy, contract)
    for index, observation in enumerate(_observations(8)):
        if index == 4:
            rows = torch.tensor([False, True])
            session.reset(rows)
            reference.reset(rows)
        expected, raw = reference.step(observation)
        out = session.step(observation=observation)
        torch.testing.assert_close(out["action"], expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            out["next", "tdaot", "last_action", "observation", "last_action"], raw, rtol=1e-5, atol=1e-6
        )


def test_a_binding_carries_last_action_and_history(carried):
    policy, contract, path = carried
    binding = tdaot.load(path).bind(batch=BATCH)
    assert binding.allocation_free
    reference = _Reference(policy, contract)
    for index, observation in enumerate(_observations(8)):
        if index == 3:
            rows = torch.tensor([True, False])
            binding.reset(rows)
            reference.reset(rows)
        expected, _ = reference.step(observation)
        binding.inputs["observation"].copy_(observation)
        binding.run()
        torch.testing.assert_close(binding.outputs["action"], expected, rtol=1e-5, atol=1e-6)


def test_the_carry_changes_the_actions():
    """Without the carried state the same steps give other actions (the test has teeth)."""
    policy, contract = _policy(), _contract()
    observations = _observations(3)
    reference = _Reference(policy, contract)
    for observation in observations:
        expected, _ = reference.step(observation)
    plain = contract.inputs["observation"].apply(observations[-1])
    with torch.no_grad():
        naive = contract.outputs["action"].apply(
            policy(TensorDict({"observation": plain}, batch_size=[BATCH]))["action"]
        )
    assert not torch.allclose(naive, expected)


def test_caller_terms_leaves_the_manifest_without_carried_state():
    policy, contract = _policy(), _contract()
    example = TensorDict({"observation": torch.randn(BATCH, SIZE)}, batch_size=[BATCH])
    exported = export_policy(policy, example, batch="static", contract=contract, caller_terms=True)
    assert exported.recurrent is None
    assert [spec.key for spec in exported.inputs] == ["observation"]
    assert [spec.key for spec in exported.outputs] == ["action"]
    carried = export_policy(policy, example, batch="static", contract=contract)
    assert [spec.key for spec in carried.inputs] == [
        "observation",
        "tdaot.history.observation.projected_gravity",
        "tdaot.last_action.observation.last_action",
        "is_init",
    ]


def test_a_policy_key_under_tdaot_is_refused():
    policy = TensorDictModule(nn.Linear(SIZE, 2), in_keys=["observation"], out_keys=[("tdaot", "a")])
    contract = tdaot.Contract(
        control_dt=0.02,
        inputs={"observation": _contract().inputs["observation"]},
        outputs={("tdaot", "a"): tdaot.Signal(names=JOINTS)},
    )
    example = TensorDict({"observation": torch.randn(BATCH, SIZE)}, batch_size=[BATCH])
    with pytest.raises(tdaot.BuildError, match=r"'tdaot\.a' starts with 'tdaot'.*caller_terms=True"):
        export_policy(policy, example, batch="static", contract=contract)


def test_inspect_shows_the_carried_state(carried, capsys):
    from tdaot import cli

    assert cli.main(["inspect", str(carried[2])]) in (0, None)
    shown = capsys.readouterr().out
    assert "tdaot.history.observation.projected_gravity" in shown
    assert "tdaot.last_action.observation.last_action" in shown


def _history_arm():
    """The rehearsal's arm (test_rehearse) with joint_pos_rel kept over 2 steps: raw action =
    -2 * newest joint_pos_rel - 0.5 * joint_vel_rel + 0.1 * the older step + 0.1 * last_action."""
    from test_rehearse import arm_contract

    contract = arm_contract()
    terms = [
        tdaot.Term("joint_pos_rel", history=2) if term.name == "joint_pos_rel" else term
        for term in contract.inputs["observation"].terms
    ]
    contract = tdaot.Contract(
        control_dt=contract.control_dt,
        inputs={"observation": tdaot.Signal(terms=terms)},
        outputs=dict(contract.outputs),
    )
    linear = nn.Linear(16, 2, bias=False)
    with torch.no_grad():
        linear.weight.zero_()
        for j in range(2):
            linear.weight[j, 6 + j] = 0.1  # joint_pos_rel@-1
            linear.weight[j, 8 + j] = -2.0  # joint_pos_rel
            linear.weight[j, 10 + j] = -0.5  # joint_vel_rel
            linear.weight[j, 12 + j] = 0.1  # last_action
    policy = TensorDictModule(linear, in_keys=["observation"], out_keys=["action"])
    return policy, contract


@pytest.mark.parametrize("caller_terms", [False, True])
def test_tdaot_rehearse_writes_only_what_the_package_does_not_carry(caller_terms, tmp_path):
    """With the carried state the rehearsal writes only the newest step and no last_action;
    built with caller_terms=True it writes every slot: the same trajectory either way."""
    import csv

    from test_rehearse import JOINTS as ARM_JOINTS
    from test_rehearse import _mjcf, _rehearse, _tool

    _tool()  # skips where tdaot-rehearse is not built
    policy, contract = _history_arm()
    example = TensorDict({"observation": torch.zeros(1, 16)}, batch_size=[1])
    artifact = tdaot.build(
        policy, example, tmp_path / "arm.pt2", batch=1, contract=contract, caller_terms=caller_terms
    )
    assert (artifact.manifest.recurrent is None) == caller_terms
    trajectory = tmp_path / "arm.csv"
    done = _rehearse(artifact.path, _mjcf(tmp_path), "--seconds", "1", "--trajectory", str(trajectory))
    assert done.returncode == 0, done.stderr
    with open(trajectory, newline="") as file:
        rows = list(csv.DictReader(file))
    signal = contract.inputs["observation"]
    names = [f"obs.observation.{n}" for n in signal.names]
    previous_raw, older, worst = [0.0, 0.0], None, 0.0
    for row in rows:
        obs = {n.removeprefix("obs.observation."): float(row[n]) for n in names}
        newest = [obs[f"joint_pos_rel.{j}"] for j in ARM_JOINTS]
        assert [obs[f"joint_pos_rel.{j}@-1"] for j in ARM_JOINTS] == pytest.approx(older or newest)
        assert [obs[f"last_action.{j}"] for j in ARM_JOINTS] == pytest.approx(previous_raw, abs=1e-6)
        raw_obs = torch.tensor([[float(row[n]) for n in names]], dtype=torch.float64)
        with torch.no_grad():
            action = policy(TensorDict({"observation": signal.apply(raw_obs).float()}, batch_size=[1]))
            target = contract.outputs["action"].apply(action["action"].double())[0]
        for j, joint in enumerate(ARM_JOINTS):
            worst = max(worst, abs(float(row[f"target.{joint}"]) - float(target[j])))
        previous_raw, older = [float(row[f"raw.{j}"]) for j in ARM_JOINTS], newest
    assert worst < 1e-5
