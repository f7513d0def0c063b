// An independent reference for rounding into small formats, written from the formats'
// definitions and sharing no code with precis's rounding core:
// - `ref_format` decodes a bit pattern with the textbook formula (-1)^s 2^(e-bias) (1 + m/2^M);
// - the positive finite values are tabulated in bit order (which is value order), plus the
//   value one step past the largest finite one, where rounding overflows;
// - a source value x (exact in double) is placed between its neighbours lo <= |x| < hi by
//   binary search, and each rounding mode's rule picks one using exact differences (x - lo
//   and hi - x are exact in double: both are multiples of ulp(x) smaller than 2^53 ulp(x)).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "precis/format/rounding.hpp"

namespace ref {

struct ref_format {
  int E;
  int M;
  bool fn;  // OCP E4M3 style: no infinity, NaN only at all ones

  int bias() const { return (1 << (E - 1)) - 1; }
  std::uint64_t sign_bit() const { return std::uint64_t{1} << (E + M); }
  std::uint64_t exp_ones() const { return (std::uint64_t{1} << E) - 1; }
  std::uint64_t mant_ones() const { return (std::uint64_t{1} << M) - 1; }

  bool is_nan(std::uint64_t bits) const {
    const std::uint64_t e = (bits >> M) & exp_ones(), m = bits & mant_ones();
    if (fn) return e == exp_ones() && m == mant_ones();
    return e == exp_ones() && m != 0;
  }
  /// Value of a bit pattern (NaN for NaN patterns).
  double decode(std::uint64_t bits) const {
    const bool s = (bits & sign_bit()) != 0;
    const std::uint64_t e = (bits >> M) & exp_ones(), m = bits & mant_ones();
    double v;
    if (is_nan(bits)) return std::numeric_limits<double>::quiet_NaN();
    if (!fn && e == exp_ones()) {
      v = std::numeric_limits<double>::infinity();
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), 1 - bias() - M);
    } else {
      v = std::ldexp(static_cast<double>((std::uint64_t{1} << M) + m), static_cast<int>(e) - bias() - M);
    }
    return s ? -v : v;
  }
  std::uint64_t max_finite_bits() const {
    return fn ? (exp_ones() << M) | (mant_ones() - 1) : ((exp_ones() - 1) << M) | mant_ones();
  }
  std::uint64_t inf_bits() const { return exp_ones() << M; }
};

/// Positive finite values in bit order (index == bit pattern), then the overflow step.
struct value_table {
  ref_format f;
  std::vector<double> values;

  explicit value_table(ref_format fmt) : f(fmt) {
    const std::uint64_t top = f.max_finite_bits();
    values.reserve(top + 2);
    for (std::uint64_t b = 0; b <= top; ++b) values.push_back(f.decode(b));
    // One step past the largest finite value: what rounding with an unbounded exponent range
    // would produce next (2^(emax+1) for IEEE formats; 480 for E4M3).
    const double ulp_top = values[top] - values[top - 1];
    values.push_back(values[top] + ulp_top);
  }
  std::uint64_t overflow_index() const { return values.size() - 1; }
};

/// Neighbours of a magnitude: index of lo (largest value <= a) in the table.
inline std::uint64_t lower_index(const value_table& t, double a) {
  auto it = std::upper_bound(t.values.begin(), t.values.end(), a);
  return static_cast<std::uint64_t>(it - t.values.begin()) - 1;
}

/// The correctly rounded result in `mode` for |x| = a between t.values[i] and t.values[i+1]:
/// returns the chosen table index (possibly the overflow index).
inline std::uint64_t pick(const value_table& t, double a, std::uint64_t i, bool negative,
                          precis::rounding mode) {
  const double lo = t.values[i];
  if (a == lo || i + 1 >= t.values.size()) return i;
  const double hi = t.values[i + 1];
  switch (mode) {
    case precis::rounding::toward_zero: return i;
    case precis::rounding::upward: return negative ? i : i + 1;
    case precis::rounding::downward: return negative ? i + 1 : i;
    default: {
      const double dlo = a - lo, dhi = hi - a;
      if (dlo < dhi) return i;
      if (dhi < dlo) return i + 1;
      return (i % 2 == 0) ? i : i + 1;  // tie: the even significand (even bit pattern)
    }
  }
}

/// Reference bit pattern for rounding a finite or infinite double x (not NaN).
inline std::uint64_t round_ref(const value_table& t, double x, precis::rounding mode,
                               precis::overflow ov) {
  const ref_format& f = t.f;
  const bool neg = std::signbit(x);
  const std::uint64_t sign = neg ? f.sign_bit() : 0;
  const double a = std::fabs(x);
  const auto overflow_result = [&](bool infinite) -> std::uint64_t {
    if (!infinite || ov == precis::overflow::saturate) return sign | f.max_finite_bits();
    if (ov == precis::overflow::nan) return sign | (f.fn ? (f.sign_bit() - 1) : (f.inf_bits() | (std::uint64_t{1} << (f.M - 1))));
    return sign | f.inf_bits();
  };
  if (std::isinf(a)) return overflow_result(true);
  if (a >= t.values.back()) {
    // Beyond the overflow step: directed modes toward zero give the largest finite value.
    const bool infinite = mode == precis::rounding::nearest_even ||
                          (mode == precis::rounding::upward && !neg) ||
                          (mode == precis::rounding::downward && neg);
    return overflow_result(infinite);
  }
  const std::uint64_t i = pick(t, a, lower_index(t, a), neg, mode);
  if (i == t.overflow_index()) return overflow_result(true);
  return sign | i;
}

}  // namespace ref
