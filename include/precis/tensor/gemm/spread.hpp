// A packing step the GEMM's kernels share: rows dense along k, interleaved by k into a panel,
// for any 32-bit elements (fp32 values, or dwords holding a pair of bf16 values), and for
// 64-bit ones (fp64 values).
#pragma once

#include <cstring>
#include <utility>

#include "precis/config.hpp"
#include "precis/tensor/shape.hpp"

#if PRECIS_X86_SIMD
#include <immintrin.h>

#include "precis/format/convert_x86.hpp"
#endif

namespace precis::detail {

#if PRECIS_X86_SIMD
/// spread_rows_32 for a whole panel of R rows (R = width, even, a compile-time constant): the
/// same register transposes with the loops over the rows unrolled, four rows at a time and then
/// a pair. At the AVX2 tile's 6 rows the general loop, with its loops over the rows and its
/// padding checks every four k, took twice as long (docs/benchmarks.md).
template <index_t R>
inline void spread_panel_32(const unsigned char* x, index_t xs, index_t kc, unsigned char* panel) {
  static_assert(R % 2 == 0);
  // plain loops that GCC unrolls (R is a constant), not a lambda per group of four rows: GCC 12
  // did not inline that lambda at R = 32, and reloaded its captures from memory for every
  // 4 x 4 transpose (2x the time of the loops below, docs/benchmarks.md)
  const float* const xf = reinterpret_cast<const float*>(x);
  float* const out = reinterpret_cast<float*>(panel);
  index_t p = 0;
  for (; p + 4 <= kc; p += 4) {
    float* const o = out + p * R;
    PRECIS_UNROLL(8)
    for (index_t r = 0; r + 4 <= R; r += 4) {
      const float* const xr = xf + r * xs + p;
      __m128 r0 = _mm_loadu_ps(xr), r1 = _mm_loadu_ps(xr + xs), r2 = _mm_loadu_ps(xr + 2 * xs),
             r3 = _mm_loadu_ps(xr + 3 * xs);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(o + r, r0);
      _mm_storeu_ps(o + R + r, r1);
      _mm_storeu_ps(o + 2 * R + r, r2);
      _mm_storeu_ps(o + 3 * R + r, r3);
    }
    if constexpr (R % 4 == 2) {
      constexpr index_t r = R - 2;
      const float* const xr = xf + r * xs + p;
      const __m128 r0 = _mm_loadu_ps(xr), r1 = _mm_loadu_ps(xr + xs);
      const __m128 lo = _mm_unpacklo_ps(r0, r1), hi = _mm_unpackhi_ps(r0, r1);  // (k0 k0' k1 k1'), (k2 ...)
      _mm_storel_pi(reinterpret_cast<__m64*>(o + r), lo);
      _mm_storeh_pi(reinterpret_cast<__m64*>(o + R + r), lo);
      _mm_storel_pi(reinterpret_cast<__m64*>(o + 2 * R + r), hi);
      _mm_storeh_pi(reinterpret_cast<__m64*>(o + 3 * R + r), hi);
    }
  }
  for (; p < kc; ++p)
    for (index_t r = 0; r < R; ++r) std::memcpy(panel + 4 * (p * R + r), x + 4 * (r * xs + p), 4);
}

/// spread_panel_32 for R = 16 or 32 rows with AVX-512: 16 rows of 16 k (whole 64-byte lines)
/// through a 16 x 16 register transpose, four stages of 16 shuffles, and stored as 16 whole rows
/// of the panel's k steps, where the 4 x 4 transposes above take four times the loads and
/// stores and twice the shuffles; k's last kc % 16 values go through spread_panel_32.
template <index_t R>
PRECIS_TARGET_AVX512 void spread_panel_32_avx512(const unsigned char* x, index_t xs, index_t kc, unsigned char* panel) {
  static_assert(R % 16 == 0);
  const float* const xf = reinterpret_cast<const float*>(x);
  float* const out = reinterpret_cast<float*>(panel);
  // 128-bit lanes of (a, b) picked by _mm512_permutex2var_ps (indices 16-31: b's elements):
  // (a0 a1 b0 b1), (a2 a3 b2 b3), (a0 a2 b0 b2), (a1 a3 b1 b3)
  const __m512i low_lanes =
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i high_lanes =
      _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const __m512i even_lanes =
      _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i odd_lanes =
      _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  // (the masked unpacks with every lane on: GCC 12's unmasked ones pass an undefined operand
  // that -Wmaybe-uninitialized reports at -O3)
  constexpr __mmask16 all = 0xFFFF;
  index_t p = 0;
  for (; p + 16 <= kc; p += 16) {
    PRECIS_UNROLL(2)
    for (index_t r0 = 0; r0 < R; r0 += 16) {
      __m512 v[16], t[16];
      PRECIS_UNROLL(16)
      for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(xf + (r0 + i) * xs + p);
      // within each 128-bit lane L: pairs of rows interleaved, then t[4i + j] holds rows
      // 4i..4i+3 at k = 4L + j
      PRECIS_UNROLL(8)
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_maskz_unpacklo_ps(all, v[i], v[i + 1]);
        t[i + 1] = _mm512_maskz_unpackhi_ps(all, v[i], v[i + 1]);
      }
      PRECIS_UNROLL(4)
      for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        v[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        v[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        v[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
      }
      // then, for each j, the lanes of v[j], v[4 + j], v[8 + j], v[12 + j] transposed as a 4 x 4
      // of 128-bit blocks: k = 4L + j, rows 0..15 in order (two-source permutes, one shuffle
      // each, like vshuff32x4)
      PRECIS_UNROLL(4)
      for (int j = 0; j < 4; ++j) {
        const __m512 s0 = _mm512_permutex2var_ps(v[j], low_lanes, v[4 + j]);
        const __m512 s1 = _mm512_permutex2var_ps(v[j], high_lanes, v[4 + j]);
        const __m512 s2 = _mm512_permutex2var_ps(v[8 + j], low_lanes, v[12 + j]);
        const __m512 s3 = _mm512_permutex2var_ps(v[8 + j], high_lanes, v[12 + j]);
        _mm512_storeu_ps(out + (p + j) * R + r0, _mm512_permutex2var_ps(s0, even_lanes, s2));
        _mm512_storeu_ps(out + (p + 4 + j) * R + r0, _mm512_permutex2var_ps(s0, odd_lanes, s2));
        _mm512_storeu_ps(out + (p + 8 + j) * R + r0, _mm512_permutex2var_ps(s1, even_lanes, s3));
        _mm512_storeu_ps(out + (p + 12 + j) * R + r0, _mm512_permutex2var_ps(s1, odd_lanes, s3));
      }
    }
  }
  if (p < kc) spread_panel_32<R>(x + 4 * p, xs, kc - p, panel + 4 * p * R);
}
#endif

/// panel[p * width + r] = x[r * xs + p] for r < rows, p < kc, and 0 for rows <= r < width, over
/// 32-bit elements (x and panel in units of 4 bytes, any alignment): rows dense along k, xs
/// apart, interleaved by k into a panel `width` wide (width >= rows; the padding rows of a
/// partial panel are zeros). Rows go four at a time through a 4 x 4 register transpose (four
/// 16-byte stores per 16 values instead of sixteen scalar ones), then two at a time and one at
/// a time; k's last kc % 4 values one by one. A whole panel of the widths the GEMM's tiles use
/// (6, 12, 16 and 32) takes spread_panel_32, the same moves unrolled (16 and 32 with AVX-512
/// where the CPU has it: spread_panel_32_avx512). Data movement only:
/// every bit pattern is kept.
inline void spread_rows_32(const void* x_, index_t xs, index_t rows, index_t kc, void* panel_, index_t width) {
  const auto* x = static_cast<const unsigned char*>(x_);
  auto* panel = static_cast<unsigned char*>(panel_);
  const auto move = [&](index_t to, index_t from) { std::memcpy(panel + 4 * to, x + 4 * from, 4); };
  const auto zero = [&](index_t p) {  // the padding of k step p
    if (rows < width) std::memset(panel + 4 * (p * width + rows), 0, static_cast<std::size_t>(4 * (width - rows)));
  };
#if PRECIS_X86_SIMD
  if (rows == width) {
    switch (width) {
      case 6: return spread_panel_32<6>(x, xs, kc, panel);
      case 12: return spread_panel_32<12>(x, xs, kc, panel);
      case 16: return cpu_has_avx512f() ? spread_panel_32_avx512<16>(x, xs, kc, panel) : spread_panel_32<16>(x, xs, kc, panel);
      case 32: return cpu_has_avx512f() ? spread_panel_32_avx512<32>(x, xs, kc, panel) : spread_panel_32<32>(x, xs, kc, panel);
      default: break;
    }
  }
  const auto at = [&](index_t i) { return reinterpret_cast<const float*>(x + 4 * i); };
  const auto out = [&](index_t i) { return reinterpret_cast<float*>(panel + 4 * i); };
  index_t p = 0;
  for (; p + 4 <= kc; p += 4) {
    const index_t d = p * width;
    index_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      __m128 r0 = _mm_loadu_ps(at(r * xs + p)), r1 = _mm_loadu_ps(at((r + 1) * xs + p));
      __m128 r2 = _mm_loadu_ps(at((r + 2) * xs + p)), r3 = _mm_loadu_ps(at((r + 3) * xs + p));
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(out(d + r), r0);
      _mm_storeu_ps(out(d + width + r), r1);
      _mm_storeu_ps(out(d + 2 * width + r), r2);
      _mm_storeu_ps(out(d + 3 * width + r), r3);
    }
    if (r + 2 <= rows) {
      const __m128 r0 = _mm_loadu_ps(at(r * xs + p)), r1 = _mm_loadu_ps(at((r + 1) * xs + p));
      const __m128 lo = _mm_unpacklo_ps(r0, r1), hi = _mm_unpackhi_ps(r0, r1);  // (k0 k0' k1 k1'), (k2 ...)
      _mm_storel_pi(reinterpret_cast<__m64*>(out(d + r)), lo);
      _mm_storeh_pi(reinterpret_cast<__m64*>(out(d + width + r)), lo);
      _mm_storel_pi(reinterpret_cast<__m64*>(out(d + 2 * width + r)), hi);
      _mm_storeh_pi(reinterpret_cast<__m64*>(out(d + 3 * width + r)), hi);
      r += 2;
    }
    for (; r < rows; ++r)
      for (index_t t = 0; t < 4; ++t) move(d + t * width + r, r * xs + p + t);
    for (index_t t = 0; t < 4; ++t) zero(p + t);
  }
  for (; p < kc; ++p) {
    for (index_t r = 0; r < rows; ++r) move(p * width + r, r * xs + p);
    zero(p);
  }
#else
  for (index_t p = 0; p < kc; ++p) {
    for (index_t r = 0; r < rows; ++r) move(p * width + r, r * xs + p);
    zero(p);
  }
#endif
}

/// spread_rows_32's interleave for 64-bit elements (fp64 values): panel[p * width + r] =
/// x[r * xs + p] for r < rows, p < kc, and 0 for rows <= r < width, over elements of 8 bytes (x
/// and panel in those units, any alignment). Rows two at a time through 2 x 2 register
/// transposes (SSE2, every x86-64 CPU), k two at a time: per two values two loads, two
/// shuffles and two stores, where the loop it replaces stored each value on its own, a panel
/// row apart (on a 2-core Xeon that loop was half the time of an fp64 product of 10 columns,
/// docs/benchmarks.md). Data movement only: every bit pattern is kept.
inline void spread_rows_64(const void* x_, index_t xs, index_t rows, index_t kc, void* panel_,
                           index_t width) {
  const auto* x = static_cast<const unsigned char*>(x_);
  auto* panel = static_cast<unsigned char*>(panel_);
  const auto move = [&](index_t to, index_t from) { std::memcpy(panel + 8 * to, x + 8 * from, 8); };
  const auto zero = [&](index_t to, index_t count) {
    if (count > 0) std::memset(panel + 8 * to, 0, static_cast<std::size_t>(8 * count));
  };
  index_t p = 0;
#if PRECIS_X86_SIMD
  const double* const xd = reinterpret_cast<const double*>(x);
  double* const out = reinterpret_cast<double*>(panel);
  for (; p + 2 <= kc; p += 2) {
    double* const o = out + p * width;
    index_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      const __m128d a = _mm_loadu_pd(xd + r * xs + p), b = _mm_loadu_pd(xd + (r + 1) * xs + p);
      _mm_storeu_pd(o + r, _mm_unpacklo_pd(a, b));          // k = p: rows r and r + 1
      _mm_storeu_pd(o + width + r, _mm_unpackhi_pd(a, b));  // k = p + 1
    }
    for (; r < rows; ++r) {
      move(p * width + r, r * xs + p);
      move((p + 1) * width + r, r * xs + p + 1);
    }
    zero(p * width + rows, width - rows);
    zero((p + 1) * width + rows, width - rows);
  }
#endif
  for (; p < kc; ++p) {
    for (index_t r = 0; r < rows; ++r) move(p * width + r, r * xs + p);
    zero(p * width + rows, width - rows);
  }
}

}  // namespace precis::detail
