"""Packages of several models through the bindings: each call runs on the model serving its
batch size (run, run_positional, sessions, bindings), and refusals say which batches each model
serves."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import tdaot


@pytest.fixture(scope="module")
def specialised(tutorial_b14):
    """The tutorial policy with latency models for batches 1 and 4 (conftest)."""
    policy, _, artifact, _ = tutorial_b14
    return policy, tdaot.load(artifact.path)


def test_the_manifest_lists_every_model(specialised):
    _, native = specialised
    models = [(m.name, m.batch.min, m.batch.max, m.tuning) for m in native.manifest.models]
    assert models == [("model", 1, 64, "throughput"), ("b1", 1, 1, "latency"), ("b4", 4, 4, "latency")]


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 5, 64])
def test_every_path_matches_eager_on_both_sides_of_each_specialised_size(specialised, batch):
    policy, native = specialised
    observation = torch.randn(batch, 3)
    with torch.no_grad():
        expected = policy(TensorDict({"observation": observation}, batch_size=[batch]))
    keyed = native(observation=observation)
    positional = native.run_positional(observation)
    b = native.bind(batch)
    assert b.allocation_free == (batch in (1, 4))
    assert b.model == {1: "b1", 4: "b4"}.get(batch, "model")
    b.inputs["observation"].copy_(observation)
    b.run()
    for i, key in enumerate(("loc", "scale", "sample")):
        torch.testing.assert_close(keyed[key], expected[key])
        torch.testing.assert_close(positional[i], expected[key])
        torch.testing.assert_close(b.outputs[key], expected[key])


def test_each_batch_runs_on_its_model(specialised):
    _, native = specialised
    for model, batch in (("b1", 1), ("b4", 4), ("model", 5)):
        alone = tdaot.load(native.path, model_name=model)
        x = torch.randn(batch, 3)
        for got, want in zip(native.run_positional(x), alone.run_positional(x)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_batch_outside_the_range_says_what_each_model_serves(specialised):
    _, native = specialised
    with pytest.raises(
        tdaot.BatchSizeError,
        match=r"batch size 65, but the package accepts batch sizes 1\.\.64 "
        r"\(models 'model' 1\.\.64, 'b1' 1, 'b4' 4\)",
    ):
        native.run_positional(torch.randn(65, 3))


def test_a_model_loaded_alone_refuses_other_batches(specialised):
    _, native = specialised
    b4 = tdaot.load(native.path, model_name="b4")
    with pytest.raises(
        tdaot.BatchSizeError,
        match=r"input 'observation' has batch size 2, which package '.*' serves with a model that is "
        r"not loaded \(loaded: 'b4', by PolicyOptions::model_name\)",
    ):
        b4.run_positional(torch.randn(2, 3))
    with pytest.raises(
        tdaot.PackageError, match=r"has no model 'b2' \(models: 'model' 1\.\.64, 'b1' 1, 'b4' 4\)"
    ):
        tdaot.load(native.path, model_name="b2")
