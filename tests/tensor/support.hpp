// Shared helpers for the tensor tests: the storage formats under test, a wide reference type,
// and the error bounds (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.).
#pragma once

// GCC 12 at -O2 and above reports -Warray-bounds inside Boost.Multiprecision's cpp_bin_float
// converting assignment (cpp_bin_float_50 -> the 300-digit reference type): the branch that
// narrows, dead when the target is wider, indexes limbs the narrower source lacks. A false
// positive in Boost's code (a plain conversion between the two types raises it too), silenced
// for the files that include this one, before any Boost header is read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
#include <gtest/gtest.h>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <cmath>
#include <precis/precis.hpp>

namespace tensor_test {

using mp50 = boost::multiprecision::cpp_bin_float_50;
/// Reference arithmetic: ~1000 bits, exact for every sum and dot product in these tests (their
/// terms span far fewer binades).
using exact_t = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<300>>;

/// Storage formats every typed test runs over.
using StorageFormats = ::testing::Types<precis::half, precis::bfloat16, precis::float8_e4m3,
                                        precis::float8_e5m2, float, double, mp50>;

template <class T>
exact_t to_exact(const T& x) {
  return precis::detail::load<exact_t>(x);
}
template <class T>
T from_exact(const exact_t& x) {
  return precis::round_to<T>(x, precis::rounding::nearest_even,
                             precis::detail::storage_overflow<T>);
}

/// Unit roundoff 2^-t of a format (precis::format_traits::digits = t).
template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -precis::format_traits<T>::digits);
}

/// gamma_n = n u / (1 - n u), as an exact_t so tiny u (mp50) is not lost.
template <class T>
exact_t gamma(long n) {
  const exact_t u = exact_t(unit_roundoff<T>());
  const exact_t nu = exact_t(n) * u;
  return nu / (exact_t(1) - nu);
}

/// A random tensor of `shape` with entries uniform on [lo, hi) rounded into S.
template <class S>
precis::Tensor<S> random_tensor(precis::Shape shape, double lo, double hi, std::uint64_t seed) {
  precis::Tensor<S> t(shape);
  precis::fill_uniform(t, lo, hi, seed);
  return t;
}

}  // namespace tensor_test
