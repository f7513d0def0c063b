// Numerics cases 2, 3 and 7 (docs/numerics.md): stagnation of a sum of ones, of the harmonic
// series, and of repeated weight updates, each measured value printed beside the value from the
// format's definition, from theory, or from the literature. Counters carry the numbers, so
// --benchmark_format=json gives machine-readable results; timings are irrelevant here.
#include <bit>
#include <cmath>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>

#include "common.hpp"

namespace {

namespace an = precis::analysis;
namespace nb = precis::numerics_bench;
using precis::rounding;

/// Case 2: 1 + 1 + ... in F until the sum stops growing; theory: 2^t (t significand bits).
template <class F>
void BM_ones_stagnation(benchmark::State& state, rounding mode) {
  an::stagnation_result<F> r;
  for (auto _ : state) r = an::ones_stagnation<F>(mode, std::uint64_t{1} << 26);
  state.counters["sum"] = precis::detail::load<double>(r.sum);
  state.counters["sum_theory"] = std::ldexp(1.0, precis::format_traits<F>::digits);
  state.counters["terms"] = static_cast<double>(r.terms);
  state.SetLabel(nb::name_of<F>() + " " + std::string(precis::to_string(mode)));
}

/// Case 3: the harmonic series in F until a term no longer changes the sum. Published values
/// (round to nearest): Higham & Pranesh, SIAM J. Sci. Comput. 41(5), 2019, Table 3.1 —
/// fp16 n = 513, sum 7.0859; bf16 n = 65, sum 5.0625; fp32 n = 2097152, sum 15.404.
/// 0 where nothing is published. Counters "H2^k" carry the partial sum after 2^k terms (up to
/// the stagnation point; after it the sum is constant by definition) and "exact2^k" the
/// harmonic number H_{2^k}, k <= 23 (summed in double, relative error < 1e-8), for the plot.
template <class F>
void BM_harmonic_stagnation(benchmark::State& state, rounding mode, double published_terms,
                            double published_sum) {
  an::stagnation_result<F> r;
  std::vector<std::pair<std::uint64_t, double>> checkpoints;
  for (auto _ : state) {
    checkpoints.clear();
    r = an::harmonic_stagnation<F>(mode, std::uint64_t{1} << 24, [&](std::uint64_t k, const F& s) {
      if ((k & (k - 1)) == 0) checkpoints.emplace_back(k, precis::detail::load<double>(s));
    });
  }
  state.counters["terms"] = static_cast<double>(r.terms);
  state.counters["terms_published"] = published_terms;
  state.counters["sum"] = precis::detail::load<double>(r.sum);
  state.counters["sum_published"] = published_sum;
  for (const auto& [n, s] : checkpoints) state.counters["H2^" + std::to_string(std::countr_zero(n))] = s;
  double exact = 0;
  std::uint64_t k = 0;
  for (int e = 0; e <= 23; ++e) {
    while (k < (std::uint64_t{1} << e)) exact += 1.0 / static_cast<double>(++k);
    state.counters["exact2^" + std::to_string(e)] = exact;
  }
  state.SetLabel(nb::name_of<F>() + " " + std::string(precis::to_string(mode)) +
                 (published_terms > 0 ? " (Higham & Pranesh 2019, Table 3.1)" : ""));
}

/// Case 7: w = 1 updated `steps` times by delta < ulp(1)/2 in F, by round to nearest,
/// stochastic rounding (mean of 16 seeded runs) and Kahan-compensated updates; theory: round to
/// nearest never moves (Micikevicius et al., ICLR 2018; Zamirai et al., 2020), the exact result
/// is 1 + steps * delta.
template <class F>
void BM_update_stagnation(benchmark::State& state, double delta_value, std::uint64_t steps) {
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
  state.SetLabel(nb::name_of<F>() + " (Micikevicius et al. 2018)");
}

void register_all() {
  using nb::add;
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

int main(int argc, char** argv) { return nb::run(argc, argv, register_all); }
