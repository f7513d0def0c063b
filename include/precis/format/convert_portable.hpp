// The commonest conversions where no x86-64 kernel runs (aarch64 and other CPUs, x86-64 without
// AVX2 and F16C, PRECIS_NO_SIMD, PRECIS_ISA=portable): fp16 and bf16 widened to float, and float
// rounded to them to nearest even with IEEE overflow (every activation, gradient and weight of
// a mixed-precision step). Integer arithmetic on the bit patterns without branches, one
// function for a lane (std::uint32_t) or for a vector of four (GCC's and Clang's vector
// extensions, which every 64-bit target has: SSE2, Advanced SIMD), so no intrinsics and no
// dispatch. The same bits as round_to (tests/format: every fp16 and bf16 pattern, every float),
// in the default rounding mode: fp16's subnormals round through one float addition. Also float
// rounded to nearest even to fp8 and the other layouts of at most 8 bits (fp8's scaled casts),
// in vectors of four only, every overflow mode (tests/format: every float whose bits decide the
// rounding; their widening is a table in convert.hpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "precis/config.hpp"
#include "precis/format/detail/core.hpp"

// aarch64: fp16 <-> float by Advanced SIMD's own conversions (fcvtl, fcvtn), which every aarch64
// CPU has, instead of the integer lanes below: one instruction for four values where the lanes
// take about a dozen. The same bits where the FPCR holds its defaults, as Linux, macOS and
// Windows give every thread (round to nearest even, no flush to zero, IEEE half precision:
// AHP clear, NaNs propagated: DN clear): a NaN keeps its sign and leading payload bits and is
// made quiet, as F16C does on x86-64.
#if PRECIS_AARCH64_NEON
#include <arm_neon.h>
#endif

namespace precis::detail {

#if PRECIS_VECTOR_EXT
typedef std::uint32_t u32x4 __attribute__((vector_size(16)));
typedef std::int32_t i32x4 __attribute__((vector_size(16)));
typedef std::uint16_t u16x4 __attribute__((vector_size(8)));
typedef float f32x4 __attribute__((vector_size(16)));
#endif

#if PRECIS_AARCH64_NEON
/// Four fp16 patterns as floats (fcvtl): exact, a NaN made quiet.
inline f32x4 half_to_float_neon(u16x4 h) {
  return (f32x4)vcvt_f32_f16(vreinterpret_f16_u16((uint16x4_t)h));
}

/// Four floats rounded to fp16 patterns (fcvtn): to nearest even, IEEE overflow, a NaN keeping
/// its sign and leading payload bits, made quiet.
inline u16x4 float_to_half_neon(f32x4 x) {
  return (u16x4)vreinterpret_u16_f16(vcvt_f16_f32((float32x4_t)x));
}
#endif

/// All ones in the lanes where a > b, zeros elsewhere.
template <class U>
inline U lanes_greater(U a, U b) {
  if constexpr (std::is_integral_v<U>) {
    return a > b ? ~U{0} : U{0};
  } else {
    return (U)(a > b);
  }
}

/// a where m's lanes are all ones, b where they are zero.
template <class U>
inline U lanes_select(U m, U a, U b) {
  return (a & m) | (b & ~m);
}

/// The float of each lane's 16-bit integer (below 2^15), times 2^-24, as bits: fp16's
/// subnormals, exactly.
template <class U>
inline U subnormal_half_bits(U m) {
  if constexpr (std::is_integral_v<U>) {
    return std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(m)) * 0x1p-24f);
  } else {
    return (U)(__builtin_convertvector((i32x4)m, f32x4) * 0x1p-24f);
  }
}

/// Each lane's float, plus one half, as bits: the float rounded to nearest even to a multiple
/// of 2^-24 (fp16's subnormal step) for |x| < 2^-14, held in the low bits above 0.5's.
template <class U>
inline U plus_half_bits(U a) {
  if constexpr (std::is_integral_v<U>) {
    return std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + 0.5f);
  } else {
    return (U)((f32x4)a + 0.5f);
  }
}

/// fp16 bits (in the low 16 bits of each lane) -> float bits: exact; a NaN made quiet, as F16C's
/// vcvtph2ps does.
template <class U>
inline U half_to_float_lanes(U h) {
  const U zero{};
  const U em = h & 0x7fffu;  // exponent and fraction
  const U normal = (em << 13) + 0x38000000u;  // rebiased by 127 - 15
  const U special = (em << 13) | 0x7f800000u | (lanes_greater(em, zero + 0x7c00u) & 0x00400000u);
  U r = lanes_select(lanes_greater(zero + 0x7c00u, em), normal, special);
  r = lanes_select(lanes_greater(zero + 0x0400u, em), subnormal_half_bits(em), r);
  return ((h & 0x8000u) << 16) | r;
}

/// float bits -> fp16 bits, to nearest even, IEEE overflow (to infinity from 65520 on); a NaN
/// keeps its sign and leading fraction bits and is made quiet, as F16C's vcvtps2ph does.
template <class U>
inline U float_to_half_nearest_lanes(U f) {
  const U zero{};
  const U a = f & 0x7fffffffu;
  const U normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;  // |x| >= 2^-14: carries ripple up
  const U sub = plus_half_bits(a) - 0x3f000000u;                          // |x| < 2^-14
  U r = lanes_select(lanes_greater(zero + 0x38800000u, a), sub, normal);
  r = lanes_select(lanes_greater(a, zero + 0x477fffffu), zero + 0x7c00u, r);  // |x| >= 2^16, infinity
  r = lanes_select(lanes_greater(a, zero + 0x7f800000u), 0x7e00u | ((a >> 13) & 0x3ffu), r);
  return ((f >> 16) & 0x8000u) | r;
}

/// bf16 bits -> float bits: a shift; a NaN made quiet.
template <class U>
inline U bf16_to_float_lanes(U h) {
  const U u = h << 16;
  return u | (lanes_greater(u & 0x7fffffffu, U{} + 0x7f800000u) & 0x00400000u);
}

/// float bits -> bf16 bits, to nearest even, IEEE overflow; a NaN keeps its sign and leading
/// fraction bits and is made quiet.
template <class U>
inline U float_to_bf16_nearest_lanes(U f) {
  const U a = f & 0x7fffffffu;
  const U rounded = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  const U nan = 0x7fc0u | ((a & 0x3fffffu) >> 16);
  return lanes_select(lanes_greater(a, U{} + 0x7f800000u), nan, rounded) | ((f >> 16) & 0x8000u);
}

/// n 16-bit patterns widened to float by Lanes (half_to_float_lanes or bf16_to_float_lanes):
/// whole vectors of 4, then the last 1-3 values through one zero-padded vector.
template <class Lanes>
inline void widen_16_portable(const std::uint16_t* src, float* dst, std::size_t n, Lanes lanes) {
#if PRECIS_VECTOR_EXT
  const std::size_t whole = n / 4 * 4, rest = n - whole;
  const auto step = [&](const std::uint16_t* in, std::uint32_t* out) {
    u16x4 h;
    std::memcpy(&h, in, sizeof h);
    const u32x4 r = lanes(__builtin_convertvector(h, u32x4));
    std::memcpy(out, &r, sizeof r);
  };
  for (std::size_t i = 0; i < whole; i += 4) {
    std::uint32_t out[4];
    step(src + i, out);
    std::memcpy(dst + i, out, sizeof out);
  }
  if (rest > 0) {
    std::uint16_t in[4] = {};
    std::uint32_t out[4];
    for (std::size_t j = 0; j < 3 && j < rest; ++j) in[j] = src[whole + j];
    step(in, out);
    for (std::size_t j = 0; j < 3 && j < rest; ++j) std::memcpy(dst + whole + j, out + j, 4);
  }
#else
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = lanes(std::uint32_t{src[i]});
    std::memcpy(dst + i, &r, 4);
  }
#endif
}

/// n floats rounded to 16-bit patterns by Lanes (float_to_half_nearest_lanes or
/// float_to_bf16_nearest_lanes): whole vectors of 4, then the last 1-3 values through one
/// zero-padded vector.
template <class Lanes>
inline void narrow_16_portable(const float* src, std::uint16_t* dst, std::size_t n, Lanes lanes) {
#if PRECIS_VECTOR_EXT
  const std::size_t whole = n / 4 * 4, rest = n - whole;
  const auto step = [&](const float* in, std::uint16_t* out) {
    u32x4 f;
    std::memcpy(&f, in, sizeof f);
    const u16x4 r = __builtin_convertvector(lanes(f), u16x4);  // every lane below 2^16
    std::memcpy(out, &r, sizeof r);
  };
  for (std::size_t i = 0; i < whole; i += 4) step(src + i, dst + i);
  if (rest > 0) {
    float in[4] = {};
    std::uint16_t out[4];
    for (std::size_t j = 0; j < 3 && j < rest; ++j) in[j] = src[whole + j];
    step(in, out);
    for (std::size_t j = 0; j < 3 && j < rest; ++j) dst[whole + j] = out[j];
  }
#else
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t f;
    std::memcpy(&f, src + i, 4);
    dst[i] = static_cast<std::uint16_t>(lanes(f));
  }
#endif
}

inline void half_to_float_portable(const std::uint16_t* src, float* dst, std::size_t n) {
#if PRECIS_AARCH64_NEON
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    u16x4 h;
    std::memcpy(&h, src + i, sizeof h);
    const f32x4 f = half_to_float_neon(h);
    std::memcpy(dst + i, &f, sizeof f);
  }
  if (i < n) {  // the last 1-3 values through one zero-padded vector
    u16x4 h{};
    std::memcpy(&h, src + i, (n - i) * sizeof(std::uint16_t));
    const f32x4 f = half_to_float_neon(h);
    std::memcpy(dst + i, &f, (n - i) * sizeof(float));
  }
#else
  widen_16_portable(src, dst, n, [](auto h) { return half_to_float_lanes(h); });
#endif
}
inline void bf16_to_float_portable(const std::uint16_t* src, float* dst, std::size_t n) {
  widen_16_portable(src, dst, n, [](auto h) { return bf16_to_float_lanes(h); });
}
inline void float_to_half_nearest_portable(const float* src, std::uint16_t* dst, std::size_t n) {
#if PRECIS_AARCH64_NEON
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 f;
    std::memcpy(&f, src + i, sizeof f);
    const u16x4 h = float_to_half_neon(f);
    std::memcpy(dst + i, &h, sizeof h);
  }
  if (i < n) {  // the last 1-3 values through one zero-padded vector
    f32x4 f{};
    std::memcpy(&f, src + i, (n - i) * sizeof(float));
    const u16x4 h = float_to_half_neon(f);
    std::memcpy(dst + i, &h, (n - i) * sizeof(std::uint16_t));
  }
#else
  narrow_16_portable(src, dst, n, [](auto f) { return float_to_half_nearest_lanes(f); });
#endif
}
inline void float_to_bf16_nearest_portable(const float* src, std::uint16_t* dst, std::size_t n) {
  narrow_16_portable(src, dst, n, [](auto f) { return float_to_bf16_nearest_lanes(f); });
}

/// The layouts float_to_small_nearest_lanes takes: at most 8 bits, s and the subnormal step
/// normal floats.
constexpr bool small_portable(layout l) {
  return l.total_bits() <= 8 && l.emax() + 24 - l.mant_bits <= 127 && l.emin() - l.mant_bits >= -126 &&
         l.mant_bits - l.emin() < 31;
}

#if PRECIS_VECTOR_EXT
/// float bits -> the bits of a layout L of at most 8 bits whose values are floats (fp8 e4m3 and
/// e5m2, ...), to nearest even: |x| + s - s in float, with s = 2^(E + 23 - M) for x's binade 2^E
/// clamped to L's normal binades (emin .. emax + 1), is |x| on L's grid (the sum's ulp is L's
/// step there; below 2^emin its subnormal step), then the exponent is rebiased, or a subnormal
/// scaled to its integer. A value that rounds beyond L's largest, and an infinity, become
/// `overflow_bits` (the overflow mode's pattern); a NaN L's NaN (IEEE layouts keep the leading
/// payload bits), with the sign as every other value.
template <layout L>
inline u32x4 float_to_small_nearest_lanes(u32x4 f, std::uint32_t overflow_bits) {
  static_assert(small_portable(L));
  constexpr int M = L.mant_bits;
  constexpr auto lo = static_cast<std::uint32_t>(L.emin() + 127) << 23, hi = static_cast<std::uint32_t>(L.emax() + 128) << 23;
  constexpr auto largest = (static_cast<std::uint32_t>(L.emax() + 127) << 23) |
                           static_cast<std::uint32_t>((L.max_bits() & L.mant_mask()) << (23 - M));
  constexpr float to_sum = static_cast<float>(1u << (23 - M));  // 2^E -> s
  constexpr float to_units = static_cast<float>(1u << (M - L.emin()));  // a subnormal -> its integer
  const u32x4 a = f & 0x7fffffffu;
  u32x4 e = a & 0x7f800000u;
  e = lanes_select(lanes_greater(u32x4{} + lo, e), u32x4{} + lo, e);
  e = lanes_select(lanes_greater(e, u32x4{} + hi), u32x4{} + hi, e);
  const f32x4 s = (f32x4)e * to_sum;
  const u32x4 r = (u32x4)(((f32x4)a + s) - s);  // a NaN stays one; an infinity stays one
  const u32x4 tiny = lanes_greater(u32x4{} + lo, r);
  const u32x4 normal = (r - (static_cast<std::uint32_t>(127 - L.bias()) << 23)) >> (23 - M);
  const u32x4 sub = (u32x4)__builtin_convertvector((f32x4)(r & tiny) * to_units, i32x4);  // exact
  u32x4 bits = lanes_select(tiny, sub, normal);
  bits = lanes_select(lanes_greater(r, u32x4{} + largest), u32x4{} + overflow_bits, bits);
  u32x4 nan = u32x4{} + static_cast<std::uint32_t>(L.nan_bits());
  if constexpr (L.enc == encoding::ieee) nan |= (a & 0x3fffffu) >> (23 - M);
  bits = lanes_select(lanes_greater(a, u32x4{} + 0x7f800000u), nan, bits);
  return bits | ((f >> 31) << (L.exp_bits + M));
}

/// n floats rounded to the 8-bit patterns of L by float_to_small_nearest_lanes: whole vectors
/// of 4, then the last 1-3 values through one zero-padded vector.
template <layout L>
inline void float_to_small_nearest_portable(const float* src, std::uint8_t* dst, std::size_t n,
                                            std::uint32_t overflow_bits) {
  const auto step = [&](const float* in, std::uint8_t* out) {
    u32x4 f;
    std::memcpy(&f, in, sizeof f);
    const u32x4 r = float_to_small_nearest_lanes<L>(f, overflow_bits);  // every lane below 2^8
    for (int j = 0; j < 4; ++j) out[j] = static_cast<std::uint8_t>(r[j]);
  };
  const std::size_t whole = n / 4 * 4, rest = n - whole;
  for (std::size_t i = 0; i < whole; i += 4) step(src + i, dst + i);
  if (rest > 0) {
    float in[4] = {};
    std::uint8_t out[4];
    for (std::size_t j = 0; j < 3 && j < rest; ++j) in[j] = src[whole + j];
    step(in, out);
    for (std::size_t j = 0; j < 3 && j < rest; ++j) dst[whole + j] = out[j];
  }
}
#endif

}  // namespace precis::detail
