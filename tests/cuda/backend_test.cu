// The op layer's device backend (include/precis/cuda/backend.cuh): the op definitions of
// precis/ops run unchanged with precis::op::cuda on device memory. Without --device (label
// `cuda`, runs in CI without a GPU): an fp8 GEMM without scaling state is a named error, and a
// DeviceArena without a device is a named cuda_error. With --device (label `gpu`; exit 77,
// skipped, without a device), each definition run through op::cuda on device copies of the data
// and through op::cpu on the host:
// - relu (bf16-mixed) forward and backward, its gradient handed over uninitialized and fresh:
//   the host's bits;
// - add with a broadcast operand (bf16-mixed) forward and backward: the full-shape gradient the
//   host's bits, the broadcast one (a sum over rows in fp32, in another order) within
//   gamma(rows - 1) + gamma(ceil(rows / 32) + 5) times the sum of magnitudes (the host's running
//   sum and the device's warp order) plus their roundings to bf16;
// - linear with bias (32-true, [128, 784] x [256, 784]^T), forward and backward: within the
//   GEMMs' gamma(K) times the sum of the products' magnitudes of the host's results, on each
//   side of the exact ones, and the bias gradient within the two sums' bounds;
// - a second step on the same arenas allocates nothing;
// - a Tape<cuda::on_device<P>> (32-true, bf16-mixed, 16-mixed) records and differentiates a small
//   model of context-only ops (linear, relu, add, mul, gelu, where, masked_fill, matmul, cat,
//   transposes, cross_entropy; the seed a scalar on the first step and a device value on the second) on
//   device memory: its loss and gradients within a first-order bound of the host tape's (each
//   value crosses at most 14 roundings into its storage on the way from a parameter to the loss
//   and back, and every sum, at most 20 terms, may run in another order: 2 (14 u_storage +
//   2 gamma_20(u_fp32)) relative, normwise), and its second step allocates no device memory;
// - sum, mean, norm, logsumexp (over an axis and over everything), softmax and log_softmax
//   (along rows, columns and a transposed view), layer_norm, causal attention, two-head attention
//   (on the device both fused into one launch each way), max, min, nll,
//   dropout, embedding and mse on Tape<cuda::on_device<P>> (32-true, bf16-mixed, 64-true):
//   loss and gradients within
//   2 (24 u_storage + 2 gamma_60(u_acc) + 16 u_acc) of the host tape's (roundings into
//   storage, another summation order, and exp and log within 2 ulps on each side);
// - sum, mean, norm and logsumexp of all of a [2048, 1024] tensor and along the long axis of a
//   [65536, 3] one (the device splits such fibers into ranges): within 2 (gamma_89 + 4 u) of
//   the host's, relative to the terms' magnitudes (logsumexp: absolute), plus the roundings;
// - conv2d (grouped and strided; dilated, with bias), max pooling (2 x 2 and padded 3 x 3),
//   average pooling, batch_norm in training (running estimates in device memory) and in
//   evaluation, and bmm on Tape<cuda::on_device<P>> (32-true, bf16-mixed, 16-mixed, 64-true):
//   loss, gradients and running estimates within 2 (30 u_storage + 2 gamma_256(u_acc) +
//   16 u_acc) of the host tape's;
// - an nn::MLP on the device has the host module's initial bits, and one step's loss and
//   gradients are within the tape's bound of the host's; zero_grad on a stream zeroes them;
// - a whole training step (tape.reset, the forward of an nn::MLP, or of a small CNN of Conv2d,
//   BatchNorm2d, max pooling and Linear, with borrowed batch and labels, the backward seeded
//   with the device optimizer's loss scale, opt.step, opt.zero_grad) is captured
//   into a CUDA graph in cudaStreamCaptureModeGlobal, which fails on any synchronizing call, so
//   the step has none; three replays leave the parameters (and batch norm's running estimates),
//   the loss scale and the update count
//   with the bits of three more eager steps (bf16-mixed, and 16-mixed with its dynamic scale,
//   whose first steps may be skipped: at least one of the five must apply), and under
//   fp8-mixed (current scaling: MLP and CNN; delayed scaling: MLP, its scale update a kernel);
// - fp8 casts on the device (cuda::fp8_scaling_state) under current scaling (plain; powers of
//   two with a margin), delayed scaling (max and most-recent histories) and no scaling: the
//   host's bits, scales, statistics and amax histories, step by step;
// - linear under fp8-mixed through op::cuda: the host's fp8 operands and scales; outputs and
//   gradients within (gamma_K(2^-13) + gamma_K(u_fp32) + 2 u_fp32) sum |a b| alpha of the
//   host's (Hopper's fp8 tensor cores keep about 14 bits of a sum).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <precis/cuda/backend.cuh>
#include <precis/cuda/optim.cuh>
#include <precis/nn/nn.hpp>
#include <precis/precis.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support.cuh"

namespace {

using cuda_test::check;
using cuda_test::failures;
using precis::index_t;
using precis::Shape;
namespace pc = precis::cuda;

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

int run_host() {
  pc::DeviceArena temp, keep;  // no allocation yet
  const precis::op::cuda ctx(temp, keep, false);
  // the device reductions take what the tape calls contiguous: an axis of extent 1 may have any
  // stride (the transpose of an [n, 1] tensor, [1, n] with strides [1, 1], is dense)
  float* const nowhere = nullptr;
  check(pc::fiber_detail::dense(pc::DeviceView<float>(nowhere, Shape{1, 5}, Shape{1, 1})), "[1, 5] with strides [1, 1] is dense");
  check(pc::fiber_detail::dense(pc::DeviceView<float>(nowhere, Shape{4, 1, 3}, Shape{3, 7, 1})), "[4, 1, 3] with strides [3, 7, 1] is dense");
  check(!pc::fiber_detail::dense(pc::DeviceView<float>(nowhere, Shape{3, 4}, Shape{1, 3})), "a transposed [4, 3] is not dense");
  check(!pc::fiber_detail::dense(pc::DeviceView<float>(nowhere, Shape{2, 3}, Shape{4, 1})), "rows 4 apart are not dense");
  try {
    ctx.fp8_gemm("linear");
    check(false, "fp8_gemm without scaling state did not throw");
  } catch (const precis::invalid_argument& e) {
    check(std::string(e.what()).find("precis::linear: an fp8 GEMM without fp8 scaling state") != std::string::npos,
          std::string("message: ") + e.what());
  }
  if (pc::device_count() == 0) {
    try {
      temp.allocate(16);
      check(false, "allocating without a device did not throw");
    } catch (const pc::cuda_error& e) {
      check(std::string(e.what()).find("cudaMalloc") != std::string::npos, std::string("message: ") + e.what());
    }
  }
  std::printf("%s\n", failures == 0 ? "host checks: the device context names what it lacks" : "failed");
  return failures == 0 ? 0 : 1;
}

/// A host tensor and its device copy.
template <class S>
struct pair_t {
  precis::Tensor<S> h;
  pc::DeviceTensor<S> d;
  explicit pair_t(const precis::Tensor<S>& t) : h(t), d(pc::DeviceTensor<S>::from_host(t)) {}
  precis::TensorView<S> hv() { return h.view(); }
  precis::TensorView<S> dv() { return precis::TensorView<S>(d.data(), d.shape()); }
};

template <class S>
precis::Tensor<S> random(const Shape& s, std::mt19937& rng, float sd = 1.0f) {
  precis::Tensor<S> t(s);
  std::normal_distribution<float> nd(0.0f, sd);
  for (auto& v : t) v = precis::detail::store<S>(nd(rng));
  return t;
}

template <class T>
precis::Tensor<T> back(const pc::DeviceTensor<T>& d) {
  pc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return d.to_host();
}

template <class T>
int mismatches(const precis::Tensor<T>& a, const precis::Tensor<T>& b) {
  int bad = 0;
  for (index_t i = 0; i < a.size(); ++i) bad += !same_bits(a.data()[i], b.data()[i]);
  return bad;
}

void relu_and_add(pc::DeviceArena& dtemp, pc::DeviceArena& dkeep) {
  using P = precis::policy::named<"bf16-mixed">;
  using S = precis::bfloat16;
  std::mt19937 rng(8);
  precis::Arena htemp, hkeep;
  const precis::op::cpu hctx(htemp, hkeep, true);
  const precis::op::cuda dctx(dtemp, dkeep, true);
  const Shape xs{64, 33};
  pair_t<S> x(random<S>(xs, rng)), gy(random<S>(xs, rng)), b(random<S>(Shape{33}, rng));

  // relu
  using TR = precis::detail::ad::op_types_t<precis::op::relu, P, S>;
  using OR = typename TR::output;
  pair_t<OR> y{precis::Tensor<OR>(xs)};
  typename precis::op::relu::template saved<TR> sv{};
  precis::op::relu::forward<TR>(hctx, {}, y.hv(), sv, x.hv().as_const());
  precis::op::relu::forward<TR>(dctx, {}, y.dv(), sv, x.dv().as_const());
  check(mismatches(back(y.d), y.h) == 0, "relu forward: the host's bits");
  pair_t<S> gx{precis::Tensor<S>(xs)};
  for (auto& v : gx.h) v = S(1e30f);  // an uninitialized buffer: fresh writes must not read it
  gx.d.copy_from(gx.h);
  hctx.mark_fresh(gx.h.data(), sizeof(S) * static_cast<std::size_t>(gx.h.size()), false);
  dctx.mark_fresh(gx.d.data(), sizeof(S) * static_cast<std::size_t>(gx.h.size()), false);
  precis::op::relu::backward<TR>(hctx, {}, sv, gy.hv().as_const(), y.hv().as_const(), std::tuple{x.hv().as_const()},
                                 std::tuple{gx.hv()});
  precis::op::relu::backward<TR>(dctx, {}, sv, gy.dv().as_const(), y.dv().as_const(), std::tuple{x.dv().as_const()},
                                 std::tuple{gx.dv()});
  hctx.settle_fresh();
  dctx.settle_fresh();
  check(mismatches(back(gx.d), gx.h) == 0, "relu backward into a fresh uninitialized gradient: the host's bits");

  // add, b broadcast over rows
  using TA = precis::detail::ad::op_types_t<precis::op::add, P, S, S>;
  using OA = typename TA::output;
  pair_t<OA> ya{precis::Tensor<OA>(xs)};
  typename precis::op::add::template saved<TA> sa{};
  precis::op::add::forward<TA>(hctx, {}, ya.hv(), sa, x.hv().as_const(), b.hv().as_const());
  precis::op::add::forward<TA>(dctx, {}, ya.dv(), sa, x.dv().as_const(), b.dv().as_const());
  check(mismatches(back(ya.d), ya.h) == 0, "add forward (broadcast): the host's bits");
  pair_t<S> ga{precis::Tensor<S>(xs)}, gb{precis::Tensor<S>(Shape{33})};  // zero: added into
  precis::op::add::backward<TA>(hctx, {}, sa, gy.hv().as_const(), ya.hv().as_const(), std::tuple{x.hv().as_const(), b.hv().as_const()},
                                std::tuple{ga.hv(), gb.hv()});
  precis::op::add::backward<TA>(dctx, {}, sa, gy.dv().as_const(), ya.dv().as_const(), std::tuple{x.dv().as_const(), b.dv().as_const()},
                                std::tuple{ga.dv(), gb.dv()});
  check(mismatches(back(ga.d), ga.h) == 0, "add backward, the full-shape operand: the host's bits");
  const auto gbd = back(gb.d);
  const double u = std::ldexp(1.0, -24), ub = std::ldexp(1.0, -8);
  const double n = static_cast<double>((xs[0] + 31) / 32 + 5);
  int bad = 0;
  for (index_t j = 0; j < 33; ++j) {
    double exact = 0, mag = 0;
    for (index_t i = 0; i < xs[0]; ++i) {
      const double v = static_cast<double>(static_cast<float>(gy.h(i, j)));
      exact += v;
      mag += std::fabs(v);
    }
    // each side within its own bound of the exact sum (the host's running sum over the rows,
    // the device's warp order), plus each one's rounding to bf16
    const double nh = static_cast<double>(xs[0] - 1);
    const double tol = (nh * u / (1 - nh * u) + n * u / (1 - n * u)) * mag * (1 + ub) + 2 * ub * std::fabs(exact);
    bad += !(std::fabs(static_cast<double>(static_cast<float>(gbd.data()[j])) - static_cast<double>(static_cast<float>(gb.h.data()[j]))) <= tol);
  }
  check(bad == 0, "add backward, the broadcast operand: " + std::to_string(bad) + " sums outside the bound");
}

void linear(pc::DeviceArena& dtemp, pc::DeviceArena& dkeep) {
  using P = precis::policy::named<"32-true">;
  std::mt19937 rng(9);
  precis::Arena htemp, hkeep;
  const precis::op::cpu hctx(htemp, hkeep, true);
  const precis::op::cuda dctx(dtemp, dkeep, true);
  const index_t m = 128, k = 784, n = 256;
  pair_t<float> x(random<float>(Shape{m, k}, rng)), w(random<float>(Shape{n, k}, rng, 0.05f)), b(random<float>(Shape{n}, rng));
  using T = precis::detail::ad::op_types_t<precis::op::linear, P, float, float, float>;
  pair_t<float> y{precis::Tensor<float>(Shape{m, n})};
  typename precis::op::linear::template saved<T> sh{}, sd{};
  precis::op::linear::forward<T>(hctx, {}, y.hv(), sh, x.hv().as_const(), w.hv().as_const(), b.hv().as_const());
  precis::op::linear::forward<T>(dctx, {}, y.dv(), sd, x.dv().as_const(), w.dv().as_const(), b.dv().as_const());
  const auto yd = back(y.d);
  const double u = std::ldexp(1.0, -24), g = (k + 1) * u / (1 - (k + 1) * u);
  int bad = 0;
  for (index_t i = 0; i < m; ++i) {
    for (index_t j = 0; j < n; ++j) {
      double mag = std::fabs(static_cast<double>(b.h(j)));
      for (index_t t = 0; t < k; ++t) mag += std::fabs(static_cast<double>(x.h(i, t)) * static_cast<double>(w.h(j, t)));
      bad += !(std::fabs(static_cast<double>(yd(i, j)) - static_cast<double>(y.h(i, j))) <= 2 * g * mag);
    }
  }
  check(bad == 0, "linear forward: " + std::to_string(bad) + " outputs outside 2 gamma(k + 1) sum |x w|");

  // backward into zeroed gradients: gx = gy w (n terms), gw = gy^T x (m terms), gb = column sums
  pair_t<float> gy(random<float>(Shape{m, n}, rng)), gx{precis::Tensor<float>(Shape{m, k})}, gw{precis::Tensor<float>(Shape{n, k})},
      gb{precis::Tensor<float>(Shape{n})};
  precis::op::linear::backward<T>(hctx, {}, sh, gy.hv().as_const(), y.hv().as_const(),
                                  std::tuple{x.hv().as_const(), w.hv().as_const(), b.hv().as_const()}, std::tuple{gx.hv(), gw.hv(), gb.hv()});
  precis::op::linear::backward<T>(dctx, {}, sd, gy.dv().as_const(), y.dv().as_const(),
                                  std::tuple{x.dv().as_const(), w.dv().as_const(), b.dv().as_const()}, std::tuple{gx.dv(), gw.dv(), gb.dv()});
  const auto gxd = back(gx.d), gwd = back(gw.d), gbd = back(gb.d);
  const auto gam = [&](double terms) { return terms * u / (1 - terms * u); };
  int bx = 0, bw = 0, bb = 0;
  for (index_t i = 0; i < m; ++i) {
    for (index_t t = 0; t < k; ++t) {
      double mag = 0;
      for (index_t j = 0; j < n; ++j) mag += std::fabs(static_cast<double>(gy.h(i, j)) * static_cast<double>(w.h(j, t)));
      bx += !(std::fabs(static_cast<double>(gxd(i, t)) - static_cast<double>(gx.h(i, t))) <= 2 * gam(n) * mag);
    }
  }
  for (index_t j = 0; j < n; ++j) {
    for (index_t t = 0; t < k; ++t) {
      double mag = 0;
      for (index_t i = 0; i < m; ++i) mag += std::fabs(static_cast<double>(gy.h(i, j)) * static_cast<double>(x.h(i, t)));
      bw += !(std::fabs(static_cast<double>(gwd(j, t)) - static_cast<double>(gw.h(j, t))) <= 2 * gam(m) * mag);
    }
    double mag = 0;
    for (index_t i = 0; i < m; ++i) mag += std::fabs(static_cast<double>(gy.h(i, j)));
    bb += !(std::fabs(static_cast<double>(gbd(j)) - static_cast<double>(gb.h(j))) <= (gam(m - 1) + gam((m + 31) / 32 + 5)) * mag);
  }
  check(bx == 0 && bw == 0 && bb == 0, "linear backward: " + std::to_string(bx) + " / " + std::to_string(bw) + " / " + std::to_string(bb) +
                                            " of dx / dW / db outside their bounds");
}

/// The model of the fenced-backend test (autodiff/backend_test.cpp) on a tape of policy P, its
/// parameters in device memory when Device: two steps; the first step's loss, every parameter's
/// gradient and the input's, and the tape's arena capacity after each step.
struct model_result {
  double loss = 0;
  std::vector<std::vector<double>> grads;
  std::size_t cap1 = 0, cap2 = 0;
};

template <class T>
std::vector<double> as_doubles(const precis::Tensor<T>& t) {
  std::vector<double> v;
  for (const auto& x : t) v.push_back(static_cast<double>(precis::detail::load<double>(precis::detail::load<precis::default_compute_t<T>>(x))));
  return v;
}

template <class P, bool Device>
model_result run_model() {
  using S = typename P::param_type;
  using G = precis::grad_storage_t<P, S>;
  using X = typename P::activation_type;
  const std::vector<Shape> shapes{{16, 12}, {16}, {16}, {16, 10}, {10, 20}, {10}};
  std::vector<precis::Tensor<S>> values;
  std::vector<precis::Tensor<G>> host_grads;
  std::vector<pc::DeviceTensor<S>> dvalues;
  std::vector<pc::DeviceTensor<G>> dgrads;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    precis::Tensor<S> v(shapes[i]);
    precis::fill_uniform(v, -0.5, 0.5, 11 + i);
    values.push_back(v);
    host_grads.emplace_back(shapes[i]);
    if constexpr (Device) {
      dvalues.push_back(pc::DeviceTensor<S>::from_host(v));
      dgrads.push_back(pc::DeviceTensor<G>::from_host(precis::Tensor<G>(shapes[i])));
    }
  }
  precis::Tensor<X> x(Shape{8, 12}), gate(Shape{8, 16});
  precis::fill_uniform(x, -1.0, 1.0, 3);
  precis::fill_uniform(gate, 0.5, 1.5, 4);
  precis::Tensor<X> cond(Shape{8, 16}), mask(Shape{16});  // 0/1 patterns
  for (index_t i = 0; i < cond.size(); ++i) cond.data()[i] = X((i * 7) % 3 == 0 ? 1.0f : 0.0f);
  for (index_t i = 0; i < mask.size(); ++i) mask.data()[i] = X(i % 4 == 1 ? 1.0f : 0.0f);
  const std::vector<std::int64_t> labels{0, 3, 9, 2, 2, 7, 5, 1};
  using GX = precis::grad_storage_t<P, X>;
  model_result r;
  precis::Tape<P> tape;
  precis::Tensor<GX> input_grad;
  for (int step = 0; step < 2; ++step) {
    tape.reset();
    auto xv = tape.input(x, true);
    const auto bind = [&](std::size_t i) {
      if constexpr (Device) {
        return tape.param(precis::TensorView<S>(dvalues[i].data(), shapes[i]), precis::TensorView<G>(dgrads[i].data(), shapes[i]));
      } else {
        return tape.param(values[i].view(), host_grads[i].view());
      }
    };
    auto w1 = bind(0), b1 = bind(1), shift = bind(2), w2 = bind(3), w3 = bind(4), b3 = bind(5);
    auto h = precis::relu(precis::linear(xv, w1, b1));
    h = precis::gelu((h + shift) * tape.input(gate));
    h = precis::where(tape.input(cond), precis::masked_fill(h, tape.input(mask), 0.25), precis::relu(h));
    auto z = precis::matmul(h, w2);
    auto zz = precis::transpose(precis::transpose(precis::cat(1, {z, z})));
    auto loss = precis::cross_entropy(precis::linear(zz, w3, b3), labels);
    if (step == 0) {
      tape.backward(loss, 8.0);
      r.loss = loss.item();
      r.cap1 = tape.arena().capacity() + tape.scratch_arena().capacity();
    } else {
      auto seed = tape.template full<typename decltype(loss)::grad_type>(Shape{}, 4.0);
      tape.backward(loss, seed.value());
      const auto g = xv.grad();
      input_grad = precis::Tensor<GX>(g.shape());
      if constexpr (Device) {
        pc::check(cudaMemcpy(input_grad.data(), g.data(), sizeof(GX) * static_cast<std::size_t>(g.size()), cudaMemcpyDeviceToHost), "copy back");
      } else {
        std::copy_n(g.data(), g.size(), input_grad.data());
      }
      r.cap2 = tape.arena().capacity() + tape.scratch_arena().capacity();
    }
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if constexpr (Device) r.grads.push_back(as_doubles(back(dgrads[i])));
    else r.grads.push_back(as_doubles(host_grads[i]));
  }
  r.grads.push_back(as_doubles(input_grad));
  return r;
}

template <class P>
void tape_on_device(const char* name) {
  using S = typename P::param_type;
  const auto host = run_model<P, false>();
  const auto dev = run_model<pc::on_device<P>, true>();
  const double us = std::max(precis::format_traits<typename P::activation_type>::unit_roundoff(), precis::format_traits<S>::unit_roundoff());
  const double u = precis::format_traits<typename P::high_type>::unit_roundoff(), g20 = 20 * u / (1 - 20 * u);  // the accumulator's
  const double tol = 2 * (14 * us + 2 * g20);
  check(std::fabs(dev.loss - host.loss) <= tol * std::fabs(host.loss),
        std::string(name) + " tape on device: loss " + std::to_string(dev.loss) + " vs the host's " + std::to_string(host.loss));
  for (std::size_t i = 0; i < host.grads.size(); ++i) {
    double d2 = 0, h2 = 0;
    for (std::size_t j = 0; j < host.grads[i].size(); ++j) {
      d2 += (dev.grads[i][j] - host.grads[i][j]) * (dev.grads[i][j] - host.grads[i][j]);
      h2 += host.grads[i][j] * host.grads[i][j];
    }
    check(h2 > 0 && std::sqrt(d2 / h2) <= tol, std::string(name) + " tape on device: gradient " + std::to_string(i) + " differs by " +
                                                  std::to_string(std::sqrt(d2 / h2)) + " (normwise, relative; bound " + std::to_string(tol) + ")");
  }
  check(dev.cap2 == dev.cap1, std::string(name) + " tape on device: the second step allocated device memory");
}

/// The reductions, softmax, layer_norm and mse on either tape: x [6, 10] (an input with a
/// gradient) -> h = matmul(x, w [10, 10]) -> softmax along rows (of h and, strided, of its
/// transpose), log_softmax along columns, logsumexp, norm, sum and mean over an axis and over
/// everything, layer_norm (gamma, beta [10]), mse against a target, causal attention of h as
/// [2, 3, 10] with itself, two-head attention of h, the softmax and the layer norm (three
/// gradients apart), nll of the log_softmax, max along rows and min along columns,
/// dropout (the same Philox mask on both), an embedding of w's rows (one repeated); their sum
/// differentiated with seed 2.
/// Returns the loss, then the parameters' and x's gradients.
template <class P, bool Device>
model_result run_reductions() {
  using S = typename P::param_type;
  using G = precis::grad_storage_t<P, S>;
  using X = typename P::activation_type;
  using GX = precis::grad_storage_t<P, X>;
  const std::vector<Shape> shapes{{10, 10}, {10}, {10}};
  std::vector<precis::Tensor<S>> values;
  std::vector<precis::Tensor<G>> host_grads;
  std::vector<pc::DeviceTensor<S>> dvalues;
  std::vector<pc::DeviceTensor<G>> dgrads;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    precis::Tensor<S> v(shapes[i]);
    precis::fill_uniform(v, i == 1 ? 0.5 : -0.5, i == 1 ? 1.5 : 0.5, 31 + i);
    values.push_back(v);
    host_grads.emplace_back(shapes[i]);
    if constexpr (Device) {
      dvalues.push_back(pc::DeviceTensor<S>::from_host(v));
      dgrads.push_back(pc::DeviceTensor<G>::from_host(precis::Tensor<G>(shapes[i])));
    }
  }
  precis::Tensor<X> x(Shape{6, 10}), target(Shape{6, 10});
  precis::fill_uniform(x, -1.0, 1.0, 34);
  precis::fill_uniform(target, 0.0, 0.2, 35);
  model_result r;
  precis::Tape<P> tape;
  auto xv = tape.input(x, true);
  const auto bind = [&](std::size_t i) {
    if constexpr (Device) {
      return tape.param(precis::TensorView<S>(dvalues[i].data(), shapes[i]), precis::TensorView<G>(dgrads[i].data(), shapes[i]));
    } else {
      return tape.param(values[i].view(), host_grads[i].view());
    }
  };
  auto w0 = bind(0);
  auto h = precis::matmul(xv, w0);
  auto a = precis::softmax(h, 1);
  auto at = precis::softmax(precis::transpose(h), 0);
  auto lp = precis::log_softmax(h, 0);
  auto ln = precis::layer_norm(h, bind(1), bind(2));
  auto hq = precis::reshape(h, Shape{2, 3, 10});
  auto loss = precis::mse(a, tape.input(target)) + precis::mean(lp) + precis::mean(precis::logsumexp(h, 1)) +
              precis::sum(precis::norm(h, 1)) + precis::sum(precis::mean(h, 0)) + precis::sum(precis::sum(at, 1)) + precis::norm(lp) +
              precis::mse(ln, tape.input(target)) +
              precis::sum(precis::attention(hq, hq, hq, precis::attention_options{.causal = true})) +
              precis::sum(precis::attention(hq, precis::reshape(a, Shape{2, 3, 10}), precis::reshape(ln, Shape{2, 3, 10}),
                                            precis::attention_options{.heads = 2})) +
              precis::nll(lp, std::vector<std::int64_t>{1, 0, 9, 4, 4, 7}) + precis::sum(precis::max(h, 1)) +
              precis::sum(precis::min(precis::transpose(h), 1)) +
              precis::sum(precis::dropout(h, precis::dropout_options{.p = 0.3, .seed = 7, .offset = 2})) +
              precis::sum(precis::mul(precis::embedding(w0, std::vector<std::int64_t>{3, 1, 3, 8}, Shape{2, 2}),
                                      tape.input(target.view().slice(0, 0, 4).reshape(Shape{2, 2, 10}))));
  tape.backward(loss, 2.0);
  r.loss = loss.item();
  const auto g = xv.grad();
  precis::Tensor<GX> input_grad(g.shape());
  if constexpr (Device) {
    pc::check(cudaMemcpy(input_grad.data(), g.data(), sizeof(GX) * static_cast<std::size_t>(g.size()), cudaMemcpyDeviceToHost), "copy back");
    for (const auto& d : dgrads) r.grads.push_back(as_doubles(back(d)));
  } else {
    std::copy_n(g.data(), g.size(), input_grad.data());
    for (const auto& h2 : host_grads) r.grads.push_back(as_doubles(h2));
  }
  r.grads.push_back(as_doubles(input_grad));
  return r;
}

/// run_reductions on the device against the host tape: every value crosses at most 24 roundings
/// into its storage (the loss: x -> h -> lp -> nll and the fourteen terms' sum, 17; a
/// gradient: the values it reads, at most 3 deep, then up to 3 roundings into lp's gradient, 13
/// into h's and 1 into x's or 2 into w's), every sum (at most 60 terms) may run in another order, and exp and log differ
/// by at most 2 ulps of the accumulator on either side (4 calls on a path): 2 (24 u_storage +
/// 2 gamma_60(u_acc) + 16 u_acc), relative, normwise.
template <class P>
void reductions_on_device(const char* name) {
  const auto host = run_reductions<P, false>();
  const auto dev = run_reductions<pc::on_device<P>, true>();
  const double us = std::max(precis::format_traits<typename P::activation_type>::unit_roundoff(),
                             precis::format_traits<typename P::param_type>::unit_roundoff());
  const double u = precis::format_traits<typename P::high_type>::unit_roundoff(), g60 = 60 * u / (1 - 60 * u);  // the accumulator's
  const double tol = 2 * (24 * us + 2 * g60 + 16 * u);
  check(std::fabs(dev.loss - host.loss) <= tol * std::fabs(host.loss),
        std::string(name) + " reductions on device: loss " + std::to_string(dev.loss) + " vs the host's " + std::to_string(host.loss));
  for (std::size_t i = 0; i < host.grads.size(); ++i) {
    double d2 = 0, h2 = 0;
    for (std::size_t j = 0; j < host.grads[i].size(); ++j) {
      d2 += (dev.grads[i][j] - host.grads[i][j]) * (dev.grads[i][j] - host.grads[i][j]);
      h2 += host.grads[i][j] * host.grads[i][j];
    }
    check(h2 > 0 && std::sqrt(d2 / h2) <= tol, std::string(name) + " reductions on device: gradient " + std::to_string(i) +
                                                  " differs by " + std::to_string(std::sqrt(d2 / h2)) + " (bound " + std::to_string(tol) + ")");
  }
}

/// Reductions of a few long fibers, which the device splits into ranges (a block each) and
/// combines: sum, mean, norm and logsumexp of all of x [2048, 1024] and of x [65536, 3] along
/// axis 0, on the device's tape against the host's. Each side is within gamma_k of the exact
/// value relative to the sum of the terms' magnitudes (k = 89 on the device: ceil(16384 / 256)
/// + 12 + ceil(128 / 256) + 12; the host's pairwise sums fewer), its exp and log within 2 ulps,
/// and the result rounded once: |device - host| <= 2 (gamma_89 + 4 u) m + 2 u |host|, m the sum
/// of magnitudes (the sum, the mean), |host| (the norm), or 1 (logsumexp, whose error is
/// absolute).
template <class P>
void long_reductions(const char* name) {
  using X = typename P::activation_type;
  using D = pc::on_device<P>;
  const double u = precis::format_traits<typename P::high_type>::unit_roundoff(), g = 89 * u / (1 - 89 * u);
  for (const Shape& shape : {Shape{2048, 1024}, Shape{65536, 3}}) {
    const bool whole = shape[1] == 1024;
    precis::Tensor<X> x(shape);
    precis::fill_uniform(x, -1.0, 1.0, 91);
    double mag = 0;
    for (index_t i = 0; i < (whole ? x.size() : shape[0]); ++i) mag += std::fabs(static_cast<double>(x.data()[whole ? i : i * 3]));
    const auto values = [&](auto& tape) {
      auto xv = tape.input(x);
      std::vector<double> out;
      const auto first = [&](auto v) { return static_cast<double>(precis::to_host(v).data()[0]); };
      if (whole) {
        out = {precis::sum(xv).item(), precis::mean(xv).item(), precis::norm(xv).item(),
               first(precis::logsumexp(precis::reshape(xv, Shape{x.size()}), 0))};
      } else {
        out = {first(precis::sum(xv, 0)), first(precis::mean(xv, 0)), first(precis::norm(xv, 0)), first(precis::logsumexp(xv, 0))};
      }
      return out;
    };
    precis::Tape<P> ht;
    precis::Tape<D> dt;
    const auto h = values(ht), d = values(dt);
    const double n = static_cast<double>(shape[0] * (whole ? shape[1] : 1));
    const double bounds[4] = {2 * (g + 4 * u) * mag + 2 * u * std::fabs(h[0]), 2 * (g + 4 * u) * mag / n + 2 * u * std::fabs(h[1]),
                              2 * (g + 4 * u) * std::fabs(h[2]) + 2 * u * std::fabs(h[2]), 2 * (g + 4 * u) + 2 * u * std::fabs(h[3])};
    const char* what[4] = {"sum", "mean", "norm", "logsumexp"};
    for (int k = 0; k < 4; ++k) {
      check(std::fabs(d[k] - h[k]) <= bounds[k], std::string(name) + " long reduction " + what[k] + " of " + shape.str() + ": device " +
                                                     std::to_string(d[k]) + ", host " + std::to_string(h[k]) + " (bound " +
                                                     std::to_string(bounds[k]) + ")");
    }
  }
}

/// x [3, 2, 9, 9] -> conv2d 3x3 pad 1 -> batch_norm in training (running estimates in the
/// backend's memory) -> relu -> a 2 x 2 max pool, a padded 3 x 3 stride-2 max pool and avg
/// pool -> a grouped strided conv of the last two's sum, a dilated conv of the first with bias,
/// bmm with a [16, 5] weight, batch_norm in evaluation: their sum's loss and gradients (seed 2),
/// and the running estimates after the step (appended as one more "gradient"). (The bias is not
/// on the first conv: batch norm in training removes any per-channel constant, so a bias there
/// has an exact gradient of zero, and two summation orders round it to unrelated small values
/// that no relative bound holds.)
template <class P, bool Device>
model_result run_convolutions() {
  using S = typename P::param_type;
  using G = precis::grad_storage_t<P, S>;
  using X = typename P::activation_type;
  using GX = precis::grad_storage_t<P, X>;
  const std::vector<Shape> shapes{{6, 2, 3, 3}, {4}, {6}, {6}, {4, 3, 3, 3}, {4, 6, 3, 3}, {16, 5}, {4}, {4}};
  std::vector<precis::Tensor<S>> values;
  std::vector<precis::Tensor<G>> host_grads;
  std::vector<pc::DeviceTensor<S>> dvalues;
  std::vector<pc::DeviceTensor<G>> dgrads;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    precis::Tensor<S> v(shapes[i]);
    precis::fill_uniform(v, i == 2 || i == 7 ? 0.5 : -0.5, i == 2 || i == 7 ? 1.5 : 0.5, 51 + i);
    values.push_back(v);
    host_grads.emplace_back(shapes[i]);
    if constexpr (Device) {
      dvalues.push_back(pc::DeviceTensor<S>::from_host(v));
      dgrads.push_back(pc::DeviceTensor<G>::from_host(precis::Tensor<G>(shapes[i])));
    }
  }
  precis::Tensor<double> rm(Shape{6}), rv(Shape{6}), em(Shape{4}), ev(Shape{4});
  std::fill_n(rv.data(), 6, 1.0);
  precis::fill_uniform(em, -0.2, 0.2, 61);
  precis::fill_uniform(ev, 0.5, 2.0, 62);
  pc::DeviceTensor<double> drm = pc::DeviceTensor<double>::from_host(rm), drv = pc::DeviceTensor<double>::from_host(rv),
                           dem = pc::DeviceTensor<double>::from_host(em), dev = pc::DeviceTensor<double>::from_host(ev);
  const auto stats = [&](precis::Tensor<double>& h, pc::DeviceTensor<double>& d) { return Device ? d.data() : h.data(); };
  precis::Tensor<X> x(Shape{3, 2, 9, 9});
  precis::fill_uniform(x, -1.0, 1.0, 63);
  model_result r;
  precis::Tape<P> tape;
  auto xv = tape.input(x, true);
  const auto bind = [&](std::size_t i) {
    if constexpr (Device) {
      return tape.param(precis::TensorView<S>(dvalues[i].data(), shapes[i]), precis::TensorView<G>(dgrads[i].data(), shapes[i]));
    } else {
      return tape.param(values[i].view(), host_grads[i].view());
    }
  };
  const auto norm = [&](auto v, std::size_t gi, bool training, precis::Tensor<double>& hm, pc::DeviceTensor<double>& dm,
                        precis::Tensor<double>& hv, pc::DeviceTensor<double>& dv) {
    return precis::batch_norm(v, bind(gi), bind(gi + 1), {training, 0.1, 1e-5, stats(hm, dm), stats(hv, dv)});
  };
  const precis::pool2d_options padded{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  auto c = precis::conv2d(xv, bind(0), precis::conv2d_options{.padding = {1, 1}});
  auto h = precis::relu(norm(c, 2, true, rm, drm, rv, drv));
  auto p1 = precis::max_pool2d(h);
  auto q = precis::conv2d(precis::max_pool2d(h, padded) + precis::avg_pool2d(h, padded), bind(4),
                          precis::conv2d_options{.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
  auto d = precis::conv2d(p1, bind(5), bind(1), precis::conv2d_options{.padding = {2, 2}, .dilation = {2, 2}});
  auto bm = precis::bmm(precis::reshape(d, Shape{3, 4, 16}), bind(6));
  auto qe = norm(q, 7, false, em, dem, ev, dev);
  auto loss = precis::sum(precis::mul(q, q)) + precis::mean(precis::mul(bm, bm)) + precis::sum(p1) + precis::sum(qe);
  tape.backward(loss, 2.0);
  r.loss = loss.item();
  const auto g = xv.grad();
  precis::Tensor<GX> input_grad(g.shape());
  if constexpr (Device) {
    pc::check(cudaMemcpy(input_grad.data(), g.data(), sizeof(GX) * static_cast<std::size_t>(g.size()), cudaMemcpyDeviceToHost), "copy back");
    for (const auto& dg : dgrads) r.grads.push_back(as_doubles(back(dg)));
  } else {
    std::copy_n(g.data(), g.size(), input_grad.data());
    for (const auto& h2 : host_grads) r.grads.push_back(as_doubles(h2));
  }
  r.grads.push_back(as_doubles(input_grad));
  std::vector<double> running = as_doubles(Device ? back(drm) : rm);
  for (const double v : as_doubles(Device ? back(drv) : rv)) running.push_back(v);
  r.grads.push_back(running);
  return r;
}

/// run_convolutions on the device against the host tape: every value crosses at most 30
/// roundings into its storage on its way from a parameter to the loss and back, every sum (at
/// most 256 terms: the channel statistics and the weight gradients over 3 x 81 positions) may
/// run in another order: 2 (30 u_storage + 2 gamma_256(u_acc) + 16 u_acc), relative, normwise
/// (the running estimates too).
template <class P>
void convolutions_on_device(const char* name) {
  const auto host = run_convolutions<P, false>();
  const auto dev = run_convolutions<pc::on_device<P>, true>();
  const double us = std::max(precis::format_traits<typename P::activation_type>::unit_roundoff(),
                             precis::format_traits<typename P::param_type>::unit_roundoff());
  const double u = precis::format_traits<typename P::high_type>::unit_roundoff(), g256 = 256 * u / (1 - 256 * u);
  const double tol = 2 * (30 * us + 2 * g256 + 16 * u);
  check(std::fabs(dev.loss - host.loss) <= tol * std::fabs(host.loss),
        std::string(name) + " convolutions on device: loss " + std::to_string(dev.loss) + " vs the host's " + std::to_string(host.loss));
  for (std::size_t i = 0; i < host.grads.size(); ++i) {
    double d2 = 0, h2 = 0;
    for (std::size_t j = 0; j < host.grads[i].size(); ++j) {
      d2 += (dev.grads[i][j] - host.grads[i][j]) * (dev.grads[i][j] - host.grads[i][j]);
      h2 += host.grads[i][j] * host.grads[i][j];
    }
    check(h2 > 0 && std::sqrt(d2 / h2) <= tol, std::string(name) + " convolutions on device: gradient " + std::to_string(i) +
                                                  " differs by " + std::to_string(std::sqrt(d2 / h2)) + " (bound " + std::to_string(tol) + ")");
  }
}

/// A small CNN of the demo's layers: x [16, 48] seen as [16, 3, 4, 4] -> Conv2d 3 -> 8 (3x3,
/// padding 1) -> BatchNorm2d (training: its running estimates move on the device) -> 2 x 2 max
/// pool -> relu -> Linear 32 -> 10.
template <class P>
struct small_cnn : precis::nn::Module<P> {
  precis::nn::Conv2d<P>* conv;
  precis::nn::BatchNorm2d<P>* norm;
  precis::nn::Linear<P>* head;
  explicit small_cnn(std::uint64_t seed) {
    conv = &this->register_module("conv", std::make_unique<precis::nn::Conv2d<P>>(3, 8, std::array<index_t, 2>{3, 3},
                                                                                 precis::conv2d_options{.padding = {1, 1}}, seed));
    norm = &this->register_module("norm", std::make_unique<precis::nn::BatchNorm2d<P>>(8));
    head = &this->register_module("head", std::make_unique<precis::nn::Linear<P>>(32, 10, seed + 1));
  }
  template <class S>
  auto operator()(const precis::Var<P, S>& x) {
    const auto h = precis::relu(precis::max_pool2d((*norm)((*conv)(precis::reshape(x, Shape{16, 3, 4, 4})))));
    return (*head)(precis::reshape(h, Shape{16, 32}));
  }
};

/// An nn::MLP 48-32-10 on the device (its parameters in device memory) trained at batch 16 by
/// the device optimizer made from it (SGD with momentum).
template <class P>
struct mlp_48 : precis::nn::MLP<P> {
  explicit mlp_48(std::uint64_t seed) : precis::nn::MLP<P>({48, 32, 10}, precis::nn::activation::relu, seed) {}
};

/// Model<on_device<P>> trained at batch 16 (x [16, 48], labels on the device) by the device
/// optimizer made from it (SGD with momentum).
template <class P, template <class> class Model>
struct device_model {
  using X = typename P::activation_type;
  using D = pc::on_device<P>;
  using Opt = pc::MixedPrecisionOptimizer<P, precis::optim::SGD>;
  cudaStream_t stream;
  Model<D> net;
  pc::DeviceTensor<X> x;
  pc::device_buffer<std::int64_t> labels;
  Opt opt;
  precis::Tape<D> tape;

  static pc::DeviceTensor<X> batch() {
    precis::Tensor<X> t(Shape{16, 48});
    precis::fill_uniform(t, -1.0, 1.0, 5);
    return pc::DeviceTensor<X>::from_host(t);
  }
  static precis::optim::SGD sgd() {
    precis::optim::SGD r;
    r.lr = 0.05;
    r.momentum = 0.9;
    return r;
  }

  explicit device_model(cudaStream_t s)
      : stream(s), net(21), x(batch()), labels(16), opt(net, sgd(), typename Opt::options{.stream = s}), tape(0, pc::device_backend{s}) {
    std::vector<std::int64_t> l(16);
    for (std::size_t i = 0; i < l.size(); ++i) l[i] = static_cast<std::int64_t>((7 * i + 3) % 10);
    pc::check(cudaMemcpy(labels.data(), l.data(), sizeof(std::int64_t) * l.size(), cudaMemcpyHostToDevice), "labels");
    pc::check(cudaStreamSynchronize(nullptr), "labels");  // landed before the steps' kernels on `stream` read them
  }

  void step() {
    tape.reset();
    auto logits = net(tape.borrow(precis::TensorView<const X>(x.data(), x.shape())));
    auto loss = precis::cross_entropy(logits, precis::borrowed_labels{std::span<const std::int64_t>(labels.data(), 16)});
    tape.backward(loss, precis::TensorView<const double>(opt.device_scale(), Shape{}));
    opt.step();
    opt.zero_grad();
  }
  std::vector<precis::Tensor<typename P::param_type>> values() {
    std::vector<precis::Tensor<typename P::param_type>> out;
    for (auto* p : net.parameters()) out.push_back(p->value_on_host(pc::device_backend{stream}));
    return out;
  }
};

/// An nn::MLP on the device against the same module on the host: the same initial bits; one
/// step's loss and gradients within the tape's bound (each value crosses at most 6 roundings
/// into its storage from a parameter to the loss and back; sums of at most 48 terms in another
/// order: 2 (6 u_storage + 2 gamma_48(u_fp32)), normwise); zero_grad on the stream zeroes them.
template <class P>
void module_on_device(const char* name, cudaStream_t stream) {
  using D = pc::on_device<P>;
  using X = typename P::activation_type;
  const pc::device_backend on_stream{stream};
  precis::nn::MLP<P> host_net({48, 32, 10}, precis::nn::activation::relu, 4);
  precis::nn::MLP<D> dev_net({48, 32, 10}, precis::nn::activation::relu, 4);
  const auto hp = host_net.parameters();
  const auto dp = dev_net.parameters();
  int bad = 0;
  for (std::size_t i = 0; i < hp.size(); ++i) bad += mismatches(hp[i]->value_on_host(), dp[i]->value_on_host(on_stream));
  check(bad == 0, std::string(name) + " nn module on device: " + std::to_string(bad) + " initial values differ from the host module's");

  precis::Tensor<X> x(Shape{16, 48});
  precis::fill_uniform(x, -1.0, 1.0, 8);
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((3 * i + 1) % 10);
  precis::Tape<P> ht;
  auto lh = precis::cross_entropy(host_net(ht.input(x)), labels);
  ht.backward(lh);
  precis::Tape<D> dt(0, on_stream);
  auto ld = precis::cross_entropy(dev_net(dt.input(x)), labels);
  dt.backward(ld);
  const double us = std::max(precis::format_traits<X>::unit_roundoff(), precis::format_traits<typename P::param_type>::unit_roundoff());
  const double u = precis::format_traits<typename P::high_type>::unit_roundoff(), g48 = 48 * u / (1 - 48 * u);  // the accumulator's
  const double tol = 2 * (6 * us + 2 * g48);
  const double lhv = lh.item(), ldv = ld.item();
  check(std::fabs(ldv - lhv) <= tol * std::fabs(lhv),
        std::string(name) + " nn module on device: loss " + std::to_string(ldv) + " vs the host's " + std::to_string(lhv));
  for (std::size_t i = 0; i < hp.size(); ++i) {
    const auto h = as_doubles(hp[i]->grad_on_host());
    const auto d = as_doubles(dp[i]->grad_on_host(on_stream));
    double d2 = 0, h2 = 0;
    for (std::size_t j = 0; j < h.size(); ++j) {
      d2 += (d[j] - h[j]) * (d[j] - h[j]);
      h2 += h[j] * h[j];
    }
    check(h2 > 0 && std::sqrt(d2 / h2) <= tol, std::string(name) + " nn module on device: " + hp[i]->name + "'s gradient differs by " +
                                                  std::to_string(std::sqrt(d2 / h2)) + " (bound " + std::to_string(tol) + ")");
  }
  dev_net.zero_grad(on_stream);
  int nonzero = 0;
  for (auto* p : dp) {
    for (const auto& v : as_doubles(p->grad_on_host(on_stream))) nonzero += v != 0;
  }
  check(nonzero == 0, std::string(name) + " nn module on device: zero_grad left " + std::to_string(nonzero) + " nonzero gradients");
}

/// Whether two floats are the same value, any NaN equal to any NaN.
bool same_value(float a, float b) { return (a != a && b != b) || same_bits(a, b); }

/// fp8_scaling_state's casts against the host's fp8::scaling_state under recipe r: six steps of
/// a linear op's three tensors (input and weight in S, the gradient in float) whose magnitudes
/// move by 2^±6 from step to step, with zeros, values that flush, an outlier in step 3 that
/// saturates under the delayed scale and unscaled, and a NaN in step 4. Every cast's bits and
/// scale equal the host's, and after each step the downloaded statistics (amax, counts), the
/// totals and the delayed scale and history equal the host entry's.
template <class S>
void fp8_casts(const char* name, const precis::fp8::recipe& r, cudaStream_t stream) {
  using precis::fp8::operand;
  precis::fp8::scaling_state hs(r);
  pc::fp8_scaling_state ds(r, stream);
  std::mt19937 rng(31);
  const index_t n = 3000;  // more than one block, a ragged last one
  pc::device_buffer<float> used(1);
  int bad_bits = 0, bad_scale = 0, bad_state = 0;
  for (int step = 0; step < 6; ++step) {
    precis::fp8::gemm_scaling& gh = hs.next("linear");
    precis::fp8::gemm_scaling& gd = ds.next("linear");
    const float mag = std::ldexp(1.0f, (step % 3 == 1 ? 6 : step % 3 == 2 ? -6 : 0));
    const auto one = [&]<operand R, class X>(const precis::Tensor<X>& x) {
      using F8 = precis::fp8::operand_format_t<R>;
      precis::Tensor<float> xf(x.shape());
      for (index_t i = 0; i < x.size(); ++i) xf.data()[i] = static_cast<float>(x.data()[i]);
      precis::Tensor<F8> hout(x.shape());
      const float hscale = gh.template scaling<R>().cast(xf.data(), static_cast<std::size_t>(n), hout.data(), nullptr);
      auto dx = pc::DeviceTensor<X>::from_host(x);
      pc::DeviceTensor<F8> dout(x.shape());
      ds.cast<R>(gd.index, dx.data(), n, dout.data(), used.data(), stream);
      pc::check(cudaStreamSynchronize(stream), "sync");
      const auto back_out = dout.to_host();
      float dscale = 0;
      pc::check(cudaMemcpy(&dscale, used.data(), sizeof dscale, cudaMemcpyDeviceToHost), "scale");
      bad_bits += mismatches(back_out, hout);
      bad_scale += !same_bits(dscale, hscale);
    };
    const auto data = [&](auto tag, float m) {
      using X = decltype(tag);
      precis::Tensor<X> x(Shape{n});
      std::normal_distribution<float> nd(0.0f, m);
      for (index_t i = 0; i < n; ++i) {
        float v = nd(rng);
        if (i % 97 == 0) v = 0.0f;
        if (i % 89 == 0) v = m * 1e-9f;           // flushes at any scale this amax allows
        if (i == 5 && step == 4) v = std::numeric_limits<float>::quiet_NaN();
        if (i == 7 && step == 3) v = 1e4f;  // past the delayed scale, and past e4m3's range unscaled
        x.data()[i] = precis::detail::store<X>(v);
      }
      return x;
    };
    one.template operator()<operand::input>(data(S{}, mag));
    one.template operator()<operand::weight>(data(S{}, 0.05f * mag));
    one.template operator()<operand::grad_output>(data(float{}, 1e-3f * mag));
    hs.end_step();
    ds.end_step();
    ds.download();
    const auto compare = [&](const auto& h, const auto& d) {
      const auto &lh = h.last(), &ld = d.last();
      bool ok = same_value(lh.amax, ld.amax) && lh.count == ld.count && lh.saturated == ld.saturated && lh.flushed == ld.flushed &&
                same_bits(h.last_scale(), d.last_scale()) && h.total().casts == d.total().casts && h.total().count == d.total().count &&
                h.total().saturated == d.total().saturated && h.total().flushed == d.total().flushed;
      if (r.which == precis::fp8::recipe::kind::delayed) {
        ok = ok && same_bits(h.delayed().scale(), d.delayed().scale());
        for (std::size_t i = 0; i < h.delayed().amax_history().size(); ++i) {
          ok = ok && same_value(h.delayed().amax_history()[i], d.delayed().amax_history()[i]);
        }
      }
      bad_state += !ok;
    };
    compare(hs[0].input, ds[0].input);
    compare(hs[0].weight, ds[0].weight);
    compare(hs[0].grad_output, ds[0].grad_output);
  }
  const auto th = hs.totals(), td = ds.totals();
  check(bad_bits == 0 && bad_scale == 0 && bad_state == 0,
        std::string(name) + " fp8 casts on the device: " + std::to_string(bad_bits) + " values, " + std::to_string(bad_scale) +
            " scales and " + std::to_string(bad_state) + " states differ from the host's");
  // current scaling maps each amax to the format's largest value: nothing can saturate
  const bool current = r.which == precis::fp8::recipe::kind::current;
  check((current ? th.saturated == 0 : th.saturated > 0) && th.flushed > 0 && th.saturated == td.saturated && th.flushed == td.flushed,
        std::string(name) + " fp8 casts on the device: saturated " + std::to_string(td.saturated) + " and flushed " +
            std::to_string(td.flushed) + " (host " + std::to_string(th.saturated) + ", " + std::to_string(th.flushed) +
            "; the data must make both happen, but saturation under current scaling)");
}

/// linear under fp8-mixed (x [32, 64], W [48, 64], bias) through op::cuda and op::cpu, each
/// with its own scaling state: the fp8 operands kept for the backward and their scales equal
/// the host's; y, dx, dW (one GEMM of K <= 64 each, exact fp8 products) within
/// (gamma_K(2^-13) + gamma_K(u_fp32) + 2 u_fp32) sum |a b| alpha of the host's (the fp8 tensor
/// cores keep about 14 bits of their sums), plus the roundings of dx and dW into bf16.
void fp8_linear(pc::DeviceArena& dtemp, pc::DeviceArena& dkeep, cudaStream_t stream) {
  using P = precis::policy::named<"fp8-mixed">;
  using B = precis::bfloat16;
  using F8 = precis::float8_e4m3;
  std::mt19937 rng(12);
  precis::fp8::scaling_state hs(precis::fp8::current_scaling{});
  pc::fp8_scaling_state ds(precis::fp8::current_scaling{}, stream);
  precis::Arena htemp, hkeep;
  const precis::op::cpu hctx(htemp, hkeep, true, precis::detail::ad::gemm_isa_for<P>(), &hs);
  const precis::op::cuda dctx(dtemp, dkeep, true, stream, &ds);
  const index_t m = 32, k = 64, n = 48;
  pair_t<B> x(random<B>(Shape{m, k}, rng, 3.0f)), w(random<B>(Shape{n, k}, rng, 0.05f)), b(random<B>(Shape{n}, rng));
  using T = precis::detail::ad::op_types_t<precis::op::linear, P, B, B, B>;
  static_assert(T::scaled && std::is_same_v<typename T::output, float>);
  pair_t<float> y{precis::Tensor<float>(Shape{m, n})};
  typename precis::op::linear::template saved<T> sh{}, sd{};
  precis::op::linear::forward<T>(hctx, {}, y.hv(), sh, x.hv().as_const(), w.hv().as_const(), b.hv().as_const());
  precis::op::linear::forward<T>(dctx, {}, y.dv(), sd, x.dv().as_const(), w.dv().as_const(), b.dv().as_const());
  const auto yd = back(y.d);
  const auto down = [&](const precis::TensorView<const F8>& v) {
    precis::Tensor<F8> t(v.shape());
    pc::check(cudaMemcpy(t.data(), v.data(), static_cast<std::size_t>(v.size()), cudaMemcpyDeviceToHost), "fp8 operand");
    return t;
  };
  const auto scale_of = [&](const precis::fp8::scale_ref& s) {
    float v = 0;
    pc::check(cudaMemcpy(&v, s.device, sizeof v, cudaMemcpyDeviceToHost), "scale");
    return v;
  };
  precis::Tensor<F8> xh8(sh.x.shape()), wh8(sh.w.shape());
  std::copy_n(sh.x.data(), sh.x.size(), xh8.data());
  std::copy_n(sh.w.data(), sh.w.size(), wh8.data());
  check(mismatches(down(sd.x), xh8) == 0 && mismatches(down(sd.w), wh8) == 0 && same_bits(scale_of(sd.sc.s0), sh.sc.s0.value) &&
            same_bits(scale_of(sd.sc.s1), sh.sc.s1.value),
        "fp8 linear on the device: the cast operands or their scales differ from the host's");
  const double u = std::ldexp(1.0, -24), u8 = std::ldexp(1.0, -13);
  const auto gam = [](double terms, double uu) { return terms * uu / (1 - terms * uu); };
  const auto val = [](auto v) { return static_cast<double>(static_cast<float>(v)); };
  const double s0 = sh.sc.s0.value, s1 = sh.sc.s1.value;
  int bad = 0;
  for (index_t i = 0; i < m; ++i) {
    for (index_t j = 0; j < n; ++j) {
      double mag = 0;
      for (index_t t = 0; t < k; ++t) mag += std::fabs(val(xh8(i, t)) * val(wh8(j, t)));
      mag /= s0 * s1;
      const double tol = (gam(k, u8) + gam(k + 1, u) + 2 * u) * (mag + std::fabs(val(b.h(j))));
      bad += !(std::fabs(static_cast<double>(yd(i, j)) - static_cast<double>(y.h(i, j))) <= tol);
    }
  }
  check(bad == 0, "fp8 linear on the device, forward: " + std::to_string(bad) + " outputs outside their bound");

  pair_t<float> gy(random<float>(Shape{m, n}, rng, 1e-3f));
  pair_t<B> gx{precis::Tensor<B>(Shape{m, k})}, gw{precis::Tensor<B>(Shape{n, k})}, gb{precis::Tensor<B>(Shape{n})};
  precis::op::linear::backward<T>(hctx, {}, sh, gy.hv().as_const(), y.hv().as_const(),
                                  std::tuple{x.hv().as_const(), w.hv().as_const(), b.hv().as_const()}, std::tuple{gx.hv(), gw.hv(), gb.hv()});
  precis::op::linear::backward<T>(dctx, {}, sd, gy.dv().as_const(), y.dv().as_const(),
                                  std::tuple{x.dv().as_const(), w.dv().as_const(), b.dv().as_const()}, std::tuple{gx.dv(), gw.dv(), gb.dv()});
  const auto gxd = back(gx.d), gwd = back(gw.d);
  // the gradient's cast as the host made it (its scale from the host's state)
  const float sg = hs[0].grad_output.last_scale();
  const double ub = std::ldexp(1.0, -8);  // the gradients are stored in bf16
  int bx = 0, bw = 0;
  const auto g8 = [&](index_t i, index_t j) {
    return val(precis::detail::store<precis::float8_e5m2>(gy.h(i, j) * sg));  // rounded once: the host's cast
  };
  for (index_t i = 0; i < m; ++i) {
    for (index_t t = 0; t < k; ++t) {
      double mag = 0;
      for (index_t j = 0; j < n; ++j) mag += std::fabs(g8(i, j) * val(wh8(j, t)));
      mag /= sg * s1;
      const double tol = (gam(n, u8) + gam(n, u) + 2 * u) * mag * (1 + ub) + (2 + ub) * ub / (1 - ub) * std::fabs(val(gx.h(i, t)));
      bx += !(std::fabs(val(gxd(i, t)) - val(gx.h(i, t))) <= tol);
    }
  }
  for (index_t j = 0; j < n; ++j) {
    for (index_t t = 0; t < k; ++t) {
      double mag = 0;
      for (index_t i = 0; i < m; ++i) mag += std::fabs(g8(i, j) * val(xh8(i, t)));
      mag /= sg * s0;
      const double tol = (gam(m, u8) + gam(m, u) + 2 * u) * mag * (1 + ub) + (2 + ub) * ub / (1 - ub) * std::fabs(val(gw.h(j, t)));
      bw += !(std::fabs(val(gwd(j, t)) - val(gw.h(j, t))) <= tol);
    }
  }
  check(bx == 0 && bw == 0, "fp8 linear on the device, backward: " + std::to_string(bx) + " / " + std::to_string(bw) +
                                " of dx / dW outside their bounds");
  ds.download();
  check(same_bits(ds[0].grad_output.last_scale(), sg), "fp8 linear on the device: the gradient's scale differs from the host's");
}

template <class P, template <class> class Model>
void step_in_a_graph(const char* name, cudaStream_t stream) {
  device_model<P, Model> eager(stream), graphed(stream);
  for (int i = 0; i < 5; ++i) eager.step();
  for (int i = 0; i < 2; ++i) graphed.step();  // the arenas reach their steady size
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  pc::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    graphed.step();
  } catch (const precis::error& e) {
    cudaStreamEndCapture(stream, &graph);
    check(false, std::string(name) + " step in a graph: a call inside the step cannot be captured (it synchronizes): " + e.what());
    return;
  }
  pc::check(cudaStreamEndCapture(stream, &graph), std::string(name) + ": cudaStreamEndCapture (a call inside the step synchronized)");
  pc::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int i = 0; i < 3; ++i) pc::check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  pc::check(cudaStreamSynchronize(stream), "sync");
  int bad = 0;
  const auto ev = eager.values(), gv = graphed.values();
  for (std::size_t i = 0; i < ev.size(); ++i) bad += mismatches(gv[i], ev[i]);
  const auto se = eager.opt.read_status(), sg = graphed.opt.read_status();
  check(bad == 0, std::string(name) + " step in a graph: " + std::to_string(bad) + " parameters differ from the eager steps'");
  if constexpr (requires { eager.net.norm; }) {  // batch norm's running estimates, moved on the device every step
    const pc::device_backend b{stream};
    check(eager.net.norm->running_mean(b) == graphed.net.norm->running_mean(b) &&
              eager.net.norm->running_var(b) == graphed.net.norm->running_var(b),
          std::string(name) + " step in a graph: batch norm's running estimates differ from the eager steps'");
  }
  check(se.updates == sg.updates && se.scaler.scale == sg.scaler.scale,
        std::string(name) + " step in a graph: updates " + std::to_string(sg.updates) + " and scale " + std::to_string(sg.scaler.scale) +
            " against the eager steps' " + std::to_string(se.updates) + " and " + std::to_string(se.scaler.scale));
  check(se.updates >= 1, std::string(name) + ": none of the 5 steps applied an update (the comparison would test nothing)");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

int run_device() {
  if (pc::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  pc::DeviceArena temp, keep;
  relu_and_add(temp, keep);
  linear(temp, keep);
  temp.reset();
  keep.reset();
  const std::size_t cap = temp.capacity() + keep.capacity();
  relu_and_add(temp, keep);
  linear(temp, keep);
  check(temp.capacity() + keep.capacity() == cap, "a second step on the same arenas allocated device memory");
  tape_on_device<precis::policy::named<"32-true">>("32-true");
  tape_on_device<precis::policy::named<"bf16-mixed">>("bf16-mixed");
  tape_on_device<precis::policy::named<"16-mixed">>("16-mixed");
  tape_on_device<precis::policy::named<"16-true">>("16-true");  // sums in fp16 on both sides
  tape_on_device<precis::policy::named<"bf16-true">>("bf16-true");
  std::printf("Tape<cuda::on_device<P>>: a model of context-only ops matches the host tape's within its bound\n");
  reductions_on_device<precis::policy::named<"32-true">>("32-true");
  reductions_on_device<precis::policy::named<"bf16-mixed">>("bf16-mixed");
  reductions_on_device<precis::policy::named<"64-true">>("64-true");
  reductions_on_device<precis::policy::named<"16-true">>("16-true");
  std::printf("sum, mean, norm, logsumexp, softmax, log_softmax, layer_norm, attention, max, min, nll, dropout, embedding and mse on the device: within their bound of the host's\n");
  long_reductions<precis::policy::named<"32-true">>("32-true");
  long_reductions<precis::policy::named<"64-true">>("64-true");
  std::printf("sum, mean, norm and logsumexp of a few long fibers (split into ranges on the device): within their bound of the host's\n");
  convolutions_on_device<precis::policy::named<"32-true">>("32-true");
  convolutions_on_device<precis::policy::named<"bf16-mixed">>("bf16-mixed");
  convolutions_on_device<precis::policy::named<"16-mixed">>("16-mixed");
  convolutions_on_device<precis::policy::named<"64-true">>("64-true");
  convolutions_on_device<precis::policy::named<"16-true">>("16-true");
  std::printf("conv2d (grouped, strided, dilated), max and avg pool2d, batch_norm (training and evaluation) and bmm on the device: within their bound of the host's\n");
  cudaStream_t stream;
  pc::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  step_in_a_graph<precis::policy::named<"bf16-mixed">, mlp_48>("bf16-mixed MLP", stream);
  step_in_a_graph<precis::policy::named<"16-mixed">, mlp_48>("16-mixed MLP", stream);
  step_in_a_graph<precis::policy::named<"bf16-mixed">, small_cnn>("bf16-mixed CNN", stream);
  step_in_a_graph<precis::policy::named<"16-mixed">, small_cnn>("16-mixed CNN", stream);
  step_in_a_graph<precis::policy::named<"bf16-true">, mlp_48>("bf16-true MLP", stream);
  step_in_a_graph<precis::policy::named<"16-true">, mlp_48>("16-true MLP", stream);
  step_in_a_graph<precis::policy::named<"fp8-mixed">, mlp_48>("fp8-mixed MLP", stream);
  step_in_a_graph<precis::policy::fp8_mixed_with<precis::fp8::delayed_scaling>, mlp_48>("fp8-mixed<delayed> MLP", stream);
  step_in_a_graph<precis::policy::named<"fp8-mixed">, small_cnn>("fp8-mixed CNN", stream);
  fp8_casts<precis::bfloat16>("current scaling", precis::fp8::current_scaling{}, stream);
  fp8_casts<float>("current scaling, powers of two, margin 1", precis::fp8::current_scaling{1, true}, stream);
  fp8_casts<precis::bfloat16>("delayed scaling (history 4, max)", precis::fp8::delayed_scaling{4, precis::fp8::amax_reduction::max, 0}, stream);
  fp8_casts<float>("delayed scaling (history 3, most recent, margin 2)",
                   precis::fp8::delayed_scaling{3, precis::fp8::amax_reduction::most_recent, 2}, stream);
  fp8_casts<precis::bfloat16>("no scaling", precis::fp8::no_scaling{}, stream);
  std::printf("fp8 casts on the device: the host's bits, scales, statistics and delayed-scaling histories\n");
  {
    pc::DeviceArena t8, k8;
    fp8_linear(t8, k8, stream);
    std::printf("fp8-mixed linear through op::cuda: the host's fp8 operands and scales; outputs and gradients within their bounds\n");
  }
  module_on_device<precis::policy::named<"32-true">>("32-true", stream);
  module_on_device<precis::policy::named<"bf16-mixed">>("bf16-mixed", stream);
  module_on_device<precis::policy::named<"16-true">>("16-true", stream);
  std::printf("nn modules on the device: the host's initial bits, gradients within the tape's bound\n");
  cudaStreamDestroy(stream);
  std::printf("a training step on the device (an MLP; a CNN with convolution, batch norm and pooling) is captured whole into a CUDA graph (no synchronization inside it)\n");
  std::printf("op definitions through op::cuda: relu, add (broadcast) and linear match the host's within their bounds\n");
  std::printf("%s\n", failures == 0 ? "device backend: all checks passed" : "device backend: FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--device") == 0) return run_device();
    return run_host();
  } catch (const precis::error& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
