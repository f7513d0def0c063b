// Arithmetic and sums carried out in a format F, each operation rounded once in a chosen mode,
// stochastic rounding included: the engine of the summation and stagnation studies.
// A sum of two values of F is rounded once into F from the exact sum (TwoSum; see
// round_exact_sum).
#pragma once

#include <cmath>
#include <random>
#include <span>

#include "precis/error.hpp"
#include "precis/format/random.hpp"
#include "precis/format/round_to.hpp"

namespace precis::analysis {
namespace detail {

template <class F>
inline constexpr overflow study_overflow =
    format_traits<F>::has_infinity ? overflow::infinity : overflow::saturate;

/// a + b rounded once into F, from the exact sum: TwoSum (Knuth) gives s = fl64(a + b) and its
/// exact error e. When e != 0 and s sits exactly on one of F's rounding boundaries (an F value or
/// a midpoint between two), s is moved one double ulp toward the exact sum. F has at most 24
/// digits, so its boundaries are >= 2^28 double ulps apart: the nudge decides the side correctly
/// and crosses nothing else. (Stochastic rounding then draws its probability from s, off by at
/// most 2^-28 of an ulp of F.)
template <class F, class Round>
F round_exact_sum(const F& a, const F& b, Round round) {
  static_assert(format_traits<F>::digits <= 24, "in-format sums: formats up to fp32");
  const double x = precis::detail::load<double>(a), y = precis::detail::load<double>(b);
  const double s = x + y;
  const double bb = s - x;
  const double e = (x - (s - bb)) + (y - bb);
  if (e == 0 || !std::isfinite(s)) return round(s);
  constexpr overflow ov = study_overflow<F>;
  const double dn = precis::detail::load<double>(round_to<F>(s, rounding::downward, ov));
  const double up = precis::detail::load<double>(round_to<F>(s, rounding::upward, ov));
  const bool boundary = dn == up || s - dn == up - s;
  return round(boundary ? std::nextafter(s, e > 0 ? HUGE_VAL : -HUGE_VAL) : s);
}

}  // namespace detail

/// a + b rounded once into F in a deterministic mode.
template <floating F>
F add_in(const F& a, const F& b, rounding mode) {
  return detail::round_exact_sum(a, b, [&](double v) { return round_to<F>(v, mode, detail::study_overflow<F>); });
}

/// a + b rounded once into F; rounding::stochastic draws from gen.
template <floating F, std::uniform_random_bit_generator Gen>
F add_in(const F& a, const F& b, rounding mode, Gen& gen) {
  return detail::round_exact_sum(
      a, b, [&](double v) { return round_to<F>(v, mode, detail::study_overflow<F>, gen); });
}

/// ((x0 + x1) + x2) + ... with every addition rounded into F in `mode`.
template <floating F, std::uniform_random_bit_generator Gen>
F recursive_sum_in(std::span<const F> x, rounding mode, Gen& gen) {
  F s = round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);
  for (const F& v : x) s = add_in(s, v, mode, gen);
  return s;
}

}  // namespace precis::analysis
