"""Build tunings: what a CPU package's kernels are chosen to be fast at.

``"throughput"`` (the default) is inductor's own choice: matrix products call ATen
(MKL), recurrent layers call ATen's fused RNN op (one oneDNN RNN primitive). Best from
batch ~64 up.

``"latency"`` is for batch-1 control loops, where those library calls spend most of
their time setting themselves up:

- matrix products whose weight is a constant use inductor's C++ GEMM template: a
  micro-kernel generated for the layer's shape, weights prepacked at build time;
- recurrent layers (``aten.lstm``, ``aten.gru``, ``aten.rnn_tanh``, ``aten.rnn_relu``)
  are decomposed before compiling into matmuls and pointwise ops that inductor fuses.

Both are slower at large batch (benchmarks/README.md). The choice between the template
and ATen is made here, never by timing candidates on the build machine (which is what
``max_autotune`` does by default): the template wherever it applies, ATen elsewhere, so
the same inputs still give the same package. The template's cache blocking is derived
from the build host's L1/L2 sizes, which is one more thing two build machines must share
to produce identical bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from tdaot.errors import BuildError

TUNINGS = ("throughput", "latency")
DEFAULT_TUNING = "throughput"

# Inductor options per tuning; part of the cache key (tdaot.cache.artifact_key).
_OPTIONS = {
    "throughput": {},
    "latency": {
        # GEMM autotuning only (not pointwise/reduction autotuning), over the CPU backends.
        "max_autotune_gemm": True,
        "max_autotune_gemm_backends": "CPP,ATEN",
    },
}

# The recurrent ops the latency tuning decomposes; part of the cache key too.
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


def check_tuning(tuning: object, device: str = "cpu") -> str:
    """``tuning`` if it is a known tuning for ``device``, else a BuildError naming it."""
    if not isinstance(tuning, str) or tuning not in TUNINGS:
        raise BuildError(f"tuning={tuning!r} is not one of {', '.join(map(repr, TUNINGS))}")
    if tuning != DEFAULT_TUNING and device != "cpu":
        raise BuildError(f"tuning={tuning!r} is for CPU packages (device is {device!r})")
    return tuning


def tuning_options(tuning: str) -> dict:
    """The inductor config entries of ``tuning``."""
    return dict(_OPTIONS[check_tuning(tuning)])


def cache_key_parts(tuning: str) -> dict:
    """Everything ``tuning`` changes in a build, for the artifact cache key."""
    parts: dict = {"tuning": check_tuning(tuning), "inductor": tuning_options(tuning)}
    if tuning == "latency":
        parts["decomposed"] = list(RECURRENT_OPS)
    return parts


def tune_program(program: torch.export.ExportedProgram, tuning: str) -> torch.export.ExportedProgram:
    """The program ``tuning`` compiles: for "latency", recurrent ops decomposed."""
    if check_tuning(tuning) != "latency":
        return program
    from torch._decomp import decomposition_table

    ops = [_aten(name) for name in RECURRENT_OPS]
    present = {node.target for node in program.graph.nodes if node.op == "call_function"}
    table = {op: decomposition_table[op] for op in ops if op in present}
    if not table:
        return program
    return program.run_decompositions(table)


@contextlib.contextmanager
def compiling_with(tuning: str) -> Iterator[None]:
    """Inductor's GEMM choice made deterministic for ``tuning``, for the duration of a compile.

    ``tuning_options`` (passed to the compile with the other inductor options) turn GEMM
    autotuning on. Of the candidates inductor then lists for a product, this keeps the
    C++ template's when there is one (ATen's otherwise), so a single candidate remains
    and nothing is timed: the choice depends on the program and the target, not on how
    busy the build machine was.
    """
    if not tuning_options(tuning):
        yield
        return
    # select_algorithm first: cpp_template_kernel imported on its own is a circular import.
    from torch._inductor import select_algorithm
    from torch._inductor.codegen import cpp_template_kernel

    def prefer_template(choices: list) -> list:
        # Template callers may come wrapped (DataProcessorChoiceCallerWrapper).
        templates = [
            c for c in choices if isinstance(getattr(c, "_wrapped", c), cpp_template_kernel.CppTemplateCaller)
        ]
        return templates[:1] if templates else choices[:1]

    selector = select_algorithm.get_algorithm_selector_cache()
    selector.add_preprocessing_fn(prefer_template)
    try:
        yield
    finally:
        selector.preprocessing_fns.remove(prefer_template)


def _aten(name: str):
    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)
