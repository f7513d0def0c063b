// The one rounding mechanism behind every precis conversion.
//
// A source value is first *split* exactly into sign, class (zero, finite, inf, NaN), the
// exponent of its leading bit and a 64-bit left-aligned significand plus a sticky bit for
// anything below those 64 bits. The split is then rounded once onto the target's grid
// (`round_significand`) and *composed* into the target: bit patterns for the binary
// interchange layouts (fp8, fp16, bf16, tf32, fp32, fp64, any minifloat), or ldexp for
// types with a wide exponent (long double, Boost.Multiprecision). Because the split is
// exact, every conversion rounds exactly once, directly from the source bits.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "precis/config.hpp"
#include "precis/format/rounding.hpp"

namespace precis {

/// Bit-level encodings of small binary formats.
/// - `ieee`: IEEE 754 layout: exponent field all ones is reserved for infinities (mantissa 0)
///   and NaNs (mantissa != 0). fp16, bf16, tf32, fp8 E5M2.
/// - `fn`: "finite" layout of the OCP FP8 spec's E4M3: no infinities; the exponent field all
///   ones holds normal numbers except for mantissa all ones, which is NaN (S.1111.111).
enum class encoding { ieee, fn };

namespace detail {

/// Leading zero bits of a nonzero 64-bit value, on the host and in CUDA device code.
PRECIS_HOST_DEVICE constexpr int countl_zero64(std::uint64_t x) {
#if defined(__CUDA_ARCH__)
  if (__builtin_is_constant_evaluated()) {  // a constant initializer seen by the device pass
    int n = 0;
    for (std::uint64_t b = std::uint64_t{1} << 63; b != 0 && (x & b) == 0; b >>= 1) ++n;
    return n;
  }
  return __clzll(static_cast<long long>(x));
#else
  return std::countl_zero(x);
#endif
}

/// Describes a binary interchange layout: 1 sign bit, E exponent bits, M stored mantissa bits.
struct layout {
  int exp_bits;
  int mant_bits;
  encoding enc;

  PRECIS_HOST_DEVICE constexpr int total_bits() const { return 1 + exp_bits + mant_bits; }
  PRECIS_HOST_DEVICE constexpr int digits() const { return mant_bits + 1; }
  PRECIS_HOST_DEVICE constexpr int bias() const { return (1 << (exp_bits - 1)) - 1; }
  PRECIS_HOST_DEVICE constexpr int emin() const { return 1 - bias(); }
  PRECIS_HOST_DEVICE constexpr int emax() const { return enc == encoding::ieee ? bias() : bias() + 1; }
  PRECIS_HOST_DEVICE constexpr bool has_infinity() const { return enc == encoding::ieee; }
  PRECIS_HOST_DEVICE constexpr std::uint64_t exp_all_ones() const { return (std::uint64_t{1} << exp_bits) - 1; }
  PRECIS_HOST_DEVICE constexpr std::uint64_t mant_mask() const { return (std::uint64_t{1} << mant_bits) - 1; }
  PRECIS_HOST_DEVICE constexpr std::uint64_t sign_bit() const { return std::uint64_t{1} << (exp_bits + mant_bits); }
  PRECIS_HOST_DEVICE constexpr std::uint64_t magnitude_mask() const { return sign_bit() - 1; }
  /// Largest finite magnitude, as a bit pattern.
  PRECIS_HOST_DEVICE constexpr std::uint64_t max_bits() const {
    return enc == encoding::ieee ? (((exp_all_ones() - 1) << mant_bits) | mant_mask())
                                 : ((exp_all_ones() << mant_bits) | (mant_mask() - 1));
  }
  PRECIS_HOST_DEVICE constexpr std::uint64_t inf_bits() const { return exp_all_ones() << mant_bits; }
  /// The canonical NaN: quiet NaN with zero payload (ieee), or the single NaN pattern (fn).
  PRECIS_HOST_DEVICE constexpr std::uint64_t nan_bits() const {
    return enc == encoding::ieee ? (inf_bits() | (std::uint64_t{1} << (mant_bits - 1)))
                                 : magnitude_mask();
  }
  constexpr bool operator==(const layout&) const = default;
};

inline constexpr layout fp32_layout{8, 23, encoding::ieee};
inline constexpr layout fp64_layout{11, 52, encoding::ieee};

template <int Bits>
using uint_for_bits =
    std::conditional_t<(Bits <= 8), std::uint8_t,
                       std::conditional_t<(Bits <= 16), std::uint16_t,
                                          std::conditional_t<(Bits <= 32), std::uint32_t,
                                                             std::uint64_t>>>;

/// An exactly decomposed value: |x| = sig * 2^(exp - 63) (+ less than one unit if sticky).
struct split {
  enum class kind : std::uint8_t { zero, finite, inf, nan };
  kind k = kind::zero;
  bool sign = false;
  bool sticky = false;        // bits below the 64 kept in sig were nonzero
  std::int64_t exp = 0;       // exponent of the leading bit (bit 63 of sig)
  std::uint64_t sig = 0;      // leading bit at bit 63 for finite values
  std::uint64_t payload = 0;  // NaN payload (without the quiet bit), left-aligned at bit 63
};

/// Splits a bit pattern of layout L (exact).
template <layout L>
PRECIS_HOST_DEVICE constexpr split split_bits(std::uint64_t bits) {
  split s;
  s.sign = (bits & L.sign_bit()) != 0;
  const std::uint64_t e = (bits >> L.mant_bits) & L.exp_all_ones();
  const std::uint64_t m = bits & L.mant_mask();
  if constexpr (L.enc == encoding::ieee) {
    if (e == L.exp_all_ones()) {
      if (m == 0) {
        s.k = split::kind::inf;
      } else {
        s.k = split::kind::nan;
        // Drop the quiet bit (the leading mantissa bit); keep the rest left-aligned.
        const std::uint64_t rest = m & (L.mant_mask() >> 1);
        s.payload = L.mant_bits > 1 ? rest << (64 - (L.mant_bits - 1)) : 0;
      }
      return s;
    }
  } else {
    if ((bits & L.magnitude_mask()) == L.nan_bits()) {
      s.k = split::kind::nan;
      return s;
    }
  }
  if (e == 0) {
    if (m == 0) return s;  // signed zero
    const int lead = 63 - countl_zero64(m);
    s.k = split::kind::finite;
    s.sig = m << (63 - lead);
    s.exp = L.emin() - L.mant_bits + lead;
    return s;
  }
  s.k = split::kind::finite;
  s.sig = (m | (std::uint64_t{1} << L.mant_bits)) << (63 - L.mant_bits);
  s.exp = static_cast<std::int64_t>(e) - L.bias();
  return s;
}

/// Splits any binary floating type that has frexp/ldexp/trunc (found by ADL for
/// Boost.Multiprecision; std:: for long double). Exact: frexp, ldexp and trunc are exact and
/// so is the fraction s - trunc(s).
template <class T>
split split_generic(const T& x) {
  using std::frexp;
  using std::isinf;
  using std::isnan;
  using std::ldexp;
  using std::signbit;
  using std::trunc;
  split s;
  s.sign = signbit(x);
  if (isnan(x)) {
    s.k = split::kind::nan;
    return s;
  }
  if (isinf(x)) {
    s.k = split::kind::inf;
    return s;
  }
  if (x == 0) return s;
  int e = 0;
  const T m = frexp(s.sign ? T(-x) : T(x), &e);  // m in [0.5, 1)
  const T scaled = T(ldexp(m, 64));              // in [2^63, 2^64)
  const T ip = T(trunc(scaled));
  s.k = split::kind::finite;
  s.sig = static_cast<std::uint64_t>(ip);
  s.sticky = (scaled - ip) != 0;
  s.exp = static_cast<std::int64_t>(e) - 1;
  return s;
}

/// The result of rounding a finite split onto a grid of `digits` significant bits with
/// minimum normal exponent `emin`: |value| = q * 2^lsb_exp exactly (q may be 0).
struct rounded {
  std::uint64_t q = 0;
  std::int64_t lsb_exp = 0;
};

/// Whether rounding moves away from zero, given the kept lsb, the discarded fraction (64 bits
/// left-aligned) and the sticky bit below it.
PRECIS_HOST_DEVICE constexpr bool round_up(rounding mode, bool sign, bool lsb_odd, std::uint64_t frac, bool sticky,
                        std::uint64_t random) {
  constexpr std::uint64_t half = std::uint64_t{1} << 63;
  const bool inexact = frac != 0 || sticky;
  switch (mode) {
    case rounding::nearest_even:
      return frac > half || (frac == half && (sticky || lsb_odd));
    case rounding::toward_zero: return false;
    case rounding::upward: return inexact && !sign;
    case rounding::downward: return inexact && sign;
    // Up with probability frac / 2^64 (resolution 2^-64: bits below are ignored).
    case rounding::stochastic: return random < frac;
  }
  return false;
}

/// Rounds a finite split once. Targets with subnormals use the subnormal grid below emin;
/// targets without them round onto {0, 2^emin}.
PRECIS_HOST_DEVICE constexpr rounded round_significand(const split& s, int digits, std::int64_t emin,
                                    bool subnormals, rounding mode, std::uint64_t random) {
  std::int64_t lsb_exp;
  if (s.exp >= emin) {
    lsb_exp = s.exp - (digits - 1);
  } else {
    lsb_exp = subnormals ? emin - (digits - 1) : emin;
  }
  // Number of significand bits that fall below the target's lsb (>= 1 since digits < 64).
  const std::int64_t shift = lsb_exp - (s.exp - 63);
  std::uint64_t q = 0;
  std::uint64_t frac = 0;
  bool sticky = s.sticky;
  // Callers guarantee digits <= 63, so shift >= 1.
  if (shift < 64) {
    q = s.sig >> shift;
    frac = s.sig << (64 - shift);
  } else if (shift == 64) {
    frac = s.sig;
  } else if (shift < 128) {
    frac = s.sig >> (shift - 64);
    sticky = sticky || (s.sig << (128 - shift)) != 0;
  } else {
    sticky = sticky || s.sig != 0;
  }
  if (round_up(mode, s.sign, (q & 1) != 0, frac, sticky, random)) ++q;
  return {q, lsb_exp};
}

/// Whether overflow in this mode and direction gives "infinity" in IEEE terms (otherwise the
/// correctly rounded result is the largest finite value).
PRECIS_HOST_DEVICE constexpr bool overflow_is_infinite(rounding mode, bool sign) {
  switch (mode) {
    case rounding::nearest_even:
    case rounding::stochastic: return true;
    case rounding::toward_zero: return false;
    case rounding::upward: return !sign;
    case rounding::downward: return sign;
  }
  return true;
}

/// Composes a bit pattern of layout L from a split. `random` is only read for stochastic
/// rounding. `ov` must be representable in L (no `infinity` for fn layouts: checked by the
/// public entry points).
template <layout L>
PRECIS_HOST_DEVICE constexpr std::uint64_t encode_bits(const split& s, rounding mode, overflow ov,
                                    std::uint64_t random) {
  const std::uint64_t sign = s.sign ? L.sign_bit() : 0;
  const auto overflowed = [&](bool infinite) -> std::uint64_t {
    if (!infinite || ov == overflow::saturate) return sign | L.max_bits();
    if (ov == overflow::nan) return sign | L.nan_bits();
    return sign | L.inf_bits();
  };
  switch (s.k) {
    case split::kind::zero: return sign;
    case split::kind::nan:
      if constexpr (L.enc == encoding::ieee) {
        // Quiet NaN with the source's leading payload bits (what F16C and IEEE do).
        const std::uint64_t keep = L.mant_bits > 1 ? (s.payload >> (64 - (L.mant_bits - 1))) : 0;
        return sign | L.nan_bits() | keep;
      } else {
        return sign | L.nan_bits();
      }
    case split::kind::inf: return overflowed(true);
    case split::kind::finite: break;
  }
  // Far beyond the largest binade: overflow without computing shifted exponents.
  if (s.exp > L.emax() + 1) return overflowed(overflow_is_infinite(mode, s.sign));
  const rounded r = round_significand(s, L.digits(), L.emin(), true, mode, random);
  std::uint64_t q = r.q;
  std::int64_t lsb_exp = r.lsb_exp;
  std::uint64_t mag;
  if (q >> L.mant_bits) {  // normal (possibly after a carry out of the subnormal range)
    if (q >> (L.mant_bits + 1)) {  // rounding carried into a new binade: q == 2^(M+1)
      q >>= 1;
      ++lsb_exp;
    }
    const std::int64_t efield = lsb_exp + L.mant_bits + L.bias();
    if (efield > static_cast<std::int64_t>(L.exp_all_ones())) {
      return overflowed(overflow_is_infinite(mode, s.sign));
    }
    mag = (static_cast<std::uint64_t>(efield) << L.mant_bits) | (q & L.mant_mask());
  } else {
    mag = q;  // subnormal or zero
  }
  if (mag > L.max_bits()) return overflowed(overflow_is_infinite(mode, s.sign));
  return sign | mag;
}

/// Composes a value of a wide-exponent type T (long double, Boost.Multiprecision) with the
/// given precision from a split. T must have an infinity and a quiet NaN.
template <class T>
T compose_generic(const split& s, int digits, std::int64_t emin, std::int64_t emax,
                  bool subnormals, rounding mode, overflow ov, std::uint64_t random) {
  using std::ldexp;
  const auto finish = [&](T v) { return s.sign ? T(-v) : v; };
  const auto overflowed = [&](bool infinite) {
    if (!infinite || ov == overflow::saturate) return finish(std::numeric_limits<T>::max());
    if (ov == overflow::nan) return finish(std::numeric_limits<T>::quiet_NaN());
    return finish(std::numeric_limits<T>::infinity());
  };
  switch (s.k) {
    case split::kind::zero: return finish(T(0));
    case split::kind::nan: return finish(std::numeric_limits<T>::quiet_NaN());
    case split::kind::inf: return overflowed(true);
    case split::kind::finite: break;
  }
  if (s.exp > emax + 1) return overflowed(overflow_is_infinite(mode, s.sign));
  const rounded r = round_significand(s, digits, emin, subnormals, mode, random);
  if (r.q == 0) return finish(T(0));
  const std::int64_t lead = r.lsb_exp + (63 - std::countl_zero(r.q));
  if (lead > emax) return overflowed(overflow_is_infinite(mode, s.sign));
  return finish(T(ldexp(T(r.q), static_cast<int>(r.lsb_exp))));
}

/// Exact power of two as a double, usable in constant expressions (2^-1074 .. 2^1023).
constexpr double exp2i(int k) {
  double r = 1.0;
  for (; k > 0; --k) r *= 2.0;
  for (; k < 0; ++k) r *= 0.5;
  return r;
}

}  // namespace detail
}  // namespace precis
