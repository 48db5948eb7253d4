"""Flatten a tensordict policy into positional tensors and trace it with torch.export.

torch.export cannot be given a TensorDict with a dynamic batch through the module's
own kwargs dispatch (the dynamic_shapes spec never matches), so the policy is
wrapped in :class:`PositionalPolicy`: one tensor per in-key in manifest order in, a
tuple in out-key order out.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, set_interaction_type
from torch import nn

from tdaot import _torch_compat
from tdaot import keys as keyutil
from tdaot.builder import checks, rewrites, tuning
from tdaot.builder.carried_terms import CarriedTerms, carried_terms
from tdaot.builder.messages import describe_module, export_message, first_line, module_class_name
from tdaot.builder.options import BatchSpec, BuildOptions
from tdaot.contract import Contract
from tdaot.errors import BuildError, ExportError, StaticBatchWarning
from tdaot.manifest import BatchRange, Recurrent, StatePair, TensorSpec, dtype_name

DEFAULT_BATCH_RANGE = BatchRange(1, 1 << 20)
_DTYPES = {dtype_name(t): t for t in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}
# The batch size the program is traced with; torch.export specialises sizes 0 and 1.
_MIN_TRACE_BATCH = 2


@dataclass(frozen=True)
class ExportedPolicy:
    """What the export found: the program and everything the manifest says about it."""

    program: torch.export.ExportedProgram
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch: BatchRange
    recurrent: Recurrent | None = None
    custom_ops: tuple[str, ...] = ()
    rewrites: tuple[str, ...] = ()  # the module rewrites applied before tracing
    chunk_rows: int | None = None  # of the dynamic model: ModelSpec.chunk_rows


class PositionalPolicy(nn.Module):
    """Runs a tensordict module on positional tensors, one per in-key."""

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: Sequence[tuple[str, ...]],
        out_keys: Sequence[tuple[str, ...]],
        batch_shape: torch.Size,
        nested_batch_shapes: dict[tuple[str, ...], torch.Size],
        own_outputs: bool = False,
        contract: Contract | None = None,
        carry: CarriedTerms | None = None,
    ) -> None:
        super().__init__()
        self.own_outputs = own_outputs
        self.module = module
        self.in_keys = list(in_keys)
        self.out_keys = list(out_keys)
        # Batch dims after the leading one, for the root and each nested tensordict
        # whose batch is longer than the root's (e.g. an agent dim).
        self._trailing_batch = tuple(batch_shape[1:])
        self._nested_trailing = {k: tuple(v[1:]) for k, v in nested_batch_shapes.items()}
        # The contract's affine map and clip, compiled in: raw inputs in, the policy's view of
        # them to the module; the module's raw outputs in, the caller's values out.
        self.in_signals = [contract and contract.inputs.get(keyutil.to_manifest(k)) for k in self.in_keys]
        self.out_signals = [contract and contract.outputs.get(keyutil.to_manifest(k)) for k in self.out_keys]
        # The contract's last_action and history terms, carried as recurrent state (or None).
        self.carry = carry
        # Rows per chunk of a large static batch (tdaot.builder.tuning.chunk_rows), or None.
        self.chunk_rows: int | None = None

    def make_tensordict(self, tensors: Sequence[torch.Tensor]) -> TensorDict:
        """The TensorDict the module expects, rebuilt from positional tensors."""
        batch = tensors[0].shape[0]
        td = TensorDict(
            {keyutil.td_key(k): t for k, t in zip(self.in_keys, tensors)},
            batch_size=(batch, *self._trailing_batch),
        )
        for key, trailing in self._nested_trailing.items():
            td.get(keyutil.td_key(key)).batch_size = (batch, *trailing)
        return td

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = self.chunk_rows
        if rows is None or tensors[0].shape[0] <= rows:
            return self._forward(*tensors)
        # The batch's rows are independent: the policy on each slice, the outputs joined.
        parts = [self._forward(*chunk) for chunk in zip(*(t.split(rows) for t in tensors))]
        return tuple(torch.cat(outputs) for outputs in zip(*parts))

    def _forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.carry is not None:  # the carried slots written, the next state appended
            outputs = self.carry.run(tensors, len(self.in_keys), self.mapped)
        else:
            outputs = self.mapped(tensors)[0]
        return tuple(t.clone() for t in outputs) if self.own_outputs else outputs

    def mapped(self, tensors: Sequence[torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], tuple]:
        """The module on one tensor per in-key inside the contract's map and clip: its outputs,
        and its raw outputs (before the map and clip)."""
        tensors = tuple(s.apply(t) if s else t for s, t in zip(self.in_signals, tensors))
        out = self.module(self.make_tensordict(tensors))
        raw = tuple(out.get(keyutil.td_key(k), None) for k in self.out_keys)
        missing = next((k for k, t in zip(self.out_keys, raw) if t is None), None)
        if missing is not None:  # the build refuses it first (checks.check_eager_run); a replay here
            raise KeyError(keyutil.to_manifest(missing))
        return tuple(s.apply(t) if s else t for s, t in zip(self.out_signals, raw)), raw


@contextlib.contextmanager
def export_context(interaction_type: str) -> Iterator[None]:
    """The interaction type set and distribution argument validation off, for one export
    (or one eager reference run): validation makes a data-dependent guard on a dynamic batch."""
    with _torch_compat.distribution_validation_off(), set_interaction_type(InteractionType(interaction_type)):
        yield


def export_policy(
    module: TensorDictModuleBase,
    example: TensorDictBase,
    options: BuildOptions | None = None,
    *,
    own_outputs: bool = False,
    **option_values,
) -> ExportedPolicy:
    """Trace ``module`` on ``example`` with a (by default dynamic) leading batch dim, as
    ``options`` (or BuildOptions keywords: ``out_keys``, ``batch``, ``interaction_type``) say.

    ``own_outputs`` copies every output into a buffer of its own (outputs such as a
    distribution's loc and scale are otherwise views of one buffer): AOTInductor's array-ref
    interface, the bound run's, hands out views with the size of the whole buffer, which
    torch's own loader then copies past the end of the view (heap corruption, torch 2.13)."""
    options = (options or BuildOptions()).replace(**option_values)
    if not isinstance(module, TensorDictModuleBase):
        raise BuildError(
            f"tdaot builds tensordict modules (TensorDictModuleBase); got {module_class_name(module)}. "
            "Wrap a plain nn.Module in tensordict.nn.TensorDictModule(module, in_keys=..., out_keys=...)"
        )
    if not isinstance(example, TensorDictBase):
        raise BuildError(f"the example must be a TensorDict, got {type(example).__name__}")
    if example.batch_dims == 0:
        # Refused, not guessed: a [4, 17] observation under batch_size=[] is 4 samples to its
        # author as often as one sample of [4, 17], and a guess builds the wrong package silently.
        shapes = ", ".join(f"{keyutil.to_manifest(k)} {list(v.shape)}" for k, v in _leaves(example))
        raise BuildError(
            f"the example TensorDict has no batch dim (batch_size=[]; it holds {shapes}): tdaot reads "
            "the batch dim from example.batch_size[0]. Give it one: TensorDict(..., batch_size=[N]) "
            "for N samples, or example.unsqueeze(0) for one sample"
        )

    in_keys = _unique([keyutil.as_tuple(k) for k in module.in_keys])
    out_keys = options.out_keys or _unique([keyutil.as_tuple(k) for k in module.out_keys])
    if not out_keys:
        raise BuildError(f"{module_class_name(module)} has no out keys to export")
    name, module_class = describe_module(module), module_class_name(module)
    input_tensors, inputs = _input_tensors(module_class, example, in_keys)
    batch_range = resolve_batch(options.batch, example.batch_size[0])
    interaction_type = options.interaction_type
    carry = None
    if not options.caller_terms:
        carry = carried_terms(options.contract, in_keys, out_keys, input_tensors)

    wrapper = PositionalPolicy(
        module,
        in_keys,
        out_keys,
        example.batch_size,
        _nested_batch_shapes(example, in_keys),
        own_outputs,
        options.contract,
    )
    with export_context(interaction_type):
        eager = checks.check_eager_run(wrapper, input_tensors, out_keys, interaction_type)
        if options.contract is not None:
            options.contract.check_specs(inputs, _eager_specs(eager, out_keys))
    all_out_keys = list(out_keys)
    if carry is not None:
        # The carried terms' state: zeros in, as after a reset; is_init (added) true.
        batch = input_tensors[0].shape[0]
        device = input_tensors[0].device
        for spec in carry.specs:
            input_tensors.append(torch.zeros(batch, *spec.shape, dtype=_DTYPES[spec.dtype], device=device))
        inputs += carry.specs
        all_out_keys += [keyutil.from_manifest(f"next.{k}") for k in carry.keys]
        if carry.adds_is_init:
            input_tensors.append(torch.ones(batch, 1, dtype=torch.bool, device=device))
            inputs += (TensorSpec("is_init", "bool", (1,)),)
        wrapper.carry = carry
    with export_context(interaction_type):
        # The user's module as it comes ran above (materialising its lazy modules, whose
        # weights a copy must share); what is traced from here on is the rewritten copy.
        wrapper.module, applied = rewrites.for_export(module)
        # A second eager run looks for Python side effects: the first also
        # materialises lazy modules (torchrl's ConvNet and MLP set their sizes), and
        # torch.export undoes attribute assignments made while it traces. Fresh
        # copies of the inputs, so a stashed input is a new object.
        with checks.no_python_side_effects(wrapper.module), torch.no_grad():
            wrapper.module(wrapper.make_tensordict([t.clone() for t in input_tensors]))
        program, batch_range = _export_with_fallback(wrapper, input_tensors, batch_range)
        # A dynamic model is sliced at run time on the CPU only (the CUDA caching allocator keeps
        # its blocks), so elsewhere neither its rows nor the eager probe of them are wanted.
        sliceable = not batch_range.dynamic or input_tensors[0].device.type == "cpu"
        rows = tuning.chunk_rows(program, batch_range) if sliceable else None
        if rows is not None and not checks.rows_independent(wrapper, input_tensors, interaction_type):
            rows = None  # rows that mix are never chunked
        if rows is not None and not batch_range.dynamic:
            # A large static batch: traced again in chunks (tdaot.builder.tuning says why).
            wrapper.chunk_rows = rows
            program = _export(wrapper, input_tensors, batch_range)
    if interaction_type != "random":
        checks.check_no_sampling(program, name, interaction_type)
    checks.check_native_kernels(program, input_tensors[0].device.type)

    outputs = _output_specs(program, all_out_keys, batch_range)
    return ExportedPolicy(
        program=program,
        inputs=inputs,
        outputs=outputs,
        batch=batch_range,
        recurrent=recurrent_state(inputs, outputs),
        custom_ops=checks.custom_operators(program),
        rewrites=applied,
        chunk_rows=rows if batch_range.dynamic else None,  # the dynamic model's run-time slices
    )


class Traces:
    """The programs a package's models are compiled from, each traced once: the policy's own
    export (``main``) and, exported when first asked for, the static-batch traces of its
    specialised models (``for_plan``)."""

    def __init__(self, module: TensorDictModuleBase, example: TensorDictBase, options: BuildOptions) -> None:
        self._module, self._example, self.options = module, example, options
        self.main = export_policy(module, example, options)
        self.module_class = module_class_name(module)
        self._static: dict[tuple[int | str, bool], torch.export.ExportedProgram] = {}

    def for_plan(self, plan: tuning.ModelPlan) -> torch.export.ExportedProgram:
        """The program of the model ``plan``: the main export, or for a model at a static batch
        of a dynamic package, or a bound one, the policy traced at that batch (a bound model's
        outputs each in a buffer of its own: ``own_outputs``)."""
        if not (plan.bound or (plan.batch is not None and self.main.batch.dynamic)):
            return self.main.program
        key = (plan.batch or "static", plan.bound)
        if key not in self._static:
            options = self.options.replace(batch=key[0])
            exported = export_policy(self._module, self._example, options, own_outputs=plan.bound)
            self._static[key] = exported.program
        return self._static[key]


def recurrent_state(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> Recurrent | None:
    """State pairs by torchrl's convention: out key ("next", *k) feeds in key k next step."""
    by_key = {spec.key: spec for spec in outputs}
    pairs = []
    for spec in inputs:
        carried = by_key.get(keyutil.SEPARATOR.join(("next", spec.key)))
        if carried is None:
            continue
        if (carried.dtype, carried.shape) != (spec.dtype, spec.shape):
            raise BuildError(
                f"recurrent state {spec.key!r} is {spec.dtype} {list(spec.shape)} but its next-step "
                f"output {carried.key!r} is {carried.dtype} {list(carried.shape)}; they must match"
            )
        pairs.append(StatePair(input=spec.key, output=carried.key))
    if not pairs:
        return None
    # torchrl marks the first step after a reset with a bool "is_init" input.
    is_init = next(
        (s.key for s in inputs if keyutil.from_manifest(s.key)[-1] == "is_init" and s.dtype == "bool"), None
    )
    return Recurrent(state=tuple(pairs), is_init=is_init)


def resolve_batch(batch: BatchSpec, example_batch: int) -> BatchRange:
    """The batch range asked for (a value BuildOptions checked): "dynamic", "static", a fixed
    size, or (min, max)."""
    if batch == "dynamic":
        return DEFAULT_BATCH_RANGE
    if batch == "static":
        return BatchRange(example_batch, example_batch)
    low, high = (batch, batch) if isinstance(batch, int) else batch
    return BatchRange(low, high)


def _eager_specs(out: TensorDictBase, out_keys) -> list[TensorSpec]:
    """The out keys' specs as the eager run gave them, for the contract's checks before export."""
    values = [out.get(keyutil.td_key(k)) for k in out_keys]
    return [
        TensorSpec(keyutil.to_manifest(k), dtype_name(v.dtype), tuple(v.shape[1:]))
        for k, v in zip(out_keys, values)
    ]


def _leaves(example: TensorDictBase) -> list[tuple[tuple[str, ...], torch.Tensor]]:
    return [(keyutil.as_tuple(k), example.get(k)) for k in example.keys(True, True)]


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))


def _input_tensors(
    module_class: str, example: TensorDictBase, in_keys
) -> tuple[list[torch.Tensor], tuple[TensorSpec, ...]]:
    """The example's tensor of each in-key (contiguous), and the in-keys' specs for the manifest."""
    tensors, specs = [], []
    for key in in_keys:
        name = keyutil.to_manifest(key)  # refuse keys the manifest cannot hold before tracing
        value = example.get(keyutil.td_key(key), None)
        if value is None:
            present = ", ".join(keyutil.to_manifest(k) for k in example.keys(True, True))
            raise BuildError(
                f"in-key {name!r} of {module_class} is missing from the example TensorDict "
                f"(it has: {present})"
            )
        if not isinstance(value, torch.Tensor):
            raise BuildError(f"in-key {name!r} is a {type(value).__name__}, not a tensor")
        tensors.append(value.contiguous())
        specs.append(TensorSpec(name, dtype_name(value.dtype), tuple(value.shape[1:])))
    if not tensors:
        raise BuildError(f"{module_class} has no in keys: tdaot needs at least one input")
    return tensors, tuple(specs)


def _nested_batch_shapes(example: TensorDictBase, in_keys) -> dict[tuple[str, ...], torch.Size]:
    """Batch shapes of nested tensordicts that are longer than the root's, outermost first."""
    shapes = {}
    for key in in_keys:
        for depth in range(1, len(key)):
            prefix = key[:depth]
            sub = example.get(keyutil.td_key(prefix))
            if sub.batch_dims > example.batch_dims:
                shapes[prefix] = sub.batch_size
    return shapes


def _trace_example(tensors: list[torch.Tensor], batch: int) -> tuple[torch.Tensor, ...]:
    """The example tensors resized to ``batch`` rows (repeating rows as needed)."""
    if tensors[0].shape[0] == batch:
        return tuple(tensors)
    rows = torch.arange(batch) % tensors[0].shape[0]
    return tuple(t[rows.to(t.device)].contiguous() for t in tensors)


def _trace_batch(batch_range: BatchRange, example_batch: int) -> int:
    if not batch_range.dynamic:
        return batch_range.min
    if example_batch in batch_range and example_batch >= _MIN_TRACE_BATCH:
        return example_batch
    return max(batch_range.min, _MIN_TRACE_BATCH)


def _export(wrapper, tensors, batch_range: BatchRange) -> torch.export.ExportedProgram:
    args = _trace_example(tensors, _trace_batch(batch_range, tensors[0].shape[0]))
    if batch_range.dynamic:
        dim = torch.export.Dim("batch", min=batch_range.min, max=batch_range.max)
        dynamic_shapes = (tuple({0: dim} for _ in args),)
    else:
        dynamic_shapes = None
    with _torch_compat.export_output_captured(), tracing_noise_silenced():
        return torch.export.export(wrapper, args, dynamic_shapes=dynamic_shapes, strict=False)


# torch.export's attribute check names the flat weight list every nn.RNN/GRU/LSTM re-assigns when
# it is called (torch's own bookkeeping, which the user can neither see nor change).
_RNN_FLAT_WEIGHTS = (
    r"The tensor attributes? self\.[\w.]*_flat_weights(\[\d+\])?(, self\.[\w.]*_flat_weights(\[\d+\])?)* "
    r"(was|were) "
    r"assigned during export"
)


@contextlib.contextmanager
def tracing_noise_silenced() -> Iterator[None]:
    """torch's warnings about its own code that tdaot's trace runs, dropped for the duration:
    torch 2.13's pytree deprecation that its export and packaging code trips
    (``isinstance(treespec, LeafSpec)``), and the attribute check on the RNN modules' flat weights.
    The user's own warnings, and torch's about anything else, pass. torch's structured trace
    records stay out of text logs (pytest's captured log)."""
    with warnings.catch_warnings(), _torch_compat.structured_trace_kept_out_of_text_logs():
        treespec = r"`isinstance\(treespec, LeafSpec\)`"
        warnings.filterwarnings("ignore", message=treespec, category=FutureWarning)
        warnings.filterwarnings("ignore", message=_RNN_FLAT_WEIGHTS, category=UserWarning)
        yield


def _export_with_fallback(wrapper, tensors, batch_range: BatchRange):
    name = describe_module(wrapper.module)

    def failed(err: Exception) -> ExportError:
        return ExportError(export_message(name, wrapper.module, wrapper.in_keys, wrapper.out_keys, err))

    try:
        return _export(wrapper, tensors, batch_range), batch_range
    except Exception as err:  # noqa: BLE001 - reported as ExportError below
        if not (batch_range.dynamic and _torch_compat.is_batch_specialisation(err)):
            raise failed(err) from err
        static = BatchRange(tensors[0].shape[0], tensors[0].shape[0])
        warnings.warn(
            f"{name} specialises the batch dim, so it cannot be exported with a dynamic batch "
            f"({first_line(err)}); building with a static batch of {static.min} instead. "
            f"The artifact accepts only batch {static.min}.",
            StaticBatchWarning,
            stacklevel=3,
        )
    try:
        return _export(wrapper, tensors, static), static
    except Exception as err:  # noqa: BLE001
        raise failed(err) from err


def _output_specs(program, out_keys, batch_range: BatchRange) -> tuple[TensorSpec, ...]:
    """Per-sample output specs; every output must carry the batch dim first."""
    nodes = {n.name: n for n in program.graph.nodes}
    batch_dim = nodes[program.graph_signature.user_inputs[0]].meta["val"].shape[0]
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    specs = []
    for key, node in zip(out_keys, output_node.args[0]):
        name = keyutil.to_manifest(key)
        value = node.meta["val"]
        shape = tuple(value.shape)
        # Compare symbols by name: == on SymInts would add a guard to the program.
        batched = bool(shape) and str(shape[0]) == str(batch_dim)
        if not batched or any(not isinstance(d, int) for d in shape[1:]):
            raise BuildError(
                f"out-key {name!r} has shape {[str(d) for d in shape]}: tdaot needs the batch dim "
                f"({batch_dim}) first and a fixed per-sample shape"
            )
        specs.append(TensorSpec(name, dtype_name(value.dtype), tuple(shape[1:])))
    return tuple(specs)
