"""torchrl policies as they come (no change to the user's code) build with a dynamic batch
through tdaot's export-time rewrites, and match eager at batch 1, 7 and 64: GRUModule and
LSTMModule single steps, multi-agent networks with their TensorDictParams, ObservationNorm,
and the actor-critic families. Recurrent packages also run 50-step native Session rollouts
with rows reset through is_init, against eager stepping that carries the state.

Five AOTInductor compiles, each package built once per run (``built``, through conftest).
"""

from __future__ import annotations

import pytest
import torch
from examples import torchrl_policies as P
from tensordict import TensorDict

import tdaot
from tdaot.testing import assert_parity

BATCHES = [1, 7, 64]
DYNAMIC = tdaot.BatchRange(1, 1 << 20)
# name -> (factory, build options). The recurrent package keeps the default tuning, whose
# batch-1 latency model decomposes the RNN ops; the others build one throughput model each.
PACKAGES = {
    "recurrent": (P.recurrent_policies, {}),
    "multi_agent": (P.multi_agent_policy, {"tuning": "throughput"}),
    "normalized": (P.normalized_policy, {"tuning": "throughput"}),
    "families": (P.actor_critic_families, {"tuning": "throughput"}),
}


@pytest.fixture(scope="module")
def built(build_package):
    """built(name) -> (policy, example, artifact, parity report at BATCHES), built once each
    (conftest), never with a static-batch fallback."""
    reports = {}

    def get(name: str):
        factory, options = PACKAGES[name]
        policy, example, artifact = build_package(f"as_they_come-{name}", factory, options)
        if name not in reports:
            reports[name] = assert_parity(policy, artifact, example, batch_sizes=BATCHES)
        return policy, example, artifact, reports[name]

    return get


def _checked(report, prefix: str) -> set[tuple[str, int]]:
    return {(row.key, row.batch) for row in report.rows if row.key.startswith(prefix) and row.ok}


# --- recurrent ------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(P.RNNS))
def test_recurrent_module_as_it_comes_matches_eager_at_any_batch(built, name):
    _, _, artifact, report = built("recurrent")
    assert artifact.manifest.batch == DYNAMIC
    keys = {f"{name}.embed", f"{name}.action"}
    assert _checked(report, name) >= {(key, batch) for key in keys for batch in BATCHES}
    states = _checked(report, f"next.{name}.")
    assert len(states) == len(BATCHES) * (1 if name.startswith("gru") else 2)


def test_recurrent_manifest_pairs_every_state_with_its_next_step_output(built):
    _, _, artifact, _ = built("recurrent")
    states = [
        f"{name}.{key}"
        for name, (cls, _) in P.RNNS.items()
        for key in (
            ["recurrent_state"] if name.startswith("gru") else ["recurrent_state_h", "recurrent_state_c"]
        )
    ]
    assert artifact.manifest.recurrent == tdaot.Recurrent(
        state=tuple(tdaot.StatePair(input=k, output=f"next.{k}") for k in states), is_init="is_init"
    )


ROWS, STEPS = 4, 50
RESETS = {20: [1, 3], 35: [1, 3]}  # step -> rows whose episode starts again (is_init)


@pytest.mark.parametrize("state_in_step", [False, True], ids=["session-carries", "step-carries"])
def test_session_rollout_with_is_init_resets_matches_eager_every_step(built, state_in_step):
    """torchrl's convention on both sides: ("next", k) feeds k, is_init marks a new episode.
    With ``state_in_step`` the TensorDict given to step carries the state too, as a torchrl
    rollout's does (the session uses it)."""
    policy, _, artifact, _ = built("recurrent")
    pairs = artifact.manifest.recurrent.state
    session = tdaot.load(artifact.path).session(ROWS)
    generator = torch.Generator().manual_seed(0)
    carried = {pair.input: None for pair in pairs}
    for step in range(STEPS):
        is_init = torch.zeros(ROWS, 1, dtype=torch.bool)
        is_init[RESETS.get(step, []) if step else slice(None)] = True
        td = TensorDict(
            {"observation": torch.randn(ROWS, P.OBSERVATION, generator=generator), "is_init": is_init},
            batch_size=[ROWS],
        )
        eager_td = td.clone()
        for key, value in carried.items():
            if value is not None:
                eager_td[tuple(key.split("."))] = value
        with torch.no_grad():
            expected = policy(eager_td.clone())
        actual = session.step(eager_td if state_in_step and step else td)
        for key in policy.out_keys:
            torch.testing.assert_close(
                actual.get(key),
                expected.get(key),
                rtol=1e-5,
                atol=1e-5,
                msg=lambda m, k=key, s=step: f"step {s} {k}: {m}",
            )
        carried = {pair.input: expected.get(tuple(pair.output.split("."))) for pair in pairs}


# --- multi-agent ----------------------------------------------------------------------
@pytest.mark.parametrize("setup", list(P.AGENT_SETUPS))
def test_multi_agent_networks_as_they_come_match_eager_at_any_batch(built, setup):
    _, _, artifact, report = built("multi_agent")
    assert artifact.manifest.batch == DYNAMIC
    assert [s.key for s in artifact.manifest.inputs] == ["group.agents.observation", "group.agents.pixels"]
    keys = {f"group.agents.{setup}.action", f"group.agents.{setup}.embed"}
    assert _checked(report, f"group.agents.{setup}.") == {(key, batch) for key in keys for batch in BATCHES}


# --- ObservationNorm ------------------------------------------------------------------
def test_observation_norm_as_it_comes_is_baked_in_all_three_ways(built):
    _, example, artifact, report = built("normalized")
    manifest = artifact.manifest
    assert manifest.batch == DYNAMIC
    assert manifest.input_keys == ["observation", "velocity", "position"]  # raw sensor values in
    assert {"observation_norm", "velocity_norm", "position", "action"} <= set(manifest.output_keys)
    assert {row.key for row in report.rows if row.ok} >= {"observation_norm", "velocity_norm", "position"}
    # The artifact applies the statistics itself: normalised values are unit-scale.
    out = tdaot.load(artifact.path)(example)
    for key in ("observation_norm", "velocity_norm", "position"):
        assert out[key].abs().max() < 10 < example["observation"].abs().max()


# --- actor-critic families ------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "keys"),
    [
        ("ddpg actor (TanhDelta)", ["ddpg.action"]),
        ("sac actor with its log-prob", ["sac.action", "sac.action_log_prob"]),
        ("ValueOperator critics", ["state_value", "ddpg.state_action_value"]),
        ("ActorCriticWrapper.get_policy_operator()", ["ppo.action", "ppo.action_log_prob"]),
    ],
)
def test_actor_critic_family_matches_eager_at_any_batch(built, family, keys):
    _, _, artifact, report = built("families")
    assert artifact.manifest.batch == DYNAMIC
    assert {(key, batch) for key in keys for batch in BATCHES} <= {
        (r.key, r.batch) for r in report.rows if r.ok
    }


def test_selected_out_keys_drop_the_intermediate_keys(built):
    _, _, artifact, _ = built("families")
    expected = [key if isinstance(key, str) else ".".join(key) for key in P.FAMILY_OUTPUTS]
    assert artifact.manifest.output_keys == expected  # no param, loc, scale
    out = tdaot.load(artifact.path)(P.actor_critic_families()[1])
    assert out["ddpg", "action"].abs().max() <= 2.0  # TanhDelta keeps the action in its bounds
