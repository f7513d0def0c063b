// Force-included (-include) ahead of everything else in the test binary `isa_emulation_tests`:
// the AVX-512F/BW/VL/DQ, AVX512-BF16 and AVX512-FP16 intrinsics precis uses, emulated with AVX2 +
// FMA + F16C so that the AVX-512 kernels run, and are tested, on a machine without AVX-512.
//
// - SIMDe (Debian's libsimde-dev) provides most intrinsics: with its "native aliases", each
//   _mm512_* name becomes a macro for SIMDe's function, which works on the compiler's own
//   __m512 types in 256-bit halves (FMA for FMA: the same roundings as the instruction).
// - The few that SIMDe 0.7 lacks (masked loads and stores, masked conversions, a gather and a
//   scatter, the fp16 tile's AVX512-FP16 arithmetic) are written
//   below, lane by lane, from Intel's definitions; masked-off lanes are neither read nor
//   written, as the instructions' fault suppression guarantees.
// - vdpbf16ps and vcvtneps2bf16 are written below from the pseudo-code of Intel's SDM (SIMDe's
//   versions neither flush denormals nor order the two products as the hardware does).
// - PRECIS_AVX512_EMULATION tells precis to compile its AVX-512 functions for AVX2 (their
//   target attributes would otherwise let the compiler emit AVX-512 instructions itself) and to
//   report AVX-512F, AVX512-BF16 and (GCC 12 or later) AVX512-FP16 as usable wherever AVX2, FMA
//   and F16C are. AMX stays unavailable (its tiles are not emulated).
//
// The binary is compiled with -mavx2 -mfma -mf16c; CMake builds it only where the build machine
// runs such code (tests/CMakeLists.txt).
// What the emulation checks is the kernels' logic (packing, tiling, masks, tails, blocking) and
// that they agree with the AVX2 and scalar paths bit for bit where precis promises it; it cannot
// check timing, and it checks an instruction's arithmetic only as far as the model below is
// right (the models of vdpbf16ps and AMX are checked against hardware elsewhere, where it exists).
#pragma once

#include <immintrin.h>

#define SIMDE_X86_AVX512F_ENABLE_NATIVE_ALIASES
#define SIMDE_X86_AVX512BW_ENABLE_NATIVE_ALIASES
#define SIMDE_X86_AVX512VL_ENABLE_NATIVE_ALIASES
#define SIMDE_X86_AVX512DQ_ENABLE_NATIVE_ALIASES
#define SIMDE_X86_AVX512BF16_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "the AVX-512 emulation is compiled with -mavx2 -mfma -mf16c"
#endif

#define PRECIS_AVX512_EMULATION 1

namespace precis_avx512_emulation {

template <class T, class V>
inline void to_lanes(T* out, const V& v) {
  static_assert(sizeof(V) == 16 * sizeof(T) || sizeof(V) % sizeof(T) == 0);
  std::memcpy(out, &v, sizeof(V));
}
template <class V, class T>
inline V from_lanes(const T* in) {
  V v;
  std::memcpy(&v, in, sizeof(V));
  return v;
}
inline bool on(unsigned k, int i) { return ((k >> i) & 1u) != 0; }

inline __m512 maskz_loadu_ps(__mmask16 k, const void* p) {
  float r[16] = {};
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) std::memcpy(&r[i], static_cast<const char*>(p) + 4 * i, 4);
  return from_lanes<__m512>(r);
}
inline __m512i maskz_loadu_epi32(__mmask16 k, const void* p) {
  std::int32_t r[16] = {};
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) std::memcpy(&r[i], static_cast<const char*>(p) + 4 * i, 4);
  return from_lanes<__m512i>(r);
}
inline __m256i maskz_loadu_epi16_256(__mmask16 k, const void* p) {
  std::int16_t r[16] = {};
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) std::memcpy(&r[i], static_cast<const char*>(p) + 2 * i, 2);
  return from_lanes<__m256i>(r);
}
template <class V>
inline void mask_storeu_32(void* p, __mmask16 k, V v) {
  std::uint32_t a[16];
  to_lanes(a, v);
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) std::memcpy(static_cast<char*>(p) + 4 * i, &a[i], 4);
}
inline __m512 mask_i32gather_ps(__m512 src, __mmask16 k, __m512i idx, const void* base, int scale) {
  float r[16];
  std::int32_t j[16];
  to_lanes(r, src);
  to_lanes(j, idx);
  for (int i = 0; i < 16; ++i)
    if (on(k, i))
      std::memcpy(&r[i], static_cast<const char*>(base) + std::int64_t{j[i]} * scale, 4);
  return from_lanes<__m512>(r);
}
inline void mask_i32scatter_epi32(void* base, __mmask16 k, __m512i idx, __m512i v, int scale) {
  std::int32_t j[16], a[16];
  to_lanes(j, idx);
  to_lanes(a, v);
  for (int i = 0; i < 16; ++i)  // lanes in order: a later lane's write wins, as in the instruction
    if (on(k, i)) std::memcpy(static_cast<char*>(base) + std::int64_t{j[i]} * scale, &a[i], 4);
}
inline __m256i maskz_cvtepi32_epi16(__mmask16 k, __m512i a) {
  std::int32_t s[16];
  std::int16_t r[16] = {};
  to_lanes(s, a);
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) r[i] = static_cast<std::int16_t>(s[i]);
  return from_lanes<__m256i>(r);
}
inline __m512i maskz_cvtepu16_epi32(__mmask16 k, __m256i a) {
  std::uint16_t s[16];
  std::int32_t r[16] = {};
  to_lanes(s, a);
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) r[i] = s[i];
  return from_lanes<__m512i>(r);
}
inline __m512i maskz_cvtepu8_epi32(__mmask16 k, __m128i a) {
  std::uint8_t s[16];
  std::int32_t r[16] = {};
  to_lanes(s, a);
  for (int i = 0; i < 16; ++i)
    if (on(k, i)) r[i] = s[i];
  return from_lanes<__m512i>(r);
}
inline __m512 cvtph_ps(__m256i a) {
  return simde_mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_castsi256_si128(a)));
}
inline __m512 maskz_cvtph_ps(__mmask16 k, __m256i a) {
  const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(a)),
               hi = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
  float r[16];
  _mm256_storeu_ps(r, lo);
  _mm256_storeu_ps(r + 8, hi);
  for (int i = 0; i < 16; ++i)
    if (!on(k, i)) r[i] = 0.0f;
  return from_lanes<__m512>(r);
}
template <int Imm>
inline __m256i maskz_cvtps_ph(__mmask16 k, __m512 a) {
  float s[16];
  to_lanes(s, a);
  const __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(s), Imm),
                hi = _mm256_cvtps_ph(_mm256_loadu_ps(s + 8), Imm);
  std::uint16_t r[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(r), lo);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(r + 8), hi);
  for (int i = 0; i < 16; ++i)
    if (!on(k, i)) r[i] = 0;
  return from_lanes<__m256i>(r);
}
inline __m512 zextps256_ps512(__m256 a) {
  float r[16] = {};
  _mm256_storeu_ps(r, a);
  return from_lanes<__m512>(r);
}

/// A float with a denormal read (or written) as a zero of its sign.
inline float daz(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
inline float bf16_value(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return daz(f);
}

/// VCVTNEPS2BF16 (Intel SDM, "convert_fp32_to_bfloat16"): NaN to a quiet NaN with the top
/// payload bits, a denormal to a zero of its sign, else rounded to nearest even; MXCSR ignored.
inline std::uint16_t cvtneps_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  if (std::fpclassify(f) == FP_SUBNORMAL) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(r >> 16);
}
inline __m256bh cvtneps_pbh(__m512 a) {
  float s[16];
  std::uint16_t r[16];
  to_lanes(s, a);
  for (int i = 0; i < 16; ++i) r[i] = cvtneps_bf16(s[i]);
  return from_lanes<__m256bh>(r);
}

/// VDPBF16PS (Intel SDM): per 32-bit lane, the odd (high) bf16 pair's product added first and
/// then the even (low) pair's, each addition rounded to nearest even, with denormal inputs (the
/// accumulator's included) read as zero and denormal results flushed to zero. The products of
/// two bf16 values are exact in fp32.
inline __m512 dpbf16_ps(__m512 src, __m512bh a, __m512bh b) {
  float c[16];
  std::uint16_t x[32], y[32];
  to_lanes(c, src);
  std::memcpy(x, &a, 64);
  std::memcpy(y, &b, 64);
  for (int i = 0; i < 16; ++i) {
    float t = daz(std::fma(bf16_value(x[2 * i + 1]), bf16_value(y[2 * i + 1]), daz(c[i])));
    c[i] = daz(std::fma(bf16_value(x[2 * i]), bf16_value(y[2 * i]), t));
  }
  return from_lanes<__m512>(c);
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
// AVX512-FP16 (the few intrinsics precis's fp16 GEMM tile uses; GCC 12 declares their types
// without -mavx512fp16). vmulph and vaddph per lane: both operands widened to fp32 exactly, the
// operation in fp32, the result rounded to fp16 to nearest even. Rounding twice (to fp32, then
// to fp16) gives the correctly rounded result because fp32 carries 24 >= 2 x 11 + 2 bits
// (Figueroa); fp16 denormals are kept, as the instructions keep them.
#define PRECIS_AVX512_EMULATION_FP16 1
template <class F>
inline __m512h fp16_lanes(__m512h x, __m512h y, F op) {
  std::uint16_t a[32], b[32], r[32];
  std::memcpy(a, &x, 64);
  std::memcpy(b, &y, 64);
  for (int h = 0; h < 32; h += 8) {
    const __m256 u = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + h)));
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + h)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r + h),
                     _mm256_cvtps_ph(op(u, v), _MM_FROUND_TO_NEAREST_INT));
  }
  return from_lanes<__m512h>(r);
}
inline __m512h maskz_mul_ph(__mmask32 k, __m512h x, __m512h y) {
  const __m512h p = fp16_lanes(x, y, [](__m256 u, __m256 v) { return _mm256_mul_ps(u, v); });
  std::uint16_t r[32];
  std::memcpy(r, &p, 64);
  for (int i = 0; i < 32; ++i)
    if (((k >> i) & 1u) == 0) r[i] = 0;
  return from_lanes<__m512h>(r);
}
inline __m512h maskz_add_ph(__mmask32 k, __m512h x, __m512h y) {
  const __m512h p = fp16_lanes(x, y, [](__m256 u, __m256 v) { return _mm256_add_ps(u, v); });
  std::uint16_t r[32];
  std::memcpy(r, &p, 64);
  for (int i = 0; i < 32; ++i)
    if (((k >> i) & 1u) == 0) r[i] = 0;
  return from_lanes<__m512h>(r);
}
inline __m512h set1_ph(_Float16 v) {
  _Float16 r[32];
  for (auto& x : r) x = v;
  return from_lanes<__m512h>(r);
}
inline __m512h setzero_ph() {
  const std::uint16_t r[32] = {};
  return from_lanes<__m512h>(r);
}
template <class To, class From>
inline To bits_cast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To r;
  std::memcpy(&r, &v, sizeof(To));
  return r;
}
#endif

}  // namespace precis_avx512_emulation

#if defined(PRECIS_AVX512_EMULATION_FP16)
#undef _mm512_maskz_mul_ph
#define _mm512_maskz_mul_ph(k, x, y) precis_avx512_emulation::maskz_mul_ph((k), (x), (y))
#undef _mm512_maskz_add_ph
#define _mm512_maskz_add_ph(k, x, y) precis_avx512_emulation::maskz_add_ph((k), (x), (y))
#undef _mm512_set1_ph
#define _mm512_set1_ph(v) precis_avx512_emulation::set1_ph((v))
#undef _mm512_setzero_ph
#define _mm512_setzero_ph() precis_avx512_emulation::setzero_ph()
#undef _mm512_castsi512_ph
#define _mm512_castsi512_ph(v) precis_avx512_emulation::bits_cast<__m512h>((v))
#undef _mm512_castph_si512
#define _mm512_castph_si512(v) precis_avx512_emulation::bits_cast<__m512i>((v))
#endif

// The intrinsics SIMDe 0.7 lacks, or models differently; each name may be a macro of the
// compiler's header (GCC without optimization), so it is undefined first.
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) precis_avx512_emulation::maskz_loadu_ps((k), (p))
#undef _mm512_maskz_loadu_epi32
#define _mm512_maskz_loadu_epi32(k, p) precis_avx512_emulation::maskz_loadu_epi32((k), (p))
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, p) precis_avx512_emulation::maskz_loadu_epi16_256((k), (p))
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, v) precis_avx512_emulation::mask_storeu_32((p), (k), (v))
#undef _mm512_mask_storeu_epi32
#define _mm512_mask_storeu_epi32(p, k, v) precis_avx512_emulation::mask_storeu_32((p), (k), (v))
#undef _mm512_mask_i32gather_ps
#define _mm512_mask_i32gather_ps(src, k, idx, base, scale) \
  precis_avx512_emulation::mask_i32gather_ps((src), (k), (idx), (base), (scale))
#undef _mm512_mask_i32scatter_epi32
#define _mm512_mask_i32scatter_epi32(base, k, idx, v, scale) \
  precis_avx512_emulation::mask_i32scatter_epi32((base), (k), (idx), (v), (scale))
#undef _mm512_mask_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask(k, a, b, imm) \
  static_cast<__mmask16>((k)&simde_mm512_cmp_ps_mask((a), (b), (imm)))
#undef _mm512_mask_testn_epi32_mask
#define _mm512_mask_testn_epi32_mask(k, a, b)                                              \
  static_cast<__mmask16>((k)&simde_mm512_cmpeq_epi32_mask(simde_mm512_and_si512((a), (b)), \
                                                          simde_mm512_setzero_si512()))
#undef _mm512_maskz_cvtepi32_epi16
#define _mm512_maskz_cvtepi32_epi16(k, a) precis_avx512_emulation::maskz_cvtepi32_epi16((k), (a))
#undef _mm512_maskz_cvtepu16_epi32
#define _mm512_maskz_cvtepu16_epi32(k, a) precis_avx512_emulation::maskz_cvtepu16_epi32((k), (a))
#undef _mm512_maskz_cvtepu8_epi32
#define _mm512_maskz_cvtepu8_epi32(k, a) precis_avx512_emulation::maskz_cvtepu8_epi32((k), (a))
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) precis_avx512_emulation::cvtph_ps((a))
#undef _mm512_maskz_cvtph_ps
#define _mm512_maskz_cvtph_ps(k, a) precis_avx512_emulation::maskz_cvtph_ps((k), (a))
#undef _mm512_maskz_cvtps_ph
#define _mm512_maskz_cvtps_ph(k, a, imm) precis_avx512_emulation::maskz_cvtps_ph<(imm)>((k), (a))
#undef _mm512_maskz_slli_epi32
#define _mm512_maskz_slli_epi32(k, a, imm) \
  simde_mm512_maskz_mov_epi32((k), simde_mm512_slli_epi32((a), (imm)))
#undef _mm512_maskz_srli_epi32
#define _mm512_maskz_srli_epi32(k, a, imm) \
  simde_mm512_maskz_mov_epi32((k), simde_mm512_srli_epi32((a), (imm)))
#undef _mm512_undefined_epi32
#define _mm512_undefined_epi32() simde_mm512_setzero_si512()
#undef _mm512_zextps256_ps512
#define _mm512_zextps256_ps512(a) precis_avx512_emulation::zextps256_ps512((a))
#undef _mm512_cvtneps_pbh
#define _mm512_cvtneps_pbh(a) precis_avx512_emulation::cvtneps_pbh((a))
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps(src, a, b) precis_avx512_emulation::dpbf16_ps((src), (a), (b))
