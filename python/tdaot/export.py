"""Flatten a tensordict policy into positional tensors and trace it with torch.export.

torch.export cannot be given a TensorDict with a dynamic batch through the module's
own kwargs dispatch (the dynamic_shapes spec never matches), so the policy is
wrapped in :class:`PositionalPolicy`: one tensor per in-key in manifest order in, a
tuple in out-key order out.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Union

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, TensorDictParams, set_interaction_type
from torch import nn

from tdaot import keys as keyutil
from tdaot.errors import BuildError, ExportError
from tdaot.manifest import BatchRange, Recurrent, StatePair, TensorSpec, dtype_name

INTERACTION_TYPES = tuple(t.value for t in InteractionType)
DEFAULT_BATCH_RANGE = BatchRange(1, 1 << 20)
# The batch size the program is traced with; torch.export specialises sizes 0 and 1.
_MIN_TRACE_BATCH = 2
# How much of a torch.export error to quote; the rest is a long internal traceback.
_ERROR_LINES = 12

BatchSpec = Union[str, int, tuple[int, int]]


class StaticBatchWarning(UserWarning):
    """The policy specialised the batch dim, so the artifact has a static batch."""


@dataclass(frozen=True)
class ExportedPolicy:
    program: torch.export.ExportedProgram
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch: BatchRange
    recurrent: Recurrent | None = None


class PositionalPolicy(nn.Module):
    """Runs a tensordict module on positional tensors, one per in-key."""

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: Sequence[tuple[str, ...]],
        out_keys: Sequence[tuple[str, ...]],
        batch_shape: torch.Size,
        nested_batch_shapes: dict[tuple[str, ...], torch.Size],
    ) -> None:
        super().__init__()
        self.module = module
        self.in_keys = list(in_keys)
        self.out_keys = list(out_keys)
        # Batch dims after the leading one, for the root and each nested tensordict
        # whose batch is longer than the root's (e.g. an agent dim).
        self._trailing_batch = tuple(batch_shape[1:])
        self._nested_trailing = {k: tuple(v[1:]) for k, v in nested_batch_shapes.items()}

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
        out = self.module(self.make_tensordict(tensors))
        return tuple(out.get(keyutil.td_key(k)) for k in self.out_keys)


@contextlib.contextmanager
def export_context(interaction_type: str) -> Iterator[None]:
    """The interaction type set and distribution argument validation off, for one export.

    Validation makes a data-dependent guard on a dynamic batch; it is restored
    afterwards so the user's eager code keeps its checks.
    """
    saved = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with set_interaction_type(InteractionType(interaction_type)):
            yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(saved)


def module_class_name(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_module(module: nn.Module) -> str:
    """The class name, plus the wrapped module's for a TensorDictModule, for messages."""
    inner = getattr(module, "module", None)
    # TensorDictSequential keeps its children in a ModuleList: not worth naming.
    if isinstance(inner, nn.Module) and not isinstance(inner, (TensorDictModuleBase, nn.ModuleList)):
        return f"{module_class_name(module)} wrapping {module_class_name(inner)}"
    return module_class_name(module)


def export_policy(
    module: TensorDictModuleBase,
    example: TensorDictBase,
    *,
    out_keys: Sequence | None = None,
    batch: BatchSpec = "dynamic",
    interaction_type: str = "deterministic",
) -> ExportedPolicy:
    """Trace ``module`` on ``example`` with a (by default dynamic) leading batch dim."""
    if not isinstance(module, TensorDictModuleBase):
        raise BuildError(
            f"tdaot builds tensordict modules (TensorDictModuleBase); got {module_class_name(module)}. "
            "Wrap a plain nn.Module in tensordict.nn.TensorDictModule(module, in_keys=..., out_keys=...)"
        )
    if not isinstance(example, TensorDictBase):
        raise BuildError(f"the example must be a TensorDict, got {type(example).__name__}")
    if interaction_type not in INTERACTION_TYPES:
        raise BuildError(
            f"interaction type {interaction_type!r} is not one of {', '.join(INTERACTION_TYPES)}"
        )
    if example.batch_dims == 0:
        # One unbatched sample: give it the batch dim every artifact has.
        example = example.unsqueeze(0)

    in_keys = _unique([keyutil.as_tuple(k) for k in module.in_keys])
    out_keys = _unique([keyutil.as_tuple(k) for k in (module.out_keys if out_keys is None else out_keys)])
    if not out_keys:
        raise BuildError(f"{module_class_name(module)} has no out keys to export")
    input_tensors = _input_tensors(module, example, in_keys)
    batch_range = resolve_batch(batch, example.batch_size[0])

    wrapper = PositionalPolicy(
        module, in_keys, out_keys, example.batch_size, _nested_batch_shapes(example, in_keys)
    )
    with export_context(interaction_type):
        _check_eager_run(wrapper, input_tensors, out_keys, interaction_type)
        # A second eager run looks for Python side effects: the first also
        # materialises lazy modules (torchrl's ConvNet and MLP set their sizes), and
        # torch.export undoes attribute assignments made while it traces. Fresh
        # copies of the inputs, so a stashed input is a new object.
        with _no_python_side_effects(module), torch.no_grad():
            wrapper.module(wrapper.make_tensordict([t.clone() for t in input_tensors]))
        program, batch_range = _export_with_fallback(wrapper, input_tensors, batch_range)
    if interaction_type != "random":
        _check_no_sampling(program, describe_module(module), interaction_type)
    _check_native_kernels(program, input_tensors[0].device.type)

    inputs = tuple(
        TensorSpec(keyutil.to_manifest(k), dtype_name(t.dtype), tuple(t.shape[1:]))
        for k, t in zip(in_keys, input_tensors)
    )
    outputs = _output_specs(program, out_keys, batch_range)
    return ExportedPolicy(
        program=program,
        inputs=inputs,
        outputs=outputs,
        batch=batch_range,
        recurrent=recurrent_state(inputs, outputs),
    )


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
    """The batch range asked for: "dynamic", "static", a fixed int, or (min, max)."""
    if batch == "dynamic":
        return DEFAULT_BATCH_RANGE
    if batch == "static":
        return BatchRange(example_batch, example_batch)
    if isinstance(batch, int) and not isinstance(batch, bool):
        low = high = batch
    elif (
        isinstance(batch, (tuple, list))
        and len(batch) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) for b in batch)
    ):
        low, high = batch
    else:
        raise BuildError(f"batch={batch!r}: expected 'dynamic', 'static', a batch size, or a (min, max) pair")
    if not 1 <= low <= high:
        raise BuildError(f"batch={batch!r}: need 1 <= min <= max")
    return BatchRange(low, high)


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))


def _input_tensors(module, example: TensorDictBase, in_keys) -> list[torch.Tensor]:
    tensors = []
    for key in in_keys:
        keyutil.to_manifest(key)  # refuse keys the manifest cannot hold before tracing
        value = example.get(keyutil.td_key(key), None)
        if value is None:
            present = ", ".join(keyutil.to_manifest(k) for k in example.keys(True, True))
            raise BuildError(
                f"in-key {keyutil.to_manifest(key)!r} of {module_class_name(module)} is missing from "
                f"the example TensorDict (it has: {present})"
            )
        if not isinstance(value, torch.Tensor):
            raise BuildError(f"in-key {keyutil.to_manifest(key)!r} is a {type(value).__name__}, not a tensor")
        dtype_name(value.dtype)
        tensors.append(value.contiguous())
    if not tensors:
        raise BuildError(f"{module_class_name(module)} has no in keys: tdaot needs at least one input")
    return tensors


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


def _check_eager_run(wrapper: PositionalPolicy, tensors, out_keys, interaction_type: str) -> None:
    """Run once eagerly so a missing out-key or a broken policy fails with a plain message."""
    name = describe_module(wrapper.module)
    try:
        td = wrapper.module(wrapper.make_tensordict(tensors))
    except Exception as err:  # noqa: BLE001 - any failure of user code is reported as a build error
        message = f"{name} failed on the example TensorDict: {type(err).__name__}: {err}"
        raise BuildError(message + _interaction_hint(wrapper, tensors, interaction_type)) from err
    finite_example = all(t.isfinite().all() for t in tensors if t.is_floating_point())
    for key in out_keys:
        value = td.get(keyutil.td_key(key), None)
        if not isinstance(value, torch.Tensor):
            produced = ", ".join(keyutil.to_manifest(k) for k in td.keys(True, True))
            raise BuildError(
                f"out-key {keyutil.to_manifest(key)!r} is not produced by {name} (its output has: {produced})"
            )
        # A NaN from finite inputs is a broken output, typically a distribution
        # without the asked-for statistic (torch's Categorical.mean is NaN).
        if finite_example and value.is_floating_point() and value.isnan().any():
            raise BuildError(
                f"out-key {keyutil.to_manifest(key)!r} of {name} is NaN on the (finite) example under "
                f"interaction type {interaction_type!r}"
                + _interaction_hint(wrapper, tensors, interaction_type)
                + " Or leave the key out with out_keys."
            )


def _interaction_hint(wrapper: PositionalPolicy, tensors, interaction_type: str) -> str:
    """Suggests 'deterministic' when the policy fails only under another interaction type."""
    if interaction_type == "deterministic":
        return ""
    try:
        with set_interaction_type(InteractionType.DETERMINISTIC):
            wrapper.module(wrapper.make_tensordict(tensors))
    except Exception:  # noqa: BLE001 - only probing whether the hint applies
        return ""
    return (
        f"\nHint: the policy runs under interaction type 'deterministic' but not {interaction_type!r}: "
        f"a distribution in it does not define {interaction_type!r} (e.g. TanhNormal has no analytic "
        "mode, Categorical no mean). Build with interaction_type='deterministic' (--interaction-type "
        "deterministic), which picks each distribution's own deterministic sample."
    )


def _dropout_off(node) -> bool:
    """Seeded ops with a ``train`` argument (dropout, lstm, gru) draw nothing when it is
    False or their dropout probability is 0 (an LSTM in training mode without dropout)."""
    names = [arg.name for arg in node.target._schema.arguments]

    def value(name):
        index = names.index(name)
        return node.kwargs.get(name, node.args[index] if index < len(node.args) else None)

    if "train" not in names:
        return False
    probability = next((value(n) for n in ("p", "dropout") if n in names), None)
    return value("train") is False or probability == 0


def _check_no_sampling(program: torch.export.ExportedProgram, name: str, interaction_type: str) -> None:
    """Refuses random ops outside 'random': eager and native would draw different samples."""
    sampled = sorted(
        {
            str(node.target)
            for node in program.graph.nodes
            if node.op == "call_function"
            and torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
            and not _dropout_off(node)
        }
    )
    if sampled:
        raise BuildError(
            f"{name} samples random numbers ({', '.join(sampled)}) under interaction type "
            f"{interaction_type!r}, so the artifact would not be deterministic. Either a module is "
            "in training mode (dropout: call policy.eval() before building), or tensordict estimates "
            "a statistic a distribution lacks in closed form by sampling (TanhNormal's mean from "
            "n_empirical_estimate samples): build with interaction_type='deterministic', or with "
            "'random' and check it with tdaot.testing.assert_statistical_parity."
        )


# Operator namespaces torch 2.13 registers itself (libtorch or torch's Python package). An
# operator from any other namespace comes from a library the user loaded, which the native
# runner must load too. Extra torch namespaces here would only make the manifest list operators
# that libtorch always registers, which the runtime's check then finds: harmless.
TORCH_OP_NAMESPACES = frozenset(
    {
        "aten", "prims", "prim", "higher_order", "inductor", "inductor_prims", "rngprims",
        "debugprims", "quantized", "_quantized", "quantized_decomposed", "quantization", "mkl",
        "mkldnn", "mkldnn_prepacked", "onednn", "sparse", "profiler", "export", "static_runtime",
        "c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor", "symm_mem",
        "_native", "_test", "debug_mode_ops",
    }
)  # fmt: skip


def custom_operators(program: torch.export.ExportedProgram) -> tuple[str, ...]:
    """Qualified names ("ns::op", "ns::op.overload") of the operators from outside torch the
    program calls, sorted; the subgraphs of higher-order ops (torch.cond branches, scan
    bodies) are graph modules of their own and are searched too."""
    found = set()
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            op = node.target
            if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
                continue
            if op.namespace in TORCH_OP_NAMESPACES:
                continue
            # The dispatcher's name: the overload "default" is the empty overload name.
            overload = op._overloadname
            found.add(op._schema.name + ("" if overload == "default" else f".{overload}"))
    return tuple(sorted(found))


# Where the dispatcher would find an operator's kernel for a device, in the order it looks.
_KERNEL_KEYS = {
    "cpu": ("CPU", "CompositeExplicitAutograd[alias]", "CompositeImplicitAutograd[alias]"),
    "cuda": ("CUDA", "CompositeExplicitAutograd[alias]", "CompositeImplicitAutograd[alias]"),
}


def python_registration(op: str, device: str) -> str | None:
    """ "file.py:line" when custom operator ``op`` is defined, or its kernel for ``device`` is
    implemented, in Python (torch.library.custom_op, a Python torch.library.Library); None for
    C++ registrations. Read from the dispatcher's registration dump, whose lines say where each
    registration was made; a format this does not recognise reads as C++ (the check is skipped)."""
    dump = torch._C._dispatch_dump(op)  # "" for an operator the dispatcher does not know
    where = dict(match.groups() for match in re.finditer(r"^([^:\n]+): registered at (\S+)", dump, re.M))
    schema = where.get("debug")
    kernel = next((where[key] for key in _KERNEL_KEYS.get(device, ()) if key in where), None)
    for location in (schema, kernel):
        if location and re.search(r"\.py:\d+$", location):
            return location
    return None


def _check_native_kernels(program: torch.export.ExportedProgram, device: str) -> None:
    """Refuses custom operators implemented in Python: the package runs without Python, and
    the native runner finds operators only in C++ libraries it loads (op_libraries)."""
    for op in custom_operators(program):
        location = python_registration(op, device)
        if location:
            raise BuildError(
                f"custom operator {op!r} is implemented in Python (registered at {location}), but a "
                "tdaot package runs without Python: the native runner can only call operators that a "
                "C++ shared library registers (TORCH_LIBRARY and TORCH_LIBRARY_IMPL). Build the kernel "
                "as such a library, load it with torch.ops.load_library before building (keeping "
                "torch.library.register_fake in Python for export), and pass it to the runner "
                "(op_libraries=[...], tdaot-run --op-lib)."
            )


@contextlib.contextmanager
def _no_python_side_effects(module: nn.Module) -> Iterator[None]:
    """Refuses forward passes that set Python attributes on a module, and undoes them.

    torch.export runs Python code once, at trace time: an attribute a forward
    sets (a stashed tensor, a call counter) would silently not be updated by the
    artifact. Only public tensor and number attributes count: tensordict and
    torchrl memoise keys and call options in others, which is harmless. The
    changed attributes are restored either way.
    """
    before = {name: _public_attributes(sub) for name, sub in module.named_modules()}
    try:
        yield
    finally:
        changed = []
        for name, sub in module.named_modules():
            saved, now = before.get(name, {}), _public_attributes(sub)
            for attr in sorted(set(now) | set(saved)):
                if _differs(now.get(attr, _MISSING), saved.get(attr, _MISSING)):
                    changed.append((name, sub, attr))
                    if attr in saved:
                        vars(sub)[attr] = saved[attr]
                    else:
                        del vars(sub)[attr]
    if changed:
        name, sub, attr = changed[0]
        where = f"module {name!r} ({module_class_name(sub)})" if name else module_class_name(sub)
        raise BuildError(
            f"{where} sets attribute {attr!r} in forward: a Python side effect, which torch.export runs "
            "once while tracing and the artifact never repeats. Return the value as an out-key "
            "(recurrent state goes in as k and out as ('next', k)) or keep it in a buffer updated "
            "in place."
        )


_MISSING = object()


def _public_attributes(module: nn.Module) -> dict:
    return {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("_") and isinstance(v, (torch.Tensor, int, float, complex))
    }


def _differs(now, saved) -> bool:
    if isinstance(now, torch.Tensor) or isinstance(saved, torch.Tensor):
        return now is not saved
    return now != saved


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
    # torch.export prints the partial graph of a failed trace to stderr, screens of
    # it, and logs a warning about symbols it cannot map to user code; the
    # ExportError quotes what matters. Anything else written is passed on.
    printed = io.StringIO()
    shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = shapes_log.level
    shapes_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(printed):
            program = torch.export.export(wrapper, args, dynamic_shapes=dynamic_shapes, strict=False)
    finally:
        shapes_log.setLevel(level)
    sys.stderr.write(printed.getvalue())
    return program


def _is_batch_specialisation(err: Exception) -> bool:
    text = str(err)
    return "specialized" in text and "batch" in text or "ConstraintViolation" in type(err).__name__


def _export_with_fallback(wrapper, tensors, batch_range: BatchRange):
    name = describe_module(wrapper.module)
    try:
        return _export(wrapper, tensors, batch_range), batch_range
    except Exception as err:  # noqa: BLE001 - reported as ExportError below
        if not (batch_range.dynamic and _is_batch_specialisation(err)):
            raise ExportError(_export_message(name, wrapper, err)) from err
        static = BatchRange(tensors[0].shape[0], tensors[0].shape[0])
        warnings.warn(
            f"{name} specialises the batch dim, so it cannot be exported with a dynamic batch "
            f"({_first_line(err)}); building with a static batch of {static.min} instead. "
            f"The artifact accepts only batch {static.min}.",
            StaticBatchWarning,
            stacklevel=3,
        )
    try:
        return _export(wrapper, tensors, static), static
    except Exception as err:  # noqa: BLE001
        raise ExportError(_export_message(name, wrapper, err)) from err


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


# torch's generic debugging advice (env vars, links), which would push the failing
# call out of the quoted lines.
_TORCH_ADVICE = re.compile(
    r"\s*(For more information, run with|For extended logs|If you suspect the guard|"
    r"For more debugging help|For C\+\+ stack trace|The error above occurred when calling)"
)


def _export_message(name: str, wrapper: PositionalPolicy, err: Exception) -> str:
    """The export error's first lines, the user's line that raised it, and a hint."""
    lines = [line for line in str(err).splitlines() if line.strip() and not _TORCH_ADVICE.match(line)]
    quoted = lines[:_ERROR_LINES] or [type(err).__name__]
    marker = _raising_call_index(lines)
    if marker is not None and marker >= _ERROR_LINES:
        quoted += ["...", *lines[marker : marker + 3]]
    keys = ", ".join(keyutil.to_manifest(k) for k in wrapper.in_keys)
    outs = ", ".join(keyutil.to_manifest(k) for k in wrapper.out_keys)
    message = (
        f"torch.export failed for {name} (in keys: {keys}; out keys: {outs}):\n    {type(err).__name__}: "
    )
    message += "\n    ".join(quoted)
    frame = user_frame(err)
    if frame and frame not in message:
        message += f"\n    in your code: {frame}"
    if "data-dependent" in str(err) or "DataDependent" in type(err).__name__:
        library = _library_frame(lines)
        if library:
            message += (
                f"\nHint: the branch on a tensor's value is inside an installed library ({library}), "
                "not in your code. If it tests a module's buffer that only configures it (a flag), "
                "replace the buffer by a plain Python value before building; otherwise pick an option "
                "or module that avoids the branch."
            )
        else:
            message += (
                "\nHint: the policy branches on a tensor's value (a Python `if` on a tensor, or "
                ".item()). Write the branch with torch.cond(pred, true_fn, false_fn, operands), or "
                "compute both sides and pick with torch.where."
            )
    elif "part of a locked graph" in str(err) and _holds_tensordict_params(wrapper.module):
        message += (
            "\nHint: torch.export swaps every parameter for a traced stand-in by its dotted name, "
            "which a TensorDictParams refuses (it is locked); tensordict 0.14 with torch 2.13 cannot "
            "export parameters held in one. Build the module with plain nn.Parameters, e.g. torchrl's "
            "MultiAgentMLP(..., use_td_params=False)."
        )
    return message


def user_frame(err: BaseException) -> str:
    """ "file:line: code" of the innermost traceback frame outside installed packages and
    tdaot itself: the user's line that led to the error (non-strict export runs it as Python)."""
    own = os.path.dirname(os.path.abspath(__file__))
    found = ""
    for frame in traceback.extract_tb(err.__traceback__):
        path = os.path.abspath(frame.filename)
        if "site-packages" in path or path.startswith(own) or frame.filename.startswith("<"):
            continue
        found = f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return found


def _holds_tensordict_params(module: nn.Module) -> bool:
    return any(isinstance(sub, TensorDictParams) for sub in module.modules())


def _raising_call_index(lines: list[str]) -> int | None:
    """Index of torch's "The following call raised this error:" line, which precedes the frame."""
    return next((i for i, line in enumerate(lines) if "The following call raised this error" in line), None)


def _library_frame(lines: list[str]) -> str:
    """ "package/module.py:line" when the quoted failing frame is in an installed package."""
    marker = _raising_call_index(lines)
    if marker is None or marker + 1 >= len(lines):
        return ""
    frame = re.search(r'File "([^"]+)", line (\d+)', lines[marker + 1])
    if frame is None:
        return ""
    path, line = frame.groups()
    parts = path.replace(os.sep, "/").split("/")
    for root in ("site-packages", "dist-packages"):
        if root in parts:
            return "/".join(parts[parts.index(root) + 1 :]) + f":{line}"
    return ""


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
