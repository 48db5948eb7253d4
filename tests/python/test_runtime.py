"""tdaot.load: the native runner through the bindings, its validation and its errors."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict

import tdaot
from tdaot import _C


def _obs(batch: int, dtype=torch.float32) -> torch.Tensor:
    return torch.linspace(-1, 1, batch * 3, dtype=dtype).reshape(batch, 3)


def test_call_with_a_tensordict_writes_the_out_keys_into_it(tutorial, tutorial_native):
    _, example, _ = tutorial
    td = example.clone()
    out = tutorial_native(td)
    assert out is td  # as a TensorDictModule: the outputs are written into the TensorDict given
    assert set(out.keys()) == {"observation", "loc", "scale", "sample"}
    assert out.batch_size == example.batch_size
    torch.testing.assert_close(out["sample"], out["loc"])  # deterministic Normal -> its mean
    assert (out["scale"] > 0).all()


def test_extra_tensordict_entries_are_ignored(tutorial_native):
    td = TensorDict({"observation": _obs(2), "reward": torch.zeros(2, 1)}, batch_size=[2])
    assert tutorial_native(td)["loc"].shape == (2, 2)


def test_keyword_mapping_and_positional_forms_agree(nested, nested_native):
    _, example, _ = nested
    obs, joints = example["agents", "observation"], example["robot", "joints"]
    from_td = nested_native(example.clone())
    from_mapping = nested_native({("agents", "observation"): obs, "robot.joints": joints})
    from_kwargs = nested_native(**{"agents.observation": obs, "robot.joints": joints})
    positional = nested_native.run_positional(obs, joints)
    for out in (from_mapping, from_kwargs):
        for key in nested_native.out_keys:
            assert torch.equal(out[key], from_td[key]), key
    torch.testing.assert_close(positional[0], from_td["agents", "action"], rtol=0, atol=0)
    torch.testing.assert_close(positional[1], from_td["robot", "command"], rtol=0, atol=0)


def test_the_loaded_manifest_is_the_stored_one(tutorial_native):
    # The manifest the policy runs by is the one the package stores (the bytes signatures sign).
    stored = _C.read_manifest_bytes(tutorial_native.path)
    assert tdaot.Manifest.from_json(stored.decode()) == tutorial_native.manifest
    assert json.loads(stored)["schema_version"] == 2
    assert "observation" in repr(tutorial_native)


# --- input validation: the bad-input matrix is in test_bad_inputs.py ---------------------
def test_an_input_error_carries_the_key_and_is_a_tdaot_error(tutorial_native):
    with pytest.raises(tdaot.DtypeError, match=r"'observation' has dtype float64, expected float32") as info:
        tutorial_native(observation=_obs(2, torch.float64))
    assert isinstance(info.value, tdaot.InputError) and isinstance(info.value, tdaot.TdaotError)
    assert info.value.key == "observation"


# --- packages that cannot be loaded: test_packages.py ---------------------------------


# --- load options (threads sharing a policy: test_concurrency.py) ---------------------
def test_intra_op_threads_is_set_at_load_or_left_alone(tutorial):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        tdaot.load(tutorial[2].path)  # None: leave the Python process's setting alone
        assert torch.get_num_threads() == 2
        tdaot.load(tutorial[2].path, intra_op_threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_runners": 0}, r"PolicyOptions.num_runners must be >= 1, got 0"),
        ({"warmup_runs": -1}, r"PolicyOptions.warmup_runs must be >= 0, got -1"),
        ({"intra_op_threads": -1}, r"PolicyOptions.intra_op_threads must be >= 0"),
    ],
    ids=["runners", "warmup", "threads"],
)
def test_invalid_load_options_are_refused(tutorial, options, message):
    with pytest.raises(tdaot.TdaotError, match=message):
        tdaot.load(tutorial[2].path, **options)


def test_outputs_never_require_grad(tutorial_native):
    # The compiled model is forward-only and runs below the autograd dispatch keys.
    observation = _obs(2).requires_grad_()
    out = tutorial_native(observation=observation)
    assert not any(value.requires_grad for value in out.values())
    expected = tutorial_native(observation=observation.detach())
    assert (out["sample"] == expected["sample"]).all()
