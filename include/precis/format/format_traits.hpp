// precis::format_traits<T>: the one place a scalar format declares its parameters.
//
// digits is t (counting the hidden bit), unit_roundoff() = 2^-t, emin/emax are the exponents of
// the smallest and largest normal binades (IEEE 754 notation: min_normal = 2^emin). Constants
// are returned in `constant_type`, a type that holds them exactly: double for every format up
// to fp64, the type itself for long double and Boost.Multiprecision.
#pragma once

#include "precis/config.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <limits>
#include <string_view>
#include <type_traits>

#include "precis/format/bfloat16.hpp"
#include "precis/format/detail/bit_format.hpp"
#include "precis/format/float8.hpp"
#include "precis/format/half.hpp"
#include "precis/format/minifloat.hpp"
#include "precis/format/tf32.hpp"

namespace precis {

template <class T>
struct format_traits {
  static constexpr bool is_specialized = false;
};

namespace detail {

/// A short name built at compile time, "e4m3" style, for minifloats without a common name.
template <int E, int M, encoding Enc>
struct minifloat_name {
  static constexpr auto chars = [] {
    std::array<char, 16> out{};
    std::size_t n = 0;
    const auto put_int = [&](int v) {
      if (v >= 10) out[n++] = static_cast<char>('0' + v / 10);
      out[n++] = static_cast<char>('0' + v % 10);
    };
    out[n++] = 'e';
    put_int(E);
    out[n++] = 'm';
    put_int(M);
    if (Enc == encoding::fn) {
      out[n++] = 'f';
      out[n++] = 'n';
    }
    return std::pair{out, n};
  }();
  static constexpr std::string_view value{chars.first.data(), chars.second};
};

template <class T>
constexpr std::string_view known_name() {
  if constexpr (std::is_same_v<T, Eigen::half>) return "fp16";
  else if constexpr (std::is_same_v<T, Eigen::bfloat16>) return "bf16";
  else if constexpr (std::is_same_v<T, float8_e4m3>) return "fp8_e4m3";
  else if constexpr (std::is_same_v<T, float8_e5m2>) return "fp8_e5m2";
  else if constexpr (std::is_same_v<T, tf32>) return "tf32";
  else if constexpr (std::is_same_v<T, float>) return "fp32";
  else if constexpr (std::is_same_v<T, double>) return "fp64";
  else return {};
}

/// Traits of a binary interchange layout (every bit_format type).
template <class T, layout L>
struct layout_traits {
  static constexpr bool is_specialized = true;
  using constant_type = double;
  static constexpr int digits = L.digits();
  static constexpr int emin = L.emin();
  static constexpr int emax = L.emax();
  static constexpr bool has_infinity = L.has_infinity();
  static constexpr bool has_nan = true;
  static constexpr bool has_subnormals = true;
  static constexpr std::string_view name = [] {
    if constexpr (!known_name<T>().empty()) return known_name<T>();
    else return minifloat_name<L.exp_bits, L.mant_bits, L.enc>::value;
  }();
  static constexpr double unit_roundoff() { return exp2i(-digits); }
  static constexpr double min_normal() { return exp2i(emin); }
  static constexpr double min_subnormal() { return exp2i(emin - (digits - 1)); }
  static constexpr double max_finite() {
    const double top = L.enc == encoding::ieee ? 2.0 - exp2i(1 - digits) : 2.0 - exp2i(2 - digits);
    return top * exp2i(emax);
  }
};

/// Name of a wide binary type from its precision: "fp80" for x87 long double, "fp128" for
/// IEEE binary128, otherwise "binary<t>".
template <int Digits>
struct wide_name {
  static constexpr auto chars = [] {
    std::array<char, 16> out{};
    std::size_t n = 0;
    const char* prefix = Digits == 64 ? "fp80" : Digits == 113 ? "fp128" : "binary";
    for (const char* p = prefix; *p; ++p) out[n++] = *p;
    if (Digits != 64 && Digits != 113) {
      char tmp[12];
      int k = 0;
      for (int v = Digits; v > 0; v /= 10) tmp[k++] = static_cast<char>('0' + v % 10);
      while (k > 0) out[n++] = tmp[--k];
    }
    return std::pair{out, n};
  }();
  static constexpr std::string_view value{chars.first.data(), chars.second};
};

template <class T>
concept generic_binary_float =
    std::numeric_limits<T>::is_specialized && !std::numeric_limits<T>::is_integer &&
    std::numeric_limits<T>::radix == 2 && !is_bit_format_v<T>;

}  // namespace detail

template <class T>
  requires detail::is_bit_format_v<T>
struct format_traits<T> : detail::layout_traits<T, detail::bit_format<T>::lay> {};

/// long double, Boost.Multiprecision binary floats (cpp_bin_float_*), std::float128_t, ...:
/// everything std::numeric_limits describes as a radix-2 floating type.
template <class T>
  requires detail::generic_binary_float<T>
struct format_traits<T> {
  using L = std::numeric_limits<T>;
  static constexpr bool is_specialized = true;
  using constant_type = T;
  static constexpr int digits = L::digits;
  static constexpr int emin = L::min_exponent - 1;
  static constexpr int emax = L::max_exponent - 1;
  static constexpr bool has_infinity = L::has_infinity;
  static constexpr bool has_nan = L::has_quiet_NaN;
  static constexpr bool has_subnormals = L::has_denorm == std::denorm_present;
  static constexpr std::string_view name = detail::wide_name<digits>::value;
  static T unit_roundoff() { return T(L::epsilon() / 2); }
  static T min_normal() { return L::min(); }
  static T min_subnormal() { return has_subnormals ? T(L::denorm_min()) : T(L::min()); }
  static T max_finite() { return L::max(); }
};

/// A floating-point format precis knows: it has format_traits.
template <class T>
concept floating = format_traits<detail::remove_cv_t<T>>::is_specialized;

}  // namespace precis
