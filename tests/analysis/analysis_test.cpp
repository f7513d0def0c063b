// The analysis layer: bounds against hand-evaluated formulas, metrics and ulp distances against
// values derived from the formats' definitions, references against exact arithmetic, and cast
// statistics against the fp16 / e4m3 thresholds of their specifications.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>

using namespace precis;
namespace an = precis::analysis;

TEST(Bounds, MatchTheirFormulas) {
  const double u = std::ldexp(1.0, -11);  // fp16
  EXPECT_EQ(unit_roundoff<half>(), u);
  EXPECT_EQ(unit_roundoff<bfloat16>(), std::ldexp(1.0, -8));
  EXPECT_EQ(unit_roundoff<float8_e4m3>(), std::ldexp(1.0, -4));
  EXPECT_DOUBLE_EQ(bounds::gamma(10, u), 10 * u / (1 - 10 * u));
  EXPECT_EQ(bounds::gamma(2048, u), bounds::infinity);  // n u = 1: no bound
  EXPECT_DOUBLE_EQ(bounds::recursive_sum(100, u), 99 * u / (1 - 99 * u));
  EXPECT_DOUBLE_EQ(bounds::pairwise_sum(1000, u), 10 * u / (1 - 10 * u));  // ceil(log2 1000) = 10
  EXPECT_DOUBLE_EQ(bounds::pairwise_sum(1024, u), 10 * u / (1 - 10 * u));
  EXPECT_DOUBLE_EQ(bounds::pairwise_sum(1025, u), 11 * u / (1 - 11 * u));
  EXPECT_DOUBLE_EQ(bounds::compensated_sum(100, u), 2 * u + 400 * u * u);
  // probabilistic: lambda = 1, n = 100 -> exp(10u + 100u^2/(1-u)) - 1
  // (computed with expm1; exp(a) - 1 loses up to one ulp of exp(a) = 2^-52 to cancellation)
  EXPECT_NEAR(bounds::probabilistic(100, 1, u), std::exp(10 * u + 100 * u * u / (1 - u)) - 1,
              std::ldexp(1.0, -52));
  EXPECT_DOUBLE_EQ(bounds::probabilistic_confidence(2, u), 1 - 2 * std::exp(-2 * (1 - u) * (1 - u)));
  // the probabilistic bound grows like sqrt(n) u, far below gamma_n for large n
  EXPECT_LT(bounds::probabilistic(1e6, 3, std::ldexp(1.0, -24)), bounds::gamma(1e6, std::ldexp(1.0, -24)) / 100);
  // block FMA: b = 4, fp32 accumulation, fp16 inputs rounded from fp32
  const double uh = std::ldexp(1.0, -24);
  EXPECT_DOUBLE_EQ(bounds::block_fma(1000, 4, uh, u),
                   2 * u + u * u + (1 + u) * (1 + u) * (250 * uh / (1 - 250 * uh)));
  EXPECT_DOUBLE_EQ(bounds::block_fma(1001, 4, uh), 251 * uh / (1 - 251 * uh));
  EXPECT_DOUBLE_EQ(bounds::block_fma(64, 1, uh), bounds::gamma(64, uh));
}

TEST(Metrics, ErrorsAndNorms) {
  EXPECT_DOUBLE_EQ(an::abs_error(1.5f, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(an::rel_error(1.5f, 2.0), 0.25);
  EXPECT_EQ(an::rel_error(0.0, 0.0), 0.0);
  EXPECT_TRUE(std::isinf(an::rel_error(1.0, 0.0)));
  Tensor<double> exact({3}), computed({3});
  exact(0) = 3; exact(1) = 4; exact(2) = 0;
  computed(0) = 3; computed(1) = 4.5; computed(2) = 0;
  EXPECT_DOUBLE_EQ(an::normwise_error(computed, exact), 0.5 / 5);
  EXPECT_DOUBLE_EQ(an::normwise_error(computed, exact, an::norm::inf), 0.5 / 4);
  EXPECT_DOUBLE_EQ(an::componentwise_error(computed, exact), 0.125);
  EXPECT_THROW(an::normwise_error(computed, Tensor<double>({2})), shape_error);
}

TEST(Metrics, UlpDistanceFollowsTheFormatsValueLists) {
  EXPECT_EQ(an::ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)), 1);
  EXPECT_EQ(an::ulp_distance(1.0f, 2.0f), 1 << 23);  // one binade of float: 2^23 steps
  EXPECT_EQ(an::ulp_distance(0.0f, -0.0f), 0);
  const float ts = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(an::ulp_distance(-ts, ts), 2);  // -ts, 0, ts
  EXPECT_EQ(an::ulp_distance(half(1.0f), half(2.0f)), 1 << 10);
  EXPECT_EQ(an::ulp_distance(bfloat16(1.0f), bfloat16(-1.0f)), 2 * 127 * 128);  // 2 x (bits of 1.0)
  // e4m3: 0 .. 448 covers every nonnegative finite encoding (0x00..0x7E)
  EXPECT_EQ(an::ulp_distance(float8_e4m3(0.0f), float8_e4m3(448.0f)), 0x7E);
  EXPECT_EQ(an::ulp_distance(1.0, std::nextafter(1.0, 0.0)), 1);
  EXPECT_THROW(an::ulp_distance(std::nanf(""), 1.0f), invalid_argument);
}

TEST(Reference, ExactSumsDotsAndProducts) {
  // 1 + 2^-60 - 1 is 2^-60 exactly in the reference, 0 in double
  Tensor<double> x({3});
  x(0) = 1; x(1) = std::ldexp(1.0, -60); x(2) = -1;
  const auto [s, a] = an::reference_sum(x);
  EXPECT_EQ(s, an::exact_t(std::ldexp(1.0, -60)));
  EXPECT_EQ(a, an::exact_t(2) + an::exact_t(std::ldexp(1.0, -60)));
  const auto [d, da] = an::reference_dot(x, x);
  EXPECT_EQ(d, an::exact_t(2) + an::exact_t(std::ldexp(1.0, -120)));
  EXPECT_EQ(da, d);
  Tensor<half> A({2, 2}), B({2, 1});
  A(0, 0) = half(1.0f); A(0, 1) = half(-2.0f); A(1, 0) = half(0.5f); A(1, 1) = half(3.0f);
  B(0, 0) = half(4.0f); B(1, 0) = half(1.0f);
  const auto [C, M] = an::reference_gemm(A, B);
  EXPECT_EQ(C(0, 0), an::exact_t(2));   // 4 - 2
  EXPECT_EQ(M(0, 0), an::exact_t(6));   // 4 + 2
  EXPECT_EQ(C(1, 0), an::exact_t(5));   // 2 + 3
  EXPECT_THROW(an::reference_gemm(A, A.transpose().slice(0, 0, 1)), shape_error);
}

TEST(Underflow, HistogramBinades) {
  Tensor<float> g({8});
  g(0) = 0.0f; g(1) = 1.0f; g(2) = 1.5f; g(3) = 0.25f; g(4) = -0.3f;  // -0.3 in [2^-2, 2^-1)
  g(5) = std::ldexp(1.0f, -30); g(6) = std::numeric_limits<float>::infinity(); g(7) = 1024.0f;
  const auto h = an::histogram_of_exponents(g, -20, 5);
  EXPECT_EQ(h.zeros, 1u);
  EXPECT_EQ(h.infinities, 1u);
  EXPECT_EQ(h.at(0), 2u);
  EXPECT_EQ(h.at(-2), 2u);
  EXPECT_EQ(h.below, 1u);  // 2^-30
  EXPECT_EQ(h.above, 1u);  // 2^10
  EXPECT_EQ(h.total(), 8u);
}

TEST(Underflow, CastStatisticsFollowTheFormatThresholds) {
  // fp16: smallest subnormal 2^-24 (so values below 2^-25 flush), smallest normal 2^-14,
  // largest 65504 (values from 65520 up round to infinity)
  Tensor<double> v({7});
  v(0) = std::ldexp(1.0, -26);   // flushes
  v(1) = std::ldexp(1.0, -25);   // exactly half the smallest subnormal: ties to even, flushes
  v(2) = std::ldexp(1.5, -25);   // above the tie: the smallest subnormal
  v(3) = std::ldexp(1.0, -20);   // subnormal
  v(4) = std::ldexp(1.0, -14);   // normal
  v(5) = 65519.0;                // rounds to 65504: normal
  v(6) = 65520.0;                // the first value that rounds to infinity
  const auto s = an::cast_statistics_of<half>(v);
  EXPECT_EQ(s.total, 7u);
  EXPECT_EQ(s.flushed, 2u);
  EXPECT_EQ(s.subnormal, 2u);
  EXPECT_EQ(s.normal, 2u);
  EXPECT_EQ(s.overflowed, 1u);
  // a 2^10 loss scale moves every value up ten binades: nothing flushes any more
  const auto scaled = an::cast_statistics_of<half>(v, 1024.0);
  EXPECT_EQ(scaled.flushed, 0u);
  EXPECT_EQ(scaled.subnormal, 3u);   // 2^-16, 2^-15, 1.5 * 2^-15: all below 2^-14
  EXPECT_EQ(scaled.normal, 2u);      // 2^-10, 2^-4
  EXPECT_EQ(scaled.overflowed, 2u);  // 65519 * 2^10 and 65520 * 2^10
  EXPECT_DOUBLE_EQ(scaled.fraction_overflowed(), 2.0 / 7.0);
  // e4m3 (no infinity): above 464 (the midpoint past 448) counts as overflow
  Tensor<float> w({3});
  w(0) = 448.0f; w(1) = 464.0f; w(2) = 465.0f;
  const auto e = an::cast_statistics_of<float8_e4m3>(w);
  EXPECT_EQ(e.normal, 2u);  // 464 is the tie between 448 and 480: even is 448
  EXPECT_EQ(e.overflowed, 1u);
  EXPECT_THROW(an::cast_statistics_of<half>(v, 0.0), invalid_argument);
}

namespace {

/// ulp of a positive value v of a format with t digits: 2^(floor(log2 v) - t + 1).
double ulp_of(double v, int t) { return std::ldexp(1.0, std::ilogb(v) - t + 1); }

/// Checks a harmonic stagnation result against the definition of rounding: the final term is
/// absorbed (below half an ulp of the sum, or exactly half with an even last digit, for
/// round-to-nearest; below one ulp for toward-zero), and the term before it was not.
template <class F>
void expect_harmonic_stagnation_by_definition(rounding mode) {
  const int t = format_traits<F>::digits;
  const auto r = an::harmonic_stagnation<F>(mode, 1u << 20);
  ASSERT_TRUE(r.stagnated);
  const double s = precis::detail::load<double>(r.sum);
  const double u = ulp_of(s, t);
  const double last = precis::detail::load<double>(round_to<F>(1.0 / static_cast<double>(r.terms), mode, overflow::saturate));
  const double before = precis::detail::load<double>(round_to<F>(1.0 / static_cast<double>(r.terms - 1), mode, overflow::saturate));
  const bool even = std::fmod(s / u, 2.0) == 0.0;
  if (mode == rounding::nearest_even) {
    EXPECT_TRUE(last < u / 2 || (last == u / 2 && even)) << format_traits<F>::name << " n=" << r.terms;
  } else {
    EXPECT_LT(last, u) << format_traits<F>::name;
  }
  // the previous partial sum was s minus (at least) something: the term before moved it
  EXPECT_GT(before, 0.0);
  EXPECT_GT(r.terms, 2u);
}

}  // namespace

TEST(Stagnation, OnesStopAtTwoToTheDigits) {
  // k ones are exact up to 2^t; 2^t + 1 is a tie (to even: 2^t) or truncates to 2^t
  for (rounding mode : {rounding::nearest_even, rounding::toward_zero}) {
    const auto h = an::ones_stagnation<half>(mode, 1u << 20);
    EXPECT_EQ(static_cast<float>(h.sum), 2048.0f);
    EXPECT_EQ(h.terms, 2049u);
    const auto b = an::ones_stagnation<bfloat16>(mode, 1u << 20);
    EXPECT_EQ(static_cast<float>(b.sum), 256.0f);
    const auto e4 = an::ones_stagnation<float8_e4m3>(mode, 1000);
    EXPECT_EQ(static_cast<float>(e4.sum), 16.0f);
    const auto e5 = an::ones_stagnation<float8_e5m2>(mode, 1000);
    EXPECT_EQ(static_cast<float>(e5.sum), 8.0f);
  }
}

TEST(Stagnation, HarmonicMatchesPublishedValuesAndTheDefinition) {
  // Higham & Pranesh (2019), Table 3.1, round to nearest: fp16 stagnates at n = 513 with sum
  // 7.0859; bf16 at n = 65 with sum 5.0625
  const auto h = an::harmonic_stagnation<half>(rounding::nearest_even, 1u << 20);
  EXPECT_EQ(h.terms, 513u);
  EXPECT_EQ(static_cast<float>(h.sum), 7.0859375f);
  const auto b = an::harmonic_stagnation<bfloat16>(rounding::nearest_even, 1u << 20);
  EXPECT_EQ(b.terms, 65u);
  EXPECT_EQ(static_cast<float>(b.sum), 5.0625f);
  expect_harmonic_stagnation_by_definition<half>(rounding::nearest_even);
  expect_harmonic_stagnation_by_definition<half>(rounding::toward_zero);
  expect_harmonic_stagnation_by_definition<bfloat16>(rounding::nearest_even);
  expect_harmonic_stagnation_by_definition<bfloat16>(rounding::toward_zero);
  expect_harmonic_stagnation_by_definition<float8_e4m3>(rounding::nearest_even);
  expect_harmonic_stagnation_by_definition<float8_e5m2>(rounding::nearest_even);
  expect_harmonic_stagnation_by_definition<float8_e5m2>(rounding::toward_zero);
  // truncation stagnates no later than rounding to nearest
  EXPECT_LE(an::harmonic_stagnation<half>(rounding::toward_zero, 1u << 20).terms, h.terms);
}

namespace {

/// fp16 terms fl(1/k), k = 1..n, and their exact sum.
std::pair<std::vector<half>, an::exact_t> harmonic_terms(std::size_t n) {
  std::vector<half> t(n);
  an::exact_t exact = 0;
  for (std::size_t k = 1; k <= n; ++k) {
    t[k - 1] = round_to<half>(an::exact_t(1) / an::exact_t(k));
    exact += precis::detail::load<an::exact_t>(t[k - 1]);
  }
  return {t, exact};
}

}  // namespace

TEST(StochasticRounding, HarmonicSumBeatsStagnationWithinTheProbabilisticBound) {
  const std::size_t n = 4096;  // far past fp16's round-to-nearest stagnation at 513
  const auto [terms, exact] = harmonic_terms(n);
  const double u = unit_roundoff<half>();
  const double prob = bounds::probabilistic(static_cast<double>(n), 3.0, u);
  xoshiro256pp unused(0);
  const double rn = static_cast<double>(an::rel_error<an::exact_t>(
      an::recursive_sum_in<half>(terms, rounding::nearest_even, unused), exact));
  EXPECT_GT(rn, prob);  // round to nearest has stagnated: worse than sqrt(n) u behaviour
  const int runs = 20;
  double mean = 0, mean_abs = 0, sq = 0;
  for (int seed = 1; seed <= runs; ++seed) {
    xoshiro256pp gen(static_cast<std::uint64_t>(seed));
    const half s = an::recursive_sum_in<half>(terms, rounding::stochastic, gen);
    const double e = static_cast<double>((precis::detail::load<an::exact_t>(s) - exact) / exact);
    mean += e / runs;
    mean_abs += std::abs(e) / runs;
    sq += e * e / runs;
    // each run within gamma~_n(3), which holds with probability >= 0.978 (these seeds: all)
    EXPECT_LE(std::abs(e), prob) << "seed " << seed;
  }
  EXPECT_LT(mean_abs, rn / 4);
  // mean-zero error: the sample mean within 4 standard errors of 0
  const double sd = std::sqrt(sq - mean * mean);
  EXPECT_LE(std::abs(mean), 4 * sd / std::sqrt(double(runs)));
}

TEST(StochasticRounding, BitReproducibleFromTheSeed) {
  const auto [terms, exact] = harmonic_terms(3000);
  xoshiro256pp g1(42), g2(42);
  const half a = an::recursive_sum_in<half>(terms, rounding::stochastic, g1);
  const half b = an::recursive_sum_in<half>(terms, rounding::stochastic, g2);
  EXPECT_EQ(a.x, b.x);
  (void)exact;
}

namespace {

/// n fp16 values U[lo, 1) from a seeded generator, their exact sum and sum of magnitudes.
struct half_data {
  std::vector<half> x;
  an::exact_t exact = 0, abs_sum = 0;
};

half_data uniform_half(std::size_t n, double lo, std::uint64_t seed) {
  half_data d;
  d.x.resize(n);
  xoshiro256pp gen(seed);
  for (auto& v : d.x) {
    v = round_to<half>(lo + (1 - lo) * (static_cast<double>(gen() >> 11) * 0x1p-53));
    d.exact += precis::detail::load<an::exact_t>(v);
    d.abs_sum += abs(precis::detail::load<an::exact_t>(v));
  }
  return d;
}

double backward_error(const half& s, const half_data& d) {
  return static_cast<double>(abs(precis::detail::load<an::exact_t>(s) - d.exact) / d.abs_sum);
}

}  // namespace

TEST(Bounds, DeterministicBoundsHoldForSmallSums) {
  // every deterministic-bound summation case on small sizes, fp16 data U[0,1] and U[-1,1]:
  // recursive gamma_{n-1}, pairwise gamma_{ceil log2 n}, compensated 2u + 4nu^2, fp32
  // accumulator rounded once to fp16 u + (1 + u) gamma_{n-1}(u32)
  const double u = unit_roundoff<half>(), u32 = unit_roundoff<float>();
  for (double lo : {0.0, -1.0})
    for (std::size_t n : {10u, 100u, 1000u, 1500u}) {
      const auto d = uniform_half(n, lo, n);
      const double nd = static_cast<double>(n);
      xoshiro256pp unused(0);
      const auto rec = an::recursive_sum_in<half>(d.x, rounding::nearest_even, unused);
      const auto pair = an::pairwise_sum_in<half>(d.x, rounding::nearest_even, unused);
      const auto comp = an::compensated_sum_in<half>(d.x);
      const auto wide = an::widened_sum_in<float, half>(d.x, rounding::nearest_even, unused);
      EXPECT_LE(backward_error(rec, d), bounds::recursive_sum(nd, u)) << n;
      EXPECT_LE(backward_error(pair, d), bounds::pairwise_sum(nd, u)) << n;
      EXPECT_LE(backward_error(comp, d), bounds::compensated_sum(nd, u)) << n;
      EXPECT_LE(backward_error(wide, d), u + (1 + u) * bounds::recursive_sum(nd, u32)) << n;
    }
}

TEST(InFormatSums, AlgorithmsFollowTheirDefinitions) {
  // values chosen so each algorithm's result is known by hand in fp16 (ulp(1) = 2^-10)
  const half one(1.0f), q(std::ldexp(1.0f, -11));  // q = u: 1 + q is a tie, rounds to 1
  const std::vector<half> x{one, q, q, q, q};
  xoshiro256pp unused(0);
  // recursive: every 1 + q ties back to 1
  EXPECT_EQ(static_cast<float>(an::recursive_sum_in<half>(x, rounding::nearest_even, unused)), 1.0f);
  // pairwise: (1 + q) + (q + (q + q)) with the split at n/2 = 2: (1 + q) -> 1; q + (q + q) = 3q
  // exact; 1 + 3q = 1 + 1.5 ulp is a tie between 1 + ulp (odd) and 1 + 2 ulp (even)
  EXPECT_EQ(static_cast<float>(an::pairwise_sum_in<half>(x, rounding::nearest_even, unused)), 1.0f + std::ldexp(1.0f, -9));
  // compensated: exact 1 + 4q = 1 + 2 ulp is representable and recovered
  EXPECT_EQ(static_cast<float>(an::compensated_sum_in<half>(x)), 1.0f + std::ldexp(1.0f, -9));
  // fp32 accumulator: exact, then 1 + 2 ulp is representable in fp16
  EXPECT_EQ(static_cast<float>(an::widened_sum_in<float, half>(x, rounding::nearest_even, unused)), 1.0f + std::ldexp(1.0f, -9));
  // products rounded once: (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 rounds to 1 + 2^-9
  const half a(1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(static_cast<float>(an::mul_in(a, a, rounding::nearest_even, unused)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(static_cast<float>(an::mul_in(a, a, rounding::upward, unused)), 1.0f + 3 * std::ldexp(1.0f, -10));
  const std::vector<half> y{a, a};
  EXPECT_THROW(an::dot_in<half>(x, y, rounding::nearest_even, unused), shape_error);
}

TEST(Bounds, DotProductsWithinGammaN) {
  // recursive dot products in fp16 (each product and sum rounded once): gamma_n sum |x_i y_i|
  const double u = unit_roundoff<half>();
  for (double lo : {0.0, -1.0})
    for (std::size_t n : {10u, 100u, 1000u}) {
      const auto x = uniform_half(n, lo, 2 * n), y = uniform_half(n, lo, 2 * n + 1);
      Tensor<half> tx({static_cast<index_t>(n)}), ty({static_cast<index_t>(n)});
      std::copy(x.x.begin(), x.x.end(), tx.data());
      std::copy(y.x.begin(), y.x.end(), ty.data());
      const auto [exact, mag] = an::reference_dot(tx, ty);
      xoshiro256pp unused(0);
      const half s = an::dot_in<half>(x.x, y.x, rounding::nearest_even, unused);
      const double err = static_cast<double>(abs(precis::detail::load<an::exact_t>(s) - exact) / mag);
      EXPECT_LE(err, bounds::dot(static_cast<double>(n), u)) << n;
    }
}

TEST(InFormatSums, RoundOnceFromTheExactSum) {
  // 2^30 + 2^-30 is not exact in double (60 bits apart): the double sum is 2^30, yet rounding
  // upward must still step to the next float and toward zero must not
  const float a = std::ldexp(1.0f, 30), b = std::ldexp(1.0f, -30);
  EXPECT_EQ(an::add_in(a, b, rounding::upward), std::nextafter(a, 2 * a));
  EXPECT_EQ(an::add_in(a, b, rounding::toward_zero), a);
  EXPECT_EQ(an::add_in(a, b, rounding::nearest_even), a);
  EXPECT_EQ(an::add_in(a, -b, rounding::downward), std::nextafter(a, 0.0f));
  // fp16: 1 + 2^-11 is a tie (to even: 1); 1 + (2^-11 + 2^-21) is past it (up)
  EXPECT_EQ(static_cast<float>(an::add_in(half(1.0f), half(std::ldexp(1.0f, -11)), rounding::nearest_even)), 1.0f);
  const half past = half(std::ldexp(1.0f, -11) + std::ldexp(1.0f, -21));
  EXPECT_EQ(static_cast<float>(an::add_in(half(1.0f), past, rounding::nearest_even)), 1.0f + std::ldexp(1.0f, -10));
}

TEST(UpdateStagnation, NearestStallsStochasticAndKahanDoNot) {
  // fp16: ulp(1) = 2^-10; delta = 2^-12 + 2^-14 (an fp16 value) is below ulp/2, so by the
  // definition of rounding to nearest every update of w = 1 is lost
  const half w0(1.0f), delta(std::ldexp(1.0f, -12) + std::ldexp(1.0f, -14));
  const std::uint64_t steps = 4000;
  const double exact = 1.0 + steps * static_cast<double>(static_cast<float>(delta));  // 2.25195...
  xoshiro256pp gen(3);
  EXPECT_EQ(static_cast<float>(an::repeated_update(w0, delta, steps, an::update_rule::nearest, gen)), 1.0f);
  // Kahan: the final weight is within one rounding of the exact value (2u relative) plus the
  // compensation left unapplied (|c| <= u |w| per step, carried, never lost)
  const double k = static_cast<float>(an::repeated_update(w0, delta, steps, an::update_rule::kahan, gen));
  EXPECT_LE(std::abs(k - exact), 2 * unit_roundoff<half>() * exact);
  // stochastic: unbiased; the mean of 16 runs within 4 standard errors of the exact value
  double mean = 0, sq = 0;
  for (int r = 0; r < 16; ++r) {
    xoshiro256pp g(static_cast<std::uint64_t>(100 + r));
    const double v = static_cast<float>(an::repeated_update(w0, delta, steps, an::update_rule::stochastic, g));
    mean += v / 16;
    sq += v * v / 16;
  }
  const double sd = std::sqrt(std::max(sq - mean * mean, 0.0));
  EXPECT_LE(std::abs(mean - exact), 4 * sd / 4.0 + 1e-12);
}

TEST(Bounds, GemmWithinTheBlockFmaBound) {
  // numerics case 9 on small sizes: fp32-accumulated GEMM of fp16 / e4m3 inputs rounded from
  // fp32 data, against the exact product of the fp32 data
  Tensor<float> a32({4, 300}), b32({300, 3});
  fill_uniform(a32, -1, 1, 1);
  fill_uniform(b32, -1, 1, 2);
  const auto ref_mag = an::reference_gemm(a32, b32);
  const auto& ref = ref_mag.first;  // named, not structured bindings: the lambda captures them
  const auto& mag = ref_mag.second;
  auto check = [&](const auto& a, const auto& b, double ulow) {
    Tensor<float> c({4, 3});
    gemm<float>(1.0f, a, b, 0.0f, c);
    const double bound = bounds::block_fma(300, 1, unit_roundoff<float>(), ulow);
    for (index_t i = 0; i < c.size(); ++i)
      EXPECT_LE(static_cast<double>(abs(an::exact_t(c.data()[i]) - ref.data()[i]) / mag.data()[i]), bound);
  };
  check(astype<half>(a32), astype<half>(b32), unit_roundoff<half>());
  check(astype<float8_e4m3>(a32, rounding::nearest_even, overflow::saturate),
        astype<float8_e4m3>(b32, rounding::nearest_even, overflow::saturate), unit_roundoff<float8_e4m3>());
  check(a32, b32, 0.0);
}

TEST(Reproducibility, NumericsInputsAndResultsIdenticalOnAnyThreadCount) {
  // the suite's data come from counter-based fills and its GEMM splits work without changing
  // any summation order: bit-identical results for 1, 2 and 3 threads
  auto run = [](int threads) {
    Tensor<float> a32({48, 700}), b32({700, 40});  // several row panels and K blocks
    fill_uniform(a32, -1, 1, 11);
    fill_uniform(b32, -1, 1, 12);
    const auto a = astype<half>(a32), b = astype<half>(b32);
    Tensor<float> c({48, 40});
    gemm<float>(1.0f, a, b, 0.0f, c, threads);
    return c;
  };
  const auto c1 = run(1), c2 = run(2), c3 = run(3);
  for (index_t i = 0; i < c1.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(c1.data()[i]), std::bit_cast<std::uint32_t>(c2.data()[i])) << i;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(c1.data()[i]), std::bit_cast<std::uint32_t>(c3.data()[i])) << i;
  }
}
