// Underflow and overflow when casting to low-precision formats, with and without a loss scale
// (the mechanism behind loss scaling: Micikevicius et al., "Mixed Precision Training", ICLR
// 2018). Data: 2^20 synthetic gradient-like magnitudes, log-uniform over the binades
// [2^-40, 2^0) with random signs (the demo's real gradients are numerics case 8). Counters: the
// fractions flushed to zero, subnormal, and overflowed, beside the fraction predicted from the
// format's thresholds (log-uniform data: the share of binades below the threshold).
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>

namespace {

namespace an = precis::analysis;
constexpr double lo_exp = -40, hi_exp = 0;

const precis::Tensor<float>& data() {
  static const precis::Tensor<float> g = [] {
    precis::Tensor<float> t({1 << 20});
    precis::fill_log_uniform(t, lo_exp, hi_exp, 2018, true);
    return t;
  }();
  return g;
}

/// Fraction of log-uniform magnitudes on [2^lo, 2^hi) that fall below 2^e, after scaling by 2^s.
double predicted_below(double e, double s) {
  const double x = std::min(std::max(e - s, lo_exp), hi_exp);
  return (x - lo_exp) / (hi_exp - lo_exp);
}

template <class F>
void BM_cast(benchmark::State& state) {
  const double log2_scale = static_cast<double>(state.range(0));
  an::cast_statistics s;
  for (auto _ : state) s = an::cast_statistics_of<F>(data(), std::exp2(log2_scale));
  using T = precis::format_traits<F>;
  const double e_sub = std::log2(T::min_subnormal());
  const double e_norm = std::log2(T::min_normal());
  // rounding to nearest flushes below half the smallest subnormal
  state.counters["log2_scale"] = log2_scale;
  state.counters["flushed"] = s.fraction_flushed();
  state.counters["flushed_predicted"] = predicted_below(e_sub - 1, log2_scale);
  state.counters["subnormal"] = s.fraction_subnormal();
  state.counters["subnormal_predicted"] = predicted_below(e_norm, log2_scale) - predicted_below(e_sub - 1, log2_scale);
  state.counters["overflowed"] = s.fraction_overflowed();
  state.SetLabel(std::string(T::name));
}

/// The exponent histogram of the data, for the report's plot.
void BM_histogram(benchmark::State& state) {
  an::exponent_histogram h;
  for (auto _ : state) h = an::histogram_of_exponents(data(), -45, 5);
  for (int e = h.lo; e <= h.hi; ++e) {
    std::string name = "e";  // (not "e" + to_string: GCC 12 warns -Wrestrict on that)
    name += std::to_string(e);
    state.counters[name] = static_cast<double>(h.at(e));
  }
}

void scales(benchmark::internal::Benchmark* b) {
  for (long s : {0, 8, 16, 24}) b->Arg(s);
  b->ArgName("log2_scale")->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK_TEMPLATE(BM_cast, precis::half)->Apply(scales);
BENCHMARK_TEMPLATE(BM_cast, precis::bfloat16)->Apply(scales);
BENCHMARK_TEMPLATE(BM_cast, precis::float8_e4m3)->Apply(scales);
BENCHMARK_TEMPLATE(BM_cast, precis::float8_e5m2)->Apply(scales);
BENCHMARK(BM_histogram)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
