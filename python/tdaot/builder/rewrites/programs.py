"""Program rewrites: exported programs changed before compiling so that inductor generates
faster or allocation-free code. Each applies only to the ops it is written for.

- the latency tuning decomposes ``RECURRENT_OPS`` (aten's fused LSTM/GRU/RNN ops, which call
  one oneDNN primitive set up per call) into matmuls and pointwise ops inductor fuses
  (tdaot._torch_compat.decompose, torch's own decompositions).
- ``convolutions_as_gemm`` (batch-specialised models): a 2-D convolution as an im2col
  (``unfold``) and one matrix product, which inductor's C++ GEMM template compiles for the
  layer's shape. ATen's oneDNN convolution sets up its primitive and allocates (~800 heap
  allocations) on every call; at batch 1 the GEMM route is 2.5x faster and allocates nothing.
  At large batch oneDNN wins, so the dynamic model keeps it.
- ``divisions_as_multiplications`` (the latency tuning): a division by a constant number as a
  multiplication by its reciprocal (within one rounding of the quotient). A vector division
  costs ~10 cycles, a multiplication less than one; where a convolution's im2col repeats each
  input element (the conv benchmark policy's ``pixels.float() / 255`` under an 8x8 kernel of
  stride 4: 3.5 times) the division was a fifth of the whole batch-1 call; with the
  multiplication that gather is a tenth of it (perf, benchmarks/README.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# The recurrent ops the latency tuning decomposes; part of the cache key.
RECURRENT_OPS = (
    "lstm.input",
    "lstm.data",
    "gru.input",
    "gru.data",
    "rnn_tanh.input",
    "rnn_tanh.data",
    "rnn_relu.input",
    "rnn_relu.data",
)


def conv2d_as_gemm(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """aten.conv2d as zero padding + unfold + one matrix product. Grouped and dilated
    convolutions, and non-4-D inputs, are left to aten (NotImplemented)."""
    if groups != 1 or x.dim() != 4 or any(d != 1 for d in dilation) or isinstance(padding, str):
        return NotImplemented
    if any(padding):
        x = F.pad(x, (padding[1], padding[1], padding[0], padding[0]))
    out_channels, channels, kh, kw = weight.shape
    (sh, sw), (batch, _, height, width) = stride, x.shape
    oh, ow = (height - kh) // sh + 1, (width - kw) // sw + 1
    patches = x.unfold(2, kh, sh).unfold(3, kw, sw)  # B, C, oh, ow, kh, kw
    cols = patches.permute(0, 2, 3, 1, 4, 5).reshape(batch * oh * ow, channels * kh * kw)
    w = weight.reshape(out_channels, channels * kh * kw).t()
    out = torch.addmm(bias, cols, w) if bias is not None else torch.mm(cols, w)
    return out.reshape(batch, oh, ow, out_channels).permute(0, 3, 1, 2)


def divisions_as_multiplications(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with each true division of a tensor by a finite, nonzero number (not a tensor)
    as a multiplication by the number's reciprocal (unchanged without any)."""
    return apply(program, division_table(program))


def division_table(program: torch.export.ExportedProgram) -> dict:
    """The decomposition entry of ``divisions_as_multiplications`` where ``program`` has such a
    division (else empty)."""
    div = torch.ops.aten.div.Tensor
    if not any(node.target is div and _reciprocal(node.args[1]) for node in program.graph.nodes):
        return {}
    return {div: _division_as_multiplication}


def _reciprocal(divisor: object) -> float | None:
    """1 / divisor for a finite nonzero Python number (bools and tensors: None)."""
    if isinstance(divisor, bool) or not isinstance(divisor, (int, float)) or not divisor:
        return None
    reciprocal = 1.0 / divisor
    return reciprocal if math.isfinite(reciprocal) and reciprocal != 0.0 else None


def _division_as_multiplication(x, divisor):
    reciprocal = _reciprocal(divisor)
    return NotImplemented if reciprocal is None else torch.mul(x, reciprocal)


def convolutions_as_gemm(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with its plain 2-D convolutions as im2col + GEMM (unchanged without any)."""
    return apply(program, convolution_table(program))


def convolution_table(program: torch.export.ExportedProgram) -> dict:
    """The decomposition entry of ``convolutions_as_gemm`` where ``program`` has a 2-D
    convolution (else empty)."""
    conv = torch.ops.aten.conv2d.default
    return {conv: conv2d_as_gemm} if any(node.target is conv for node in program.graph.nodes) else {}


def apply(program: torch.export.ExportedProgram, table: dict) -> torch.export.ExportedProgram:
    """``program`` retraced once with every entry of ``table`` (unchanged when it is empty).

    Several rewrites go into one retrace, never one after another: a retrace fixes each
    ``reshape`` as a ``view`` or a copy by the strides its input has then, and a later rewrite
    that changes those strides (the im2col convolution's output is channels-last) would leave a
    ``view`` that no longer applies (seen: the conv policy's flatten after its division was
    rewritten, "Cannot view a tensor with shape [1, 32, 4, 4] and strides (512, 1, 128, 32)").
    """
    return program.run_decompositions(table) if table else program
