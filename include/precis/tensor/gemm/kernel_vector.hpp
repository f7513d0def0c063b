// The portable register tiles, which every CPU can run: the scalar tile in the accumulator's own
// arithmetic (any type: multiprecision, fp8, ...), and where the compiler has GCC's and Clang's
// vector extensions the tiles the CPUs without the x86-64 kernels run (aarch64, other
// architectures, x86-64 below AVX2 + FMA, builds with PRECIS_NO_SIMD, and PRECIS_ISA=portable):
// fp32 / fp64, and the 16-bit accumulators of the "-true" policies. Their 16-byte vectors exist
// on every 64-bit target (SSE2 on x86-64, Advanced SIMD on aarch64), so they need no intrinsics
// and no run-time dispatch; other compilers keep the scalar tile.
//
// fp32 / fp64: each C entry is the scalar tile's chain: from zero, ab = ab + a_ik b_kj in k order
// within a K block, then alpha * ab, or alpha * ab + beta * c. Where the compiler does not
// contract a multiply and an add (x86-64 without -mfma) the bits are the scalar tile's; GCC's
// default, -ffp-contract=fast, fuses them wherever the target has FMA, aarch64 among them, as it
// does in the scalar tile (docs/building.md). The tile's size follows the target's vector
// registers: 8 x 3 vectors on aarch64 (32 registers: 24 accumulators and 3 of B; GCC multiplies
// by A's values as vector lanes, fmla by element), 5 x 2 vectors elsewhere (x86-64's 16: 10
// accumulators, 2 of B, a broadcast of A's value and the product, which SSE's two-operand
// multiply needs apart; 6 x 2 spilled two accumulators and ran 0.7x as fast on a Zen 3 core,
// docs/benchmarks.md).
//
// fp16 / bf16 (vector_narrow_tile_kernel): the scalar tile's arithmetic in fp32 lanes, each
// product and each sum rounded to the format, so the same bits as the scalar tile and the x86-64
// kernels (the same K blocks of 128). 4 x 3 vectors on x86-64 (4 x 2 ran 0.94x as fast on a Zen 3
// core: the roundings, not the loads, bound it), 8 x 2 on aarch64 (16 accumulators and the
// roundings' temporaries within its 32 registers), where fp16 rounds by Advanced SIMD's fcvtn
// and fcvtl.
#pragma once

#include <cstddef>
#include <cstring>
#include <utility>

#include "precis/config.hpp"
#include "precis/format/bfloat16.hpp"
#include "precis/format/convert_portable.hpp"
#include "precis/format/half.hpp"
#include "precis/tensor/shape.hpp"

namespace precis::detail {

/// C[0:mr, 0:nr] (rs_c, cs_c apart) = alpha * ab + beta * C in Acc's own arithmetic, each
/// operation rounded to Acc (beta == 0: C's old values unread); ab's rows ld apart.
template <class Acc>
void scalar_tile_epilogue(const Acc* ab, index_t ld, Acc* c, index_t rs_c, index_t cs_c, index_t mr, index_t nr,
                          const Acc& alpha, const Acc& beta) {
  for (index_t i = 0; i < mr; ++i) {
    for (index_t j = 0; j < nr; ++j) {
      Acc& cij = c[i * rs_c + j * cs_c];
      const Acc t = alpha * ab[i * ld + j];
      cij = beta == Acc(0) ? t : t + beta * cij;
    }
  }
}

/// The scalar register tile in Acc's own arithmetic (multiply, then add: no fused ops assumed)
/// over an R-row panel of A and a C-column panel of B, packed and interleaved by k.
template <class Acc, index_t R = 4, index_t C = 4>
void generic_tile_kernel(index_t kc, const Acc* a, const Acc* b, Acc* c, index_t rs_c, index_t cs_c, index_t mr,
                         index_t nr, const Acc& alpha, const Acc& beta) {
  Acc ab[static_cast<std::size_t>(R * C)] = {};
  for (auto& x : ab) x = Acc(0);
  for (index_t p = 0; p < kc; ++p) {
    for (index_t i = 0; i < R; ++i)
      for (index_t j = 0; j < C; ++j) ab[i * C + j] = ab[i * C + j] + a[p * R + i] * b[p * C + j];
  }
  scalar_tile_epilogue(ab, C, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

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
  scalar_tile_epilogue(ab, index_t{N}, c, rs_c, cs_c, mr, nr, alpha, beta);
}


/// The 16-bit tile's shape: rows of A (a multiple of 4), and 4-lane fp32 vectors of B's columns.
struct narrow_tile_shape {
#if defined(__aarch64__)
  static constexpr std::size_t rows = 8, vectors = 2;
#else
  static constexpr std::size_t rows = 4, vectors = 3;
#endif
  static constexpr std::size_t lanes = 4, cols = vectors * lanes;
};

/// Four values of the 16-bit T at p as floats, exactly (fp16's infinities and NaNs too; a bf16
/// NaN keeps its payload, which nothing here reads).
template <class T>
inline f32x4 narrow_widen4(const T* p) {
  u16x4 h;
  std::memcpy(&h, p, sizeof h);
#if PRECIS_AARCH64_NEON
  if constexpr (std::is_same_v<T, half>) return half_to_float_neon(h);
#endif
  const u32x4 w = __builtin_convertvector(h, u32x4);
  if constexpr (std::is_same_v<T, half>) {
    return (f32x4)half_to_float_lanes(w);
  } else {
    return (f32x4)(w << 16);
  }
}

/// Floats of the 16-bit T (values of T, or rounded to T by narrow_round) stored as T at p.
template <class T>
inline void narrow_store4(T* p, f32x4 x) {
#if PRECIS_AARCH64_NEON
  if constexpr (std::is_same_v<T, half>) {
    const u16x4 h = float_to_half_neon(x);  // exact: x holds fp16 values
    std::memcpy(static_cast<void*>(p), &h, sizeof h);
    return;
  }
#endif
  u32x4 bits = (u32x4)x;
  if constexpr (std::is_same_v<T, half>) {
    bits = float_to_half_nearest_lanes(bits);  // exact: x holds fp16 values
  } else {
    bits = bits >> 16;
  }
  const u16x4 h = __builtin_convertvector(bits, u16x4);
  std::memcpy(static_cast<void*>(p), &h, sizeof h);
}

/// x rounded to T to nearest even, as floats, with T's overflow to infinity; a NaN becomes
/// the format's quiet NaN as the scalar arithmetic's conversion makes it (bf16: 0x7fc0 with the
/// sign, as Eigen's).
template <class T>
inline f32x4 narrow_round(f32x4 x) {
  const u32x4 u = (u32x4)x;
  if constexpr (std::is_same_v<T, half>) {
#if PRECIS_AARCH64_NEON
    return half_to_float_neon(float_to_half_neon(x));
#else
    return (f32x4)half_to_float_lanes(float_to_half_nearest_lanes(u));
#endif
  } else {
    const u32x4 r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const u32x4 nan = lanes_greater(u & 0x7fffffffu, u32x4{} + 0x7f800000u);
    return (f32x4)lanes_select(nan, (u & 0x80000000u) | 0x7fc00000u, r);
  }
}

/// 0.5, which the tile reads from memory once (for a constant c GCC 12 compiles x > c ? x : c to
/// a compare, an and, an and-not and an or on x86-64, for a variable to one maxps).
inline volatile float narrow_half_step = 0.5f;

/// narrow_round for the tile's steps, cheaper:
/// - bf16: the same rounding without the NaN check. The steps' NaNs come from bf16 values or
///   arithmetic on them (low 16 bits zero, the default NaN included), and adding at most 0x8000
///   cannot carry out of such a NaN's low half, so it stays a NaN; the epilogue's narrow_round
///   makes it the quiet one.
/// - fp16, for |x| < 2^15: x + s - s, with s = +-2^(E + 13) for x's binade 2^E, at least 2^-1
///   (`least`: fp16's subnormal step 2^-24 is 0.5's ulp): the sum keeps fp16's bits of x rounded to
///   nearest even in the default rounding mode, and subtracting s is exact. `reach` keeps the
///   largest s: from 2^28 on, some x was 2^15 or more, infinite or NaN, where this is not
///   fp16's rounding, and the tile is computed again by the scalar tile. On aarch64, fcvtn and
///   fcvtl: fp16's rounding for every x, so `reach` stays zero.
template <class T>
inline f32x4 narrow_round_step(f32x4 x, f32x4& reach, f32x4 least) {
  const u32x4 u = (u32x4)x;
  if constexpr (std::is_same_v<T, half>) {
#if PRECIS_AARCH64_NEON
    (void)u, (void)reach, (void)least;
    return half_to_float_neon(float_to_half_neon(x));
#endif
    f32x4 s = (f32x4)(u & 0x7f800000u) * 0x1p13f;
    s = s > least ? s : least;
    reach = reach > s ? reach : s;
    const f32x4 t = (f32x4)((u32x4)s | (u & 0x80000000u));
    return (x + t) - t;
  } else {
    (void)reach;
    (void)least;
    return (f32x4)((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
  }
}

/// C[0:mr, 0:nr] = alpha * A B + beta * C in the arithmetic of the 16-bit T (half or
/// bfloat16): ab = round(ab + round(a * b)) for each k from zero, then alpha * ab, or alpha * ab
/// + beta * C, each operation rounded to T; the scalar tile's bits (generic_tile_kernel on the
/// same panels). A_panel is narrow_tile_shape::rows x kc, B_panel kc x cols, both interleaved
/// by k.
template <class T>
void vector_narrow_tile_kernel(index_t kc, const T* a, const T* b, T* c, index_t rs_c, index_t cs_c, index_t mr,
                               index_t nr, T alpha, T beta) {
  using S = narrow_tile_shape;
  constexpr std::size_t R = S::rows, W = S::vectors, L = S::lanes, N = S::cols;
  const T* const a_panel = a;
  const T* const b_panel = b;
  f32x4 acc[R][W];
  PRECIS_UNROLL(8)
  for (std::size_t i = 0; i < R; ++i) {
    PRECIS_UNROLL(2)
    for (std::size_t j = 0; j < W; ++j) acc[i][j] = f32x4{};
  }
  f32x4 reach{};
  const f32x4 least = f32x4{} + narrow_half_step;  // 2^-1, as s's least value
  for (index_t p = 0; p < kc; ++p, a += R, b += N) {
    f32x4 bv[W], av[R / L];
    PRECIS_UNROLL(2)
    for (std::size_t j = 0; j < W; ++j) bv[j] = narrow_widen4(b + j * L);
    PRECIS_UNROLL(2)
    for (std::size_t q = 0; q < R / L; ++q) av[q] = narrow_widen4(a + q * L);
    PRECIS_UNROLL(8)
    for (std::size_t i = 0; i < R; ++i) {
      const f32x4 ai = splat<f32x4>(av[i / L][i % L], std::make_index_sequence<L>{});
      PRECIS_UNROLL(2)
      for (std::size_t j = 0; j < W; ++j)
        acc[i][j] = narrow_round_step<T>(acc[i][j] + narrow_round_step<T>(ai * bv[j], reach, least), reach, least);
    }
  }
  if constexpr (std::is_same_v<T, half> && !PRECIS_AARCH64_NEON) {
    if (reach[0] >= 0x1p28f || reach[1] >= 0x1p28f || reach[2] >= 0x1p28f || reach[3] >= 0x1p28f) {
      generic_tile_kernel<T, static_cast<index_t>(R), static_cast<index_t>(N)>(kc, a_panel, b_panel, c, rs_c, cs_c, mr,
                                                                                nr, alpha, beta);
      return;
    }
  }
  if (mr == static_cast<index_t>(R) && nr == static_cast<index_t>(N) && cs_c == 1) {
    const f32x4 va = f32x4{} + static_cast<float>(alpha), vb = f32x4{} + static_cast<float>(beta);
    const bool read_c = beta != T(0);
    PRECIS_UNROLL(8)
    for (std::size_t i = 0; i < R; ++i) {
      T* ci = c + static_cast<index_t>(i) * rs_c;
      PRECIS_UNROLL(2)
      for (std::size_t j = 0; j < W; ++j) {
        f32x4 t = narrow_round<T>(va * acc[i][j]);
        if (read_c) t = narrow_round<T>(t + narrow_round<T>(vb * narrow_widen4(ci + j * L)));
        narrow_store4(ci + j * L, t);
      }
    }
    return;
  }
  T ab[R * N];  // the sums, values of T: exact
  for (std::size_t i = 0; i < R; ++i)
    for (std::size_t j = 0; j < N; ++j) ab[i * N + j] = T(acc[i][j / L][j % L]);
  scalar_tile_epilogue(ab, index_t{N}, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_VECTOR_EXT
