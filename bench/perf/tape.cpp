// The tape's cost:
//  - per-op overhead: forward + backward of a chain of ops on 8-element tensors, in ns per op,
//    beside the same element-wise math run straight through the tensor engine (no tape) in the
//    same run;
//  - one training step (forward, backward, SGD) of an MLP 784-512-512-10 with ReLU and
//    cross-entropy, batch 128 and 32, under 32-true and bf16-mixed, 1 and 2 threads, with its
//    GFLOP/s against the measured FMA peak; bf16-mixed keeps fp32 master weights;
//  - peak heap bytes of a step at batch 512 (parameters, gradients, masters, data, tape), from
//    the global allocator replaced below.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <precis/nn/nn.hpp>
#include <precis/precis.hpp>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

// ---- live-byte accounting: each block carries its size in a 64-byte header ------------------
namespace {
std::atomic<std::size_t> g_live{0}, g_peak{0};

void* counted_alloc(std::size_t n) {
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(64, (n + 64 + 63) / 64 * 64));
  if (raw == nullptr) throw std::bad_alloc();
  *reinterpret_cast<std::size_t*>(raw) = n;
  const std::size_t live = g_live.fetch_add(n) + n;
  std::size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return raw + 64;
}
void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  auto* raw = static_cast<unsigned char*>(p) - 64;
  g_live.fetch_sub(*reinterpret_cast<std::size_t*>(raw));
  std::free(raw);
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, std::align_val_t) { return counted_alloc(n); }  // alignment <= 64 here
void* operator new[](std::size_t n, std::align_val_t) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }

using namespace precis;
namespace pol = precis::policy;

namespace {

void set_threads(int n) {
#if defined(_OPENMP)
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

// ---- per-op overhead --------------------------------------------------------------------------

constexpr int chain_ops = 64;  // 16 rounds of add, mul, sub, mul: cheap math, so the time is the bookkeeping

template <class P>
void tape_chain(benchmark::State& state) {
  set_threads(1);
  using S = typename P::param_type;
  Tensor<S> a(Shape{8}), b(Shape{8}), ga(Shape{8}), gb(Shape{8});
  fill_uniform(a, -1, 1, 1);
  fill_uniform(b, -1, 1, 2);
  Tape<P> t;
  for (auto _ : state) {
    t.reset();
    auto x = t.param(a.view(), ga.view());
    const auto y = t.param(b.view(), gb.view());
    for (int i = 0; i < chain_ops / 4; ++i) x = mul(sub(mul(add(x, y), y), y), y);
    // the chain's last value is [8]; seed it directly (no extra reduction op)
    t.backward(x, b);
    benchmark::DoNotOptimize(ga.data());
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(chain_ops) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

/// The same forward math through the tensor engine into preallocated buffers: the floor the
/// tape's bookkeeping adds to.
void engine_chain(benchmark::State& state) {
  set_threads(1);
  Tensor<float> a(Shape{8}), b(Shape{8}), x(Shape{8});
  fill_uniform(a, -1, 1, 1);
  fill_uniform(b, -1, 1, 2);
  for (auto _ : state) {
    x.copy_from(a.view());
    for (int i = 0; i < chain_ops / 4; ++i) {
      map_into<float>("add", x.view(), fn::add{}, x.view().as_const(), b.view().as_const());
      map_into<float>("mul", x.view(), fn::mul{}, x.view().as_const(), b.view().as_const());
      map_into<float>("sub", x.view(), fn::sub{}, x.view().as_const(), b.view().as_const());
      map_into<float>("mul", x.view(), fn::mul{}, x.view().as_const(), b.view().as_const());
    }
    benchmark::DoNotOptimize(x.data());
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(chain_ops) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ---- the MLP training step --------------------------------------------------------------------

/// A model, its data and (for mixed policies) fp32 master weights.
constexpr index_t update_chunk = 16384;

template <class P, class Data = float>
struct trainer {
  using S = typename P::param_type;
  static constexpr bool has_masters = !std::is_same_v<S, typename P::master_type>;
  nn::MLP<P> net{{784, 512, 512, 10}, nn::activation::relu, 7};
  std::vector<typename nn::Module<P>::parameter*> params = net.parameters();
  std::vector<Tensor<typename P::master_type>> masters;
  Tensor<float> grad_f32;  // a gradient widened for the master update (largest parameter)
  Tensor<Data> x;
  std::vector<std::int64_t> labels;
  Tape<P> tape;

  explicit trainer(index_t batch) : x(Shape{batch, 784}), labels(static_cast<std::size_t>(batch)) {
    fill_uniform(x, 0, 1, 3);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
    if constexpr (has_masters) {
      for (auto* p : params) {
        Tensor<typename P::master_type> m(p->value.shape());
        for (index_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(p->value.data()[i]);
        masters.push_back(std::move(m));
      }
      grad_f32 = Tensor<float>(Shape{update_chunk});
    }
  }

  double step(float lr) {
    tape.reset();
    net.zero_grad();
    auto loss = cross_entropy(net(tape.borrow(x)), labels);
    tape.backward(loss);
    for (std::size_t k = 0; k < params.size(); ++k) {
      auto* p = params[k];
      const index_t n = p->value.size();
      if constexpr (has_masters) {  // update the fp32 master, store it rounded once
        for (index_t i0 = 0; i0 < n; i0 += update_chunk) {
          const index_t len = std::min(update_chunk, n - i0);
          float* m = masters[k].data() + i0;
          float* g = grad_f32.data();
          const auto un = static_cast<std::size_t>(len);
          convert(std::span<const S>(p->grad.data() + i0, un), std::span<float>(g, un));
          for (index_t i = 0; i < len; ++i) m[i] -= lr * g[i];
          convert(std::span<const float>(m, un), std::span<S>(p->value.data() + i0, un));
        }
      } else {
        for (index_t i = 0; i < n; ++i) p->value.data()[i] -= static_cast<S>(lr) * p->grad.data()[i];
      }
    }
    return loss.item();
  }
};

double step_flops(index_t batch) {
  const double b = static_cast<double>(batch);
  const double fwd = 2 * b * (784.0 * 512 + 512.0 * 512 + 512.0 * 10);
  const double dw = fwd;                                  // weight gradients of all three layers
  const double dx = 2 * b * (512.0 * 512 + 512.0 * 10);  // input gradients of layers 2 and 3
  return fwd + dw + dx;
}

template <class P>
void mlp_step(benchmark::State& state) {
  const index_t batch = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  set_threads(threads);
  trainer<P> tr(batch);
  tr.step(0.01f);  // warm-up: the arena reaches its steady size
  for (auto _ : state) benchmark::DoNotOptimize(tr.step(0.01f));
  state.counters["GFLOP/s"] =
      benchmark::Counter(step_flops(batch) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ms_per_step"] = benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(P::name());
}

/// Peak live heap bytes during a steady-state step (after two warm-up steps): parameters,
/// gradients, masters, the tape's memory; the batch itself is the caller's and not counted.
/// tape_MB: the tape's arenas (activations, their gradients, workspaces). Data: the batch's
/// storage (fp32, or the policy's activation type, as a 16-bit data pipeline would deliver it).
template <class P, class Data = float>
void mlp_memory(benchmark::State& state) {
  const index_t batch = state.range(0);
  set_threads(1);
  for (auto _ : state) {
    state.PauseTiming();
    trainer<P, Data> tr(batch);
    tr.step(0.01f);
    tr.step(0.01f);
    const std::size_t data = static_cast<std::size_t>(tr.x.size()) * sizeof(Data) + tr.labels.size() * sizeof(std::int64_t);
    g_peak.store(g_live.load());
    tr.step(0.01f);
    state.counters["peak_MB"] = static_cast<double>(g_peak.load() - data) / 1e6;
    state.counters["tape_MB"] = static_cast<double>(tr.tape.arena().peak_bytes() + tr.tape.scratch_arena().peak_bytes() +
                                                    tr.tape.state_arena().peak_bytes()) / 1e6;
    state.ResumeTiming();
  }
  state.SetLabel(P::name());
}

const int registered = [] {
  benchmark::RegisterBenchmark("tape_chain/32-true", tape_chain<pol::named<"32-true">>);
  benchmark::RegisterBenchmark("tape_chain/bf16-mixed", tape_chain<pol::named<"bf16-mixed">>);
  benchmark::RegisterBenchmark("engine_chain/float", engine_chain);
  for (int threads : {1, 2}) {
    for (index_t batch : {128, 32}) {
      benchmark::RegisterBenchmark("mlp_step/32-true", mlp_step<pol::named<"32-true">>)
          ->Args({batch, threads})->ArgNames({"batch", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark("mlp_step/bf16-mixed", mlp_step<pol::named<"bf16-mixed">>)
          ->Args({batch, threads})->ArgNames({"batch", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("mlp_memory/32-true", mlp_memory<pol::named<"32-true">>)
      ->Arg(512)->ArgNames({"batch"})->Iterations(1)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("mlp_memory/bf16-mixed", mlp_memory<pol::named<"bf16-mixed">>)
      ->Arg(512)->ArgNames({"batch"})->Iterations(1)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("mlp_memory/bf16-mixed-bf16-data", mlp_memory<pol::named<"bf16-mixed">, bfloat16>)
      ->Arg(512)->ArgNames({"batch"})->Iterations(1)->Unit(benchmark::kMillisecond);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
