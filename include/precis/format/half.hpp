// precis::half is Eigen::half (IEEE binary16): correctly rounded from float, usable on host
// and device, and a first-class Eigen scalar.
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cstdint>

#include "precis/format/detail/bit_format.hpp"

namespace precis {
using half = Eigen::half;

template <>
struct detail::bit_format<Eigen::half> {
  static constexpr bool value = true;
  static constexpr detail::layout lay{5, 10, encoding::ieee};
  using bits_type = std::uint16_t;
  static bits_type to_bits(Eigen::half x) { return std::bit_cast<bits_type>(x); }
  static Eigen::half from_bits(bits_type b) { return std::bit_cast<Eigen::half>(b); }
};
}  // namespace precis
