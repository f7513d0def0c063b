// The vectorized exp (detail/vexp.hpp) against double-precision exp, over random and
// structured inputs, with an error bound derived from the algorithm.
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "support.hpp"

using namespace precis;

namespace {

/// |y - e^x| <= B u e^x + 2^-150 with u = 2^-24. B from the algorithm (vexp.hpp): the last
/// Horner fma rounds (1 u), the one before contributes at most |p6 r|/|p| * u <= 0.6 u, the
/// earlier ones 0.1 u + 0.05 u; r = x - n ln2 carries u|r| <= 0.35 u into e^r; truncation
/// 2^-28 = u/16; rounded Taylor coefficients < 0.05 u. B = 2.25 covers their sum (2.21). The
/// power-of-two scaling is exact except into the subnormal range, where it adds at most
/// half the smallest subnormal, 2^-150.
constexpr double B = 2.25;

void expect_close(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  detail::exp_floats(y.data(), x.data(), static_cast<index_t>(x.size()));
  const double u = std::ldexp(1.0, -24);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i]));
      continue;
    }
    if (ref > std::numeric_limits<float>::max()) {  // the float result overflows
      EXPECT_EQ(y[i], std::numeric_limits<float>::infinity()) << x[i];
      continue;
    }
    const double err = std::abs(static_cast<double>(y[i]) - ref);
    ASSERT_LE(err, B * u * ref + std::ldexp(1.0, -150)) << "exp(" << x[i] << ") = " << y[i] << ", want " << ref;
    if (ref > std::ldexp(1.0, -126)) worst = std::max(worst, err / (u * ref));
  }
  ::testing::Test::RecordProperty("worst_error_in_u", std::to_string(worst));
  std::printf("worst error %.3f u\n", worst);
}

}  // namespace

TEST(VectorExp, RandomArgumentsWithinBound) {
  std::vector<float> x(1 << 20);
  xoshiro256pp gen(5);
  for (float& v : x) v = -104.0f + 193.0f * static_cast<float>(gen() >> 40) * 0x1p-24f;
  expect_close(x);
  for (float& v : x) v = std::ldexp(static_cast<float>(gen() >> 40) * 0x1p-24f, -static_cast<int>(gen() % 30)) * ((gen() & 1) ? 1.0f : -1.0f);
  expect_close(x);  // small arguments, where e^x is near 1
}

TEST(VectorExp, SpecialAndThresholdArguments) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, inf, -inf, std::nanf(""), 88.72283f, 88.722839f, 88.7229f,
                          89.0f, 100.0f, -87.33654f, -87.34f, -100.0f, -103.27893f, -103.9720f,
                          -103.98f, -104.0f, -200.0f, 1e-30f, -1e-30f, 0.34657359f, -0.34657359f};
  for (int i = -300; i <= 300; ++i) x.push_back(static_cast<float>(i) * 0.6931472f);  // n ln2
  std::vector<float> y(x.size());
  detail::exp_floats(y.data(), x.data(), static_cast<index_t>(x.size()));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], inf);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[17], 0.0f);
  EXPECT_EQ(y[18], 1.0f);
  expect_close(x);
}

TEST(VectorExp, TailMatchesBody) {
  // the same value gives the same result wherever it sits (the tail runs the same kernel)
  std::vector<float> x(13, 0.123456f), y(13);
  detail::exp_floats(y.data(), x.data(), 13);
  for (float v : y) EXPECT_EQ(v, y[0]);
}
