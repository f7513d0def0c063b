// Shared by the bench/numerics programs: registration of one-shot measurements (the counters
// carry the numbers; the timings are irrelevant) and the program's main.
#pragma once

#include <benchmark/benchmark.h>

#include <cmath>
#include <string>

#include "precis/format/format_traits.hpp"

namespace precis::numerics_bench {

/// Registers fn(state, args...) as a benchmark that runs once.
template <class Fn, class... Args>
void add(const std::string& name, Fn fn, Args... args) {
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { fn(st, args...); })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

template <class F>
std::string name_of() {
  return std::string(format_traits<F>::name);
}

/// The sqrt(n) u law studies (numerics case 5): n = 64 .. 65536 by 4, U[0,1] data (signed:0)
/// and U[-1,1] data (signed:1).
inline void sqrt_n_sizes(benchmark::internal::Benchmark* b) {
  for (long dist : {0, 1})
    for (long n = 64; n <= (1 << 16); n *= 4) b->Args({n, dist});
  b->ArgNames({"n", "signed"})->Iterations(1)->Unit(benchmark::kMillisecond);
}

/// Counters of a sqrt(n) u law measurement: the backward error against u, sqrt(n) u and the
/// worst-case bound (-1 where it does not exist, n u >= 1).
inline void report_sqrt_n_law(benchmark::State& state, double n, double err, double u, double bound) {
  state.counters["n"] = n;
  state.counters["err"] = err;
  state.counters["err_over_u"] = err / u;
  state.counters["err_over_sqrt_n_u"] = err / (std::sqrt(n) * u);
  state.counters["bound_det"] = std::isinf(bound) ? -1 : bound;
}

/// main() of a program whose benchmarks `register_all` registers.
template <class Register>
int run(int argc, char** argv, Register register_all) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace precis::numerics_bench
