// Rounding-error bounds from the literature, as functions of the problem size and the unit
// roundoff u (precis::unit_roundoff<F>() = 2^-t for a format with t significand bits).
//   Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed. (2002): gamma_n (Lemma 3.1),
//     recursive and pairwise summation (eqs. 4.4, 4.6), compensated summation (eq. 4.8).
//   Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019; Connolly, Higham & Mary, SIAM J. Sci.
//     Comput. 43(2), 2021: the probabilistic bound gamma~_n(lambda).
//   Blanchard, Higham, Lopez, Mary & Pranesh, SIAM J. Sci. Comput. 42(3), 2020: the block FMA.
// A bound that does not exist (n u >= 1) is +infinity.
#pragma once

#include <cmath>
#include <limits>

#include "precis/format/format_traits.hpp"

namespace precis {

/// 2^-t: the unit roundoff of format F under round-to-nearest.
template <floating F>
constexpr double unit_roundoff() {
  return format_traits<F>::unit_roundoff();
}

namespace bounds {

inline constexpr double infinity = std::numeric_limits<double>::infinity();

/// gamma_n = n u / (1 - n u): |prod (1 + delta_i)^{+-1} - 1| <= gamma_n for n factors, |delta_i| <= u.
inline double gamma(double n, double u) {
  const double nu = n * u;
  return nu < 1 ? nu / (1 - nu) : infinity;
}

/// ceil(log2 n) for n >= 1.
inline int ceil_log2(double n) {
  int k = 0;
  while (std::ldexp(1.0, k) < n) ++k;
  return k;
}

/// Recursive summation of n terms: |error| <= gamma_{n-1} sum |x_i|.
inline double recursive_sum(double n, double u) { return gamma(n - 1, u); }

/// Pairwise summation of n terms: |error| <= gamma_{ceil(log2 n)} sum |x_i|.
inline double pairwise_sum(double n, double u) { return gamma(ceil_log2(n), u); }

/// Kahan's compensated summation: |error| <= (2u + O(n u^2)) sum |x_i|. The O-term is taken
/// with constant 4, the constant precis's tests use.
inline double compensated_sum(double n, double u) { return 2 * u + 4 * n * u * u; }

/// Inner product of length n (recursive, with or without FMA): gamma_n sum |x_i y_i|.
inline double dot(double n, double u) { return gamma(n, u); }

/// The probabilistic bound gamma~_n(lambda) = exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1. It
/// holds with probability at least probabilistic_confidence(lambda, u): for stochastic
/// rounding unconditionally, for round-to-nearest under the model of independent, mean-zero
/// rounding errors.
inline double probabilistic(double n, double lambda, double u) {
  return std::expm1(lambda * std::sqrt(n) * u + n * u * u / (1 - u));
}

/// 1 - 2 exp(-lambda^2 (1 - u)^2 / 2).
inline double probabilistic_confidence(double lambda, double u) {
  return 1 - 2 * std::exp(-lambda * lambda * (1 - u) * (1 - u) / 2);
}

/// Matrix product with inner dimension n on a b-wide block FMA (Blanchard et al. 2020): each
/// block computes c + sum of b products exactly and rounds once in the accumulator's u_high, so
/// ceil(n/b) blocks in sequence give gamma_{ceil(n/b)}(u_high); inputs first rounded from a
/// wider format into the low format (u_low > 0; 0 when they already are in it) multiply each
/// product by (1 + d1)(1 + d2), |d_i| <= u_low. Then
///   |C - fl(C)| <= (2 u_low + u_low^2 + (1 + u_low)^2 gamma_{ceil(n/b)}(u_high)) |A||B|.
/// b = 1 is a scalar FMA loop (precis's CPU GEMM); b = 4 or 8 models tensor cores.
inline double block_fma(double n, double b, double u_high, double u_low = 0) {
  const double g = gamma(std::ceil(n / b), u_high);
  return 2 * u_low + u_low * u_low + (1 + u_low) * (1 + u_low) * g;
}

}  // namespace bounds
}  // namespace precis
