// Reference values for error measurement: sums, dot products and matrix products computed in a
// wide Boost.Multiprecision type (exact for the data of any benchmark here: ~1000 bits cover
// every product of two doubles and the sum of up to 2^900 such terms within one binade range),
// and the magnitudes the bounds are stated against (sum |x_i|, |A||B|).
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "precis/tensor/elementwise.hpp"

namespace precis::analysis {

/// ~1000 significant bits.
using exact_t = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<300>>;

namespace detail {

/// x * y exactly in R. When the two formats' significands fit 53 bits together the product is
/// exact in double, which is much cheaper than a multiplication in R.
template <class R, class X, class Y>
R exact_product(const X& x, const Y& y) {
  if constexpr (format_traits<X>::digits + format_traits<Y>::digits <= 53 &&
                format_traits<X>::emin + format_traits<Y>::emin - format_traits<X>::digits -
                        format_traits<Y>::digits >= -1074 &&
                format_traits<X>::emax + format_traits<Y>::emax < 1023) {
    return R(precis::detail::load<double>(x) * precis::detail::load<double>(y));
  } else {
    return precis::detail::load<R>(x) * precis::detail::load<R>(y);
  }
}

}  // namespace detail

/// sum x_i and sum |x_i| of all elements of x, in R.
template <class R = exact_t, tensor_like X>
std::pair<R, R> reference_sum(const X& x_) {
  const auto x = as_view(x_);
  R s(0), a(0);
  using std::abs;
  for (index_t i = 0; i < x.size(); ++i) {
    const R v = precis::detail::load<R>(x.value_at_linear(i));
    s += v;
    a += R(abs(v));
  }
  return {s, a};
}

/// sum x_i y_i and sum |x_i y_i| over two views of equal shape, in R.
template <class R = exact_t, tensor_like X, tensor_like Y>
std::pair<R, R> reference_dot(const X& x_, const Y& y_) {
  const auto x = as_view(x_);
  const auto y = as_view(y_);
  if (!(x.shape() == y.shape())) {
    throw shape_error("precis::analysis::reference_dot: shapes " + x.shape().str() + " and " +
                      y.shape().str() + " differ");
  }
  R s(0), a(0);
  using std::abs;
  for (index_t i = 0; i < x.size(); ++i) {
    const R t = detail::exact_product<R>(x.value_at_linear(i), y.value_at_linear(i));
    s += t;
    a += R(abs(t));
  }
  return {s, a};
}

/// A B and |A||B| for 2-D views, in R (m x n tensors of R).
template <class R = exact_t, tensor_like A, tensor_like B>
std::pair<Tensor<R, R>, Tensor<R, R>> reference_gemm(const A& a_, const B& b_) {
  const auto a = as_view(a_);
  const auto b = as_view(b_);
  if (a.rank() != 2 || b.rank() != 2 || a.shape()[1] != b.shape()[0]) {
    throw shape_error("precis::analysis::reference_gemm: A " + a.shape().str() + " times B " +
                      b.shape().str() + "; expected [m, k] and [k, n]");
  }
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  Tensor<R, R> c(Shape{m, n}), mag(Shape{m, n});
  using std::abs;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      R s(0), t(0);
      for (index_t p = 0; p < k; ++p) {
        const R prod = detail::exact_product<R>(a(i, p), b(p, j));
        s += prod;
        t += R(abs(prod));
      }
      c(i, j) = s;
      mag(i, j) = t;
    }
  return {std::move(c), std::move(mag)};
}

}  // namespace precis::analysis
