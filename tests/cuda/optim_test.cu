// The device's mixed-precision step (include/precis/cuda/optim.cuh). Without --device (label
// `cuda`, runs in CI without a GPU): bad parameters and options are named before anything touches
// the device. With --device (label `gpu`; exit 77, skipped, without a device): against the host's
// optim::MixedPrecisionOptimizer on the same gradients, under 16-mixed (SGD with momentum, a
// dynamic scaler that grows every second clean step, an overflowing step), bf16-mixed (AdamW)
// 32-true (Adam, weight decay, clipping by the global norm), bf16-true (SGD with momentum) and
// 16-true (AdamW), whose parameters and state are stored in 16 bits: every skip decision and
// scale equal, the masters within a bound from the unit roundoff (the device fuses multiplies
// and adds), each parameter its master rounded once, a skipped step writing nothing;
// bf16-true's stochastic update rounding unbiased and reproducible by seed; two runs give
// the same bits; the step captured in a CUDA graph (which fails if it synchronizes with the host)
// gives the same bits replayed; force_found_inf skips a step; zero_grad writes +0.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <precis/cuda/optim.cuh>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <random>
#include <string>
#include <vector>

#include "support.cuh"

namespace {

using cuda_test::check;
using cuda_test::failures;
using precis::index_t;
using precis::Shape;

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class E>
bool throws_naming(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const E& e) {
    if (std::string(e.what()).find(part) != std::string::npos) return true;
    std::printf("  message was: %s\n", e.what());
    return false;
  }
  return false;
}

int run_host() {
  using P = precis::policy::named<"bf16-mixed">;
  using Opt = precis::cuda::MixedPrecisionOptimizer<P, precis::optim::SGD>;
  using precis::bfloat16;
  // views are never dereferenced on the host: addresses of host arrays stand in for device ones
  static bfloat16 v[64], g[64];
  const precis::cuda::DeviceView<bfloat16> value(v, Shape{8, 8}), grad(g, Shape{8, 8});
  check(throws_naming<precis::shape_error>([&] { Opt({{"w", value, precis::cuda::DeviceView<bfloat16>(g, Shape{64})}}, {}); },
                                           "parameter 'w' has value [8, 8]"),
        "a gradient of another shape is a named shape_error");
  check(throws_naming<precis::shape_error>([&] { Opt({{"w", value.transpose(), grad}}, {}); }, "expected dense device tensors"),
        "a strided parameter is a named shape_error");
  check(throws_naming<precis::aliasing_error>([&] { Opt({{"w", value, precis::cuda::DeviceView<bfloat16>(v, Shape{8, 8})}}, {}); },
                                              "shares memory with its gradient"),
        "a gradient over its parameter is an aliasing_error");
  check(throws_naming<precis::invalid_argument>([&] { Opt({}, {}); }, "no parameters"), "no parameters");
  check(throws_naming<precis::invalid_argument>([&] { Opt({{"w", value, grad}}, {.lr = -1}); }, "lr = -1"),
        "a bad rule is named by its own validate()");
  check(throws_naming<precis::invalid_argument>([&] { Opt({{"w", value, grad}}, {}, Opt::options{.accumulation_steps = 0}); },
                                                "accumulation_steps = 0"),
        "accumulation_steps < 1");
  check(throws_naming<precis::invalid_argument>([&] { Opt({{"w", value, grad}}, {}, Opt::options{.max_norm = -1}); },
                                                "max_norm = -1"),
        "a negative max_norm");
  check(throws_naming<precis::invalid_argument>(
            [&] { Opt({{"w", value, grad}}, {}, Opt::options{.rounding = precis::optim::update_rounding::kahan}); },
            "update_rounding::kahan is not on the device"),
        "Kahan-compensated updates are named as the host's only");
  if (precis::cuda::device_count() == 0) {
    check(throws_naming<precis::cuda::cuda_error>([&] { Opt({{"w", value, grad}}, {}); }, "cudaMalloc"),
          "without a device, the first allocation is a cuda_error");
  }
  std::printf("%s\n", failures == 0 ? "host checks: bad parameters and options are named before the device is used" : "failed");
  return failures == 0 ? 0 : 1;
}

template <class P>
struct params_module : precis::nn::Module<P> {
  std::vector<typename precis::nn::Module<P>::parameter*> ps;
  explicit params_module(const std::vector<Shape>& shapes, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      auto& p = this->register_parameter("p" + std::to_string(i), shapes[i]);
      for (auto& x : p.value) x = precis::detail::store<typename P::param_type>(u(rng));
      ps.push_back(&p);
    }
  }
};

/// One scripted run: `steps` steps of random gradients (times the current scale), step
/// `inf_step` with an infinity in the last parameter's gradient; host and device side by side.
/// `ulps`: how many units u |w| a stored master may differ by per applied step before the
/// update's chain (1 for fp32 and fp64 masters; 2 for bf16 and fp16 ones, updated in fp32
/// and rounded each step: one fp32 rounding the device fuses away may move the value across a
/// rounding boundary, one 16-bit ulp, 2u |w|).
template <class P, class Rule, class Scaler>
void against_host(const char* what, Rule rule, Scaler scaler, double max_norm, int steps, int inf_step, double ulps = 1) {
  using G = precis::grad_storage_t<P, typename P::param_type>;
  using S = typename P::param_type;
  using M = typename P::master_type;
  using DevOpt = precis::cuda::MixedPrecisionOptimizer<P, Rule>;
  const std::vector<Shape> shapes{Shape{300, 17}, Shape{4099}, Shape{3}};  // partial tiles, a tiny one
  params_module<P> host(shapes, 7);
  precis::optim::MixedPrecisionOptimizer hopt(host, rule, scaler);
  std::vector<precis::cuda::DeviceTensor<S>> dv;
  std::vector<precis::cuda::DeviceTensor<G>> dg;
  std::vector<typename DevOpt::parameter> list;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    dv.push_back(precis::cuda::DeviceTensor<S>::from_host(host.ps[i]->value));
    dg.emplace_back(shapes[i]);
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) list.push_back({"p" + std::to_string(i), dv[i].view(), dg[i].view()});
  DevOpt dopt(list, rule, scaler, typename DevOpt::options{.max_norm = max_norm});

  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1e-2f);
  const double u = precis::format_traits<M>::unit_roundoff();
  std::vector<std::vector<double>> sum_w(shapes.size()), sum_d(shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    sum_w[i].assign(static_cast<std::size_t>(shapes[i].numel()), 0.0);
    sum_d[i].assign(static_cast<std::size_t>(shapes[i].numel()), 0.0);
  }
  int applied = 0;
  for (int step = 1; step <= steps; ++step) {
    const double scale = hopt.loss_scale();
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      auto& g = host.ps[i]->grad;
      for (auto& x : g) x = precis::detail::store<G>(static_cast<float>(nd(rng) * scale));
      if (step == inf_step && i + 1 == shapes.size()) g.data()[1] = precis::detail::store<G>(INFINITY);
      dg[i].copy_from(g);
    }
    std::vector<precis::Tensor<M>> before;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      before.push_back(precis::Tensor<M>(shapes[i]));
      const auto m = hopt.master(i);
      std::copy(m.data(), m.data() + m.size(), before.back().data());
    }
    std::vector<precis::Tensor<M>> dbefore;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      dbefore.push_back(precis::Tensor<M>(shapes[i]));
      precis::cuda::check(cudaMemcpy(dbefore.back().data(), dopt.master(i).data(), sizeof(M) * static_cast<std::size_t>(shapes[i].numel()),
                                     cudaMemcpyDeviceToHost),
                          "copy");
    }
    if (max_norm > 0) hopt.clip_grad_norm(max_norm);
    const bool host_applied = hopt.step();
    dopt.step();
    const auto st = dopt.read_status();
    const std::string at = std::string(what) + ", step " + std::to_string(step);
    check(st.applied == host_applied, at + ": the device's skip decision differs from the host's");
    check(st.found_inf == (step == inf_step), at + ": found_inf");
    check(st.scaler.scale == hopt.loss_scale(), at + ": scale " + std::to_string(st.scaler.scale) + " on the device, " +
                                                    std::to_string(hopt.loss_scale()) + " on the host");
    check(st.updates == hopt.steps_taken(), at + ": updates applied");
    applied += host_applied ? 1 : 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      precis::Tensor<M> dm(shapes[i]);
      precis::cuda::check(cudaMemcpy(dm.data(), dopt.master(i).data(), sizeof(M) * static_cast<std::size_t>(dm.size()),
                                     cudaMemcpyDeviceToHost),
                          "copy");
      const auto dp = dv[i].to_host();
      const auto hm = hopt.master(i);
      int bad = 0, unrounded = 0, touched = 0;
      for (index_t k = 0; k < dm.size(); ++k) {
        const auto kk = static_cast<std::size_t>(k);
        const double h = static_cast<double>(hm.data()[k]), d = static_cast<double>(dm.data()[k]);
        if (!host_applied) {
          touched += !same_bits(dm.data()[k], dbefore[i].data()[k]);
          continue;
        }
        sum_w[i][kk] += std::fabs(h);
        sum_d[i][kk] += std::fabs(h - static_cast<double>(before[i].data()[k]));
        // each applied step: one rounding of w (u |w|) and the update's chain, whose inputs
        // (moments, momentum) carry the earlier steps' differences: 12 roundings per step
        const double tol = u * (ulps * sum_w[i][kk] + 12.0 * applied * sum_d[i][kk]);
        if (!(std::fabs(h - d) <= tol)) {
          if (bad < 3) std::printf("  %s p%zu[%lld]: host %.9g device %.9g bound %.3g\n", at.c_str(), i, static_cast<long long>(k), h, d, tol);
          ++bad;
        }
        unrounded += !same_bits(dp.data()[k], precis::detail::store<S>(dm.data()[k]));
      }
      check(bad == 0, at + ": p" + std::to_string(i) + ": " + std::to_string(bad) + " masters outside the bound");
      check(unrounded == 0, at + ": p" + std::to_string(i) + ": " + std::to_string(unrounded) + " parameters are not their master rounded once");
      check(touched == 0, at + ": p" + std::to_string(i) + ": a skipped step wrote " + std::to_string(touched) + " masters");
    }
  }
  std::printf("%s: %d steps (%d applied) match the host's decisions and scales; masters within the bound\n", what, steps, applied);
}

/// The same gradients through two optimizers, one stepping directly and one through a CUDA
/// graph of its step: the same bits. Capture fails if step() synchronizes with the host.
void graph_replay() {
  using P = precis::policy::named<"16-mixed">;
  using S = precis::half;
  using Opt = precis::cuda::MixedPrecisionOptimizer<P, precis::optim::AdamW>;
  const Shape shape{1000, 33};
  precis::Tensor<S> w0(shape);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : w0) x = S(nd(rng));
  cudaStream_t stream = nullptr;
  precis::cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto wa = precis::cuda::DeviceTensor<S>::from_host(w0), wb = precis::cuda::DeviceTensor<S>::from_host(w0);
  precis::cuda::DeviceTensor<S> ga(shape), gb(shape);
  precis::optim::DynamicLossScaler::options so;
  so.growth_interval = 3;
  so.init_scale = 256;
  const precis::optim::DynamicLossScaler scaler(so);
  Opt a({{"w", wa.view(), ga.view()}}, {}, scaler, Opt::options{.stream = stream});
  Opt b({{"w", wb.view(), gb.view()}}, {}, scaler, Opt::options{.stream = stream});
  cudaGraph_t graph = nullptr;
  precis::cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  b.step();
  precis::cuda::check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture (step() must not synchronize)");
  cudaGraphExec_t exec = nullptr;
  precis::cuda::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  precis::Tensor<S> g(shape);
  for (int step = 0; step < 8; ++step) {
    const double scale = a.read_status().scaler.scale;
    for (auto& x : g) x = S(static_cast<float>(nd(rng) * 1e-3 * scale));
    if (step == 4) g.data()[17] = S(INFINITY);
    ga.copy_from(g);
    gb.copy_from(g);
    precis::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the copies have landed
    a.step();
    precis::cuda::check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  }
  const auto sa = a.read_status(), sb = b.read_status();
  check(sa.scaler.scale == sb.scaler.scale && sa.updates == sb.updates && sa.scaler.skipped == 1 && sb.scaler.skipped == 1,
        "graph: the same scaler state and one skipped step");
  const auto ha = wa.to_host(), hb = wb.to_host();
  int diff = 0;
  for (index_t k = 0; k < ha.size(); ++k) diff += !same_bits(ha.data()[k], hb.data()[k]);
  check(diff == 0, "graph: " + std::to_string(diff) + " parameters differ from the direct steps'");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  std::printf("graph: 8 steps replayed from a captured step give the direct steps' bits\n");
}

template <class T>
int mismatches_bits(const precis::Tensor<T>& a, const precis::Tensor<T>& b) {
  int n = 0;
  for (index_t k = 0; k < a.size(); ++k) n += !same_bits(a.data()[k], b.data()[k]);
  return n;
}

/// bf16-true's in-place update rounded stochastically: w = 1 and an SGD step of 2^-12, a sixteenth
/// of bf16's spacing below 1 (2^-8). Rounded to nearest, nothing moves; stochastically, each
/// element goes down to 1 - 2^-8 with probability 1/16, independently: over 2^16 elements the
/// count is within 6 standard deviations of 4096 and the mean is unbiased. The same seed gives
/// the same bits; another seed other bits.
void stochastic_rounding() {
  using P = precis::policy::named<"bf16-true">;
  using S = precis::bfloat16;
  using G = precis::grad_storage_t<P, S>;
  using Opt = precis::cuda::MixedPrecisionOptimizer<P, precis::optim::SGD>;
  const Shape shape{1 << 16};
  const auto w0 = precis::Tensor<S>::full(shape, S(1.0f));
  const auto g = precis::Tensor<G>::full(shape, precis::detail::store<G>(std::ldexp(1.0f, -12)));
  const auto run = [&](precis::optim::update_rounding how, std::uint64_t seed) {
    auto w = precis::cuda::DeviceTensor<S>::from_host(w0);
    auto gd = precis::cuda::DeviceTensor<G>::from_host(g);
    Opt o({{"w", w.view(), gd.view()}}, {.lr = 1.0}, Opt::options{.rounding = how, .seed = seed});
    o.step();
    check(o.read_status().applied, "stochastic rounding: the step applies");
    return w.to_host();
  };
  const auto nearest = run(precis::optim::update_rounding::nearest, 3);
  int moved = 0;
  for (const auto& x : nearest) moved += static_cast<float>(x) != 1.0f;
  check(moved == 0, "bf16-true, nearest: " + std::to_string(moved) + " of 2^16 weights moved by a sixteenth of an ulp");
  const auto a = run(precis::optim::update_rounding::stochastic, 3), b = run(precis::optim::update_rounding::stochastic, 3),
             c = run(precis::optim::update_rounding::stochastic, 4);
  int down = 0, other = 0;
  for (const auto& x : a) {
    const float v = static_cast<float>(x);
    down += v == 1.0f - std::ldexp(1.0f, -8);
    other += v != 1.0f && v != 1.0f - std::ldexp(1.0f, -8);
  }
  const double n = static_cast<double>(shape.numel()), p = 1.0 / 16, sd = std::sqrt(n * p * (1 - p));
  check(other == 0, "bf16-true, stochastic: " + std::to_string(other) + " weights are neither neighbour of the exact update");
  check(std::fabs(down - n * p) <= 6 * sd, "bf16-true, stochastic: " + std::to_string(down) + " of 2^16 rounded down; expected " +
                                               std::to_string(n * p) + " +- 6 x " + std::to_string(sd));
  check(mismatches_bits(a, b) == 0, "bf16-true, stochastic: the same seed gave other bits");
  check(mismatches_bits(a, c) > 0, "bf16-true, stochastic: another seed gave the same bits");
  std::printf("bf16-true stochastic rounding on the device: %d of 65536 rounded down (expected 4096 +- %.0f), reproducible by seed\n", down, 6 * sd);
}

/// Two identical runs, the same bits (the sums have a fixed order); then a forced overflow and
/// zero_grad.
void deterministic() {
  using P = precis::policy::named<"bf16-mixed">;
  using S = precis::bfloat16;
  using Opt = precis::cuda::MixedPrecisionOptimizer<P, precis::optim::SGD>;
  const Shape shape{1 << 20};
  precis::Tensor<S> w0(shape), g(shape);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : w0) x = S(nd(rng));
  for (auto& x : g) x = S(nd(rng));
  std::vector<precis::Tensor<S>> out;
  std::vector<double> norms;
  for (int run = 0; run < 2; ++run) {
    auto w = precis::cuda::DeviceTensor<S>::from_host(w0);
    auto gd = precis::cuda::DeviceTensor<S>::from_host(g);
    Opt o({{"w", w.view(), gd.view()}}, {.lr = 0.1, .momentum = 0.9}, Opt::options{.max_norm = 1.0});
    for (int s = 0; s < 3; ++s) o.step();
    norms.push_back(o.read_status().grad_norm);
    out.push_back(w.to_host());
    if (run == 1) {
      // a forced overflow skips the next step whatever the gradients hold; zero_grad zeroes them
      o.force_found_inf();
      o.step();
      const auto st = o.read_status();
      check(st.found_inf && !st.applied && st.updates == 3 && st.scaler.skipped == 1, "force_found_inf: the step is skipped");
      check(mismatches_bits(w.to_host(), out.back()) == 0, "force_found_inf: the skipped step wrote parameters");
      o.step();
      check(o.read_status().applied, "the step after a forced overflow applies");
      o.zero_grad();
      const auto gz = gd.to_host();
      int nonzero = 0;
      for (const auto& x : gz) nonzero += !same_bits(x, S(0.0f));
      check(nonzero == 0, "zero_grad: " + std::to_string(nonzero) + " gradients are not +0");
    }
  }
  int diff = 0;
  for (index_t k = 0; k < out[0].size(); ++k) diff += !same_bits(out[0].data()[k], out[1].data()[k]);
  check(diff == 0 && same_bits(norms[0], norms[1]), "two runs: " + std::to_string(diff) + " parameters differ");
  // the norm against a double sum on the host
  double ssq = 0;
  for (const auto& x : g) ssq += static_cast<double>(float(x)) * static_cast<double>(float(x));
  const double want = std::sqrt(ssq), n = static_cast<double>(g.size());
  check(std::fabs(norms[0] - want) <= n * std::ldexp(1.0, -53) * want, "the norm: " + std::to_string(norms[0]) + " against " + std::to_string(want));
  std::printf("determinism: two runs give the same bits; the norm within n u of a double sum\n");
}

int run_device() {
  if (precis::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  precis::optim::DynamicLossScaler::options grow;
  grow.init_scale = 1024;
  grow.growth_interval = 2;
  against_host<precis::policy::named<"16-mixed">>("16-mixed, SGD momentum", precis::optim::SGD{.lr = 0.1, .momentum = 0.9},
                                                   precis::optim::DynamicLossScaler(grow), 0.0, 9, 4);
  against_host<precis::policy::named<"bf16-mixed">>("bf16-mixed, AdamW", precis::optim::AdamW{}, precis::optim::NoLossScaler{}, 0.0, 6, 3);
  precis::optim::Adam adam;
  adam.lr = 1e-2;
  adam.weight_decay = 1e-2;
  against_host<precis::policy::named<"32-true">>("32-true, Adam, clipped", adam, precis::optim::NoLossScaler{}, 0.5, 6, 5);
  against_host<precis::policy::named<"bf16-true">>("bf16-true, SGD momentum", precis::optim::SGD{.lr = 0.1, .momentum = 0.9},
                                                    precis::optim::NoLossScaler{}, 0.0, 6, 3, 2.0);
  against_host<precis::policy::named<"16-true">>("16-true, AdamW", precis::optim::AdamW{}, precis::optim::NoLossScaler{}, 0.0, 6, 3, 2.0);
  stochastic_rounding();
  deterministic();
  graph_replay();
  std::printf("%s\n", failures == 0 ? "device optimizer: all checks passed" : "device optimizer: FAILED");
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
