"""What each of tdaot's patches of torch's internals needs from the installed torch, checked
before the patch is applied: the attributes it reads or replaces, the parameters of a function it
wraps, the text it rewrites. Each ``*_lacks`` function returns None when this torch has all of it,
else one line saying what differs; tdaot.builder.patches (the table of patches) then builds
without that patch and says so. The patches themselves live beside the other private torch APIs
(tdaot._torch_compat, _isa, _gemm, _paths); these checks read the same names, so an edit of a
patch that reaches for something new adds it here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

_CPP = "torch._inductor.codegen.cpp"
_ISA = "torch._inductor.cpu_vec_isa"
_MICRO_GEMM = "torch._inductor.codegen.cpp_micro_gemm"
_TEMPLATE_KERNEL = "torch._inductor.codegen.cpp_template_kernel"
_CPP_BUILDER = "torch._inductor.cpp_builder"


def lacks(module: str, attribute: str = "", parameters: tuple[str, ...] | None = None) -> str | None:
    """None when ``module`` has ``attribute`` (dotted: "Class.method"; "" for the module itself)
    and, with ``parameters``, a callable whose parameters are those names in that order; else what
    differs, in one line."""
    try:
        # Inductor's C++ template modules import each other: select_algorithm first, as they do.
        importlib.import_module("torch._inductor.select_algorithm")
        value = importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - any import failure is a torch that differs
        return f"{module} cannot be imported ({type(err).__name__}: {err})"
    where = module
    for part in filter(None, attribute.split(".")):
        if not hasattr(value, part):
            return f"{where} has no attribute {part!r}"
        value, where = getattr(value, part), f"{where}.{part}"
    if parameters is None:
        return None
    try:
        names = tuple(inspect.signature(value).parameters)
    except (TypeError, ValueError):
        return f"{where} is not a function with a signature"
    if names != parameters:
        return f"{where} takes ({', '.join(names)}), not ({', '.join(parameters)})"
    return None


def _first(*problems: str | None) -> str | None:
    return next((problem for problem in problems if problem is not None), None)


# --- compiling_for (tdaot.builder.targets) -----------------------------------------------------


def vector_isa_limit_lacks() -> str | None:
    """What vector_isas_limited_to replaces and reads."""
    return _first(lacks(_ISA, "valid_vec_isa_list"), lacks(_ISA, "pick_vec_isa"))


def vector_isa_set_lacks() -> str | None:
    """What vector_isa_set_to replaces, and the ISA class it sets (tdaot's one cross target)."""
    return _first(lacks(_ISA, "valid_vec_isa_list"), lacks(_ISA, "VecNEON"))


def byte_loads_direct_lacks() -> str | None:
    return _first(
        lacks(_CPP, "CppVecKernel._get_vec_load_line", ("self", "var", "index", "dtype", "load_mask")),
        lacks(_CPP, "CppVecKernel._get_vec_type"),
        lacks(_CPP, "cexpr_index"),
    )


def channels_interleaved_lacks() -> str | None:
    from tdaot._torch_compat_channels import KERNEL_PREFIX_INCLUDE

    problem = lacks(_CPP, "KernelGroup.codegen_group", ("self", "name"))
    if problem is not None:
        return problem
    from torch._inductor.codegen import cpp

    source = inspect.getsource(cpp.KernelGroup.codegen_group)
    if KERNEL_PREFIX_INCLUDE not in source:
        return f"KernelGroup.codegen_group no longer writes {KERNEL_PREFIX_INCLUDE!r}"
    if "transpose_mxn<" not in inspect.getsource(cpp):
        return "inductor's CPU codegen no longer calls transpose_mxn"
    return None


def short_loops_scalar_lacks() -> str | None:
    return _first(
        lacks(_CPP, "TilingSelect.select_tiling", ("self", "fn_list", "var_sizes_list")),
        lacks(_ISA, "pick_vec_isa"),
    )


def tanh_within_3_5_ulp_lacks() -> str | None:
    return _first(
        lacks(_CPP, "CppVecOverrides.tanh", ("a",)),
        lacks(_CPP, "CppVecKernel._get_num_vectors"),
        lacks("torch._inductor.virtualized", "V"),
    )


# --- the latency tuning's GEMM choice (tdaot.builder.gemm_choice) --------------------------------


def gemm_choices_filtered_lacks() -> str | None:
    return _first(
        lacks("torch._inductor.select_algorithm", "get_algorithm_selector_cache", ()),
        lacks(
            "torch._inductor.select_algorithm", "AlgorithmSelectorCache.add_preprocessing_fn", ("self", "fn")
        ),
        lacks(_TEMPLATE_KERNEL, "CppTemplateCaller"),
    )


_CONFIG_FIELDS = ("input_dtype", "compute_dtype", "vec_isa_cls", "register_blocking", "extra_check")


def micro_gemm_configs_lacks() -> str | None:
    """What float_gemm_register_block and one_row_gemm_blocks read and extend: inductor's table
    of micro-kernel configs, its fp32 kernel class and config maker, the config's fields."""
    problem = _first(
        lacks(_MICRO_GEMM, "micro_gemm_configs"),
        lacks(_MICRO_GEMM, "CppMicroGemmFP32Vec"),
        lacks(_MICRO_GEMM, "CppMicroGemmConfig"),
        lacks(_ISA, "VecAVX2"),
        lacks(_ISA, "VecAVX512"),
    )
    if problem is not None:
        return problem
    from torch._inductor.codegen import cpp_micro_gemm

    fields = {field.name for field in dataclasses.fields(cpp_micro_gemm.CppMicroGemmConfig)}
    missing = [name for name in _CONFIG_FIELDS if name not in fields]
    if missing:
        return f"{_MICRO_GEMM}.CppMicroGemmConfig has no field {missing[0]!r}"
    parameters = inspect.signature(cpp_micro_gemm.generate_gemm_config).parameters
    for name in ("vec_isa_cls", "register_blockings", "input_dtype", "extra_check"):
        if name not in parameters:
            return f"{_MICRO_GEMM}.generate_gemm_config takes no parameter {name!r}"
    return None


def micro_kernel_text_lacks() -> str | None:
    """What float_micro_kernels_in_registers wraps, and whether inductor's fp32 micro-kernel
    template, rendered as for a product without an N tail, holds the text the patch replaces."""
    problem = _first(
        lacks(_MICRO_GEMM, "CppMicroGemmFP32Vec.codegen_define", ("self", "kernel")),
        lacks(_MICRO_GEMM, "CppMicroGemmFP32Vec.TEMPLATE_KERNEL"),
        lacks("torch._inductor.codegen.common", "KernelTemplate._template_from_string"),
    )
    if problem is not None:
        return problem
    import torch
    from torch._inductor.codegen import cpp_micro_gemm
    from torch._inductor.codegen.common import KernelTemplate

    from tdaot._torch_compat_gemm import LAMBDA_BODY

    template = KernelTemplate._template_from_string(cpp_micro_gemm.CppMicroGemmFP32Vec.TEMPLATE_KERNEL)
    floats = {name: "float" for name in ("input_t", "input2_t", "output_t", "compute_t")}
    rendered = template.render(
        kernel_name="kernel", restrict_keyword="__restrict__", trans_b=False, tail_n=False, alpha=1,
        input_dtype=torch.float32, input2_dtype=torch.float32, torch=torch, **floats,
    )  # fmt: skip
    if LAMBDA_BODY not in rendered + "\n":  # the template's last newline is not rendered
        return (
            f"{_MICRO_GEMM}.CppMicroGemmFP32Vec's fp32 kernel no longer renders the body the patch replaces"
        )
    return None


# --- the bound run (tdaot.builder.gemm_choice, tdaot._torch_compat) ------------------------------


def gemm_accumulator_on_stack_lacks() -> str | None:
    return _first(
        lacks(_TEMPLATE_KERNEL, "CppTemplateKernel.define_buffer", ("self", "name", "sizes", "dtype")),
        lacks(_TEMPLATE_KERNEL, "CppTemplateKernel.reinit_buffer_if_null", ("self", "name")),
        lacks(_TEMPLATE_KERNEL, "CppTemplateKernel.release_buffer", ("self", "name")),
        lacks(_TEMPLATE_KERNEL, "parse_expr_with_index_symbols"),
        lacks("torch._inductor.codegen.cpp_utils", "DTYPE_TO_CPP"),
        lacks("torch._inductor.codegen.cpp_utils", "cexpr_index"),
        lacks("torch._inductor.ir", "Buffer"),
        lacks("torch._inductor.ir", "FixedLayout"),
    )


def output_clones_kept_lacks() -> str | None:
    return lacks("torch._inductor.fx_passes.post_grad", "remove_noop_ops", ("graph",))


def wrapper_choice_lacks() -> str | None:
    """What aoti_compile_and_package reads to give each compile the C++ wrapper its options ask
    for (the array-ref one for the bound run)."""
    return _first(
        lacks("torch._inductor.codegen.common", "init_backend_registration", ()),
        lacks("torch._inductor.codegen.common", "device_codegens"),
        lacks("torch._inductor.codegen.common", "DeviceCodegen"),
        lacks("torch._inductor.codegen.cpp_wrapper_cpu", "CppWrapperCpu"),
        lacks("torch._inductor.codegen.cpp_wrapper_cpu_array_ref", "CppWrapperCpuArrayRef"),
    )


# --- where inductor compiles (tdaot.builder.inductor_dir, compiler_cache) ------------------------


def inductor_cache_at_lacks() -> str | None:
    """What inductor_cache_dir and inductor_cache_at call."""
    return _first(
        lacks("torch._inductor.runtime.cache_dir_utils", "cache_dir", ()),
        lacks("torch._inductor.runtime.cache_dir_utils", "temporary_cache_dir", ("directory",)),
    )


def torch_at_lacks() -> str | None:
    return _first(
        lacks("torch.utils.cpp_extension", "_TORCH_PATH"),
        lacks("torch.utils.cpp_extension", "TORCH_LIB_PATH"),
        lacks(_CPP_BUILDER, "_TORCH_PATH"),
        lacks(_CPP_BUILDER, "_LINKER_SCRIPT"),
    )


def compile_commands_run_by_lacks() -> str | None:
    return lacks(_CPP_BUILDER, "_run_compile_cmd", ("cmd_line", "cwd"))
