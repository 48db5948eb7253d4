"""Heavy convolutions under tuning="auto": a dynamic package's latency model "b1" gets a twin
"b1_aten" with ATen's (oneDNN) convolutions, listed first, which the full runtime runs at batch 1
(plain and bound) while the lite runtime keeps the lite-capable "b1" (tdaot.builder.tuning).

The plans and the rule without compiling; one small pixel policy built end to end (3 compiles),
with the threshold lowered so that its convolutions count as heavy, and its weights swapped
(3 more: export_weights compiles every model again).
"""

from __future__ import annotations

import copy
import warnings
import zipfile

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import tdaot
from tdaot.builder import pipeline
from tdaot.builder.tuning import (
    ATEN_CONVOLUTION_MIN_FLOPS,
    ModelPlan,
    cache_key_parts,
    convolution_flops,
    plan_key_parts,
    plan_models,
    tune_program,
)
from tdaot.testing import lite_runner

BOUND_ENTRY = b"AOTInductorModelRunMinimalArrayrefInterfaceV2"
PIXELS = torch.randint(0, 256, (1, 3, 10, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(5))


class _Pixels(torch.nn.Module):
    """uint8 pixels / 255, a strided and a padded convolution, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 4, stride=2)  # 3 x 10 x 10 -> 4 x 4 x 4
        self.conv2 = torch.nn.Conv2d(4, 8, 3, padding=1)  # -> 8 x 4 x 4
        self.head = torch.nn.Linear(8 * 4 * 4, 2)

    def forward(self, pixels):
        hidden = torch.relu(self.conv(pixels.float() / 255.0))
        return self.head(torch.relu(self.conv2(hidden)).flatten(1))


# 2 x (outputs per row x products per output) of each convolution.
PIXELS_FLOPS = 2 * (4 * 4 * 4 * 3 * 4 * 4) + 2 * (8 * 4 * 4 * 4 * 3 * 3)


def test_convolution_flops_counts_each_convolutions_products_per_row():
    pair = PIXELS.expand(2, -1, -1, -1).clone()  # batch 1 would specialise
    program = torch.export.export(_Pixels(), (pair,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert convolution_flops(program) == PIXELS_FLOPS
    linear = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    assert convolution_flops(linear) == 0


def test_heavy_convolutions_give_each_latency_model_an_aten_twin_listed_first():
    high = 1 << 20
    plans = plan_models("auto", (1, 4, 64), "cpu", 1, high, heavy_convolutions=True)
    names = [(p.name, p.tuning, p.batch, p.aten_convolutions) for p in plans]
    assert names == [
        ("model", "throughput", None, False),
        ("b1_aten", "latency", 1, True),
        ("b1", "latency", 1, False),
        ("b4_aten", "latency", 4, True),
        ("b4", "latency", 4, False),
        ("b64", "throughput", 64, False),  # a throughput model calls ATen already
    ]
    assert plans[1].bound == plans[2].bound  # the twin is built for the bound run alike
    # Light convolutions, a static package, the other tunings, CUDA: the models they always had.
    assert plan_models("auto", None, "cpu", 1, high) == [plans[0], plans[2]]
    for tuning, low, device in (("auto", 1, "cuda"), ("auto", 1, "cpu"), ("latency", 1, "cpu")):
        top = high if device == "cuda" else 1  # the cpu ones static
        assert not any(p.aten_convolutions for p in plan_models(tuning, None, device, low, top, False, True))
    assert not any(p.aten_convolutions for p in plan_models("throughput", None, "cpu", 1, high, False, True))


def test_the_twin_skips_the_convolution_rewrites_and_says_so_in_its_keys():
    twin = ModelPlan("b1_aten", "latency", 1, bound=True, aten_convolutions=True)
    parts = plan_key_parts(twin)
    assert parts["aten_convolutions"] is True
    assert "convolutions_as_gemm" not in parts["bound"]["rewrites"]
    assert "channels_last_weights/2" not in parts["bound"]["rewrites"]
    assert "gemm_accumulator_on_stack" in parts["bound"]["rewrites"]
    # The other models' keys are what they were.
    assert plan_key_parts(ModelPlan("b1", "latency", 1, bound=True)) == cache_key_parts("latency", True)
    assert "aten_convolutions" not in ModelPlan("b1", "latency", 1, bound=True).describe()
    assert twin.describe()["aten_convolutions"] is True
    program = torch.export.export(_Pixels(), (PIXELS,))
    kept = {n.target for n in tune_program(program, "latency", True, aten_convolutions=True).graph.nodes}
    assert torch.ops.aten.conv2d.default in kept


def test_no_measured_network_gets_the_twin_by_default():
    # benchmarks/README.md ("AVX2 kernels"): with the micro-kernels in registers the IMPALA
    # ResNet's b1 runs 0.58x its b1_aten; the twin stays for a threshold a measurement sets.
    assert ATEN_CONVOLUTION_MIN_FLOPS == float("inf")


@pytest.fixture(scope="module")
def heavy_package(tmp_path_factory):
    torch.manual_seed(0)
    policy = TensorDictModule(_Pixels(), in_keys=["pixels"], out_keys=["action"])
    example = TensorDict({"pixels": PIXELS.expand(3, -1, -1, -1).clone()}, batch_size=[3])
    path = tmp_path_factory.mktemp("heavy") / "pixels.pt2"
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.setattr(pipeline, "ATEN_CONVOLUTION_MIN_FLOPS", PIXELS_FLOPS)
        warnings.simplefilter("error", tdaot.SpecialisationWarning)
        # The twin needs libtorch, but b1 serves its batch on the lite runtime: no LiteWarning.
        warnings.simplefilter("error", tdaot.LiteWarning)
        artifact = tdaot.build(policy, example, path, cache=False)
    return policy, artifact


def test_a_heavy_conv_package_runs_the_twin_on_the_full_runtime_and_b1_on_lite(heavy_package):
    policy, artifact = heavy_package
    models = [(m.name, m.batch.min, m.tuning, m.lite.runs) for m in artifact.manifest.models]
    assert models[1:] == [("b1_aten", 1, "latency", False), ("b1", 1, "latency", True)]
    assert "ATen convolution" in artifact.manifest.models[1].lite.why
    with zipfile.ZipFile(artifact.path) as archive:
        libraries = {n.split("/")[-2]: archive.read(n) for n in archive.namelist() if n.endswith(".so")}
    assert BOUND_ENTRY in libraries["b1_aten"] and BOUND_ENTRY in libraries["b1"]
    assert "serves batch 1 (model b1)" in artifact.manifest.describe()  # lite

    want = policy(TensorDict({"pixels": PIXELS}, batch_size=[1]))["action"]
    native = tdaot.load(artifact.path)
    binding = native.bind(batch=1)
    assert binding.model == "b1_aten"
    binding.inputs["pixels"].copy_(PIXELS)
    binding.run()
    torch.testing.assert_close(binding.outputs["action"], want, rtol=1e-5, atol=1e-6)
    (plain,) = native.run_positional(PIXELS)
    torch.testing.assert_close(plain, want, rtol=1e-5, atol=1e-6)
    # The lite-capable b1 is still there for the full runtime when named.
    forced = tdaot.load(artifact.path, model_name="b1").bind(batch=1)
    assert forced.model == "b1"

    run = lite_runner.run(artifact.path, 1, {"pixels": PIXELS.tolist()})
    assert lite_runner.torch_libraries(run.libraries) == []
    torch.testing.assert_close(torch.tensor(run.outputs[0]["action"]), want, rtol=1e-5, atol=1e-6)


def test_a_weight_swap_reaches_the_twin_and_b1(heavy_package, tmp_path):
    """export_weights compiles the twin again with its own plan (ATen's convolutions: weights in
    their own layout, not b1's channels-last one); both runtimes then match the new policy."""
    policy, artifact = heavy_package
    retrained = copy.deepcopy(policy)
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(7)) * 0.3)
    swap = tmp_path / "pixels-v2.tdw"
    tdaot.export_weights(retrained, artifact.path, swap)
    want = retrained(TensorDict({"pixels": PIXELS}, batch_size=[1]))["action"]
    native = tdaot.load(artifact.path)
    binding = native.bind(batch=1)
    native.swap_weights(str(swap))
    binding.inputs["pixels"].copy_(PIXELS)
    binding.run()
    assert binding.model == "b1_aten"
    torch.testing.assert_close(binding.outputs["action"], want, rtol=1e-5, atol=1e-6)
    run = lite_runner.run(artifact.path, 1, {"pixels": PIXELS.tolist()}, weights=swap)
    torch.testing.assert_close(torch.tensor(run.outputs[0]["action"]), want, rtol=1e-5, atol=1e-6)
