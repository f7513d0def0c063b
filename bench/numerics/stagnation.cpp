// Numerics cases 1-3 and 7 (DESIGN.md): format constants, stagnation of a sum of ones, stagnation
// of the harmonic series, and stagnation of repeated weight updates, each measured value printed beside the value from the format's
// specification, from theory, or from the literature. Counters carry the numbers, so
// --benchmark_format=json gives machine-readable results; timings are irrelevant here.
#include <benchmark/benchmark.h>

#include <cmath>
#include <precis/analysis/analysis.hpp>
#include <precis/precis.hpp>

namespace {

using precis::rounding;

/// Case 1: the constants of each format (measured from precis's format_traits and by rounding)
/// beside the values in the formats' specifications (IEEE 754-2019 binary16/32; Google bfloat16;
/// OCP 8-bit Floating Point Specification v1.0 for E4M3/E5M2).
template <class F>
void BM_format_constants(benchmark::State& state, double spec_max, double spec_min_normal,
                         double spec_min_subnormal, int spec_digits) {
  using T = precis::format_traits<F>;
  for (auto _ : state) benchmark::DoNotOptimize(T::digits);
  // measured: the largest finite value is what rounding 2*max toward zero saturates to
  const double max_measured = precis::detail::load<double>(
      precis::round_to<F>(2.0 * spec_max, rounding::toward_zero, precis::overflow::saturate));
  state.counters["digits"] = T::digits;
  state.counters["digits_spec"] = spec_digits;
  state.counters["max"] = max_measured;
  state.counters["max_spec"] = spec_max;
  state.counters["min_normal"] = T::min_normal();
  state.counters["min_normal_spec"] = spec_min_normal;
  state.counters["min_subnormal"] = T::min_subnormal();
  state.counters["min_subnormal_spec"] = spec_min_subnormal;
  state.counters["u"] = precis::unit_roundoff<F>();
  state.SetLabel(std::string(T::name));
}

/// Case 2: 1 + 1 + ... in F until the sum stops growing; theory: 2^t (t significand bits).
template <class F>
void BM_ones_stagnation(benchmark::State& state, rounding mode) {
  precis::analysis::stagnation_result<F> r;
  for (auto _ : state) r = precis::analysis::ones_stagnation<F>(mode, std::uint64_t{1} << 26);
  state.counters["sum"] = precis::detail::load<double>(r.sum);
  state.counters["sum_theory"] = std::ldexp(1.0, precis::format_traits<F>::digits);
  state.counters["terms"] = static_cast<double>(r.terms);
  state.SetLabel(std::string(precis::format_traits<F>::name) + " " + std::string(precis::to_string(mode)));
}

/// Case 3: the harmonic series in F until a term no longer changes the sum. Published values
/// (round to nearest): Higham & Pranesh, SIAM J. Sci. Comput. 41(5), 2019, Table 3.1 —
/// fp16 n = 513, sum 7.0859; bf16 n = 65, sum 5.0625; fp32 n = 2097152, sum 15.404.
/// 0 where nothing is published.
template <class F>
void BM_harmonic_stagnation(benchmark::State& state, rounding mode, double published_terms,
                            double published_sum) {
  precis::analysis::stagnation_result<F> r;
  for (auto _ : state) r = precis::analysis::harmonic_stagnation<F>(mode, std::uint64_t{1} << 24);
  state.counters["terms"] = static_cast<double>(r.terms);
  state.counters["terms_published"] = published_terms;
  state.counters["sum"] = precis::detail::load<double>(r.sum);
  state.counters["sum_published"] = published_sum;
  state.SetLabel(std::string(precis::format_traits<F>::name) + " " + std::string(precis::to_string(mode)) +
                 (published_terms > 0 ? " (Higham & Pranesh 2019, Table 3.1)" : ""));
}

/// Case 7: w = 1 updated `steps` times by delta < ulp(1)/2 in F, by round to nearest,
/// stochastic rounding (mean of 16 seeded runs) and Kahan-compensated updates; theory: round to
/// nearest never moves (Micikevicius et al., ICLR 2018; Zamirai et al., 2020), the exact result
/// is 1 + steps * delta.
template <class F>
void BM_update_stagnation(benchmark::State& state, double delta_value, std::uint64_t steps) {
  namespace an = precis::analysis;
  const F w0 = precis::round_to<F>(1.0);
  const F delta = precis::round_to<F>(delta_value);
  const double exact = 1.0 + static_cast<double>(steps) * precis::detail::load<double>(delta);
  double rn = 0, sr = 0, kahan = 0;
  for (auto _ : state) {
    precis::xoshiro256pp unused(0);
    rn = precis::detail::load<double>(an::repeated_update(w0, delta, steps, an::update_rule::nearest, unused));
    kahan = precis::detail::load<double>(an::repeated_update(w0, delta, steps, an::update_rule::kahan, unused));
    sr = 0;
    for (int r = 0; r < 16; ++r) {
      precis::xoshiro256pp gen(static_cast<std::uint64_t>(r) + 1);
      sr += precis::detail::load<double>(an::repeated_update(w0, delta, steps, an::update_rule::stochastic, gen)) / 16;
    }
  }
  state.counters["delta"] = precis::detail::load<double>(delta);
  state.counters["steps"] = static_cast<double>(steps);
  state.counters["exact"] = exact;
  state.counters["nearest"] = rn;
  state.counters["stochastic_mean"] = sr;
  state.counters["kahan"] = kahan;
  state.SetLabel(std::string(precis::format_traits<F>::name) + " (Micikevicius et al. 2018)");
}

template <class Fn, class... Args>
void add(const std::string& name, Fn fn, Args... args) {
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { fn(st, args...); })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

void register_all() {
  add("format_constants/fp16", BM_format_constants<precis::half>, 65504.0, 0x1p-14, 0x1p-24, 11);
  add("format_constants/bf16", BM_format_constants<precis::bfloat16>, 0x1.FEp127, 0x1p-126, 0x1p-133, 8);
  add("format_constants/e4m3", BM_format_constants<precis::float8_e4m3>, 448.0, 0x1p-6, 0x1p-9, 4);
  add("format_constants/e5m2", BM_format_constants<precis::float8_e5m2>, 57344.0, 0x1p-14, 0x1p-16, 3);
  add("format_constants/fp32", BM_format_constants<float>, 0x1.FFFFFEp127, 0x1p-126, 0x1p-149, 24);

  add("ones_stagnation/fp16/nearest_even", BM_ones_stagnation<precis::half>, rounding::nearest_even);
  add("ones_stagnation/bf16/nearest_even", BM_ones_stagnation<precis::bfloat16>, rounding::nearest_even);
  add("ones_stagnation/e4m3/nearest_even", BM_ones_stagnation<precis::float8_e4m3>, rounding::nearest_even);
  add("ones_stagnation/e5m2/nearest_even", BM_ones_stagnation<precis::float8_e5m2>, rounding::nearest_even);
  add("ones_stagnation/fp32/nearest_even", BM_ones_stagnation<float>, rounding::nearest_even);
  add("ones_stagnation/fp16/toward_zero", BM_ones_stagnation<precis::half>, rounding::toward_zero);

  add("harmonic_stagnation/fp16/nearest_even", BM_harmonic_stagnation<precis::half>, rounding::nearest_even, 513.0, 7.0859);
  add("harmonic_stagnation/bf16/nearest_even", BM_harmonic_stagnation<precis::bfloat16>, rounding::nearest_even, 65.0, 5.0625);
  add("harmonic_stagnation/fp32/nearest_even", BM_harmonic_stagnation<float>, rounding::nearest_even, 2097152.0, 15.404);
  add("harmonic_stagnation/e4m3/nearest_even", BM_harmonic_stagnation<precis::float8_e4m3>, rounding::nearest_even, 0.0, 0.0);
  add("harmonic_stagnation/e5m2/nearest_even", BM_harmonic_stagnation<precis::float8_e5m2>, rounding::nearest_even, 0.0, 0.0);
  add("harmonic_stagnation/fp16/toward_zero", BM_harmonic_stagnation<precis::half>, rounding::toward_zero, 0.0, 0.0);
  add("harmonic_stagnation/bf16/toward_zero", BM_harmonic_stagnation<precis::bfloat16>, rounding::toward_zero, 0.0, 0.0);

  add("update_stagnation/fp16", BM_update_stagnation<precis::half>, 3e-4, std::uint64_t{10000});
  add("update_stagnation/bf16", BM_update_stagnation<precis::bfloat16>, 1e-3, std::uint64_t{10000});
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
