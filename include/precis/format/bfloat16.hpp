// precis::bfloat16 is Eigen::bfloat16 (8 exponent bits, 7 stored mantissa bits).
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cstdint>

#include "precis/format/detail/bit_format.hpp"

namespace precis {
using bfloat16 = Eigen::bfloat16;

template <>
struct detail::bit_format<Eigen::bfloat16> {
  static constexpr bool value = true;
  static constexpr detail::layout lay{8, 7, encoding::ieee};
  using bits_type = std::uint16_t;
  static bits_type to_bits(Eigen::bfloat16 x) { return std::bit_cast<bits_type>(x); }
  static Eigen::bfloat16 from_bits(bits_type b) {
    return std::bit_cast<Eigen::bfloat16>(b);
  }
};
}  // namespace precis
