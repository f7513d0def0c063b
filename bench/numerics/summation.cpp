// Numerics cases 4 and 5 (DESIGN.md). Case 4: relative error of the harmonic sum vs n in fp16 and bf16,
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

/// Case 5 (DESIGN.md): the sqrt(n) u law. Backward error |s^ - s| / sum |x_i| of recursive
/// summation in F (round to nearest) of n values drawn U[0,1] (lo = 0) or U[-1,1] (lo = -1),
/// reported against u and sqrt(n) u, beside the worst case gamma_{n-1}. Higham & Mary (SIAM J.
/// Sci. Comput. 41(5), 2019): the error grows like sqrt(n) u rather than n u; with mean-zero
/// data it is smaller still (Higham & Mary, SIAM J. Sci. Comput. 42(5), 2020). Mean of 8 draws.
template <class F>
void BM_sqrt_n_law(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const double lo = state.range(1) == 0 ? 0.0 : -1.0;
  const int draws = 8;
  double err = 0;
  for (auto _ : state) {
    err = 0;
    for (int d = 0; d < draws; ++d) {
      precis::Tensor<F> x({static_cast<precis::index_t>(n)});
      precis::fill_uniform(x, lo, 1.0, 1000 * n + static_cast<std::uint64_t>(d));
      const auto [exact, abs_sum] = an::reference_sum(x);
      precis::xoshiro256pp unused(0);
      const F s = an::recursive_sum_in<F>(std::span<const F>(x.data(), n), rounding::nearest_even, unused);
      err += static_cast<double>(abs(precis::detail::load<an::exact_t>(s) - exact) / abs_sum) / draws;
    }
  }
  const double u = precis::unit_roundoff<F>();
  const double det = precis::bounds::recursive_sum(static_cast<double>(n), u);
  state.counters["n"] = static_cast<double>(n);
  state.counters["err"] = err;
  state.counters["err_over_u"] = err / u;
  state.counters["err_over_sqrt_n_u"] = err / (std::sqrt(static_cast<double>(n)) * u);
  state.counters["bound_det"] = std::isinf(det) ? -1 : det;
  state.SetLabel(std::string(precis::format_traits<F>::name) + (lo == 0 ? " U[0,1]" : " U[-1,1]") +
                 " (Higham & Mary 2019)");
}

void sqrt_n_sizes(benchmark::internal::Benchmark* b) {
  for (long dist : {0, 1})
    for (long n = 64; n <= (1 << 16); n *= 4) b->Args({n, dist});
  b->ArgNames({"n", "signed"})->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK_TEMPLATE(BM_sqrt_n_law, precis::half)->Apply(sqrt_n_sizes);
BENCHMARK_TEMPLATE(BM_sqrt_n_law, float)->Apply(sqrt_n_sizes);

}  // namespace

BENCHMARK_MAIN();
