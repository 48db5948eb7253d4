"""tdaot.testing.assert_parity: eager policy vs native artifact, per key and batch size."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential

import tdaot
from tdaot.testing import assert_parity


# Batch 1, an odd one and the largest the package serves or 256 (nested's range is 1..64).
@pytest.mark.parametrize(("name", "large"), [("tutorial", 256), ("nested", 64)])
def test_example_policies_match_eager_at_1_7_and_a_large_batch(request, name, large):
    policy, example, artifact = request.getfixturevalue(name)
    report = assert_parity(policy, artifact.path, example, batch_sizes=[1, 7, large])
    assert {row.batch for row in report.rows} == {1, 7, large}
    assert {row.key for row in report.rows} == set(artifact.manifest.output_keys)
    assert all(row.ok and row.max_abs <= 1e-5 for row in report.rows)


def test_default_batch_sizes_are_1_odd_and_the_example(tutorial, tutorial_native):
    policy, example, _ = tutorial
    report = assert_parity(policy, tutorial_native, example)
    assert sorted({row.batch for row in report.rows}) == [1, 4, 7]


def test_mismatch_reports_a_table_per_key_and_batch(tutorial):
    policy, example, artifact = tutorial
    drifted = copy.deepcopy(policy)
    with torch.no_grad():
        drifted[0].module[0].bias.add_(0.5)  # the eager weights no longer match the artifact
    with pytest.raises(AssertionError) as info:
        assert_parity(drifted, artifact, example, batch_sizes=[1, 7])
    message = str(info.value)
    assert "differs from the eager policy" in message
    assert "max abs err" in message and "max rel err" in message
    for key in ("loc", "scale", "sample"):
        assert any(line.startswith(key) and "MISMATCH" in line for line in message.splitlines())


def test_batch_sizes_outside_the_range_are_refused(tutorial):
    policy, example, artifact = tutorial
    with pytest.raises(ValueError, match=r"batch sizes \[0\] are outside .*\[1, 1048576\]"):
        assert_parity(policy, artifact, example, batch_sizes=[0])


def test_dtype_mismatch_is_reported_not_compared(nested):
    policy, example, artifact = nested
    key = ("robot", "command")
    as_double = TensorDictModule(lambda x: x.double(), in_keys=[key], out_keys=[key])
    with pytest.raises(AssertionError, match=r"robot.command +1 +float64 .* dtype float32"):
        assert_parity(TensorDictSequential(policy, as_double), artifact, example, batch_sizes=[1])


def test_tolerances_can_be_overridden(tutorial):
    policy, example, artifact = tutorial
    drifted = copy.deepcopy(policy)
    with torch.no_grad():
        drifted[0].module[2].bias.add_(1e-3)
    assert_parity(drifted, artifact, example, batch_sizes=[1], atol=1e-2, rtol=0)
    with pytest.raises(AssertionError):
        assert_parity(drifted, artifact, example, batch_sizes=[1])


def test_artifact_object_and_native_policy_are_accepted(tutorial):
    policy, example, artifact = tutorial
    assert assert_parity(policy, artifact, example, batch_sizes=[2]).ok
    assert assert_parity(policy, tdaot.load(artifact.path), example, batch_sizes=[2]).ok
