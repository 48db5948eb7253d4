"""Convolutions on oneDNN with their weights packed at load (dynamic throughput models on x86).

ATen's convolution already runs oneDNN's kernel, but on every call it repacks the plain weight
into the kernel's blocked layout and leaves the activation after it to one more pass over the
output. ``convolutions_onednn`` calls oneDNN's convolution op (``mkldnn._convolution_pointwise``)
directly on the plain weight (the constant stays the weight a swap writes); inductor's own
post-grad passes then fuse the activation that alone reads its output into it, as a post-op
(ReLU, tanh, sigmoid, SiLU, GELU, ...; not ELU). ``onednn_convolution_weights`` names the
weights, with each layer's geometry, for the full runtime to pack once at load and at every
swap (ModelSpec.packed_convolutions); the generated call takes either form. On the AMD EPYC
(AVX-512, and its kernels limited to AVX2) the pixel networks' calls took 0.94-0.98 of their
time (benchmarks/README.md, "Convolutions packed at load").
"""

from __future__ import annotations

import torch

from tdaot import _torch_compat
from tdaot.builder.rewrites.programs import apply, node_value, read_constants
from tdaot.manifest import PackedConvolution

_CONV2D = torch.ops.aten.conv2d.default


def convolutions_onednn(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with its float 2-D convolutions on oneDNN's op (unchanged without any)."""
    return apply(program, onednn_convolution_table(program))


def onednn_convolution_table(program: torch.export.ExportedProgram) -> dict:
    """The decomposition entry of ``convolutions_onednn`` where ``program`` has a float 2-D
    convolution and this torch has oneDNN's convolution op (else empty)."""
    if not _torch_compat.has_onednn_convolution():
        return {}
    found = any(node.target is _CONV2D and _on_onednn(*node.args[:2]) for node in program.graph.nodes)
    return {_CONV2D: _onednn_convolution} if found else {}


def _on_onednn(x: object, weight: object) -> bool:
    x, weight = node_value(x), node_value(weight)
    return (
        isinstance(x, torch.Tensor)
        and isinstance(weight, torch.Tensor)
        and x.dim() == 4
        and weight.dim() == 4
        and x.dtype == weight.dtype == torch.float32
        and all(isinstance(size, int) for size in weight.shape)
    )


def _pair(values) -> list[int]:
    values = [int(v) for v in values]
    return values * 2 if len(values) == 1 else values


def _onednn_convolution(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    if not _on_onednn(x, weight):
        return NotImplemented
    return _torch_compat.onednn_convolution(
        x, weight, bias, _pair(padding), _pair(stride), _pair(dilation), groups
    )


def onednn_convolution_weights(program: torch.export.ExportedProgram) -> tuple[PackedConvolution, ...]:
    """The weights ``convolutions_onednn`` hands to oneDNN in ``program``, in graph order, each
    with its layer's geometry (ModelSpec.packed_convolutions): those the full runtime gives
    oneDNN packed. A weight counts only when it is a constant of the model and every use of it
    is such a convolution of one geometry, on an input whose channels-last and contiguous
    layouts differ: its packed copy replaces it."""
    if not onednn_convolution_table(program):
        return ()
    packed: list[PackedConvolution] = []
    for name, node in read_constants(program):
        layers = {_geometry(user, node) for user in node.users}
        if len(layers) == 1 and None not in layers:
            (geometry,) = layers
            packed.append(PackedConvolution(name, *geometry))
    return tuple(packed)


def _channels_last_apart(x: torch.Tensor) -> bool:
    """Whether a channels-last layout of ``x`` differs from its contiguous one (more than one
    channel and more than one pixel, all static). Where the two coincide, inductor's dynamic
    model expects the convolution's output contiguous, as ATen writes it from the plain weight;
    from a packed weight ATen writes it channels-last, so such a layer's weight stays plain
    (seen: a height map's 1-channel first layer read back scrambled)."""
    channels, *pixels = x.shape[1:]
    sizes = (channels, *pixels)
    return all(isinstance(size, int) for size in sizes) and channels > 1 and pixels[0] * pixels[1] > 1


def _geometry(user: torch.fx.Node, weight: torch.fx.Node) -> tuple | None:
    """(padding, stride, dilation, groups) of the convolution ``user`` whose weight is ``weight``,
    or None where ``user`` is anything else."""
    if user.target is not _CONV2D or user.args[1] is not weight or not _on_onednn(*user.args[:2]):
        return None
    if not _channels_last_apart(node_value(user.args[0])):
        return None
    arguments = dict(zip(("stride", "padding", "dilation", "groups"), user.args[3:]))
    arguments |= user.kwargs
    return (
        tuple(_pair(arguments.get("padding", (0, 0)))),
        tuple(_pair(arguments.get("stride", (1, 1)))),
        tuple(_pair(arguments.get("dilation", (1, 1)))),
        int(arguments.get("groups", 1)),
    )
