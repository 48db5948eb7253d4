"""Which matrix products of a latency model inductor's C++ GEMM template computes, and with
what micro-kernels (tdaot.builder.tuning).

The choice is made here, never by timing candidates on the build machine (what ``max_autotune``
does by default): the template wherever it applies, ATen elsewhere, so the same inputs still
give the same package. The template's cache blocking is derived from the build host's L1/L2
sizes, which is one more thing two build machines must share to produce identical bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

from tdaot import _torch_compat

# Inductor options of a model whose products may go to the template: GEMM autotuning only (not
# pointwise/reduction autotuning), over the CPU backends; part of the cache key.
TEMPLATE_OPTIONS = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "CPP,ATEN"}

# The C++ GEMM template's register block for fp32 products of at least GEMM_BLOCK_MIN_ROWS rows
# on AVX-512 (where it divides the columns); inductor's own pick there is the larger 8x32 or 8x48.
# Faster at batch 1 on every convolution policy measured (benchmarks/README.md, "The figures
# behind the build's constants").
GEMM_REGISTER_BLOCK = (16, 16)
GEMM_BLOCK_MIN_ROWS = 16
# The same on AVX2, whose 16 registers inductor fills with 4x16 (8 accumulators: two FMA ports
# of 4-cycle latency are then never both busy). 6x16 holds 12 (measured: benchmarks/README.md,
# "The figures behind the build's constants").
# Both blocks also take products whose rows are a dynamic batch.
AVX2_GEMM_REGISTER_BLOCK = (6, 16)
AVX2_GEMM_BLOCK_MIN_ROWS = 6
# The template's register block for fp32 products of one row (a batch-1 linear layer), in columns
# per vector ISA: eight vectors, eight independent FMA chains, where inductor's own pick runs the
# one-row tail of a taller block, two chains (AVX2's 4x16, AVX-512's 8x32), bound by the FMA
# latency (benchmarks/README.md, "The figures behind the build's constants"). The AVX-512 width
# is the same eight vectors.
ONE_ROW_GEMM_COLUMNS = {"VecAVX2": 64, "VecAVX512": 128}


def key_parts(dynamic_rows: bool) -> dict:
    """What the template's choice and micro-kernels change in a model's build, for its cache key
    (``dynamic_rows``: the register blocks also take a dynamic batch's products)."""
    parts = {
        "gemm_register_block": {"block": list(GEMM_REGISTER_BLOCK), "min_rows": GEMM_BLOCK_MIN_ROWS},
        "one_row_gemm_columns": ONE_ROW_GEMM_COLUMNS,
        "avx2_gemm_register_block": {
            "block": list(AVX2_GEMM_REGISTER_BLOCK),
            "min_rows": AVX2_GEMM_BLOCK_MIN_ROWS,
        },
    }
    if dynamic_rows:
        parts["register_blocks_take_dynamic_rows"] = True
    return parts


@contextlib.contextmanager
def template_chosen(bound: bool = False, patches: Collection[str] = ()) -> Iterator[None]:
    """Inductor's GEMM choice made deterministic, for the duration of a compile.

    ``TEMPLATE_OPTIONS`` (passed to the compile with the other inductor options) turn GEMM
    autotuning on. Of the candidates inductor then lists for a product, this keeps the C++
    template's where there is one, ATen's otherwise, so a single candidate remains and nothing is
    timed: the choice depends on the program and the target, not on how busy the build machine
    was. ``bound``: the bound run's accumulator on the stack and outputs kept in buffers of their
    own. Only the patches named in ``patches`` (those in force, tdaot.builder.patches) are applied.
    """

    def prefer_template(choices: list) -> list:
        templates = [c for c in choices if _torch_compat.is_cpp_gemm_template(c)]
        return templates[:1] if templates else choices[:1]

    applied = {
        "gemm_choices_filtered": lambda: _torch_compat.gemm_choices_filtered(prefer_template),
        "float_gemm_register_block": lambda: _register_blocks(),
        "one_row_gemm_blocks": lambda: _torch_compat.one_row_gemm_blocks(ONE_ROW_GEMM_COLUMNS),
        "float_micro_kernels_in_registers": _torch_compat.float_micro_kernels_in_registers,
    }
    if bound:
        applied["gemm_accumulator_on_stack"] = _torch_compat.gemm_accumulator_on_stack
        applied["output_clones_kept"] = _torch_compat.output_clones_kept
    with contextlib.ExitStack() as stack:
        for name, enter in applied.items():
            if name in patches:
                stack.enter_context(enter())
        yield


@contextlib.contextmanager
def _register_blocks() -> Iterator[None]:
    """The fp32 register blocks of AVX-512 and AVX2 products (the constants above)."""
    with (
        _torch_compat.float_gemm_register_block(GEMM_REGISTER_BLOCK, GEMM_BLOCK_MIN_ROWS),
        _torch_compat.float_gemm_register_block(
            AVX2_GEMM_REGISTER_BLOCK, AVX2_GEMM_BLOCK_MIN_ROWS, "VecAVX2"
        ),
    ):
        yield
