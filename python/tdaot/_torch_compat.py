"""Every use of a private torch API, and every match on torch's error text, in one place.

torch.export and AOTInductor move fast; what tdaot needs from their internals is reached
only through this module, so a torch upgrade breaks here, and
``tests/python/test_torch_compat.py`` says which entry changed (each has a test that fails
with a message naming it). Checked against torch 2.13; torch 2.11 and 2.12 lack two entries, which
tdaot then does without (has_arrayref_entry_point, inductor_has_option("cpp.march")).
The patches of inductor here and in _isa, _gemm and _paths are applied only where their checks
(tdaot._torch_compat_checks) find this torch as they expect; tdaot.builder.patches lists them.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from tdaot import _libtorch

# The container runner (compiled_constants) dlopens bound models, which do not link libtorch.
_libtorch.symbols_global()

# --- distributions -------------------------------------------------------------------------


@contextlib.contextmanager
def distribution_validation_off() -> Iterator[None]:
    """torch.distributions argument validation off for the duration, then restored.

    Validation makes a data-dependent guard on a dynamic batch; the user's eager code keeps
    its own setting afterwards. torch has a setter but no public getter for it.
    """
    saved = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(saved)


# --- operators ----------------------------------------------------------------------------


def operator_name(target: object) -> tuple[str, str] | None:
    """(namespace, dispatcher name "ns::op" or "ns::op.overload") of an operator overload
    called by a graph node, or None when ``target`` is not one (a Python function, a
    higher-order op)."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    # The dispatcher's name: the overload "default" is the empty overload name.
    overload = target._overloadname
    return target.namespace, target._schema.name + ("" if overload == "default" else f".{overload}")


def argument_names(target: object) -> list[str]:
    """The schema's argument names of an operator overload (empty for anything else)."""
    schema = getattr(target, "_schema", None)
    return [arg.name for arg in schema.arguments] if schema is not None else []


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


# Where the dispatcher would find an operator's kernel for a device, in the order it looks.
_KERNEL_KEYS = {
    "cpu": ("CPU", "CompositeExplicitAutograd[alias]", "CompositeImplicitAutograd[alias]"),
    "cuda": ("CUDA", "CompositeExplicitAutograd[alias]", "CompositeImplicitAutograd[alias]"),
}


def decompose(
    program: torch.export.ExportedProgram, op_names: tuple[str, ...]
) -> torch.export.ExportedProgram:
    """``program`` with the aten ops named ``packet.overload`` that it calls decomposed by
    torch's own decomposition table (unchanged when it calls none of them)."""
    table = decompositions(program, op_names)
    return program.run_decompositions(table) if table else program


def decompositions(program: torch.export.ExportedProgram, op_names: tuple[str, ...]) -> dict:
    """torch's own decompositions of the aten ops named ``packet.overload`` that ``program``
    calls, as a table for ``run_decompositions`` (empty when it calls none of them)."""
    from torch._decomp import decomposition_table

    return {op: decomposition_table[op] for op in _called(program, op_names)}


def calls_any(program: torch.export.ExportedProgram, op_names: tuple[str, ...]) -> bool:
    """Whether ``program`` calls one of the aten ops named ``packet.overload``."""
    return bool(_called(program, op_names))


def aten_ops(op_names: tuple[str, ...]) -> list:
    """The aten op overloads named ``packet.overload`` ("relu.default", "lstm.input")."""
    return [getattr(getattr(torch.ops.aten, name), overload) for name, overload in map(_split_op, op_names)]


def _called(program: torch.export.ExportedProgram, op_names: tuple[str, ...]) -> list:
    ops = aten_ops(op_names)
    present = {node.target for node in program.graph.nodes if node.op == "call_function"}
    return [op for op in ops if op in present]


def _split_op(name: str) -> tuple[str, str]:
    packet, _, overload = name.partition(".")
    return packet, overload


def with_state(program: torch.export.ExportedProgram, values: dict) -> torch.export.ExportedProgram:
    """A shallow copy of ``program`` whose parameters and buffers named in ``values`` hold those
    tensors instead (same shapes and dtypes; a parameter stays a Parameter); ``program`` keeps
    its own. ExportedProgram has no public setter; ``run_decompositions`` and AOTInductor read
    the values, strides included, from ``state_dict``."""
    import copy

    state = dict(program.state_dict)
    for name, value in values.items():
        old = state[name]
        if isinstance(old, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=old.requires_grad)
        state[name] = value
    with warnings.catch_warnings():
        # torch 2.13's ExportedProgram trips its own pytree deprecation when copied.
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec", category=FutureWarning)
        copied = copy.copy(program)
    copied._state_dict = state
    return copied


# --- inductor -----------------------------------------------------------------------------


def aoti_compile_and_package(
    program: torch.export.ExportedProgram, package_path: str, configs: dict, choose_wrapper: bool = True
) -> None:
    """AOTInductor: compile ``program`` into a .pt2 package at ``package_path`` holding one
    model named "model" (torch.aot_compile's files packaged by package_aoti, as
    torch._inductor.aoti_compile_and_package does without its minifier hooks).
    ``choose_wrapper``: the patch ``wrapper_chosen`` (tdaot.builder.patches) is in force."""
    from torch._inductor.package import package_aoti

    module = program.module(check_guards=False)
    args, kwargs = program.example_inputs
    options = {**configs, "aot_inductor.package": True}
    with _wrapper_chosen(configs) if choose_wrapper else contextlib.nullcontext():
        files = torch._inductor.aot_compile(module, args, kwargs, options=options)
    # package_aoti copies the files at once: the inductor cache may overwrite them later.
    package_aoti(package_path, files)


@contextlib.contextmanager
def _wrapper_chosen(configs: dict) -> Iterator[None]:
    """Inductor picks the CPU wrapper generator (the stack-allocating array-ref one with
    aot_inductor.allow_stack_allocation) once per process, when it first registers its backends:
    set for the duration to the one ``configs`` ask for, and restored after."""
    import dataclasses

    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.cpp_wrapper_cpu_array_ref import CppWrapperCpuArrayRef

    common.init_backend_registration()
    saved = common.device_codegens["cpu"]
    wrapper = CppWrapperCpuArrayRef if configs.get("aot_inductor.allow_stack_allocation") else CppWrapperCpu
    common.device_codegens["cpu"] = dataclasses.replace(saved, cpp_wrapper_codegen=wrapper)
    try:
        yield
    finally:
        common.device_codegens["cpu"] = saved


@contextlib.contextmanager
def output_clones_kept() -> Iterator[None]:
    """Inductor's post-grad ``remove_noop_ops`` leaves a graph's output clones alone, for the
    duration.

    A bound model's outputs are each cloned into a buffer of their own
    (tdaot.builder.export's ``own_outputs``). torch 2.13's ``remove_noop_ops`` drops a clone
    whose source is an intermediate, and decides that from the output storages it saw before
    it removed anything: two outputs cloned from views of one intermediate (a GRU step's
    output and its next hidden state, once the RNN op is decomposed) both become views of it.
    AOTInductor then gives the second a new tensor handle, which its array-ref wrapper cannot
    do ("cannot convert 'ArrayRefTensor<float>' to 'AtenTensorHandle'"). Kept, each clone is
    a copy that inductor fuses into the kernel producing its source. Not in a graph that calls
    a higher-order op (scan): kept there, they make code the array-ref wrapper cannot build
    either (a buffer handle declared twice).
    """
    from torch._inductor.fx_passes import post_grad

    original = post_grad.remove_noop_ops
    clone = torch.ops.aten.clone.default

    def kept_output_clone(*args, **kwargs):  # never called: a target noop_registry lacks
        return clone(*args, **kwargs)

    def remove_noop_ops(graph: torch.fx.Graph) -> None:
        output = graph.output_node()
        outputs = output.args[0] if isinstance(output.args[0], (list, tuple)) else (output.args[0],)
        kept = [n for n in outputs if isinstance(n, torch.fx.Node) and n.target is clone]
        if any(isinstance(n.target, torch._ops.HigherOrderOperator) for n in graph.nodes):
            kept = []  # a scan's graph: kept clones there make code the wrapper cannot build
        for node in kept:
            node.target = kept_output_clone
        try:
            original(graph)
        finally:
            for node in kept:
                node.target = clone

    post_grad.remove_noop_ops = remove_noop_ops
    try:
        yield
    finally:
        post_grad.remove_noop_ops = original


def inductor_has_option(name: str) -> bool:
    """Whether inductor's config has the entry ``name`` (dotted: "cpp.march"). torch 2.11 has
    no ``cpp.march`` (its CPU kernels are always built with -march=native)."""
    import torch._inductor.config

    return name in torch._inductor.config.get_config_copy()


@functools.cache
def has_arrayref_entry_point() -> bool:
    """Whether this torch's AOTInductor gives a model built with
    ``aot_inductor.use_minimal_arrayref_interface`` the C-ABI-safe entry point
    ``AOTInductorModelRunMinimalArrayrefInterfaceV2`` (torch 2.13), which tdaot's allocation-free
    bound run calls. Read from the AOTInductor interface header the model is compiled against;
    torch 2.11's lacks it."""
    header = Path(torch.__file__).parent / "include/torch/csrc/inductor/aoti_runtime/interface.h"
    return header.is_file() and "AOTInductorModelRunMinimalArrayrefInterfaceV2" in header.read_text()


def inductor_config(options: dict):
    """A context manager with inductor's config entries ``options`` set."""
    import torch._inductor.config

    return torch._inductor.config.patch(options)


# What AOTInductor's generated C++ wrapper calls for an operator it has no C shim for.
PROXY_EXECUTOR_CALL = "aoti_torch_proxy_executor_call_function"


def calls_proxy_executor(records: dict[str, bytes]) -> bool:
    """Whether a compiled model's generated wrapper (records of its package) reaches operators
    through AOTInductor's proxy executor (random sampling, custom operators), which only the
    model container provides."""
    call = PROXY_EXECUTOR_CALL.encode()
    return any(name.endswith(".wrapper.cpp") and call in data for name, data in records.items())


# --- inductor's CPU vector ISAs, C++ GEMM template and oneDNN ops (_torch_compat_isa, _gemm, _onednn)

from tdaot._torch_compat_channels import channels_interleaved  # noqa: E402, F401
from tdaot._torch_compat_cross import (  # noqa: E402, F401
    CROSS_ISAS,
    compiled_constants_read,
    compiles_with_include_first,
    vector_isa_set_to,
    with_include_first,
)
from tdaot._torch_compat_gemm import (  # noqa: E402, F401
    float_gemm_register_block,
    float_micro_kernels_in_registers,
    gemm_accumulator_on_stack,
    gemm_choices_filtered,
    is_cpp_gemm_template,
    one_row_gemm_blocks,
)
from tdaot._torch_compat_isa import (  # noqa: E402, F401
    byte_loads_direct,
    picked_vector_isa,
    picked_vector_isa_class,
    probed_vector_isas,
    short_loops_scalar,
    tanh_within_3_5_ulp,
    vector_isas_limited_to,
)
from tdaot._torch_compat_onednn import (  # noqa: E402, F401
    has_onednn_convolution,
    has_onednn_linear,
    onednn_convolution,
    onednn_convolution_target,
    onednn_linear,
)

# --- the .pt2 archive ---------------------------------------------------------------------


def read_archive(path: str) -> dict[str, bytes]:
    """Every record of a .pt2 archive by name (without the archive's top folder), in order."""
    from torch.export.pt2_archive import PT2ArchiveReader

    reader = PT2ArchiveReader(path)
    try:
        return {name: reader.read_bytes(name) for name in reader.get_file_names()}
    finally:
        del reader


def write_archive(path: str, records: dict[str, bytes]) -> None:
    """A .pt2 archive at ``path`` holding ``records`` (the writer adds its bookkeeping)."""
    from torch.export.pt2_archive import PT2ArchiveWriter

    with PT2ArchiveWriter(path) as writer:
        for name, data in records.items():
            writer.write_bytes(name, data)


def compiled_constants(records: dict[str, bytes]) -> dict[str, torch.Tensor]:
    """Every constant of the one CPU model in ``records`` (of a package aoti_compile_and_package
    made) by AOTInductor's internal name, packed ones included: loaded through torch's
    container runner, which lists them by original name, mapped back. Raises RuntimeError
    when two constants share an original name (they could not be told apart)."""
    import tempfile

    (library,) = [data for name, data in records.items() if name.endswith(".wrapper.so")]
    with tempfile.TemporaryDirectory(prefix="tdaot-") as directory:
        path = f"{directory}/model.so"
        with open(path, "wb") as file:
            file.write(library)
        runner = torch._C._aoti.AOTIModelContainerRunnerCpu(path, 1)
        names = runner.get_constant_names_to_original_fqns()
        values = runner.extract_constants_map(False)
        if len(set(names.values())) != len(names) or not set(names.values()) <= set(values):
            raise RuntimeError(
                f"constants that cannot be told apart by original name: {sorted(names.items())}"
            )
        return {name: values[fqn].clone() for name, fqn in names.items()}


# --- torch.export's messages ---------------------------------------------------------------


@contextlib.contextmanager
def export_output_captured() -> Iterator[None]:
    """torch.export's stderr and its symbolic-shapes warnings held back for the duration.

    A failed trace prints screens of partial graph to stderr and logs a warning about
    symbols it cannot map to user code: dropped, the ExportError quotes what matters. After
    a successful export, anything written is passed on.
    """
    printed = io.StringIO()
    shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = shapes_log.level
    shapes_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        shapes_log.setLevel(level)
    sys.stderr.write(printed.getvalue())


@contextlib.contextmanager
def structured_trace_kept_out_of_text_logs() -> Iterator[None]:
    """torch's structured trace records (``torch.__trace``: empty messages, their payload in
    ``extra``, meant for tlparse) kept from the text handlers the logger picked up from the root
    (pytest's log capture among them) for the duration: a failing test showed one empty DEBUG line
    per record. torch's own trace handler (TORCH_TRACE) still gets every record."""
    trace_log = logging.getLogger("torch.__trace")
    own = getattr(torch._logging._internal, "LazyTraceHandler", ())
    text = [h for h in trace_log.handlers if not isinstance(h, own)]
    for handler in text:
        handler.addFilter(_drop_structured_records)
    try:
        yield
    finally:
        for handler in text:
            handler.removeFilter(_drop_structured_records)


def _drop_structured_records(record: logging.LogRecord) -> bool:
    return not hasattr(record, "metadata")


def is_batch_specialisation(err: BaseException) -> bool:
    """Whether torch.export failed because the code pinned the dynamic batch dim."""
    text = str(err)
    return "specialized" in text and "batch" in text or "ConstraintViolation" in type(err).__name__


def is_data_dependent(err: BaseException) -> bool:
    """Whether torch.export failed on a branch (or .item()) on a tensor's value."""
    return "data-dependent" in str(err) or "DataDependent" in type(err).__name__


def is_locked_parameter(err: BaseException) -> bool:
    """Whether torch.export failed swapping a parameter held in a locked TensorDictParams."""
    return "part of a locked graph" in str(err)


# torch's generic debugging advice (env vars, links), which would push the failing call out
# of the quoted lines.
_TORCH_ADVICE = re.compile(
    r"\s*(For more information, run with|For extended logs|If you suspect the guard|"
    r"For more debugging help|For C\+\+ stack trace|The error above occurred when calling)"
)


def is_advice(line: str) -> bool:
    """Whether a line of a torch.export error is torch's generic debugging advice."""
    return bool(_TORCH_ADVICE.match(line))


def raising_call_index(lines: list[str]) -> int | None:
    """Index of torch's "The following call raised this error:" line, which precedes the frame."""
    return next((i for i, line in enumerate(lines) if "The following call raised this error" in line), None)


def raising_frame(lines: list[str]) -> tuple[str, str] | None:
    """(path, line) of the frame torch quotes after "The following call raised this error"."""
    marker = raising_call_index(lines)
    if marker is None or marker + 1 >= len(lines):
        return None
    frame = re.search(r'File "([^"]+)", line (\d+)', lines[marker + 1])
    return frame.groups() if frame else None
