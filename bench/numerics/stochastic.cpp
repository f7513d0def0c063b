// Stochastic rounding (numerics case 4, docs/numerics.md): SR is unbiased,
// and a sum rounded stochastically keeps growing with error ~ sqrt(n) u where round to nearest
// stagnates. Every random draw comes from a seeded xoshiro256++ stream: bit-reproducible.
#include <cmath>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>
#include <vector>

#include "common.hpp"

namespace {

namespace an = precis::analysis;
namespace nb = precis::numerics_bench;
using precis::rounding;

/// Mean and standard error of the mean of a sample.
struct sample_stats {
  double sum = 0, sum_sq = 0;
  std::size_t n = 0;
  void add(double v) {
    sum += v;
    sum_sq += v * v;
    ++n;
  }
  double mean() const { return sum / static_cast<double>(n); }
  double std_error() const {
    const double m = mean();
    const double var = (sum_sq - static_cast<double>(n) * m * m) / static_cast<double>(n - 1);
    return std::sqrt(std::max(var, 0.0) / static_cast<double>(n));
  }
};

/// The bias of one rounding: x = 1 + f ulp(1) rounded 2^20 times into F. Theory: stochastic
/// rounding rounds up with probability f, so E[fl(x) - x] = 0 (the defining property; see
/// Connolly, Higham & Mary 2021); round to nearest errs by -f ulp (f < 1/2) every time, toward zero likewise.
/// The measured mean is reported in ulps with its standard error and z = mean / std_error:
/// |z| below ~3 is indistinguishable from zero.
template <class F>
void BM_rounding_bias(benchmark::State& state, double f) {
  const double ulp = std::ldexp(1.0, 1 - precis::format_traits<F>::digits);
  const double x = 1.0 + f * ulp;
  const std::size_t draws = std::size_t{1} << 20;
  sample_stats sr;
  for (auto _ : state) {
    sr = {};
    precis::xoshiro256pp gen(1000 * static_cast<std::uint64_t>(precis::format_traits<F>::digits) +
                             static_cast<std::uint64_t>(f * 100));
    for (std::size_t i = 0; i < draws; ++i)
      sr.add((precis::detail::load<double>(precis::round_to<F>(x, rounding::stochastic, precis::overflow::saturate, gen)) - x) / ulp);
  }
  const double rn = (precis::detail::load<double>(precis::round_to<F>(x, rounding::nearest_even, precis::overflow::saturate)) - x) / ulp;
  state.counters["f"] = f;
  state.counters["draws"] = static_cast<double>(draws);
  state.counters["sr_bias_ulp"] = sr.mean();
  state.counters["sr_std_error_ulp"] = sr.std_error();
  state.counters["sr_z"] = sr.mean() / sr.std_error();
  state.counters["sr_std_error_theory"] = std::sqrt(f * (1 - f) / static_cast<double>(draws));
  state.counters["rn_bias_ulp"] = rn;
  state.SetLabel(nb::name_of<F>());
}

constexpr double lambda = 3.0;  // gamma~_n(3) holds with probability >= 1 - 2 e^{-4.5} ~ 0.978

/// Case 4: relative error of the harmonic sum vs n in F, round to nearest vs stochastic
/// rounding, against the deterministic bound gamma_{n-1} and the probabilistic bound
/// gamma~_n(lambda) (Connolly, Higham & Mary, SIAM J. Sci. Comput. 43(2), 2021: under
/// stochastic rounding the error grows like sqrt(n) u with high probability, while round to
/// nearest stagnates; Croci et al., R. Soc. Open Sci. 9, 2022). The terms 1/k are stored in the
/// format (rounded to nearest); the reference is the exact sum of the stored terms, so the error
/// measured is the summation's alone. Stochastic rounding: `seeds` runs, each seeded
/// deterministically; the mean signed error is reported with its standard error.
template <class F>
void BM_harmonic_error(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int seeds = 32;
  std::vector<F> terms(n);
  an::exact_t exact = 0;
  for (std::size_t k = 1; k <= n; ++k) {
    terms[k - 1] = precis::round_to<F>(an::exact_t(1) / an::exact_t(k), rounding::nearest_even);
    exact += precis::detail::load<an::exact_t>(terms[k - 1]);
  }
  double rn = 0, sr = 0;
  sample_stats signed_err;
  for (auto _ : state) {
    precis::xoshiro256pp unused(0);
    const F s_rn = an::recursive_sum_in<F>(terms, rounding::nearest_even, unused);
    rn = static_cast<double>(an::rel_error<an::exact_t>(s_rn, exact));
    sr = 0;
    signed_err = {};
    for (int seed = 0; seed < seeds; ++seed) {
      precis::xoshiro256pp gen(static_cast<std::uint64_t>(seed) + 1);
      const F s = an::recursive_sum_in<F>(terms, rounding::stochastic, gen);
      const auto e = static_cast<double>((precis::detail::load<an::exact_t>(s) - exact) / exact);
      sr += std::abs(e) / seeds;
      signed_err.add(e);
    }
  }
  const double u = precis::unit_roundoff<F>();
  const double det = precis::bounds::recursive_sum(static_cast<double>(n), u);
  const double prob = precis::bounds::probabilistic(static_cast<double>(n), lambda, u);
  state.counters["n"] = static_cast<double>(n);
  state.counters["seeds"] = seeds;
  state.counters["err_rn"] = rn;
  state.counters["err_sr"] = sr;
  state.counters["sr_over_sqrt_n_u"] = sr / (std::sqrt(static_cast<double>(n)) * u);
  state.counters["bias_sr"] = signed_err.mean();
  state.counters["bias_sr_std_error"] = signed_err.std_error();
  state.counters["bias_sr_z"] = signed_err.mean() / signed_err.std_error();
  state.counters["bound_det"] = std::isinf(det) ? -1 : det;  // -1: no bound (n u >= 1)
  state.counters["bound_prob"] = prob;
  state.counters["sr_over_prob"] = sr / prob;
  state.counters["rn_over_prob"] = rn / prob;
  state.SetLabel(nb::name_of<F>() + " (Connolly, Higham & Mary 2021)");
}

void register_all() {
  for (double f : {0.1, 0.3, 0.5}) {
    const std::string tag = "/f:" + std::to_string(f).substr(0, 3);
    nb::add("rounding_bias/fp16" + tag, BM_rounding_bias<precis::half>, f);
    nb::add("rounding_bias/bf16" + tag, BM_rounding_bias<precis::bfloat16>, f);
    nb::add("rounding_bias/e4m3" + tag, BM_rounding_bias<precis::float8_e4m3>, f);
  }
  for (long n = 16; n <= (1 << 16); n *= 4) {
    benchmark::RegisterBenchmark("harmonic_error/fp16", BM_harmonic_error<precis::half>)
        ->Arg(n)->Iterations(1)->Unit(benchmark::kMillisecond);
  }
  for (long n = 16; n <= (1 << 16); n *= 4) {
    benchmark::RegisterBenchmark("harmonic_error/bf16", BM_harmonic_error<precis::bfloat16>)
        ->Arg(n)->Iterations(1)->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) { return nb::run(argc, argv, register_all); }
