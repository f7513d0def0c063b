// Reductions: every summation algorithm and accumulator over a vector, and a row-wise softmax,
// against memcpy of the same input bytes in the same run. bytes_per_second counts the input
// bytes read (for memcpy: the bytes copied).
#include <benchmark/benchmark.h>

#include <cstring>
#include <precis/precis.hpp>

#include "memcpy_baseline.hpp"
#include <vector>

namespace {

template <class S, class Acc, precis::summation Alg>
void BM_sum(benchmark::State& state) {
  const auto n = state.range(0);
  precis::Tensor<S> x({n});
  precis::fill_uniform(x, -1, 1, 1);
  for (auto _ : state) {
    auto s = precis::sum<Acc, Acc>(x, Alg);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(sizeof(S)));
}

/// Row sums of a rows x 1024 matrix (one fiber per row).
template <class S>
void BM_row_sum(benchmark::State& state) {
  const auto rows = state.range(0) / 1024;
  precis::Tensor<S> x({rows, 1024});
  precis::fill_uniform(x, -1, 1, 1);
  for (auto _ : state) {
    auto s = precis::sum<float>(x, 1, precis::summation::pairwise);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * 1024 * static_cast<std::int64_t>(sizeof(S)));
}

template <class S>
void BM_softmax(benchmark::State& state) {
  const auto rows = state.range(0) / 1024;
  precis::Tensor<S> x({rows, 1024});
  precis::fill_uniform(x, -4, 4, 1);
  for (auto _ : state) {
    auto s = precis::softmax<float>(x, 1);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * 1024 * static_cast<std::int64_t>(sizeof(S)));
}

void BM_memcpy(benchmark::State& state) { time_memcpy(state, 1); }

using precis::summation;
#define PRECIS_SIZES ->Arg(1 << 16)->Arg(1 << 24)->UseRealTime()
BENCHMARK_TEMPLATE(BM_sum, float, float, summation::recursive) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_sum, float, float, summation::pairwise) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_sum, float, float, summation::compensated) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_sum, float, double, summation::recursive) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_sum, precis::half, float, summation::pairwise) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_sum, precis::bfloat16, float, summation::pairwise) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_row_sum, float) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_softmax, float) PRECIS_SIZES;
BENCHMARK(BM_memcpy)->Arg(2 << 16)->Arg(4 << 16)->Arg(2 << 24)->Arg(4 << 24)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
