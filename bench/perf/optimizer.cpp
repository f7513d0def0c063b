// The mixed-precision optimizer's step (docs/optim.md): the unscale + finite-check pass and the update
// pass over every parameter, timed together, as GB/s of the bytes the step reads and writes,
// against memcpy of the same number of bytes in the same run.
//
// Bytes per parameter (read + written), with G the gradient, M the master, S the parameter type:
//   unscale: G read;  update: G + M + k*M read, M + k*M + S written (k state arrays;
//   no masters: S read instead of M, and no M written).
#include <benchmark/benchmark.h>

#include <cstring>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

constexpr index_t n_params = index_t{1} << 22;  // 4M parameters: streams from memory

template <class P>
struct flat : nn::Module<P> {
  explicit flat(index_t n) { this->register_parameter("w", Shape{n}); }
};

template <class P, class Rule>
void step(benchmark::State& state, Rule rule) {
  using S = typename P::param_type;
  using M = typename P::master_type;
  using G = grad_storage_t<P, S>;
  flat<P> m(n_params);
  auto* p = m.parameters()[0];
  fill_uniform(p->value, -1, 1, 1);
  fill_uniform(p->grad, -1, 1, 2);
  optim::MixedPrecisionOptimizer<P, Rule, optim::StaticLossScaler> opt(m, rule, optim::StaticLossScaler(1024));
  const double k = static_cast<double>(precis::optim::active_states(rule));
  const bool masters = !std::is_same_v<S, M>;
  const double bytes = sizeof(G) + sizeof(G) + (masters ? 2.0 * sizeof(M) + sizeof(S) : 2.0 * sizeof(S)) + 2 * k * sizeof(M);
  for (auto _ : state) {
    benchmark::DoNotOptimize(opt.step());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(n_params) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes_per_param"] = bytes;
  state.SetLabel(P::name());
}

/// memcpy of a buffer as large as the step's traffic: GB/s counts bytes read + written.
void memcpy_baseline(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<unsigned char> a(bytes / 2, 1), b(bytes / 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

const int registered = [] {
  using B16 = pol::named<"bf16-mixed">;
  using H16 = pol::named<"16-mixed">;
  using F32 = pol::named<"32-true">;
  benchmark::RegisterBenchmark("step/sgd/bf16-mixed", [](benchmark::State& s) { step<B16>(s, optim::SGD{.lr = 0.01}); });
  benchmark::RegisterBenchmark("step/sgd_momentum/bf16-mixed", [](benchmark::State& s) { step<B16>(s, optim::SGD{.lr = 0.01, .momentum = 0.9}); });
  benchmark::RegisterBenchmark("step/adam/bf16-mixed", [](benchmark::State& s) { step<B16>(s, optim::Adam{}); });
  benchmark::RegisterBenchmark("step/adam/16-mixed", [](benchmark::State& s) { step<H16>(s, optim::Adam{}); });
  benchmark::RegisterBenchmark("step/adam/32-true", [](benchmark::State& s) { step<F32>(s, optim::Adam{}); });
  benchmark::RegisterBenchmark("memcpy", memcpy_baseline)->Arg(n_params * 16)->Arg(n_params * 28);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
