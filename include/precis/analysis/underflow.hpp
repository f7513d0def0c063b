// Underflow and overflow statistics: exponent histograms, and what happens to each value when
// it is cast (optionally scaled) into a format: flushed to zero, subnormal, normal, overflowed.
// The tools behind loss-scaling studies (Micikevicius et al., "Mixed Precision Training", 2018).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "precis/error.hpp"
#include "precis/format/round_to.hpp"
#include "precis/tensor/elementwise.hpp"

namespace precis::analysis {

/// Counts of values by binade e = floor(log2 |x|) for e in [lo, hi], plus what falls outside.
struct exponent_histogram {
  int lo = 0, hi = 0;
  std::vector<std::uint64_t> counts;  // counts[e - lo]
  std::uint64_t zeros = 0, infinities = 0, nans = 0, below = 0, above = 0;

  std::uint64_t total() const {
    std::uint64_t t = zeros + infinities + nans + below + above;
    for (auto c : counts) t += c;
    return t;
  }
  /// Count in binade e (0 outside [lo, hi]).
  std::uint64_t at(int e) const {
    return e < lo || e > hi ? 0 : counts[static_cast<std::size_t>(e - lo)];
  }
};

/// The exponent histogram of all elements of x (values read as double).
template <tensor_like X>
exponent_histogram histogram_of_exponents(const X& x_, int lo, int hi) {
  if (lo > hi) {
    throw invalid_argument("precis::analysis::histogram_of_exponents: lo = " + std::to_string(lo) +
                           " > hi = " + std::to_string(hi));
  }
  const auto x = as_view(x_);
  exponent_histogram h;
  h.lo = lo;
  h.hi = hi;
  h.counts.assign(static_cast<std::size_t>(hi - lo + 1), 0);
  for (index_t i = 0; i < x.size(); ++i) {
    const double v = precis::detail::load<double>(x.value_at_linear(i));
    if (std::isnan(v)) {
      ++h.nans;
    } else if (std::isinf(v)) {
      ++h.infinities;
    } else if (v == 0) {
      ++h.zeros;
    } else {
      const int e = std::ilogb(v);
      if (e < lo) ++h.below;
      else if (e > hi) ++h.above;
      else ++h.counts[static_cast<std::size_t>(e - lo)];
    }
  }
  return h;
}

/// What casting to a format does to a set of values.
struct cast_statistics {
  std::uint64_t total = 0;
  std::uint64_t zero = 0;        // exactly zero already
  std::uint64_t flushed = 0;     // nonzero, rounds to zero
  std::uint64_t subnormal = 0;   // rounds to a nonzero subnormal
  std::uint64_t normal = 0;      // rounds to a normal value
  std::uint64_t overflowed = 0;  // finite, rounds beyond the largest finite value
  std::uint64_t nonfinite = 0;   // inf or NaN already

  double fraction(std::uint64_t part) const { return total ? double(part) / double(total) : 0.0; }
  double fraction_flushed() const { return fraction(flushed); }
  double fraction_subnormal() const { return fraction(subnormal); }
  double fraction_overflowed() const { return fraction(overflowed); }
};

/// Classifies every element of x after multiplying it by `scale` (in double: exact for a power
/// of two) and rounding to nearest into F.
template <floating F, tensor_like X>
cast_statistics cast_statistics_of(const X& x_, double scale = 1.0) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw invalid_argument("precis::analysis::cast_statistics_of: scale = " + std::to_string(scale) +
                           "; expected a finite positive scale");
  }
  using T = format_traits<F>;
  constexpr overflow ov = T::has_infinity ? overflow::infinity : overflow::nan;
  const double min_normal = T::min_normal();
  const auto x = as_view(x_);
  cast_statistics s;
  for (index_t i = 0; i < x.size(); ++i) {
    const double v = precis::detail::load<double>(x.value_at_linear(i));
    ++s.total;
    if (!std::isfinite(v)) {
      ++s.nonfinite;
    } else if (v == 0) {
      ++s.zero;
    } else {
      const double r = precis::detail::load<double>(round_to<F>(v * scale, rounding::nearest_even, ov));
      if (!std::isfinite(r)) ++s.overflowed;
      else if (r == 0) ++s.flushed;
      else if (std::abs(r) < min_normal) ++s.subnormal;
      else ++s.normal;
    }
  }
  return s;
}

}  // namespace precis::analysis
