"""Build tunings: which models a CPU package holds, and what their kernels are fast at.

``"auto"`` (the default): the package holds a dynamic-batch ``"throughput"`` model for every
batch, and beside it one ``"latency"`` model per batch size in ``specialize`` (default: 1),
compiled for that static batch and for the allocation-free bound run (below). The runner sends
each call to the model for its batch. A package whose batch is static holds one latency model.
On CUDA, ``"auto"`` is ``"throughput"``.

``"throughput"`` is inductor's own choice: matrix products call ATen (MKL), recurrent layers
call ATen's fused RNN op (one oneDNN RNN primitive). Best from batch ~64 up.

``"latency"`` is for batch-1 control loops, where those library calls spend most of their
time setting themselves up:

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

A static-batch latency model of at most ``BOUND_MAX_BATCH`` rows is also built for the bound
run: AOTInductor's minimal array-ref entry point (plain pointers in and out, no tensor
handles), intermediates on the stack (the GEMM template's accumulator too, see
tdaot._torch_compat.gemm_accumulator_on_stack), and 2-D convolutions as im2col + GEMM
(tdaot.builder.rewrites): such a call allocates nothing. Its outputs are clones kept in
buffers of their own (tdaot._torch_compat.output_clones_kept), and its library does not link
libtorch (``aot_inductor.link_libtorch = False``): what it needs from the process is read from
its ELF file when the package is written (tdaot.builder.lite), which says whether it runs on
the lite runtime.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from tdaot import _torch_compat
from tdaot.builder import rewrites

TUNINGS = ("throughput", "latency", "auto")
DEFAULT_TUNING = "auto"
# The batch sizes "auto" specialises for when specialize is not given.
DEFAULT_SPECIALIZE = (1,)
# Largest static batch compiled for the bound run: its intermediates live on the stack.
BOUND_MAX_BATCH = 16

# Inductor options per model tuning; part of the cache key (tdaot.builder.cache.artifact_key).
_OPTIONS = {
    "throughput": {},
    "latency": {
        # GEMM autotuning only (not pointwise/reduction autotuning), over the CPU backends.
        "max_autotune_gemm": True,
        "max_autotune_gemm_backends": "CPP,ATEN",
    },
}

# The bound run's entry point and stack-allocated intermediates (static shapes only).
_BOUND_OPTIONS = {
    "aot_inductor.use_minimal_arrayref_interface": True,
    "aot_inductor.allow_stack_allocation": True,
    # No -ltorch -ltorch_cpu on the model's link line: what it needs (torch's C shim, SLEEF)
    # comes from the process, libtorch's or the lite runtime's (tdaot.builder.lite).
    "aot_inductor.link_libtorch": False,
    # Inductor's FX graph cache does not see the accumulator patch in its key: a graph
    # compiled elsewhere without it must not be reused.
    "fx_graph_cache": False,
}

# The recurrent ops the latency tuning decomposes; part of the cache key too.
RECURRENT_OPS = rewrites.RECURRENT_OPS


@dataclass(frozen=True)
class ModelPlan:
    """One model of a package: its name, its tuning ("throughput" or "latency"), the static
    batch it is specialised for (None: the package's whole range), and whether it is built
    for the allocation-free bound run."""

    name: str
    tuning: str
    batch: int | None = None
    bound: bool = False

    def describe(self) -> dict:
        return {"name": self.name, "tuning": self.tuning, "batch": self.batch, "bound": self.bound}


def plan_models(
    tuning: str, specialize: Sequence[int] | None, device: str, low: int, high: int
) -> list[ModelPlan]:
    """The models a package serving batches ``low..high`` holds under ``tuning``."""
    if tuning == "auto" and device != "cpu":
        tuning = "throughput"  # latency models are CPU builds
    if tuning == "throughput":
        return [ModelPlan("model", "throughput")]
    static = low == high
    # The bound run's entry point needs torch 2.13's AOTInductor (_torch_compat says why).
    bound = _torch_compat.has_arrayref_entry_point()
    if tuning == "latency" or static:
        bound = bound and static and high <= BOUND_MAX_BATCH
        return [ModelPlan("model", "latency", low if static else None, bound)]
    sizes = DEFAULT_SPECIALIZE if specialize is None else specialize
    return [ModelPlan("model", "throughput")] + [
        ModelPlan(f"b{size}", "latency", size, bound and size <= BOUND_MAX_BATCH)
        for size in sizes
        if low <= size <= high
    ]


def tuning_options(tuning: str) -> dict:
    """The inductor config entries of a model ``tuning`` ("throughput" or "latency")."""
    return dict(_OPTIONS[tuning])


def model_options(plan: ModelPlan) -> dict:
    """The inductor config entries of one model of a package."""
    return {**tuning_options(plan.tuning), **(_BOUND_OPTIONS if plan.bound else {})}


def cache_key_parts(tuning: str, bound: bool = False) -> dict:
    """Everything a model's tuning changes in its build, for the artifact cache key."""
    parts: dict = {"tuning": tuning, "inductor": tuning_options(tuning)}
    if tuning == "latency":
        parts["decomposed"] = list(RECURRENT_OPS)
    if bound:
        parts["bound"] = {
            **_BOUND_OPTIONS,
            "rewrites": ["convolutions_as_gemm", "gemm_accumulator_on_stack", "output_clones_kept"],
        }
    return parts


def tune_program(
    program: torch.export.ExportedProgram, tuning: str, bound: bool = False
) -> torch.export.ExportedProgram:
    """The program a model compiles: for "latency", recurrent ops decomposed; for the bound
    run, convolutions as GEMMs too."""
    if tuning == "latency":
        program = _torch_compat.decompose(program, RECURRENT_OPS)
    if bound:
        program = rewrites.convolutions_as_gemm(program)
    return program


@contextlib.contextmanager
def compiling_with(tuning: str, bound: bool = False) -> Iterator[None]:
    """Inductor's GEMM choice made deterministic for ``tuning``, for the duration of a compile.

    ``tuning_options`` (passed to the compile with the other inductor options) turn GEMM
    autotuning on. Of the candidates inductor then lists for a product, this keeps the
    C++ template's when there is one (ATen's otherwise), so a single candidate remains
    and nothing is timed: the choice depends on the program and the target, not on how
    busy the build machine was.
    """
    if tuning != "latency":
        yield
        return

    def prefer_template(choices: list) -> list:
        templates = [c for c in choices if _torch_compat.is_cpp_gemm_template(c)]
        return templates[:1] if templates else choices[:1]

    with contextlib.ExitStack() as stack:
        stack.enter_context(_torch_compat.gemm_choices_filtered(prefer_template))
        if bound:
            stack.enter_context(_torch_compat.gemm_accumulator_on_stack())
            stack.enter_context(_torch_compat.output_clones_kept())
        yield
