// Rounding modes and overflow behaviour: the two choices every conversion names.
#pragma once

#include <string_view>

namespace precis {

/// How a value that lies between two representable numbers is rounded.
/// `stochastic` rounds up with probability equal to the distance to the lower neighbour
/// divided by the gap (Connolly, Higham & Mary 2021, "mode 1"); it needs an explicit random
/// source so results are reproducible from a seed.
enum class rounding { nearest_even, toward_zero, upward, downward, stochastic };

/// What a conversion produces for a finite value too large for the target, and for an
/// infinite source value.
/// - `infinity`: IEEE 754 behaviour (only for formats that have infinities): round-to-nearest
///   and the outward directed modes give +-inf, the inward ones the largest finite value.
/// - `saturate`: the result is clamped to +-max_finite; infinite sources give +-max_finite too
///   (CUDA's __NV_SATFINITE).
/// - `nan`: wherever IEEE would give infinity, the result is NaN (ml_dtypes' and PyTorch's
///   behaviour for e4m3); the inward directed modes still give the largest finite value.
/// Formats without infinities (float8_e4m3) have no default: the caller must choose.
enum class overflow { infinity, saturate, nan };

constexpr std::string_view to_string(rounding r) noexcept {
  switch (r) {
    case rounding::nearest_even: return "nearest_even";
    case rounding::toward_zero: return "toward_zero";
    case rounding::upward: return "upward";
    case rounding::downward: return "downward";
    case rounding::stochastic: return "stochastic";
  }
  return "?";
}

constexpr std::string_view to_string(overflow o) noexcept {
  switch (o) {
    case overflow::infinity: return "infinity";
    case overflow::saturate: return "saturate";
    case overflow::nan: return "nan";
  }
  return "?";
}

}  // namespace precis
