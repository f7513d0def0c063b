// AVX2 / F16C kernels for bulk conversion between float and the small formats. Each kernel
// is the lane-parallel form of detail::encode_bits for a float source (32-bit integer ops with
// per-lane variable shifts), and is tested bit for bit against the scalar path.
// Compiled with target attributes and chosen at run time (detail::cpu_has_avx2_f16c), so
// consumers need no -march flag.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "precis/error.hpp"
#include "precis/format/detail/bit_format.hpp"

// Functions compiled for AVX2/F16C/FMA whatever the translation unit's flags (also used by the
// GEMM kernels); only called after a run-time CPU check.
#define PRECIS_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
#if defined(PRECIS_AVX512_EMULATION)
// A test build whose AVX-512 intrinsics are emulated with AVX2 (tests/isa_emulation): the
// AVX-512 functions are compiled for AVX2, so the compiler emits no AVX-512 instruction itself.
#define PRECIS_TARGET_AVX512 PRECIS_TARGET_AVX2
#define PRECIS_TARGET_AVX512_BF16 PRECIS_TARGET_AVX2
#else
#define PRECIS_TARGET_AVX512 __attribute__((target("avx512f,avx2,f16c,fma")))
#define PRECIS_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c,fma")))
#endif

namespace precis::detail {

/// The highest instruction-set level precis may use on this process's CPU: 3 (everything it
/// finds), 2 (AVX-512F without AVX512-BF16, AVX512-FP16 and AMX: as on a Skylake-SP), 1 (AVX2,
/// F16C and FMA, not AVX-512: as on a CPU without it) or 0 (portable code only), from the
/// environment variable PRECIS_ISA (all, avx512, avx2 or portable), read once. Every kernel
/// (conversions, pooling, the GEMM, the optimizers) asks through the cpu_has_ functions, so the
/// cap makes a machine behave as an older one: for testing the lower paths on a newer machine
/// and for timing them. PRECIS_GEMM_ISA caps the GEMM alone.
inline int isa_cap() {
  static const int cap = [] {
    const char* e = std::getenv("PRECIS_ISA");
    if (e == nullptr) return 3;
    const std::string v(e);
    if (v == "all") return 3;
    if (v == "avx512") return 2;
    if (v == "avx2") return 1;
    if (v == "portable") return 0;
    throw invalid_argument("precis: PRECIS_ISA=\"" + v +
                           "\"; expected all, avx512, avx2 or portable");
  }();
  return cap;
}

/// CPUID leaf `leaf`, sub-leaf `sub`: {eax, ebx, ecx, edx}, all zero past the CPU's highest
/// leaf. (Registers in an array: nvcc's front end warns of every named one an asm sets and the
/// code does not read.)
inline std::array<unsigned, 4> cpuid(unsigned leaf, unsigned sub = 0) {
  std::array<unsigned, 4> r{};
  if (leaf > static_cast<unsigned>(__get_cpuid_max(0, nullptr))) return r;  // int in Clang's cpuid.h
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
  return r;
}

/// XCR0, the register states the OS saves; only where CPUID.1:ECX says OSXSAVE.
inline std::uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t{hi} << 32) | lo;
}

/// The highest level this process's CPU and OS support, whatever PRECIS_ISA says: 2 where
/// AVX-512F is usable (with AVX2, F16C and FMA; the OS saves the opmask and zmm state, XCR0 bits
/// 5-7), 1 where AVX2 and F16C are (the OS saves the ymm state), 0 otherwise. (CPUID + XGETBV;
/// Clang 14's __builtin_cpu_supports does not know "f16c".) Every AVX-512 feature precis uses
/// (AVX512-BF16, AVX512-FP16, AMX) is asked for at level 2 only.
inline int cpu_isa_level() {
  static const int level = [] {
    const unsigned c = cpuid(1)[2];
    const bool fma = (c >> 12) & 1u, f16c = (c >> 29) & 1u, avx = (c >> 28) & 1u, osxsave = (c >> 27) & 1u;
    if (!(f16c && avx && osxsave)) return 0;
    if ((xcr0() & 0x6u) != 0x6u) return 0;                  // XMM and YMM state saved by the OS
    if (((cpuid(7)[1] >> 5) & 1u) == 0) return 0;           // AVX2
#if defined(PRECIS_AVX512_EMULATION)
    if (fma) return 2;  // the test build's emulated AVX-512 runs wherever AVX2, FMA and F16C do
#endif
    if (!fma || ((cpuid(7)[1] >> 16) & 1u) == 0) return 1;  // AVX-512F
    return (xcr0() & 0xE6u) == 0xE6u ? 2 : 1;               // XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM
  }();
  return level;
}

/// min(isa_cap(), cpu_isa_level()): the CPUID and environment reads, out of line so that the
/// check below stays small enough to inline.
[[gnu::noinline]] inline int isa_level_first_use() { return std::min(isa_cap(), cpu_isa_level()); }

/// The level the kernels may use, min(isa_cap(), cpu_isa_level()), read once: inlined into its
/// callers, a load and a compare (the conversions of short runs, an attention head's rows of 16
/// values, ask for every run; as calls, two of them cost about as much as converting 16 values).
[[gnu::always_inline]] inline int isa_level_in_use() {
  static const int level = isa_level_first_use();
  return level;
}

/// AVX2 and F16C usable, and the PRECIS_ISA cap at avx2 or above.
inline bool cpu_has_avx2_f16c() { return isa_level_in_use() >= 1; }

/// AVX-512F usable (with AVX2, F16C and FMA), and PRECIS_ISA does not cap it.
inline bool cpu_has_avx512f() { return isa_level_in_use() >= 2; }

/// Whether the CPU has AVX512-BF16, whatever PRECIS_ISA says: AVX-512F usable at the machine's
/// level (cpu_isa_level), AVX512BW and AVX512VL (CPUID.(EAX=7, ECX=0):EBX bits 30 and 31; every
/// CPU with AVX512-BF16 has both) and CPUID.(EAX=7, ECX=1):EAX bit 5.
inline bool cpu_avx512_bf16_present() {
  static const bool ok = [] {
    if (cpu_isa_level() < 2) return false;
#if defined(PRECIS_AVX512_EMULATION)
    return true;
#endif
    const auto l7 = cpuid(7);
    if (((l7[1] >> 30) & 3u) != 3u) return false;
    if (l7[0] < 1) return false;  // no sub-leaf 1
    return ((cpuid(7, 1)[0] >> 5) & 1u) != 0;
  }();
  return ok;
}

/// Whether the CPU has AVX512-FP16, whatever PRECIS_ISA says: AVX-512F usable at the machine's
/// level, AVX512BW and VL, and CPUID.(EAX=7, ECX=0):EDX bit 23.
inline bool cpu_avx512_fp16_present() {
  static const bool ok = [] {
    if (cpu_isa_level() < 2) return false;
#if defined(PRECIS_AVX512_EMULATION)
    return true;
#endif
    const auto l7 = cpuid(7);
    if (((l7[1] >> 30) & 3u) != 3u) return false;  // AVX512BW (bit 30), AVX512VL (bit 31)
    return ((l7[3] >> 23) & 1u) != 0;
  }();
  return ok;
}

/// AVX512-BF16 usable: present (cpu_avx512_bf16_present) and PRECIS_ISA not capping the
/// process at avx512 or below.
[[gnu::noinline]] inline bool avx512_bf16_first_use() {
  return isa_cap() >= 3 && cpu_avx512_bf16_present();
}
inline bool cpu_has_avx512_bf16() {
  static const bool ok = avx512_bf16_first_use();  // read once, as isa_level_in_use
  return ok;
}

/// Which float -> layout conversions the AVX2 kernel handles: float sources with at least one
/// bit dropped and an exponent range inside float's.
constexpr bool avx2_encodable(layout l) {
  return l.exp_bits <= 8 && l.mant_bits <= 22 && fits_float(l);
}

/// The pattern a finite overflow (in a mode where IEEE gives infinity) or an infinite source
/// becomes, as in encode_bits.
template <layout L, overflow Ov>
constexpr std::uint64_t overflow_pattern() {
  return Ov == overflow::infinity ? L.inf_bits() : Ov == overflow::saturate ? L.max_bits() : L.nan_bits();
}

template <class Bits>
PRECIS_TARGET_AVX2 inline void store8(Bits* dst, __m256i v) {
  if constexpr (sizeof(Bits) == 4) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v);
  } else {
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    if constexpr (sizeof(Bits) == 2) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), w);
    } else {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(w, w));
    }
  }
}

/// float -> layout L, 8 lanes at a time. Returns how many leading elements it converted
/// (a multiple of 8); the caller finishes the tail with the scalar path.
template <layout L, rounding Mode, overflow Ov, class Bits>
PRECIS_TARGET_AVX2 std::size_t encode_from_float_avx2(const float* src, Bits* dst, std::size_t n) {
  static_assert(avx2_encodable(L) && Mode != rounding::stochastic);
  constexpr int M = L.mant_bits;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i exp_inf = _mm256_set1_epi32(0x7f800000);
  const __m256i mant_mask = _mm256_set1_epi32(0x7fffff);
  const __m256i hidden = _mm256_set1_epi32(0x800000);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i max_bits = _mm256_set1_epi32(static_cast<int>(L.max_bits()));
  const __m256i ov_bits = _mm256_set1_epi32(static_cast<int>(overflow_pattern<L, Ov>()));
  const __m256i nan_bits = _mm256_set1_epi32(static_cast<int>(L.nan_bits()));
  const __m256i payload_mask = _mm256_set1_epi32(0x3fffff);
  // The target's normal range starts at float biased exponent emin + 127.
  const __m256i tn_threshold = _mm256_set1_epi32(L.emin() + 126);
  const __m256i shift_normal = _mm256_set1_epi32(23 - M);
  const __m256i shift_sub_base = _mm256_set1_epi32(L.emin() - M + 150);
  const __m256i shift_cap = _mm256_set1_epi32(25);
  const __m256i base_bias = _mm256_set1_epi32(L.bias() - 128);

  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i a = _mm256_and_si256(x, abs_mask);
    const __m256i neg = _mm256_srai_epi32(x, 31);
    const __m256i e = _mm256_srli_epi32(a, 23);
    const __m256i m = _mm256_and_si256(a, mant_mask);
    const __m256i src_normal = _mm256_cmpgt_epi32(e, zero);
    const __m256i sig = _mm256_or_si256(m, _mm256_and_si256(src_normal, hidden));
    const __m256i ee = _mm256_max_epi32(e, one);
    const __m256i tn = _mm256_cmpgt_epi32(e, tn_threshold);
    // Bits of sig below the target's lsb; capped at 25 (sig < 2^24, so any larger shift
    // leaves q = 0 with a nonzero remainder below one half, exactly like 25).
    __m256i shift = _mm256_blendv_epi8(_mm256_sub_epi32(shift_sub_base, ee), shift_normal, tn);
    shift = _mm256_min_epi32(shift, shift_cap);
    __m256i q = _mm256_srlv_epi32(sig, shift);
    const __m256i rem = _mm256_sub_epi32(sig, _mm256_sllv_epi32(q, shift));
    __m256i up;
    if constexpr (Mode == rounding::nearest_even) {
      const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one));
      const __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(q, one), one);
      up = _mm256_or_si256(_mm256_cmpgt_epi32(rem, half),
                           _mm256_and_si256(_mm256_cmpeq_epi32(rem, half), odd));
    } else if constexpr (Mode == rounding::toward_zero) {
      up = zero;
    } else {
      const __m256i inexact = _mm256_xor_si256(_mm256_cmpeq_epi32(rem, zero), _mm256_set1_epi32(-1));
      up = Mode == rounding::upward ? _mm256_andnot_si256(neg, inexact) : _mm256_and_si256(neg, inexact);
    }
    q = _mm256_sub_epi32(q, up);  // up is all ones where rounding away from zero
    const __m256i base = _mm256_and_si256(
        tn, _mm256_slli_epi32(_mm256_add_epi32(e, base_bias), M));
    __m256i bits = _mm256_add_epi32(base, q);
    // Overflow: beyond the largest finite pattern.
    __m256i inf_like;
    if constexpr (Mode == rounding::nearest_even) inf_like = _mm256_set1_epi32(-1);
    else if constexpr (Mode == rounding::toward_zero) inf_like = zero;
    else if constexpr (Mode == rounding::upward) inf_like = _mm256_xor_si256(neg, _mm256_set1_epi32(-1));
    else inf_like = neg;
    const __m256i ovf = _mm256_cmpgt_epi32(bits, max_bits);
    bits = _mm256_blendv_epi8(bits, _mm256_blendv_epi8(max_bits, ov_bits, inf_like), ovf);
    // Infinite and NaN sources.
    bits = _mm256_blendv_epi8(bits, ov_bits, _mm256_cmpeq_epi32(a, exp_inf));
    __m256i nan_val = nan_bits;
    if constexpr (L.enc == encoding::ieee) {
      nan_val = _mm256_or_si256(nan_bits, _mm256_srli_epi32(_mm256_and_si256(m, payload_mask), 23 - M));
    }
    bits = _mm256_blendv_epi8(bits, nan_val, _mm256_cmpgt_epi32(a, exp_inf));
    bits = _mm256_or_si256(bits, _mm256_srli_epi32(_mm256_andnot_si256(abs_mask, x), 31 - (L.exp_bits + M)));
    store8(dst + i, bits);
  }
  return i;
}

/// float -> a layout with float's 8-bit exponent (bf16, tf32): the target grid is float's grid
/// with the low 23-M bits dropped in every binade, subnormals included, so rounding is one add
/// and one shift (carries ripple into the exponent exactly as a rounding carry should).
template <layout L, rounding Mode, overflow Ov, class Bits>
PRECIS_TARGET_AVX2 std::size_t encode_e8_from_float_avx2(const float* src, Bits* dst, std::size_t n) {
  static_assert(L.exp_bits == 8 && L.enc == encoding::ieee && Mode != rounding::stochastic);
  constexpr int shift = 23 - L.mant_bits;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i exp_inf = _mm256_set1_epi32(0x7f800000);
  const __m256i ulp_minus_1 = _mm256_set1_epi32((1 << shift) - 1);
  const __m256i half_minus_1 = _mm256_set1_epi32((1 << (shift - 1)) - 1);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i max_bits = _mm256_set1_epi32(static_cast<int>(L.max_bits()));
  const __m256i ov_bits = _mm256_set1_epi32(static_cast<int>(overflow_pattern<L, Ov>()));
  const __m256i nan_bits = _mm256_set1_epi32(static_cast<int>(L.nan_bits()));
  const __m256i payload_mask = _mm256_set1_epi32(0x3fffff);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i a = _mm256_and_si256(x, abs_mask);
    __m256i r;
    if constexpr (Mode == rounding::nearest_even) {
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, shift), one);
      r = _mm256_add_epi32(a, _mm256_add_epi32(half_minus_1, odd));
    } else if constexpr (Mode == rounding::toward_zero) {
      r = a;
    } else {
      const __m256i neg = _mm256_srai_epi32(x, 31);
      r = _mm256_add_epi32(a, Mode == rounding::upward ? _mm256_andnot_si256(neg, ulp_minus_1)
                                                       : _mm256_and_si256(neg, ulp_minus_1));
    }
    __m256i bits = _mm256_srli_epi32(r, shift);
    if constexpr (Ov != overflow::infinity) {
      // Finite values that rounded past the largest finite one, and infinite sources.
      bits = _mm256_blendv_epi8(bits, ov_bits, _mm256_cmpgt_epi32(bits, max_bits));
    }
    __m256i nan_val = _mm256_or_si256(nan_bits, _mm256_srli_epi32(_mm256_and_si256(a, payload_mask), shift));
    bits = _mm256_blendv_epi8(bits, nan_val, _mm256_cmpgt_epi32(a, exp_inf));
    bits = _mm256_or_si256(bits, _mm256_srli_epi32(_mm256_andnot_si256(abs_mask, x), shift));
    store8(dst + i, bits);
  }
  return i;
}

// The AVX-512 shifts, widenings and narrowings below are the zero-masked forms with a full
// mask (the same instructions): GCC 12's unmasked forms pass _mm512_undefined_epi32() through,
// which it then reports as "may be used uninitialized" once inlined (a false positive).
constexpr __mmask16 all16 = 0xFFFF;
/// float -> bf16 rounded to nearest even with IEEE overflow, 16 lanes at a time: the AVX-512
/// form of encode_e8_from_float_avx2 for that case (the common one: every bf16 activation and
/// gradient of a mixed-precision step), bit-identical to it.
PRECIS_TARGET_AVX512 inline std::size_t float_to_bf16_nearest_avx512(const float* src, std::uint16_t* dst, std::size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i exp_inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half_minus_1 = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i nan_bits = _mm512_set1_epi32(0x7fc0);
  const __m512i payload_mask = _mm512_set1_epi32(0x3fffff);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __m512i a = _mm512_and_si512(x, abs_mask);
    const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(all16, a, 16), one);
    __m512i bits = _mm512_maskz_srli_epi32(all16, _mm512_add_epi32(a, _mm512_add_epi32(half_minus_1, odd)), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(a, exp_inf);
    bits = _mm512_mask_mov_epi32(bits, is_nan, _mm512_or_si512(nan_bits, _mm512_maskz_srli_epi32(all16, _mm512_and_si512(a, payload_mask), 16)));
    bits = _mm512_or_si512(bits, _mm512_maskz_srli_epi32(all16, _mm512_maskz_andnot_epi32(all16, abs_mask, x), 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_maskz_cvtepi32_epi16(all16, bits));
  }
  return i;
}

/// The same conversion with AVX512-BF16's vcvtneps2bf16, which rounds to nearest even and quiets
/// a NaN keeping its sign and leading payload bits exactly as the integer lanes above do, but
/// reads a subnormal input as zero: a step of 16 that holds one goes through the integer lanes
/// instead (the exhaustive conversion test checks every float through whichever path the CPU
/// takes). About 3x fewer instructions than the integer lanes.
PRECIS_TARGET_AVX512_BF16 inline std::size_t float_to_bf16_nearest_avx512_bf16(const float* src, std::uint16_t* dst,
                                                                            std::size_t n) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    const __m512i xi = _mm512_castps_si512(x);
    const __mmask16 subnormal = _mm512_mask_testn_epi32_mask(_mm512_test_epi32_mask(xi, abs_mask), xi, exp_mask);
    if (subnormal != 0) {
      float_to_bf16_nearest_avx512(src + i, dst + i, 16);
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
  }
  return i;
}

/// bf16 -> float, 16 lanes at a time (a shift, NaNs quieted): decode_to_float_avx2's AVX-512
/// form for bf16, bit-identical to it.
PRECIS_TARGET_AVX512 inline std::size_t bf16_to_float_avx512(const std::uint16_t* src, float* dst, std::size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i exp_inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i f = _mm512_maskz_slli_epi32(all16, _mm512_maskz_cvtepu16_epi32(all16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(f, abs_mask), exp_inf);
    _mm512_storeu_si512(dst + i, _mm512_mask_or_epi32(f, is_nan, f, quiet));
  }
  return i;
}
/// The AVX2 forms of the two above, 8 lanes to a register and 16 to a step (then 8), bit-identical to
/// them (and to encode_e8_from_float_avx2 and decode_to_float_avx2 for bf16, whose general
/// per-lane shifts and tables cost 2-3x as much for this format): the bf16 conversions of a
/// mixed-precision step on a CPU without AVX-512.
PRECIS_TARGET_AVX2 inline __m256i float_to_bf16_nearest_lanes(__m256i x) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i a = _mm256_and_si256(x, abs_mask);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(a, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  const __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  const __m256i nan = _mm256_or_si256(_mm256_set1_epi32(0x7fc0), _mm256_srli_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0x3fffff)), 16));
  const __m256i bits = _mm256_blendv_epi8(rounded, nan, is_nan);
  return _mm256_or_si256(bits, _mm256_srli_epi32(_mm256_andnot_si256(abs_mask, x), 16));
}
PRECIS_TARGET_AVX2 inline std::size_t float_to_bf16_nearest_avx2(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = float_to_bf16_nearest_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = float_to_bf16_nearest_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // every lane is in [0, 0xffff]: the saturating pack is exact; it interleaves 128-bit halves
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
  }
  if (i + 8 <= n) {
    const __m256i v = float_to_bf16_nearest_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
    i += 8;
  }
  return i;
}
PRECIS_TARGET_AVX2 inline __m256i bf16_to_float_lanes(__m128i v) {
  const __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16);
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(f, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_or_si256(f, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x00400000)));
}
PRECIS_TARGET_AVX2 inline std::size_t bf16_to_float_avx2(const std::uint16_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_to_float_lanes(_mm256_castsi256_si128(v)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 8), bf16_to_float_lanes(_mm256_extracti128_si256(v, 1)));
  }
  if (i + 8 <= n) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_to_float_lanes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    i += 8;
  }
  return i;
}

/// float -> half and half -> float with AVX-512F's vcvtps2ph / vcvtph2ps, 16 lanes at a time:
/// float_to_half_f16c's and decode_to_float_avx2's AVX-512 forms, bit-identical to them.
template <rounding Mode>
PRECIS_TARGET_AVX512 std::size_t float_to_half_avx512(const float* src, std::uint16_t* dst, std::size_t n) {
  constexpr int imm = Mode == rounding::nearest_even  ? _MM_FROUND_TO_NEAREST_INT
                      : Mode == rounding::toward_zero ? _MM_FROUND_TO_ZERO
                      : Mode == rounding::upward      ? _MM_FROUND_TO_POS_INF
                                                      : _MM_FROUND_TO_NEG_INF;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_maskz_cvtps_ph(all16, _mm512_loadu_ps(src + i), imm | _MM_FROUND_NO_EXC));
  }
  return i;
}

PRECIS_TARGET_AVX512 inline std::size_t half_to_float_avx512(const std::uint16_t* src, float* dst, std::size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i exp_inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i f = _mm512_castps_si512(
        _mm512_maskz_cvtph_ps(all16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(f, abs_mask), exp_inf);
    _mm512_storeu_si512(dst + i, _mm512_mask_or_epi32(f, is_nan, f, quiet));
  }
  return i;
}

/// float -> half with F16C's vcvtps2ph, which rounds in any of the four IEEE modes (the
/// immediate selects it) and overflows to infinity exactly as IEEE 754 specifies.
template <rounding Mode>
PRECIS_TARGET_AVX2 std::size_t float_to_half_f16c(const float* src, std::uint16_t* dst, std::size_t n) {
  constexpr int imm = Mode == rounding::nearest_even  ? _MM_FROUND_TO_NEAREST_INT
                      : Mode == rounding::toward_zero ? _MM_FROUND_TO_ZERO
                      : Mode == rounding::upward      ? _MM_FROUND_TO_POS_INF
                                                      : _MM_FROUND_TO_NEG_INF;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), imm | _MM_FROUND_NO_EXC);
    const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), imm | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8), b);
  }
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), imm | _MM_FROUND_NO_EXC));
  }
  return i;
}

/// Sets the quiet bit of NaN lanes (conversions deliver quiet NaNs, as the scalar path does).
PRECIS_TARGET_AVX2 inline __m256i quiet_nans(__m256i f) {
  const __m256i a = _mm256_and_si256(f, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  return _mm256_or_si256(f, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x00400000)));
}

/// Exact widening of a small format to float.
/// - fp16: F16C vcvtph2ps;
/// - 8 exponent bits (bf16, tf32): a left shift moves sign, exponent and mantissa into place;
/// - 8-bit formats with 2 to 5 exponent bits (fp8 e4m3 and e5m2): the bits moved into an fp16
///   pattern (sign on top, exponent and mantissa left-aligned below it), widened by vcvtph2ps
///   and multiplied by 2^(15 - bias): both steps exact, subnormals included (fp16's subnormal
///   spacing scaled by the same power of two is the format's). The format's own infinities and
///   NaNs, which that would read as finite, come from the table below;
/// - other 8-bit formats: a 256-entry table (built by the scalar decoder) and a gather.
template <layout L>
struct decode_table {
  static constexpr std::array<float, 256> values = [] {
    std::array<float, 256> t{};
    for (std::uint32_t b = 0; b < 256; ++b) t[b] = decode_to_float<L>(b);
    return t;
  }();
};

constexpr bool avx2_decodable(layout l) {
  return fits_float(l) && (l == layout{5, 10, encoding::ieee} || l.exp_bits == 8 || l.total_bits() <= 8);
}

/// 8-bit layouts decoded through fp16 (above): every value's exponent and precision fit fp16's
/// after the shift, and scaled by 2^(15 - bias) it is a normal float (no FTZ/DAZ dependence).
constexpr bool decodes_via_half(layout l) {
  return l.total_bits() <= 8 && l.exp_bits >= 2 && l.exp_bits <= 5 && l.mant_bits <= 10 &&
         (l.exp_bits < 5 || (l.enc == encoding::ieee && l.bias() == 15)) && l.emin() - l.mant_bits >= -126;
}

/// The fp16 patterns h of 8 or 16 8-bit values already widened to 16-bit lanes (decodes_via_half),
/// and the lanes holding one of the format's infinities or NaNs (all ones where special).
template <layout L>
PRECIS_TARGET_AVX2 inline void half_of8_sse(__m128i b, __m128i& h, __m128i& special) {
  constexpr int M = L.mant_bits, EM = L.exp_bits + L.mant_bits;
  const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(static_cast<short>(L.magnitude_mask())));
  const __m128i sign = _mm_and_si128(b, _mm_set1_epi16(static_cast<short>(L.sign_bit())));
  h = _mm_or_si128(_mm_slli_epi16(mag, 10 - M), _mm_slli_epi16(sign, 15 - EM));
  if constexpr (L.enc == encoding::ieee) {
    const auto inf = static_cast<short>(L.inf_bits());
    special = _mm_cmpeq_epi16(_mm_and_si128(mag, _mm_set1_epi16(inf)), _mm_set1_epi16(inf));
  } else {
    special = _mm_cmpeq_epi16(mag, _mm_set1_epi16(static_cast<short>(L.magnitude_mask())));
  }
}

template <layout L>
PRECIS_TARGET_AVX2 inline void half_of8_avx2(__m256i b, __m256i& h, __m256i& special) {
  constexpr int M = L.mant_bits, EM = L.exp_bits + L.mant_bits;
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(static_cast<short>(L.magnitude_mask())));
  const __m256i sign = _mm256_and_si256(b, _mm256_set1_epi16(static_cast<short>(L.sign_bit())));
  h = _mm256_or_si256(_mm256_slli_epi16(mag, 10 - M), _mm256_slli_epi16(sign, 15 - EM));
  if constexpr (L.enc == encoding::ieee) {
    const auto inf = static_cast<short>(L.inf_bits());
    special = _mm256_cmpeq_epi16(_mm256_and_si256(mag, _mm256_set1_epi16(inf)), _mm256_set1_epi16(inf));
  } else {
    special = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(static_cast<short>(L.magnitude_mask())));
  }
}

template <layout L>
constexpr float half_scale() {
  float s = 1.0f;
  for (int e = L.bias(); e < 15; ++e) s *= 2.0f;
  return s;
}

template <layout L, class Bits>
PRECIS_TARGET_AVX2 std::size_t decode_to_float_avx2(const Bits* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i f;
    if constexpr (decodes_via_half(L)) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i));
      __m128i h, special;
      half_of8_sse<L>(_mm_cvtepu8_epi16(b), h, special);
      const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(half_scale<L>()));
      if (_mm_movemask_epi8(special) == 0) {
        _mm256_storeu_ps(dst + i, v);
        continue;
      }
      f = _mm256_castps_si256(_mm256_i32gather_ps(decode_table<L>::values.data(), _mm256_cvtepu8_epi32(b), 4));
    } else if constexpr (L == layout{5, 10, encoding::ieee}) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    } else if constexpr (L.total_bits() <= 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i));
      f = _mm256_castps_si256(
          _mm256_i32gather_ps(decode_table<L>::values.data(), _mm256_cvtepu8_epi32(b), 4));
    } else {
      __m256i w;
      if constexpr (sizeof(Bits) == 2) {
        w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      } else {
        w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      }
      f = _mm256_slli_epi32(w, 23 - L.mant_bits);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), quiet_nans(f));
  }
  return i;
}

/// 8-bit formats -> float, 16 lanes at a time: decode_to_float_avx2's paths at twice the width
/// (NaNs quieted the same way), bit-identical to them.
template <layout L, class Bits>
PRECIS_TARGET_AVX512 std::size_t decode8_to_float_avx512(const Bits* src, float* dst, std::size_t n) {
  static_assert(L.total_bits() <= 8 && sizeof(Bits) == 1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i exp_inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  const float* table = decode_table<L>::values.data();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    if constexpr (decodes_via_half(L)) {
      __m256i h, special;
      half_of8_avx2<L>(_mm256_cvtepu8_epi16(b), h, special);
      if (_mm256_movemask_epi8(special) == 0) {
        _mm512_storeu_ps(dst + i, _mm512_maskz_mul_ps(all16, _mm512_maskz_cvtph_ps(all16, h), _mm512_set1_ps(half_scale<L>())));
        continue;
      }
    }
    const __m512i idx = _mm512_maskz_cvtepu8_epi32(all16, b);
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"  // GCC's -O0 macro passes the mask as a short
#endif
    const __m512i f = _mm512_castps_si512(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), all16, idx, table, 4));
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(f, abs_mask), exp_inf);
    _mm512_storeu_si512(dst + i, _mm512_mask_or_epi32(f, is_nan, f, quiet));
  }
  return i;
}

}  // namespace precis::detail


#endif  // PRECIS_X86_SIMD
