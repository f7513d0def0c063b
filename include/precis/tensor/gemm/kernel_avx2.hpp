// AVX2 + FMA register-tile kernels for the blocked GEMM: a 6 x 16 fp32 tile (12 ymm
// accumulators, 2 for B, 1 broadcast of A: 15 of the 16 ymm registers) and a 6 x 8 fp64 tile of
// the same structure. Two FMA pipes with 4-cycle latency need >= 8 independent accumulators;
// 12 keep both pipes busy. Compiled with target attributes and chosen at run time, so
// consumers need no -march flag.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <cmath>
#include <cpuid.h>
#include <immintrin.h>

#include "precis/format/convert_x86.hpp"
#include "precis/tensor/shape.hpp"

namespace precis::detail {

/// AVX2 (with F16C) and FMA usable.
inline bool cpu_has_avx2_fma() noexcept {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!cpu_has_avx2_f16c() || !__get_cpuid(1, &a, &b, &c, &d)) return false;
    return ((c >> 12) & 1u) != 0;
  }();
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

/// C[0:mr, 0:nr] = alpha * A_panel * B_panel (+ beta * C), kc steps; A_panel is 6 x kc
/// (interleaved by k), B_panel kc x (2 * lanes), both zero-padded to the full tile.
/// beta == 0 does not read C (BLAS semantics: C may hold NaN).
template <class T>
PRECIS_TARGET_AVX2 void avx2_tile_kernel(index_t kc, const T* __restrict a, const T* __restrict b,
                                         T* c, index_t rs_c, index_t cs_c, index_t mr, index_t nr,
                                         T alpha, T beta) {
  using W = avx2_vec<T>;
  using V = typename W::V;
  constexpr int L = W::lanes;
  for (int i = 0; i < 6; ++i) _mm_prefetch(reinterpret_cast<const char*>(c + i * rs_c), _MM_HINT_T0);
  V c00 = W::zero(), c01 = W::zero(), c10 = W::zero(), c11 = W::zero(), c20 = W::zero(),
    c21 = W::zero(), c30 = W::zero(), c31 = W::zero(), c40 = W::zero(), c41 = W::zero(),
    c50 = W::zero(), c51 = W::zero();
  for (index_t p = 0; p < kc; ++p) {
    const V b0 = W::load(b), b1 = W::load(b + L);
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
    b += 2 * L;
  }
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

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
