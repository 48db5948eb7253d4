"""The checks around an export that turn silent wrong artifacts into build errors: the
policy runs eagerly on the example and produces every out key, sets no Python attribute in
forward, samples nothing outside ``random``, and calls no operator implemented in Python."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type
from torch import nn

from tdaot import _torch_compat
from tdaot import keys as keyutil
from tdaot.builder.messages import describe_module, module_class_name
from tdaot.errors import BuildError


def check_eager_run(wrapper, tensors, out_keys, interaction_type: str) -> TensorDictBase:
    """Run once eagerly so a missing out-key or a broken policy fails with a plain message;
    returns the module's output."""
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
    return td


def _interaction_hint(wrapper, tensors, interaction_type: str) -> str:
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
    names = _torch_compat.argument_names(node.target)

    def value(name):
        index = names.index(name)
        return node.kwargs.get(name, node.args[index] if index < len(node.args) else None)

    if "train" not in names:
        return False
    probability = next((value(n) for n in ("p", "dropout") if n in names), None)
    return value("train") is False or probability == 0


def check_no_sampling(program: torch.export.ExportedProgram, name: str, interaction_type: str) -> None:
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
            named = _torch_compat.operator_name(node.target) if node.op == "call_function" else None
            if named is not None and named[0] not in TORCH_OP_NAMESPACES:
                found.add(named[1])
    return tuple(sorted(found))


# Where the dispatcher would find an operator's kernel for a device, in the order it looks.
def check_native_kernels(program: torch.export.ExportedProgram, device: str) -> None:
    """Refuses custom operators implemented in Python: the package runs without Python, and
    the native runner finds operators only in C++ libraries it loads (op_libraries)."""
    for op in custom_operators(program):
        location = _torch_compat.python_registration(op, device)
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
def no_python_side_effects(module: nn.Module) -> Iterator[None]:
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


# The rows rows_independent compares (two calls of half as many against one).
_PROBE_ROWS = 4


def rows_independent(wrapper, tensors, interaction_type: str) -> bool:
    """Whether the eager policy's batch rows are independent, as running a batch in chunks of
    rows assumes (a batch of environments is): its outputs on _PROBE_ROWS distinct rows made from
    the example equal those of the same rows in two calls of half as many. A policy that mixes
    rows (batch statistics, a normalisation over the batch) gives other outputs, and one that
    fails on the probe is taken as mixing them too. Under "random" the network is compared at
    "deterministic" (samples are not comparable); its chunks draw their samples call by call."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.arange(_PROBE_ROWS) % tensors[0].shape[0]
    probe = [_distinct_rows(t[rows.to(t.device)], generator) for t in tensors]
    half = _PROBE_ROWS // 2
    mode = "deterministic" if interaction_type == "random" else interaction_type
    try:
        with set_interaction_type(InteractionType(mode)), torch.no_grad():
            whole = wrapper(*probe)
            parts = [wrapper(*(t[:half] for t in probe)), wrapper(*(t[half:] for t in probe))]
        return all(
            torch.allclose(w, torch.cat(p), rtol=1e-4, atol=1e-5, equal_nan=True)
            for w, *p in zip(whole, *parts, strict=True)
        )
    except Exception:  # noqa: BLE001 - a policy that cannot be probed is not chunked, nothing more
        return False


def _distinct_rows(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``tensor``'s rows made distinct where that cannot leave the inputs' domain: floating ones
    perturbed, uint8 ones (pixels) drawn anew; integer and bool ones kept (indices, flags)."""
    if tensor.is_floating_point():
        noise = torch.randn(tensor.shape, generator=generator).to(tensor.device, tensor.dtype)
        return tensor + noise * (tensor.abs() + 1) * 0.1
    if tensor.dtype == torch.uint8:
        return torch.randint(0, 256, tensor.shape, generator=generator, dtype=torch.uint8).to(tensor.device)
    return tensor
