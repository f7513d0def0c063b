// The mixed-precision optimizer step on the device: the finite check, the gradients' norm,
// clipping, the loss scaler's update and the rule's update of the master weights and of their
// low-precision copies, for every parameter, in three kernel launches and no host
// synchronization. Include only from .cu translation units.
//
//   using P = precis::policy::named<"16-mixed">;
//   precis::cuda::MixedPrecisionOptimizer<P, precis::optim::AdamW> opt(
//       {{"w1", w1.view(), gw1.view()}, {"b1", b1.view(), gb1.view()}}, precis::optim::AdamW{});
//   ... backward, its seed read from opt.device_scale() ...
//   opt.step();       // enqueued on the stream; the host learns nothing and waits for nothing
//   opt.zero_grad();
//
// A step, on one stream:
//   1. squares: every gradient is read once (widened exactly to fp32, squared and summed in
//      double, in tiles of `tile` elements); one partial sum per tile. A sum of squares in double
//      cannot overflow for finite fp32 values, so it is finite exactly when every gradient is.
//   2. decide (one block): the partials summed in a fixed order; the norm of the unscaled
//      gradients; the clip factor; the scaler's update (optim::advance, the host scalers' own
//      rule); whether the update applies; the rule's per-step context (prepare). Everything it
//      decides stays in device memory.
//   3. update: each element's gradient is multiplied by 1 / (scale x accumulation steps) x clip,
//      in the master arithmetic, as it is read (a 16-bit gradient is never unscaled in its own
//      storage); the rule updates the master and its state; the parameter receives the master
//      rounded once to nearest. A parameter without a master (the "-true" policies; bf16-true
//      and 16-true keep their state in bf16 or fp16 and compute in fp32) is updated in place,
//      rounded to nearest or stochastically (options::rounding). When the decision was to skip,
//      the kernel returns at once and nothing is written.
// The same order as optim::MixedPrecisionOptimizer: the gradients are unscaled by the scale they
// were seeded with, before the scaler's update of it. Sums in a fixed order, so a step gives the
// same bits every time; against the host optimizer the masters differ by the device's fused
// multiply-adds (a rounding or two per update).
//
// The rule's prepare() and update() run on the device: SGD, Adam and AdamW are written so
// (PRECIS_HOST_DEVICE); a rule of one's own must be too, or nvcc names the host function it
// cannot call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "precis/autodiff/tape.hpp"
#include "precis/cuda/device.cuh"
#include "precis/cuda/gemm/epilogue.cuh"
#include "precis/error.hpp"
#include "precis/optim/mixed_precision.hpp"  // optim::update_rounding
#include "precis/optim/optimizers.hpp"
#include "precis/optim/scaler.hpp"
#include "precis/policy/policies.hpp"

namespace precis::cuda {

namespace optim_detail {

/// Elements per tile: the unit of one block's work in every kernel of the step.
inline constexpr index_t tile = 4096;
inline constexpr int threads = 256;

template <class T>
constexpr bool storable = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, precis::half> ||
                          std::is_same_v<T, precis::bfloat16>;

/// p[i] in M (exact: M is at least as wide as every storable format below it).
template <class M, class T>
__device__ M load(const T* p, index_t i) {
  if constexpr (std::is_same_v<T, double>) return static_cast<M>(p[i]);
  else return static_cast<M>(precis::cuda::detail::load_as_float(p, static_cast<std::size_t>(i)));
}

/// p[i] = v rounded once to nearest even (an fp64 value straight into T: through fp32 first it
/// could be rounded twice).
template <class T, class M>
__device__ void store(T* p, index_t i, M v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, M>) p[i] = static_cast<T>(v);
  else if constexpr (std::is_same_v<M, double>)
    precis::cuda::detail::round_store(p + i, v, rounding::nearest_even, precis::detail::storage_overflow<T>, 0);
  else precis::cuda::detail::store_rounded(p, static_cast<std::size_t>(i), static_cast<float>(v));
}

/// One parameter tensor in device memory, as the kernels see it: masters and state stored in M
/// (P's master type), their arithmetic T (M's own: fp32 for a 16-bit M).
template <class Param, class Grad, class M, std::size_t K>
struct segment {
  Param* value = nullptr;
  Grad* grad = nullptr;
  M* master = nullptr;         // null when the parameter is stored in M itself
  M* state[K == 0 ? 1 : K] = {};
  index_t n = 0;
  index_t first_tile = 0;      // its first tile among all the optimizer's tiles
  std::uint32_t number = 0;    // its place in the optimizer's list (stochastic rounding's stream)
};

/// What the decision kernel writes and the update kernel reads, in device memory (T: the
/// masters' arithmetic).
template <class Context, class T>
struct decision {
  optim::scaler_state scaler;
  std::int64_t updates = 0;    // updates applied (the rule's step count)
  double grad_norm = 0;        // of the unscaled gradients; inf when one was not finite
  T factor = 1;                // what each gradient is multiplied by as it is read
  int apply = 0;               // whether this step's update applies
  int found_inf = 0;
  int force_inf = 0;           // set by force_found_inf(), cleared by the next decision
  Context ctx{};
};

/// The tile's parameter and its element range within it.
template <class Seg>
__device__ const Seg& tile_segment(const Seg* segs, const int* tile_seg, index_t& begin, index_t& end) {
  const auto t = static_cast<index_t>(blockIdx.x);
  const Seg& s = segs[tile_seg[t]];
  begin = (t - s.first_tile) * tile;
  end = begin + tile < s.n ? begin + tile : s.n;
  return s;
}

/// The sum of v over the block's threads, in a fixed order (the same bits on every run).
__device__ inline double block_sum(double v) {
  __shared__ double part[threads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int half = threads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}

template <class Seg, class T>
__global__ void __launch_bounds__(threads) squares_kernel(const Seg* segs, const int* tile_seg, double* partials) {
  index_t begin = 0, end = 0;
  const Seg& s = tile_segment(segs, tile_seg, begin, end);
  double acc = 0;
  for (index_t i = begin + static_cast<index_t>(threadIdx.x); i < end; i += threads) {
    const auto v = static_cast<double>(load<T>(s.grad, i));
    acc += v * v;
  }
  const double sum = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <class Rule, class T>
__global__ void __launch_bounds__(threads)
    decide_kernel(const double* partials, index_t n_tiles, decision<typename Rule::context, T>* d, optim::scaling_rule sr,
                  Rule rule, double accumulation_steps, double max_norm) {
  double acc = 0;
  for (index_t t = static_cast<index_t>(threadIdx.x); t < n_tiles; t += threads) acc += partials[t];
  const double ssq = block_sum(acc);
  if (threadIdx.x != 0) return;
  const bool found_inf = !(ssq - ssq == 0) || d->force_inf != 0;
  const double inverse = 1.0 / (d->scaler.scale * accumulation_steps);  // the scale the gradients have
  const double norm = found_inf ? static_cast<double>(INFINITY) : ::sqrt(ssq) * inverse;
  const double clip = (max_norm > 0 && !found_inf && norm > max_norm) ? max_norm / (norm + 1e-6) : 1.0;
  d->grad_norm = norm;
  d->factor = static_cast<T>(inverse * clip);
  d->found_inf = found_inf ? 1 : 0;
  d->force_inf = 0;
  optim::advance(d->scaler, sr, found_inf);
  d->apply = found_inf ? 0 : 1;
  if (!found_inf) {
    ++d->updates;
    d->ctx = rule.prepare(d->updates);
  }
}

/// The update in T: masters, state and parameters widened exactly as read and rounded once to
/// nearest into their storage as written; a parameter without a master is rounded
/// stochastically instead when `seed` is given (`stochastic`): the host's rounding core with 64
/// Philox bits of (seed, the update count, the parameter's number, the element).
template <class Rule, class Seg, class T, std::size_t K>
__global__ void __launch_bounds__(threads) update_kernel(const Seg* segs, const int* tile_seg, const decision<typename Rule::context, T>* d,
                                                         Rule rule, int active, bool stochastic, std::uint64_t seed) {
  if (d->apply == 0) return;
  index_t begin = 0, end = 0;
  const Seg& s = tile_segment(segs, tile_seg, begin, end);
  const auto ctx = d->ctx;
  const T factor = d->factor;
  const auto updates = static_cast<std::uint64_t>(d->updates);
  for (index_t i = begin + static_cast<index_t>(threadIdx.x); i < end; i += threads) {
    T w = s.master != nullptr ? load<T>(s.master, i) : load<T>(s.value, i);
    const T g = T(load<T>(s.grad, i) * factor);
    if constexpr (K == 0) {
      w = rule.update(w, g, static_cast<T*>(nullptr), ctx);
    } else {
      T st[K];
      for (int j = 0; j < active; ++j) st[j] = load<T>(s.state[j], i);
      w = rule.update(w, g, active > 0 ? st : static_cast<T*>(nullptr), ctx);
      for (int j = 0; j < active; ++j) store(s.state[j], i, st[j]);
    }
    if (s.master != nullptr) {
      store(s.master, i, w);
      store(s.value, i, w);  // the master rounded once (exact when the parameter is stored in T)
    } else if (stochastic) {
      using Param = std::remove_pointer_t<decltype(s.value)>;
      precis::cuda::detail::round_store(s.value + i, w, rounding::stochastic, precis::detail::storage_overflow<Param>,
                                        stochastic_bits(seed, updates, s.number, static_cast<std::uint64_t>(i)));
    } else {
      store(s.value, i, w);
    }
  }
}

template <class Seg, class T>
__global__ void __launch_bounds__(threads) masters_kernel(const Seg* segs, const int* tile_seg) {
  index_t begin = 0, end = 0;
  const Seg& s = tile_segment(segs, tile_seg, begin, end);
  if (s.master == nullptr) return;
  for (index_t i = begin + static_cast<index_t>(threadIdx.x); i < end; i += threads) store(s.master, i, load<T>(s.value, i));
}

template <class Seg>
__global__ void __launch_bounds__(threads) zero_kernel(const Seg* segs, const int* tile_seg) {
  index_t begin = 0, end = 0;
  const Seg& s = tile_segment(segs, tile_seg, begin, end);
  for (index_t i = begin + static_cast<index_t>(threadIdx.x); i < end; i += threads) store(s.grad, i, 0.0f);
}

template <class Context, class T>
__global__ void force_kernel(decision<Context, T>* d) {
  d->force_inf = 1;
}

}  // namespace optim_detail

/// An optimizer rule (optim::SGD, Adam, AdamW, or one of one's own whose prepare() and update()
/// are PRECIS_HOST_DEVICE) over parameters in device memory under policy P, with a loss scaler
/// whose state lives on the device. Parameters stored narrower than P's master type get a
/// master copy (fp32 under the "-mixed" policies); the others (every parameter of a "-true"
/// policy: bf16-true and 16-true keep their state in bf16 or fp16 too, their arithmetic fp32)
/// are updated in place, rounded to nearest or (options::rounding) stochastically.
template <class P, class Rule>
class MixedPrecisionOptimizer {
 public:
  using param_type = typename P::param_type;
  using grad_type = grad_storage_t<P, param_type>;
  using master_type = typename P::master_type;
  using compute_type = default_compute_t<master_type>;  // the masters' arithmetic
  static constexpr bool has_masters = !std::is_same_v<param_type, master_type>;
  static constexpr std::size_t state_count = Rule::state_count;

  static_assert(optim::optimizer_rule<Rule, compute_type>, "precis::cuda::MixedPrecisionOptimizer: Rule is not an optimizer rule");
  static_assert(optim_detail::storable<master_type> && (std::is_same_v<compute_type, float> || std::is_same_v<compute_type, double>),
                "precis::cuda::MixedPrecisionOptimizer: master weights in fp64, fp32, fp16 or bf16 (their arithmetic fp32 or fp64)");
  static_assert(optim_detail::storable<param_type> && optim_detail::storable<grad_type>,
                "precis::cuda::MixedPrecisionOptimizer: parameters and gradients in fp64, fp32, fp16 or bf16");
  static_assert(std::is_trivially_copyable_v<Rule> && std::is_trivially_copyable_v<typename Rule::context>,
                "precis::cuda::MixedPrecisionOptimizer: the rule and its context are copied to the device");

  /// A parameter and its gradient, dense, of the same shape, in device memory; grad_is_zero,
  /// when given, the mark zero_grad() sets that the gradient holds zeros
  /// (nn::Parameter::grad_is_zero, which the tape's next backward reads).
  struct parameter {
    std::string name;
    DeviceView<param_type> value;
    DeviceView<grad_type> grad;
    bool* grad_is_zero = nullptr;
  };

  struct options {
    std::int64_t accumulation_steps = 1;  // micro-batches per step
    double max_norm = 0;                  // > 0: clip the unscaled gradients' global norm to it
    cudaStream_t stream = nullptr;        // every kernel of the optimizer runs on it
    /// For parameters without masters: nearest or stochastic (Kahan's compensation is the host
    /// optimizer's only). Stochastic draws 64 Philox bits per element from (seed, the update
    /// count, the parameter's place in the list, the element): the same bits on every run, other
    /// draws than the host optimizer's sequential generator.
    optim::update_rounding rounding = optim::update_rounding::nearest;
    std::uint64_t seed = 0x5eed;
  };

  /// The state a step leaves on the device, copied back.
  struct status {
    optim::scaler_state scaler;
    std::int64_t updates = 0;  // updates applied so far
    double grad_norm = 0;      // the last step's norm of the unscaled gradients (before clipping)
    bool found_inf = false;    // the last step's gradients were not all finite
    bool applied = false;      // the last step's update was applied
  };

  MixedPrecisionOptimizer(std::vector<parameter> params, Rule rule, const optim::DynamicLossScaler& scaler, options o = {})
      : MixedPrecisionOptimizer(std::move(params), std::move(rule), scaler.rule(), scaler.state(), o) {}
  MixedPrecisionOptimizer(std::vector<parameter> params, Rule rule, const optim::StaticLossScaler& scaler, options o = {})
      : MixedPrecisionOptimizer(std::move(params), std::move(rule), scaler.rule(), scaler.state(), o) {}
  /// Without a scaler argument: the policy's default (a DynamicLossScaler where P needs loss
  /// scaling, no scaling otherwise).
  MixedPrecisionOptimizer(std::vector<parameter> params, Rule rule, options o = {})
      : MixedPrecisionOptimizer(std::move(params), std::move(rule), default_rule(), default_state(), o) {}

  /// Every parameter of an nn module on the device (nn::Module<on_device<P>>), named by its
  /// path: the optimizer of a model built from precis::nn layers.
  template <class Net>
    requires requires(Net& n) { n.named_parameters(); }
  MixedPrecisionOptimizer(Net& net, Rule rule, options o = {}) : MixedPrecisionOptimizer(parameters_of(net), std::move(rule), o) {}
  template <class Net, class Scaler>
    requires requires(Net& n) { n.named_parameters(); }
  MixedPrecisionOptimizer(Net& net, Rule rule, const Scaler& scaler, options o = {})
      : MixedPrecisionOptimizer(parameters_of(net), std::move(rule), scaler, o) {}

  /// The module's parameters as this optimizer's list (their values and gradients in device
  /// memory, of this policy's types).
  template <class Net>
  static std::vector<parameter> parameters_of(Net& net) {
    std::vector<parameter> out;
    for (auto& [name, p] : net.named_parameters()) {
      const auto v = p->value.view();
      const auto g = p->grad.view();
      static_assert(std::is_same_v<typename decltype(v)::storage_type, param_type> &&
                        std::is_same_v<typename decltype(g)::storage_type, grad_type>,
                    "precis::cuda::MixedPrecisionOptimizer: the module's parameters are of another policy's types");
      out.push_back({name, DeviceView<param_type>(v.data(), v.shape()),
                     DeviceView<grad_type>(g.data(), g.shape()), &p->grad_is_zero});
    }
    return out;
  }

  MixedPrecisionOptimizer(const MixedPrecisionOptimizer&) = delete;
  MixedPrecisionOptimizer& operator=(const MixedPrecisionOptimizer&) = delete;
  MixedPrecisionOptimizer(MixedPrecisionOptimizer&&) noexcept = default;
  MixedPrecisionOptimizer& operator=(MixedPrecisionOptimizer&&) noexcept = default;

  /// Enqueues one step on the options' stream: the finite check and norm, the decision, the
  /// update. Nothing is copied to the host and nothing waits.
  void step() {
    namespace od = optim_detail;
    const auto blocks = static_cast<unsigned>(n_tiles_);
    od::squares_kernel<seg, compute_type><<<blocks, od::threads, 0, o_.stream>>>(segs_.data(), tile_seg_.data(), partials_.data());
    launched("squares");
    od::decide_kernel<Rule, compute_type><<<1, od::threads, 0, o_.stream>>>(
        partials_.data(), n_tiles_, decision_.data(), scaling_, rule_, static_cast<double>(o_.accumulation_steps), o_.max_norm);
    launched("decide");
    od::update_kernel<Rule, seg, compute_type, state_count><<<blocks, od::threads, 0, o_.stream>>>(
        segs_.data(), tile_seg_.data(), decision_.data(), rule_, active_, o_.rounding == optim::update_rounding::stochastic, o_.seed);
    launched("update");
  }

  /// The rule, whose hyperparameters (the learning rate of a schedule) may change between
  /// steps: each step() hands the rule to its kernels by value (a step captured into a CUDA
  /// graph keeps the values it was captured with).
  Rule& rule() noexcept { return rule_; }
  const Rule& rule() const noexcept { return rule_; }

  /// Enqueues zeroing every parameter's gradient, and marks them so (parameter::grad_is_zero):
  /// a backward enqueued after it on the same stream assigns its first write into each. (A
  /// graph keeps the choice its captured backward made; docs/cuda.md.)
  void zero_grad() {
    optim_detail::zero_kernel<seg>
        <<<static_cast<unsigned>(n_tiles_), optim_detail::threads, 0, o_.stream>>>(segs_.data(), tile_seg_.data());
    launched("zero_grad");
    for (const parameter& p : params_) {
      if (p.grad_is_zero != nullptr) *p.grad_is_zero = true;
    }
  }

  /// The next step() is skipped and backs the scaler off whatever the gradients hold (another
  /// rank found a non-finite gradient). Enqueued, like step().
  void force_found_inf() {
    optim_detail::force_kernel<<<1, 1, 0, o_.stream>>>(decision_.data());
    launched("force_found_inf");
  }

  /// The current loss scale in device memory: what the backward seeds the loss's gradient with.
  /// Valid as long as the optimizer; step() updates it in stream order.
  const double* device_scale() const noexcept {
    static_assert(std::is_standard_layout_v<dec> && std::is_standard_layout_v<optim::scaler_state>);
    const auto* base = reinterpret_cast<const char*>(decision_.data());
    return reinterpret_cast<const double*>(base + offsetof(dec, scaler) + offsetof(optim::scaler_state, scale));
  }

  /// The scaler, step count and last decision, copied back: waits for the stream.
  status read_status() const {
    dec d;
    check(cudaMemcpyAsync(&d, decision_.data(), sizeof(dec), cudaMemcpyDeviceToHost, o_.stream),
          "precis::cuda::MixedPrecisionOptimizer: cudaMemcpyAsync of the step's state");
    check(cudaStreamSynchronize(o_.stream), "precis::cuda::MixedPrecisionOptimizer: cudaStreamSynchronize");
    return {d.scaler, d.updates, d.grad_norm, d.found_inf != 0, d.apply != 0};
  }

  /// The master copy of parameter i (the parameter itself when there are no masters).
  DeviceView<const master_type> master(std::size_t i) const {
    const auto& p = params_.at(i);
    if constexpr (has_masters) return DeviceView<const master_type>(masters_.at(i).data(), p.value.shape());
    else return DeviceView<const master_type>(p.value.data(), p.value.shape());
  }
  /// The rule's state array j of parameter i (as the host optimizer's, j < state_count).
  DeviceView<const master_type> state(std::size_t i, std::size_t j) const {
    if (j >= static_cast<std::size_t>(active_)) {
      throw invalid_argument("precis::cuda::MixedPrecisionOptimizer::state: array " + std::to_string(j) + "; the rule uses " +
                             std::to_string(active_));
    }
    return DeviceView<const master_type>(states_.at(i * state_count + j).data(), params_.at(i).value.shape());
  }
  std::size_t size() const noexcept { return params_.size(); }
  const std::string& name(std::size_t i) const { return params_.at(i).name; }
  /// Device bytes the optimizer holds beyond the parameters and their gradients.
  std::size_t state_bytes() const noexcept {
    std::size_t n = partials_.bytes() + decision_.bytes() + segs_.bytes() + tile_seg_.bytes();
    for (const auto& m : masters_) n += m.bytes();
    for (const auto& s : states_) n += s.bytes();
    return n;
  }

 private:
  using seg = optim_detail::segment<param_type, grad_type, master_type, state_count>;
  using dec = optim_detail::decision<typename Rule::context, compute_type>;

  static optim::scaling_rule default_rule() {
    if constexpr (P::needs_loss_scaling) return optim::DynamicLossScaler{}.rule();
    else return optim::NoLossScaler{}.rule();
  }
  static optim::scaler_state default_state() {
    if constexpr (P::needs_loss_scaling) return optim::DynamicLossScaler{}.state();
    else return optim::NoLossScaler{}.state();
  }

  MixedPrecisionOptimizer(std::vector<parameter> params, Rule rule, optim::scaling_rule sr, optim::scaler_state st, options o)
      : params_(std::move(params)), rule_(std::move(rule)), scaling_(sr), o_(o) {
    const std::string who = "precis::cuda::MixedPrecisionOptimizer";
    rule_.validate();
    active_ = static_cast<int>(optim::active_states(rule_));
    if (static_cast<std::size_t>(active_) > state_count) {
      throw invalid_argument(who + ": the rule's active_states() is " + std::to_string(active_) + "; expected at most its state_count, " +
                             std::to_string(state_count));
    }
    if (o_.accumulation_steps < 1) {
      throw invalid_argument(who + ": accumulation_steps = " + std::to_string(o_.accumulation_steps) + "; expected >= 1");
    }
    if (!(o_.max_norm >= 0)) throw invalid_argument(who + ": max_norm = " + std::to_string(o_.max_norm) + "; expected >= 0 (0: no clipping)");
    if (o_.rounding == optim::update_rounding::kahan) {
      throw invalid_argument(who + ": update_rounding::kahan is not on the device; expected nearest or stochastic");
    }
    if (params_.empty()) throw invalid_argument(who + ": no parameters");
    const auto dense = [](const auto& v) { return v.strides() == contiguous_strides(v.shape()); };
    index_t total = 0;
    for (const parameter& p : params_) {  // every check before the first allocation
      if (p.value.shape() != p.grad.shape() || !dense(p.value) || !dense(p.grad) ||
          (p.value.size() > 0 && (p.value.data() == nullptr || p.grad.data() == nullptr))) {
        throw shape_error(who + ": parameter '" + p.name + "' has value " + p.value.shape().str() + " (strides " +
                          p.value.strides().str() + ") and gradient " + p.grad.shape().str() + " (strides " +
                          p.grad.strides().str() + "); expected dense device tensors of the same shape");
      }
      if (may_overlap(p.value, p.grad)) throw aliasing_error(who + ": parameter '" + p.name + "' shares memory with its gradient");
      total += p.value.size();
    }
    if (total == 0) throw invalid_argument(who + ": every parameter is empty");
    std::vector<seg> segs;
    std::vector<int> tile_seg;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const parameter& p = params_[i];
      seg s;
      s.value = p.value.data();
      s.grad = p.grad.data();
      s.n = p.value.size();
      s.first_tile = static_cast<index_t>(tile_seg.size());
      s.number = static_cast<std::uint32_t>(i);
      if constexpr (has_masters) {
        masters_.emplace_back(static_cast<std::size_t>(s.n));
        s.master = masters_.back().data();
      }
      for (std::size_t j = 0; j < state_count; ++j) {
        states_.emplace_back(j < static_cast<std::size_t>(active_) ? static_cast<std::size_t>(s.n) : 0);
        if (j < static_cast<std::size_t>(active_)) {
          s.state[j] = states_.back().data();
          check(cudaMemsetAsync(s.state[j], 0, states_.back().bytes(), o_.stream), who + ": cudaMemsetAsync of a state array");
        }
      }
      for (index_t t = 0; t * optim_detail::tile < s.n; ++t) tile_seg.push_back(static_cast<int>(i));
      segs.push_back(s);
    }
    n_tiles_ = static_cast<index_t>(tile_seg.size());
    segs_ = device_buffer<seg>(segs.size());
    tile_seg_ = device_buffer<int>(tile_seg.size());
    partials_ = device_buffer<double>(tile_seg.size());
    decision_ = device_buffer<dec>(1);
    dec d;
    d.scaler = st;
    check(cudaMemcpyAsync(segs_.data(), segs.data(), segs_.bytes(), cudaMemcpyHostToDevice, o_.stream), who + ": copying the parameter table");
    check(cudaMemcpyAsync(tile_seg_.data(), tile_seg.data(), tile_seg_.bytes(), cudaMemcpyHostToDevice, o_.stream),
          who + ": copying the tile table");
    check(cudaMemcpyAsync(decision_.data(), &d, sizeof(dec), cudaMemcpyHostToDevice, o_.stream), who + ": copying the scaler's state");
    if constexpr (has_masters) {
      optim_detail::masters_kernel<seg, compute_type>
          <<<static_cast<unsigned>(n_tiles_), optim_detail::threads, 0, o_.stream>>>(segs_.data(), tile_seg_.data());
      launched("masters");
    }
    // the host's tables go out of scope here: the copies must have read them
    check(cudaStreamSynchronize(o_.stream), who + ": cudaStreamSynchronize after setup");
  }

  void launched(const char* what) const {
    check(cudaGetLastError(), std::string("precis::cuda::MixedPrecisionOptimizer: launch of the ") + what + " kernel");
  }

  std::vector<parameter> params_;
  Rule rule_;
  optim::scaling_rule scaling_;
  options o_;
  int active_ = 0;
  index_t n_tiles_ = 0;
  std::vector<device_buffer<master_type>> masters_;
  std::vector<device_buffer<master_type>> states_;  // state_count per parameter
  device_buffer<seg> segs_;
  device_buffer<int> tile_seg_;
  device_buffer<double> partials_;
  device_buffer<dec> decision_;
};

}  // namespace precis::cuda
