"""Recurrent sessions through the bindings: tdaot.load(...).session(batch=...)."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from tensordict import TensorDict

import tdaot
from tdaot import _C


def _eager_step(policy, observation, hidden, is_init):
    td = TensorDict(
        {"observation": observation, "hidden": hidden, "is_init": is_init}, batch_size=observation.shape[:1]
    )
    return policy(td)


def test_manifest_records_the_state_pairs(recurrent, recurrent_native):
    recurrent_section = recurrent_native.manifest.recurrent
    assert [(p.input, p.output) for p in recurrent_section.state] == [("hidden", "next.hidden")]
    assert recurrent_section.is_init == "is_init"
    # The C++ reading writes the section back exactly as Python wrote it.
    assert json.loads(_C.read_manifest_json(recurrent[2].path)) == recurrent[2].manifest.to_dict()


def test_steps_match_eager_with_the_state_threaded_by_hand(recurrent, recurrent_native):
    policy, _, _ = recurrent
    session = recurrent_native.session(batch=3)
    assert session.input_keys == ["observation"]
    hidden, is_init = torch.zeros(3, 8), torch.ones(3, 1, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(4):
            observation = torch.randn(3, 3)
            out = session.step(observation=observation)
            expected = _eager_step(policy, observation, hidden, is_init)
            torch.testing.assert_close(out["action"], expected["action"])
            torch.testing.assert_close(out["next", "hidden"], expected["next", "hidden"])
            hidden, is_init = expected["next", "hidden"], torch.zeros_like(is_init)
            torch.testing.assert_close(session.state["hidden"], hidden)


def test_a_rollout_tensordict_carrying_state_and_is_init_matches_eager(recurrent, recurrent_native):
    """As a torchrl rollout steps: the TensorDict carries the state (from the last step's
    ("next", k)) and is_init (InitTracker); rows 0 and 2 start new episodes at steps 3 and 6
    through is_init alone. Every step and row equals eager with the same TensorDict."""
    policy, _, _ = recurrent
    session = recurrent_native.session(batch=3)
    hidden, is_init = torch.zeros(3, 8), torch.ones(3, 1, dtype=torch.bool)
    with torch.no_grad():
        for step in range(8):
            if step in (3, 6):
                is_init[step // 3 * 2 - 2] = True
            td = TensorDict(
                {
                    "observation": torch.randn(3, 3),
                    "hidden": hidden,
                    "is_init": is_init,
                    "reward": torch.ones(3, 1),
                },
                batch_size=[3],
            )
            out = session.step(td)
            expected = policy(td.clone())
            torch.testing.assert_close(
                out["action"], expected["action"], msg=lambda m, s=step: f"step {s}: {m}"
            )
            torch.testing.assert_close(out["next", "hidden"], expected["next", "hidden"])
            hidden, is_init = out["next", "hidden"], torch.zeros_like(is_init)


def test_a_given_state_replaces_the_carried_one(recurrent, recurrent_native):
    policy, _, _ = recurrent
    session = recurrent_native.session(batch=2)
    session.step(observation=torch.randn(2, 3))
    hidden, observation = torch.randn(2, 8), torch.randn(2, 3)
    out = session.step({"observation": observation, "hidden": hidden})  # is_init false: read as given
    expected = _eager_step(policy, observation, hidden, torch.zeros(2, 1, dtype=torch.bool))
    torch.testing.assert_close(out["next", "hidden"], expected["next", "hidden"])
    torch.testing.assert_close(session.state["hidden"], expected["next", "hidden"])


def test_a_given_is_init_resets_its_rows_like_reset_mask(recurrent_native):
    by_flag, by_reset = recurrent_native.session(batch=3), recurrent_native.session(batch=3)
    steps = [torch.randn(3, 3) for _ in range(4)]
    for observation in steps[:2]:
        by_flag.step(observation=observation)
        by_reset.step(observation=observation)
    rows = torch.tensor([False, True, False])
    by_reset.reset(rows)
    flagged = by_flag.step({"observation": steps[2], "is_init": rows.view(3, 1)})
    torch.testing.assert_close(flagged["action"], by_reset.step(observation=steps[2])["action"])
    torch.testing.assert_close(by_flag.state["hidden"], by_reset.state["hidden"])


def test_masked_reset_zeroes_only_those_rows(recurrent_native):
    session = recurrent_native.session(batch=3)
    for _ in range(2):
        session.step(observation=torch.randn(3, 3))
    before = session.state["hidden"].clone()
    session.reset(torch.tensor([False, True, False]))
    after = session.state["hidden"]
    torch.testing.assert_close(after[0], before[0])
    torch.testing.assert_close(after[1], torch.zeros(8))
    torch.testing.assert_close(after[2], before[2])
    session.reset()
    torch.testing.assert_close(session.state["hidden"], torch.zeros(3, 8))


@pytest.mark.parametrize(
    ("inputs", "error", "message"),
    [
        pytest.param(
            {"observation": torch.zeros(2, 3), "hidden": torch.ones(2, 7)},
            tdaot.ShapeError,
            r"'hidden' has shape \[2, 7\], expected \[B, 8\]",
            id="state-shape",
        ),
        pytest.param(
            {"observation": torch.zeros(2, 3), "hidden": torch.ones(3, 8)},
            tdaot.BatchSizeError,
            r"'hidden' has batch size 3, but input 'observation' has batch size 2",
            id="state-batch",
        ),
        pytest.param(
            {"observation": torch.zeros(2, 3), "is_init": torch.ones(2, 1)},
            tdaot.DtypeError,
            r"'is_init' has dtype float32, expected bool",
            id="is-init-dtype",
        ),
        pytest.param({}, tdaot.MissingKeyError, r"missing input key\(s\) 'observation'", id="missing"),
        pytest.param(
            {"observation": torch.zeros(3, 3)},
            tdaot.BatchSizeError,
            r"'observation' has batch size 3, but the session was created for batch size 2",
            id="batch",
        ),
        pytest.param(
            {"observation": torch.zeros(2, 3, dtype=torch.float64)},
            tdaot.DtypeError,
            r"'observation' has dtype float64, expected float32",
            id="dtype",
        ),
    ],
)
def test_bad_steps_are_refused_naming_the_key(recurrent_native, inputs, error, message):
    session = recurrent_native.session(batch=2)
    with pytest.raises(error, match=message):
        session.step(inputs)
    torch.testing.assert_close(session.state["hidden"], torch.zeros(2, 8))  # untouched


@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        (torch.ones(2), tdaot.DtypeError, r"the reset mask has dtype float32, expected bool"),
        (
            torch.ones(3, dtype=torch.bool),
            tdaot.ShapeError,
            r"the reset mask has shape \[3\], expected \[2\]",
        ),
    ],
    ids=["dtype", "shape"],
)
def test_bad_reset_masks_are_refused(recurrent_native, mask, error, message):
    with pytest.raises(error, match=message):
        recurrent_native.session(batch=2).reset(mask)


def test_a_session_steps_a_package_without_state(tutorial_native):
    session = tutorial_native.session(batch=1)
    observation = torch.randn(1, 3)
    torch.testing.assert_close(
        session.step(observation=observation)["sample"], tutorial_native(observation=observation)["sample"]
    )
    assert session.state == {}
    assert session.interventions == {
        "nonfinite": 0,
        "rate_limited": 0,
        "blended": 0,
        "clipped": 0,
        "fallback": 0,
    }


def test_a_session_outside_the_batch_range_is_refused(recurrent_native):
    with pytest.raises(tdaot.BatchSizeError, match=r"a session of batch size 0 .* accepts batch sizes 1\.\."):
        recurrent_native.session(batch=0)


def test_concurrent_use_of_one_session_works_or_is_refused_clearly(recurrent_native):
    session = recurrent_native.session(batch=64)
    unexpected = []

    def hammer(stepping: bool) -> None:
        observation = torch.randn(64, 3)
        for _ in range(200):
            try:
                session.step(observation=observation) if stepping else session.reset()
            except tdaot.TdaotError as err:
                if "used from two threads at once" not in str(err):
                    unexpected.append(err)

    threads = [threading.Thread(target=hammer, args=(stepping,)) for stepping in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert unexpected == []


def test_the_session_state_is_its_own_memory_assignment_copies_keys_are_fixed(recurrent_native):
    session = recurrent_native.session(batch=2)
    hidden = torch.linspace(-1, 1, 16).reshape(2, 8)
    session.state["hidden"] = hidden  # copies into the state the next step sees
    torch.testing.assert_close(session.state["hidden"], hidden, rtol=0, atol=0)
    with pytest.raises(
        tdaot.ShapeError, match=r"session\.state\['hidden'\]: assigned a tensor of shape \[8\]"
    ):
        session.state["hidden"] = hidden[0]
    with pytest.raises(tdaot.BoundKeyError, match=r"cannot add 'cell' to session\.state: .*\('hidden'\)"):
        session.state["cell"] = hidden
    with pytest.raises(tdaot.BoundKeyError, match=r"cannot delete 'hidden' from session\.state"):
        del session.state["hidden"]
    with pytest.raises(tdaot.BoundKeyError, match=r"session\.state has no key 'h'; its keys: 'hidden'"):
        session.state["h"]  # noqa: B018
    with pytest.raises(TypeError):
        session.interventions["nonfinite"] = 0  # a read-only snapshot
    assert dict(session.interventions) == {
        "nonfinite": 0,
        "rate_limited": 0,
        "blended": 0,
        "clipped": 0,
        "fallback": 0,
    }
