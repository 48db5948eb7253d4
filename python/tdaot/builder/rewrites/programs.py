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
- ``narrow_products_padded`` (throughput models with AVX2 kernels): a linear layer of
  ``NARROW_PRODUCT_COLUMNS`` out-features (an action head: 6, 12, 15) computed 16 wide, its
  weight and bias padded with zero rows in the graph, the extra columns sliced off.

Linear layers and convolutions on oneDNN (dynamic throughput models) are in :mod:`.onednn_products`
and :mod:`.onednn_convolutions`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from tdaot import _torch_compat

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
    convolutions, and non-4-D inputs, are left to aten (NotImplemented).

    The patch order follows the weight's layout, so that the GEMM's weight is always a view of
    the constant (the C++ GEMM template prepacks only a constant, not a tensor computed in the
    graph): (C, kh, kw) for a contiguous weight, (kh, kw, C) for a channels-last one, whose
    gathers read whole pixels of a channels-last input (``channels_last_weights`` says which)."""
    if x.dim() != 4 or not _plain(padding, dilation, groups):
        return NotImplemented
    out_channels, channels, kh, kw = weight.shape
    sh, sw = stride
    pixel_major = _channels_last(weight)
    if pixel_major:
        x = x.permute(0, 2, 3, 1)  # B, H, W, C
        if any(padding):
            x = F.pad(x, (0, 0, padding[1], padding[1], padding[0], padding[0]))
        batch, height, width, _ = x.shape
        patches = x.unfold(1, kh, sh).unfold(2, kw, sw)  # B, oh, ow, C, kh, kw
        order, w = (0, 1, 2, 4, 5, 3), weight.permute(0, 2, 3, 1)
    else:
        if any(padding):
            x = F.pad(x, (padding[1], padding[1], padding[0], padding[0]))
        batch, _, height, width = x.shape
        patches = x.unfold(2, kh, sh).unfold(3, kw, sw)  # B, C, oh, ow, kh, kw
        order, w = (0, 2, 3, 1, 4, 5), weight
    oh, ow = (height - kh) // sh + 1, (width - kw) // sw + 1
    cols = patches.permute(*order).reshape(batch * oh * ow, channels * kh * kw)
    w = w.reshape(out_channels, channels * kh * kw).t()
    out = torch.addmm(bias, cols, w) if bias is not None else torch.mm(cols, w)
    return out.reshape(batch, oh, ow, out_channels).permute(0, 3, 1, 2)


def _channels_last(weight: torch.Tensor) -> bool:
    """Whether a 4-D weight is laid out channels-last and not also contiguous (a 1x1 kernel's
    is both: either patch order reads it alike)."""
    return weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()


def _plain(padding, dilation, groups) -> bool:
    """Whether a convolution with these arguments is one ``conv2d_as_gemm`` rewrites: not
    grouped, not dilated, its padding given as numbers (None: the argument's default)."""
    return (
        groups in (None, 1)
        and not isinstance(padding, str)
        and (dilation is None or all(d == 1 for d in dilation))
    )


# Ops whose output keeps the layout of channels-last tensor operands: pointwise ops and 2-D
# pooling. A convolution fed through them (every tensor operand on the way an im2col
# convolution's output, or another such op's) reads channels-last activations.
_LAYOUT_KEEPING = set(
    _torch_compat.aten_ops(
        (
            *(f"{name}.default" for name in ("relu", "leaky_relu", "elu", "gelu", "silu", "sigmoid", "tanh")),
            *("hardtanh.default", "clamp.default", "mul.Tensor", "mul.Scalar", "add.Tensor", "add.Scalar"),
            *("sub.Tensor", "max_pool2d.default", "avg_pool2d.default"),
        )
    )
)


def channels_last_weights(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with the weight of every 2-D convolution whose input is another
    convolution's output (through layout-keeping pointwise and pooling ops) laid out
    channels-last, so that ``conv2d_as_gemm`` gathers its patches in (kh, kw, C) order: each
    gather reads whole pixels of the previous im2col GEMM's channels-last output instead of one
    value per pixel (the conv benchmark policy's batch-1 bound call: 0.90x; an IMPALA ResNet's,
    through its max pools and residual sums: see benchmarks/README.md). Same values,
    same names and shapes: only the layout of those parameters changes, on a copy (the
    original program keeps its own). Unchanged where no convolution qualifies."""
    conv = torch.ops.aten.conv2d.default
    parameters = {**program.graph_signature.inputs_to_parameters, **program.graph_signature.inputs_to_buffers}
    relaid, seen = {}, {}
    for node in program.graph.nodes:
        if node.target is not conv or not _as_gemm(node) or not _fed_by_convolution(node.args[0], conv, seen):
            continue
        name = parameters.get(getattr(node.args[1], "name", None))
        value = program.state_dict.get(name)
        if isinstance(value, torch.Tensor) and value.dim() == 4 and not _channels_last(value):
            relaid[name] = value.detach().contiguous(memory_format=torch.channels_last)
    return _torch_compat.with_state(program, relaid) if relaid else program


def _as_gemm(node: torch.fx.Node) -> bool:
    """Whether ``conv2d_as_gemm`` rewrites the aten.conv2d call ``node`` (not grouped, not
    dilated, padding given as numbers)."""
    args = (*node.args, *([None] * 7))[:7]
    return _plain(*args[4:7])


def _fed_by_convolution(node: object, conv: object, seen: dict) -> bool:
    """Whether graph node ``node`` is channels-last from im2col convolutions: the output of a
    ``conv`` that ``conv2d_as_gemm`` rewrites (its GEMM writes channels-last), or of a
    layout-keeping op (pointwise, pooling) whose tensor operands all are (numbers are fine; a
    residual sum of two such outputs is, a sum with a weight or the input is not). ``seen``
    holds the answers so far (one walk per program, shared by its convolutions)."""
    if not isinstance(node, torch.fx.Node):
        return False
    if node not in seen:
        if node.target is conv:
            seen[node] = _as_gemm(node)
        elif node.target not in _LAYOUT_KEEPING:
            seen[node] = False
        else:
            operands = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]
            seen[node] = all(_fed_by_convolution(a, conv, seen) for a in operands)
    return seen[node]


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


# Out-features a throughput model's linear layer pads to PADDED_PRODUCT_COLUMNS: MKL's AVX2
# sgemm runs them slower than 16 wide (benchmarks/README.md, "The figures behind the build's
# constants"). The padded weight costs one copy of 16 x in-features floats per call.
NARROW_PRODUCT_COLUMNS = range(5, 16)
PADDED_PRODUCT_COLUMNS = 16


def narrow_products_padded(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with its narrow linear layers computed 16 wide (unchanged without any)."""
    return apply(program, narrow_product_table(program))


def narrow_product_table(program: torch.export.ExportedProgram) -> dict:
    """The decomposition entry of ``narrow_products_padded`` where ``program`` has a linear
    layer of ``NARROW_PRODUCT_COLUMNS`` out-features (else empty)."""
    linear = torch.ops.aten.linear.default
    narrow = any(node.target is linear and _narrow(node.args[1]) for node in program.graph.nodes)
    return {linear: _padded_linear} if narrow else {}


def _narrow(weight: object) -> bool:
    value = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else weight
    return (
        isinstance(value, torch.Tensor)
        and value.dim() == 2
        and value.dtype == torch.float32
        and isinstance(value.shape[0], int)
        and value.shape[0] in NARROW_PRODUCT_COLUMNS
    )


def _padded_linear(x, weight, bias=None):
    if not _narrow(weight):  # the padded call below lands here too
        return NotImplemented
    extra = PADDED_PRODUCT_COLUMNS - weight.shape[0]
    padded_bias = None if bias is None else F.pad(bias, (0, extra))
    wide = F.linear(x, F.pad(weight, (0, 0, 0, extra)), padded_bias)
    return wide[..., : weight.shape[0]].contiguous()


def read_constants(program: torch.export.ExportedProgram) -> Iterator[tuple[str, torch.fx.Node]]:
    """Each constant of ``program`` (a parameter or buffer) that something reads, in graph order:
    its original name and its placeholder."""
    signature = program.graph_signature
    constants = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in constants and node.users:
            yield constants[node.name], node


def node_value(node: object) -> object:
    """The value a graph node was traced with (its meta "val"), or ``node`` itself (an argument
    that is no node)."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


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
