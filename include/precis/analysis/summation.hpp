// Arithmetic and sums carried out in a format F, each operation rounded once in a chosen mode,
// stochastic rounding included: the engine of the summation and stagnation studies.
// A sum of two values of F is formed exactly in double (checked: F has at most 24 digits and
// the operands' exponents differ by at most 52 - t) and then rounded once into F.
#pragma once

#include <cmath>
#include <random>
#include <span>
#include <string>

#include "precis/error.hpp"
#include "precis/format/random.hpp"
#include "precis/format/round_to.hpp"

namespace precis::analysis {
namespace detail {

template <class F>
inline constexpr overflow study_overflow =
    format_traits<F>::has_infinity ? overflow::infinity : overflow::saturate;

template <class F>
double exact_sum_in_double(const F& a, const F& b) {
  static_assert(format_traits<F>::digits <= 24, "in-format sums: formats up to fp32");
  const double x = precis::detail::load<double>(a), y = precis::detail::load<double>(b);
  if (x != 0 && y != 0 && std::abs(std::ilogb(x) - std::ilogb(y)) > 52 - format_traits<F>::digits) {
    throw invalid_argument("precis::analysis::add_in<" + std::string(format_traits<F>::name) +
                           ">: the sum of values near 2^" + std::to_string(std::ilogb(x)) + " and 2^" +
                           std::to_string(std::ilogb(y)) + " is not exact in double");
  }
  return x + y;
}

}  // namespace detail

/// a + b rounded once into F in a deterministic mode.
template <floating F>
F add_in(const F& a, const F& b, rounding mode) {
  return round_to<F>(detail::exact_sum_in_double(a, b), mode, detail::study_overflow<F>);
}

/// a + b rounded once into F; rounding::stochastic draws from gen.
template <floating F, std::uniform_random_bit_generator Gen>
F add_in(const F& a, const F& b, rounding mode, Gen& gen) {
  return round_to<F>(detail::exact_sum_in_double(a, b), mode, detail::study_overflow<F>, gen);
}

/// ((x0 + x1) + x2) + ... with every addition rounded into F in `mode`.
template <floating F, std::uniform_random_bit_generator Gen>
F recursive_sum_in(std::span<const F> x, rounding mode, Gen& gen) {
  F s = round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);
  for (const F& v : x) s = add_in(s, v, mode, gen);
  return s;
}

}  // namespace precis::analysis
