// Small fp32 / fp64 products (a few thousand multiply-adds, K within one of the tiles' K blocks:
// attention's per-head products, 16 x 16 x 16): C = alpha A B + beta C straight from A where it
// lies and from B's rows (B itself when they are dense and whole vectors wide, else a padded
// copy), in register blocks of 4 rows x 2 vectors, AVX2 + FMA. The blocked driver's packing, its
// 12 x 32 tile and its per-call set-up cost several times the arithmetic at these sizes
// (docs/benchmarks.md).
//
// Each C entry is one chain of fused multiply-adds from zero in k order, then alpha * ab, or
// fma(beta, c, alpha * ab): the chain the AVX2 and AVX-512 tiles compute for a K of one block,
// so the bits are the same whichever path runs (tests/tensor/gemm_test.cpp).
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <immintrin.h>

#include "precis/tensor/gemm/kernel_avx2.hpp"
#include "precis/tensor/shape.hpp"

namespace precis::detail {

/// C[i0:i0+rows, j0:j0+cols] from a block of up to 4 x (V lanes x W) accumulators.
template <class T, std::size_t W>
PRECIS_TARGET_AVX2 inline void small_store(const typename avx2_vec<T>::V (&acc)[4][W], T* c, index_t rs_c,
                                           index_t cs_c, index_t rows, index_t cols, T alpha, T beta) {
  using X = avx2_vec<T>;
  constexpr index_t L = X::lanes, WL = static_cast<index_t>(W) * L;
  if (cs_c == 1 && cols == WL) {
    const auto va = X::set1(alpha), vb = X::set1(beta);
    PRECIS_UNROLL(4)
    for (std::size_t r = 0; r < 4; ++r) {  // constant indices keep acc in registers
      const auto ri = static_cast<index_t>(r);
      if (ri >= rows) break;
      PRECIS_UNROLL(2)
      for (std::size_t w = 0; w < W; ++w) {
        T* cp = c + ri * rs_c + static_cast<index_t>(w) * L;
        auto t = X::mul(va, acc[r][w]);
        if (beta != T(0)) t = X::fma(vb, X::loadu(cp), t);
        X::storeu(cp, t);
      }
    }
    return;
  }
  alignas(32) T ab[4 * static_cast<std::size_t>(WL)];
  PRECIS_UNROLL(4)
  for (std::size_t r = 0; r < 4; ++r)
    PRECIS_UNROLL(2)
    for (std::size_t w = 0; w < W; ++w) X::storeu(ab + static_cast<index_t>(r) * WL + static_cast<index_t>(w) * L, acc[r][w]);
  tile_epilogue(ab, WL, c, rs_c, cs_c, rows, cols, alpha, beta);
}

/// Rows [i0, i0 + rows) (rows <= 4) times the columns [j0, j0 + W lanes) of B (rows ldb apart,
/// readable to j0 + W lanes), k steps; a row index past the last is clamped (its chains are
/// computed and not stored).
template <class T, std::size_t W>
PRECIS_TARGET_AVX2 inline void small_block(index_t k, const T* a, index_t rsa, index_t csa, index_t rows, const T* b,
                                           index_t ldb, T* c, index_t rs_c, index_t cs_c, index_t cols, T alpha,
                                           T beta) {
  using X = avx2_vec<T>;
  using V = typename X::V;
  constexpr index_t L = X::lanes;
  const T* ar[4];
  for (std::size_t r = 0; r < 4; ++r) ar[r] = a + std::min(static_cast<index_t>(r), rows - 1) * rsa;
  V acc[4][W];
  PRECIS_UNROLL(4)
  for (std::size_t r = 0; r < 4; ++r)
    PRECIS_UNROLL(2)
    for (std::size_t w = 0; w < W; ++w) acc[r][w] = X::zero();
  for (index_t p = 0; p < k; ++p) {
    V bv[W];
    PRECIS_UNROLL(2)
    for (std::size_t w = 0; w < W; ++w) bv[w] = X::loadu(b + p * ldb + static_cast<index_t>(w) * L);
    PRECIS_UNROLL(4)
    for (std::size_t r = 0; r < 4; ++r) {
      const V av = X::broadcast(ar[r] + p * csa);
      PRECIS_UNROLL(2)
      for (std::size_t w = 0; w < W; ++w) acc[r][w] = X::fma(av, bv[w], acc[r][w]);
    }
  }
  small_store<T, W>(acc, c, rs_c, cs_c, rows, cols, alpha, beta);
}

/// C (m x n, any strides) = alpha * A B + beta * C for A m x k (any strides) and B whose k rows
/// lie ldb apart, dense along n and readable to n rounded up to whole vectors. beta == 0 does
/// not read C.
template <class T>
PRECIS_TARGET_AVX2 void avx2_small_gemm(index_t m, index_t n, index_t k, T alpha, const T* a, index_t rsa, index_t csa,
                                        const T* b, index_t ldb, T beta, T* c, index_t rs_c, index_t cs_c) {
  constexpr index_t L = avx2_vec<T>::lanes;
  for (index_t i0 = 0; i0 < m; i0 += 4) {
    const index_t rows = std::min<index_t>(4, m - i0);
    const T* ai = a + i0 * rsa;
    T* ci = c + i0 * rs_c;
    index_t j0 = 0;
    for (; j0 + L < n; j0 += 2 * L)
      small_block<T, 2>(k, ai, rsa, csa, rows, b + j0, ldb, ci + j0 * cs_c, rs_c, cs_c, std::min(2 * L, n - j0), alpha,
                        beta);
    if (j0 < n) small_block<T, 1>(k, ai, rsa, csa, rows, b + j0, ldb, ci + j0 * cs_c, rs_c, cs_c, n - j0, alpha, beta);
  }
}

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
