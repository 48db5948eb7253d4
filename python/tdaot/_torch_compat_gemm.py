"""Inductor's C++ GEMM template: the private torch API tdaot uses to choose and shape its
kernels, beside tdaot._torch_compat (which re-exports it) to keep each module short. Same rule:
every use of torch internals for this lives here, and tests/python/test_torch_compat.py checks
each entry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


@contextlib.contextmanager
def gemm_accumulator_on_stack(max_bytes: int = 1 << 18) -> Iterator[None]:
    """Inductor's C++ GEMM template with its local accumulator on the stack, for the duration.

    torch 2.13's ``CppTemplateKernel.define_buffer`` emits ``std::make_unique<float[]>(N)``
    for the template's local accumulator (one malloc per GEMM call whenever N is not a multiple
    of the micro-kernel's block, the epilogue is not fp32, or the buffer has other users). In
    a static-shape build N is a compile-time constant, so a 64-byte aligned stack array does
    the same job without the heap (a static_assert bounds it). Only for static shapes and no
    k-slicing (``cpp.gemm_max_k_slices=1``, inductor's default), which the template would
    need to release the buffer for: that case raises while compiling.
    """
    from torch._inductor import ir, select_algorithm  # noqa: F401 - import order (circular import)
    from torch._inductor.codegen import cpp_template_kernel
    from torch._inductor.codegen.cpp_utils import DTYPE_TO_CPP, cexpr_index

    kernel = cpp_template_kernel.CppTemplateKernel
    original = (kernel.define_buffer, kernel.reinit_buffer_if_null, kernel.release_buffer)

    def define_buffer(self, name, sizes, dtype=torch.float):
        sizes = cpp_template_kernel.parse_expr_with_index_symbols(sizes)
        buffer = ir.Buffer(name=name, layout=ir.FixedLayout(torch.device("cpu"), dtype, sizes))
        self.local_buffers[name] = buffer
        self.__dict__.setdefault("_tdaot_stack_buffers", set()).add(name)
        ctype, numel = DTYPE_TO_CPP[dtype], cexpr_index(buffer.get_numel())
        return (
            f"static_assert(({numel}) * sizeof({ctype}) <= {max_bytes}, "
            '"the GEMM accumulator is too big for the stack"); '
            f"alignas(64) {ctype} _{name}[{numel}]; {ctype}* {name} = _{name};"
        )

    def reinit_buffer_if_null(self, name):
        if name in self.__dict__.get("_tdaot_stack_buffers", ()):
            return ""
        return original[1](self, name)

    def release_buffer(self, name):
        if name in self.__dict__.get("_tdaot_stack_buffers", ()):
            raise NotImplementedError("a k-sliced GEMM needs a heap accumulator (cpp.gemm_max_k_slices=1)")
        return original[2](self, name)

    kernel.define_buffer, kernel.reinit_buffer_if_null, kernel.release_buffer = (
        define_buffer,
        reinit_buffer_if_null,
        release_buffer,
    )
    try:
        yield
    finally:
        kernel.define_buffer, kernel.reinit_buffer_if_null, kernel.release_buffer = original


@contextlib.contextmanager
def gemm_choices_filtered(keep: Callable[[list], list]) -> Iterator[None]:
    """Inductor's GEMM candidate lists passed through ``keep`` before any is timed."""
    # select_algorithm first: cpp_template_kernel imported on its own is a circular import.
    from torch._inductor import select_algorithm  # noqa: F401

    selector = select_algorithm.get_algorithm_selector_cache()
    selector.add_preprocessing_fn(keep)
    try:
        yield
    finally:
        selector.preprocessing_fns.remove(keep)


@contextlib.contextmanager
def float_gemm_register_block(block: tuple[int, int], min_rows: int) -> Iterator[None]:
    """Inductor's C++ GEMM template computing an fp32 product of at least ``min_rows`` rows
    on AVX-512 with the register block ``block`` (rows, columns) wherever that divides its
    columns, for the duration. Inductor ranks its blocks by size (8x48, 8x32, then 16x16);
    the others stay eligible for the products this does not cover."""
    import dataclasses

    from torch._inductor import select_algorithm  # noqa: F401 - see gemm_choices_filtered
    from torch._inductor.codegen import cpp_micro_gemm
    from torch._inductor.cpu_vec_isa import VecAVX512

    def narrowed(config):
        blocking = config.register_blocking
        if (
            config.vec_isa_cls is not VecAVX512
            or config.input_dtype != torch.float32
            or config.compute_dtype != torch.float32
            or (blocking.block_m, blocking.block_n) == tuple(block)
        ):
            return config
        check = config.extra_check

        def extra_check(config, m, n, k, *args, **kwargs):
            if m >= min_rows and n % block[1] == 0:
                return False
            return check is None or check(config, m, n, k, *args, **kwargs)

        return dataclasses.replace(config, extra_check=extra_check)

    registered = cpp_micro_gemm.micro_gemm_configs
    saved = {cls: list(configs) for cls, configs in registered.items()}
    for configs in registered.values():
        configs[:] = [narrowed(config) for config in configs]
    try:
        yield
    finally:
        for cls, configs in saved.items():
            registered[cls][:] = configs


@contextlib.contextmanager
def one_row_gemm_blocks(columns: dict[str, int]) -> Iterator[None]:
    """Inductor's C++ GEMM template computing an fp32 product of one row (static) with a register
    block of 1 x ``columns[isa]`` on each named vector ISA ("VecAVX2": 64, ...) wherever that
    divides its columns, for the duration. Inductor has no one-row block: such a product runs the
    one-row tail of a taller block (1x16 of AVX2's 4x16), two accumulators, one FMA chain each."""
    from torch._inductor import cpu_vec_isa, select_algorithm  # noqa: F401 - see gemm_choices_filtered
    from torch._inductor.codegen import cpp_micro_gemm

    def one_row(config, m, n, k, *args, **kwargs):
        return m == 1 and not kwargs.get("dynamic_M", False) and n % config.register_blocking.block_n == 0

    added = [
        config
        for isa, width in columns.items()
        for config in cpp_micro_gemm.generate_gemm_config(
            getattr(cpu_vec_isa, isa), [(1, width, 1)], input_dtype=torch.float, extra_check=one_row
        )
    ]
    configs = cpp_micro_gemm.micro_gemm_configs[cpp_micro_gemm.CppMicroGemmFP32Vec]
    configs[:0] = added
    try:
        yield
    finally:
        configs[:] = [config for config in configs if all(config is not a for a in added)]


def is_cpp_gemm_template(choice: object) -> bool:
    """Whether a GEMM candidate is inductor's C++ GEMM template (possibly wrapped)."""
    from torch._inductor import select_algorithm  # noqa: F401 - see gemm_choices_filtered
    from torch._inductor.codegen import cpp_template_kernel

    return isinstance(getattr(choice, "_wrapped", choice), cpp_template_kernel.CppTemplateCaller)
