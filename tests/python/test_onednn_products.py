"""Linear layers on oneDNN's matmul for many rows (rewrites.onednn_products): which plans take the
route and when a package holds a "small" model beside it, which layers and weights it names, and
a package whose "model" packs them at load and at a swap while "small" keeps MKL for few rows.

AOTInductor compiles: one small MLP package, two dynamic models (the last test).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import assert_swapped_and_rolled_back_twice, elu_mlp_policy

import tdaot
from tdaot import _torch_compat
from tdaot.builder import rewrites
from tdaot.builder.rewrites import many_rows_product_weights, many_rows_products_differ, wide_product_weights
from tdaot.builder.tuning import (
    SMALL_PRODUCTS_MAX_BATCH,
    plan_key_parts,
    plan_models,
    rewrites_made,
    tune_plan,
)
from tdaot.manifest import BatchRange

needs_onednn = pytest.mark.skipif(
    not _torch_compat.has_onednn_linear(), reason="a torch without oneDNN's linear op"
)


def _plans(low=1, high=1 << 20, isa="avx512", **options):
    return plan_models("auto", (1,), "cpu", low, high, vector_isa=isa, many_rows_products=True, **options)


def _shape(plans):
    return [(p.name, p.batch, p.batch_max, p.onednn_products, p.many_rows_products) for p in plans]


def test_a_dynamic_avx512_package_puts_its_many_row_batches_on_onednn_and_few_on_mkl():
    assert SMALL_PRODUCTS_MAX_BATCH == 128
    assert _shape(_plans()) == [
        ("model", None, None, True, True),
        ("small", None, 128, True, False),  # the wide layers stay on oneDNN at every batch
        ("b1", 1, None, False, False),
    ]
    model = _plans()[0]
    assert "many_rows_products_onednn" in plan_key_parts(model)["rewrites"]
    assert "wide_products_onednn" not in plan_key_parts(model)["rewrites"]  # the wider rule has them
    assert plan_key_parts(model) != plan_key_parts(dataclasses.replace(model, many_rows_products=False))
    # A range above the small model's: no small model; within it: no many-rows model.
    assert _shape(_plans(low=128, high=4096)) == [("model", None, None, True, True)]
    assert _shape(_plans(low=1, high=128)) == [
        ("model", None, None, True, False),
        ("b1", 1, None, False, False),
    ]
    # A recurrent package has one small model for both reasons, decomposed.
    recurrent = _plans(recurrent=True)
    assert _shape(recurrent) == _shape(_plans())
    assert [p.decomposed for p in recurrent] == [False, True, False]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"isa": "avx2"}, "MKL's AVX2 path"),
        ({"isa": ""}, "no x86 vector ISA"),
        ({"low": 64, "high": 64}, "a static batch"),
        ({"exact_math": True}, "exact_math"),
    ],
)
def test_no_many_rows_model_where_the_route_does_not_apply(options, why):
    plans = _plans(**options)
    assert not any(p.many_rows_products for p in plans), why
    assert [p.name for p in plans if p.name == "small"] == [], why
    without = plan_models("auto", (1,), "cpu", 1, 1 << 20, vector_isa="avx512")
    assert _shape(without) == [("model", None, None, True, False), ("b1", 1, None, False, False)]
    assert _shape(
        plan_models("throughput", None, "cpu", 1, 4096, vector_isa="avx512", many_rows_products=True)
    ) == [("model", None, None, False, False)]


class _Layers(torch.nn.Module):
    """48 -> 256 (too shallow), 256 -> 256, a 1024-deep head of 24 columns (MKL's shape), a wide
    1024 x 1024 layer, and a 256 -> 12 head whose weight is also read by a sum (not packed)."""

    def __init__(self) -> None:
        super().__init__()
        self.shallow, self.deep = torch.nn.Linear(48, 256), torch.nn.Linear(256, 256)
        self.up, self.wide = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 1024)
        self.mkl_head, self.head = torch.nn.Linear(1024, 24), torch.nn.Linear(256, 12)

    def forward(self, x):
        h = torch.relu(self.deep(torch.relu(self.shallow(x))))
        w = self.wide(torch.relu(self.up(h)))
        return self.mkl_head(w), self.head(h) + self.head.weight.sum()


@needs_onednn
def test_the_many_rows_rule_takes_deep_layers_and_names_their_weights_for_packing():
    x = torch.randn(6, 48)
    program = torch.export.export(_Layers(), (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
    assert wide_product_weights(program) == ("wide.weight",)
    assert many_rows_product_weights(program) == ("deep.weight", "up.weight", "wide.weight")
    assert many_rows_products_differ(program)
    model, small, _ = _plans()
    assert rewrites_made(program, model) == ["many_rows_products_onednn"]
    assert rewrites_made(program, small) == ["wide_products_onednn"]

    def on_onednn(plan):
        tuned = tune_plan(program, plan)
        onednn = torch.ops.mkldnn._linear_pointwise.default
        return [tuple(n.args[1].meta["val"].shape) for n in tuned.graph.nodes if n.target is onednn], tuned

    many, tuned = on_onednn(model)
    assert many == [(256, 256), (1024, 256), (1024, 1024), (12, 256)]
    assert on_onednn(small)[0] == [(1024, 1024)]
    for want, got in zip(program.module()(x), tuned.module()(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Only wide layers, or only shallow ones: the wide rule or MKL serves every batch alike.
    only_wide = torch.nn.Sequential(torch.nn.Linear(32, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024))
    shallow = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    for module, width in ((only_wide, 32), (shallow, 48)):
        assert not many_rows_products_differ(torch.export.export(module, (torch.randn(4, width),)))
    assert rewrites.onednn_products.MANY_ROWS_MKL_SHAPES == {(1024, 16), (1024, 24)}


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512", reason="AVX-512 kernels only")
def test_many_rows_run_on_onednn_packed_at_load_and_few_rows_on_mkl(tmp_path):
    """The package holds "model" (its 128 -> 128 layer and 128 -> 12 head on oneDNN, packed by the
    runtime at load and at each swap) and "small" (MKL, nothing packed); each batch reaches the
    model of its range and matches eager, before and after a swap and its rollback."""
    policy, net, example = elu_mlp_policy(16, 128, 12)
    artifact = tdaot.build(policy, example, tmp_path / "mlp.pt2", specialize=())
    assert artifact.manifest.numerics == ("many_rows_products_onednn",)
    models = {m.name: m for m in artifact.manifest.models}
    assert sorted(models) == ["model", "small"]
    assert models["small"].batch == BatchRange(1, SMALL_PRODUCTS_MAX_BATCH)
    assert [n.split(".")[-2:] for n in models["model"].packed_weights] == [["2", "weight"], ["4", "weight"]]
    assert models["small"].packed_weights == ()
    native = tdaot.load(tmp_path / "mlp.pt2")
    assert "; 2 weight(s) packed for oneDNN at load" in native.manifest.describe()
    assert [native.bind(rows).model for rows in (1, 128, 129, 300)] == ["small", "small", "model", "model"]
    for rows in (SMALL_PRODUCTS_MAX_BATCH, SMALL_PRODUCTS_MAX_BATCH + 1, 300):
        x = torch.randn(rows, 16)
        with torch.no_grad():
            original = net(x)
        torch.testing.assert_close(native.run_positional(x)[0], original)
        assert_swapped_and_rolled_back_twice(
            native, policy, artifact.path, tmp_path / "mlp-v2.tdw", x, original
        )
