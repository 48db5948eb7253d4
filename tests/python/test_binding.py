"""Bound runs through the bindings: tdaot.load(...).bind(batch) owns its inputs and outputs,
run in place (allocation-free where the package has a model for the batch), and a binding of a
recurrent package is a bound session."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import tdaot


def _eager(policy, **inputs) -> TensorDict:
    batch = next(iter(inputs.values())).shape[:1]
    with torch.no_grad():
        return policy(TensorDict(inputs, batch_size=batch))


def test_a_batch_1_binding_matches_eager(tutorial, tutorial_native):
    policy = tutorial[0]
    b = tutorial_native.bind(batch=1)
    assert (b.batch, b.model, b.allocation_free) == (1, "b1", True)
    assert list(b.inputs) == ["observation"] and list(b.outputs) == ["loc", "scale", "sample"]
    for _ in range(3):
        observation = torch.randn(1, 3)
        b.inputs["observation"].copy_(observation)
        b.run()
        expected = _eager(policy, observation=observation)
        for key in ("loc", "scale", "sample"):
            torch.testing.assert_close(b.outputs[key], expected[key])


def test_nested_keys_are_manifest_keys(nested, nested_native):
    b = nested_native.bind(batch=1)
    assert b.allocation_free
    inputs = {key: torch.randn(b.inputs[key].shape) for key in b.inputs}
    for key, value in inputs.items():
        b.inputs[key].copy_(value)
    b.run()
    expected = nested_native.run_positional(*inputs.values())
    for got, want in zip(b.outputs.values(), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_inputs_and_outputs_are_the_bindings_memory(tutorial_native):
    b = tutorial_native.bind(batch=1)
    observation, loc = b.inputs["observation"], b.outputs["loc"]
    assert observation.data_ptr() == b._binding.input("observation").data_ptr()
    assert loc.data_ptr() == b._binding.output("loc").data_ptr()
    x = torch.randn(1, 3)
    observation.copy_(x)
    b.run()
    first = loc.clone()
    torch.testing.assert_close(first, tutorial_native.run_positional(x)[0], rtol=0, atol=0)
    observation[0, 0] += 1.0  # an in-place write is what the next run sees
    b.run()
    assert b.outputs["loc"] is loc
    torch.testing.assert_close(loc, tutorial_native.run_positional(observation.clone())[0], rtol=0, atol=0)
    assert not torch.equal(loc, first)


def test_a_batch_without_its_own_model_runs_through_the_runner(tutorial_native):
    b = tutorial_native.bind(batch=3)
    assert (b.model, b.allocation_free) == ("model", False)
    x = torch.randn(3, 3)
    b.inputs["observation"].copy_(x)
    b.run()
    for got, want in zip(b.outputs.values(), tutorial_native.run_positional(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_policy_of_one_model_binds_on_the_runners_path(tutorial):
    native = tdaot.load(tutorial[2].path, model_name="model")
    b = native.bind(batch=1)
    assert (b.model, b.allocation_free) == ("model", False)
    x = torch.randn(1, 3)
    b.inputs["observation"].copy_(x)
    b.run()
    torch.testing.assert_close(b.outputs["loc"], _eager(tutorial[0], observation=x)["loc"])


@pytest.mark.parametrize("batch", [1, 2])
def test_a_recurrent_binding_is_a_bound_session(recurrent_native, batch):
    b = recurrent_native.bind(batch=batch)
    assert b.allocation_free == (batch == 1)
    session = recurrent_native.session(batch)

    def step():
        observation = torch.randn(batch, 3)
        b.inputs["observation"].copy_(observation)
        b.run()
        expected = session.step(observation=observation)
        torch.testing.assert_close(b.outputs["action"], expected["action"], rtol=0, atol=0)
        torch.testing.assert_close(b.outputs["next.hidden"], expected["next", "hidden"], rtol=0, atol=0)
        torch.testing.assert_close(b.inputs["hidden"], session.state["hidden"], rtol=0, atol=0)

    assert b.inputs["is_init"].all()
    for _ in range(3):
        step()
    assert not b.inputs["is_init"].any()
    mask = torch.zeros(batch, dtype=torch.bool)
    mask[-1] = True
    b.reset(mask)
    session.reset(mask)
    assert b.inputs["is_init"][-1].all() and (b.inputs["hidden"][-1] == 0).all()
    step()
    b.reset()
    session.reset()
    assert (b.inputs["hidden"] == 0).all()
    step()


def test_a_batch_outside_the_range_names_the_range(tutorial_native):
    top = tutorial_native.manifest.batch.max
    with pytest.raises(
        tdaot.BatchSizeError,
        match=rf"a binding of batch size {top + 1} for package '.*tutorial.pt2', which accepts batch "
        rf"sizes 1\.\.{top} \(models 'model' 1\.\.{top}, 'b1' 1\)",
    ):
        tutorial_native.bind(batch=top + 1)


def test_unknown_keys_and_resets_are_refused_by_name(tutorial_native, recurrent_native):
    b = tutorial_native.bind(batch=1)
    with pytest.raises(
        tdaot.UnknownKeyError,
        match=r"unknown input key 'obs' \(did you mean 'observation'\?\); the binding's inputs: "
        r"'observation'",
    ):
        b._binding.input("obs")
    with pytest.raises(tdaot.TdaotError, match="is not recurrent"):
        b.reset()
    r = recurrent_native.bind(batch=2)
    with pytest.raises(tdaot.DtypeError, match="the reset mask has dtype float32, expected bool"):
        r.reset(torch.ones(2))


def test_a_resized_input_is_refused(tutorial_native):
    b = tutorial_native.bind(batch=1)
    b.inputs["observation"].resize_(1, 500)
    with pytest.raises(tdaot.TdaotError, match="input 'observation' of the binding no longer has the memory"):
        b.run()


# --- the bound buffers cannot be replaced (issue 37): assignment copies, keys are fixed ---------
def test_assigning_an_input_copies_into_the_bound_buffer(tutorial, tutorial_native):
    """The README's first loop: `b.inputs[k] = obs` once replaced a dict entry and the model ran
    on the old buffer, silently. Now it copies into the binding's memory, which the run reads."""
    policy = tutorial[0]
    b = tutorial_native.bind(batch=1)
    buffer = b.inputs["observation"]
    for _ in range(2):
        observation = torch.randn(1, 3)
        b.inputs["observation"] = observation
        assert (
            b.inputs["observation"] is buffer
            and buffer.data_ptr() == b._binding.input("observation").data_ptr()
        )
        b.run()
        torch.testing.assert_close(b.outputs["loc"], _eager(policy, observation=observation)["loc"])
    b.inputs[("observation",)] = torch.zeros(1, 3)  # a tuple key is the same key
    assert torch.equal(buffer, torch.zeros(1, 3))


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (
            torch.zeros(1, 3, dtype=torch.float64),
            tdaot.DtypeError,
            r"binding\.inputs\['observation'\]: assigned a tensor of dtype float64, the buffer is float32",
        ),
        (
            torch.zeros(2, 3),
            tdaot.ShapeError,
            r"binding\.inputs\['observation'\]: assigned a tensor of shape \[2, 3\], the buffer is \[1, 3\]",
        ),
        (torch.zeros(3), tdaot.ShapeError, r"assigned a tensor of shape \[3\]"),
        (
            [[0.0, 0.0, 0.0]],
            tdaot.InvalidArgumentError,
            r"binding\.inputs\['observation'\] = list: assign a tensor, or write in place with .*copy_",
        ),
    ],
)
def test_assigning_another_shape_or_dtype_is_refused_by_key(tutorial_native, value, error, message):
    b = tutorial_native.bind(batch=1)
    b.inputs["observation"].fill_(0.5)
    with pytest.raises(error, match=message) as info:
        b.inputs["observation"] = value
    assert getattr(info.value, "key", "observation") == "observation"
    assert torch.equal(b.inputs["observation"], torch.full((1, 3), 0.5))  # untouched


def test_outputs_are_read_only_and_keys_are_fixed(tutorial_native):
    b = tutorial_native.bind(batch=1)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"binding\.outputs\['loc'\] is written by each run"):
        b.outputs["loc"] = torch.zeros(1, 2)
    with pytest.raises(
        tdaot.BoundKeyError,
        match=r"cannot add 'obs' to binding\.inputs: its keys are fixed .*\('observation'\)",
    ):
        b.inputs["obs"] = torch.zeros(1, 3)
    with pytest.raises(tdaot.BoundKeyError, match=r"cannot add 'action' to binding\.outputs"):
        b.outputs["action"] = torch.zeros(1, 2)
    with pytest.raises(tdaot.BoundKeyError, match=r"cannot delete 'observation' from binding\.inputs"):
        del b.inputs["observation"]
    with pytest.raises(tdaot.BoundKeyError, match=r"cannot delete 'sample' from binding\.outputs"):
        del b.outputs["sample"]
    with pytest.raises(AttributeError):
        b.inputs = {"observation": torch.zeros(1, 3)}
    assert list(b.inputs) == ["observation"] and list(b.outputs) == ["loc", "scale", "sample"]


def test_a_missing_key_names_the_key_and_the_keys_held(tutorial_native):
    b = tutorial_native.bind(batch=1)
    with pytest.raises(
        tdaot.BoundKeyError, match=r"binding\.inputs has no key 'obs'; its keys: 'observation'"
    ) as info:
        b.inputs["obs"]  # noqa: B018
    assert isinstance(info.value, KeyError) and isinstance(info.value, tdaot.TdaotError)
    assert info.value.key == "obs" and str(info.value).startswith("binding.inputs")  # not KeyError's quotes
    with pytest.raises(
        KeyError, match=r"binding\.outputs has no key 'action'; its keys: 'loc', 'scale', 'sample'"
    ):
        b.outputs["action"]  # noqa: B018
    assert "obs" not in b.inputs and b.inputs.get("obs") is None
