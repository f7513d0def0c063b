// The training loop on the GPU (train_fashion_mnist --device cuda), shared by the translation
// units that instantiate it (device_runs.cu: the MLP; device_cnn_vit.cu: the CNN and the ViT):
// the same model, seed, data order, optimizer rule, learning-rate schedule and loss scaler as
// the CPU run of train.hpp, with the model's parameters in device memory
// (Model<cuda::on_device<P>>), the tape on the device, and precis::cuda::MixedPrecisionOptimizer
// taking the step (its dynamic loss scale and skip decision stay on the device; the backward is
// seeded from there).
//
// Each step copies its batch and labels to the device and reads its loss back (the demo's
// loss curve), so a step waits for the GPU twice: the s / epoch column is a training loop's
// time with those waits, not the step alone (bench/cuda/train.cu times that). The memory column
// is GPU memory: the tape's device arenas at their peak, the parameters and their gradients,
// and the optimizer's masters and state. Every 20 steps the weight gradients are copied back
// for the gradient columns, as on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <precis/cuda/backend.cuh>
#include <precis/cuda/optim.cuh>

#include "train.hpp"

namespace fashion_mnist {
namespace device_detail {

namespace pc = precis::cuda;

/// A non-blocking stream for one run.
class stream_owner {
 public:
  stream_owner() { pc::check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "train_fashion_mnist: cudaStreamCreateWithFlags"); }
  ~stream_owner() { cudaStreamDestroy(s_); }
  stream_owner(const stream_owner&) = delete;
  stream_owner& operator=(const stream_owner&) = delete;
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// The run of q.model under P on the GPU, with the update rounding `how` of parameters kept
/// without masters (the "-true" policies: nearest, or stochastic for bf16-true+sr) and the loss
/// scaler `scaler` (none: the policy's default).
template <template <class> class Model, class P, class... Scaler>
result train_on_device(const request& q, optim::update_rounding how, const Scaler&... scaler) {
  using D = pc::on_device<P>;
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  using Rule = typename Model<P>::training::rule;
  using Opt = pc::MixedPrecisionOptimizer<P, Rule>;
  const settings& st = q.st;
  result r;
  r.model = q.model;
  r.policy = q.policy;
  r.hist.assign(hist_hi - hist_lo + 1, 0);
  const stream_owner stream;
  const pc::device_backend on_stream{stream.get()};
  Model<D> net(st.seed);  // the CPU run's initial bits, uploaded
  const double lr = st.lr > 0 ? st.lr : Model<P>::lr;
  Opt opt(net, Model<P>::training::make(lr), scaler..., typename Opt::options{.stream = stream.get(), .rounding = how, .seed = st.seed});
  const TensorView<const double> seed(opt.device_scale(), Shape{});

  const index_t n = q.tr.images.shape()[0], steps_per_epoch = n / st.batch;
  const index_t curve_every = std::max<index_t>(1, steps_per_epoch / 10);
  const index_t total_steps = steps_per_epoch * q.epochs;
  Tensor<float> staging(Shape{st.batch, 784});
  Tensor<S> xb(Shape{st.batch, 784});
  std::vector<std::int64_t> yb(static_cast<std::size_t>(st.batch));
  std::vector<index_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), index_t{0});
  xoshiro256pp gen(st.seed);
  Tape<D> tape(0, on_stream);
  // fp16 gradients without loss scaling have already lost what underflows: counted against the
  // same step recomputed in fp32 on the host, as the CPU run does
  constexpr bool measure_against_fp32 = std::is_same_v<G, precis::half> && sizeof...(Scaler) == 0 && !P::needs_loss_scaling;
  fp32_shadow<Model, measure_against_fp32> shadow(st.seed);
  progress bar(q.model + " " + q.policy + " (cuda)", q.epochs, false, st.plain_progress);
  double seconds = 0;
  for (int e = 0; e < q.epochs; ++e) {
    // a fresh permutation every epoch, the same as the CPU run's
    for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[gen() % (i + 1)]);
    const auto t0 = std::chrono::steady_clock::now();
    double epoch_loss = 0, window = 0;
    for (index_t s = 0; s < steps_per_epoch; ++s) {
      gather(q.tr, order, s * st.batch, staging, xb, yb);
      tape.reset();
      opt.zero_grad();
      auto loss = cross_entropy(net(tape.input(xb)), yb);  // the batch and its labels copied to the device
      tape.backward(loss, seed);                             // seeded with the device's loss scale
      opt.rule().lr = lr * 0.5 * (1 + std::cos(3.141592653589793 * static_cast<double>(r.steps) / static_cast<double>(total_steps)));
      if (r.steps % 20 == 0) {
        const double inv = 1.0 / opt.read_status().scaler.scale;  // the scale this step was seeded with
        std::vector<float> ref;
        if constexpr (measure_against_fp32) ref = fp32_weight_gradients(net, shadow, xb, yb, [&](auto& p) { return p.value_on_host(on_stream); });
        std::size_t k = 0;
        net.for_each_parameter([&](auto& p) {
          if (p.name.find("weight") == std::string::npos) return;
          const Tensor<G> g = p.grad_on_host(on_stream);
          for (const auto& v : g) {
            count_gradient(static_cast<double>(static_cast<float>(v)) * inv, r, ref.empty() ? nullptr : &ref[k]);
            ++k;
          }
        });
      }
      opt.step();
      ++r.steps;
      const double l = loss.item();
      epoch_loss += l;
      window += l;
      if ((s + 1) % curve_every == 0) {
        r.curve.push_back(window / static_cast<double>(curve_every));
        window = 0;
        bar.update(e, static_cast<double>(s + 1) / static_cast<double>(steps_per_epoch), epoch_loss / static_cast<double>(s + 1));
      }
    }
    pc::check(cudaStreamSynchronize(stream.get()), "train_fashion_mnist: cudaStreamSynchronize");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += secs;
    r.final_loss = epoch_loss / static_cast<double>(steps_per_epoch);
    bar.epoch_done(e, r.final_loss, secs);
  }
  const auto status = opt.read_status();
  if constexpr (pol::fp8_policy<P>) {  // every fp8 cast of the training steps (read from the device)
    const auto tot = tape.fp8().totals();
    r.fp8_saturated = tot.saturated_fraction();
    r.fp8_flushed = tot.flushed_fraction();
  }
  r.seconds_per_epoch = seconds / q.epochs;
  r.epochs = q.epochs;
  r.skipped = status.scaler.skipped;
  r.scale = status.scaler.scale;
  r.flushed /= static_cast<double>(r.sampled);
  r.zeros /= static_cast<double>(r.sampled);

  std::size_t model_bytes = 0;
  net.for_each_parameter([&](auto& p) { model_bytes += static_cast<std::size_t>(p.value.size()) * (sizeof(S) + sizeof(G)); });
  r.memory_mib = static_cast<double>(tape.arena().peak_bytes() + tape.scratch_arena().peak_bytes() + model_bytes + opt.state_bytes()) /
                 (1024.0 * 1024.0);

  // test accuracy, forward only, in chunks of 1000 images (the last one ragged), the logits
  // copied back
  const index_t m = q.te.images.shape()[0], chunk = std::min<index_t>(1000, m);
  Tensor<float> tstaging(Shape{chunk, 784});
  Tensor<S> xt(Shape{chunk, 784});
  std::vector<std::int64_t> yt(static_cast<std::size_t>(chunk));
  std::vector<index_t> identity(static_cast<std::size_t>(m));
  std::iota(identity.begin(), identity.end(), index_t{0});
  index_t correct = 0;
  for (index_t first = 0; first < m; first += chunk) {
    const index_t len = std::min(chunk, m - first);
    if (len != chunk) {
      tstaging = Tensor<float>(Shape{len, 784});
      xt = Tensor<S>(Shape{len, 784});
    }
    gather(q.te, identity, first, tstaging, xt, yt);
    tape.reset();
    auto guard = tape.no_grad();
    const auto logits = to_host(net(tape.input(xt)));  // copied back
    for (index_t i = 0; i < len; ++i) {
      index_t best = 0;
      for (index_t j = 1; j < 10; ++j) {
        if (static_cast<double>(logits(i, j)) > static_cast<double>(logits(i, best))) best = j;
      }
      correct += best == yt[static_cast<std::size_t>(i)];
    }
  }
  r.test_accuracy = static_cast<double>(correct) / static_cast<double>(m);
  return r;
}

}  // namespace device_detail
}  // namespace fashion_mnist
