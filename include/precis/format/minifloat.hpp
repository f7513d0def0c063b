// precis::minifloat<ExpBits, MantBits, Encoding>: any small binary floating-point format,
// stored in the smallest unsigned integer that holds its 1 + E + M bits.
//
// Arithmetic computes in float (or double for formats float cannot hold) and rounds once back
// to nearest-even. That is exact emulation of the format's correctly rounded + - * / and sqrt
// whenever the wide type has at least 2t+2 bits (t = MantBits + 1): true for every format with
// MantBits <= 10 through float and MantBits <= 24 through double (Higham & Pranesh 2019; see
// docs/formats.md). Fused operations and long sums are not emulated exactly this way.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

#include "precis/format/detail/bit_format.hpp"

namespace precis {

template <int ExpBits, int MantBits, encoding Enc = encoding::ieee>
class minifloat {
  static_assert(ExpBits >= 2 && ExpBits <= 11, "minifloat: ExpBits must be in [2, 11]");
  static_assert(MantBits >= 1 && MantBits <= 52, "minifloat: MantBits must be in [1, 52]");

 public:
  static constexpr detail::layout layout{ExpBits, MantBits, Enc};
  static_assert(detail::fits_double(layout),
                "minifloat: the format's values must all be representable in double");
  using storage_type = detail::uint_for_bits<1 + ExpBits + MantBits>;
  /// The type arithmetic is carried out in: float when it holds every value exactly and has
  /// at least 2t+2 bits, otherwise double.
  using compute_type =
      std::conditional_t<detail::fits_float(layout) && 2 * (MantBits + 1) + 2 <= 24, float, double>;
  /// Overflow behaviour of this type's constructors and operators: IEEE infinities where the
  /// format has them; saturation to the largest finite value for fn formats (like CUDA's
  /// __nv_fp8_e4m3). Explicit conversions choose their own with precis::round_to.
  static constexpr overflow arithmetic_overflow =
      Enc == encoding::ieee ? overflow::infinity : overflow::saturate;

  constexpr minifloat() noexcept = default;
  /// Rounds to nearest-even, once, from the source bits.
  constexpr explicit minifloat(float x) noexcept : bits_(encode(split_of(x))) {}
  constexpr explicit minifloat(double x) noexcept : bits_(encode(split_of(x))) {}
  constexpr explicit minifloat(int x) noexcept : minifloat(static_cast<double>(x)) {}

  static constexpr minifloat from_bits(storage_type b) noexcept {
    minifloat m;
    m.bits_ = static_cast<storage_type>(b & ((std::uint64_t{1} << layout.total_bits()) - 1));
    return m;
  }
  constexpr storage_type bits() const noexcept { return bits_; }

  constexpr explicit operator double() const noexcept {
    return detail::decode_to_double<layout>(bits_);
  }
  constexpr explicit operator float() const noexcept {
    if constexpr (detail::fits_float(layout)) {
      return detail::decode_to_float<layout>(bits_);
    } else {
      return static_cast<float>(static_cast<double>(*this));
    }
  }

  constexpr compute_type value() const noexcept { return static_cast<compute_type>(*this); }

  friend constexpr minifloat operator+(minifloat a, minifloat b) noexcept {
    return minifloat(a.value() + b.value());
  }
  friend constexpr minifloat operator-(minifloat a, minifloat b) noexcept {
    return minifloat(a.value() - b.value());
  }
  friend constexpr minifloat operator*(minifloat a, minifloat b) noexcept {
    return minifloat(a.value() * b.value());
  }
  friend constexpr minifloat operator/(minifloat a, minifloat b) noexcept {
    return minifloat(a.value() / b.value());
  }
  friend constexpr minifloat operator-(minifloat a) noexcept {
    return from_bits(static_cast<storage_type>(a.bits_ ^ layout.sign_bit()));
  }
  friend constexpr minifloat operator+(minifloat a) noexcept { return a; }
  constexpr minifloat& operator+=(minifloat b) noexcept { return *this = *this + b; }
  constexpr minifloat& operator-=(minifloat b) noexcept { return *this = *this - b; }
  constexpr minifloat& operator*=(minifloat b) noexcept { return *this = *this * b; }
  constexpr minifloat& operator/=(minifloat b) noexcept { return *this = *this / b; }

  // Value comparisons: NaN is unordered, +0 == -0.
  friend constexpr bool operator==(minifloat a, minifloat b) noexcept {
    return a.value() == b.value();
  }
  friend constexpr std::partial_ordering operator<=>(minifloat a, minifloat b) noexcept {
    return a.value() <=> b.value();
  }

  constexpr bool is_nan() const noexcept {
    return detail::split_bits<layout>(bits_).k == detail::split::kind::nan;
  }
  constexpr bool is_inf() const noexcept {
    return detail::split_bits<layout>(bits_).k == detail::split::kind::inf;
  }

 private:
  template <class F>
  static constexpr detail::split split_of(F x) noexcept {
    using bf = detail::bit_format<F>;
    return detail::split_bits<bf::lay>(bf::to_bits(x));
  }
  static constexpr storage_type encode(const detail::split& s) noexcept {
    return static_cast<storage_type>(
        detail::encode_bits<layout>(s, rounding::nearest_even, arithmetic_overflow, 0));
  }

  storage_type bits_ = 0;
};

template <int E, int M, encoding Enc>
struct detail::bit_format<minifloat<E, M, Enc>> {
  static constexpr bool value = true;
  static constexpr detail::layout lay = minifloat<E, M, Enc>::layout;
  using bits_type = typename minifloat<E, M, Enc>::storage_type;
  static constexpr bits_type to_bits(minifloat<E, M, Enc> x) { return x.bits(); }
  static constexpr minifloat<E, M, Enc> from_bits(bits_type b) {
    return minifloat<E, M, Enc>::from_bits(b);
  }
};

template <int E, int M, encoding Enc>
constexpr bool isnan(minifloat<E, M, Enc> x) noexcept { return x.is_nan(); }
template <int E, int M, encoding Enc>
constexpr bool isinf(minifloat<E, M, Enc> x) noexcept { return x.is_inf(); }
template <int E, int M, encoding Enc>
constexpr bool isfinite(minifloat<E, M, Enc> x) noexcept { return !x.is_nan() && !x.is_inf(); }
template <int E, int M, encoding Enc>
constexpr bool signbit(minifloat<E, M, Enc> x) noexcept {
  return (x.bits() & minifloat<E, M, Enc>::layout.sign_bit()) != 0;
}
template <int E, int M, encoding Enc>
constexpr minifloat<E, M, Enc> abs(minifloat<E, M, Enc> x) noexcept {
  using mf = minifloat<E, M, Enc>;
  return mf::from_bits(static_cast<typename mf::storage_type>(x.bits() & mf::layout.magnitude_mask()));
}

}  // namespace precis

/// std::numeric_limits for minifloat, so generic code (and Eigen) can query it.
template <int E, int M, precis::encoding Enc>
class std::numeric_limits<precis::minifloat<E, M, Enc>> {
  using T = precis::minifloat<E, M, Enc>;
  static constexpr precis::detail::layout L = T::layout;
  static constexpr T bits(std::uint64_t b) {
    return T::from_bits(static_cast<typename T::storage_type>(b));
  }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = L.has_infinity();
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = Enc == precis::encoding::ieee && M >= 2;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = M + 1;
  static constexpr int digits10 = static_cast<int>((digits - 1) * 0.30102999566398119521);
  static constexpr int max_digits10 = static_cast<int>(digits * 0.30102999566398119521 + 2.0);
  static constexpr int radix = 2;
  static constexpr int min_exponent = L.emin() + 1;
  static constexpr int min_exponent10 = static_cast<int>((min_exponent - 1) * 0.30102999566398119521);
  static constexpr int max_exponent = L.emax() + 1;
  static constexpr int max_exponent10 = static_cast<int>(L.emax() * 0.30102999566398119521);
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() noexcept { return bits(std::uint64_t{1} << M); }
  static constexpr T lowest() noexcept { return bits(L.sign_bit() | L.max_bits()); }
  static constexpr T max() noexcept { return bits(L.max_bits()); }
  static constexpr T epsilon() noexcept { return T(precis::detail::exp2i(-M)); }
  static constexpr T round_error() noexcept { return T(0.5); }
  static constexpr T infinity() noexcept {
    return has_infinity ? bits(L.inf_bits()) : bits(L.nan_bits());
  }
  static constexpr T quiet_NaN() noexcept { return bits(L.nan_bits()); }
  static constexpr T signaling_NaN() noexcept {
    return has_signaling_NaN ? bits(L.inf_bits() | 1) : bits(L.nan_bits());
  }
  static constexpr T denorm_min() noexcept { return bits(1); }
};
