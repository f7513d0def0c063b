// Element-wise kernels against memcpy of the same bytes, measured in the same run.
// bytes_per_second counts every byte read and written (a binary op on n elements moves 3n
// elements; memcpy of b bytes moves 2b). bench/ratios.py --stream prints the ratio table.
#include <benchmark/benchmark.h>

#include <cstring>
#include <precis/precis.hpp>

#include "memcpy_baseline.hpp"
#include <vector>

namespace {

template <class S>
void BM_add(benchmark::State& state) {
  const auto n = state.range(0);
  precis::Tensor<S> a({n}), b({n}), c({n});
  precis::fill_uniform(a, -1, 1, 1);
  precis::fill_uniform(b, -1, 1, 2);
  for (auto _ : state) {
    precis::add(a, b, c);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 3 * static_cast<std::int64_t>(sizeof(S)));
}

/// out = op(a) over range(0) elements drawn uniform on [lo, hi); counts read + write bytes.
template <class S, class Op>
void time_unary(benchmark::State& state, double lo, double hi, Op op) {
  const auto n = state.range(0);
  precis::Tensor<S> a({n}), c({n});
  precis::fill_uniform(a, lo, hi, 1);
  for (auto _ : state) {
    op(a, c);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * static_cast<std::int64_t>(sizeof(S)));
}

template <class S>
void BM_exp(benchmark::State& state) {
  time_unary<S>(state, -4, 4, [](const auto& a, auto& c) { precis::exp(a, c); });
}

template <class S>
void BM_relu(benchmark::State& state) {
  time_unary<S>(state, -1, 1, [](const auto& a, auto& c) { precis::relu(a, c); });
}

/// Broadcast add of a row vector to a matrix (bias add), rows x 1024.
template <class S>
void BM_bias_add(benchmark::State& state) {
  const auto rows = state.range(0) / 1024;
  precis::Tensor<S> x({rows, 1024}), bias({1024}), y({rows, 1024});
  precis::fill_uniform(x, -1, 1, 1);
  precis::fill_uniform(bias, -1, 1, 2);
  for (auto _ : state) {
    precis::add(x, bias, y);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * rows * 1024 * 2 * static_cast<std::int64_t>(sizeof(S)));
}

/// memcpy of `bytes` = range(0) (counted as read + write).
void BM_memcpy(benchmark::State& state) { time_memcpy(state, 2); }

// 2^16 elements (L2-resident) and 2^24 (main memory).
#define PRECIS_SIZES ->Arg(1 << 16)->Arg(1 << 24)->UseRealTime()
BENCHMARK_TEMPLATE(BM_add, float) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_add, precis::bfloat16) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_add, precis::half) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_relu, float) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_relu, precis::bfloat16) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_exp, float) PRECIS_SIZES;
BENCHMARK_TEMPLATE(BM_bias_add, float) PRECIS_SIZES;
// memcpy of the byte counts above: 2^16 and 2^24 floats (3/2 of them for a binary op's traffic),
// and the 16-bit equivalents
BENCHMARK(BM_memcpy)->Arg(2 << 16)->Arg(3 << 16)->Arg(4 << 16)->Arg(6 << 16)->Arg(2 << 24)->Arg(3 << 24)->Arg(4 << 24)->Arg(6 << 24)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
