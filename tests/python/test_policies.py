"""Policy coverage: the torchrl and tensordict families people train build, load
natively and match eager, or fail at build time saying what to change.

Every artifact is compiled at most once per run (``built``), and families that
differ only in their head share one artifact (the stochastic heads per interaction
type, both Q-value action spaces), so the file costs about a dozen AOTI compiles.
"""

from __future__ import annotations

import pytest
import torch
from examples import torchrl_policies as P
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, set_interaction_type
from torch import nn
from torchrl.modules import GRUModule

import tdaot
from tdaot import cli
from tdaot.builder.export import export_policy
from tdaot.testing import assert_parity, assert_statistical_parity

# Heads whose distribution defines each deterministic interaction type; the others
# are refused at build time (test_missing_statistic_is_refused).
HEADS = {
    "deterministic": ("tanh_normal", "normal", "categorical", "one_hot"),
    "mode": ("normal", "categorical", "one_hot"),
    "mean": ("normal",),
}

# name -> (factory, build options)
ARTIFACTS = {
    **{
        f"stochastic-{it}": (lambda heads=heads: P.stochastic_actors(heads), {"interaction_type": it})
        for it, heads in HEADS.items()
    },
    "stochastic-random": (P.stochastic_actors, {"interaction_type": "random"}),
    "qvalue": (P.qvalue_actors, {}),
    "gru_scan": (P.gru_scan_policy, {}),
    "pixels": (P.pixels_policy, {}),
    "pixels_and_vector": (P.pixels_and_vector_policy, {}),
    "dtypes": (P.dtype_policy, {}),
}


# Artifacts that fall back to a static batch, and why, said aloud.
STATIC_BATCH = {
    # Inductor cannot lower torchrl's scan (hoptorch) with a symbolic batch.
    "gru_scan": r"could not be compiled with a dynamic batch \(AOTInductor .*\); .*static batch of 4",
}


@pytest.fixture(scope="module")
def built(build_package):
    """built(name) -> (policy, example, artifact), compiling each artifact once (conftest)."""

    def get(name: str):
        factory, options = ARTIFACTS[name]
        return build_package(f"policies-{name}", factory, options, STATIC_BATCH.get(name))

    return get


def _keys_under(report, head: str) -> set[str]:
    return {row.key for row in report.rows if row.key.startswith(f"{head}.")}


# --- 1. stochastic actors -----------------------------------------------------------
@pytest.mark.parametrize(
    ("interaction_type", "head"), [(it, head) for it, heads in HEADS.items() for head in heads]
)
def test_stochastic_actor_matches_eager(built, interaction_type, head):
    policy, example, artifact = built(f"stochastic-{interaction_type}")
    report = assert_parity(policy, artifact, example)
    assert _keys_under(report, head) >= {f"{head}.action", f"{head}.sample_log_prob"}
    assert all(row.max_abs <= 1e-5 for row in report.rows if row.key.startswith(head))


@pytest.mark.parametrize(
    ("interaction_type", "head", "message"),
    [
        (
            "mode",
            "tanh_normal",
            r"TanhNormal has not analytical mode.*\nHint: .*'deterministic' but not 'mode'",
        ),
        ("mean", "tanh_normal", r"samples random numbers \(aten.normal.*'mean'.*n_empirical_estimate"),
        ("mean", "categorical", r"failed on the example.*\nHint: .*'deterministic' but not 'mean'"),
        ("mean", "one_hot", r"out-key 'action' .* is NaN .*'mean'\nHint: .*Categorical no mean"),
    ],
)
def test_missing_statistic_is_refused(interaction_type, head, message):
    policy, example = P.probabilistic_actor(head), P._observation()
    with pytest.raises(tdaot.BuildError, match=message):
        export_policy(policy, example, interaction_type=interaction_type)


@pytest.mark.parametrize("head", HEADS["deterministic"])
def test_sampling_artifact_draws_like_eager(built, head):
    policy, example, artifact = built("stochastic-random")
    report = assert_statistical_parity(policy, artifact, example)
    assert _keys_under(report, head) >= {f"{head}.action (mean)", f"{head}.action (std)"}
    native = tdaot.load(artifact.path)
    key = (head, "action")
    draws = torch.stack([native(example)[key] for _ in range(8)]).float()
    assert draws.std(0).max() > 0  # it samples inside the artifact, per call


@pytest.mark.parametrize("head", HEADS["deterministic"])
def test_sampled_log_prob_is_the_eager_log_prob_of_the_native_sample(built, head):
    policy, example, artifact = built("stochastic-random")
    many = example[torch.arange(example.batch_size[0]).repeat(250)]
    out = tdaot.load(artifact.path)(many)
    actor = policy[list(P.DISTRIBUTIONS).index(head)]
    expected = actor.get_dist(many.clone()).log_prob(out[head, "action"])
    # atol: TanhNormal recovers the pre-squash sample with a float32 atanh (eager
    # differs from native by up to ~1e-4 near the bounds).
    torch.testing.assert_close(out[head, "sample_log_prob"], expected, rtol=1e-4, atol=1e-3)


def test_statistical_parity_catches_a_drifted_scale(built):
    policy, example, artifact = built("stochastic-random")
    drifted = P.stochastic_actors()[0]
    drifted.load_state_dict(policy.state_dict())
    normal_net = drifted[1].module[0].module[0]  # the "normal" head's Linear
    with torch.no_grad():
        normal_net.bias[P.ACTIONS :] += 1.0  # raises the Normal's scale
    with pytest.raises(
        AssertionError, match=r"does not sample like .*\n.*\n(.*\n)*normal\.action \(std\).*MISMATCH"
    ):
        assert_statistical_parity(drifted, artifact, example)


def test_parity_checks_refuse_the_wrong_interaction_type(built):
    policy, example, artifact = built("stochastic-random")
    with pytest.raises(ValueError, match="check it with assert_statistical_parity"):
        assert_parity(policy, artifact, example)
    policy, example, artifact = built("stochastic-mean")
    with pytest.raises(ValueError, match="'mean', not 'random'.*assert_parity"):
        assert_statistical_parity(policy, artifact, example)


# --- 2. value-based -----------------------------------------------------------------
@pytest.mark.parametrize("space", ["one_hot", "categorical"])
def test_qvalue_actor_matches_eager(built, space):
    policy, example, artifact = built("qvalue")
    report = assert_parity(policy, artifact, example)
    assert _keys_under(report, space) == {
        f"{space}.action",
        f"{space}.action_value",
        f"{space}.chosen_action_value",
    }
    out = tdaot.load(artifact.path)(example)
    greedy = out[space, "action_value"].argmax(-1)
    action = out[space, "action"]
    assert torch.equal(action.argmax(-1) if space == "one_hot" else action, greedy)


# --- 3. recurrent -------------------------------------------------------------------
# GRUModule/LSTMModule single steps as they come: test_torchrl_as_they_come.py.
@pytest.mark.parametrize(
    ("name", "state", "batch"), [("gru_scan", ["recurrent_state"], tdaot.BatchRange(4, 4))]
)
def test_recurrent_policy_matches_eager_over_a_rollout(built, name, state, batch):
    policy, example, artifact = built(name)
    manifest = artifact.manifest
    assert manifest.batch == batch
    assert manifest.recurrent == tdaot.Recurrent(
        state=tuple(tdaot.StatePair(input=k, output=f"next.{k}") for k in state), is_init="is_init"
    )
    assert_parity(policy, artifact, example)
    # Carry the state as the manifest says, resetting some rows midway, on both sides.
    native = tdaot.load(artifact.path)
    eager_td, native_td = example.clone(), example.clone()
    for step in range(4):
        is_init = example["is_init"] if step == 0 else torch.zeros_like(example["is_init"])
        if step == 2:
            is_init = torch.ones_like(is_init)
        for td in (eager_td, native_td):
            td["is_init"] = is_init
            td["observation"] = example["observation"] * (step + 1)
        with torch.no_grad():
            expected = policy(eager_td.clone())
        actual = native(native_td)
        torch.testing.assert_close(actual["action"], expected["action"], rtol=1e-5, atol=1e-5)
        for pair in manifest.recurrent.state:
            eager_td[pair.input] = expected["next", pair.input]
            native_td[pair.input] = actual["next", pair.input]


@pytest.mark.parametrize("name", ["gru_scan"])
def test_native_session_carries_torchrl_state(built, name):
    """The runner's session, driven by the manifest's recurrent section, follows eager."""
    policy, example, artifact = built(name)
    session = tdaot.load(artifact.path).session(example.batch_size[0])
    reset = torch.arange(example.batch_size[0]) % 2 == 0
    eager_td = example.clone()
    for pair in artifact.manifest.recurrent.state:
        eager_td[pair.input] = torch.zeros_like(example[pair.input])
    for step in range(4):
        if step == 2:
            session.reset(reset)
        is_init = torch.full_like(example["is_init"], step == 0)
        if step == 2:
            is_init = reset.reshape(-1, *(1,) * (is_init.ndim - 1)).expand_as(is_init).clone()
        eager_td["is_init"] = is_init
        eager_td["observation"] = example["observation"] * (step + 1)
        with torch.no_grad():
            expected = policy(eager_td.clone())
        actual = session.step(eager_td)
        torch.testing.assert_close(actual["action"], expected["action"], rtol=1e-5, atol=1e-5)
        for pair in artifact.manifest.recurrent.state:
            eager_td[pair.input] = expected["next", pair.input]


def test_gru_scan_policy_resets_like_torchrl_sequential_mode(built):
    _, example, artifact = built("gru_scan")
    rnn = next(m for m in built("gru_scan")[0].module if isinstance(m, GRUModule))
    sequential = GRUModule(
        input_size=P.OBSERVATION, hidden_size=P.HIDDEN, in_key="observation", out_key="embed"
    )
    sequential.load_state_dict(rnn.state_dict())
    expected = sequential(example.squeeze(1).clone())
    actual = tdaot.load(artifact.path)(example)
    torch.testing.assert_close(actual["embed"].squeeze(1), expected["embed"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        actual["next", "recurrent_state"].squeeze(1),
        expected["next", "recurrent_state"],
        rtol=1e-5,
        atol=1e-5,
    )


# --- 4. pixels ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pixels", "pixels_and_vector"])
def test_pixel_policy_matches_eager(built, name):
    policy, example, artifact = built(name)
    assert artifact.manifest.inputs[0] == tdaot.TensorSpec("pixels", "uint8", (16, 16, 3))
    report = assert_parity(policy, artifact, example, batch_sizes=[1, 7, 32])
    assert all(row.max_abs <= 1e-5 for row in report.rows)


# --- 5./6. multi-agent networks, ObservationNorm: test_torchrl_as_they_come.py ----------


# --- 7. dtypes ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "dtype"), [("action64", "float64"), ("action_bf16", "bfloat16"), ("disabled", "bool")]
)
def test_dtypes_match_eager(built, key, dtype):
    policy, example, artifact = built("dtypes")
    assert [(s.key, s.dtype) for s in artifact.manifest.inputs] == [
        ("precise", "float64"),
        ("fast", "bfloat16"),
        ("mode", "int64"),
        ("enabled", "bool"),
    ]
    report = assert_parity(policy, artifact, example)
    rows = [row for row in report.rows if row.key == key]
    assert rows and all(row.dtype == dtype and row.ok for row in rows)


# --- 8. errors that teach -----------------------------------------------------------
@pytest.mark.parametrize(
    ("factory", "message"),
    [
        # GRUModule's recurrent mode with its "pad" backend splits the window at each is_init.
        (
            P.gru_sequence_policy,
            r"(?s)is_init\[\.\.\., 1:\]\.any\(\).*inside an installed library "
            r"\(torchrl/modules/tensordict_module/rnn.py:\d+\).*pick an option or module that avoids",
        ),
        (
            P.stacked_ensemble_policy,
            r"(?s)wrapping examples.torchrl_policies.StackedEnsemble.*Cannot unlock a tensordict.*"
            r"Hint: .*TensorDictParams refuses.*plain nn.Parameters",
        ),
    ],
)
def test_torchrl_module_that_cannot_export_is_refused_with_what_to_change(factory, message):
    policy, example = factory()
    with pytest.raises(tdaot.ExportError, match=message):
        export_policy(policy, example)


class _Stash(nn.Module):
    def forward(self, x):
        self.last_observation = x  # kept for logging: never happens in the artifact
        return x * 2


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * 2


class _Numpy(nn.Module):
    def forward(self, x):
        return torch.from_numpy(x.numpy() * 2)


@pytest.mark.parametrize(
    ("module", "error", "message"),
    [
        (
            _Stash(),
            tdaot.BuildError,
            r"module 'module' \(test_policies._Stash\) sets attribute 'last_observation'",
        ),
        (_Counter(), tdaot.BuildError, r"module 'module' \(test_policies._Counter\) sets attribute 'calls'"),
        (
            _Numpy(),
            tdaot.ExportError,
            r"torch.export failed for .*wrapping test_policies._Numpy \(in keys: x; out keys: y\):\n"
            r"    RuntimeError: .numpy\(\) is not supported",
        ),
    ],
)
def test_unexportable_module_fails_naming_it(module, error, message):
    policy = TensorDictModule(module, in_keys=["x"], out_keys=["y"])
    with pytest.raises(error, match=message):
        export_policy(policy, TensorDict({"x": torch.randn(4, 3)}, batch_size=[4]))


def test_dropout_in_training_mode_is_refused():
    policy = TensorDictModule(nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)), in_keys=["x"], out_keys=["y"])
    example = TensorDict({"x": torch.randn(4, 3)}, batch_size=[4])
    with pytest.raises(tdaot.BuildError, match=r"samples random numbers .*dropout.*call policy.eval\(\)"):
        export_policy(policy.train(), example)
    assert export_policy(policy.eval(), example).outputs[0].key == "y"


def test_side_effect_check_restores_the_module():
    counter = _Counter()
    with pytest.raises(tdaot.BuildError):
        export_policy(
            TensorDictModule(counter, in_keys=["x"], out_keys=["y"]),
            TensorDict({"x": torch.randn(4, 3)}, batch_size=[4]),
        )
    assert counter.calls == 1  # the eager check's call; the side-effect probe's is undone


def test_cli_build_failure_is_one_message_not_a_traceback(capsys, tmp_path):
    code = cli.main(
        ["build", "examples/torchrl_policies.py:gru_sequence_policy", "-o", str(tmp_path / "gru.pt2")]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("tdaot build: ExportError: torch.export failed for tensordict.nn.sequence")
    assert "Traceback" not in err and "Hint:" in err


def test_interaction_hint_is_not_given_when_deterministic_fails_too():
    class Broken(nn.Module):
        def forward(self, x):
            raise RuntimeError("broken sensor")

    with set_interaction_type("deterministic"), pytest.raises(tdaot.BuildError) as info:
        export_policy(
            TensorDictModule(Broken(), in_keys=["x"], out_keys=["y"]),
            TensorDict({"x": torch.randn(4, 3)}, batch_size=[4]),
            interaction_type="mode",
        )
    assert "broken sensor" in str(info.value) and "Hint" not in str(info.value)
