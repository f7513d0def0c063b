// AVX-512F register-tile kernels for the blocked GEMM: a 12 x 32 fp32 tile and a 12 x 16 fp64
// tile (24 zmm accumulators, 2 for B, 1 broadcast of A: 27 of the 32 zmm registers). Two FMA
// pipes with 4-cycle latency need >= 8 independent accumulators; 24 also hide the loads.
//
// Each accumulator lane computes its C entry as the same chain of fused multiply-adds, in the
// same k order, as the AVX2 6 x 16 tile, and the blocked driver cuts K into the same blocks
// (kc = 256), so the two kernels give bit-identical results: the tile shape changes which
// entries share a register, not how any entry is summed. Compiled with target attributes and
// chosen at run time (precis::gemm_isa), so consumers need no -march flag.
//
// For 16-bit accumulators (the "-true" policies) a 6 x 32 tile emulates fp16 or bf16 arithmetic
// in fp32 lanes as the AVX2 6 x 16 one does (kernel_avx2.hpp), twice as wide.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>

#include "precis/tensor/gemm/kernel_avx2.hpp"


namespace precis::detail {

template <class T>
struct avx512_vec;

template <>
struct avx512_vec<float> {
  using V = __m512;
  static constexpr int lanes = 16;
  PRECIS_TARGET_AVX512 static V zero() { return _mm512_setzero_ps(); }
  PRECIS_TARGET_AVX512 static V load(const float* p) { return _mm512_load_ps(p); }
  PRECIS_TARGET_AVX512 static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  PRECIS_TARGET_AVX512 static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  PRECIS_TARGET_AVX512 static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  PRECIS_TARGET_AVX512 static V set1(float x) { return _mm512_set1_ps(x); }
  PRECIS_TARGET_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  PRECIS_TARGET_AVX512 static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
};

template <>
struct avx512_vec<double> {
  using V = __m512d;
  static constexpr int lanes = 8;
  PRECIS_TARGET_AVX512 static V zero() { return _mm512_setzero_pd(); }
  PRECIS_TARGET_AVX512 static V load(const double* p) { return _mm512_load_pd(p); }
  PRECIS_TARGET_AVX512 static V loadu(const double* p) { return _mm512_loadu_pd(p); }
  PRECIS_TARGET_AVX512 static void storeu(double* p, V v) { _mm512_storeu_pd(p, v); }
  PRECIS_TARGET_AVX512 static V broadcast(const double* p) { return _mm512_set1_pd(*p); }
  PRECIS_TARGET_AVX512 static V set1(double x) { return _mm512_set1_pd(x); }
  PRECIS_TARGET_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  PRECIS_TARGET_AVX512 static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
};

/// Line l (0 <= l < 2 mr) of the mr x 128-byte block of C that a 12-row tile writes, rows dense
/// in C: row l / 2, its first line or (l odd) the one holding its last element.
template <class T>
inline const char* c_tile_line(const T* c, index_t rs_c, index_t l) {
  constexpr index_t last = 128 / index_t{sizeof(T)} - 1;
  return reinterpret_cast<const char*>(c + (l >> 1) * rs_c + (l & 1) * last);
}

/// How many k steps apart a 12-row tile issues its `c_lines` C prefetches, given `steps` steps
/// to spread them over: as far apart as fits, at most 8. A C line that misses every cache takes
/// longer than a few steps to arrive, and more of them in flight than the core's line-fill
/// buffers hold stall the loop. Before, the tiles issued all 24 at once, then one a step; on a
/// 2-core KVM Xeon this spacing made the fp32 GEMM 5-12% faster at 2048^3 (docs/benchmarks.md).
/// Issuing them late in the tile instead, closer to the epilogue, measured 0.8x: they arrive too
/// late. (The AVX2 tile, first tuned on Zen 3 and Zen 4, issues its 6 rows at once.)
inline index_t c_prefetch_gap(index_t steps, index_t c_lines) {
  return std::clamp<index_t>(steps / std::max<index_t>(c_lines, 1), 1, 8);
}

/// C[0:mr, 0:nr] = alpha * acc (+ beta * C): the 12 x (2 * lanes) accumulator tile written out,
/// one multiply and (beta != 0) one fma per entry. beta == 0 does not read C.
template <class T>
PRECIS_TARGET_AVX512 inline void avx512_store_tile(const typename avx512_vec<T>::V (&acc)[12][2], T* c, index_t rs_c,
                                                   index_t cs_c, index_t mr, index_t nr, T alpha, T beta) {
  using W = avx512_vec<T>;
  using V = typename W::V;
  constexpr int L = W::lanes;
  constexpr int R = 12;
  const V va = W::set1(alpha);
  if (mr == R && nr == 2 * L && cs_c == 1) {
    const bool read_c = beta != T(0);
    const V vb = W::set1(beta);
    PRECIS_UNROLL(12)
    for (int i = 0; i < R; ++i) {
      T* ci = c + i * rs_c;
      V t0 = W::mul(va, acc[i][0]), t1 = W::mul(va, acc[i][1]);
      if (read_c) {
        t0 = W::fma(vb, W::loadu(ci), t0);
        t1 = W::fma(vb, W::loadu(ci + L), t1);
      }
      W::storeu(ci, t0);
      W::storeu(ci + L, t1);
    }
  } else {
    alignas(64) T ab[std::size_t{2} * R * L];
    PRECIS_UNROLL(12)
    for (int i = 0; i < R; ++i) {
      W::storeu(ab + i * 2 * L, acc[i][0]);
      W::storeu(ab + i * 2 * L + L, acc[i][1]);
    }
    tile_epilogue(ab, 2 * L, c, rs_c, cs_c, mr, nr, alpha, beta);
  }
}

/// One k step of the 12 x (2 * lanes) tile: a row of B (two vectors) times each of A's 12
/// values, added into the accumulators; a and b move on to the next step.
template <class T>
PRECIS_TARGET_AVX512 __attribute__((always_inline)) inline void avx512_tile_step(typename avx512_vec<T>::V (&acc)[12][2],
                                                                               const T* __restrict& a, const T* __restrict& b, index_t ldb) {
  using W = avx512_vec<T>;
  using V = typename W::V;
  const V b0 = W::loadu(b), b1 = W::loadu(b + W::lanes);
  if constexpr (sizeof(T) == 8) {
    // fp64: A's panel streams from L2 at 96 bytes a step (fp32: 48), more than the core's
    // own prefetcher keeps ahead of; fetching its lines 8 steps early made the fp64 GEMM 4-5%
    // faster on a 2-core AMX Xeon (docs/benchmarks.md), and did nothing for fp32
    const char* ahead = reinterpret_cast<const char*>(a + 12 * 8);
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
  }
  PRECIS_UNROLL(12)
  for (int i = 0; i < 12; ++i) {
    const V ar = W::broadcast(a + i);
    acc[i][0] = W::fma(ar, b0, acc[i][0]);
    acc[i][1] = W::fma(ar, b1, acc[i][1]);
  }
  a += 12;
  b += ldb;
}

/// C[0:mr, 0:nr] = alpha * A_panel * B (+ beta * C), kc steps; A_panel is 12 x kc (interleaved
/// by k), zero-padded to the full tile; B's kc rows of 2 * lanes columns lie ldb apart: a packed,
/// zero-padded panel (ldb = 2 * lanes, 64-byte aligned) or, read where it lies, B itself when
/// its rows hold the tile's whole width (kern.direct in gemm.hpp). beta == 0 does not read C.
///
/// Two kinds of prefetch ride on the k steps, so that they never queue up behind each other:
/// first the tile's C lines, which the epilogue will read or write, into L1, spaced by
/// c_prefetch_gap over the steps that the second kind leaves; then, one a step, `next_lines`
/// 64-byte lines from `next` into L2: the driver's share of the B panel that the tiles after
/// this one will read, which otherwise comes from L3 once the packed B block outgrows L2
/// (docs/benchmarks.md).
template <class T>
PRECIS_TARGET_AVX512 __attribute__((always_inline)) inline void avx512_tile_core(
    index_t kc, const T* __restrict a, const T* __restrict b, index_t ldb, T* c, index_t rs_c, index_t cs_c,
    index_t mr, index_t nr, T alpha, T beta, const char* next, index_t next_lines) {
  using W = avx512_vec<T>;
  typename W::V acc[12][2];
  PRECIS_UNROLL(12)
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = W::zero();
  index_t p = 0;
  if (cs_c == 1) {  // C's rows dense: each row's 2 * lanes values span 2 lines (128 bytes)
    const index_t c_lines = 2 * mr, gap = c_prefetch_gap(kc - next_lines, c_lines);
    for (index_t q = 0; q < c_lines && p + gap <= kc; ++q) {
      _mm_prefetch(c_tile_line(c, rs_c, q), _MM_HINT_T0);
      for (index_t r = 0; r < gap; ++r) avx512_tile_step<T>(acc, a, b, ldb);
      p += gap;
    }
  }
  for (index_t q = 0; q < next_lines && p < kc; ++q, ++p) {
    _mm_prefetch(next + q * 64, _MM_HINT_T1);
    avx512_tile_step<T>(acc, a, b, ldb);
  }
  for (; p < kc; ++p) avx512_tile_step<T>(acc, a, b, ldb);
  avx512_store_tile<T>(acc, c, rs_c, cs_c, mr, nr, alpha, beta);
}

/// The tile reading B's rows ldb apart (avx512_tile_core without the L2 prefetch).
template <class T>
PRECIS_TARGET_AVX512 void avx512_tile_kernel_ldb(index_t kc, const T* __restrict a, const T* __restrict b, index_t ldb,
                                                 T* c, index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha,
                                                 T beta) {
  avx512_tile_core(kc, a, b, ldb, c, rs_c, cs_c, mr, nr, alpha, beta, nullptr, 0);
}

/// The tile on packed panels: A_panel 12 x kc, B_panel kc x (2 * lanes), prefetching
/// next_lines lines from next into L2 (avx512_tile_core).
template <class T>
PRECIS_TARGET_AVX512 void avx512_tile_kernel_next(index_t kc, const T* __restrict a, const T* __restrict b, T* c,
                                                  index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha, T beta,
                                                  const T* next, index_t next_lines) {
  avx512_tile_core(kc, a, b, index_t{2 * avx512_vec<T>::lanes}, c, rs_c, cs_c, mr, nr, alpha, beta,
                   reinterpret_cast<const char*>(next), next_lines);
}

/// The tile on packed panels: A_panel 12 x kc, B_panel kc x (2 * lanes).
template <class T>
PRECIS_TARGET_AVX512 void avx512_tile_kernel(index_t kc, const T* __restrict a, const T* __restrict b, T* c,
                                             index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha, T beta) {
  avx512_tile_core(kc, a, b, index_t{2 * avx512_vec<T>::lanes}, c, rs_c, cs_c, mr, nr, alpha, beta, nullptr, 0);
}

/// fp32 lanes, 16 to a zmm register, holding values of a 16-bit format (the AVX-512 form of
/// avx2_narrow): load, broadcast and round to the format, the same roundings bit for bit.
template <class T>
struct avx512_narrow;

// Both use the masked forms of the intrinsics with every lane on: GCC 12's unmasked ones trip
// -Wsign-conversion at -O0 (a (__mmask16)-1 in a macro) or -Wmaybe-uninitialized at -O3 (an
// undefined pass-through operand).
inline constexpr __mmask16 narrow_all_lanes = 0xFFFF;

template <>
struct avx512_narrow<half> {
  static constexpr __mmask16 all = narrow_all_lanes;
  static constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  PRECIS_TARGET_AVX512 static __m512 widen(__m256i v) { return _mm512_maskz_cvtph_ps(all, v); }
  PRECIS_TARGET_AVX512 static __m256i narrow(__m512 x) { return _mm512_maskz_cvtps_ph(all, x, nearest); }
  PRECIS_TARGET_AVX512 static void load32(const half* p, __m512& lo, __m512& hi) {
    lo = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  PRECIS_TARGET_AVX512 static __m512 broadcast(const half* p) {
    std::uint16_t bits;
    std::memcpy(&bits, p, 2);
    return _mm512_set1_ps(_cvtsh_ss(bits));
  }
  /// Round to nearest even into fp16 (overflow to infinity, subnormals kept), back in fp32.
  PRECIS_TARGET_AVX512 static __m512 round(__m512 x) { return widen(narrow(x)); }
  PRECIS_TARGET_AVX512 static __m512 round_step(__m512 x) { return round(x); }
  /// 32 lanes that already hold fp16 values, stored as fp16 (exact).
  PRECIS_TARGET_AVX512 static void store32(half* p, __m512 lo, __m512 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), narrow(hi));
  }
};

template <>
struct avx512_narrow<bfloat16> {
  static constexpr __mmask16 all = narrow_all_lanes;
  PRECIS_TARGET_AVX512 static __m512 widen(__m256i v) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, v), 16));
  }
  PRECIS_TARGET_AVX512 static __m256i narrow(__m512 x) {  // x holds bf16 values: the high halves
    return _mm512_maskz_cvtepi32_epi16(all, _mm512_maskz_srli_epi32(all, _mm512_castps_si512(x), 16));
  }
  PRECIS_TARGET_AVX512 static void load32(const bfloat16* p, __m512& lo, __m512& hi) {
    lo = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  PRECIS_TARGET_AVX512 static __m512 broadcast(const bfloat16* p) {
    std::uint16_t bits;
    std::memcpy(&bits, p, 2);
    return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(std::uint32_t{bits} << 16)));
  }
  /// Round to nearest even into bf16 as Eigen's float_to_bfloat16_rtne does (a NaN becomes the
  /// quiet NaN 0x7fc0 with its sign), back in fp32. Not vcvtneps2bf16: it flushes subnormals.
  PRECIS_TARGET_AVX512 static __m512 round(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                                       _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    const __m512i qnan = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0x80000000u))),
                                         _mm512_set1_epi32(0x7fc00000));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, qnan));
  }
  /// round() for the kernel's steps, whose NaNs all come from bf16 values or arithmetic on them
  /// (low 16 bits zero, x86's default NaN included): adding at most 0x8000 to such a NaN cannot
  /// carry out of its low half, so the sum stays a NaN and only its payload can differ from
  /// round()'s 0x7fc0, which the epilogue's round() restores. Four fewer instructions a step.
  PRECIS_TARGET_AVX512 static __m512 round_step(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 16), _mm512_set1_epi32(1));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                                                _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  /// 32 lanes that already hold bf16 values (low 16 bits zero), stored as bf16.
  PRECIS_TARGET_AVX512 static void store32(bfloat16* p, __m512 lo, __m512 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), narrow(hi));
  }
};

/// The AVX-512 form of avx2_narrow_tile_kernel: a 6 x 32 tile (12 zmm accumulators; the two
/// roundings per step are the work, not the loads), each C entry the same chain of roundings in
/// the same k order, over the same K blocks (kc = 128), so bit-identical to it and to the
/// portable kernel. A_panel is 6 x kc (interleaved by k), B_panel kc x 32.
template <class T>
PRECIS_TARGET_AVX512 void avx512_narrow_tile_kernel(index_t kc, const T* __restrict a, const T* __restrict b, T* c,
                                                    index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha, T beta) {
  using N = avx512_narrow<T>;
  constexpr int R = 6;
  __m512 acc[R][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  for (index_t p = 0; p < kc; ++p) {
    __m512 b0, b1;
    N::load32(b, b0, b1);
    PRECIS_UNROLL(6)
    for (int i = 0; i < R; ++i) {
      const __m512 ar = N::broadcast(a + i);
      acc[i][0] = N::round_step(_mm512_add_ps(acc[i][0], N::round_step(_mm512_mul_ps(ar, b0))));
      acc[i][1] = N::round_step(_mm512_add_ps(acc[i][1], N::round_step(_mm512_mul_ps(ar, b1))));
    }
    a += R;
    b += 32;
  }
  if (mr == R && nr == 32 && cs_c == 1) {
    // t = round(alpha ab), then c = t or round(t + round(beta c)), in the lanes
    const __m512 va = _mm512_set1_ps(static_cast<float>(alpha)), vb = _mm512_set1_ps(static_cast<float>(beta));
    const bool read_c = beta != T(0);
    for (int i = 0; i < R; ++i) {
      T* ci = c + i * rs_c;
      __m512 t0 = N::round(_mm512_mul_ps(va, acc[i][0])), t1 = N::round(_mm512_mul_ps(va, acc[i][1]));
      if (read_c) {
        __m512 c0, c1;
        N::load32(ci, c0, c1);
        t0 = N::round(_mm512_add_ps(t0, N::round(_mm512_mul_ps(vb, c0))));
        t1 = N::round(_mm512_add_ps(t1, N::round(_mm512_mul_ps(vb, c1))));
      }
      N::store32(ci, t0, t1);
    }
    return;
  }
  alignas(64) float ab[R * 32];
  for (int i = 0; i < R; ++i) {
    _mm512_store_ps(ab + i * 32, acc[i][0]);
    _mm512_store_ps(ab + i * 32 + 16, acc[i][1]);
  }
  narrow_tile_epilogue(ab, 32, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
