// bit_format<T>: the single place a type with a binary interchange layout declares that
// layout and how to read and write its bits. Specialized for minifloat (minifloat.hpp), Eigen's
// half and bfloat16 (half.hpp, bfloat16.hpp), float and double (here).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "precis/format/detail/core.hpp"

namespace precis::detail {

template <class T>
struct bit_format {
  static constexpr bool value = false;
};

template <>
struct bit_format<float> {
  static constexpr bool value = true;
  static constexpr layout lay = fp32_layout;
  using bits_type = std::uint32_t;
  static constexpr bits_type to_bits(float x) { return std::bit_cast<bits_type>(x); }
  static constexpr float from_bits(bits_type b) { return std::bit_cast<float>(b); }
};

template <>
struct bit_format<double> {
  static constexpr bool value = true;
  static constexpr layout lay = fp64_layout;
  using bits_type = std::uint64_t;
  static constexpr bits_type to_bits(double x) { return std::bit_cast<bits_type>(x); }
  static constexpr double from_bits(bits_type b) { return std::bit_cast<double>(b); }
};

template <class T>
inline constexpr bool is_bit_format_v = bit_format<T>::value;

/// Whether every value of layout L is exactly a float (so decoding through float is exact).
constexpr bool fits_float(layout l) {
  return l.emax() <= 127 && l.emin() - l.mant_bits >= -149 && l.mant_bits <= 23;
}
constexpr bool fits_double(layout l) {
  return l.emax() <= 1023 && l.emin() - l.mant_bits >= -1074 && l.mant_bits <= 52;
}

/// Exact decode of a small-format bit pattern into float (requires fits_float).
template <layout L>
constexpr float decode_to_float(std::uint64_t bits) {
  static_assert(fits_float(L));
  return std::bit_cast<float>(static_cast<std::uint32_t>(
      encode_bits<fp32_layout>(split_bits<L>(bits), rounding::nearest_even, overflow::infinity, 0)));
}
template <layout L>
constexpr double decode_to_double(std::uint64_t bits) {
  static_assert(fits_double(L));
  return std::bit_cast<double>(
      encode_bits<fp64_layout>(split_bits<L>(bits), rounding::nearest_even, overflow::infinity, 0));
}

}  // namespace precis::detail
