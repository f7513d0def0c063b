// AVX2 + FMA register-tile kernels for the blocked GEMM: a 6 x 16 fp32 tile (12 ymm
// accumulators, 2 for B, 1 broadcast of A: 15 of the 16 ymm registers) and a 6 x 8 fp64 tile of
// the same structure. Two FMA pipes with 4-cycle latency need >= 8 independent accumulators;
// 12 keep both pipes busy. Compiled with target attributes and chosen at run time, so
// consumers need no -march flag.
//
// For 16-bit accumulators (the "-true" policies' GEMM: every product and every partial sum
// rounded to fp16 or bf16) a 6 x 16 tile emulates that arithmetic in fp32 lanes, bit-identical
// to the portable kernel: a product of two 16-bit values is exact in fp32 and is then rounded
// once to the format, and an fp32 sum of two values of the format rounded to it equals the
// correctly rounded sum (p = 24 >= 2 t + 2 for t = 11 and t = 8; Higham 2002, 2.4), which is
// what the format's own operator+ computes.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <cmath>
#include <cpuid.h>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#include "precis/format/bfloat16.hpp"
#include "precis/format/half.hpp"

#include "precis/format/convert_x86.hpp"
#include "precis/tensor/shape.hpp"

namespace precis::detail {

/// AVX2 (with F16C) and FMA usable.
inline bool cpu_has_avx2_fma() {
  static const bool ok = cpu_has_avx2_f16c() && ((cpuid(1)[2] >> 12) & 1u) != 0;
  return ok;
}

template <class T>
struct avx2_vec;

template <>
struct avx2_vec<float> {
  using V = __m256;
  static constexpr int lanes = 8;
  PRECIS_TARGET_AVX2 static V zero() { return _mm256_setzero_ps(); }
  PRECIS_TARGET_AVX2 static V load(const float* p) { return _mm256_load_ps(p); }
  PRECIS_TARGET_AVX2 static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  PRECIS_TARGET_AVX2 static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  PRECIS_TARGET_AVX2 static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  PRECIS_TARGET_AVX2 static V set1(float x) { return _mm256_set1_ps(x); }
  PRECIS_TARGET_AVX2 static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  PRECIS_TARGET_AVX2 static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
};

template <>
struct avx2_vec<double> {
  using V = __m256d;
  static constexpr int lanes = 4;
  PRECIS_TARGET_AVX2 static V zero() { return _mm256_setzero_pd(); }
  PRECIS_TARGET_AVX2 static V load(const double* p) { return _mm256_load_pd(p); }
  PRECIS_TARGET_AVX2 static V loadu(const double* p) { return _mm256_loadu_pd(p); }
  PRECIS_TARGET_AVX2 static void storeu(double* p, V v) { _mm256_storeu_pd(p, v); }
  PRECIS_TARGET_AVX2 static V broadcast(const double* p) { return _mm256_broadcast_sd(p); }
  PRECIS_TARGET_AVX2 static V set1(double x) { return _mm256_set1_pd(x); }
  PRECIS_TARGET_AVX2 static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  PRECIS_TARGET_AVX2 static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
};

/// The scalar epilogue c = alpha * ab (+ beta * c), with the same single fma as the vector one.
template <class T>
inline void tile_epilogue(const T* ab, index_t ab_ld, T* c, index_t rs_c, index_t cs_c, index_t mr,
                          index_t nr, T alpha, T beta) {
  for (index_t i = 0; i < mr; ++i) {
    for (index_t j = 0; j < nr; ++j) {
      T& cij = c[i * rs_c + j * cs_c];
      const T t = alpha * ab[i * ab_ld + j];
      cij = beta == T(0) ? t : std::fma(beta, cij, t);
    }
  }
}

/// C[0:mr, 0:nr] = alpha * A_panel * B (+ beta * C), kc steps; A_panel is 6 x kc (interleaved
/// by k), zero-padded to the full tile; B's kc rows of 2 * lanes columns lie ldb apart: a packed,
/// zero-padded panel (ldb = 2 * lanes) or, read where it lies, B itself when its rows hold the
/// tile's whole width (kern.direct in gemm.hpp). beta == 0 does not read C (BLAS semantics: C
/// may hold NaN).
template <class T>
PRECIS_TARGET_AVX2 void avx2_tile_kernel_ldb(index_t kc, const T* __restrict a, const T* __restrict b, index_t ldb,
                                             T* c, index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha,
                                             T beta) {
  using W = avx2_vec<T>;
  using V = typename W::V;
  constexpr int L = W::lanes;
  // alpha and beta wait in memory while the loop runs: its 15 vector registers and these two
  // are one more than x86-64 has, and GCC at -O2 otherwise spills an accumulator inside the loop
  // (a store and a reload on its chain of FMAs every step: the whole kernel 1.7x slower)
  volatile T epilogue[2] = {alpha, beta};
  for (int i = 0; i < 6; ++i) _mm_prefetch(reinterpret_cast<const char*>(c + i * rs_c), _MM_HINT_T0);
  V c00 = W::zero(), c01 = W::zero(), c10 = W::zero(), c11 = W::zero(), c20 = W::zero(),
    c21 = W::zero(), c30 = W::zero(), c31 = W::zero(), c40 = W::zero(), c41 = W::zero(),
    c50 = W::zero(), c51 = W::zero();
  for (index_t p = 0; p < kc; ++p) {
    const V b0 = W::loadu(b), b1 = W::loadu(b + L);
    V ar = W::broadcast(a + 0);
    c00 = W::fma(ar, b0, c00);
    c01 = W::fma(ar, b1, c01);
    ar = W::broadcast(a + 1);
    c10 = W::fma(ar, b0, c10);
    c11 = W::fma(ar, b1, c11);
    ar = W::broadcast(a + 2);
    c20 = W::fma(ar, b0, c20);
    c21 = W::fma(ar, b1, c21);
    ar = W::broadcast(a + 3);
    c30 = W::fma(ar, b0, c30);
    c31 = W::fma(ar, b1, c31);
    ar = W::broadcast(a + 4);
    c40 = W::fma(ar, b0, c40);
    c41 = W::fma(ar, b1, c41);
    ar = W::broadcast(a + 5);
    c50 = W::fma(ar, b0, c50);
    c51 = W::fma(ar, b1, c51);
    a += 6;
    b += ldb;
  }
  alpha = epilogue[0];
  beta = epilogue[1];
  const V va = W::set1(alpha);
  const V rows[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (mr == 6 && nr == 2 * L && cs_c == 1) {
    const bool read_c = beta != T(0);
    const V vb = W::set1(beta);
    for (int i = 0; i < 6; ++i) {
      T* ci = c + i * rs_c;
      V t0 = W::mul(va, rows[i][0]), t1 = W::mul(va, rows[i][1]);
      if (read_c) {
        t0 = W::fma(vb, W::loadu(ci), t0);
        t1 = W::fma(vb, W::loadu(ci + L), t1);
      }
      W::storeu(ci, t0);
      W::storeu(ci + L, t1);
    }
  } else {
    alignas(32) T ab[std::size_t{12} * L];
    for (int i = 0; i < 6; ++i) {
      W::storeu(ab + i * 2 * L, rows[i][0]);
      W::storeu(ab + i * 2 * L + L, rows[i][1]);
    }
    tile_epilogue(ab, 2 * L, c, rs_c, cs_c, mr, nr, alpha, beta);
  }
}

/// The tile on packed panels: A_panel 6 x kc, B_panel kc x (2 * lanes).
template <class T>
PRECIS_TARGET_AVX2 void avx2_tile_kernel(index_t kc, const T* __restrict a, const T* __restrict b, T* c, index_t rs_c,
                                         index_t cs_c, index_t mr, index_t nr, T alpha, T beta) {
  avx2_tile_kernel_ldb(kc, a, b, index_t{2 * avx2_vec<T>::lanes}, c, rs_c, cs_c, mr, nr, alpha, beta);
}

/// fp32 lanes holding values of a 16-bit format: load, broadcast and round to the format.
template <class T>
struct avx2_narrow;

template <>
struct avx2_narrow<half> {
  PRECIS_TARGET_AVX2 static void load16(const half* p, __m256& lo, __m256& hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
  }
  PRECIS_TARGET_AVX2 static __m256 broadcast(const half* p) {
    std::uint16_t bits;
    std::memcpy(&bits, p, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(bits)));
  }
  /// Round to nearest even into fp16 (overflow to infinity, subnormals kept), back in fp32.
  PRECIS_TARGET_AVX2 static __m256 round(__m256 x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  PRECIS_TARGET_AVX2 static __m256 round_step(__m256 x) { return round(x); }
  /// 16 lanes that already hold fp16 values, stored as fp16 (exact).
  PRECIS_TARGET_AVX2 static void store16(half* p, __m256 lo, __m256 hi) {
    const __m128i a = _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i b = _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_set_m128i(b, a));
  }
};

template <>
struct avx2_narrow<bfloat16> {
  PRECIS_TARGET_AVX2 static void load16(const bfloat16* p, __m256& lo, __m256& hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
  }
  PRECIS_TARGET_AVX2 static __m256 broadcast(const bfloat16* p) {
    std::uint16_t bits;
    std::memcpy(&bits, p, 2);
    return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(std::uint32_t{bits} << 16)));
  }
  /// Round to nearest even into bf16 as Eigen's float_to_bfloat16_rtne does (a NaN becomes the
  /// quiet NaN 0x7fc0 with its sign), back in fp32.
  PRECIS_TARGET_AVX2 static __m256 round(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
                                       _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    const __m256i qnan = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000u))),
                                         _mm256_set1_epi32(0x7fc00000));
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan), nan);
  }
  /// round() for the kernel's steps, whose NaNs all come from bf16 values or arithmetic on them
  /// (low 16 bits zero, x86's default NaN included): adding at most 0x8000 to such a NaN cannot
  /// carry out of its low half, so the sum stays a NaN and only its payload can differ from
  /// round()'s 0x7fc0, which the epilogue's round() restores. Four fewer instructions a step.
  PRECIS_TARGET_AVX2 static __m256 round_step(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
                                                _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  /// 16 lanes that already hold bf16 values (low 16 bits zero), stored as bf16.
  PRECIS_TARGET_AVX2 static void store16(bfloat16* p, __m256 lo, __m256 hi) {
    const __m256i a = _mm256_srli_epi32(_mm256_castps_si256(lo), 16), b = _mm256_srli_epi32(_mm256_castps_si256(hi), 16);
    // packus works within 128-bit lanes: [a0..3 b0..3 a4..7 b4..7] -> reorder the 64-bit quarters
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  }
};

/// A partial tile's epilogue in T's own arithmetic: c = alpha ab, or alpha ab + beta c, each
/// operation rounded to T (ab: fp32 lanes holding values of T, rows ld apart).
template <class T>
inline void narrow_tile_epilogue(const float* ab, index_t ld, T* c, index_t rs_c, index_t cs_c, index_t mr, index_t nr,
                                 T alpha, T beta) {
  for (index_t i = 0; i < mr; ++i) {
    for (index_t j = 0; j < nr; ++j) {
      T& cij = c[i * rs_c + j * cs_c];
      const T t = alpha * T(ab[i * ld + j]);  // T(...) is exact: the lanes hold values of T
      cij = beta == T(0) ? t : t + beta * cij;
    }
  }
}

/// C[0:mr, 0:nr] = alpha * A_panel * B_panel (+ beta * C) in the arithmetic of the 16-bit T:
/// ab = round(ab + round(a * b)) for each k, then the portable kernel's epilogue in T. A_panel
/// is 6 x kc (interleaved by k), B_panel kc x 16.
template <class T>
PRECIS_TARGET_AVX2 void avx2_narrow_tile_kernel(index_t kc, const T* __restrict a, const T* __restrict b, T* c,
                                                index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha, T beta) {
  using N = avx2_narrow<T>;
  __m256 acc[6][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
  for (index_t p = 0; p < kc; ++p) {
    __m256 b0, b1;
    N::load16(b, b0, b1);
    for (int i = 0; i < 6; ++i) {
      const __m256 ar = N::broadcast(a + i);
      acc[i][0] = N::round_step(_mm256_add_ps(acc[i][0], N::round_step(_mm256_mul_ps(ar, b0))));
      acc[i][1] = N::round_step(_mm256_add_ps(acc[i][1], N::round_step(_mm256_mul_ps(ar, b1))));
    }
    a += 6;
    b += 16;
  }
  if (mr == 6 && nr == 16 && cs_c == 1) {
    // the portable epilogue's roundings, in the lanes: t = round(alpha ab), then
    // c = t or round(t + round(beta c))
    const __m256 va = _mm256_set1_ps(static_cast<float>(alpha)), vb = _mm256_set1_ps(static_cast<float>(beta));
    const bool read_c = beta != T(0);
    for (int i = 0; i < 6; ++i) {
      T* ci = c + i * rs_c;
      __m256 t0 = N::round(_mm256_mul_ps(va, acc[i][0])), t1 = N::round(_mm256_mul_ps(va, acc[i][1]));
      if (read_c) {
        __m256 c0, c1;
        N::load16(ci, c0, c1);
        t0 = N::round(_mm256_add_ps(t0, N::round(_mm256_mul_ps(vb, c0))));
        t1 = N::round(_mm256_add_ps(t1, N::round(_mm256_mul_ps(vb, c1))));
      }
      N::store16(ci, t0, t1);
    }
    return;
  }
  alignas(32) float ab[6 * 16];
  for (int i = 0; i < 6; ++i) {
    _mm256_store_ps(ab + i * 16, acc[i][0]);
    _mm256_store_ps(ab + i * 16 + 8, acc[i][1]);
  }
  narrow_tile_epilogue(ab, 16, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
