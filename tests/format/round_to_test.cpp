// precis::round_to against the independent reference (tests/format/reference.hpp), for float
// and double sources, every deterministic mode and every overflow mode.
#include <gtest/gtest.h>

#include <random>

#include "test_support.hpp"

namespace {

using namespace fmt_test;
using precis::overflow;
using precis::rounding;

template <class T>
class RoundToSmall : public ::testing::Test {};
TYPED_TEST_SUITE(RoundToSmall, SmallFormats);

TYPED_TEST(RoundToSmall, StructuredPointsFromFloat) {
  const ref::value_table t(spec<TypeParam>::f);
  expect_matches_reference<TypeParam>(structured_points<float>(t), t, deterministic_modes(),
                                      overflow_modes<TypeParam>().front());
  expect_matches_reference<TypeParam>(overflow_points<float>(t), t, deterministic_modes());
}

TYPED_TEST(RoundToSmall, StructuredPointsFromDouble) {
  const ref::value_table t(spec<TypeParam>::f);
  expect_matches_reference<TypeParam>(structured_points<double>(t), t, deterministic_modes(),
                                      overflow_modes<TypeParam>().front());
  expect_matches_reference<TypeParam>(overflow_points<double>(t), t, deterministic_modes());
}

TYPED_TEST(RoundToSmall, RandomPatterns) {
  // A sample here; tests/format/exhaustive_test.cpp runs 10^7 per format, optimized.
  const ref::value_table t(spec<TypeParam>::f);
  expect_matches_reference<TypeParam>(random_points<float>(t.f, 50'000, 1), t, deterministic_modes());
  expect_matches_reference<TypeParam>(random_points<double>(t.f, 50'000, 2), t, deterministic_modes());
}

TYPED_TEST(RoundToSmall, EveryPatternRoundTripsThroughFloatAndDouble) {
  const ref::ref_format f = spec<TypeParam>::f;
  const std::uint64_t count = std::uint64_t{1} << (1 + f.E + f.M);
  using bf = precis::detail::bit_format<TypeParam>;
  for (std::uint64_t b = 0; b < count; ++b) {
    const TypeParam x = bf::from_bits(static_cast<typename bf::bits_type>(b));
    const float xf = precis::round_to<float>(x);
    const double xd = precis::round_to<double>(x);
    const double want = f.decode(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(xf) && std::isnan(xd)) << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(xf), want) << "pattern " << b;
    ASSERT_EQ(xd, want) << "pattern " << b;
    ASSERT_EQ(std::signbit(xf), std::signbit(want)) << "pattern " << b;
    // Back again, exactly, in every mode (infinities need the IEEE overflow behaviour).
    const overflow ov = std::isinf(xf) ? overflow::infinity : overflow::saturate;
    for (rounding m : deterministic_modes()) {
      ASSERT_EQ(bits_of(precis::round_to<TypeParam>(xf, m, ov)), b) << b;
      ASSERT_EQ(bits_of(precis::round_to<TypeParam>(xd, m, ov)), b) << b;
    }
  }
}

// Double -> half and double -> bfloat16 must not round through float: just above (below) a
// midpoint by less than float can resolve, the answer is the upper (lower) neighbour.
template <class T>
void check_double_rounding_traps() {
  const ref::value_table t(spec<T>::f);
  std::size_t traps_that_bite_through_float = 0;
  for (std::size_t i = 0; i + 2 < t.values.size(); ++i) {
    const double mid = (t.values[i] + t.values[i + 1]) / 2;
    const double above = std::nextafter(mid, 2 * mid + 1), below = std::nextafter(mid, 0.0);
    ASSERT_EQ(bits_of(precis::round_to<T>(above)), i + 1) << std::hexfloat << above;
    ASSERT_EQ(bits_of(precis::round_to<T>(below)), i) << std::hexfloat << below;
    // The same through float lands on the tie and goes to even for one of the two.
    const std::uint64_t via_float_above = bits_of(precis::round_to<T>(static_cast<float>(above)));
    const std::uint64_t via_float_below = bits_of(precis::round_to<T>(static_cast<float>(below)));
    traps_that_bite_through_float += static_cast<std::size_t>(via_float_above != i + 1) +
                                     static_cast<std::size_t>(via_float_below != i);
  }
  // Every midpoint is a trap for float (one of its two sides rounds wrongly via float).
  EXPECT_EQ(traps_that_bite_through_float, t.values.size() - 2);
}

TEST(RoundTo, DoubleToHalfAtDoubleRoundingTraps) { check_double_rounding_traps<precis::half>(); }
TEST(RoundTo, DoubleToBfloat16AtDoubleRoundingTraps) {
  check_double_rounding_traps<precis::bfloat16>();
}

// Reference for double -> float: the hardware's nearest-even conversion, and its neighbours
// found with nextafter for the directed modes (no fesetround: compilers may move conversions
// across it without FENV_ACCESS).
float float_reference(double x, rounding mode) {
  const float n = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(n) == x || mode == rounding::nearest_even) return n;
  const float inf = std::numeric_limits<float>::infinity();
  const bool n_below = static_cast<double>(n) < x;
  const float below = n_below ? n : std::nextafter(n, -inf);
  const float above = n_below ? std::nextafter(n, inf) : n;
  switch (mode) {
    case rounding::toward_zero: return x > 0 ? below : above;
    case rounding::upward: return above;
    default: return below;
  }
}

TEST(RoundTo, DoubleToFloatMatchesHardware) {
  const ref::ref_format wide{8, 23, false};
  const auto pts = random_points<double>(wide, 1'000'000, 3);
  for (rounding mode : deterministic_modes()) {
    std::size_t bad = 0;
    for (double x : pts) {
      const float got = precis::round_to<float>(x, mode);
      const float want = float_reference(x, mode);
      bad += std::isnan(x) ? !std::isnan(got) : bits_of(got) != bits_of(want);
    }
    EXPECT_EQ(bad, 0u) << precis::to_string(mode);
  }
}

TEST(RoundTo, LongDoubleToDoubleMatchesHardware) {
  precis::xoshiro256pp gen(4);
  for (int i = 0; i < 200'000; ++i) {
    const long double x = std::ldexp(static_cast<long double>(gen()), static_cast<int>(gen() % 2200) - 1140);
    const long double y = (gen() & 1) ? -x : x;
    EXPECT_EQ(bits_of(precis::round_to<double>(y)), bits_of(static_cast<double>(y)));
  }
}

TEST(RoundTo, OverflowChoices) {
  using precis::float8_e4m3;
  using precis::float8_e5m2;
  // E4M3: 448 is the largest; 464 is the midpoint to the (absent) 480 and ties to even 448.
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e4m3>(464.0f, rounding::nearest_even, overflow::nan)), 448.0f);
  EXPECT_TRUE(isnan(precis::round_to<float8_e4m3>(464.5f, rounding::nearest_even, overflow::nan)));
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e4m3>(1e6f, rounding::nearest_even, overflow::saturate)), 448.0f);
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e4m3>(-1e6f, rounding::nearest_even, overflow::saturate)), -448.0f);
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e4m3>(1e6f, rounding::toward_zero, overflow::nan)), 448.0f);
  EXPECT_TRUE(isnan(precis::round_to<float8_e4m3>(std::numeric_limits<float>::infinity(), rounding::nearest_even, overflow::nan)));
  // E5M2 has infinities: IEEE by default.
  EXPECT_TRUE(isinf(precis::round_to<float8_e5m2>(61440.0f)));
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e5m2>(61439.0f)), 57344.0f);
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e5m2>(1e9f, rounding::toward_zero)), 57344.0f);
  EXPECT_EQ(static_cast<float>(precis::round_to<float8_e5m2>(std::numeric_limits<float>::infinity(), rounding::nearest_even, overflow::saturate)), 57344.0f);
  // fp16: 65520 is the overflow threshold under nearest-even.
  EXPECT_TRUE(std::isinf(static_cast<float>(precis::round_to<precis::half>(65520.0f))));
  EXPECT_EQ(static_cast<float>(precis::round_to<precis::half>(65519.996f)), 65504.0f);
}

TEST(RoundTo, SignedZerosAndUnderflow) {
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(-0.0f)), 0x8000u);
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(0x1p-26f)), 0x0000u);            // below half of 2^-24
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(0x1p-25f)), 0x0000u);            // tie -> even (0)
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(0x1.000002p-25f)), 0x0001u);     // just above the tie
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(-0x1p-30f, rounding::downward)), 0x8001u);
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(-0x1p-30f, rounding::upward)), 0x8000u);
}

TEST(RoundTo, NanPayloadsAreQuietedAndKept) {
  const float snan = std::bit_cast<float>(0x7f812345u);
  EXPECT_EQ(bits_of(precis::round_to<precis::half>(snan)), 0x7e09u);  // quiet bit + top payload
  EXPECT_EQ(bits_of(precis::round_to<precis::bfloat16>(-snan)), 0xffc1u);
  EXPECT_EQ(bits_of(precis::round_to<precis::float8_e4m3>(snan, rounding::nearest_even, overflow::saturate)), 0x7fu);
  EXPECT_EQ(bits_of(precis::round_to<float>(precis::detail::bit_format<precis::half>::from_bits(0x7d01))), 0x7fe02000u);
}

TEST(RoundTo, Errors) {
  EXPECT_THROW((void)precis::round_to<precis::half>(1.0f, rounding::stochastic), precis::invalid_argument);
  EXPECT_THROW((void)precis::round_to<precis::float8_e4m3>(1.0f, rounding::nearest_even, overflow::infinity),
               precis::invalid_argument);
  try {
    (void)precis::round_to<precis::float8_e4m3>(1.0f, rounding::nearest_even, overflow::infinity);
  } catch (const precis::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_e4m3 has no infinity"), std::string::npos) << e.what();
  }
}

// Stochastic rounding: P(round up) = (x - lo) / (hi - lo); E[result] = x.
template <class T, class S>
void check_stochastic(S x, double lo, double hi) {
  constexpr int n = 200'000;
  precis::xoshiro256pp gen(42);
  int ups = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double r = static_cast<double>(precis::round_to<T>(x, rounding::stochastic, overflow::saturate, gen));
    ASSERT_TRUE(r == lo || r == hi) << r;
    ups += r == hi;
    sum += r;
  }
  const double p = (static_cast<double>(x) - lo) / (hi - lo);
  // Five standard deviations of a binomial proportion: a false failure has probability
  // below 6e-7 for any seed.
  const double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(static_cast<double>(ups) / n, p, 5 * sigma + 1e-12) << std::hexfloat << static_cast<double>(x);
  EXPECT_NEAR(sum / n, static_cast<double>(x), 5 * sigma * std::fabs(hi - lo) + 1e-300);
}

TEST(RoundTo, StochasticIsUnbiasedAndProportional) {
  check_stochastic<precis::half>(1.0f + 0x1p-12f, 1.0, 1.0 + 0x1p-10);        // p = 1/4
  check_stochastic<precis::half>(1.0 + 0x1p-11 + 0x1p-13, 1.0, 1.0 + 0x1p-10);  // p = 5/8
  check_stochastic<precis::bfloat16>(-3.0f - 0x1p-10f, -3.0, -3.0 - 0x1p-6);   // p = 1/16
  check_stochastic<precis::float8_e4m3>(0.3f, 0.28125, 0.3125);
  check_stochastic<precis::half>(0x1p-26f, 0.0, 0x1p-24);                       // subnormal p = 1/4
  check_stochastic<precis::bfloat16>(1.0 + 0x1p-30, 1.0, 1.0 + 0x1p-7);         // p = 2^-23
}

TEST(RoundTo, StochasticKeepsRepresentableValuesAndWorksWith32BitSources) {
  std::mt19937 gen32(7);
  for (float v : {1.0f, 0.5f, -65504.0f, 0x1p-24f, 0.0f}) {
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(static_cast<float>(precis::round_to<precis::half>(v, rounding::stochastic, gen32)), v);
    }
  }
  // Reproducible from the seed.
  precis::xoshiro256pp a(9), b(9);
  for (int i = 0; i < 1000; ++i) {
    const float x = 1.0f + static_cast<float>(i) * 0x1p-20f;
    ASSERT_EQ(bits_of(precis::round_to<precis::bfloat16>(x, rounding::stochastic, a)),
              bits_of(precis::round_to<precis::bfloat16>(x, rounding::stochastic, b)));
  }
}

}  // namespace
