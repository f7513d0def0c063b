// Numerics case 4 (DESIGN.md): relative error of the harmonic sum vs n in fp16 and bf16,
// round-to-nearest vs stochastic rounding, against the deterministic bound gamma_{n-1} and the
// probabilistic bound gamma~_n(lambda) (Connolly, Higham & Mary, SIAM J. Sci. Comput. 43(2),
// 2021: under stochastic rounding the error grows like sqrt(n) u with high probability, while
// round-to-nearest stagnates; Croci et al., R. Soc. Open Sci. 9, 2022). The terms 1/k are
// stored in the format (rounded to nearest); the reference is the exact sum of the stored
// terms, so the error measured is the summation's alone. Stochastic rounding: mean over
// `seeds` runs, each seeded deterministically (bit-reproducible).
#include <benchmark/benchmark.h>

#include <cmath>
#include <precis/analysis/analysis.hpp>
#include <precis/precis.hpp>
#include <vector>

namespace {

namespace an = precis::analysis;
using precis::rounding;

constexpr double lambda = 3.0;  // gamma~_n(3) holds with probability >= 1 - 2 e^{-4.5} ~ 0.978

template <class F>
void BM_harmonic_error(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int seeds = 10;
  std::vector<F> terms(n);
  an::exact_t exact = 0;
  for (std::size_t k = 1; k <= n; ++k) {
    terms[k - 1] = precis::round_to<F>(an::exact_t(1) / an::exact_t(k), rounding::nearest_even);
    exact += precis::detail::load<an::exact_t>(terms[k - 1]);
  }
  double rn = 0, sr = 0, sr_signed = 0;
  for (auto _ : state) {
    precis::xoshiro256pp unused(0);
    const F s_rn = an::recursive_sum_in<F>(terms, rounding::nearest_even, unused);
    rn = static_cast<double>(an::rel_error<an::exact_t>(s_rn, exact));
    sr = sr_signed = 0;
    for (int seed = 0; seed < seeds; ++seed) {
      precis::xoshiro256pp gen(static_cast<std::uint64_t>(seed) + 1);
      const F s = an::recursive_sum_in<F>(terms, rounding::stochastic, gen);
      const an::exact_t e = precis::detail::load<an::exact_t>(s) - exact;
      sr += static_cast<double>(abs(e) / exact) / seeds;
      sr_signed += static_cast<double>(e / exact) / seeds;
    }
  }
  const double u = precis::unit_roundoff<F>();
  const double det = precis::bounds::recursive_sum(static_cast<double>(n), u);
  const double prob = precis::bounds::probabilistic(static_cast<double>(n), lambda, u);
  state.counters["n"] = static_cast<double>(n);
  state.counters["err_rn"] = rn;
  state.counters["err_sr"] = sr;
  state.counters["bias_sr"] = sr_signed;
  state.counters["bound_det"] = std::isinf(det) ? -1 : det;  // -1: no bound (n u >= 1)
  state.counters["bound_prob"] = prob;
  state.counters["sr_over_prob"] = sr / prob;
  state.counters["rn_over_prob"] = rn / prob;
  state.SetLabel(std::string(precis::format_traits<F>::name) + " (Connolly, Higham & Mary 2021)");
}

BENCHMARK_TEMPLATE(BM_harmonic_error, precis::half)
    ->RangeMultiplier(4)->Range(16, 1 << 16)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_harmonic_error, precis::bfloat16)
    ->RangeMultiplier(4)->Range(16, 1 << 16)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
