// Stagnation of sums computed in a format (DESIGN.md numerics cases 2 and 3):
//   ones:     1 + 1 + 1 + ... until the sum stops growing (at 2^t for t significand bits);
//   harmonic: 1 + 1/2 + 1/3 + ... until adding the next term leaves the sum unchanged
//             (Higham & Pranesh, "Simulating low precision floating-point arithmetic", SIAM J.
//             Sci. Comput. 41(5), 2019, Table 3.1; chop's demo_harmonic).
// Every operation is rounded once, in the given mode, directly into F: a sum of two values of
// F is exact in double for the formats used here (checked), and 1/k is rounded from a 1000-bit
// quotient, so nothing rounds twice.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "precis/analysis/reference.hpp"
#include "precis/error.hpp"
#include "precis/format/round_to.hpp"

namespace precis::analysis {

template <class F>
struct stagnation_result {
  std::uint64_t terms = 0;  // number of terms added when the sum first failed to change
  F sum{};                  // the stagnated sum
  bool stagnated = false;   // false: max_terms reached first
};

namespace detail {

template <class F>
F add_rounded(const F& a, const F& b, rounding mode) {
  static_assert(format_traits<F>::digits <= 24, "stagnation: formats up to fp32 (exact sums in double)");
  const double x = precis::detail::load<double>(a), y = precis::detail::load<double>(b);
  const double s = x + y;
  // exact when the exponents differ by at most 52 - t (the sum then fits 53 bits)
  if (x != 0 && y != 0 && std::abs(std::ilogb(x) - std::ilogb(y)) > 52 - format_traits<F>::digits) {
    throw invalid_argument("precis::analysis stagnation: sum of values 2^" + std::to_string(std::ilogb(x)) +
                           " and 2^" + std::to_string(std::ilogb(y)) + " is not exact in double");
  }
  constexpr overflow ov = format_traits<F>::has_infinity ? overflow::infinity : overflow::saturate;
  return round_to<F>(s, mode, ov);
}

template <class F>
F reciprocal_rounded(std::uint64_t k, rounding mode) {
  constexpr overflow ov = format_traits<F>::has_infinity ? overflow::infinity : overflow::saturate;
  return round_to<F>(exact_t(1) / exact_t(k), mode, ov);
}

}  // namespace detail

/// Sum of ones in F, rounded in `mode`, until it stops growing.
template <floating F>
stagnation_result<F> ones_stagnation(rounding mode, std::uint64_t max_terms) {
  stagnation_result<F> r;
  const F one = round_to<F>(1.0, rounding::nearest_even, overflow::saturate);
  for (std::uint64_t k = 1; k <= max_terms; ++k) {
    const F next = detail::add_rounded(r.sum, one, mode);
    if (next == r.sum) {
      r.terms = k;
      r.stagnated = true;
      return r;
    }
    r.sum = next;
    r.terms = k;
  }
  return r;
}

/// Harmonic series in F, each 1/k and each partial sum rounded in `mode`, until a term no
/// longer changes the sum.
template <floating F>
stagnation_result<F> harmonic_stagnation(rounding mode, std::uint64_t max_terms) {
  stagnation_result<F> r;
  for (std::uint64_t k = 1; k <= max_terms; ++k) {
    const F next = detail::add_rounded(r.sum, detail::reciprocal_rounded<F>(k, mode), mode);
    if (next == r.sum) {
      r.terms = k;
      r.stagnated = true;
      return r;
    }
    r.sum = next;
    r.terms = k;
  }
  return r;
}

}  // namespace precis::analysis
