// The portable fp32 / fp64 register tile: the CPUs without the x86-64 kernels (aarch64, other
// architectures, x86-64 below AVX2 + FMA, builds with PRECIS_NO_SIMD, and PRECIS_ISA=portable)
// run it. Written with GCC's and Clang's vector extensions in 16-byte vectors, which every
// 64-bit target has (SSE2 on x86-64, Advanced SIMD on aarch64), so it needs no intrinsics and no
// run-time dispatch; other compilers keep the scalar 4 x 4 tile (gemm.hpp).
//
// Each C entry is the scalar tile's chain: from zero, ab = ab + a_ik b_kj in k order within a K
// block, then alpha * ab, or alpha * ab + beta * c. Where the compiler does not contract a
// multiply and an add (x86-64 without -mfma) the bits are the scalar tile's; GCC's default,
// -ffp-contract=fast, fuses them wherever the target has FMA, aarch64 among them, as it does in
// the scalar tile (docs/building.md).
//
// The tile's size follows the target's vector registers: 8 x 3 vectors on aarch64 (32
// registers: 24 accumulators and 3 of B; GCC multiplies by A's values as vector lanes, fmla by
// element), 5 x 2 vectors elsewhere (x86-64's 16: 10 accumulators, 2 of B, a broadcast of A's
// value and the product, which SSE's two-operand multiply needs apart; 6 x 2 spilled two
// accumulators and ran 0.7x as fast on a Zen 3 core, docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstring>
#include <utility>

#include "precis/config.hpp"
#include "precis/tensor/shape.hpp"

#if PRECIS_VECTOR_EXT

namespace precis::detail {

/// 16 bytes of T as one of the compiler's vectors, and the tile's shape in rows and vectors.
template <class T>
struct vector_tile_shape {
  typedef T vec __attribute__((vector_size(16)));
  static constexpr std::size_t lanes = 16 / sizeof(T);
#if defined(__aarch64__)
  static constexpr std::size_t rows = 8, vectors = 3;
#else
  static constexpr std::size_t rows = 5, vectors = 2;
#endif
  static constexpr std::size_t cols = vectors * lanes;
};

/// x in every lane of V (I: one index per lane).
template <class V, class T, std::size_t... I>
inline V splat(T x, std::index_sequence<I...>) {
  return V{((void)I, x)...};
}

/// C[0:mr, 0:nr] (rs_c, cs_c apart) = alpha * A B + beta * C (beta == 0: C's old values unread)
/// over kc steps of an mr-row panel of A and an nr-column panel of B, both packed and padded to
/// the whole tile (gemm.hpp's pack_a and pack_b).
template <class T>
void vector_tile_kernel(index_t kc, const T* a, const T* b, T* c, index_t rs_c, index_t cs_c, index_t mr, index_t nr,
                        T alpha, T beta) {
  using S = vector_tile_shape<T>;
  using V = typename S::vec;
  constexpr std::size_t R = S::rows, W = S::vectors, L = S::lanes, N = S::cols;
  V acc[R][W];
  PRECIS_UNROLL(8)
  for (std::size_t i = 0; i < R; ++i) {
    PRECIS_UNROLL(3)
    for (std::size_t j = 0; j < W; ++j) acc[i][j] = V{};
  }
  for (index_t p = 0; p < kc; ++p, a += R, b += N) {
    V bv[W];
    PRECIS_UNROLL(3)
    for (std::size_t j = 0; j < W; ++j) std::memcpy(&bv[j], b + j * L, sizeof(V));
    PRECIS_UNROLL(8)
    for (std::size_t i = 0; i < R; ++i) {
      const V ai = splat<V>(a[i], std::make_index_sequence<L>{});  // a_ik in every lane
      PRECIS_UNROLL(3)
      for (std::size_t j = 0; j < W; ++j) acc[i][j] = acc[i][j] + ai * bv[j];
    }
  }
  T ab[R * N];
  PRECIS_UNROLL(8)
  for (std::size_t i = 0; i < R; ++i) {
    PRECIS_UNROLL(3)
    for (std::size_t j = 0; j < W; ++j) std::memcpy(ab + i * N + j * L, &acc[i][j], sizeof(V));
  }
  for (index_t i = 0; i < mr; ++i) {
    for (index_t j = 0; j < nr; ++j) {
      T& cij = c[i * rs_c + j * cs_c];
      const T t = alpha * ab[static_cast<std::size_t>(i) * N + static_cast<std::size_t>(j)];
      cij = beta == T(0) ? t : t + beta * cij;
    }
  }
}

}  // namespace precis::detail

#endif  // PRECIS_VECTOR_EXT
