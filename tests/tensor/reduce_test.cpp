// Reductions: every summation algorithm against an exact reference, within its bound from
// Higham (2002), ch. 4, in the accumulator's unit roundoff.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "support.hpp"

using namespace precis;
using namespace tensor_test;

namespace {

template <class S>
class Reduce : public ::testing::Test {};
TYPED_TEST_SUITE(Reduce, StorageFormats);

int ceil_log2(long n) {
  int k = 0;
  while ((1L << k) < n) ++k;
  return k;
}

/// The deterministic bound on |computed - exact| / sum|x_i| for n terms in Acc.
/// Negative when the bound does not exist (n u >= 1).
template <class Acc>
exact_t sum_bound(summation alg, long n) {
  const exact_t u = exact_t(unit_roundoff<Acc>());
  const long k = alg == summation::recursive ? n - 1 : ceil_log2(n);
  if (alg != summation::compensated && exact_t(k) * u >= 1) return -1;
  switch (alg) {
    case summation::recursive:
    case summation::pairwise: return gamma<Acc>(k);
    case summation::compensated:
      // Kahan: 2u + O(n u^2) (Higham eq. 4.8); the O-term taken with constant 4
      return 2 * u + 4 * exact_t(n) * u * u;
  }
  return 0;
}

/// Whether v exceeds T's largest finite value. A multiprecision T has none these sums can reach
/// (and converting its maximum to exact_t trips a signed overflow inside Boost.Multiprecision's
/// exponent arithmetic under UBSan).
template <class T>
bool above_max(const exact_t& v) {
  if constexpr (std::numeric_limits<T>::max_exponent <= std::numeric_limits<double>::max_exponent) {
    return v > exact_t(format_traits<T>::max_finite());
  } else {
    return false;
  }
}

template <class S, class Acc>
void check_sums(long n, double lo, double hi, std::uint64_t seed) {
  const auto x = random_tensor<S>({static_cast<index_t>(n)}, lo, hi, seed);
  exact_t exact = 0, abs_sum = 0;
  for (const S& v : x) {
    exact += to_exact(v);
    abs_sum += abs(to_exact(v));
  }
  // the bound also holds through saturation only if no partial sum can overflow
  if (above_max<Acc>(abs_sum * 2)) return;
  for (summation alg : {summation::recursive, summation::pairwise, summation::compensated}) {
    exact_t bound = sum_bound<Acc>(alg, n);
    if (bound < 0) continue;
    if (!detail::converts_exactly<S, Acc>()) {
      // inputs wider than Acc are rounded on load: one more factor (1 + delta) per term
      const exact_t u = exact_t(unit_roundoff<Acc>());
      bound = bound + u * (1 + bound);
    }
    const Acc got = sum<Acc, Acc>(x, alg)();
    const exact_t err = abs(to_exact(got) - exact);
    EXPECT_LE(err, bound * abs_sum)
        << "n=" << n << " " << to_string(alg) << " Acc=" << format_traits<Acc>::name
        << " S=" << format_traits<S>::name << ": got " << to_exact(got) << ", exact " << exact;
    // the same sum rounded into the storage format: one more rounding of the result
    if (above_max<S>(abs(exact))) continue;  // saturates in S
    const S stored = sum<Acc>(x, alg)();
    const exact_t err_s = abs(to_exact(stored) - exact);
    EXPECT_LE(err_s, bound * abs_sum * (1 + exact_t(unit_roundoff<S>())) +
                         exact_t(unit_roundoff<S>()) * abs(exact) +
                         exact_t(format_traits<S>::min_subnormal()));
  }
}

}  // namespace

TYPED_TEST(Reduce, SumsWithinTheirBounds) {
  using S = TypeParam;
  for (long n : {1L, 7L, 8L, 100L, 4097L}) {
    check_sums<S, float>(n, 0.0, 1.0, static_cast<std::uint64_t>(n));
    check_sums<S, float>(n, -1.0, 1.0, static_cast<std::uint64_t>(n) + 1);
    check_sums<S, double>(n, -1.0, 1.0, static_cast<std::uint64_t>(n) + 2);
    check_sums<S, mp50>(n, -1.0, 1.0, static_cast<std::uint64_t>(n) + 3);
    if constexpr (!std::is_same_v<S, mp50>) {
      // accumulating in the storage format itself (half sums in half, ...)
      check_sums<S, S>(n, 0.0, 1.0, static_cast<std::uint64_t>(n) + 4);
    }
  }
}

TEST(ReduceAlgorithms, DifferOnlyWhereTheBoundsSay) {
  // 2^14 ones plus a 2^-11 tail in half: recursive half accumulation stagnates at 2048,
  // pairwise and Kahan do not; a float accumulator is exact.
  Tensor<half> x({1 << 14});
  for (half& v : x) v = half(1.0f);
  EXPECT_EQ(static_cast<float>((sum<half, half>(x, summation::recursive)())), 2048.0f);
  EXPECT_EQ(static_cast<float>((sum<half, half>(x, summation::pairwise)())), 16384.0f);
  EXPECT_EQ(static_cast<float>((sum<half, half>(x, summation::compensated)())), 16384.0f);
  EXPECT_EQ((sum<float, float>(x, summation::recursive)()), 16384.0f);
}

TYPED_TEST(Reduce, AxisReductionsOnStridedViews) {
  using S = TypeParam;
  const auto t = random_tensor<S>({6, 33, 5}, -1.0, 1.0, 21);
  const auto tv = t.permute({2, 0, 1});  // [5, 6, 33], strided
  for (int axis = 0; axis < 3; ++axis) {
    using Acc = std::conditional_t<std::is_same_v<S, mp50>, mp50, double>;
    const auto r = sum<Acc, Acc>(tv, axis, summation::pairwise);
    const auto mx = max(tv, axis);
    const auto mn = min(tv, axis);
    Shape rs = tv.shape().erased(axis);
    ASSERT_EQ(r.shape(), rs);
    const long n = tv.shape()[axis];
    for (index_t i = 0; i < rs[0]; ++i)
      for (index_t j = 0; j < rs[1]; ++j) {
        exact_t exact = 0, abs_sum = 0, hi = -1e9, lo = 1e9;
        for (index_t k = 0; k < n; ++k) {
          const S& v = axis == 0 ? tv(k, i, j) : axis == 1 ? tv(i, k, j) : tv(i, j, k);
          const exact_t e = to_exact(v);
          exact += e;
          abs_sum += abs(e);
          hi = e > hi ? e : hi;
          lo = e < lo ? e : lo;
        }
        EXPECT_LE(abs(to_exact(r(i, j)) - exact), sum_bound<Acc>(summation::pairwise, n) * abs_sum);
        EXPECT_EQ(to_exact(mx(i, j)), hi);
        EXPECT_EQ(to_exact(mn(i, j)), lo);
      }
  }
  EXPECT_THROW(sum<float>(t, 3), shape_error);
  EXPECT_THROW(sum<float>(t, -4), shape_error);
  EXPECT_NO_THROW(sum<float>(t, -1));
  EXPECT_THROW(sum<float>(Tensor<S>({0, 3}), 0), shape_error);
}

TYPED_TEST(Reduce, MeanNormLogsumexpSoftmax) {
  using S = TypeParam;
  using C = default_compute_t<S>;
  const long n = 257;
  const auto x = random_tensor<S>({3, n}, -5.0, 5.0, 31);
  const exact_t uc = exact_t(unit_roundoff<C>()), us = exact_t(unit_roundoff<S>());
  const exact_t g = gamma<C>(ceil_log2(n) + 2);
  const auto m = mean<C>(x, 1);
  const auto nrm = norm2<C>(x, 1);
  const auto lse = logsumexp<C>(x, 1);
  const auto sm = softmax<C>(x, 1);
  const auto lsm = log_softmax<C>(x, 1);
  for (index_t i = 0; i < 3; ++i) {
    std::vector<exact_t> v;
    exact_t s = 0, abs_sum = 0, ssq = 0, mx = -100;
    for (index_t k = 0; k < n; ++k) {
      v.push_back(to_exact(x(i, k)));
      s += v.back();
      abs_sum += abs(v.back());
      ssq += v.back() * v.back();
      mx = v.back() > mx ? v.back() : mx;
    }
    // mean: the sum's bound, one division, one rounding into S
    EXPECT_LE(abs(to_exact(m(i)) - s / n), (g * abs_sum / n) + us * abs(s / n) + exact_t(format_traits<S>::min_subnormal()));
    // norm: squares and pairwise sum (all positive), sqrt, exact power-of-two scaling
    const exact_t norm_ref = sqrt(ssq);
    EXPECT_LE(abs(to_exact(nrm(i)) - norm_ref), (g + us) * norm_ref);
    // logsumexp: x - m is off by u|x - m| <= 10u, so each exp by ~12u; then the sum, the log
    exact_t es = 0;
    for (const auto& e : v) es += exp(e - mx);
    const exact_t lse_ref = mx + log(es);
    const exact_t lse_tol = (g + 15 * uc) * (1 + abs(lse_ref)) + us * abs(lse_ref);
    EXPECT_LE(abs(to_exact(lse(i)) - lse_ref), lse_tol);
    exact_t total = 0;
    for (index_t k = 0; k < n; ++k) {
      const exact_t p_ref = exp(v[static_cast<std::size_t>(k)] - lse_ref);
      EXPECT_LE(abs(to_exact(sm(i, k)) - p_ref), (g + 15 * uc + us) * p_ref * (1 + abs(lse_ref)) +
                                                    exact_t(format_traits<S>::min_subnormal()));
      EXPECT_LE(abs(to_exact(lsm(i, k)) - (v[static_cast<std::size_t>(k)] - lse_ref)),
                (g + 15 * uc) * (1 + abs(lse_ref)) + us * abs(v[static_cast<std::size_t>(k)] - lse_ref));
      total += to_exact(sm(i, k));
    }
    EXPECT_LE(abs(total - 1), (g + 15 * uc + us) * (1 + abs(lse_ref)) + n * exact_t(format_traits<S>::min_subnormal()));
  }
}

TEST(ReduceSpecial, NaNInfAndScaling) {
  Tensor<float> x({4});
  x(0) = 1e30f;
  x(1) = 1e30f;
  x(2) = -1e30f;
  x(3) = 2e30f;
  // squares overflow float; the scaled norm does not
  EXPECT_NEAR(norm2<float>(x)(), std::sqrt(7.0) * 1e30, 7 * 1e30 * std::ldexp(1.0, -22));
  Tensor<float> tiny({3});
  for (float& v : tiny) v = 1e-30f;  // squares underflow float
  EXPECT_NEAR(norm2<float>(tiny)(), std::sqrt(3.0) * 1e-30, 1e-30 * std::ldexp(1.0, -21));
  x(2) = std::nanf("");
  EXPECT_TRUE(std::isnan(max(x)()));
  EXPECT_TRUE(std::isnan(min(x)()));
  EXPECT_TRUE(std::isnan(norm2<float>(x)()));
  Tensor<float> ninf({2});
  ninf(0) = ninf(1) = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(logsumexp<float>(ninf, 0)(), -std::numeric_limits<float>::infinity());
  Tensor<float> big({2});
  big(0) = 1000.0f;
  big(1) = 1000.0f;  // exp would overflow without the max shift
  EXPECT_NEAR(logsumexp<float>(big, 0)(), 1000.0f + std::log(2.0f), 1000 * std::ldexp(1.0f, -22));
  EXPECT_NEAR(softmax<float>(big, 0)(0), 0.5f, std::ldexp(1.0f, -22));
}

// Pairwise float sums take their blocks of eight 64 values at a time in AVX2 lanes where the CPU
// has them: the same bits as pushing the values one by one (the definition), for lengths that
// leave every kind of remainder, a summer that starts mid-block, and values of very different
// magnitudes (so that another tree would round otherwise).
TEST(ReduceSpecial, PairwiseFloatBlocksInLanesAreTheOneByOneTree) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int n : {1, 8, 63, 64, 65, 72, 128, 136, 200, 1000, 4097}) {
    for (const int start : {0, 3, 8}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> x(static_cast<std::size_t>(n + start));
        for (float& v : x) v = std::ldexp(u(rng), static_cast<int>(rng() % 40) - 20);
        detail::pairwise_sum<float> bulk, one;
        for (int i = 0; i < start; ++i) {
          bulk.push(x[static_cast<std::size_t>(i)]);
          one.push(x[static_cast<std::size_t>(i)]);
        }
        detail::push_all(bulk, x.data() + start, n);
        for (int i = start; i < n + start; ++i) one.push(x[static_cast<std::size_t>(i)]);
        const float a = bulk.result(), b = one.result();
        ASSERT_EQ(std::bit_cast<std::uint32_t>(a), std::bit_cast<std::uint32_t>(b)) << "n " << n << ", start " << start;
      }
    }
  }
}
