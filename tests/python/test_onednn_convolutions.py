"""Convolutions on oneDNN's op in dynamic throughput models (rewrites.onednn_convolutions): which
plans take the route, the rewritten graph, the weights named for the runtime to pack, and a
package whose convolutions (their activations fused by inductor) the full runtime packs at load
and at a swap.

AOTInductor compiles: one small convolution policy (the last test).
"""

from __future__ import annotations

import platform
import re
import zipfile

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_swapped_and_rolled_back_twice
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import tdaot
from tdaot import _torch_compat
from tdaot.builder.rewrites import onednn_convolution_weights
from tdaot.builder.tuning import plan_key_parts, plan_models, rewrites_made, tune_plan
from tdaot.manifest import PackedConvolution

pytestmark = pytest.mark.skipif(
    not _torch_compat.has_onednn_convolution() or platform.machine() != "x86_64",
    reason="oneDNN's convolution op on x86 only",
)

BATCH = torch.export.Dim("batch", min=1, max=4096)


class _Pixels(torch.nn.Module):
    """2-D convolutions with padding, stride, dilation and groups, shared weights, activations
    after them, and a 1-D convolution (not on the route)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 5, stride=2, padding=1)
        self.same = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.last = torch.nn.Conv2d(8, 4, 3, dilation=2, groups=2)
        self.line = torch.nn.Conv1d(4, 4, 3)

    def forward(self, x):
        y = torch.relu(self.first(x))
        pre = self.same(y)  # read by the sum and by nothing else: fused into nothing
        z = F.silu(pre + y)
        z = F.gelu(self.last(z), approximate="tanh")
        w = F.leaky_relu(self.last(torch.sigmoid(self.same(y))), 0.2)
        h = F.hardtanh(self.same(y), -0.5, 0.5)
        return z.flatten(2), torch.tanh(w), h, self.line(z.flatten(2))


def _exported(module: torch.nn.Module, rows: int = 6) -> tuple[torch.export.ExportedProgram, torch.Tensor]:
    x = torch.randn(rows, 3, 24, 24)
    return torch.export.export(module.eval(), (x,), dynamic_shapes=({0: BATCH},)), x


def test_dynamic_x86_models_take_oneDNN_convolutions_and_no_other_does():
    """Dynamic throughput models with AVX2 or AVX-512 kernels; never a static one (the lite
    runtime serves those with ATen's), an aarch64 build or an exact_math build."""
    for isa in ("avx2", "avx512", "avx512 avx512_vnni amx_tile"):
        plans = plan_models("auto", (1, 64), "cpu", 1, 4096, vector_isa=isa)
        assert {p.name: p.onednn_convolutions for p in plans} == {"model": True, "b1": False, "b64": False}
        for plan in plans:
            named = plan_key_parts(plan).get("rewrites", [])
            assert ("convolutions_onednn" in named) == plan.onednn_convolutions
    assert not any(
        p.onednn_convolutions for p in plan_models("auto", None, "cpu", 1, 4096, vector_isa="asimd")
    )
    assert not plan_models("throughput", None, "cpu", 1, 4096, vector_isa="avx2")[0].onednn_convolutions
    program, _ = _exported(_Pixels())
    exact = plan_models("auto", None, "cpu", 1, 4096, vector_isa="avx2", exact_math=True)[0]
    assert rewrites_made(program, exact) == []


def test_every_float_2d_convolution_goes_to_onednns_op_and_computes_the_same():
    program, x = _exported(_Pixels())
    plan = plan_models("auto", None, "cpu", 1, 4096, vector_isa="avx2")[0]
    assert "convolutions_onednn" in rewrites_made(program, plan)
    tuned = tune_plan(program, plan)
    target = _torch_compat.onednn_convolution_target()
    calls = [node for node in tuned.graph.nodes if node.target is target]
    # Six 2-D convolutions, on the plain weight, no post-op yet (inductor's passes fuse those).
    assert [node.args[7] for node in calls] == ["none"] * 6
    assert {node.args[1].name for node in calls} == {"p_first_weight", "p_same_weight", "p_last_weight"}
    left = {node.target for node in tuned.graph.nodes}
    assert torch.ops.aten.conv2d.default not in left
    assert torch.ops.aten.conv1d.default in left or torch.ops.aten.convolution.default in left
    assert not any(node.target is target for node in program.graph.nodes)  # the original is untouched
    for want, got in zip(program.module()(x), tuned.module()(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_convolution_weights_are_named_with_their_layers_geometry():
    """ModelSpec.packed_convolutions: each constant whose every use is a 2-D convolution of one
    geometry; a weight also read another way, or the 1-D convolution's, is not packed."""
    program, _ = _exported(_Pixels())
    assert onednn_convolution_weights(program) == (
        PackedConvolution("first.weight", (1, 1), (2, 2), (1, 1), 1),
        PackedConvolution("same.weight", (1, 1), (1, 1), (1, 1), 1),
        PackedConvolution("last.weight", (0, 0), (1, 1), (2, 2), 2),
    )

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.conv(x) + self.conv.weight.sum()

    assert onednn_convolution_weights(_exported(Tied())[0]) == ()

    class OneChannel(torch.nn.Module):
        """A height map's first layer: one channel in, so its layouts coincide (not packed)."""

        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = torch.nn.Conv2d(1, 4, 3), torch.nn.Conv2d(4, 4, 3)

        def forward(self, x):
            return self.second(torch.relu(self.first(x[:, :1])))

    assert [conv.weight for conv in onednn_convolution_weights(_exported(OneChannel())[0])] == [
        "second.weight"
    ]
    assert PackedConvolution.from_dict(PackedConvolution("w", (0, 1), (4, 2), (1, 1), 2).to_dict()) == (
        PackedConvolution("w", (0, 1), (4, 2), (1, 1), 2)
    )


def test_convolutions_run_on_onednn_packed_at_load_and_after_a_swap(tmp_path):
    """The dynamic model calls oneDNN's convolutions with the ReLU fused; the runtime packs the
    weights of the two after the first at load and again for a swap: outputs match eager before,
    after the swap and after its rollback, twice (so each buffer gets written while it holds
    packed weights)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3),  # one channel in: stays plain (onednn_convolution_weights says why)
        torch.nn.ReLU(),
        torch.nn.Conv2d(3, 8, 5, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.Tanh(),
        torch.nn.AdaptiveAvgPool2d(2),  # a head of fewer than 96 inputs: one dynamic model (no "small")
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 2 * 2, 4),
    )
    policy = TensorDictModule(net, in_keys=["pixels"], out_keys=["action"])
    example = TensorDict({"pixels": torch.randn(4, 1, 26, 26)}, batch_size=[4])
    artifact = tdaot.build(policy, example, tmp_path / "pixels.pt2", specialize=())
    assert "convolutions_onednn" in artifact.manifest.numerics
    (model,) = artifact.manifest.models
    assert [(conv.weight.split(".")[-2], conv.stride) for conv in model.packed_convolutions] == [
        ("2", (2, 2)),
        ("4", (1, 1)),
    ], model.packed_convolutions
    # Inductor fused each activation into its convolution, as a oneDNN post-op.
    with zipfile.ZipFile(artifact.path) as archive:
        (wrapper,) = [n for n in archive.namelist() if n.endswith(".wrapper.cpp") and "/model/" in n]
        code = archive.read(wrapper).decode()
    calls = re.findall(r"aoti_torch_cpu_mkldnn__convolution_pointwise\((.*)\);", code)
    assert [re.findall(r'"(relu|tanh|none)"', call) for call in calls] == [["relu"], ["relu"], ["tanh"]], (
        calls
    )
    native = tdaot.load(tmp_path / "pixels.pt2")
    assert native.manifest.models[0].packed_convolutions == model.packed_convolutions
    assert "; 2 weight(s) packed for oneDNN at load" in native.manifest.describe()
    x = torch.randn(40, 1, 26, 26)
    with torch.no_grad():
        original = net(x)
    close = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(native.run_positional(x)[0], original, **close)
    swap = tmp_path / "pixels-v2.tdw"
    assert_swapped_and_rolled_back_twice(native, policy, artifact.path, swap, x, original, **close)


def test_the_compat_entries_compute_atens_convolution_from_a_plain_or_a_packed_weight():
    """tdaot._torch_compat_onednn against this torch: the op the rewrite calls, its graph target,
    and the packed weight the full runtime hands it (mkldnn._reorder_convolution_weight)."""
    x = torch.randn(5, 6, 11, 11).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(8, 3, 3, 3), torch.randn(8)
    want = F.conv2d(x, weight, bias, stride=2, padding=1, groups=2)
    got = _torch_compat.onednn_convolution(x, weight, bias, [1, 1], [2, 2], [1, 1], 2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    packed = torch.ops.mkldnn._reorder_convolution_weight(weight, [1, 1], [2, 2], [1, 1], 2, None)
    torch.testing.assert_close(
        _torch_compat.onednn_convolution(x, packed, bias, [1, 1], [2, 2], [1, 1], 2),
        want,
        rtol=1e-5,
        atol=1e-5,
    )
    traced = torch.fx.symbolic_trace(
        lambda x, w: _torch_compat.onednn_convolution(x, w, None, [0, 0], [1, 1], [1, 1], 1)
    )
    targets = {node.target for node in traced.graph.nodes if node.op == "call_function"}
    assert _torch_compat.onednn_convolution_target() in {getattr(t, "default", t) for t in targets} | targets
