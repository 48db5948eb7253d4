"""Inductor's CPU vector ISA selection: the private torch API tdaot uses for it, beside
tdaot._torch_compat (which re-exports it) to keep each module short. Same rule: every use of
torch internals for this lives here, and tests/python/test_torch_compat.py checks each entry.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def vector_isas_limited_to(class_names: tuple[str, ...] | None) -> Iterator[None]:
    """Inductor's CPU vector ISAs limited to the named classes ("VecAVX2", ...) for the
    duration (None: all). Inductor adds each ISA's own flags (-mavx512vnni, AMX) on top of
    -march, so a target level must exclude the ISAs that go beyond it."""
    from torch._inductor import cpu_vec_isa

    probed = probed_vector_isas()
    if class_names is None:
        yield
        return
    original = cpu_vec_isa.valid_vec_isa_list
    allowed = [isa for isa in probed if type(isa).__name__ in class_names]
    # pick_vec_isa looks the list up through the module on every call.
    cpu_vec_isa.valid_vec_isa_list = lambda: allowed
    try:
        yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = original


# Inductor loads a vector of 8-bit values as ``Vectorized<uint8_t>::loadu(ptr, n)`` with n the
# float tiling (8 or 16 lanes). AVX-512's header reads those n bytes in one instruction; AVX2's has
# no such path and goes through a 32-byte stack buffer filled in a loop and a memcpy: a uint8
# pixel policy's first kernel (to float, / 255, im2col or channels-last) was 35 % of its batch-1
# call on an AVX2 CPU (benchmarks/README.md). The replacement reads the same bytes directly and
# fills the other lanes with 1, as the header's buffer does (so an integer division by a lane
# never traps).
_AVX2_BYTE_LOADS = {
    8: "_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>({ptr})), _mm_set1_epi8(1))",
    16: "_mm_loadu_si128(reinterpret_cast<const __m128i*>({ptr}))",
}


@contextlib.contextmanager
def byte_loads_direct() -> Iterator[None]:
    """Inductor's AVX2 kernels reading a vector of 8 or 16 bytes (uint8, int8) with one load
    instead of the header's buffered copy, for the duration (the comment above)."""
    import torch
    from torch._inductor.codegen import cpp

    original = cpp.CppVecKernel._get_vec_load_line

    def load_line(self, var, index, dtype, load_mask=None):
        direct = _AVX2_BYTE_LOADS.get(self.num_elems)
        if (
            direct is None
            or load_mask is not None
            or dtype not in (torch.uint8, torch.int8)
            or type(self.vec_isa).__name__ != "VecAVX2"
        ):
            return original(self, var, index, dtype, load_mask)
        ptr = f"{var} + {cpp.cexpr_index(index)}" if index != 0 else var
        low = direct.format(ptr=f"({ptr})")
        vector = f"_mm256_inserti128_si256(_mm256_set1_epi8(1), {low}, 0)"
        return f"{self._get_vec_type(dtype)}({vector})"

    cpp.CppVecKernel._get_vec_load_line = load_line
    try:
        yield
    finally:
        cpp.CppVecKernel._get_vec_load_line = original


@contextlib.contextmanager
def short_loops_scalar() -> Iterator[None]:
    """Inductor's AVX2 kernels left scalar where the only loop they would vectorize is shorter
    than half a vector (3 of 8 floats), for the duration. Inductor vectorizes such a loop as a
    masked tail alone; an IMPALA ResNet's first im2col (3x3 windows of uint8 pixels, padded) spent
    43 % of its batch-1 call there on an AVX2 CPU. On AVX-512 inductor's own rule (under a quarter
    of a vector, few operations) already leaves 3 of 16 scalar."""
    import sympy
    from torch._inductor import cpu_vec_isa
    from torch._inductor.codegen import cpp

    original = cpp.TilingSelect.select_tiling

    def select_tiling(self, fn_list, var_sizes_list):
        factors, indices, stats = original(self, fn_list, var_sizes_list)
        if len(indices) != 1 or type(cpu_vec_isa.pick_vec_isa()).__name__ != "VecAVX2":
            return factors, indices, stats
        group, reduction = max(var_sizes_list, key=lambda sizes: len(sizes[1]))
        ranges = (*group, *reduction)
        size = ranges[indices[0]] if -len(ranges) <= indices[0] < len(ranges) else None
        if isinstance(size, (int, sympy.Integer)) and 2 * int(size) < factors[0]:
            return [], [], stats
        return factors, indices, stats

    cpp.TilingSelect.select_tiling = select_tiling
    try:
        yield
    finally:
        cpp.TilingSelect.select_tiling = original


# at::vec's float tanh calls SLEEF's 1-ulp function, 22-24 ns a vector of 8 on an AMD EPYC (Zen 3,
# AVX2); SLEEF's 3.5-ulp one takes 8.5 ns (2.25 ulp at most over [-10, 10], against tanh in double).
# A decomposed LSTM spent 17 % of its 4096-row call in the first. Inductor's own alternative
# (cpp.use_decompose_tanh, through exp) is off in torch for its error near zero (36 ulp here).
_AVX2_FLOAT_TANH = "at::vec::Vectorized<float>(Sleef_tanhf8_u35({x}))"


@contextlib.contextmanager
def tanh_within_3_5_ulp() -> Iterator[None]:
    """Inductor's AVX2 kernels computing a vector of 8 floats' tanh with SLEEF's 3.5-ulp
    function, for the duration (the comment above); other vectors keep at::vec's."""
    import torch
    from torch._inductor.codegen import cpp
    from torch._inductor.virtualized import V

    original = cpp.CppVecOverrides.tanh

    def tanh(x):
        kernel = V.kernel
        if (
            getattr(x, "dtype", None) == torch.float32
            and isinstance(kernel, cpp.CppVecKernel)
            and type(kernel.vec_isa).__name__ == "VecAVX2"
            and kernel._get_num_vectors(torch.float32) == 1
        ):
            return _AVX2_FLOAT_TANH.format(x=x)
        return original(x)

    # CppVecOverrides wraps its static methods when an instance is made (scalar arguments
    # broadcast or sent to CppOverrides), so this one is wrapped as inductor's is.
    cpp.CppVecOverrides.tanh = staticmethod(tanh)
    try:
        yield
    finally:
        cpp.CppVecOverrides.tanh = staticmethod(original)


@functools.cache
def probed_vector_isas() -> list:
    """Inductor's valid CPU vector ISAs, probed the way inductor means to: with libtorch linked.

    Inductor decides once per process whether an ISA works by compiling a probe library with the
    compile options in force at that moment and dlopen-ing it in a child process. Probed under a
    bound model's ``aot_inductor.link_libtorch = False``, the probe cannot resolve SLEEF from
    libtorch, fails, and the ISA is dropped (the model silently gets scalar kernels); the failed
    probe library also stays in inductor's cache and fails every later process. So the list is
    settled here, with libtorch linked, and an ISA the CPU has whose cached probe fails has its
    probe library removed and is probed once more.
    """
    import torch._inductor.config
    from torch._inductor import cpu_vec_isa

    with torch._inductor.config.patch({"aot_inductor.link_libtorch": True}):
        valid = cpu_vec_isa.valid_vec_isa_list()
        if sys.platform != "linux" or not hasattr(cpu_vec_isa, "x86_isa_checker"):
            return valid
        cpu_flags = cpu_vec_isa.x86_isa_checker()
        stale = [
            isa
            for isa in cpu_vec_isa.supported_vec_isa_list
            if isa not in valid and all(flag in cpu_flags for flag in str(isa).split())
        ]
        if not stale or not all(_remove_isa_probe(isa) for isa in stale):
            return valid
        cpu_vec_isa.VecISA._VecISA__bool__impl.cache_clear()
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        return cpu_vec_isa.valid_vec_isa_list()


def _remove_isa_probe(isa) -> bool:
    """Remove inductor's cached probe library of ``isa`` (as VecISA.check_build names it);
    whether one was there."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.codecache import write
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions

    key, source = write(
        cpu_vec_isa.VecISA._avx_code,
        "cpp",
        extra=cpu_vec_isa._get_isa_dry_compile_fingerprint(isa.build_arch_flags()),
    )
    options = CppTorchOptions(vec_isa=isa, warning_all=False)
    library = Path(CppBuilder(key, [source], options, str(Path(source).parent)).get_target_file_path())
    if not library.is_file():
        return False
    library.unlink()
    return True


def picked_vector_isa() -> str:
    """The vector ISA inductor generates CPU kernels for now ("" when scalar)."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    return str(isa) if isa else ""


def picked_vector_isa_class() -> str:
    """The class name of the vector ISA inductor generates CPU kernels for now ("VecAVX2"; ""
    when scalar)."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    return type(isa).__name__ if isa else ""
