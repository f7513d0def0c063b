// Numerics cases 5 and 6 (docs/numerics.md): the sqrt(n) u law for sums, and the summation
// algorithms in fp16. Every addition is rounded once into the format (analysis/summation.hpp);
// references are exact (1000-bit) sums of the stored data.
#include <cmath>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>
#include <vector>

#include "common.hpp"

namespace {

namespace an = precis::analysis;
namespace nb = precis::numerics_bench;
using precis::rounding;

/// Case 5: the sqrt(n) u law. Backward error |s^ - s| / sum |x_i| of recursive summation in F
/// (round to nearest) of n values drawn U[0,1] (lo = 0) or U[-1,1] (lo = -1), reported against
/// u and sqrt(n) u, beside the worst case gamma_{n-1}. Higham & Mary (SIAM J. Sci. Comput.
/// 41(5), 2019): the error grows like sqrt(n) u rather than n u; with mean-zero data it is
/// smaller still (Higham & Mary, SIAM J. Sci. Comput. 42(5), 2020). Mean of 8 draws.
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
  nb::report_sqrt_n_law(state, static_cast<double>(n), err, u, precis::bounds::recursive_sum(static_cast<double>(n), u));
  state.SetLabel(nb::name_of<F>() + (lo == 0 ? " U[0,1]" : " U[-1,1]") + " (Higham & Mary 2019)");
}

BENCHMARK_TEMPLATE(BM_sqrt_n_law, precis::half)->Apply(nb::sqrt_n_sizes);
BENCHMARK_TEMPLATE(BM_sqrt_n_law, float)->Apply(nb::sqrt_n_sizes);

/// Case 6: summation algorithms in fp16 on the setup of Fasi & Mikaitis (IEEE Trans. Emerg.
/// Topics Comput. 9(3), 2021, Sec. 8.1; their script test_summation_algorithms.m): 100000 terms
/// summed in increasing index order, either random values U[-0.002, 0.008] (their
/// rand * 0.01 - 0.002) rounded to fp16, or the harmonic terms fl16(1/k). For the first n terms:
/// recursive, pairwise and Kahan-compensated summation in fp16, an fp32 accumulator rounded
/// once to fp16, and stochastically rounded recursive summation (mean |error| of 10 seeds).
/// Reported: the relative error |s^ - s| / |s| against the exact sum of the stored terms, and
/// each algorithm's bound scaled to the same quantity (the bound on sum |x_i| times
/// kappa = sum |x_i| / |s|): gamma_{n-1}, gamma_{ceil(log2 n)}, 2u + 4nu^2,
/// u + (1 + u) gamma_{n-1}(u32), and for stochastic rounding gamma~_n(3) (probability >= 0.978).
/// A bound that does not exist (nu >= 1) is -1.
enum class dataset { random, harmonic };

const std::vector<precis::half>& case6_terms(dataset d) {
  static const auto make = [](dataset which) {
    constexpr std::size_t N = 100000;
    std::vector<precis::half> x(N);
    if (which == dataset::random) {
      precis::Tensor<precis::half> t({static_cast<precis::index_t>(N)});
      precis::fill_uniform(t, -0.002, 0.008, 300);
      std::copy(t.data(), t.data() + N, x.begin());
    } else {
      for (std::size_t k = 1; k <= N; ++k)
        x[k - 1] = precis::round_to<precis::half>(an::exact_t(1) / an::exact_t(k), rounding::nearest_even);
    }
    return x;
  };
  static const std::vector<precis::half> random = make(dataset::random), harmonic = make(dataset::harmonic);
  return d == dataset::random ? random : harmonic;
}

void BM_fp16_summation_algorithms(benchmark::State& state, dataset d) {
  using precis::half;
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::span<const half> x(case6_terms(d).data(), n);
  an::exact_t exact = 0, abs_sum = 0;
  for (const half& v : x) {
    exact += precis::detail::load<an::exact_t>(v);
    abs_sum += abs(precis::detail::load<an::exact_t>(v));
  }
  const auto rel = [&](const half& s) {
    return static_cast<double>(abs(precis::detail::load<an::exact_t>(s) - exact) / abs(exact));
  };
  const int seeds = 10;
  double rec = 0, pair = 0, comp = 0, wide = 0, sr = 0;
  for (auto _ : state) {
    precis::xoshiro256pp unused(0);
    rec = rel(an::recursive_sum_in<half>(x, rounding::nearest_even, unused));
    pair = rel(an::pairwise_sum_in<half>(x, rounding::nearest_even, unused));
    comp = rel(an::compensated_sum_in<half>(x));
    wide = rel(an::widened_sum_in<float, half>(x, rounding::nearest_even, unused));
    sr = 0;
    for (int seed = 1; seed <= seeds; ++seed) {
      precis::xoshiro256pp gen(static_cast<std::uint64_t>(seed));
      sr += rel(an::recursive_sum_in<half>(x, rounding::stochastic, gen)) / seeds;
    }
  }
  const double u = precis::unit_roundoff<half>(), u32 = precis::unit_roundoff<float>();
  const double nd = static_cast<double>(n);
  const double kappa = static_cast<double>(abs_sum / abs(exact));
  const auto report = [&](const char* alg, double err, double bound) {
    const std::string a(alg);
    state.counters["err_" + a] = err;
    state.counters["bound_" + a] = std::isinf(bound) ? -1 : kappa * bound;
  };
  report("recursive", rec, precis::bounds::recursive_sum(nd, u));
  report("pairwise", pair, precis::bounds::pairwise_sum(nd, u));
  report("compensated", comp, precis::bounds::compensated_sum(nd, u));
  report("fp32_acc", wide, u + (1 + u) * precis::bounds::recursive_sum(nd, u32));
  report("stochastic", sr, precis::bounds::probabilistic(nd, 3.0, u));
  state.counters["n"] = nd;
  state.counters["seeds"] = seeds;
  state.counters["kappa"] = kappa;
  state.counters["exact_sum"] = static_cast<double>(exact);
  state.counters["u"] = u;
  state.SetLabel(std::string(d == dataset::random ? "U[-0.002,0.008]" : "harmonic") + " (Fasi & Mikaitis 2021)");
}

void case6_sizes(benchmark::internal::Benchmark* b) {
  for (long n = 64; n <= (1 << 16); n *= 4) b->Arg(n);
  b->Arg(100000)->ArgName("n")->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_fp16_summation_algorithms, random, dataset::random)->Apply(case6_sizes);
BENCHMARK_CAPTURE(BM_fp16_summation_algorithms, harmonic, dataset::harmonic)->Apply(case6_sizes);

}  // namespace

BENCHMARK_MAIN();
