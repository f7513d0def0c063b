// AVX-512F register-tile kernels for the blocked GEMM: a 12 x 32 fp32 tile and a 12 x 16 fp64
// tile (24 zmm accumulators, 2 for B, 1 broadcast of A: 27 of the 32 zmm registers). Two FMA
// pipes with 4-cycle latency need >= 8 independent accumulators; 24 also hide the loads.
//
// Each accumulator lane computes its C entry as the same chain of fused multiply-adds, in the
// same k order, as the AVX2 6 x 16 tile, and the blocked driver cuts K into the same blocks
// (kc = 256), so the two kernels give bit-identical results: the tile shape changes which
// entries share a register, not how any entry is summed. Compiled with target attributes and
// chosen at run time (precis::gemm_isa), so consumers need no -march flag.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <cpuid.h>
#include <immintrin.h>

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
#pragma GCC unroll 12
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
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      W::storeu(ab + i * 2 * L, acc[i][0]);
      W::storeu(ab + i * 2 * L + L, acc[i][1]);
    }
    tile_epilogue(ab, 2 * L, c, rs_c, cs_c, mr, nr, alpha, beta);
  }
}

/// C[0:mr, 0:nr] = alpha * A_panel * B_panel (+ beta * C), kc steps; A_panel is 12 x kc
/// (interleaved by k), B_panel kc x (2 * lanes), both zero-padded to the full tile, B's panel
/// 64-byte aligned. beta == 0 does not read C.
template <class T>
PRECIS_TARGET_AVX512 void avx512_tile_kernel(index_t kc, const T* __restrict a, const T* __restrict b, T* c,
                                             index_t rs_c, index_t cs_c, index_t mr, index_t nr, T alpha, T beta) {
  using W = avx512_vec<T>;
  using V = typename W::V;
  constexpr int L = W::lanes;
  constexpr int R = 12;
  V acc[R][2];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = W::zero();
  for (index_t p = 0; p < kc; ++p) {
    const V b0 = W::load(b), b1 = W::load(b + L);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const V ar = W::broadcast(a + i);
      acc[i][0] = W::fma(ar, b0, acc[i][0]);
      acc[i][1] = W::fma(ar, b1, acc[i][1]);
    }
    a += R;
    b += 2 * L;
  }
  avx512_store_tile<T>(acc, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
