// Error metrics: absolute, relative, normwise, componentwise, and ulp distance in any format.
// Values are compared in a reference type R (double by default; a Boost.Multiprecision type for
// errors below double's resolution).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "precis/error.hpp"
#include "precis/format/round_to.hpp"
#include "precis/tensor/elementwise.hpp"

namespace precis::analysis {

/// |computed - exact|.
template <class R = double, class A, class B>
R abs_error(const A& computed, const B& exact) {
  using std::abs;
  return R(abs(precis::detail::load<R>(computed) - precis::detail::load<R>(exact)));
}

/// |computed - exact| / |exact|; 0 when both are 0, +infinity when only exact is 0.
template <class R = double, class A, class B>
R rel_error(const A& computed, const B& exact) {
  using std::abs;
  const R e = precis::detail::load<R>(exact);
  const R d = R(abs(precis::detail::load<R>(computed) - e));
  if (e == R(0)) return d == R(0) ? R(0) : R(std::numeric_limits<double>::infinity());
  return R(d / abs(e));
}

enum class norm { two, inf };

/// ||computed - exact|| / ||exact|| over all elements of two views of the same shape.
template <class R = double, tensor_like X, tensor_like Y>
R normwise_error(const X& computed, const Y& exact, norm which = norm::two) {
  const auto c = as_view(computed);
  const auto e = as_view(exact);
  if (!(c.shape() == e.shape())) {
    throw shape_error("precis::analysis::normwise_error: computed " + c.shape().str() +
                      " and exact " + e.shape().str() + " differ in shape");
  }
  R num(0), den(0);
  using std::abs;
  using std::sqrt;
  for (index_t i = 0; i < c.size(); ++i) {
    const R ev = precis::detail::load<R>(e.value_at_linear(i));
    const R d = R(abs(R(precis::detail::load<R>(c.value_at_linear(i)) - ev)));
    const R a = R(abs(ev));
    if (which == norm::two) {
      num += d * d;
      den += a * a;
    } else {
      num = d > num ? d : num;
      den = a > den ? a : den;
    }
  }
  if (which == norm::two) {
    num = R(sqrt(num));
    den = R(sqrt(den));
  }
  if (den == R(0)) return num == R(0) ? R(0) : R(std::numeric_limits<double>::infinity());
  return R(num / den);
}

/// max_i |computed_i - exact_i| / |exact_i| (0/0 counts as 0).
template <class R = double, tensor_like X, tensor_like Y>
R componentwise_error(const X& computed, const Y& exact) {
  const auto c = as_view(computed);
  const auto e = as_view(exact);
  if (!(c.shape() == e.shape())) {
    throw shape_error("precis::analysis::componentwise_error: computed " + c.shape().str() +
                      " and exact " + e.shape().str() + " differ in shape");
  }
  R worst(0);
  for (index_t i = 0; i < c.size(); ++i) {
    const R r = rel_error<R>(c.value_at_linear(i), e.value_at_linear(i));
    worst = r > worst ? r : worst;
  }
  return worst;
}

namespace detail {

/// Position of x in the ordered list of F's values (..., -min_subnormal -> -1, +-0 -> 0,
/// min_subnormal -> 1, ...), so consecutive values differ by 1.
template <class F>
std::int64_t ordinal(const F& x) {
  static_assert(precis::detail::is_bit_format_v<F>,
                "precis::analysis::ulp_distance: F must be float, double or a precis bit format");
  using bf = precis::detail::bit_format<F>;
  const auto bits = static_cast<std::uint64_t>(bf::to_bits(x));
  const std::uint64_t sign = std::uint64_t{1} << (bf::lay.total_bits() - 1);
  const auto mag = static_cast<std::int64_t>(bits & (sign - 1));
  return (bits & sign) ? -mag : mag;
}

}  // namespace detail

/// Number of steps between two values of F along F's ordered values (0 for equal values and
/// for +0 vs -0). NaNs are an error.
template <class F>
std::int64_t ulp_distance(const F& a, const F& b) {
  if (a != a || b != b) {
    throw invalid_argument("precis::analysis::ulp_distance<" + std::string(format_traits<F>::name) +
                           ">: NaN argument; expected two non-NaN values");
  }
  const std::int64_t d = detail::ordinal(a) - detail::ordinal(b);
  return d < 0 ? -d : d;
}

}  // namespace precis::analysis
