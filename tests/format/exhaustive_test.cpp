// Every one of the 2^32 float bit patterns converted to fp16 and to bf16 with nearest-even,
// by round_to (scalar), by convert (the SIMD kernels where the CPU has them) and by the portable
// vectors every other CPU takes (float_to_half_nearest_portable, ...), against the
// independent reference: positive floats in bit order are increasing, so one walk through
// the target's sorted value table finds each float's neighbours; the nearer one wins, ties
// go to the even bit pattern; past the overflow midpoint the result is infinity.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace {

using namespace fmt_test;

template <class T>
struct result_counts {
  std::atomic<std::uint64_t> bad_scalar{0}, bad_bulk{0}, bad_portable{0}, checked{0};
};

/// The portable vectors' rounding of n floats to T's bit patterns.
template <class T>
void portable_narrow(const float* src, std::uint16_t* dst, std::size_t n) {
  if constexpr (std::is_same_v<T, precis::half>) {
    precis::detail::float_to_half_nearest_portable(src, dst, n);
  } else {
    precis::detail::float_to_bf16_nearest_portable(src, dst, n);
  }
}

/// Checks float patterns [first, last) (all non-negative, non-NaN, in increasing order) and
/// their negatives.
template <class T>
void walk(const ref::value_table& t, std::uint32_t first, std::uint64_t last, result_counts<T>& out) {
  constexpr std::size_t chunk = 1 << 16;
  std::vector<float> pos(chunk), neg(chunk);
  std::vector<T> bulk_pos(chunk), bulk_neg(chunk);
  std::vector<std::uint16_t> port_pos(chunk), port_neg(chunk);
  const std::uint64_t sign = t.f.sign_bit();
  std::uint64_t idx = ref::lower_index(t, static_cast<double>(std::bit_cast<float>(first)));
  std::uint64_t bad_s = 0, bad_b = 0, bad_p = 0, n_checked = 0;
  for (std::uint64_t b0 = first; b0 < last; b0 += chunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, last - b0));
    for (std::size_t i = 0; i < n; ++i) {
      pos[i] = std::bit_cast<float>(static_cast<std::uint32_t>(b0 + i));
      neg[i] = -pos[i];
    }
    precis::convert(std::span<const float>(pos.data(), n), std::span<T>(bulk_pos.data(), n));
    precis::convert(std::span<const float>(neg.data(), n), std::span<T>(bulk_neg.data(), n));
    portable_narrow<T>(pos.data(), port_pos.data(), n);
    portable_narrow<T>(neg.data(), port_neg.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(pos[i]);
      std::uint64_t want;
      if (x >= t.values.back()) {
        want = t.f.inf_bits();
      } else {
        while (t.values[idx + 1] <= x) ++idx;
        const double dlo = x - t.values[idx], dhi = t.values[idx + 1] - x;
        const std::uint64_t pick = dlo < dhi ? idx : dhi < dlo ? idx + 1 : (idx % 2 == 0 ? idx : idx + 1);
        want = pick == t.overflow_index() ? t.f.inf_bits() : pick;
      }
      const std::uint64_t sp = bits_of(precis::round_to<T>(pos[i]));
      const std::uint64_t sn = bits_of(precis::round_to<T>(neg[i]));
      bad_s += std::uint64_t{sp != want} + std::uint64_t{sn != (want | sign)};
      bad_b += std::uint64_t{bits_of(bulk_pos[i]) != want} + std::uint64_t{bits_of(bulk_neg[i]) != (want | sign)};
      bad_p += std::uint64_t{port_pos[i] != want} + std::uint64_t{port_neg[i] != (want | sign)};
      if (bad_s + bad_b + bad_p > 0 && bad_s + bad_b + bad_p <= 4 &&
          (sp != want || bits_of(bulk_pos[i]) != want || port_pos[i] != want || port_neg[i] != (want | sign))) {
        ADD_FAILURE() << "x = " << std::hexfloat << x << " want 0x" << std::hex << want << " scalar 0x" << sp << " bulk 0x"
                      << bits_of(bulk_pos[i]) << " portable 0x" << port_pos[i] << " (of -x: 0x" << port_neg[i] << ")";
      }
    }
    n_checked += 2 * n;
  }
  out.bad_scalar += bad_s;
  out.bad_bulk += bad_b;
  out.bad_portable += bad_p;
  out.checked += n_checked;
}

/// NaN patterns: a quiet NaN with the sign and the leading payload bits.
template <class T>
void check_nans(int mant_bits, std::uint64_t sign_bit, std::uint64_t quiet_nan, result_counts<T>& out) {
  constexpr std::size_t chunk = 1 << 16;
  std::vector<float> src(chunk);
  std::vector<T> bulk(chunk);
  std::vector<std::uint16_t> port(chunk);
  std::uint64_t bad = 0, bad_p = 0, n_checked = 0;
  for (std::uint32_t s : {0u, 0x80000000u}) {
    for (std::uint64_t b0 = 0x7f800001u; b0 <= 0x7fffffffu; b0 += chunk) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, 0x80000000u - b0));
      for (std::size_t i = 0; i < n; ++i) src[i] = std::bit_cast<float>(static_cast<std::uint32_t>(b0 + i) | s);
      precis::convert(std::span<const float>(src.data(), n), std::span<T>(bulk.data(), n));
      portable_narrow<T>(src.data(), port.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t m = (b0 + i) & 0x3fffff;  // payload below the quiet bit
        const std::uint64_t want = (s ? sign_bit : 0) | quiet_nan | (m >> (23 - mant_bits));
        bad += std::uint64_t{bits_of(precis::round_to<T>(src[i])) != want} + std::uint64_t{bits_of(bulk[i]) != want};
        bad_p += std::uint64_t{port[i] != want};
      }
      n_checked += n;
    }
  }
  out.bad_scalar += bad;
  out.bad_portable += bad_p;
  out.checked += n_checked;
}

template <class T>
void check_every_float() {
  const ref::value_table t(spec<T>::f);
  result_counts<T> counts;
  const std::uint64_t end = 0x7f800001u;  // +0 .. +inf inclusive
  const std::uint32_t mid = 0x3f800000u;
  std::thread a([&] { walk<T>(t, 0, mid, counts); });
  std::thread b([&] { walk<T>(t, mid, end, counts); });
  a.join();
  b.join();
  check_nans<T>(t.f.M, t.f.sign_bit(), t.f.inf_bits() | (std::uint64_t{1} << (t.f.M - 1)), counts);
  EXPECT_EQ(counts.checked.load(), std::uint64_t{1} << 32) << "every pattern visited once";
  EXPECT_EQ(counts.bad_scalar.load(), 0u);
  EXPECT_EQ(counts.bad_bulk.load(), 0u);
  EXPECT_EQ(counts.bad_portable.load(), 0u);
}

// 10^7 random source patterns per format (half float, half double; half uniformly random
// bits, half spread over the format's exponent range) in every mode and overflow choice.
template <class T>
class RandomPatterns : public ::testing::Test {};
TYPED_TEST_SUITE(RandomPatterns, SmallFormats);

TYPED_TEST(RandomPatterns, TenMillionAgainstReference) {
  const ref::value_table t(spec<TypeParam>::f);
  const auto fl = random_points<float>(t.f, 5'000'000, 21);
  const auto db = random_points<double>(t.f, 5'000'000, 22);
  std::thread other([&] { expect_matches_reference<TypeParam>(db, t, deterministic_modes()); });
  expect_matches_reference<TypeParam>(fl, t, deterministic_modes());
  other.join();
  // The bulk path on the same data.
  for (precis::rounding mode : deterministic_modes()) {
    for (precis::overflow ov : overflow_modes<TypeParam>()) {
      std::vector<TypeParam> bulk(fl.size());
      precis::convert(fl, bulk, mode, ov);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < fl.size(); ++i) {
        bad += bits_of(bulk[i]) != bits_of(precis::round_to<TypeParam>(fl[i], mode, ov));
      }
      EXPECT_EQ(bad, 0u) << precis::to_string(mode) << "/" << precis::to_string(ov);
    }
  }
}

TEST(Exhaustive, EveryFloatToHalfNearestEven) { check_every_float<precis::half>(); }
TEST(Exhaustive, EveryFloatToBfloat16NearestEven) { check_every_float<precis::bfloat16>(); }

}  // namespace
