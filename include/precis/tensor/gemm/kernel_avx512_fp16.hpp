// AVX512-FP16 register-tile kernel for the fp16 accumulator (the 16-true policy's GEMM):
// half x half into half with every product and every partial sum rounded to fp16, as the
// emulating kernels compute it (kernel_avx2.hpp, kernel_avx512.hpp), but in native fp16 lanes:
// 32 to a zmm register and two instructions a step (vmulph, vaddph), where the AVX-512
// emulation spends six on 16 fp32 lanes (a multiply, an add and two conversions after each).
//
// What it computes, and why it is the emulation's bits: a product of two fp16 values is exact
// in fp32 (22 significant bits, exponents far inside fp32's range), so the emulation's fp32
// multiply then rounding to fp16 is vmulph's correctly rounded product; fp32 holds 24 >= 2 x 11
// + 2 bits, so its rounded sum of two fp16 values rounded again to fp16 is the correctly rounded
// fp16 sum, vaddph's. Both round to nearest even, overflow to infinity and keep subnormals
// (with MXCSR's DAZ and FTZ off, as precis leaves them). The tile (6 x 32), the packing, the
// K blocks (kc = 128), the order of k within a block and the epilogue's roundings (t =
// round(alpha ab), then round(t + round(beta c))) are the AVX-512 emulation's, so each C entry
// is the same chain of roundings: bit for bit the same C (NaNs too: x86 propagates the first
// operand's NaN and makes the same default NaN in both forms).
//
// The multiply and the add are the masked intrinsics with every lane on: GCC contracts the
// unmasked pair into vfmadd*ph (one rounding, other bits) under its default -ffp-contract=fast.
//
// Throughput: 12 vector operations per k step for 192 multiply-adds (two ports: 6 cycles), six
// independent add chains of 4-cycle latency (4 cycles): bound by the ports, at the fp16 peak
// of 32 multiply-adds a cycle; the A values come as embedded broadcasts ({1to32}) of vmulph.
// Chosen at run time where the CPU has AVX512-FP16 and the GEMM's level is avx512_bf16 or
// above (precis::gemm_isa), so limit_gemm_isa(gemm_isa::avx512) selects the emulation; built
// where the compiler can (PRECIS_AVX512_FP16_KERNEL), elsewhere the emulation runs.
#pragma once

#include "precis/config.hpp"

// Compilers whose <immintrin.h> declares the AVX512-FP16 intrinsics and _Float16 for a
// function's target attribute: GCC from 12; others (Clang 14 has neither without
// -mavx512fp16) when the whole translation unit targets AVX512-FP16; in a test build that
// emulates AVX-512 (PRECIS_AVX512_EMULATION), where the emulation covers it.
#if PRECIS_X86_SIMD && (!defined(PRECIS_AVX512_EMULATION) || defined(PRECIS_AVX512_EMULATION_FP16)) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12) || defined(__AVX512FP16__))
#define PRECIS_AVX512_FP16_KERNEL 1
#else
#define PRECIS_AVX512_FP16_KERNEL 0
#endif

#if PRECIS_AVX512_FP16_KERNEL

#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "precis/tensor/gemm/kernel_avx512.hpp"

#if defined(PRECIS_AVX512_EMULATION)
#define PRECIS_TARGET_AVX512_FP16 PRECIS_TARGET_AVX2  // the test build's emulation (convert_x86.hpp)
#else
#define PRECIS_TARGET_AVX512_FP16 __attribute__((target("avx512fp16,avx512f,avx512bw,avx512vl,avx2,f16c,fma")))
#endif

namespace precis::detail {

/// AVX512-FP16 usable: present (cpu_avx512_fp16_present) and PRECIS_ISA not capping the
/// process at avx512 or below.
[[gnu::noinline]] inline bool avx512_fp16_first_use() {
  return isa_cap() >= 3 && cpu_avx512_fp16_present();
}
inline bool cpu_has_avx512_fp16() {
  static const bool ok = avx512_fp16_first_use();  // read once, as isa_level_in_use
  return ok;
}

inline constexpr __mmask32 fp16_all_lanes = 0xFFFFFFFFu;

/// 32 fp16 lanes, each x's value.
PRECIS_TARGET_AVX512_FP16 inline __m512h fp16_broadcast(const half* p) {
  _Float16 v;
  std::memcpy(&v, p, 2);
  return _mm512_set1_ph(v);
}
PRECIS_TARGET_AVX512_FP16 inline __m512h fp16_loadu(const half* p) {
  return _mm512_castsi512_ph(_mm512_loadu_si512(p));
}
PRECIS_TARGET_AVX512_FP16 inline __m512h fp16_mul(__m512h x, __m512h y) { return _mm512_maskz_mul_ph(fp16_all_lanes, x, y); }
PRECIS_TARGET_AVX512_FP16 inline __m512h fp16_add(__m512h x, __m512h y) { return _mm512_maskz_add_ph(fp16_all_lanes, x, y); }

/// The 6 x 32 fp16 tile: A_panel 6 x kc (interleaved by k), B_panel kc x 32, as
/// avx512_narrow_tile_kernel<half> takes them; C = alpha AB + beta C in fp16 arithmetic.
PRECIS_TARGET_AVX512_FP16 inline void avx512_fp16_tile_kernel(index_t kc, const half* __restrict a, const half* __restrict b, half* c,
                                                              index_t rs_c, index_t cs_c, index_t mr, index_t nr, half alpha,
                                                              half beta) {
  constexpr int R = 6;
  __m512h acc[R];
  for (auto& r : acc) r = _mm512_setzero_ph();
  for (index_t p = 0; p < kc; ++p) {
    const __m512h b0 = fp16_loadu(b);
    PRECIS_UNROLL(6)
    for (int i = 0; i < R; ++i) acc[i] = fp16_add(acc[i], fp16_mul(fp16_broadcast(a + i), b0));
    a += R;
    b += 32;
  }
  if (mr == R && nr == 32 && cs_c == 1) {
    const __m512h va = fp16_broadcast(&alpha), vb = fp16_broadcast(&beta);
    const bool read_c = beta != half(0.0f);
    for (int i = 0; i < R; ++i) {
      half* ci = c + i * rs_c;
      __m512h t = fp16_mul(va, acc[i]);
      if (read_c) t = fp16_add(t, fp16_mul(vb, fp16_loadu(ci)));
      _mm512_storeu_si512(ci, _mm512_castph_si512(t));
    }
    return;
  }
  // a ragged or strided tile: the lanes widened exactly to fp32 for the emulation's epilogue
  alignas(64) float ab[R * 32];
  for (int i = 0; i < R; ++i) {
    const __m512i bits = _mm512_castph_si512(acc[i]);  // masked extracts: see avx512_narrow
    _mm512_store_ps(ab + i * 32, avx512_narrow<half>::widen(_mm512_maskz_extracti64x4_epi64(0xF, bits, 0)));
    _mm512_store_ps(ab + i * 32 + 16, avx512_narrow<half>::widen(_mm512_maskz_extracti64x4_epi64(0xF, bits, 1)));
  }
  narrow_tile_epilogue(ab, 32, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_AVX512_FP16_KERNEL
