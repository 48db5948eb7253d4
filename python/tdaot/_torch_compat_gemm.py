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
def _micro_gemm_configs_restored() -> Iterator[dict]:
    """Inductor's micro-kernel configs (class -> list), as they are now once the block ends."""
    from torch._inductor import select_algorithm  # noqa: F401 - see gemm_choices_filtered
    from torch._inductor.codegen import cpp_micro_gemm

    registered = cpp_micro_gemm.micro_gemm_configs
    saved = {cls: list(configs) for cls, configs in registered.items()}
    try:
        yield registered
    finally:
        for cls, configs in saved.items():
            registered[cls][:] = configs


def _float_configs_added(registered: dict, isa: str, block: tuple[int, int], extra_check) -> None:
    """An fp32 micro-kernel config of register block ``block`` on ``isa``, ranked first."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.codegen import cpp_micro_gemm

    registered[cpp_micro_gemm.CppMicroGemmFP32Vec][:0] = cpp_micro_gemm.generate_gemm_config(
        getattr(cpu_vec_isa, isa), [(*block, 1)], input_dtype=torch.float, extra_check=extra_check
    )


def _is_float(config) -> bool:
    return config.input_dtype == torch.float32 and config.compute_dtype == torch.float32


@contextlib.contextmanager
def float_gemm_register_block(
    block: tuple[int, int], min_rows: int, isa: str = "VecAVX512"
) -> Iterator[None]:
    """Inductor's C++ GEMM template computing an fp32 product of at least ``min_rows`` rows
    (or of any number of rows, decided at run time: a dynamic batch, whose size hint is the
    example's) on the vector ISA ``isa`` with the register block ``block`` (rows, columns)
    wherever that divides its columns, for the duration: inductor's other fp32 blocks for that
    ISA are kept off such products (it ranks them by size: AVX-512's 8x48, 8x32, then 16x16),
    and ``block`` is added for it where inductor has none (AVX2's are 4x24, 4x16 and 8x8). The
    others stay eligible for the products this does not cover."""
    import dataclasses

    from torch._inductor import cpu_vec_isa
    from torch._inductor.codegen import cpp_micro_gemm

    isa_class = getattr(cpu_vec_isa, isa)
    block = tuple(block)

    def covered(m, n, **check_kwargs) -> bool:
        # A dynamic M's m is its size hint, not its rows: covered whatever it is.
        return (check_kwargs.get("dynamic_M", False) or m >= min_rows) and n % block[1] == 0

    def is_block(config) -> bool:
        blocking = config.register_blocking
        return (
            config.vec_isa_cls is isa_class
            and _is_float(config)
            and (blocking.block_m, blocking.block_n) == block
        )

    def narrowed(config):
        if config.vec_isa_cls is not isa_class or not _is_float(config) or is_block(config):
            return config
        check = config.extra_check

        def extra_check(config, m, n, k, *args, **kwargs):
            if covered(m, n, **kwargs):
                return False
            return check is None or check(config, m, n, k, *args, **kwargs)

        return dataclasses.replace(config, extra_check=extra_check)

    with _micro_gemm_configs_restored() as registered:
        has_block = any(is_block(config) for config in registered[cpp_micro_gemm.CppMicroGemmFP32Vec])
        for configs in registered.values():
            configs[:] = [narrowed(config) for config in configs]
        if not has_block:
            _float_configs_added(registered, isa, block, lambda config, m, n, *a, **k: covered(m, n, **k))
        yield


@contextlib.contextmanager
def one_row_gemm_blocks(columns: dict[str, int]) -> Iterator[None]:
    """Inductor's C++ GEMM template computing an fp32 product of one row (static) with a register
    block of 1 x ``columns[isa]`` on each named vector ISA ("VecAVX2": 64, ...) wherever that
    divides its columns, for the duration. Inductor has no one-row block: such a product runs the
    one-row tail of a taller block (1x16 of AVX2's 4x16), two accumulators, one FMA chain each."""

    def one_row(config, m, n, k, *args, **kwargs):
        return m == 1 and not kwargs.get("dynamic_M", False) and n % config.register_blocking.block_n == 0

    with _micro_gemm_configs_restored() as registered:
        for isa, width in columns.items():
            _float_configs_added(registered, isa, (1, width), one_row)
        yield


# The fp32 body of inductor's micro-kernel as it renders (no N tail, B not transposed, alpha 1),
# and the same computation without its lambdas: GCC keeps the lambdas' accumulators in registers
# but also stores every one of them to the stack on each step of K (and the loads of A then wait
# on those stores). The replacement does the same fused multiply-adds in the same order, so the
# results are bit for bit the same. In a Nature CNN's batch-1 convolutions on an AVX2 CPU: 30-35
# GFLOP/s -> 38-62 (4x16 block), 72-75 (6x16).
LAMBDA_BODY = """    Vectorized va;
    at::vec::VectorizedN<float, COLS> vb;
    at::vec::VectorizedN<float, ROWS*COLS> vc;
    auto loadc = [&](auto i) {
        if constexpr (accum) {
            constexpr int row = i / COLS;
            constexpr int col = i % COLS;
            vc[i] = Vectorized::loadu(C + row * ldc + col * VLEN);
        } else {
            vc[i] = Vectorized(0.0f);
        }
    };
    c10::ForcedUnroll<ROWS * COLS>{}(loadc);

    auto compute = [&, COLS](auto i, int k) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        if constexpr (col == 0) {
            va = Vectorized(static_cast<float>(A[row * lda + k]));
        }

        if constexpr (row == 0) {
            vb[col] = Vectorized::loadu(B + k * ldb + col * VLEN);

        }

        constexpr int idx = row * COLS + col;
        vc[idx] = at::vec::fmadd(va, vb[col], vc[idx]);
    };

    for (int k = 0; k < K; ++k) {
        c10::ForcedUnroll<ROWS * COLS>{}(compute, k);
    }

    // store to C
    auto storec = [&](auto i) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        vc[i].store(C + row * ldc + col * VLEN);
    };
    c10::ForcedUnroll<ROWS * COLS>{}(storec);
}
"""
REGISTER_BODY = """    Vectorized vc[ROWS * COLS];
    #pragma GCC unroll 64
    for (int i = 0; i < ROWS * COLS; ++i) {
        if constexpr (accum) vc[i] = Vectorized::loadu(C + (i / COLS) * ldc + (i % COLS) * VLEN);
        else vc[i] = Vectorized(0.0f);
    }
    for (int64_t k = 0; k < K; ++k) {
        Vectorized vb[COLS];
        #pragma GCC unroll 64
        for (int col = 0; col < COLS; ++col) vb[col] = Vectorized::loadu(B + k * ldb + col * VLEN);
        #pragma GCC unroll 64
        for (int row = 0; row < ROWS; ++row) {
            Vectorized va(static_cast<float>(A[row * lda + k]));
            #pragma GCC unroll 64
            for (int col = 0; col < COLS; ++col)
                vc[row * COLS + col] = at::vec::fmadd(va, vb[col], vc[row * COLS + col]);
        }
    }
    #pragma GCC unroll 64
    for (int i = 0; i < ROWS * COLS; ++i) vc[i].store(C + (i / COLS) * ldc + (i % COLS) * VLEN);
}
"""


@contextlib.contextmanager
def float_micro_kernels_in_registers() -> Iterator[None]:
    """Inductor's fp32 GEMM micro-kernels generated with their accumulators in registers only
    (the comment above), for the duration; a micro-kernel rendered otherwise is left as it is."""
    from torch._inductor import select_algorithm  # noqa: F401 - see gemm_choices_filtered
    from torch._inductor.codegen import cpp_micro_gemm

    cls = cpp_micro_gemm.CppMicroGemmFP32Vec
    original = cls.codegen_define

    def codegen_define(self, kernel) -> str:
        return original(self, kernel).replace(LAMBDA_BODY, REGISTER_BODY)

    cls.codegen_define = codegen_define
    try:
        yield
    finally:
        cls.codegen_define = original


def is_cpp_gemm_template(choice: object) -> bool:
    """Whether a GEMM candidate is inductor's C++ GEMM template (possibly wrapped)."""
    from torch._inductor import select_algorithm  # noqa: F401 - see gemm_choices_filtered
    from torch._inductor.codegen import cpp_template_kernel

    return isinstance(getattr(choice, "_wrapped", choice), cpp_template_kernel.CppTemplateCaller)
