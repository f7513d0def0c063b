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
    const R t = precis::detail::load<R>(x.value_at_linear(i)) * precis::detail::load<R>(y.value_at_linear(i));
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
        const R prod = precis::detail::load<R>(a(i, p)) * precis::detail::load<R>(b(p, j));
        s += prod;
        t += R(abs(prod));
      }
      c(i, j) = s;
      mag(i, j) = t;
    }
  return {std::move(c), std::move(mag)};
}

}  // namespace precis::analysis
