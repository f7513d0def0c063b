// The fp16 accumulator's register tile (the 16-true policy's GEMM) in native fp16 lanes on
// aarch64 CPUs with half-precision arithmetic (FEAT_FP16, Armv8.2-A's `fmul` and `fadd` on eight
// fp16 lanes: Neoverse N1 and later, Apple's cores, Cortex-A55/A75 and later), where the
// portable 16-bit tile (kernel_vector.hpp) spends six instructions on four fp32 lanes per k (a
// multiply, an add, and fcvtn + fcvtl after each): here two on eight.
//
// What it computes, and why it is the portable tile's bits: a product of two fp16 values is
// exact in fp32 (22 significant bits, exponents far inside fp32's range), so the fp32 product
// rounded to fp16 is `fmul`'s correctly rounded fp16 product; fp32 holds 24 >= 2 x 11 + 2 bits,
// so the fp32 sum of two fp16 values rounded again to fp16 is `fadd`'s correctly rounded fp16
// sum. Both round to nearest even, overflow to infinity and keep subnormals under the FPCR's
// defaults (FZ16 and DN clear, as Linux and macOS start every thread). The K blocks (kc =
// 128), the order of k within a block and the epilogue's roundings (t = round(alpha ab), then
// round(t + round(beta c))) are the portable tile's, so each C entry is the same chain of
// roundings (NaNs: a NaN, its payload as the arithmetic propagates it).
//
// GCC's <arm_neon.h> writes vmulq_f16 and vaddq_f16 as the vector operators, which it contracts
// into `fmla` (one rounding, other bits) under its default -ffp-contract=fast: each product goes
// through an empty asm statement, which the compiler cannot see through, before it is added.
//
// Chosen at run time (gemm.hpp's select_kernel) where the CPU reports FEAT_FP16 (Linux: the
// auxiliary vector's HWCAP_ASIMDHP; macOS: every Apple arm64 CPU has it) and PRECIS_ISA is not
// `portable`; built by GCC (its <arm_neon.h> declares the fp16 intrinsics for a function's
// target attribute) or by any compiler told to target FEAT_FP16 (-march=armv8.2-a+fp16).
#pragma once

#include "precis/config.hpp"
#include "precis/format/convert_portable.hpp"

#if PRECIS_AARCH64_NEON && (defined(__linux__) || defined(__APPLE__)) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10) ||  \
     defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC))
#define PRECIS_NEON_FP16_KERNEL 1
#else
#define PRECIS_NEON_FP16_KERNEL 0
#endif

#if PRECIS_NEON_FP16_KERNEL

#include <arm_neon.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sys/auxv.h>
#endif

#include "precis/format/half.hpp"
#include "precis/tensor/gemm/kernel_vector.hpp"
#include "precis/tensor/shape.hpp"

#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
#define PRECIS_TARGET_NEON_FP16
#else
#define PRECIS_TARGET_NEON_FP16 __attribute__((target("arch=armv8.2-a+fp16")))
#endif

namespace precis::detail {

/// The CPU has FEAT_FP16 (vector fp16 arithmetic).
inline bool cpu_neon_fp16_present() {
#if defined(__linux__)
  constexpr unsigned long asimdhp = 1ul << 10;  // HWCAP_ASIMDHP (asm/hwcap.h)
  return (getauxval(AT_HWCAP) & asimdhp) != 0;
#else
  return true;  // every arm64 CPU that macOS runs on has FEAT_FP16
#endif
}

/// FEAT_FP16 present and PRECIS_ISA not `portable` (which keeps the portable tiles, for testing
/// and comparison), read once.
inline bool cpu_has_neon_fp16() {
  static const bool ok = [] {
    const char* e = std::getenv("PRECIS_ISA");
    return (e == nullptr || std::string(e) != "portable") && cpu_neon_fp16_present();
  }();
  return ok;
}

/// The tile's shape: 8 rows of A, 2 vectors of 8 fp16 lanes of B's columns.
struct neon_fp16_tile_shape {
  static constexpr int rows = 8, cols = 16;
};

/// a * b in fp16 lanes, kept from being fused with the add it feeds.
PRECIS_TARGET_NEON_FP16 inline float16x8_t neon_fp16_mul(float16x8_t a, float16x8_t b) {
  float16x8_t p = vmulq_f16(a, b);
  __asm__("" : "+w"(p));
  return p;
}

/// Row I's part of a k step: acc += a_I * (b0, b1), a_I lane I of av (`fmul` by element: the
/// lane must be a constant), each product kept from being fused with its add.
template <int I>
PRECIS_TARGET_NEON_FP16 inline void neon_fp16_row(float16x8_t (&acc)[2], float16x8_t av,
                                                  float16x8_t b0, float16x8_t b1) {
  float16x8_t p0 = vmulq_laneq_f16(b0, av, I), p1 = vmulq_laneq_f16(b1, av, I);
  __asm__("" : "+w"(p0), "+w"(p1));
  acc[0] = vaddq_f16(acc[0], p0);
  acc[1] = vaddq_f16(acc[1], p1);
}

/// One k step of the tile's rows I...
template <int... I>
PRECIS_TARGET_NEON_FP16 inline void neon_fp16_step(float16x8_t (&acc)[sizeof...(I)][2],
                                                   float16x8_t av, float16x8_t b0, float16x8_t b1,
                                                   std::integer_sequence<int, I...>) {
  (neon_fp16_row<I>(acc[I], av, b0, b1), ...);
}

/// C[0:mr, 0:nr] = alpha * A B + beta * C in fp16 arithmetic, every product and sum rounded to
/// fp16: A_panel 8 x kc, B_panel kc x 16, both interleaved by k (the portable 16-bit tile's
/// panels at this shape); the portable tile's bits.
PRECIS_TARGET_NEON_FP16 inline void neon_fp16_tile_kernel(index_t kc, const half* a, const half* b,
                                                          half* c, index_t rs_c, index_t cs_c,
                                                          index_t mr, index_t nr, half alpha,
                                                          half beta) {
  constexpr int R = neon_fp16_tile_shape::rows, N = neon_fp16_tile_shape::cols;
  float16x8_t acc[R][2];
  for (auto& row : acc) row[0] = row[1] = vreinterpretq_f16_u16(vdupq_n_u16(0));
  for (index_t p = 0; p < kc; ++p, a += R, b += N) {
    float16x8_t av, b0, b1;
    std::memcpy(&av, a, sizeof av);
    std::memcpy(&b0, b, sizeof b0);
    std::memcpy(&b1, b + 8, sizeof b1);
    neon_fp16_step(acc, av, b0, b1, std::make_integer_sequence<int, R>{});
  }
  if (mr == R && nr == N && cs_c == 1) {
    float16_t al, be;
    std::memcpy(&al, &alpha, sizeof al);
    std::memcpy(&be, &beta, sizeof be);
    const float16x8_t va = vdupq_n_f16(al), vb = vdupq_n_f16(be);
    const bool read_c = beta != half(0.0f);
    for (index_t i = 0; i < R; ++i) {
      half* ci = c + i * rs_c;
      for (int j = 0; j < 2; ++j) {
        float16x8_t t = neon_fp16_mul(va, acc[i][j]);
        if (read_c) {
          float16x8_t cv;
          std::memcpy(&cv, ci + 8 * j, sizeof cv);
          t = vaddq_f16(t, neon_fp16_mul(vb, cv));
        }
        std::memcpy(static_cast<void*>(ci + 8 * j), &t, sizeof t);
      }
    }
    return;
  }
  half ab[R * N];  // the sums, values of half: exact
  std::memcpy(static_cast<void*>(ab), acc, sizeof ab);
  scalar_tile_epilogue(ab, N, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_NEON_FP16_KERNEL
