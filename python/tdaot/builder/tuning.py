"""Build tunings: which models a CPU package holds, and what their kernels are fast at.

``"auto"`` (the default): the package holds a dynamic-batch ``"throughput"`` model for every
batch, and beside it one static model per batch size in ``specialize`` (default: 1): a
``"latency"`` model up to ``BOUND_MAX_BATCH`` rows, compiled for that static batch and for the
allocation-free bound run (below), a ``"throughput"`` model above it (ATen's kernels win there:
the latency tuning's C++ GEMM template was 1.2-2.4x slower from batch 64 up). The runner sends
each call to the model for its batch. A package whose batch is static holds one model of that
kind. On CUDA, ``"auto"`` is ``"throughput"``.

Convolutional policies under ``"auto"``: the bound latency models compute convolutions as
im2col GEMMs (the only convolutions the lite runtime can run); the throughput model calls ATen's
(oneDNN).

Recurrent layers under ``"auto"``: a throughput model serving at most
``DECOMPOSED_RNN_MAX_BATCH`` rows (``DECOMPOSED_RNN_MAX_BATCH_BY_ISA`` for the vector ISA its
kernels are built for, where it was measured otherwise) computes them decomposed (matmuls and
fused pointwise ops), not by ATen's fused op, which sets up a oneDNN RNN primitive on every
call; a dynamic package serving more rows than that holds one more dynamic model, ``"small"``,
for its batches up to it (the runner picks the narrowest range, so batch 1 stays with its own
model).

A batch above ``CHUNK_BYTES`` (a dynamic one: ``SLICE_BYTES``) worth of the largest
intermediate runs in chunks of rows (:func:`chunk_rows`): a static batch is traced so
(tdaot.builder.export: the graph runs the policy on slices of the batch and concatenates the
outputs), and the dynamic model records the rows in the manifest (``ModelSpec.chunk_rows``), from
which the runtime runs a larger call as slices and writes each slice's outputs into the whole
call's. So no intermediate outgrows the chunk. At batch 4096 the conv benchmark policy's float
copy of its uint8 pixels alone is 201 MB; glibc serves any block over 32 MB by a fresh mmap, so
every call page-faulted ~64k times (about 100 ms of kernel time a call) and streamed every layer
through memory; in chunks the same model runs 1.5-1.9x faster, faster than ONNX Runtime
(benchmarks/README.md).
Rows must be independent, as a batch of environments is: before chunking anything the build
runs the eager policy on a few distinct rows at once and in two calls
(tdaot.builder.checks.rows_independent); a policy whose outputs differ (batch statistics, a
normalisation over the batch) is never chunked.

``"throughput"`` is inductor's own choice: matrix products call ATen (MKL), recurrent layers
call ATen's fused RNN op (one oneDNN RNN primitive). Best from batch ~64 up. Under ``"auto"``
a CPU throughput model also computes a division by a constant number as a multiplication by its
reciprocal, as latency models do (``ModelPlan.reciprocals``; plan_models says what it gains),
and with AVX2 kernels computes a linear layer of 5-15 out-features 16 wide
(``ModelPlan.padded_products``; tdaot.builder.rewrites.NARROW_PRODUCT_COLUMNS says why); a
dynamic one with AVX-512 kernels calls oneDNN's matmul for a linear layer of 2 MiB of weights or
more (``ModelPlan.onednn_products``; tdaot.builder.rewrites.onednn_products). From more than
``SMALL_PRODUCTS_MAX_BATCH`` rows oneDNN's matmul was faster on most layers of 96 in-features or
more too; a dynamic package with such a layer hands it to oneDNN in its ``"model"``
(``ModelPlan.many_rows_products``) and holds one more dynamic model, ``"small"``, with MKL's for
its batches up to ``SMALL_PRODUCTS_MAX_BATCH`` (the one a recurrent package has, where it has one).

``"latency"`` is for batch-1 control loops, where those library calls spend most of their
time setting themselves up:

- matrix products whose weight is a constant use inductor's C++ GEMM template: a
  micro-kernel generated for the layer's shape, weights prepacked at build time, its fp32
  register block 16x16 on AVX-512 from 16 rows up, 6x16 on AVX2 from 6 rows up, one row by
  eight vectors for a one-row product, its accumulators held in registers
  (tdaot.builder.gemm_choice);
- recurrent layers (``aten.lstm``, ``aten.gru``, ``aten.rnn_tanh``, ``aten.rnn_relu``)
  are decomposed before compiling into matmuls and pointwise ops that inductor fuses;
- a division by a constant number is a multiplication by its reciprocal
  (tdaot.builder.rewrites: the vector division was a fifth of a pixel policy's batch-1 call).

Both are slower at large batch (benchmarks/README.md). Which products the template takes is
decided by a rule, never by timing (tdaot.builder.gemm_choice).

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
import dataclasses
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

import torch

from tdaot import _torch_compat
from tdaot.builder import gemm_choice, rewrites
from tdaot.manifest import BatchRange, PackedConvolution

TUNINGS = ("throughput", "latency", "auto")
DEFAULT_TUNING = "auto"
# The batch sizes "auto" specialises for when specialize is not given.
DEFAULT_SPECIALIZE = (1,)
# Up to this many rows a recurrent policy's throughput model (under "auto") decomposes its
# recurrent layers: where the decomposed layer was measured faster than ATen's fused op
# (benchmarks/README.md, "The figures behind the build's constants").
DECOMPOSED_RNN_MAX_BATCH = 128
# The same per vector ISA where it was measured otherwise: AVX2 kernels (with the 3.5-ulp tanh)
# decompose at every batch (benchmarks/README.md, "The figures behind the build's constants").
DECOMPOSED_RNN_MAX_BATCH_BY_ISA = {"avx2": math.inf}
# Up to this many rows a dynamic package's "small" model keeps MKL's sgemm for the linear layers
# its "model" hands to oneDNN (ModelPlan.many_rows_products): where oneDNN's per-call set-up
# stops costing more than its kernels gain (benchmarks/README.md, "The figures behind the
# build's constants").
SMALL_PRODUCTS_MAX_BATCH = 128
# Largest static batch compiled for the bound run: its intermediates live on the stack.
# It is also the largest a specialised model gets the latency tuning for.
BOUND_MAX_BATCH = 16
# A static batch whose largest intermediate is over this many bytes is traced in chunks of at
# most this many bytes (a power of two of rows): below glibc's 32 MB mmap threshold, so blocks
# are reused from the heap. The conv benchmark policy at batch 4096 (its largest buffer 48 KiB a
# row), p50 against the whole batch: 256 or 512 rows 0.73-0.75x, 128 0.81x, 64 0.90x (every
# chunk is one more copy of the graph in the model: more code, a larger package), 1024 0.94x
# (50 MB buffers: mmap again).
CHUNK_BYTES = 16 << 20
# The same budget for the dynamic model's run-time slices, where a slice costs one more call and
# no code: smaller, as glibc also gives memory back whenever a call's freed blocks at the top of
# its heap outgrow twice its (dynamic) mmap threshold, and faults it in again on the next call.
# 3 MiB gives the conv policy 64 rows and the MLP 2048, both near their fastest slice
# (benchmarks/README.md, "The figures behind the build's constants").
SLICE_BYTES = 3 << 20
# But a slice is at least this many rows while they stay within CHUNK_BYTES: every slice sets up
# each oneDNN convolution and each matrix product again, for fewer rows (benchmarks/README.md,
# "The figures behind the build's constants").
SLICE_MIN_ROWS = 32

# Inductor options per model tuning; part of the cache key (tdaot.builder.cache.artifact_key).
_OPTIONS = {"throughput": {}, "latency": gemm_choice.TEMPLATE_OPTIONS}

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
    batch it is specialised for (None: dynamic), the most rows a dynamic model serves (None: the
    package's whole range), whether it is built for the allocation-free bound run, whether a
    throughput model decomposes recurrent layers (the latency tuning always does), and the rows
    the runtime hands it at once (None: any call)."""

    name: str
    tuning: str
    batch: int | None = None
    bound: bool = False
    batch_max: int | None = None
    decomposed: bool = False
    # How the runtime slices a large call (ModelSpec.chunk_rows); not part of the compile.
    chunk_rows: int | None = None
    # The weights the runtime packs for oneDNN (ModelSpec.packed_weights, packed_convolutions);
    # not part of the compile.
    packed_weights: tuple[str, ...] = ()
    packed_convolutions: tuple[PackedConvolution, ...] = ()
    # A throughput model's divisions by constants as multiplications (the latency tuning's too).
    reciprocals: bool = False
    # A throughput model's narrow linear layers computed 16 wide (rewrites.narrow_products_padded).
    padded_products: bool = False
    # A dynamic throughput model's wide linear layers on oneDNN's matmul (rewrites.wide_products_onednn).
    onednn_products: bool = False
    # A dynamic throughput model serving more than SMALL_PRODUCTS_MAX_BATCH rows: its linear layers
    # of 96 in-features or more on oneDNN's matmul too (rewrites.many_rows_products_onednn).
    many_rows_products: bool = False
    # A dynamic throughput model's convolutions on oneDNN's op, activations fused
    # (rewrites.convolutions_onednn).
    onednn_convolutions: bool = False
    # No change to results beyond torch's own (BuildOptions.exact_math; patches.NUMERICS).
    exact_math: bool = False

    def describe(self) -> dict:
        described = {"name": self.name, "tuning": self.tuning, "batch": self.batch, "bound": self.bound}
        # Only where set: the other models' cache keys stay what they were.
        if self.batch_max is not None:
            described["batch_max"] = self.batch_max
        flags = (
            "decomposed",
            "reciprocals",
            "padded_products",
            "onednn_products",
            "many_rows_products",
            "onednn_convolutions",
        )
        for flag in (*flags, "exact_math"):
            if getattr(self, flag):
                described[flag] = True
        return described

    def recurrent_decomposed(self) -> bool:
        return self.tuning == "latency" or self.decomposed


def plan_models(
    tuning: str,
    specialize: Sequence[int] | None,
    device: str,
    low: int,
    high: int,
    recurrent: bool = False,
    vector_isa: str = "",
    exact_math: bool = False,
    many_rows_products: bool = False,
) -> list[ModelPlan]:
    """The models a package serving batches ``low..high`` holds under ``tuning`` (``recurrent``:
    its program calls one of ``RECURRENT_OPS``; ``vector_isa``: the one its kernels are built for,
    as the manifest records it; ``exact_math``: every model is built with no change to results
    beyond torch's own; ``many_rows_products``: its program has a linear layer
    rewrites.many_rows_products_onednn hands to oneDNN and the wide rule does not)."""
    if exact_math:
        plans = plan_models(tuning, specialize, device, low, high, recurrent, vector_isa)
        return [dataclasses.replace(p, exact_math=True) for p in plans]
    if tuning == "auto" and device != "cpu":
        tuning = "throughput"  # latency models are CPU builds
    if tuning == "throughput":
        return [ModelPlan("model", "throughput")]
    static = low == high
    decomposed_max = DECOMPOSED_RNN_MAX_BATCH_BY_ISA.get(vector_isa, DECOMPOSED_RNN_MAX_BATCH)
    # Wide products on oneDNN: dynamic models only (its op is libtorch's: a static model keeps
    # ATen's, which the lite runtime serves), AVX-512 kernels only (on AVX2 MKL measured as fast).
    onednn = vector_isa.split()[:1] == ["avx512"]  # "avx512", "avx512 avx512_vnni", "... amx_tile"
    many_rows = many_rows_products and onednn and high > SMALL_PRODUCTS_MAX_BATCH
    if tuning == "latency":
        bound = static and low <= BOUND_MAX_BATCH and _torch_compat.has_arrayref_entry_point()
        return [ModelPlan("model", "latency", low if static else None, bound)]
    if static:
        plans = [_specialised("model", low)]
    else:
        sizes = DEFAULT_SPECIALIZE if specialize is None else specialize
        plans = [ModelPlan("model", "throughput")]
        # One "small" model for few rows, serving up to the lower of its reasons' bounds.
        bounds = []
        if recurrent and high > decomposed_max > low:
            bounds.append(decomposed_max)
        if many_rows and SMALL_PRODUCTS_MAX_BATCH > low:
            bounds.append(SMALL_PRODUCTS_MAX_BATCH)
        if bounds:
            plans.append(ModelPlan("small", "throughput", batch_max=min(bounds)))
        for size in sizes:
            if low <= size <= high:
                plans.append(_specialised(f"b{size}", size))
    # A pixel policy's `/ 255` as `* (1 / 255)` in these throughput models: faster at batch 64,
    # within an ulp of each quotient (benchmarks/README.md, "The figures behind the build's
    # constants").
    # Narrow products padded: MKL's AVX2 path (AMD EPYC) only; not measured on an AVX-512 Xeon.
    padded = vector_isa == "avx2"
    # Convolutions on oneDNN's op: dynamic models, x86 kernels (ATen's convolution is the same
    # oneDNN kernel there; what changes is the weight packed once and the activation fused).
    convolutions = vector_isa.split()[:1] in (["avx2"], ["avx512"])
    plans = [
        dataclasses.replace(
            p,
            reciprocals=True,
            padded_products=padded,
            onednn_products=onednn and p.batch is None,
            many_rows_products=many_rows and p.batch is None and p.batch_max is None,
            onednn_convolutions=convolutions and p.batch is None,
        )
        if p.tuning == "throughput"
        else p
        for p in plans
    ]
    if not recurrent:
        return plans
    return [
        dataclasses.replace(p, decomposed=True)
        if p.tuning == "throughput" and (p.batch or p.batch_max or high) <= decomposed_max
        else p
        for p in plans
    ]


def _specialised(name: str, batch: int) -> ModelPlan:
    """The model of a static ``batch`` under "auto": latency tuned and bound up to
    BOUND_MAX_BATCH rows, throughput tuned above."""
    if batch > BOUND_MAX_BATCH:
        return ModelPlan(name, "throughput", batch)
    # The bound run's entry point needs torch 2.13's AOTInductor (_torch_compat says why).
    return ModelPlan(name, "latency", batch, _torch_compat.has_arrayref_entry_point())


def chunk_rows(program: torch.export.ExportedProgram, batch: BatchRange) -> int | None:
    """Rows per chunk for ``program`` serving ``batch``: the largest power of two (for a dynamic
    batch at least ``batch.min``, and SLICE_MIN_ROWS where they fit CHUNK_BYTES) that keeps its
    largest batch-sized intermediate within CHUNK_BYTES (a dynamic batch: SLICE_BYTES), or None
    where the largest batch does already.
    A static batch is traced in chunks of that many rows
    (tdaot.builder.export); a dynamic model records it in the manifest (ModelSpec.chunk_rows)
    and the runtime runs a larger call as slices of it."""
    budget = SLICE_BYTES if batch.dynamic else CHUNK_BYTES
    per_row = row_bytes(program)
    if per_row * batch.max <= budget:
        return None
    rows = _power_of_two_within(budget // per_row)
    if batch.dynamic:
        rows = max(rows, min(SLICE_MIN_ROWS, _power_of_two_within(CHUNK_BYTES // per_row)))
        rows = max(rows, batch.min)  # a slice is a batch the model serves
    return rows if rows < batch.max else None


def _power_of_two_within(rows: int) -> int:
    """The largest power of two up to ``rows`` (1 at least)."""
    return 1 << (max(1, rows).bit_length() - 1)


def calls_recurrent_ops(program: torch.export.ExportedProgram) -> bool:
    """Whether ``program`` calls one of ``RECURRENT_OPS``."""
    return _torch_compat.calls_any(program, RECURRENT_OPS)


def row_bytes(program: torch.export.ExportedProgram) -> int:
    """Bytes per batch row of ``program``'s largest intermediate with a leading batch dim (its
    first input's, static or symbolic)."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    first = placeholders[program.graph_signature.user_inputs[0]].meta["val"].shape[0]
    largest = 0
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or not value.dim() or not _same_size(value.shape[0], first):
            continue
        trailing = tuple(value.shape[1:])
        if all(isinstance(size, int) for size in trailing):
            largest = max(largest, math.prod(trailing) * value.element_size())
    return largest


def _same_size(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """Equal sizes, compared without a guard: ints by value, symbols by their expression."""
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return isinstance(a, int) and isinstance(b, int) and a == b


def tuning_options(tuning: str) -> dict:
    """The inductor config entries of a model ``tuning`` ("throughput" or "latency")."""
    return dict(_OPTIONS[tuning])


def model_options(plan: ModelPlan) -> dict:
    """The inductor config entries of one model of a package."""
    return {**tuning_options(plan.tuning), **(_BOUND_OPTIONS if plan.bound else {})}


def plan_key_parts(plan: ModelPlan) -> dict:
    """Everything the tuning of one model of a package changes in its build, for the artifact
    cache key."""
    parts: dict = {"tuning": plan.tuning, "inductor": tuning_options(plan.tuning)}
    latency = plan.tuning == "latency"
    if plan.recurrent_decomposed():
        parts["decomposed"] = list(RECURRENT_OPS)
    named = [name for name, _ in _table_rewrites(plan)]
    if named:
        parts["rewrites"] = named
    if latency:
        parts |= gemm_choice.key_parts(plan.batch is None)
    if plan.bound:
        parts["bound"] = {
            **_BOUND_OPTIONS,
            "rewrites": [
                "convolutions_as_gemm",
                # /2: through pooling and residual sums too; its models' packed GEMM weights
                # differ from /1's, so a weight file must not cross (export_weights checks this).
                "channels_last_weights/2",
                "gemm_accumulator_on_stack",
                "output_clones_kept",
            ],
        }
    return parts


def cache_key_parts(tuning: str, bound: bool = False, dynamic: bool = False, **plan_fields) -> dict:
    """``plan_key_parts`` of a model of ``tuning`` (``dynamic``: its batch is; ``plan_fields``: the rest)."""
    return plan_key_parts(ModelPlan("model", tuning, None if dynamic else 1, bound, **plan_fields))


def _table_rewrites(plan: ModelPlan) -> list[tuple[str, Callable]]:
    """The program rewrites ``plan`` takes that are decomposition tables: each one's name in the
    cache key and the function giving its table for a program (one decision for both). Both
    change results (tdaot.builder.patches.NUMERICS): none under ``exact_math``."""
    chosen = []
    if plan.exact_math:
        return []
    if plan.tuning == "latency" or plan.reciprocals:
        chosen.append(("divisions_as_multiplications", rewrites.division_table))
    if plan.padded_products:
        chosen.append(("narrow_products_padded", rewrites.narrow_product_table))
    if plan.many_rows_products:  # the wide layers and more
        chosen.append(("many_rows_products_onednn", rewrites.many_rows_product_table))
    elif plan.onednn_products:
        chosen.append(("wide_products_onednn", rewrites.wide_product_table))
    if plan.onednn_convolutions:
        chosen.append(("convolutions_onednn", rewrites.onednn_convolution_table))
    return chosen


def rewrites_made(program: torch.export.ExportedProgram, plan: ModelPlan) -> list[str]:
    """The names of the table rewrites ``plan`` takes that change something in ``program``."""
    return [name for name, table_for in _table_rewrites(plan) if table_for(program)]


def tune_plan(program: torch.export.ExportedProgram, plan: ModelPlan) -> torch.export.ExportedProgram:
    """The program one model of a package compiles: for "latency", recurrent ops decomposed and
    divisions by constants as multiplications; for the bound run, convolutions as GEMMs too; a
    throughput model's recurrent ops decomposed, divisions
    rewritten and narrow linear layers computed 16 wide where its plan says so."""
    table: dict = {}
    if plan.recurrent_decomposed():
        table |= _torch_compat.decompositions(program, RECURRENT_OPS)
    for _, table_for in _table_rewrites(plan):
        table |= table_for(program)
    if plan.bound:
        table |= rewrites.convolution_table(program)
        # Before the retrace: conv2d_as_gemm picks each convolution's patch order by the layout
        # of its weight (a constant the retrace reads).
        program = rewrites.channels_last_weights(program)
    return rewrites.apply(program, table)  # in one retrace (rewrites.apply says why)


def tune_program(
    program: torch.export.ExportedProgram, tuning: str, bound: bool = False, **plan_fields
) -> torch.export.ExportedProgram:
    """``tune_plan`` for a model of ``tuning`` (``plan_fields``: ModelPlan's other fields)."""
    return tune_plan(program, ModelPlan("model", tuning, None, bound, **plan_fields))


@contextlib.contextmanager
def compiling_with(plan: ModelPlan, patches: Collection[str] = ()) -> Iterator[None]:
    """Inductor's GEMM choice for ``plan``, for the duration of a compile: for a latency model,
    the C++ template wherever it applies (tdaot.builder.gemm_choice), with those of its patches
    named in ``patches`` (the patches in force)."""
    if plan.tuning != "latency":
        yield
        return
    with gemm_choice.template_chosen(plan.bound, patches):
        yield
