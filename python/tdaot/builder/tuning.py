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

from tdaot import _torch_compat

TUNINGS = ("throughput", "latency")
DEFAULT_TUNING = "throughput"

# Inductor options per tuning; part of the cache key (tdaot.builder.cache.artifact_key).
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


def tuning_options(tuning: str) -> dict:
    """The inductor config entries of ``tuning`` (checked by BuildOptions)."""
    return dict(_OPTIONS[tuning])


def cache_key_parts(tuning: str) -> dict:
    """Everything ``tuning`` changes in a build, for the artifact cache key."""
    parts: dict = {"tuning": tuning, "inductor": tuning_options(tuning)}
    if tuning == "latency":
        parts["decomposed"] = list(RECURRENT_OPS)
    return parts


def tune_program(program: torch.export.ExportedProgram, tuning: str) -> torch.export.ExportedProgram:
    """The program ``tuning`` compiles: for "latency", recurrent ops decomposed."""
    if tuning != "latency":
        return program
    return _torch_compat.decompose(program, RECURRENT_OPS)


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

    def prefer_template(choices: list) -> list:
        templates = [c for c in choices if _torch_compat.is_cpp_gemm_template(c)]
        return templates[:1] if templates else choices[:1]

    with _torch_compat.gemm_choices_filtered(prefer_template):
        yield
