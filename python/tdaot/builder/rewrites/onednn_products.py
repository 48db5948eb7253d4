"""Linear layers on oneDNN's matmul, their weights packed at load (dynamic throughput models with
AVX-512 kernels).

A layer handed to oneDNN calls ``mkldnn._linear_pointwise`` on the plain weight (the constant
stays the weight a swap writes) instead of MKL's sgemm; the full runtime packs the weights named
here once at load and at every swap (ModelSpec.packed_weights), and the generated call takes
either form. Two rules choose the layers (benchmarks/README.md, "The figures behind the build's
constants"):

- ``wide_products_onednn``, every dynamic model: a layer of at least ``WIDE_PRODUCT_MIN_WEIGHTS``
  weights and ``WIDE_PRODUCT_MIN_COLUMNS`` out-features, which oneDNN ran in 0.8-0.9x MKL's time
  from 32 rows up.
- ``many_rows_products_onednn``, a dynamic model that serves only batches of more than
  tdaot.builder.tuning.SMALL_PRODUCTS_MAX_BATCH rows: every layer of at least
  ``MANY_ROWS_PRODUCT_MIN_INPUTS`` in-features but the shapes in ``MANY_ROWS_MKL_SHAPES``. From
  256 rows up oneDNN ran such layers in 0.3-0.97x MKL's time (action heads of 12-24 columns in
  half of it); at 64 rows its per-call set-up made the smaller ones slower, so the package's
  ``"small"`` model keeps MKL for fewer rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tdaot import _torch_compat
from tdaot.builder.rewrites.programs import apply, node_value, read_constants

_LINEAR = torch.ops.aten.linear.default

# A linear layer of at least this many weights (K x N: 2 MiB of floats, the 1024 x 1024 and
# 3136 x 512 and 2048 x 256 layers) and WIDE_PRODUCT_MIN_COLUMNS out-features: below it MKL's
# sgemm was as fast or faster at 64 rows.
WIDE_PRODUCT_MIN_WEIGHTS = 1 << 19
WIDE_PRODUCT_MIN_COLUMNS = 64
# From 256 rows up, a layer of at least this many in-features: shallower ones (48 x 256, 64 x 64,
# 32 x 32) were as fast or faster on MKL at 512 rows.
MANY_ROWS_PRODUCT_MIN_INPUTS = 96
# (in-features, out-features) MKL ran in 0.6-0.7x oneDNN's time at 512-2048 rows, where 1024 x 12,
# 1024 x 32, 768 x 24 and 2048 x 24 went the other way.
MANY_ROWS_MKL_SHAPES = frozenset({(1024, 16), (1024, 24)})

Rule = Callable[[object, object], bool]  # (a layer's input, its weight) -> whether it goes to oneDNN


def wide_products_onednn(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with its wide linear layers on oneDNN's matmul (unchanged without any)."""
    return apply(program, wide_product_table(program))


def wide_product_table(program: torch.export.ExportedProgram) -> dict:
    """The decomposition entry of ``wide_products_onednn`` where ``program`` has a wide linear
    layer on a 2-D input and this torch has oneDNN's linear op (else empty)."""
    return _table(program, _wide)


def wide_product_weights(program: torch.export.ExportedProgram) -> tuple[str, ...]:
    """The original names of the weights ``wide_products_onednn`` hands to oneDNN's matmul in
    ``program``, in graph order: those the full runtime gives oneDNN packed
    (ModelSpec.packed_weights). A weight counts only when it is a constant of the model (a
    parameter or buffer) and every use of it is such a layer: its packed copy replaces it."""
    return _weights(program, _wide)


def many_rows_product_table(program: torch.export.ExportedProgram) -> dict:
    """``wide_product_table`` for a model serving many rows: its wide layers and the others
    ``many_rows_products_onednn`` takes."""
    return _table(program, _many_rows)


def many_rows_product_weights(program: torch.export.ExportedProgram) -> tuple[str, ...]:
    """``wide_product_weights`` for a model serving many rows."""
    return _weights(program, _many_rows)


def many_rows_products_differ(program: torch.export.ExportedProgram) -> bool:
    """Whether ``program`` has a layer ``many_rows_products_onednn`` hands to oneDNN and
    ``wide_products_onednn`` does not: then its batches of few rows are a model of their own."""
    return _torch_compat.has_onednn_linear() and any(
        node.target is _LINEAR and _many_rows(*node.args[:2]) and not _wide(*node.args[:2])
        for node in program.graph.nodes
    )


def _table(program: torch.export.ExportedProgram, chosen: Rule) -> dict:
    if not _torch_compat.has_onednn_linear():
        return {}
    if not any(node.target is _LINEAR and chosen(*node.args[:2]) for node in program.graph.nodes):
        return {}

    def onednn_linear(x, weight, bias=None):
        if not chosen(x, weight):
            return NotImplemented
        return _torch_compat.onednn_linear(x, weight, bias)

    return {_LINEAR: onednn_linear}


def _weights(program: torch.export.ExportedProgram, chosen: Rule) -> tuple[str, ...]:
    if not _table(program, chosen):
        return ()
    return tuple(name for name, node in read_constants(program) if _only_chosen_layers_read(node, chosen))


def _only_chosen_layers_read(weight: torch.fx.Node, chosen: Rule) -> bool:
    return all(
        user.target is _LINEAR and user.args[1] is weight and chosen(user.args[0], weight)
        for user in weight.users
    )


def _shape(x: object, weight: object) -> tuple[int, int] | None:
    """(out-features, in-features) of a linear layer on a 2-D float input with a static 2-D float
    weight (graph nodes or their values); None for any other."""
    x, weight = node_value(x), node_value(weight)
    matrix = (
        isinstance(x, torch.Tensor)
        and x.dim() == 2
        and isinstance(weight, torch.Tensor)
        and weight.dim() == 2
        and weight.dtype == x.dtype == torch.float32
        and all(isinstance(size, int) for size in weight.shape)
    )
    return tuple(weight.shape) if matrix else None


def _wide_shape(columns: int, inputs: int) -> bool:
    return columns >= WIDE_PRODUCT_MIN_COLUMNS and columns * inputs >= WIDE_PRODUCT_MIN_WEIGHTS


def _wide(x: object, weight: object) -> bool:
    shape = _shape(x, weight)
    return shape is not None and _wide_shape(*shape)


def _many_rows(x: object, weight: object) -> bool:
    shape = _shape(x, weight)
    if shape is None:
        return False
    columns, inputs = shape
    return _wide_shape(columns, inputs) or (
        inputs >= MANY_ROWS_PRODUCT_MIN_INPUTS and (inputs, columns) not in MANY_ROWS_MKL_SHAPES
    )
