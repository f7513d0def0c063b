// Shared by the bench/numerics programs: registration of one-shot measurements (the counters
// carry the numbers; the timings are irrelevant) and the program's main.
#pragma once

#include <benchmark/benchmark.h>

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
