"""What tdaot.load returns is a tensordict module (tdaot.Policy): public in_keys/out_keys, the
outputs written into the TensorDict given, usable in a TensorDictSequential, and a stand-in for
the eager policy in a torchrl rollout, recurrent state included (torchrl's GRUModule with
InitTracker and its primer). Also the one face of the runtime: the names of the last release
warn, and constructing a Policy from a path is the deprecated second door."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from examples import torchrl_policies as P
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential, set_interaction_type
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import Compose, EnvBase, InitTracker, TransformedEnv

import tdaot

STEPS = 16
# The tiny environment ends an episode every EPISODE steps, so a rollout crosses resets (is_init).
EPISODE = 6


class _Drift(EnvBase):
    """A tiny deterministic-given-its-seed environment, no gym: observation [3] drifts with the
    action [2] (under ``action_key``) plus seeded noise; done every EPISODE steps."""

    def __init__(self, action_key: str) -> None:
        super().__init__(batch_size=torch.Size([]))
        self.observation_spec = Composite(observation=Unbounded(shape=(3,)))
        self.full_action_spec = Composite({action_key: Bounded(-1.0, 1.0, shape=(2,))})
        self.reward_spec = Unbounded(shape=(1,))
        self.action_name = action_key
        self.rng = torch.Generator().manual_seed(0)
        self.t = 0

    def _reset(self, tensordict=None):
        self.t = 0
        observation = torch.randn(3, generator=self.rng)
        return TensorDict(
            {
                "observation": observation,
                "done": torch.zeros(1, dtype=torch.bool),
                "terminated": torch.zeros(1, dtype=torch.bool),
            },
            batch_size=[],
        )

    def _step(self, tensordict):
        self.t += 1
        action = tensordict.get(self.action_name).clamp(-1, 1)
        previous = tensordict.get("observation")
        push = torch.stack([action[0], action[1], action[0] * action[1]])
        observation = 0.9 * previous + 0.3 * push + 0.01 * torch.randn(3, generator=self.rng)
        done = torch.tensor([self.t % EPISODE == 0])
        return TensorDict(
            {
                "observation": observation,
                "reward": -observation.norm().reshape(1),
                "done": done,
                "terminated": done.clone(),
            },
            batch_size=[],
        )

    def _set_seed(self, seed):
        self.rng = torch.Generator().manual_seed(seed)


def _rollouts(env, eager, native, seed: int = 3):
    with set_interaction_type("deterministic"), torch.no_grad():
        env.set_seed(seed)
        expected = env.rollout(STEPS, eager, break_when_any_done=False)
        env.set_seed(seed)
        actual = env.rollout(STEPS, native, break_when_any_done=False)
    return expected, actual


@pytest.fixture(scope="module")
def gru(build_package):
    """torchrl's GRUModule as it comes, then a linear head (examples/torchrl_policies.py)."""
    return build_package("policy-module-gru", P.gru_policy, {})


def test_the_loaded_policy_is_a_tensordict_module_with_public_keys(tutorial_native, recurrent_native):
    assert isinstance(tutorial_native, TensorDictModuleBase) and isinstance(tutorial_native, tdaot.Policy)
    assert tutorial_native.in_keys == ["observation"]
    assert tutorial_native.out_keys == ["loc", "scale", "sample"]
    # A recurrent package: its state and is_init are in keys, the next state an out key (torchrl's way).
    assert recurrent_native.in_keys == ["observation", "hidden", "is_init"]
    assert recurrent_native.out_keys == ["action", ("next", "hidden")]


def test_the_policy_writes_into_the_tensordict_and_returns_it(tutorial, tutorial_native):
    policy, example, _ = tutorial
    td = example.clone()
    out = tutorial_native(td)
    assert out is td and set(td.keys()) == {"observation", "loc", "scale", "sample"}
    expected = policy(example.clone())
    for key in tutorial_native.out_keys:
        torch.testing.assert_close(td[key], expected[key])


def test_unbatched_and_multi_dim_batches_are_flattened_for_the_call(tutorial_native):
    obs = torch.linspace(-1, 1, 2 * 3 * 3).reshape(2, 3, 3)
    flat = tutorial_native.run_positional(obs.reshape(6, 3))[0]
    several = tutorial_native(TensorDict({"observation": obs}, batch_size=[2, 3]))
    torch.testing.assert_close(several["loc"], flat.reshape(2, 3, 2), rtol=0, atol=0)
    one = tutorial_native(TensorDict({"observation": obs[0, 0]}, batch_size=[]))
    assert one["loc"].shape == (2,)
    # Batch 1 runs on the package's batch-1 model: compared with it, not with the dynamic one.
    torch.testing.assert_close(one["loc"], tutorial_native.run_positional(obs[0, :1])[0][0], rtol=0, atol=0)


def test_a_missing_in_key_is_reported_by_key(tutorial_native):
    with pytest.raises(tdaot.MissingKeyError, match="observation"):
        tutorial_native(TensorDict({"obs": torch.zeros(1, 3)}, batch_size=[1]))


def test_the_policy_goes_inside_a_tensordict_sequential(tutorial, tutorial_native):
    policy, example, _ = tutorial
    doubled = TensorDictModule(lambda x: 2 * x, in_keys=["sample"], out_keys=["doubled"])
    out = TensorDictSequential(tutorial_native, doubled)(example.clone())
    with set_interaction_type("deterministic"), torch.no_grad():
        expected = TensorDictSequential(policy, doubled)(example.clone())
    torch.testing.assert_close(out["doubled"], expected["doubled"])


def test_an_mlp_policy_rolls_out_in_a_torchrl_environment_like_eager(tutorial, tutorial_native):
    policy = tutorial[0]
    env = _Drift(action_key="sample")
    expected, actual = _rollouts(env, policy, tutorial_native)
    assert actual.batch_size == expected.batch_size == (STEPS,)
    torch.testing.assert_close(actual["sample"], expected["sample"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        actual["next", "observation"], expected["next", "observation"], rtol=1e-5, atol=1e-5
    )


def test_a_gru_policy_rolls_out_in_a_torchrl_environment_like_eager(gru):
    """GRUModule's state travels in the TensorDict: the primer puts zeros at every reset,
    InitTracker marks is_init, the policy writes ("next", "recurrent_state") and the rollout
    carries it to the next step; episodes end every EPISODE steps, so resets happen mid-rollout."""
    policy, _, artifact = gru
    native = tdaot.load(artifact.path)
    rnn = policy[0]
    env = TransformedEnv(_Drift(action_key="action"), Compose(InitTracker(), rnn.make_tensordict_primer()))
    expected, actual = _rollouts(env, policy, native)
    assert bool(expected["is_init"][EPISODE].all())  # the rollout crossed a reset
    for key in ("action", ("next", "recurrent_state"), ("next", "observation")):
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-5, atol=1e-5)
    # The state the policy carried is non-trivial: not zero after the first step of an episode.
    assert actual["next", "recurrent_state"][1].abs().sum() > 0


# --- one face: one name for each thing --------------------------------------------------------
@pytest.mark.parametrize("old", ["NativePolicy", "NativeBinding", "NativeSession", "verify"])
def test_the_names_of_earlier_releases_are_gone(old):
    with pytest.raises(AttributeError, match=rf"module 'tdaot' has no attribute '{old}'"):
        getattr(tdaot, old)
    with pytest.raises(AttributeError):
        getattr(tdaot.runtime, old)
    assert importlib.util.find_spec("tdaot.lite") is None  # the harness is tdaot.testing.lite_runner


def test_a_policy_is_made_by_load_not_from_a_path(tutorial):
    path = tutorial[2].path
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"tdaot\.Policy wraps a loaded package, not str .*tdaot\.load\(path"
    ):
        tdaot.Policy(path)
    native = tdaot.load(path, num_runners=2)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"load options \(num_runners\) go to tdaot\.load"):
        tdaot.Policy(native._policy, num_runners=2)
    assert tdaot.Policy(native._policy).sha256 == native.sha256


def test_the_lite_harness_finds_the_checkout_tool_where_make_builds_it():
    from tdaot.testing import lite_runner

    assert lite_runner.CHECKOUT == Path(__file__).resolve().parents[2] / "build" / "cpp" / "tdaot-lite"
