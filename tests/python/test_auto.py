"""tuning="auto", the default: a dynamic throughput model plus static latency models for the
`specialize` batches, in one package; the options, the plan, the rewrites, the per-model cache.

The tutorial policy with specialize=(1, 4) through the cache (conftest's tutorial_b14, shared with
test_dispatch), then again with specialize=(1, 2) (only b2 compiles), a one-model package, and
the conv rewrite checked without compiling.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import warnings
import zipfile

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, retrained_copy
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import tdaot
from tdaot.builder.options import BuildOptions
from tdaot.builder.rewrites import conv2d_as_gemm, divisions_as_multiplications
from tdaot.builder.tuning import (
    BOUND_MAX_BATCH,
    DECOMPOSED_RNN_MAX_BATCH,
    ModelPlan,
    plan_key_parts,
    plan_models,
    tune_plan,
    tune_program,
)
from tdaot.cli import main

POLICIES = ROOT / "examples" / "policies.py"
BOUND_ENTRY = b"AOTInductorModelRunMinimalArrayrefInterfaceV2"


def _models(manifest) -> list[tuple[str, int, int, str]]:
    return [(m.name, m.batch.min, m.batch.max, m.tuning) for m in manifest.models]


def _libraries(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {
            name.split("/")[-2]: archive.read(name) for name in archive.namelist() if name.endswith(".so")
        }


@pytest.fixture(scope="module")
def auto_project(tmp_path_factory, tutorial_b14):
    policy, example, artifact, cache = tutorial_b14
    return {"root": tmp_path_factory.mktemp("auto"), "policy": policy, "example": example, "cache": cache,
            "artifact": artifact, "factory": artifact.manifest.source.factory}  # fmt: skip


def test_default_tuning_is_auto_with_batch_one_specialised():
    options = BuildOptions()
    assert (options.tuning, options.specialize) == ("auto", None)
    assert plan_models("auto", None, "cpu", 1, 1 << 20) == [
        ModelPlan("model", "throughput", reciprocals=True),
        ModelPlan("b1", "latency", 1, bound=True),
    ]


@pytest.mark.parametrize(
    ("tuning", "specialize", "device", "low", "high", "expected"),
    [
        # "auto"'s CPU throughput models, dynamic, small and static; latency models by their tuning.
        ("auto", (1, 64), "cpu", 1, 4096, {"model": True, "small": True, "b1": False, "b64": True}),
        ("auto", None, "cuda", 1, 64, {"model": False}),
        ("throughput", None, "cpu", 1, 64, {"model": False}),  # inductor's own choice
        ("latency", None, "cpu", 1, 64, {"model": False}),
    ],
)
def test_auto_cpu_throughput_models_multiply_by_reciprocals(tuning, specialize, device, low, high, expected):
    plans = plan_models(tuning, specialize, device, low, high, recurrent=True)
    assert {p.name: p.reciprocals for p in plans} == expected
    for plan in plans:
        rewrites = plan_key_parts(plan).get("rewrites", [])
        assert ("divisions_as_multiplications" in rewrites) == (plan.reciprocals or plan.tuning == "latency")
        assert ModelPlan(**plan.describe()) == dataclasses.replace(plan, chunk_rows=None)


@pytest.mark.parametrize(
    ("tuning", "specialize", "device", "low", "high", "expected"),
    [
        ("auto", (1, 4, 9999), "cpu", 2, 64, [("model", None, False), ("b4", 4, True)]),
        ("auto", (), "cpu", 1, 64, [("model", None, False)]),
        ("auto", None, "cpu", 4, 4, [("model", 4, True)]),  # a static package: one latency model
        ("auto", None, "cpu", 64, 64, [("model", 64, False)]),  # above BOUND_MAX_BATCH
        ("auto", None, "cuda", 1, 64, [("model", None, False)]),  # latency models are CPU builds
        ("throughput", None, "cpu", 1, 64, [("model", None, False)]),
        ("latency", None, "cpu", 1, 64, [("model", None, False)]),
        ("latency", None, "cpu", 1, 1, [("model", 1, True)]),
    ],
)
def test_model_plans(tuning, specialize, device, low, high, expected):
    plans = plan_models(tuning, specialize, device, low, high)
    assert [(p.name, p.batch, p.bound) for p in plans] == expected
    assert 64 > BOUND_MAX_BATCH


@pytest.mark.parametrize(
    ("tuning", "specialize", "low", "high", "expected"),
    [
        # A dynamic recurrent package: one more dynamic model up to DECOMPOSED_RNN_MAX_BATCH rows.
        ("auto", None, 1, 1 << 20, [
            ("model", None, None, False), ("small", None, 128, True), ("b1", 1, None, False),
        ]),
        ("auto", (1, 64, 256), 2, 4096, [
            ("model", None, None, False), ("small", None, 128, True),
            ("b64", 64, None, True), ("b256", 256, None, False),
        ]),
        # Its whole range within it: the one dynamic model is decomposed.
        ("auto", (), 1, 64, [("model", None, None, True)]),
        ("auto", None, 32, 32, [("model", 32, None, True)]),
        ("auto", None, 200, 200, [("model", 200, None, False)]),
        ("auto", None, 128, 4096, [("model", None, None, False)]),
        # "throughput" is inductor's own choice; "latency" decomposes in every model already.
        ("throughput", None, 1, 4096, [("model", None, None, False)]),
        ("latency", None, 1, 4096, [("model", None, None, False)]),
    ],
)  # fmt: skip
def test_recurrent_policies_get_decomposed_models_for_few_rows(tuning, specialize, low, high, expected):
    plans = plan_models(tuning, specialize, "cpu", low, high, recurrent=True)
    assert [(p.name, p.batch, p.batch_max, p.decomposed) for p in plans] == expected
    assert all(p.recurrent_decomposed() for p in plans if p.tuning == "latency")
    assert DECOMPOSED_RNN_MAX_BATCH == 128
    # The same for AVX-512 kernels (under "auto", their dynamic throughput models put wide layers
    # and convolutions on oneDNN; "throughput" is inductor's own choice); AVX2 ones decompose at
    # every batch.
    avx512 = plan_models(tuning, specialize, "cpu", low, high, True, vector_isa="avx512")
    onednn = [tuning == "auto" and p.tuning == "throughput" and p.batch is None for p in avx512]
    assert [dataclasses.replace(p, onednn_products=False, onednn_convolutions=False) for p in avx512] == [
        dataclasses.replace(p, onednn_convolutions=False) for p in plans
    ]
    assert [p.onednn_products for p in avx512] == onednn
    assert [p.onednn_convolutions for p in avx512] == onednn


def test_avx2_kernels_decompose_recurrent_layers_at_every_batch():
    plans = plan_models("auto", (1, 64, 4096), "cpu", 1, 1 << 20, recurrent=True, vector_isa="avx2")
    assert [(p.name, p.batch, p.batch_max, p.decomposed) for p in plans] == [
        ("model", None, None, True),  # no "small" model beside it
        ("b1", 1, None, False),  # latency: decomposed by its tuning
        ("b64", 64, None, True),
        ("b4096", 4096, None, True),
    ]
    assert all(p.recurrent_decomposed() for p in plans)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"specialize": (0,)}, r"specialize=\(0,\): expected batch sizes >= 1"),
        ({"specialize": "1"}, r"specialize='1': expected batch sizes >= 1"),
        ({"tuning": "throughput", "specialize": (1,)}, r"specialize=\(1,\) applies to tuning='auto' only"),
        ({"tuning": "fast"}, r"tuning='fast' is not one of 'throughput', 'latency', 'auto'"),
    ],
)
def test_bad_options_name_the_option_and_value(options, message):
    with pytest.raises(tdaot.BuildError, match=message):
        BuildOptions(**options)


def test_specialize_is_normalised():
    assert BuildOptions(specialize=[4, 1, 4]).specialize == (1, 4)
    assert BuildOptions(specialize=2).specialize == (2,)


def test_cli_and_config_take_specialize(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_build(module, example, output, **options):
        seen.update(options)
        raise tdaot.BuildError("stop here")

    monkeypatch.setattr("tdaot.cli.build", fake_build)
    argv = ["build", f"{POLICIES}:tutorial_policy", "-o", str(tmp_path / "x.pt2")]
    assert main([*argv, "--specialize", "1,4"]) == 1 and seen["specialize"] == (1, 4)
    assert main([*argv, "--specialize", ""]) == 1 and seen["specialize"] == ()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--specialize", "one"])
    assert exit_info.value.code == 2 and "expected batch sizes separated by commas" in capsys.readouterr().err
    config = tmp_path / "tdaot.toml"
    config.write_text("[[artifact]]\nname = 'a'\nfactory = 'f.py:f'\nspecialize = [1, 8]\n")
    from tdaot.builder.config import load_config

    assert load_config(config)[0].options.specialize == (1, 8)
    config.write_text("[[artifact]]\nname = 'a'\nfactory = 'f.py:f'\nspecialize = [0]\n")
    with pytest.raises(tdaot.ConfigError, match=r"field 'specialize': expected batch sizes >= 1"):
        load_config(config)


def test_package_lists_its_models_and_each_is_built_for_its_batch(auto_project):
    manifest = auto_project["artifact"].manifest
    assert _models(manifest) == [
        ("model", 1, 64, "throughput"),
        ("b1", 1, 1, "latency"),
        ("b4", 4, 4, "latency"),
    ]
    libraries = _libraries(auto_project["artifact"].path)
    assert sorted(libraries) == ["b1", "b4", "model"]
    # The specialised models have the bound run's entry point; the dynamic one cannot.
    assert BOUND_ENTRY in libraries["b1"] and BOUND_ENTRY in libraries["b4"]
    assert BOUND_ENTRY not in libraries["model"]
    assert "    b1              batch 1, latency" in manifest.describe()
    assert "batch 4, latency" in manifest.describe()
    assert tdaot.read_manifest(auto_project["artifact"].path) == manifest


def test_specialised_models_keep_the_gemm_accumulator_on_the_stack(auto_project):
    with zipfile.ZipFile(auto_project["artifact"].path) as archive:
        kernels = {
            name.split("/")[-2]: archive.read(name).decode()
            for name in archive.namelist()
            if name.endswith(".kernel.cpp")
        }
    assert "alignas(64) float _" in kernels["b1"] and "make_unique" not in kernels["b1"]


def test_parity_on_both_sides_of_every_specialised_size(auto_project):
    tdaot.testing.assert_parity(
        auto_project["policy"],
        auto_project["artifact"],
        auto_project["example"],
        batch_sizes=[1, 2, 3, 4, 5, 64],
    )


def test_cache_is_per_model(auto_project):
    statuses = []
    again = tdaot.build(
        auto_project["policy"], auto_project["example"], auto_project["root"] / "second.pt2",
        batch=(1, 64), specialize=(1, 2), cache=auto_project["cache"], on_status=statuses.append,
        factory=auto_project["factory"],  # as the cached models were built: part of their key
    )  # fmt: skip
    assert "compiling b2" in statuses
    assert "compiling" not in statuses and "compiling b1" not in statuses  # model and b1 were cached
    assert not again.cache_hit
    assert _models(again.manifest)[1:] == [("b1", 1, 1, "latency"), ("b2", 2, 2, "latency")]
    first, second = _libraries(auto_project["artifact"].path), _libraries(again.path)
    assert first["b1"] == second["b1"] and first["model"] == second["model"]
    hit = tdaot.build(
        auto_project["policy"], auto_project["example"], auto_project["root"] / "third.pt2",
        batch=(1, 64), specialize=(1, 2), cache=auto_project["cache"], factory=auto_project["factory"],
    )  # fmt: skip
    assert hit.cache_hit and hit.sha256 == again.sha256


@pytest.mark.parametrize(
    ("stride", "padding", "groups", "dilation"),
    [((1, 1), (0, 0), 1, (1, 1)), ((2, 2), (1, 1), 1, (1, 1)), ((1, 2), (2, 0), 1, (1, 1))],
)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_conv_as_gemm_equals_conv2d(stride, padding, groups, dilation, layout):
    """Either patch order (the weight's layout picks it), from either input layout."""
    torch.manual_seed(0)
    x, weight, bias = torch.randn(2, 3, 9, 11), torch.randn(5, 3, 3, 2), torch.randn(5)
    want = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    memory_format = getattr(torch, f"{layout}_format" if layout == "contiguous" else layout)
    weight = weight.contiguous(memory_format=memory_format)
    for given in (x, x.contiguous(memory_format=torch.channels_last)):
        got = conv2d_as_gemm(given, weight, bias, stride, padding, dilation, groups)
        torch.testing.assert_close(got, want)


class _ConvChains(torch.nn.Module):
    """Convolutions fed by a plain convolution through a ReLU and a scaling (relaid out), by a
    grouped one, by a sum with another tensor, and by the input (all kept as they are)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.fed = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.grouped = torch.nn.Conv2d(4, 4, 3, padding=1, groups=2)
        self.after_grouped = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.after_sum = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        a = self.fed(torch.relu(self.first(x)) * 0.5)
        b = self.after_grouped(self.grouped(x))
        return a + b + self.after_sum(self.first(x) + x)


def test_only_convolutions_fed_by_an_im2col_convolution_get_channels_last_weights():
    from tdaot.builder.rewrites import channels_last_weights

    torch.manual_seed(0)
    module, x = _ConvChains(), torch.randn(1, 4, 6, 6)
    program = torch.export.export(module, (x,))
    relaid = channels_last_weights(program)
    laid = {
        name.split(".")[0]: not value.is_contiguous()
        for name, value in relaid.state_dict.items()
        if name.endswith("weight")
    }
    assert laid == {"first": False, "fed": True, "grouped": False, "after_grouped": False, "after_sum": False}
    tuned = tune_program(program, "latency", bound=True)
    torch.testing.assert_close(tuned.module()(x), module(x), rtol=1e-5, atol=1e-5)
    unchanged = torch.export.export(torch.nn.Conv2d(3, 2, 3), (torch.randn(1, 3, 5, 5),))
    assert channels_last_weights(unchanged) is unchanged


class _PooledResiduals(torch.nn.Module):
    """Convolutions fed through a max pool, a residual sum of two such outputs and an average
    pool (relaid out), and through a sum with a weight (kept): an IMPALA-like stack."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.after_pool = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.after_residual = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.after_shift = torch.nn.Conv2d(4, 4, 3)
        self.shift = torch.nn.Parameter(torch.randn(1, 4, 1, 1))

    def forward(self, x):
        pooled = F.max_pool2d(self.first(x), 3, 2, padding=1)
        summed = pooled + self.after_pool(torch.relu(pooled))
        out = self.after_residual(F.avg_pool2d(torch.relu(summed), 2))
        return out.sum() + self.after_shift(summed + self.shift).sum()


def test_convolutions_fed_through_pools_and_residual_sums_get_channels_last_weights():
    from tdaot.builder.rewrites import channels_last_weights

    torch.manual_seed(0)
    module, x = _PooledResiduals(), torch.randn(1, 3, 12, 12)
    relaid = channels_last_weights(torch.export.export(module, (x,)))
    laid = {
        name.split(".")[0]: not value.is_contiguous()
        for name, value in relaid.state_dict.items()
        if name.endswith("weight")
    }
    assert laid == {"first": False, "after_pool": True, "after_residual": True, "after_shift": False}
    tuned = tune_program(torch.export.export(module, (x,)), "latency", bound=True)
    torch.testing.assert_close(tuned.module()(x), module(x), rtol=1e-5, atol=1e-5)


def test_conv_as_gemm_leaves_grouped_and_dilated_convolutions_to_aten():
    x, weight = torch.randn(1, 4, 8, 8), torch.randn(4, 2, 3, 3)
    assert conv2d_as_gemm(x, weight, None, (1, 1), (0, 0), (1, 1), 2) is NotImplemented
    assert conv2d_as_gemm(x, torch.randn(4, 4, 3, 3), None, (1, 1), (0, 0), (2, 2), 1) is NotImplemented


class _Divisions(torch.nn.Module):
    """Pixels scaled by a number (rewritten), by a tensor, by zero and by a bool (all kept)."""

    def forward(self, pixels, scale):
        x = pixels.float() / 255.0
        return x, x / scale, pixels / 7, x / 0.0, x / True


def _div_nodes(program) -> list:
    return [n for n in program.graph.nodes if n.target is torch.ops.aten.div.Tensor]


@pytest.mark.parametrize("tuned", ["rewrite", "auto throughput model"])
def test_divisions_by_a_number_become_multiplications_by_its_reciprocal(tuned):
    pixels, scale = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8), torch.full((1,), 3.0)
    program = torch.export.export(_Divisions(), (pixels, scale))
    if tuned == "rewrite":
        rewritten = divisions_as_multiplications(program)
    else:
        (plan,) = plan_models("auto", (), "cpu", 1, 64)
        rewritten = tune_plan(program, plan)
    kept = [n.args[1] for n in _div_nodes(rewritten)]
    assert len(_div_nodes(program)) == 5 and len(kept) == 3
    assert 0.0 in kept and True in kept  # by zero and by a bool: left to aten
    want, got = program.module()(pixels, scale), rewritten.module()(pixels, scale)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype  # an integer tensor / 7 is float either way
        torch.testing.assert_close(g, w, rtol=1.2e-7, atol=0, equal_nan=True)


class _PixelHead(torch.nn.Module):
    """Pixels scaled by a number, two convolutions (the second padded, fed by the first through
    a ReLU; 16 x 32 as a GEMM), then a flatten: the conv benchmark policy's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 4, stride=2)
        self.conv2 = torch.nn.Conv2d(4, 32, 3, padding=1)
        self.head = torch.nn.Linear(32 * 4 * 4, 2)

    def forward(self, pixels):
        hidden = torch.relu(self.conv(pixels.float() / 255.0))
        return self.head(torch.relu(self.conv2(hidden)).flatten(1))


def _gemm_blocks(records: dict[str, bytes]) -> list[tuple[int, ...]]:
    """(M, N, Mr, Nr) of every C++ GEMM template product in a package's generated kernels."""
    block = re.compile(
        rb"int64_t N = (\d+);\s*constexpr int64_t K = \d+;\s*constexpr int64_t Mr = (\d+);\s*"
        rb"constexpr int64_t Nr = (\d+);.*?constexpr int64_t M = static_cast<int64_t>\((\d+)L\)",
        re.S,
    )
    sources = [data for name, data in records.items() if name.endswith(".kernel.cpp")]
    return [(int(m), int(n), int(mr), int(nr)) for data in sources for n, mr, nr, m in block.findall(data)]


PIXELS = torch.randint(0, 256, (1, 3, 10, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(5))


def test_a_bound_latency_program_gets_every_rewrite_in_one_retrace():
    """The division rewrite before the im2col one left the flatten a view of a channels-last
    output (inductor: "Cannot view a tensor with shape ..."): both go into one retrace."""
    torch.manual_seed(0)
    module = _PixelHead()
    program = torch.export.export(module, (PIXELS,))
    tuned = tune_program(program, "latency", bound=True)
    targets = {node.target for node in tuned.graph.nodes}
    assert torch.ops.aten.conv2d.default not in targets and torch.ops.aten.div.Tensor not in targets
    torch.testing.assert_close(tuned.module()(PIXELS), module(PIXELS), rtol=1e-5, atol=1e-6)


def test_a_convolution_fed_by_another_gathers_whole_pixels():
    """conv2 reads conv's channels-last im2col output: its weight is laid out channels-last in
    the bound program, so its patches are gathered in (kh, kw, C) order; conv, reading the NCHW
    pixels, keeps its layout. The program handed in keeps its own weights."""
    torch.manual_seed(0)
    module = _PixelHead()
    program = torch.export.export(module, (PIXELS,))
    tuned = tune_program(program, "latency", bound=True)
    channels_last = torch.channels_last
    assert tuned.state_dict["conv2.weight"].is_contiguous(memory_format=channels_last)
    assert not tuned.state_dict["conv2.weight"].is_contiguous()
    assert tuned.state_dict["conv.weight"].is_contiguous()
    assert isinstance(tuned.state_dict["conv2.weight"], torch.nn.Parameter)
    assert program.state_dict["conv2.weight"].is_contiguous()
    torch.testing.assert_close(tuned.module()(PIXELS), module(PIXELS), rtol=1e-5, atol=1e-6)
    # Only the bound run's programs: the others keep ATen's convolution.
    assert tune_program(program, "latency").state_dict["conv2.weight"].is_contiguous()


def test_a_pixel_policy_gets_a_bound_lite_batch_one_model_whose_weights_swap(tmp_path):
    """End to end, the shape that broke: uint8 pixels / 255, two convolutions, a flatten. Its
    batch-1 model is built for the bound run (no SpecialisationWarning), runs lite, matches
    eager through the bound run, and keeps matching a retrained policy after a weight swap in
    either runtime (its constants include a channels-last convolution weight)."""
    from tdaot import _torch_compat
    from tdaot.testing import lite_runner as lite

    torch.manual_seed(0)
    policy = TensorDictModule(_PixelHead(), in_keys=["pixels"], out_keys=["action"])
    example = TensorDict({"pixels": PIXELS}, batch_size=[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdaot.SpecialisationWarning)
        warnings.simplefilter("error", tdaot.LiteWarning)
        artifact = tdaot.build(policy, example, tmp_path / "pixels.pt2", batch="static")
    (model,) = artifact.manifest.models
    assert (model.tuning, model.lite.runs) == ("latency", True)
    assert BOUND_ENTRY in _libraries(artifact.path)["model"]
    records = _torch_compat.read_archive(str(artifact.path))
    constants = _torch_compat.compiled_constants({k: v for k, v in records.items() if "/model/" in k})
    assert any(v.dim() == 4 and v.shape[1] == 4 and not v.is_contiguous() for v in constants.values()), {
        k: (tuple(v.shape), v.stride()) for k, v in constants.items()
    }
    if artifact.manifest.cpu_isa.startswith("avx512"):
        # conv2's 16-row product takes the 16x16 register block (inductor alone: 8x32).
        assert (16, 32, 16, 16) in _gemm_blocks(records), _gemm_blocks(records)

    native = tdaot.load(artifact.path)
    binding = native.bind(batch=1)

    def bound_action():
        binding.inputs["pixels"].copy_(PIXELS)
        binding.run()
        return binding.outputs["action"].clone()

    torch.testing.assert_close(bound_action(), policy(example.clone())["action"], rtol=1e-5, atol=1e-6)

    retrained = retrained_copy(policy)
    swap = tmp_path / "pixels-v2.tdw"
    tdaot.export_weights(retrained, artifact.path, swap)
    want = retrained(example.clone())["action"]
    native.swap_weights(str(swap))
    torch.testing.assert_close(bound_action(), want, rtol=1e-5, atol=1e-6)
    result = lite.run(artifact.path, 1, {"pixels": PIXELS.tolist()}, weights=swap).outputs[0]
    torch.testing.assert_close(torch.tensor(result["action"]), want, rtol=1e-5, atol=1e-6)


def test_a_program_without_divisions_by_a_number_is_returned_as_it_is():
    program = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(1, 3),))
    assert divisions_as_multiplications(program) is program


def test_each_model_runs_in_torchs_own_loader(auto_project):
    """Every model of the package, loaded by torch's AOTInductor loader (the path plain
    AOTInductor users and tools take), matches eager. The bound models' outputs each have a
    buffer of their own: views of one buffer made torch 2.13's loader copy past their end
    (heap corruption), so this runs in a subprocess."""
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from torch._inductor.package import load_package\n"
        "from examples.policies import tutorial_policy\n"
        "from tdaot.builder.export import export_context\n"
        "policy, example = tutorial_policy()\n"
        "for name, batch in (('model', 3), ('b1', 1), ('b4', 4)):\n"
        "    x = example['observation'][:1].expand(batch, 3).contiguous() + torch.arange(batch)[:, None]\n"
        f"    got = load_package({str(auto_project['artifact'].path)!r}, name)(x)\n"
        "    with export_context('deterministic'), torch.no_grad():\n"
        "        want = policy(example[:1].expand(batch).clone().set('observation', x))\n"
        "    for key, value in zip(('loc', 'scale', 'sample'), got):\n"
        "        torch.testing.assert_close(value, want[key], rtol=1e-5, atol=1e-5)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


def test_compile_package_makes_a_one_model_package(tmp_path):
    """compile_package (benchmarks/variants.py builds with it): one model, "model", sealed."""
    from examples.policies import tutorial_policy

    from tdaot.builder.compile import compile_package
    from tdaot.builder.export import export_policy
    from tdaot.builder.pipeline import _manifest

    policy, example = tutorial_policy()
    options = BuildOptions(tuning="throughput")
    exported = export_policy(policy, example, options)
    path = compile_package(
        exported.program,
        _manifest(exported, options, tdaot.Source(module_class=type(policy).__name__, factory=None)),
        str(tmp_path / "one.pt2"),
        options,
    )
    manifest = tdaot.read_manifest(path)
    assert _models(manifest) == [("model", 1, 1 << 20, "throughput")] and manifest.files
    assert sorted(_libraries(path)) == ["model"]
    tdaot.testing.assert_parity(policy, path, example)
