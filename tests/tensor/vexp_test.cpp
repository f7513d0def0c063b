// The vectorized exp (detail/vexp.hpp) against double-precision exp, over random and
// structured inputs, with an error bound derived from the algorithm.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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

/// The kernels' operations on one float, written out with std::fma for their fused
/// multiply-adds (exp8_avx2 and exp4_neon compute exactly this in each lane).
float exp_model(float x) {
  if (std::isnan(x)) return x;
  const float xc = std::min(std::max(x, -104.0f), 89.0f);
  const float n = std::nearbyint(xc * 1.44269504088896341f);  // to nearest even
  float r = std::fma(-n, 0.693359375f, xc);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  for (const float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) p = std::fma(p, r, c);
  const int ni = static_cast<int>(n), n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
  return (p * s1) * s2;
}

}  // namespace

/// The vector kernels (AVX2 on x86-64, Advanced SIMD on aarch64) are one algorithm: each gives
/// the written-out model's bits, so a program's softmax is the same on both.
TEST(VectorExp, KernelsAreTheScalarModelBitForBit) {
#if PRECIS_X86_SIMD
  if (!detail::cpu_has_avx2_fma()) {
    GTEST_SKIP() << "no AVX2 and FMA here (or PRECIS_ISA caps them): exp_floats is the C library's expf";
  }
#elif !PRECIS_AARCH64_NEON
  GTEST_SKIP() << "no vector exp kernel on this target: exp_floats is the C library's expf";
#endif
  std::vector<float> x;
  xoshiro256pp gen(11);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(-110.0f + 205.0f * static_cast<float>(gen() >> 40) * 0x1p-24f);
  for (int i = 0; i < (1 << 16); ++i) {  // any bit pattern: tiny, huge, infinite, NaN with any payload
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen() >> 32)));
  }
  for (std::uint32_t b = 0x42b17000u; b < 0x42b18000u; ++b) x.push_back(std::bit_cast<float>(b));  // overflow threshold
  for (std::uint32_t b = 0xc2cf0000u; b < 0xc2d00000u; ++b) x.push_back(std::bit_cast<float>(b));  // -103.5 .. -104
  std::vector<float> y(x.size());
  detail::exp_floats(y.data(), x.data(), static_cast<index_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = exp_model(x[i]);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(want))
        << "exp(" << x[i] << " = 0x" << std::hex << std::bit_cast<std::uint32_t>(x[i]) << ") = " << y[i] << ", the model's "
        << want;
  }
}

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
