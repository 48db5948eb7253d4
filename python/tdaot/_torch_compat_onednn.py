"""oneDNN's ops that tdaot's builder calls in the graph and its full runtime packs weights for,
beside tdaot._torch_compat (which re-exports them) to keep each module short. Same rule: every
use of torch internals for this lives here, and tests/python/test_torch_compat.py checks each
entry.
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def has_onednn_linear() -> bool:
    """Whether this torch has oneDNN's linear op (``mkldnn._linear_pointwise``, which inductor
    lowers to a call through AOTInductor's C shim, ``aoti_torch_cpu__linear_pointwise``): torch
    built with oneDNN, on x86."""
    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@functools.cache
def has_onednn_convolution() -> bool:
    """Whether this torch has oneDNN's convolution op and its weight packing
    (``mkldnn._convolution_pointwise``, which inductor lowers to a call through AOTInductor's C
    shim, and ``mkldnn._reorder_convolution_weight``, which the full runtime packs with)."""
    return (
        bool(torch.backends.mkldnn.is_available())
        and hasattr(torch.ops.mkldnn, "_convolution_pointwise")
        and hasattr(torch.ops.mkldnn, "_reorder_convolution_weight")
    )


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` by oneDNN's linear op on the plain weight (no prepacking, so the
    constant stays the model's own); only where :func:`has_onednn_linear`."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def onednn_convolution(
    x, weight, bias, padding: list, stride: list, dilation: list, groups: int
) -> torch.Tensor:
    """A 2-D convolution by oneDNN's op on the plain weight (no activation yet: ``"none"``), which
    takes the weight packed by ``mkldnn._reorder_convolution_weight`` too; only where
    :func:`has_onednn_convolution`."""
    return torch.ops.mkldnn._convolution_pointwise(
        x, weight, bias, padding, stride, dilation, groups, "none", [], ""
    )


def onednn_convolution_target() -> object:
    """The graph target of :func:`onednn_convolution`'s call: its arguments 7-9 are the fused
    activation's oneDNN name (``"none"``: none), scalars and algorithm."""
    return torch.ops.mkldnn._convolution_pointwise.default
