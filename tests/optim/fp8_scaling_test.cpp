// Scaled fp8: the delayed-scaling rule of NVIDIA Transformer Engine on a scripted amax sequence,
// current scaling, the cast's error and telemetry, and the state's validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <precis/fp8/scaling.hpp>
#include <precis/precis.hpp>

using namespace precis;
using fp8::amax_reduction;
using fp8::delayed_scaler;
using fp8::delayed_scaling;

namespace {

std::vector<float> history_of(const delayed_scaler<float8_e4m3>& s) {
  return {s.amax_history().begin(), s.amax_history().end()};
}

}  // namespace

// The rule, as Transformer Engine documents it for nvte_delayed_scaling_recipe_amax_and_scale_update
// (transformer_engine/common/include/transformer_engine/recipe.h): the amax is the max of the
// history (amax_compute_algo "max") or its first entry ("most_recent"); the scale makes that
// amax 2^-margin times the fp8 maximum, scale = fp8_max / amax / 2^margin, the previous scale
// being kept when amax is 0 or not finite; then the history "is rotated by -1 (the first entry
// shifts to the last, the last entry shifts to the second to last) and the first entry is set to
// zero". Each step's amax goes into entry 0 before the update. Expected values worked by hand
// below, e4m3 (max 448), history length 3.
TEST(Fp8DelayedScaling, FollowsTransformerEngineRule) {
  delayed_scaler<float8_e4m3> s(delayed_scaling{3, amax_reduction::max, 0});
  EXPECT_EQ(s.scale(), 1.0f);
  // step 1: amax 1 -> history [1, 0, 0], amax 1, scale 448; rotated [0, 0, 1], entry 0 zeroed
  s.record(1.0f);
  s.update();
  EXPECT_EQ(s.scale(), 448.0f);
  EXPECT_EQ(history_of(s), (std::vector<float>{0, 0, 1}));
  // step 2: amax 4 (two casts, 3 and -4: the larger is kept) -> [4, 0, 1], scale 112; [0, 1, 4]
  s.record(3.0f);
  s.record(-4.0f);
  s.update();
  EXPECT_EQ(s.scale(), 112.0f);
  EXPECT_EQ(history_of(s), (std::vector<float>{0, 1, 4}));
  // step 3: amax 2 -> [2, 1, 4], max 4, scale 112; [1, 4, 2] with entry 0 zeroed: step 1 leaves
  s.record(2.0f);
  s.update();
  EXPECT_EQ(s.scale(), 112.0f);
  EXPECT_EQ(history_of(s), (std::vector<float>{0, 4, 2}));
  // step 4: amax 0.5 -> [0.5, 4, 2], still 4 in the window: scale 112; [0, 2, 0.5]
  s.record(0.5f);
  s.update();
  EXPECT_EQ(s.scale(), 112.0f);
  EXPECT_EQ(history_of(s), (std::vector<float>{0, 2, 0.5f}));
  // step 5: amax 0.25 -> [0.25, 2, 0.5]: the 4 has left the window, scale 448 / 2 = 224
  s.record(0.25f);
  s.update();
  EXPECT_EQ(s.scale(), 224.0f);
  // steps 6 and 7 record nothing (amax 0): 6 still sees 0.5 and 0.25 (scale 896), 7 only 0.25
  s.update();
  EXPECT_EQ(s.scale(), 896.0f);
  s.update();
  EXPECT_EQ(s.scale(), 1792.0f);
  // step 8: the window is all zeros: the scale is kept
  s.update();
  EXPECT_EQ(s.scale(), 1792.0f);
  // a non-finite amax keeps the scale while it is in the window
  s.record(std::numeric_limits<float>::infinity());
  s.update();
  EXPECT_EQ(s.scale(), 1792.0f);
  s.record(std::numeric_limits<float>::quiet_NaN());
  s.update();
  EXPECT_EQ(s.scale(), 1792.0f);
}

TEST(Fp8DelayedScaling, MostRecentMarginAndE5m2) {
  delayed_scaler<float8_e5m2> s(delayed_scaling{16, amax_reduction::most_recent, 1});
  s.record(8.0f);
  s.update();
  EXPECT_EQ(s.scale(), 57344.0f / 8.0f / 2.0f);
  s.record(2.0f);  // most_recent ignores the 8 still in the window
  s.update();
  EXPECT_EQ(s.scale(), 57344.0f / 2.0f / 2.0f);
  // an amax so small that the quotient overflows fp32: the largest float
  s.record(std::ldexp(1.0f, -140));
  s.update();
  EXPECT_EQ(s.scale(), std::numeric_limits<float>::max());
  // Transformer Engine's defaults
  const delayed_scaling d;
  EXPECT_EQ(d.history_len, 1024u);
  EXPECT_EQ(d.reduce, amax_reduction::max);
  EXPECT_EQ(d.margin, 0);
}

// Current scaling with powers of two: the scale is the largest power of two r with
// r <= fp8_max / amax / 2^margin, checked exactly (r amax 2^margin is exact in double) over
// amaxes across the float range, including those whose quotient lies just below or at a power
// of two.
TEST(Fp8Scale, PowerOfTwoIsTheLargestNotAbove) {
  std::vector<float> amaxes;
  for (int k = -20; k <= 20; ++k) {
    const float at = 448.0f * std::ldexp(1.0f, -k);  // quotient exactly 2^k
    amaxes.push_back(at);
    amaxes.push_back(std::nextafter(at, 0.0f));  // quotient just above 2^k
    amaxes.push_back(std::nextafter(at, 1e30f));  // just below
  }
  std::uint32_t state = 12345;
  for (int i = 0; i < 10000; ++i) {  // log-uniform over [2^-60, 2^60)
    state = state * 1664525u + 1013904223u;
    amaxes.push_back(std::ldexp(1.0f + static_cast<float>(state >> 9) * 0x1p-23f, static_cast<int>(state % 120) - 60));
  }
  int bad = 0;
  for (const int margin : {0, 3}) {
    for (const float a : amaxes) {
      const float r = fp8::scale_for<float8_e4m3>(a, margin, 1.0f, true);
      int e = 0;
      const bool power = std::frexp(static_cast<double>(r), &e) == 0.5;
      const double lhs = static_cast<double>(r) * static_cast<double>(a) * std::ldexp(1.0, margin);  // exact
      bad += !(power && lhs <= 448.0 && 448.0 < 2.0 * lhs);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Fp8DelayedScaling, RestoreIsAllOrNothing) {
  delayed_scaler<float8_e4m3> s(delayed_scaling{3, amax_reduction::max, 0});
  s.record(2.0f);
  s.update();
  const std::vector<float> h = history_of(s);
  const float scale = s.scale();
  EXPECT_THROW(s.restore(std::vector<float>{1, 2}, 4.0f), invalid_argument);          // wrong length
  EXPECT_THROW(s.restore(std::vector<float>{1, -2, 3}, 4.0f), invalid_argument);      // negative amax
  EXPECT_THROW(s.restore(std::vector<float>{1, 2, 3}, 0.0f), invalid_argument);       // scale 0
  EXPECT_THROW(s.restore(std::vector<float>{1, 2, 3}, INFINITY), invalid_argument);   // scale inf
  EXPECT_EQ(history_of(s), h);
  EXPECT_EQ(s.scale(), scale);
  s.restore(std::vector<float>{0, 5, 6}, 3.0f);
  EXPECT_EQ(history_of(s), (std::vector<float>{0, 5, 6}));
  EXPECT_EQ(s.scale(), 3.0f);
  EXPECT_THROW(delayed_scaler<float8_e4m3>(delayed_scaling{0}), invalid_argument);
}

TEST(Fp8Quantize, ScalingRecoversWhatSaturatesUnscaled) {
  // 1000 in e4m3 without a scale saturates to 448; with current scaling it comes back to
  // within e4m3's rounding (relative error at most u = 2^-4)
  EXPECT_EQ(static_cast<float>(round_to<float8_e4m3>(1000.0f, rounding::nearest_even, overflow::saturate)), 448.0f);
  Tensor<float> x({2, 3});
  const float vals[] = {1000.0f, -3.5f, 0.01f, 250.0f, -999.0f, 7.0f};
  for (int i = 0; i < 6; ++i) x.data()[i] = vals[i];
  fp8::cast_stats st;
  const auto q = fp8::quantize<float8_e4m3>(x, fp8::current_scaling{}, &st);
  EXPECT_EQ(q.scale, 448.0f / 1000.0f);
  EXPECT_EQ(st.amax, 1000.0f);
  EXPECT_EQ(st.count, 6u);
  EXPECT_EQ(st.saturated, 0u);
  EXPECT_EQ(st.flushed, 0u);
  const auto back = q.dequantize();
  const double u = format_traits<float8_e4m3>::unit_roundoff();
  for (int i = 0; i < 6; ++i) {
    // x * scale is a normal e4m3 value (>= 2^-6) for all but 0.01 * 0.448 = 0.00448, whose
    // spacing is the subnormal 2^-9: absolute error at most 2^-10 before dividing by the scale;
    // the fp32 multiplication and division add at most two fp32 roundings
    const double xs = static_cast<double>(vals[i]) * q.scale;
    const double bound = std::fabs(xs) >= std::ldexp(1.0, -6) ? u * std::fabs(xs) : std::ldexp(1.0, -10);
    EXPECT_LE(std::fabs(static_cast<double>(back.data()[i]) - vals[i]), (bound / q.scale) * (1 + 3 * format_traits<float>::unit_roundoff()))
        << vals[i];
  }
  // a product of scaled values: 1000 * 2 = 2000 within e4m3 rounding of both inputs
  Tensor<float> w({1, 1}), v({1, 1});
  w.data()[0] = 1000.0f;
  v.data()[0] = 2.0f;
  const auto qw = fp8::quantize<float8_e4m3>(w, fp8::current_scaling{});
  const auto qv = fp8::quantize<float8_e4m3>(v, fp8::current_scaling{});
  const float prod = qw.dequantize().data()[0] * qv.dequantize().data()[0];
  EXPECT_NEAR(prod, 2000.0f, 2000.0 * (2 * u + u * u));
  // power-of-two scaling: the largest power of two not above 448 / 1000
  EXPECT_EQ(fp8::quantize<float8_e4m3>(x, fp8::current_scaling{0, true}).scale, 0.25f);
}

TEST(Fp8Quantize, TelemetryCountsSaturatedAndFlushed) {
  Tensor<float> x({6});
  const float vals[] = {100.0f, -600.0f, 1e-3f, 0.0f, -2e-4f, INFINITY};
  for (int i = 0; i < 6; ++i) x.data()[i] = vals[i];
  fp8::cast_stats st;
  // scale 1: -600 and inf saturate (to -448 and 448: rounding to nearest overflows from 464);
  // 2e-4 is below half of e4m3's smallest subnormal 2^-9 (that half is 2^-10, about 9.8e-4)
  // and flushes; 1e-3 is above it and rounds to 2^-9
  const auto q = fp8::quantize<float8_e4m3>(x, 1.0f, &st);
  EXPECT_EQ(st.saturated, 2u);
  EXPECT_EQ(st.flushed, 1u);
  EXPECT_EQ(st.count, 6u);
  EXPECT_EQ(st.amax, INFINITY);
  EXPECT_EQ(static_cast<float>(q.data.data()[1]), -448.0f);
  EXPECT_EQ(static_cast<float>(q.data.data()[5]), 448.0f);
  EXPECT_EQ(static_cast<float>(q.data.data()[2]), std::ldexp(1.0f, -9));
  EXPECT_NEAR(st.saturated_fraction(), 2.0 / 6.0, 1e-15);
  EXPECT_THROW(fp8::quantize<float8_e4m3>(x, 0.0f), invalid_argument);
  EXPECT_THROW(fp8::quantize<float8_e4m3>(x, NAN), invalid_argument);
}

TEST(Fp8Quantize, BlocksKeepWhatOneScaleFlushes) {
  // a row whose first block of 128 holds an outlier of 1000 and whose second block holds values
  // of 0.001: one scale for the tensor (448 / 1000) maps 0.001 to 4.48e-4, below half of e4m3's
  // smallest subnormal (2^-10): all 128 flush. One scale per block of 128 maps the second block's
  // amax 0.001 to 448 exactly, and the values come back within e4m3's rounding.
  Tensor<float> x({1, 256});
  for (index_t j = 0; j < 256; ++j) x(0, j) = j == 0 ? 1000.0f : (j < 128 ? 1.0f : 0.001f);
  fp8::cast_stats one, blocks;
  (void)fp8::quantize<float8_e4m3>(x, fp8::current_scaling{}, &one);
  EXPECT_EQ(one.flushed, 128u);
  const auto q = fp8::quantize_blocks<float8_e4m3>(x, 128, fp8::current_scaling{}, &blocks);
  EXPECT_EQ(blocks.flushed, 0u);
  EXPECT_EQ(blocks.amax, 1000.0f);
  ASSERT_EQ(q.scales.shape(), Shape({1, 2}));
  EXPECT_EQ(q.scales(0, 0), 448.0f / 1000.0f);
  EXPECT_EQ(q.scales(0, 1), 448.0f / 0.001f);
  const auto back = q.dequantize();
  const double u = format_traits<float8_e4m3>::unit_roundoff();
  for (index_t j = 0; j < 256; ++j) {
    EXPECT_LE(std::fabs(static_cast<double>(back(0, j)) - x(0, j)), (u + 3 * format_traits<float>::unit_roundoff()) * x(0, j)) << j;
  }
  // a ragged last block, and the errors
  Tensor<float> r({2, 130});
  fill_uniform(r, -5, 5, 9);
  const auto qr = fp8::quantize_blocks<float8_e4m3>(r, 128);
  EXPECT_EQ(qr.scales.shape(), Shape({2, 2}));
  EXPECT_THROW(fp8::quantize_blocks<float8_e4m3>(Tensor<float>({4}), 128), invalid_argument);
  EXPECT_THROW(fp8::quantize_blocks<float8_e4m3>(r, 0), invalid_argument);
}

namespace {

/// cast_element (what the device's casts compute per element) against quantize_into (the host's
/// vectorized cast) on every bf16 value widened to fp32 (zeros, subnormals, infinities, NaNs)
/// and random fp32 patterns, under scales that are powers of two, others from scale_for, and 1:
/// the same bits for every element, and the same saturated and flushed counts.
template <class F8>
void element_cast_is_the_host_cast() {
  std::vector<float> x;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) x.push_back(std::bit_cast<float>(b << 16));
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 0x10000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(state >> 32)));
  }
  std::vector<float> scales = {1.0f, fp8::scale_for<F8>(3.3f, 0, 1.0f), fp8::scale_for<F8>(1e-3f, 1, 1.0f),
                               fp8::scale_for<F8>(7e5f, 0, 1.0f), 0.7f};
  for (int e = -40; e <= 40; e += 5) scales.push_back(std::ldexp(1.0f, e));
  const float overflow_at = fp8::overflow_threshold<F8>();
  std::vector<F8> out(x.size());
  for (const float scale : scales) {
    const fp8::cast_stats st = fp8::quantize_into<F8>(x.data(), x.size(), scale, out.data());
    std::size_t sat = 0, flush = 0, bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const auto c = fp8::detail::cast_element<F8>(x[i], scale, overflow_at);
      sat += c.saturated;
      flush += c.flushed;
      if (c.bits != out[i].bits() && bad++ < 5) {
        ADD_FAILURE() << format_traits<F8>::name << " scale " << scale << ": x = " << x[i] << " casts to bits "
                      << int(c.bits) << ", the host's cast to " << int(out[i].bits());
      }
    }
    EXPECT_EQ(bad, 0u) << format_traits<F8>::name << " scale " << scale;
    EXPECT_EQ(sat, st.saturated) << format_traits<F8>::name << " scale " << scale;
    EXPECT_EQ(flush, st.flushed) << format_traits<F8>::name << " scale " << scale;
    EXPECT_GT(st.saturated, 0u);  // the data reach both ends of the format under every scale
    EXPECT_GT(st.flushed, 0u);
  }
}

}  // namespace

TEST(Fp8Quantize, ElementCastIsTheHostCast) {
  element_cast_is_the_host_cast<float8_e4m3>();
  element_cast_is_the_host_cast<float8_e5m2>();
}

// amax_key (the device's amax: integer maxima of |x|'s bits) gives amax_of's value, a NaN
// wherever the data hold one (of either sign), on data with signed zeros, subnormals and
// infinities.
TEST(Fp8Quantize, AmaxKeysGiveTheAmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> cases = {
      {0.0f, -0.0f},
      {-0.0f, 1e-45f, -3e-39f},
      {1.0f, -2.5f, 2.0f},
      {-inf, 3.0f},
      {5.0f, -nan, 1e30f},
      {nan, inf, -inf},
      {-7.0f, 6.5f, std::ldexp(1.0f, 127), -std::ldexp(1.5f, 127)},
  };
  for (const auto& v : cases) {
    std::uint32_t key = 0;
    for (const float f : v) key = std::max(key, fp8::detail::amax_key(f));
    const float from_keys = std::bit_cast<float>(key);
    const float host = fp8::detail::amax_of(v.data(), v.size());
    if (std::isnan(host)) {
      EXPECT_TRUE(std::isnan(from_keys)) << v.size();
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(from_keys), std::bit_cast<std::uint32_t>(host)) << host;
    }
  }
}
