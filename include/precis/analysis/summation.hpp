// Arithmetic and sums carried out in a format F, each operation rounded once in a chosen mode,
// stochastic rounding included: the engine of the summation, dot-product and stagnation
// studies. A sum of two values of F is rounded once into F from the exact sum (TwoSum; see
// round_exact_sum); a product is exact in double (F has at most 24 digits) and rounded once.
//
// Summation algorithms (Higham, Accuracy and Stability of Numerical Algorithms, 2002, ch. 4),
// each with its bound in bounds.hpp:
//   recursive_sum_in     ((x0 + x1) + x2) + ...                  gamma_{n-1}
//   pairwise_sum_in      recursive halving                       gamma_{ceil(log2 n)}
//   compensated_sum_in   Kahan's compensated summation            2u + O(n u^2)
//   widened_sum_in       recursive in a wider Acc, rounded once   u + (1 + u) gamma_{n-1}(u_Acc)
//   dot_in               sum of rounded products, recursive       gamma_n
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

/// a - b rounded once into F (negation is exact).
template <floating F>
F sub_in(const F& a, const F& b, rounding mode) {
  return add_in(a, F(-b), mode);
}

/// a * b rounded once into F: the product of two values of at most 24 digits is exact in double.
template <floating F, std::uniform_random_bit_generator Gen>
F mul_in(const F& a, const F& b, rounding mode, Gen& gen) {
  static_assert(format_traits<F>::digits <= 24, "in-format products: formats up to fp32");
  const double p = precis::detail::load<double>(a) * precis::detail::load<double>(b);
  return round_to<F>(p, mode, detail::study_overflow<F>, gen);
}

/// ((x0 + x1) + x2) + ... with every addition rounded into F in `mode`.
template <floating F, std::uniform_random_bit_generator Gen>
F recursive_sum_in(std::span<const F> x, rounding mode, Gen& gen) {
  F s = round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);
  for (const F& v : x) s = add_in(s, v, mode, gen);
  return s;
}

/// Pairwise summation: the sum of each half, recursively, every addition rounded into F in
/// `mode`; no term passes through more than ceil(log2 n) additions.
template <floating F, std::uniform_random_bit_generator Gen>
F pairwise_sum_in(std::span<const F> x, rounding mode, Gen& gen) {
  if (x.empty()) return round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);
  if (x.size() == 1) return x[0];
  const std::size_t half = x.size() / 2;
  const F left = pairwise_sum_in(x.first(half), mode, gen);
  const F right = pairwise_sum_in(x.subspan(half), mode, gen);
  return add_in(left, right, mode, gen);
}

/// Kahan's compensated summation with every operation rounded to nearest in F: the rounding
/// error of each addition is recovered (exactly, up to one rounding) and fed into the next term.
template <floating F>
struct compensated_accumulator {
  F sum = round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);
  F c = round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);  // minus the lost low part

  compensated_accumulator() = default;
  explicit compensated_accumulator(const F& start) : sum(start) {}

  void add(const F& x) {
    constexpr rounding rn = rounding::nearest_even;
    const F y = sub_in(x, c, rn);
    const F t = add_in(sum, y, rn);
    c = sub_in(sub_in(t, sum, rn), y, rn);
    sum = t;
  }
};

/// Kahan's compensated sum of x, all operations in F (round to nearest).
template <floating F>
F compensated_sum_in(std::span<const F> x) {
  compensated_accumulator<F> acc;
  for (const F& v : x) acc.add(v);
  return acc.sum;
}

/// Recursive summation of values of F in a wider accumulator format Acc (each addition rounded
/// into Acc in `mode`), the total rounded once into F in the same mode: fp16 data with an fp32
/// accumulator, as tensor cores and most BLAS-like kernels do.
template <floating Acc, floating F, std::uniform_random_bit_generator Gen>
F widened_sum_in(std::span<const F> x, rounding mode, Gen& gen) {
  static_assert(format_traits<Acc>::digits >= format_traits<F>::digits, "widened_sum_in: Acc must be at least as wide as F");
  Acc s = round_to<Acc>(0.0, rounding::nearest_even, detail::study_overflow<Acc>);
  for (const F& v : x) s = add_in(s, round_to<Acc>(precis::detail::load<double>(v), rounding::nearest_even, detail::study_overflow<Acc>), mode, gen);
  return round_to<F>(precis::detail::load<double>(s), mode, detail::study_overflow<F>, gen);
}

/// sum x_i y_i in F: each product and each addition rounded once into F in `mode`, recursively.
template <floating F, std::uniform_random_bit_generator Gen>
F dot_in(std::span<const F> x, std::span<const F> y, rounding mode, Gen& gen) {
  if (x.size() != y.size()) {
    throw shape_error("precis::analysis::dot_in: lengths " + std::to_string(x.size()) + " and " +
                      std::to_string(y.size()) + " differ");
  }
  F s = round_to<F>(0.0, rounding::nearest_even, detail::study_overflow<F>);
  for (std::size_t i = 0; i < x.size(); ++i) s = add_in(s, mul_in(x[i], y[i], mode, gen), mode, gen);
  return s;
}

}  // namespace precis::analysis
