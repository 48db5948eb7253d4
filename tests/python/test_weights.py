"""Weight files (tdaot.export_weights) and the hot weight swap (native.swap_weights): parity
with the retrained policy, rollback, swaps under concurrent calls, and every refusal leaving
the live weights serving."""

from __future__ import annotations

import copy
import json
import threading

import pytest
import safetensors.torch
import torch
from tensordict import TensorDict

import tdaot
from tdaot import _C, _torch_compat
from tdaot.builder.export import export_policy
from tdaot.builder.weights_format import (
    RECORD_KEY,
    canonical_digest,
    program_weights,
    signing_payload,
    write_weight_file,
)

OBSERVATIONS = {
    1: torch.randn(1, 3, generator=torch.Generator().manual_seed(1)),
    8: torch.randn(8, 3, generator=torch.Generator().manual_seed(8)),
}


@pytest.fixture(scope="session")
def retrained(tutorial):
    """The tutorial policy with every weight changed, as training would."""
    policy = copy.deepcopy(tutorial[0])
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(3)) * 0.5)
    return policy


@pytest.fixture(scope="session")
def weight_file(tutorial, retrained, artifacts_dir):
    """(path, digest) of the retrained policy's weight file for the tutorial package."""
    path = artifacts_dir / "tutorial-v2.tdw"
    digest = tdaot.export_weights(retrained, tutorial[2].path, path)
    return str(path), digest


@pytest.fixture
def native(tutorial):
    """A fresh load per test: swaps change what a loaded policy serves."""
    return tdaot.load(tutorial[2].path)


def outputs(native, batch: int) -> dict[str, torch.Tensor]:
    result = native(observation=OBSERVATIONS[batch])
    return {key: result[key] for key in ("loc", "scale", "sample")}


def eager(policy, batch: int) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        result = policy(TensorDict({"observation": OBSERVATIONS[batch]}, batch_size=[batch]))
    return {key: result[key] for key in ("loc", "scale", "sample")}


def assert_close(actual, expected):
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5, msg=key)


def assert_equal(actual, expected):
    for key in expected:
        assert torch.equal(actual[key], expected[key]), key


def test_a_fresh_package_reports_the_digest_export_weights_gives_its_weights(tutorial):
    policy, example, artifact = tutorial
    native = tdaot.load(artifact.path)
    program = export_policy(policy, example).program
    assert native.weights_sha256 == canonical_digest(program_weights(program))


def test_swapped_weights_match_the_retrained_policy_on_every_model(native, retrained, weight_file):
    path, digest = weight_file
    binding = native.bind(1)  # bound before the swap: its own model instance must follow it
    native.swap_weights(path)
    assert native.weights_sha256 == digest
    assert_close(outputs(native, 1), eager(retrained, 1))  # the batch-1 latency model
    assert_close(outputs(native, 8), eager(retrained, 8))  # the throughput model
    binding.inputs["observation"].copy_(OBSERVATIONS[1])
    binding.run()
    assert binding.allocation_free
    torch.testing.assert_close(binding.outputs["loc"], eager(retrained, 1)["loc"], rtol=1e-4, atol=1e-5)


def test_rollback_restores_the_old_outputs_exactly(native, weight_file):
    before = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    built_with = native.weights_sha256
    native.swap_weights(weight_file[0])
    native.rollback_weights()
    assert native.weights_sha256 == built_with
    for batch in OBSERVATIONS:
        assert_equal(outputs(native, batch), before[batch])


def test_rollback_without_a_swap_is_refused(native):
    with pytest.raises(tdaot.WeightsError, match="no previous weights"):
        native.rollback_weights()


def test_calls_during_200_swaps_see_old_or_new_weights_never_a_mix(native, weight_file):
    old = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    native.swap_weights(weight_file[0])
    new = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    native.rollback_weights()
    stop, failures, calls = threading.Event(), [], [0]

    def check(batch, got):
        if not (
            all(torch.equal(got[k], old[batch][k]) for k in got)
            or all(torch.equal(got[k], new[batch][k]) for k in got)
        ):
            failures.append((batch, got))

    def caller(batch):
        while not stop.is_set():
            check(batch, outputs(native, batch))
            calls[0] += 1

    def bound_caller():
        binding = native.bind(1)
        binding.inputs["observation"].copy_(OBSERVATIONS[1])
        while not stop.is_set():
            binding.run()
            check(1, {key: binding.outputs[key].clone() for key in ("loc", "scale", "sample")})
            calls[0] += 1

    threads = [threading.Thread(target=caller, args=(b,)) for b in (1, 8, 1)] + [
        threading.Thread(target=bound_caller)
    ]
    for thread in threads:
        thread.start()
    try:
        for i in range(200):
            if i % 2 == 0:
                native.swap_weights(weight_file[0])
            else:
                native.rollback_weights()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures, f"{len(failures)} of {calls[0]} calls saw neither the old nor the new weights"
    assert calls[0] > 0


def _tensors(path):
    return safetensors.torch.load_file(path)


def _rewrite(tmp_path, weight_file, change, base_sha256=None, name="bad.tdw"):
    """A weight file like ``weight_file`` with ``change(tensors)`` applied, digests recomputed."""
    tensors = _tensors(weight_file[0])
    change(tensors)
    weights = {k[len("weights/") :]: v for k, v in tensors.items() if k.startswith("weights/")}
    models: dict = {}
    for key, value in tensors.items():
        if key.startswith("model/"):
            _, model, constant = key.split("/", 2)
            models.setdefault(model, {})[constant] = value
    base = base_sha256 or safetensors.safe_open(weight_file[0], "pt").metadata()["tdaot.base_sha256"]
    path = tmp_path / name
    write_weight_file(path, weights, models, base)
    return str(path)


def _first(tensors, prefix):
    return next(key for key in sorted(tensors) if key.startswith(prefix))


def _reshaped(tensors):
    key = _first(tensors, "model/model/")
    tensors[key] = torch.zeros(tensors[key].numel() + 1)
    return key


def _nan(tensors):
    key = _first(tensors, "model/b1/")
    value = tensors[key].clone()
    value.view(-1)[0] = float("nan")
    tensors[key] = value


REFUSALS = {
    "another architecture": (lambda t: _reshaped(t), "has shape"),
    "wrong dtype": (lambda t: t.__setitem__(k := _first(t, "model/b1/"), t[k].double()), "has dtype"),
    "missing tensor": (lambda t: t.pop(_first(t, "model/b1/")), "is missing"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_tensor_is_named_and_the_old_weights_keep_serving(native, weight_file, tmp_path, case):
    change, message = REFUSALS[case]
    tensors = _tensors(weight_file[0])
    before = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    key = _first(tensors, "model/model/" if case == "another architecture" else "model/b1/")
    path = _rewrite(tmp_path, weight_file, change)
    with pytest.raises(tdaot.WeightsError, match=message) as caught:
        native.swap_weights(path)
    assert path in str(caught.value) and key in str(caught.value) and caught.value.tensor == key
    for batch in OBSERVATIONS:
        assert_equal(outputs(native, batch), before[batch])


def test_refused_files_leave_the_old_weights_serving(native, weight_file, tmp_path):
    before = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    data = open(weight_file[0], "rb").read()
    truncated = tmp_path / "truncated.tdw"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = tmp_path / "flipped.tdw"
    flipped.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    nan = _rewrite(tmp_path, weight_file, _nan, name="nan.tdw")
    other = _rewrite(tmp_path, weight_file, lambda t: None, base_sha256="0" * 64, name="other.tdw")
    cases = [
        (str(truncated), "truncated"),
        (str(flipped), "does not match its digest"),
        (nan, "not finite"),
        (other, "was made for the package of sha256 0000"),
    ]
    for path, message in cases:
        with pytest.raises(tdaot.WeightsError, match=message) as caught:
            native.swap_weights(path)
        assert caught.value.path == path and path in str(caught.value)
        for batch in OBSERVATIONS:
            assert_equal(outputs(native, batch), before[batch])
    assert "model/b1/" in str(pytest.raises(tdaot.WeightsError, native.swap_weights, nan).value)


def test_export_weights_names_the_first_structural_difference(tutorial, tmp_path):
    policy = copy.deepcopy(tutorial[0])
    backbone = policy[0].module
    backbone[0] = torch.nn.Linear(3, 32)
    backbone[2] = torch.nn.Linear(32, 4)
    with pytest.raises(
        tdaot.WeightsError,
        match=r"'module\.module\.0\.module\.0\.bias' is float32 \[32\], the package's is float32 \[64\]",
    ):
        tdaot.export_weights(policy, tutorial[2].path, tmp_path / "other.tdw")


def test_export_weights_refuses_a_package_built_without_weight_records(tutorial, tmp_path):
    """A package of an earlier tdaot: its models' metadata lack the weight record."""
    records = _torch_compat.read_archive(tutorial[2].path)
    for name, data in records.items():
        if name.endswith("_metadata.json"):
            metadata = json.loads(data)
            metadata.pop(RECORD_KEY, None)
            records[name] = json.dumps(metadata).encode()
    old = tmp_path / "old.pt2"
    _torch_compat.write_archive(str(old), records)
    with pytest.raises(tdaot.WeightsError, match=f"package '{old}' .* records nothing about its weights"):
        tdaot.export_weights(tutorial[0], old, tmp_path / "old.tdw")


def test_the_signed_bytes_are_the_same_in_python_and_cpp_and_exclude_signatures(
    native, weight_file, tmp_path
):
    path = weight_file[0]
    payload = signing_payload(path)
    assert payload == _C.weights_signing_payload(path)
    with safetensors.safe_open(path, "pt") as file:
        metadata = file.metadata()
    signed = tmp_path / "signed.tdw"
    safetensors.torch.save_file(_tensors(path), signed, metadata={**metadata, "tdaot.signatures": "[]"})
    assert signing_payload(signed) == payload == _C.weights_signing_payload(str(signed))
    native.swap_weights(str(signed))
    assert native.weights_sha256 == weight_file[1]
