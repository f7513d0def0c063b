// Numerics cases 5 (dot products) and 9 (docs/numerics.md).
//
// Case 5, dot products: the sqrt(n) u law of Higham & Mary (SIAM J. Sci. Comput. 41(5), 2019)
// for inner products computed in F (each product and each addition rounded once to nearest,
// recursively), x and y drawn U[0,1] or U[-1,1]: backward error |s^ - s| / sum |x_i y_i|
// against u, sqrt(n) u and the worst case gamma_n. Mean of 8 draws.
//
// Case 9: GEMM error vs K for each input format with fp32 accumulation,
// against the block-FMA bound of Blanchard, Higham, Lopez, Mary & Pranesh (SIAM J. Sci. Comput.
// 42(3), 2020). precis's CPU GEMM widens inputs exactly and accumulates one FMA at a time, a
// block FMA with b = 1. Two measurements per point:
//   stored:   error against the exact product of the inputs as stored in the format:
//             bound gamma_K(u32);
//   original: error against the exact product of the fp32 data the inputs were rounded from:
//             bound 2 u_low + u_low^2 + (1 + u_low)^2 gamma_K(u32).
// The error is max_ij |C - C^|_ij / (|A||B|)_ij, the componentwise quantity the bounds bound.
#include <benchmark/benchmark.h>

#include <cmath>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>

#include "common.hpp"

namespace {

namespace an = precis::analysis;
namespace nb = precis::numerics_bench;
using precis::rounding;

template <class F>
void BM_dot_sqrt_n_law(benchmark::State& state) {
  const auto n = static_cast<precis::index_t>(state.range(0));
  const double lo = state.range(1) == 0 ? 0.0 : -1.0;
  const int draws = 8;
  double err = 0;
  for (auto _ : state) {
    err = 0;
    for (int d = 0; d < draws; ++d) {
      precis::Tensor<F> x({n}), y({n});
      const auto seed = 2000 * static_cast<std::uint64_t>(n) + 2 * static_cast<std::uint64_t>(d);
      precis::fill_uniform(x, lo, 1.0, seed);
      precis::fill_uniform(y, lo, 1.0, seed + 1);
      const auto [exact, mag] = an::reference_dot(x, y);
      precis::xoshiro256pp unused(0);
      const auto len = static_cast<std::size_t>(n);
      const F s = an::dot_in<F>({x.data(), len}, {y.data(), len}, rounding::nearest_even, unused);
      err += static_cast<double>(abs(precis::detail::load<an::exact_t>(s) - exact) / mag) / draws;
    }
  }
  const double u = precis::unit_roundoff<F>();
  nb::report_sqrt_n_law(state, static_cast<double>(n), err, u, precis::bounds::dot(static_cast<double>(n), u));
  state.SetLabel(std::string(precis::format_traits<F>::name) + (lo == 0 ? " U[0,1]" : " U[-1,1]") +
                 " (Higham & Mary 2019)");
}

BENCHMARK_TEMPLATE(BM_dot_sqrt_n_law, precis::half)->Apply(nb::sqrt_n_sizes);
BENCHMARK_TEMPLATE(BM_dot_sqrt_n_law, float)->Apply(nb::sqrt_n_sizes);

/// max_ij |c_ij - ref_ij| / mag_ij
template <class C>
double worst_normalized(const C& c, const precis::Tensor<an::exact_t, an::exact_t>& ref,
                        const precis::Tensor<an::exact_t, an::exact_t>& mag) {
  double worst = 0;
  for (precis::index_t i = 0; i < ref.size(); ++i) {
    const an::exact_t d = abs(precis::detail::load<an::exact_t>(c.data()[i]) - ref.data()[i]);
    worst = std::max(worst, static_cast<double>(d / mag.data()[i]));
  }
  return worst;
}

template <class F>
void BM_gemm_error(benchmark::State& state) {
  const precis::index_t k = state.range(0), m = 4, n = 4;
  precis::Tensor<float> a32({m, k}), b32({k, n});
  precis::fill_uniform(a32, -1, 1, 11);
  precis::fill_uniform(b32, -1, 1, 12);
  const auto a = precis::astype<F>(a32, precis::rounding::nearest_even, precis::overflow::saturate);
  const auto b = precis::astype<F>(b32, precis::rounding::nearest_even, precis::overflow::saturate);
  precis::Tensor<float> c({m, n});
  // The case is the FMA-chain kernels' (one FMA per product: b = 1), the same bits on every
  // x86 CPU with AVX2 or AVX-512. bfloat16 x bfloat16 would otherwise run on the AMX or
  // vdpbf16ps kernels where the CPU has them, which add products in pairs (another block FMA;
  // docs/tensors.md). A lower cap (PRECIS_GEMM_ISA) stands.
  const precis::gemm_isa before = precis::limit_gemm_isa(precis::gemm_isa::avx512);
  if (before < precis::gemm_isa::avx512) precis::limit_gemm_isa(before);
  for (auto _ : state) precis::gemm<float>(1.0f, a, b, 0.0f, c, 1);
  precis::limit_gemm_isa(before);
  const auto [ref_s, mag_s] = an::reference_gemm(a, b);
  const auto [ref_o, mag_o] = an::reference_gemm(a32, b32);
  const double u32 = precis::unit_roundoff<float>();
  const double ulow = std::is_same_v<F, float> ? 0.0 : precis::unit_roundoff<F>();
  const double err_s = worst_normalized(c, ref_s, mag_s);
  const double err_o = worst_normalized(c, ref_o, mag_o);
  const double bound_s = precis::bounds::block_fma(static_cast<double>(k), 1, u32);
  const double bound_o = precis::bounds::block_fma(static_cast<double>(k), 1, u32, ulow);
  state.counters["K"] = static_cast<double>(k);
  state.counters["err_stored"] = err_s;
  state.counters["bound_stored"] = bound_s;
  state.counters["stored_over_bound"] = err_s / bound_s;
  state.counters["err_original"] = err_o;
  state.counters["bound_original"] = bound_o;
  state.counters["original_over_bound"] = err_o / bound_o;
  state.SetLabel(std::string(precis::format_traits<F>::name) + " -> fp32 (Blanchard et al. 2020)");
}

#define PRECIS_KS ->RangeMultiplier(4)->Range(64, 16384)->ArgName("K")->Iterations(1)->Unit(benchmark::kMillisecond)
BENCHMARK_TEMPLATE(BM_gemm_error, precis::half) PRECIS_KS;
BENCHMARK_TEMPLATE(BM_gemm_error, precis::bfloat16) PRECIS_KS;
BENCHMARK_TEMPLATE(BM_gemm_error, precis::float8_e4m3) PRECIS_KS;
BENCHMARK_TEMPLATE(BM_gemm_error, precis::float8_e5m2) PRECIS_KS;
BENCHMARK_TEMPLATE(BM_gemm_error, float) PRECIS_KS;

}  // namespace

BENCHMARK_MAIN();
