"""Large static batches (tdaot.builder.tuning): a specialised model above BOUND_MAX_BATCH is
throughput tuned, and a static batch whose largest intermediate is over CHUNK_BYTES is traced
in chunks of rows. CHUNK_BYTES is lowered here so the tutorial policy's small batches chunk:
one package (a dynamic model and a chunked batch-48 one) is compiled, twice through a cache."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT

import tdaot
from tdaot.builder import tuning
from tdaot.builder.cache import ArtifactCache
from tdaot.builder.export import export_policy
from tdaot.builder.tuning import BOUND_MAX_BATCH, plan_models

# The tutorial policy's largest intermediate is 64 floats a row: 48 rows are 12 KiB.
SMALL_CHUNK_BYTES = 4096


def _tutorial():
    import sys

    sys.path.insert(0, str(ROOT))
    from examples.policies import tutorial_policy

    return tutorial_policy()


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
    assert tuning.chunk_rows(program, 48) is None  # 12 KiB: under the default budget
    monkeypatch.setattr(tuning, "CHUNK_BYTES", SMALL_CHUNK_BYTES)
    assert tuning.chunk_rows(program, 48) == 16  # 4 KiB of 256-byte rows
    monkeypatch.setattr(tuning, "CHUNK_BYTES", 5000)
    assert tuning.chunk_rows(program, 48) == 16  # 19 rows would fit: a power of two is taken
    monkeypatch.setattr(tuning, "CHUNK_BYTES", 1)
    assert tuning.chunk_rows(program, 48) == 1


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


def test_chunked_model_is_built_cached_on_its_own_and_matches_eager(monkeypatch, tmp_path):
    monkeypatch.setattr(tuning, "CHUNK_BYTES", SMALL_CHUNK_BYTES)
    policy, example = _tutorial()
    cache = ArtifactCache(tmp_path / "cache")
    options = {"batch": (1, 64), "specialize": (48,), "cache": cache}
    artifact = tdaot.build(policy, example, tmp_path / "p.pt2", **options)
    assert [(m.name, m.batch.min, m.batch.max, m.tuning) for m in artifact.manifest.models] == [
        ("model", 1, 64, "throughput"),
        ("b48", 48, 48, "throughput"),
    ]
    tdaot.testing.assert_parity(policy, artifact, example, batch_sizes=[47, 48, 49])
    statuses = []
    again = tdaot.build(policy, example, tmp_path / "q.pt2", on_status=statuses.append, **options)
    assert again.cache_hit and statuses[-1] == "cached" and again.sha256 == artifact.sha256
