"""Export-time rewrites owned by tdaot, each applied only to what it is written for.

- module rewrites (:mod:`.modules`; torchrl's in :mod:`.torchrl_modules` and
  :mod:`.torchrl_distributions`): library
  modules that torch.export cannot trace as they come, patched on a copy of the policy;
- program rewrites (:mod:`.programs`; oneDNN's matmul in :mod:`.onednn_products`, its
  convolutions in :mod:`.onednn_convolutions`):
  exported programs changed before compiling so that inductor generates faster or
  allocation-free code.
"""

from __future__ import annotations

from torch import nn

from tdaot.builder.rewrites import torchrl_distributions, torchrl_modules
from tdaot.builder.rewrites.modules import CHECKED_AGAINST, ModuleRewrite, rewrite_modules
from tdaot.builder.rewrites.onednn_convolutions import (
    convolutions_onednn,
    onednn_convolution_table,
    onednn_convolution_weights,
)
from tdaot.builder.rewrites.onednn_products import (
    many_rows_product_table,
    many_rows_product_weights,
    many_rows_products_differ,
    wide_product_table,
    wide_product_weights,
    wide_products_onednn,
)
from tdaot.builder.rewrites.programs import (
    RECURRENT_OPS,
    apply,
    channels_last_weights,
    conv2d_as_gemm,
    convolution_table,
    convolutions_as_gemm,
    division_table,
    divisions_as_multiplications,
    narrow_product_table,
    narrow_products_padded,
)

# Every module rewrite, in the order they are applied.
MODULE_REWRITES: tuple[ModuleRewrite, ...] = torchrl_modules.REWRITES + torchrl_distributions.REWRITES


def for_export(policy: nn.Module) -> tuple[nn.Module, tuple[str, ...]]:
    """The policy to trace (``policy`` itself, or a rewritten copy) and the rewrites applied."""
    return rewrite_modules(policy, MODULE_REWRITES)


__all__ = [
    "CHECKED_AGAINST",
    "MODULE_REWRITES",
    "RECURRENT_OPS",
    "ModuleRewrite",
    "apply",
    "channels_last_weights",
    "conv2d_as_gemm",
    "convolution_table",
    "convolutions_as_gemm",
    "convolutions_onednn",
    "division_table",
    "divisions_as_multiplications",
    "for_export",
    "many_rows_product_table",
    "many_rows_product_weights",
    "many_rows_products_differ",
    "narrow_product_table",
    "narrow_products_padded",
    "onednn_convolution_table",
    "onednn_convolution_weights",
    "rewrite_modules",
    "wide_product_table",
    "wide_product_weights",
    "wide_products_onednn",
]
