// The op layer at the demo's shapes, against the GEMM at the same FLOPs in the same run:
//  - conv2d forward + backward (dx, dw, db) on a tape, for the CNN's two convolutions at batch
//    128, under 32-true and bf16-mixed; the baseline is precis's GEMM (gemm_blocked<float>) on
//    the three products conv2d lowers to (forward [O, K] x [K, N Ho Wo], dW and dcol), so
//    conv_time / gemm_time is the cost of im2col, col2im, the rounding and the tape;
//  - one pre-LN transformer block of the demo's ViT (16 tokens, width 64, 4 heads, MLP 128),
//    forward + backward at batch 128, under 32-true and bf16-mixed, beside the GEMM time of its
//    projections and MLP at the same shapes;
//  - batch norm (training) forward + backward on the convolutions' outputs, beside relu's on the
//    same tensor (one element-wise op's passes over the data).
// Counters: GFLOP/s of the convolution (2 N O Ho Wo C kh kw per product, 3 products).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <precis/nn/nn.hpp>
#include <precis/precis.hpp>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

struct conv_case {
  index_t n, c, h, o;
};
// the demo CNN's convolutions: 1 -> 16 channels at 28x28, 16 -> 32 at 14x14 (3x3, padding 1)
constexpr std::array<conv_case, 2> cases{{{128, 1, 28, 16}, {128, 16, 14, 32}}};

double conv_flops(const conv_case& k) { return 3.0 * 2.0 * static_cast<double>(k.n * k.o * k.h * k.h * k.c * 9); }

template <class P>
void BM_conv2d_fwd_bwd(benchmark::State& state) {
  const conv_case k = cases[static_cast<std::size_t>(state.range(0))];
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  Tensor<S> x(Shape{k.n, k.c, k.h, k.h}), w(Shape{k.o, k.c, 3, 3}), b(Shape{k.o});
  fill_uniform(x.view(), -1, 1, 1);
  fill_uniform(w.view(), -0.3, 0.3, 2);
  Tensor<G> gx(x.shape()), gw(w.shape()), gb(b.shape());
  Tape<P> tape;
  const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
  for (auto _ : state) {
    tape.reset();
    const auto xv = tape.param(x.view(), gx.view());
    const auto y = conv2d(xv, tape.param(w.view(), gw.view()), tape.param(b.view(), gb.view()), same);
    tape.backward(sum(y));
    benchmark::DoNotOptimize(gw.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(conv_flops(k) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// conv2d's forward alone (recorded on a tape for a backward, as in training): the direct kernel where it
/// applies, else im2col and the GEMM.
template <class P>
void BM_conv2d_forward(benchmark::State& state) {
  const conv_case k = cases[static_cast<std::size_t>(state.range(0))];
  using S = typename P::param_type;
  Tensor<S> x(Shape{k.n, k.c, k.h, k.h}), w(Shape{k.o, k.c, 3, 3}), b(Shape{k.o});
  fill_uniform(x.view(), -1, 1, 1);
  fill_uniform(w.view(), -0.3, 0.3, 2);
  Tensor<grad_storage_t<P, S>> gw(w.shape()), gb(b.shape());
  Tape<P> tape;
  const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
  for (auto _ : state) {  // x as the first convolution's input (no gradient), w and b as parameters
    tape.reset();
    const auto y = conv2d(tape.borrow(x.view()), tape.param(w.view(), gw.view()), tape.param(b.view(), gb.view()), same);
    benchmark::DoNotOptimize(y.value().data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(conv_flops(k) / 3 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// The forward's GEMM alone ([O, K] x [K, N Ho Wo], float), at the same shapes.
void BM_conv2d_gemm_forward_baseline(benchmark::State& state) {
  const conv_case k = cases[static_cast<std::size_t>(state.range(0))];
  const index_t kk = k.c * 9, cols = k.n * k.h * k.h;
  Tensor<float> wm(Shape{k.o, kk}), col(Shape{kk, cols}), y(Shape{k.o, cols});
  fill_uniform(wm.view(), -1, 1, 3);
  fill_uniform(col.view(), -1, 1, 4);
  const int threads = detail::default_gemm_threads(k.o, cols, kk);
  for (auto _ : state) {
    detail::gemm_blocked<float>(k.o, cols, kk, 1.0f, wm.data(), kk, 1, col.data(), cols, 1, 0.0f, y.data(), cols, 1, threads);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(conv_flops(k) / 3 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// The three GEMMs conv2d lowers to, in float, at the same shapes.
void BM_conv2d_gemm_baseline(benchmark::State& state) {
  const conv_case k = cases[static_cast<std::size_t>(state.range(0))];
  const index_t kk = k.c * 9, cols = k.n * k.h * k.h;
  Tensor<float> wm(Shape{k.o, kk}), col(Shape{kk, cols}), y(Shape{k.o, cols}), dw(Shape{k.o, kk}), dcol(Shape{kk, cols});
  fill_uniform(wm.view(), -1, 1, 3);
  fill_uniform(col.view(), -1, 1, 4);
  const int threads = detail::default_gemm_threads(k.o, cols, kk);
  for (auto _ : state) {
    detail::gemm_blocked<float>(k.o, cols, kk, 1.0f, wm.data(), kk, 1, col.data(), cols, 1, 0.0f, y.data(), cols, 1, threads);
    detail::gemm_blocked<float>(k.o, kk, cols, 1.0f, y.data(), cols, 1, col.data(), 1, cols, 0.0f, dw.data(), kk, 1, threads);
    detail::gemm_blocked<float>(kk, cols, k.o, 1.0f, wm.data(), 1, kk, y.data(), cols, 1, 0.0f, dcol.data(), cols, 1, threads);
    benchmark::DoNotOptimize(dcol.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(conv_flops(k) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

template <class P>
void BM_transformer_block(benchmark::State& state) {
  using S = typename P::param_type;
  nn::TransformerBlock<P> block(64, 4, 2, 1);
  Tensor<S> x(Shape{128, 16, 64});
  fill_uniform(x.view(), -1, 1, 5);
  Tape<P> tape;
  for (auto _ : state) {
    tape.reset();
    block.zero_grad();
    tape.backward(sum(block(tape.input(x, true))));
    benchmark::DoNotOptimize(tape.nodes());
  }
  // projections 4 x (2048 x 64 x 64) and MLP 2 x (2048 x 64 x 128), forward and two backward
  const double flops = 3.0 * 2.0 * 2048 * (4 * 64 * 64 + 2 * 64 * 128);
  state.counters["GFLOP/s (GEMMs)"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// The block's GEMMs alone (float), forward and backward shapes.
void BM_transformer_block_gemm_baseline(benchmark::State& state) {
  const index_t m = 2048;
  Tensor<float> x(Shape{m, 128}), w(Shape{128, 128}), y(Shape{m, 128}), dw(Shape{128, 128}), dx(Shape{m, 128});
  fill_uniform(x.view(), -1, 1, 6);
  fill_uniform(w.view(), -1, 1, 7);
  const auto run = [&](index_t in, index_t out) {
    const int t = detail::default_gemm_threads(m, out, in);
    detail::gemm_blocked<float>(m, out, in, 1.0f, x.data(), 128, 1, w.data(), 1, 128, 0.0f, y.data(), 128, 1, t);
    detail::gemm_blocked<float>(out, in, m, 1.0f, y.data(), 1, 128, x.data(), 128, 1, 0.0f, dw.data(), 128, 1, t);
    detail::gemm_blocked<float>(m, in, out, 1.0f, y.data(), 128, 1, w.data(), 128, 1, 0.0f, dx.data(), 128, 1, t);
  };
  for (auto _ : state) {
    for (int i = 0; i < 4; ++i) run(64, 64);
    run(64, 128);
    run(128, 64);
    benchmark::DoNotOptimize(dx.data());
  }
  const double flops = 3.0 * 2.0 * 2048 * (4 * 64 * 64 + 2 * 64 * 128);
  state.counters["GFLOP/s (GEMMs)"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// batch_norm (training) forward + backward on a tape, on the CNN's convolution outputs (case 0:
/// [128, 16, 28, 28], case 1: [128, 32, 14, 14]); the same tensor's relu forward + backward
/// (BM_relu_fwd_bwd) is the baseline: one element-wise op's passes over the data.
template <class P, bool Norm>
void bn_or_relu(benchmark::State& state) {
  const conv_case k = cases[static_cast<std::size_t>(state.range(0))];
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  Tensor<S> x(Shape{k.n, k.o, k.h, k.h}), gamma(Shape{k.o}), beta(Shape{k.o});
  fill_uniform(x.view(), -1, 1, 8);
  fill_uniform(gamma.view(), 0.5, 1.5, 9);
  fill_uniform(beta.view(), -0.5, 0.5, 10);
  Tensor<G> gx(x.shape()), gg(gamma.shape()), gb(beta.shape());
  Tape<P> tape;
  for (auto _ : state) {
    tape.reset();
    const auto xv = tape.param(x.view(), gx.view());
    if constexpr (Norm) {
      tape.backward(sum(batch_norm(xv, tape.param(gamma.view(), gg.view()), tape.param(beta.view(), gb.view()))));
    } else {
      tape.backward(sum(relu(xv)));
    }
    benchmark::DoNotOptimize(gx.data());
  }
  state.counters["Melem/s"] = benchmark::Counter(static_cast<double>(x.size()) * 1e-6, benchmark::Counter::kIsIterationInvariantRate);
}
template <class P>
void BM_batch_norm_fwd_bwd(benchmark::State& state) { bn_or_relu<P, true>(state); }
template <class P>
void BM_relu_fwd_bwd(benchmark::State& state) { bn_or_relu<P, false>(state); }

}  // namespace

BENCHMARK(BM_conv2d_gemm_baseline)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_conv2d_gemm_forward_baseline)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_conv2d_forward, pol::named<"32-true">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_conv2d_forward, pol::named<"bf16-mixed">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_conv2d_fwd_bwd, pol::named<"32-true">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_conv2d_fwd_bwd, pol::named<"bf16-mixed">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_transformer_block_gemm_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_transformer_block, pol::named<"32-true">)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_transformer_block, pol::named<"bf16-mixed">)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_relu_fwd_bwd, pol::named<"32-true">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_batch_norm_fwd_bwd, pol::named<"32-true">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_relu_fwd_bwd, pol::named<"bf16-mixed">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_batch_norm_fwd_bwd, pol::named<"bf16-mixed">)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
