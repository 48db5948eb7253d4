"""Inductor's transposition of a few channel rows into channels-last pixels: the private torch
API tdaot uses to speed it up, beside tdaot._torch_compat (which re-exports it) to keep each
module short. Same rule: every use of torch internals for this lives here, and
tests/python/test_torch_compat.py checks each entry.

A pixel policy's first kernel turns its NCHW input (uint8 frames, 3 or 4 channels) into the
channels-last floats oneDNN's convolutions take. Inductor writes a vector of pixels at a time as
``transpose_mxn<float, C, 16>`` (AVX2: ``C, 8``) from C rows; on AVX-512 torch computes that as
a whole 16 x 16 block transposition (eight rounds of shuffles over 16 registers) and 16 masked
stores of C values, on AVX2 as a scalar loop. Where the block is stored whole (its destination's
stride is C), the same values are a few permutes and blends into C full vectors: the conv
benchmark policy's call took 0.90 of its time at 64 and 256 rows on AVX-512 (0.95-0.96 with AVX2
kernels), the Nature CNN's 0.98, outputs bit for bit the same (benchmarks/README.md, "Channels
interleaved with permutes").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# The line inductor opens each CPU kernel's source with; the specialisation goes right after it.
KERNEL_PREFIX_INCLUDE = "#include <torch/csrc/inductor/cpp_prefix.h>"

# transpose_mxn<float, C, 16, false> for C = 2, 3, 4 on AVX-512 (C, 8 on AVX2), where the
# destination's stride is C: output vector o, lane i holds value k = 16 o + i of the interleaved
# block, pixel k / C of row k % C. AVX-512: one permute takes rows 0-1, another rows 2-3, a blend
# joins them; AVX2 (the other branch): one permute a row, a blend a further row. Guarded, as
# every kernel of a source file opens with the include.
CHANNELS_INTERLEAVED = r"""
#if (defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)) && !defined(TDAOT_CHANNELS_INTERLEAVED)
#define TDAOT_CHANNELS_INTERLEAVED
#include <array>
namespace tdaot_kernels {
#if defined(CPU_CAPABILITY_AVX512)
constexpr int kWidth = 16;
template <int C>
struct Interleaving {
  static constexpr std::array<int32_t, 16 * C> indices() {
    std::array<int32_t, 16 * C> table{};
    for (int k = 0; k < 16 * C; ++k) table[k] = (k % C % 2) * 16 + k / C;
    return table;
  }
  static constexpr std::array<uint16_t, C> upper_rows() {
    std::array<uint16_t, C> masks{};
    for (int k = 0; k < 16 * C; ++k)
      if (k % C >= 2) masks[k / 16] |= static_cast<uint16_t>(1u << (k % 16));
    return masks;
  }
};
template <int C>
inline void interleave(const float* src, int64_t ld_src, float* dst) {
  alignas(64) static constexpr auto indices = Interleaving<C>::indices();
  static constexpr auto upper = Interleaving<C>::upper_rows();
  __m512 rows[4];
  for (int r = 0; r < C; ++r) rows[r] = _mm512_loadu_ps(src + r * ld_src);
  for (int o = 0; o < C; ++o) {
    const __m512i index = _mm512_load_si512(indices.data() + 16 * o);
    __m512 out = _mm512_permutex2var_ps(rows[0], index, rows[1]);
    if constexpr (C > 2) {
      const __m512 high = _mm512_permutex2var_ps(rows[2], index, rows[C > 3 ? 3 : 2]);
      out = _mm512_mask_blend_ps(upper[o], out, high);
    }
    _mm512_storeu_ps(dst + 16 * o, out);
  }
}
#else
constexpr int kWidth = 8;
template <int C>
struct Interleaving {
  static constexpr std::array<int32_t, 8 * C> pixels() {
    std::array<int32_t, 8 * C> table{};
    for (int k = 0; k < 8 * C; ++k) table[k] = k / C;
    return table;
  }
  static constexpr std::array<int32_t, 8 * C * C> rows() {
    std::array<int32_t, 8 * C * C> table{};  // [row][k]: all ones where value k is of that row
    for (int r = 0; r < C; ++r)
      for (int k = 0; k < 8 * C; ++k) table[r * 8 * C + k] = k % C == r ? -1 : 0;
    return table;
  }
};
template <int C>
inline void interleave(const float* src, int64_t ld_src, float* dst) {
  alignas(32) static constexpr auto pixels = Interleaving<C>::pixels();
  alignas(32) static constexpr auto rows = Interleaving<C>::rows();
  __m256 in[4];
  for (int r = 0; r < C; ++r) in[r] = _mm256_loadu_ps(src + r * ld_src);
  for (int o = 0; o < C; ++o) {
    const __m256i index = _mm256_load_si256(reinterpret_cast<const __m256i*>(pixels.data() + 8 * o));
    __m256 out = _mm256_permutevar8x32_ps(in[0], index);
    for (int r = 1; r < C; ++r) {
      const __m256 mask = _mm256_load_ps(reinterpret_cast<const float*>(rows.data() + r * 8 * C + 8 * o));
      out = _mm256_blendv_ps(out, _mm256_permutevar8x32_ps(in[r], index), mask);
    }
    _mm256_storeu_ps(dst + 8 * o, out);
  }
}
#endif
// C rows into a destination of stride C: interleaved; any other: torch's own transposition.
template <int C>
inline void transposed(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  if (ld_dst == C)
    interleave<C>(src, ld_src, dst);
  else
    at::vec::transpose_mxn<float>(src, ld_src, dst, ld_dst, C, kWidth);
}
}  // namespace tdaot_kernels
#define TDAOT_CHANNELS_INTERLEAVED_AS(C)                                                      \
  template <>                                                                                 \
  inline void transpose_mxn<float, C, tdaot_kernels::kWidth, false>(                         \
      const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {                         \
    tdaot_kernels::transposed<C>(src, ld_src, dst, ld_dst);                                   \
  }
TDAOT_CHANNELS_INTERLEAVED_AS(2)
TDAOT_CHANNELS_INTERLEAVED_AS(3)
TDAOT_CHANNELS_INTERLEAVED_AS(4)
#endif
"""


@contextlib.contextmanager
def channels_interleaved() -> Iterator[None]:
    """Inductor's CPU kernels that transpose float blocks open with ``CHANNELS_INTERLEAVED``
    (after the kernel prefix include), for the duration: their 2-4 row transpositions into a
    contiguous destination become permutes on AVX2 and AVX-512; other ISAs compile it to nothing."""
    from torch._inductor.codegen import cpp

    original = cpp.KernelGroup.codegen_group

    def codegen_group(self, name=None) -> str:
        code = original(self, name)
        if "transpose_mxn<float," in code and KERNEL_PREFIX_INCLUDE in code:
            code = code.replace(KERNEL_PREFIX_INCLUDE, KERNEL_PREFIX_INCLUDE + CHANNELS_INTERLEAVED, 1)
        return code

    cpp.KernelGroup.codegen_group = codegen_group
    try:
        yield
    finally:
        cpp.KernelGroup.codegen_group = original
