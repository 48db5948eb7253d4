"""Large batches (tdaot.builder.tuning): a specialised model above BOUND_MAX_BATCH is throughput
tuned, a static batch whose largest intermediate is over CHUNK_BYTES is traced in chunks of rows,
and a dynamic model that would outgrow it records the rows the runtime slices a larger call into;
a policy whose rows mix is never chunked. CHUNK_BYTES and SLICE_BYTES are lowered here so the
tutorial policy's small batches chunk: one package (a dynamic model run in slices and a chunked
batch-48 one) is compiled, twice through a cache."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot.builder import tuning
from tdaot.builder.cache import ArtifactCache
from tdaot.builder.export import export_policy
from tdaot.builder.tuning import BOUND_MAX_BATCH, plan_models
from tdaot.manifest import BatchRange

# The tutorial policy's largest intermediate is 64 floats a row: 48 rows are 12 KiB.
SMALL_CHUNK_BYTES = 4096


def _policies():
    import sys

    sys.path.insert(0, str(ROOT))
    from examples import policies

    return policies


def _tutorial():
    return _policies().tutorial_policy()


class _BatchCentred(nn.Module):
    """Subtracts the batch mean: every row depends on every other."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(0, keepdim=True)


def _small_budgets(monkeypatch) -> None:
    for budget in ("CHUNK_BYTES", "SLICE_BYTES"):
        monkeypatch.setattr(tuning, budget, SMALL_CHUNK_BYTES)


def _calls(program, target) -> int:
    return sum(node.target is target for node in program.graph.nodes)


@pytest.mark.parametrize(
    ("tuning_name", "specialize", "low", "high", "expected"),
    [
        (
            "auto", (1, 16, 17, 4096), 1, 8192,
            [("model", "throughput", None, False), ("b1", "latency", 1, True),
             ("b16", "latency", 16, True), ("b17", "throughput", 17, False),
             ("b4096", "throughput", 4096, False)],
        ),
        ("auto", None, 64, 64, [("model", "throughput", 64, False)]),  # a static package above 16
        ("auto", None, 16, 16, [("model", "latency", 16, True)]),
        ("latency", None, 64, 64, [("model", "latency", 64, False)]),  # asked for: kept
    ],
)  # fmt: skip
def test_specialised_models_above_the_bound_batch_are_throughput_tuned(
    tuning_name, specialize, low, high, expected
):
    plans = plan_models(tuning_name, specialize, "cpu", low, high)
    assert [(p.name, p.tuning, p.batch, p.bound) for p in plans] == expected
    assert BOUND_MAX_BATCH == 16


def test_chunk_rows_keeps_the_largest_intermediate_within_the_budget(monkeypatch):
    policy, example = _tutorial()
    program = export_policy(policy, example, batch=48).program
    dynamic = export_policy(policy, example, batch=(1, 1024)).program
    static = BatchRange(48, 48)
    assert tuning.row_bytes(program) == tuning.row_bytes(dynamic) == 256  # 64 floats
    assert tuning.chunk_rows(program, static) is None  # 12 KiB: under the default budget
    assert tuning.chunk_rows(dynamic, BatchRange(1, 1024)) is None  # 256 KiB at most
    assert tuning.chunk_rows(dynamic, BatchRange(1, 1 << 20)) == 8192  # 3 MiB of 256-byte rows: 12288
    _small_budgets(monkeypatch)
    assert tuning.chunk_rows(program, static) == 16  # 4 KiB of 256-byte rows
    assert tuning.chunk_rows(dynamic, BatchRange(1, 64)) == 16
    assert tuning.chunk_rows(dynamic, BatchRange(20, 64)) == 20  # never below the smallest batch
    assert tuning.chunk_rows(dynamic, BatchRange(1, 16)) is None  # the largest batch fits
    monkeypatch.setattr(tuning, "CHUNK_BYTES", 5000)
    assert tuning.chunk_rows(program, static) == 16  # 19 rows would fit: a power of two is taken
    # A slice is SLICE_MIN_ROWS rows where they fit CHUNK_BYTES (32 x 256 bytes), not fewer.
    assert tuning.SLICE_MIN_ROWS == 32
    assert tuning.chunk_rows(dynamic, BatchRange(1, 64)) == 16  # 5000 bytes: 16 rows
    monkeypatch.setattr(tuning, "CHUNK_BYTES", 32 * 256)
    assert tuning.chunk_rows(dynamic, BatchRange(1, 64)) == 32
    assert tuning.chunk_rows(program, static) == 32  # a static batch: CHUNK_BYTES alone
    monkeypatch.setattr(tuning, "CHUNK_BYTES", 1)
    assert tuning.chunk_rows(program, static) == 1


def test_a_large_static_batch_is_traced_in_chunks_that_equal_the_whole(monkeypatch):
    policy, example = _tutorial()
    whole = export_policy(policy, example, batch=48).program
    dynamic = export_policy(policy, example, batch=(1, 64)).program
    monkeypatch.setattr(tuning, "CHUNK_BYTES", SMALL_CHUNK_BYTES)
    chunked = export_policy(policy, example, batch=48).program
    again = export_policy(policy, example, batch=(1, 64)).program
    assert again.graph_module.code == dynamic.graph_module.code  # a dynamic batch is never chunked
    linear = torch.ops.aten.linear.default
    assert _calls(chunked, linear) == 3 * _calls(whole, linear) > 0  # three 16-row chunks
    assert _calls(chunked, torch.ops.aten.cat.default) > 0
    x = torch.randn(48, 3)
    for got, want in zip(chunked.module()(x), whole.module()(x), strict=True):
        torch.testing.assert_close(got, want)


def test_a_policy_whose_rows_mix_is_never_chunked(monkeypatch):
    _small_budgets(monkeypatch)
    policy, example = _tutorial()
    assert export_policy(policy, example, batch=(1, 64)).chunk_rows == 16
    # A recurrent policy's state rows are rows like any other: it is chunked too (its largest
    # intermediate is 8 floats a row, so the budgets are lowered further for it).
    recurrent, recurrent_example = _policies().recurrent_policy()
    monkeypatch.setattr(tuning, "SLICE_BYTES", 512)
    monkeypatch.setattr(tuning, "CHUNK_BYTES", 512)
    assert export_policy(recurrent, recurrent_example, batch=(1, 64)).chunk_rows == 16
    _small_budgets(monkeypatch)
    mixing = TensorDictModule(nn.Sequential(nn.Linear(3, 64), _BatchCentred()), ["observation"], ["action"])
    x = TensorDict(observation=torch.randn(48, 3), batch_size=[48])
    assert export_policy(mixing, x, batch=(1, 64)).chunk_rows is None
    whole = export_policy(mixing, x, batch=48).program
    assert _calls(whole, torch.ops.aten.cat.default) == 0  # traced whole
    assert _calls(whole, torch.ops.aten.linear.default) == 1


def test_chunked_model_is_built_cached_on_its_own_and_matches_eager(monkeypatch, tmp_path):
    _small_budgets(monkeypatch)
    policy, example = _tutorial()
    cache = ArtifactCache(tmp_path / "cache")
    options = {"batch": (1, 64), "specialize": (48,), "cache": cache}
    artifact = tdaot.build(policy, example, tmp_path / "p.pt2", **options)
    assert [(m.name, m.batch.min, m.batch.max, m.tuning, m.chunk_rows) for m in artifact.manifest.models] == [
        ("model", 1, 64, "throughput", 16),  # 47 and 49 rows run as slices of 16
        ("b48", 48, 48, "throughput", None),  # traced in chunks instead
    ]
    tdaot.testing.assert_parity(policy, artifact, example, batch_sizes=[47, 48, 49])
    statuses = []
    again = tdaot.build(policy, example, tmp_path / "q.pt2", on_status=statuses.append, **options)
    assert again.cache_hit and statuses[-1] == "cached" and again.sha256 == artifact.sha256
