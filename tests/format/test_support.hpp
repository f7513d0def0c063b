// Shared helpers for the format tests: the target formats under test with their independent
// reference descriptions, bit access, and point generators.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <precis/precis.hpp>
#include <string>
#include <vector>

#include "reference.hpp"

namespace fmt_test {

/// The reference description of each target, written from the specifications (not from
/// precis's layouts).
template <class T>
struct spec;
template <> struct spec<precis::half> { static constexpr ref::ref_format f{5, 10, false}; };
template <> struct spec<precis::bfloat16> { static constexpr ref::ref_format f{8, 7, false}; };
template <> struct spec<precis::float8_e4m3> { static constexpr ref::ref_format f{4, 3, true}; };
template <> struct spec<precis::float8_e5m2> { static constexpr ref::ref_format f{5, 2, false}; };
template <> struct spec<precis::tf32> { static constexpr ref::ref_format f{8, 10, false}; };
template <> struct spec<precis::minifloat<3, 2>> { static constexpr ref::ref_format f{3, 2, false}; };
template <> struct spec<precis::minifloat<6, 4, precis::encoding::fn>> {
  static constexpr ref::ref_format f{6, 4, true};
};

/// Every small format under test (typed test suites).
using SmallFormats = ::testing::Types<precis::half, precis::bfloat16, precis::float8_e4m3,
                                      precis::float8_e5m2, precis::tf32, precis::minifloat<3, 2>,
                                      precis::minifloat<6, 4, precis::encoding::fn>>;

template <class T>
std::uint64_t bits_of(const T& x) {
  if constexpr (sizeof(T) == 1) { std::uint8_t b; std::memcpy(&b, &x, 1); return b; }
  else if constexpr (sizeof(T) == 2) { std::uint16_t b; std::memcpy(&b, &x, 2); return b; }
  else if constexpr (sizeof(T) == 4) { std::uint32_t b; std::memcpy(&b, &x, 4); return b; }
  else { std::uint64_t b; std::memcpy(&b, &x, 8); return b; }
}

inline std::vector<precis::rounding> deterministic_modes() {
  return {precis::rounding::nearest_even, precis::rounding::toward_zero, precis::rounding::upward,
          precis::rounding::downward};
}

template <class T>
std::vector<precis::overflow> overflow_modes() {
  if (precis::format_traits<T>::has_infinity) {
    return {precis::overflow::infinity, precis::overflow::saturate, precis::overflow::nan};
  }
  return {precis::overflow::saturate, precis::overflow::nan};
}

/// Every target value, the midpoints to its upper neighbour (including the overflow step),
/// one source ulp either side of each, both signs, plus zeros, infinities, NaNs and the
/// source's extremes.
template <class S>
std::vector<S> structured_points(const ref::value_table& t) {
  std::vector<S> pts;
  const auto add = [&](double v) {
    const S s = static_cast<S>(v);
    for (S p : {s, std::nextafter(s, std::numeric_limits<S>::infinity()),
                std::nextafter(s, -std::numeric_limits<S>::infinity())}) {
      pts.push_back(p);
      pts.push_back(-p);
    }
  };
  for (std::size_t i = 0; i + 1 < t.values.size(); ++i) {
    add(t.values[i]);
    add((t.values[i] + t.values[i + 1]) / 2);
  }
  add(t.values.back());
  for (S s : {std::numeric_limits<S>::infinity(), std::numeric_limits<S>::max(),
              std::numeric_limits<S>::denorm_min(), std::numeric_limits<S>::min(), S(0)}) {
    pts.push_back(s);
    pts.push_back(-s);
  }
  pts.push_back(std::numeric_limits<S>::quiet_NaN());
  pts.push_back(-std::numeric_limits<S>::quiet_NaN());
  pts.push_back(std::numeric_limits<S>::signaling_NaN());
  return pts;
}

/// The points of structured_points in the top binade and beyond, plus the specials: where
/// the overflow choice matters.
template <class S>
std::vector<S> overflow_points(const ref::value_table& t) {
  const double top_binade = t.values[t.values.size() - 2] / 2;
  std::vector<S> pts;
  for (S x : structured_points<S>(t)) {
    if (std::isnan(x) || std::fabs(static_cast<double>(x)) >= top_binade) pts.push_back(x);
  }
  return pts;
}

/// Random source values: half uniformly random bit patterns, half with exponents spread over
/// the target's range (a few binades past each end) and random significands.
template <class S>
std::vector<S> random_points(const ref::ref_format& f, std::size_t n, std::uint64_t seed) {
  precis::xoshiro256pp gen(seed);
  std::vector<S> pts(n);
  const int lo = 1 - f.bias() - f.M - 4, hi = f.bias() + 3;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = gen();
    if (i % 2 == 0) {
      if constexpr (sizeof(S) == 4) {
        const auto b = static_cast<std::uint32_t>(r);
        std::memcpy(&pts[i], &b, 4);
      } else {
        std::memcpy(&pts[i], &r, 8);
      }
    } else {
      const int e = lo + static_cast<int>(r % static_cast<std::uint64_t>(hi - lo + 1));
      const double m = 1.0 + static_cast<double>(gen() >> 11) * 0x1p-53;
      const double v = std::ldexp(m, e) * ((r >> 40) & 1 ? -1.0 : 1.0);
      pts[i] = static_cast<S>(v);
    }
  }
  return pts;
}

/// Checks round_to<T> on every point in every deterministic mode and applicable overflow mode
/// against the reference; reports the first mismatches.
template <class T, class S>
void expect_matches_reference(const std::vector<S>& pts, const ref::value_table& t,
                              const std::vector<precis::rounding>& modes,
                              std::optional<precis::overflow> only = std::nullopt) {
  const ref::ref_format f = t.f;
  const auto ovs = only ? std::vector<precis::overflow>{*only} : overflow_modes<T>();
  for (precis::rounding mode : modes) {
    for (precis::overflow ov : ovs) {
      std::size_t bad = 0;
      for (S x : pts) {
        const std::uint64_t got = bits_of(precis::round_to<T>(x, mode, ov));
        bool ok;
        std::uint64_t want = 0;
        if (std::isnan(x)) {
          ok = f.is_nan(got) && (((got & f.sign_bit()) != 0) == std::signbit(x));
        } else {
          want = ref::round_ref(t, static_cast<double>(x), mode, ov);
          ok = got == want;
        }
        if (!ok && ++bad <= 5) {
          ADD_FAILURE() << precis::format_traits<T>::name << " from " << precis::format_traits<S>::name
                        << " mode " << precis::to_string(mode) << " overflow " << precis::to_string(ov)
                        << ": x = " << std::hexfloat << static_cast<double>(x) << " got 0x" << std::hex
                        << got << " want 0x" << want;
        }
      }
      EXPECT_EQ(bad, 0u) << precis::to_string(mode) << "/" << precis::to_string(ov);
    }
  }
}

}  // namespace fmt_test
