// precis::optim::MixedPrecisionOptimizer: an optimizer rule (SGD, Adam, AdamW, or any type that
// is an optim::optimizer_rule) over a module's parameters under policy P, with a loss scaler.
//
//   optim::MixedPrecisionOptimizer opt(net, optim::AdamW{}, optim::DynamicLossScaler{});
//   opt.backward(tape, loss);            // backward seeded with the loss scale
//   opt.unscale();                       // optional: one fused pass, finite check + norm
//   opt.clip_grad_norm(1.0);             // optional: on the unscaled gradients
//   bool stepped = opt.step();           // skipped (false) when a gradient was inf/NaN
//   opt.zero_grad();
//
// Parameters stored narrower than P's master type (bf16/fp16 under the "-mixed" policies) get a
// master copy in the master type (fp32); the rule updates the master and the parameter receives
// the master rounded once to nearest. Parameters stored in the master type itself (the "-true"
// policies) are updated in place, rounded to nearest, stochastically, or with a Kahan
// compensation term, so that updates smaller than half an ulp are not lost.
//
// Gradients are never unscaled in their own (16-bit) storage, where small values would flush to
// zero: the unscale pass only reads them (finite check and squared norm, in double), and the
// update multiplies each gradient by 1 / (scale x accumulation steps) x clip factor in the
// master arithmetic as it reads it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "precis/format/random.hpp"
#include "precis/format/round_to.hpp"
#include "precis/nn/nn.hpp"
#include "precis/optim/checkpoint.hpp"
#include "precis/optim/optimizers.hpp"
#include "precis/optim/scaler.hpp"

namespace precis::optim {

/// How a parameter without a master copy receives its updated value.
enum class update_rounding {
  nearest,     // round to nearest even (updates below half an ulp are lost)
  stochastic,  // unbiased stochastic rounding (Connolly, Higham & Mary 2021)
  kahan        // keep the rounding error in a compensation tensor and add it back next step
};

namespace detail {
template <class R>
consteval std::size_t rule_state_count() {
  if constexpr (rule_has_state_count<R>) return R::state_count;
  else return 0;
}
}  // namespace detail

template <class P, class Rule, loss_scaler Scaler = DynamicLossScaler>
class MixedPrecisionOptimizer {
 public:
  using param_type = typename P::param_type;
  using grad_type = grad_storage_t<P, param_type>;
  using master_type = typename P::master_type;
  using compute_type = default_compute_t<master_type>;
  using parameter = nn::Parameter<param_type, grad_type>;
  static constexpr bool has_masters = !std::is_same_v<param_type, master_type>;
  static_assert(backend_t<P>::host_memory,
                "precis::optim::MixedPrecisionOptimizer updates parameters in host memory; for a policy on the "
                "device (precis::cuda::on_device<P>) use precis::cuda::MixedPrecisionOptimizer");

  // What the rule lacks, one member at a time (optimizers.hpp shows a whole rule).
  static_assert(detail::rule_has_state_count<Rule>,
                "optimizer rule: missing `static constexpr std::size_t state_count` (how many state arrays "
                "the rule keeps per parameter; 0 for none)");
  static_assert(detail::rule_has_prepare<Rule>,
                "optimizer rule: missing `struct context` and `context prepare(std::int64_t step) const` (the "
                "per-step values: learning rate, bias corrections)");
  static_assert(detail::rule_has_validate<Rule>,
                "optimizer rule: missing `void validate() const` (throws invalid_argument on bad hyperparameters)");
  static_assert(!detail::rule_has_prepare<Rule> || detail::rule_updates<Rule, default_compute_t<typename P::master_type>>,
                "optimizer rule: missing `T update(T w, T g, T* state, const context&) const` for the master "
                "weights' arithmetic T (a template over T serves every policy)");
  static_assert(std::copy_constructible<Rule>, "optimizer rule: must be copy-constructible");
  /// State arrays per parameter the rule may use.
  static constexpr std::size_t state_count = detail::rule_state_count<Rule>();

  struct options {
    update_rounding rounding = update_rounding::nearest;  // for parameters without masters
    std::uint64_t seed = 0x5eed;                          // for stochastic rounding
    std::int64_t accumulation_steps = 1;                  // micro-batches per step
  };

  MixedPrecisionOptimizer(nn::Module<P>& module, Rule rule, Scaler scaler = Scaler{}, options o = {})
      : rule_(std::move(rule)), scaler_(std::move(scaler)), o_(o), rng_(o.seed) {
    rule_.validate();
    n_states_ = active_states(rule_);
    if (n_states_ > state_count) {
      throw invalid_argument("precis::optim::MixedPrecisionOptimizer: the rule's active_states() is " + std::to_string(n_states_) +
                             "; expected at most its state_count, " + std::to_string(state_count));
    }
    if (o_.accumulation_steps < 1) {
      throw invalid_argument("precis::optim::MixedPrecisionOptimizer: accumulation_steps = " +
                             std::to_string(o_.accumulation_steps) + "; expected >= 1");
    }
    for (auto& [name, p] : module.named_parameters()) {
      slot s;
      s.name = name;
      s.p = p;
      if constexpr (has_masters) {
        s.master = Tensor<master_type>(p->value.shape());
        for (index_t i = 0; i < p->value.size(); ++i) {
          s.master.data()[i] = precis::detail::store<master_type>(precis::detail::load<compute_type>(p->value.data()[i]));
        }
      } else if (o_.rounding == update_rounding::kahan) {
        s.compensation = Tensor<param_type>(p->value.shape());
      }
      if constexpr (state_count > 0) {
        for (std::size_t k = 0; k < n_states_; ++k) s.state[k] = Tensor<master_type>(p->value.shape());
      }
      slots_.push_back(std::move(s));
    }
  }

  /// The factor to seed backward with.
  double loss_scale() const { return scaler_.scale(); }
  /// tape.backward(loss, loss_scale()).
  template <class T, class S>
  void backward(T& tape, const Var<P, S>& loss) {
    tape.backward(loss, loss_scale());
  }

  /// One read-only pass over every gradient: are they all finite, and what is the norm of the
  /// unscaled gradients. Idempotent until the next step(). Returns the norm (inf or NaN when a
  /// gradient is not finite).
  double unscale() {
    if (unscaled_) return grad_norm_;
    // per-loss scaling: whatever a plain backward() added since is at the optimizer's own scale
    if (summing_) loss_inf_ = !absorb(1.0 / scaler_.scale()) || loss_inf_;
    double ssq = 0;
    bool finite = true;
    for (const slot& s : slots_) {
      const auto [part, ok] = summing_ ? squares(s.sum.data(), s.sum.size()) : squares(s.p->grad.data(), s.p->grad.size());
      finite = finite && ok;
      ssq += part;
    }
    found_inf_ = !finite || (summing_ && loss_inf_);
    grad_norm_ = found_inf_ ? std::numeric_limits<double>::infinity() : std::sqrt(ssq) * gradient_factor();
    unscaled_ = true;
    clip_ = 1;
    return grad_norm_;
  }

  /// Several losses, each with a loss scaler of its own (apex amp's num_losses: losses whose
  /// gradients differ by orders of magnitude cannot share one scale). Seeds this loss's backward
  /// with `loss_scaler.scale()`, moves the gradients it produced, unscaled, into the optimizer's
  /// gradient sum in the master type and zeroes them, and updates `loss_scaler` from whether they
  /// were all finite (as apex updates each loss's scale after its own backward). step() then
  /// uses the sum, and skips when any loss's gradients were not finite. Returns whether this
  /// loss's gradients were finite. Every loss of an iteration goes through this overload (a
  /// plain backward() in the same iteration would be seeded with the optimizer's own scale and is
  /// unscaled with that); the sum costs one master-type array per parameter, allocated on first
  /// use.
  template <class T, class S, loss_scaler LS>
  bool backward(T& tape, const Var<P, S>& loss, LS& loss_scaler, bool retain_graph = false) {
    const double scale = loss_scaler.scale();
    tape.backward(loss, scale, retain_graph);
    const bool finite = absorb(1.0 / scale);
    loss_scaler.update(!finite);
    loss_inf_ = loss_inf_ || !finite;
    unscaled_ = false;
    return finite;
  }

  /// Treats this step as overflowed whatever the local gradients hold: step() will skip it and
  /// back the scaler off. Data-parallel training calls it when another rank's gradients were not
  /// finite, so every rank makes the same decision.
  void force_found_inf() {
    unscale();
    found_inf_ = true;
    grad_norm_ = std::numeric_limits<double>::infinity();
  }

  /// Copies every parameter into its master (no-op without masters). For parameters that were
  /// overwritten after the optimizer was built: a broadcast from another rank, a manual init.
  void refresh_masters() {
    if constexpr (has_masters) {
      for (slot& s : slots_) {
        for (index_t i = 0; i < s.p->value.size(); ++i) {
          s.master.data()[i] = precis::detail::store<master_type>(precis::detail::load<compute_type>(s.p->value.data()[i]));
        }
      }
    }
  }

  /// Scales the update so the unscaled gradients' global norm is at most max_norm
  /// (torch.nn.utils.clip_grad_norm_). Returns the norm before clipping.
  double clip_grad_norm(double max_norm) {
    if (!(max_norm > 0)) {
      throw invalid_argument("precis::optim::MixedPrecisionOptimizer::clip_grad_norm: max_norm = " + std::to_string(max_norm) +
                             "; expected > 0");
    }
    const double norm = unscale();
    if (std::isfinite(norm) && norm > max_norm) clip_ = max_norm / (norm + 1e-6);
    return norm;
  }

  /// Unscales (if not done), asks the scaler, and applies the rule unless a gradient was not
  /// finite. Returns whether the parameters were updated.
  bool step() {
    unscale();
    // the gradients were scaled by the scale before this step's update of it (which may grow it)
    const auto factor = static_cast<compute_type>(gradient_factor() * clip_);
    const bool apply = scaler_.update(found_inf_);
    if (apply) {
      ++steps_;
      const auto ctx = rule_.prepare(steps_);
      for (slot& s : slots_) {
        if (summing_) apply_rule(s, s.sum.data(), ctx, factor);
        else apply_rule(s, s.p->grad.data(), ctx, factor);
      }
    }
    clear_sums();
    unscaled_ = false;
    return apply;
  }

  /// Zeroes every parameter's gradient and marks it so (nn::Parameter::grad_is_zero).
  void zero_grad() {
    for (slot& s : slots_) {
      std::fill(s.p->grad.begin(), s.p->grad.end(), grad_type(0));
      s.p->grad_is_zero = true;
    }
    clear_sums();
  }

  Scaler& scaler() noexcept { return scaler_; }
  const Scaler& scaler() const noexcept { return scaler_; }
  Rule& rule() noexcept { return rule_; }
  std::int64_t steps_taken() const noexcept { return steps_; }
  bool found_inf() const noexcept { return found_inf_; }
  /// Bytes the optimizer holds beyond the parameters and their gradients: masters, the rule's
  /// state arrays and Kahan compensations.
  std::size_t state_bytes() const noexcept {
    std::size_t n = 0;
    for (const slot& s : slots_) {
      if constexpr (has_masters) n += static_cast<std::size_t>(s.master.size()) * sizeof(master_type);
      for (const auto& t : s.state) n += static_cast<std::size_t>(t.size()) * sizeof(master_type);
      n += static_cast<std::size_t>(s.compensation.size()) * sizeof(param_type);
      n += static_cast<std::size_t>(s.sum.size()) * sizeof(master_type);
    }
    return n;
  }
  /// The master copy of parameter i (the parameter itself when there are no masters).
  TensorView<const master_type> master(std::size_t i) const {
    const slot& s = slots_.at(i);
    if constexpr (has_masters) return s.master.view();
    else return s.p->value.view();
  }

  // ---- checkpoints ------------------------------------------------------------------------

  /// Writes parameters, masters, optimizer state, step count, scaler state and the random
  /// stream atomically (optim/checkpoint.hpp describes the format), and the records of each
  /// extra part: state kept outside the optimizer, such as a tape's fp8 scaling
  /// (opt.save(path, tape.fp8())); a part has checkpoint_save(writer), checkpoint_stage(reader)
  /// (validates, returns what a load installs, with its record count) and
  /// checkpoint_commit(staged).
  template <class... Part>
  void save(const std::string& path, const Part&... part) const {
    checkpoint_writer w;
    (part.checkpoint_save(w), ...);
    for (const slot& s : slots_) {
      w.add("param/" + s.name, s.p->value.shape(), s.p->value.data());
      if constexpr (has_masters) w.add("master/" + s.name, s.master.shape(), s.master.data());
      if constexpr (state_count > 0) {
        for (std::size_t k = 0; k < n_states_; ++k) {
          const auto& t = s.state[k];
          w.add("state" + std::to_string(k) + "/" + s.name, t.shape(), t.data());
        }
      }
      if (s.compensation.size() > 0) w.add("compensation/" + s.name, s.compensation.shape(), s.compensation.data());
    }
    const scaler_state st = scaler_.state();
    const std::int64_t counters[6] = {steps_, st.growth_tracker, st.hysteresis_left, st.steps, st.skipped, st.floor_hits};
    w.add("optimizer/counters", Shape{6}, counters);
    w.add("scaler/scale", Shape{1}, &st.scale);
    const auto rng = rng_.state();
    w.add("rng", Shape{4}, rng.data());
    w.write(path);
  }

  /// Reads a checkpoint written by save() for the same model, rule and options. Everything is
  /// validated before anything changes: a truncated, damaged or mismatched file throws
  /// checkpoint_error and leaves the parameters, masters and state untouched.
  /// The extra parts must be those given to save(); each is validated with the rest and changes
  /// only if everything does.
  template <class... Part>
  void load(const std::string& path, Part&... part) {
    const checkpoint_reader r(path);
    std::size_t expected = 3;
    for (const slot& s : slots_) {  // phase 1: every record present, of the right dtype and shape
      r.check<param_type>("param/" + s.name, s.p->value.shape());
      ++expected;
      if constexpr (has_masters) {
        r.check<master_type>("master/" + s.name, s.master.shape());
        ++expected;
      }
      for (std::size_t k = 0; k < n_states_; ++k) {
        r.check<master_type>("state" + std::to_string(k) + "/" + s.name, s.p->value.shape());
        ++expected;
      }
      if (s.compensation.size() > 0) {
        r.check<param_type>("compensation/" + s.name, s.compensation.shape());
        ++expected;
      }
    }
    auto staged = std::make_tuple(part.checkpoint_stage(r)...);
    std::apply([&](const auto&... st) { ((expected += st.records), ...); }, staged);
    r.expect_count(expected);
    std::int64_t counters[6];
    r.copy("optimizer/counters", Shape{6}, counters);
    scaler_state st;
    r.copy("scaler/scale", Shape{1}, &st.scale);
    st.growth_tracker = counters[1];
    st.hysteresis_left = counters[2];
    st.steps = counters[3];
    st.skipped = counters[4];
    st.floor_hits = counters[5];
    std::array<std::uint64_t, 4> rng{};
    r.copy("rng", Shape{4}, rng.data());
    if (counters[0] < 0) throw checkpoint_error("precis::checkpoint: " + path + " has a negative step count");
    if (rng == std::array<std::uint64_t, 4>{}) {
      throw checkpoint_error("precis::checkpoint: " + path + " has an all-zero random state (xoshiro256++ never leaves it)");
    }
    // the weights the optimizer continues from must be finite (a NaN master would poison every
    // later step without ever tripping the scaler: the update is computed from it, not from a
    // gradient)
    for (const slot& s : slots_) {
      const std::string name = (has_masters ? "master/" : "param/") + s.name;
      Tensor<master_type> w(s.p->value.shape());
      r.copy(name, s.p->value.shape(), w.data());
      for (index_t i = 0; i < w.size(); ++i) {
        if (!std::isfinite(static_cast<double>(precis::detail::load<compute_type>(w.data()[i])))) {
          throw checkpoint_error("precis::checkpoint: " + path + " record " + name + " holds a non-finite value at index " +
                                 std::to_string(i) + "; expected finite weights");
        }
      }
    }
    Scaler trial = scaler_;
    try {
      trial.load_state(st);
    } catch (const invalid_argument& e) {
      throw checkpoint_error("precis::checkpoint: " + path + " holds a scaler state this scaler rejects: " + e.what());
    }
    // phase 2: commit (nothing below can fail)
    for (slot& s : slots_) {
      r.copy("param/" + s.name, s.p->value.shape(), s.p->value.data());
      if constexpr (has_masters) r.copy("master/" + s.name, s.master.shape(), s.master.data());
      if constexpr (state_count > 0) {
        for (std::size_t k = 0; k < n_states_; ++k) {
          auto& t = s.state[k];
          r.copy("state" + std::to_string(k) + "/" + s.name, t.shape(), t.data());
        }
      }
      if (s.compensation.size() > 0) r.copy("compensation/" + s.name, s.compensation.shape(), s.compensation.data());
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (part.checkpoint_commit(std::move(std::get<I>(staged))), ...);
    }(std::index_sequence_for<Part...>{});
    scaler_ = std::move(trial);
    steps_ = counters[0];
    rng_.set_state(rng);
    unscaled_ = false;
  }

 private:
  struct slot {
    std::string name;
    parameter* p = nullptr;
    Tensor<master_type> master;
    std::array<Tensor<master_type>, state_count> state;
    Tensor<param_type> compensation;
    Tensor<master_type> sum;  // per-loss scaling: the unscaled gradients of this step's losses
  };

  double inverse_scale() const { return 1.0 / (scaler_.scale() * static_cast<double>(o_.accumulation_steps)); }
  /// What the gradients the rule reads are multiplied by: the inverse scale, or only the
  /// accumulation's 1 / steps for the per-loss sums (already unscaled).
  double gradient_factor() const { return summing_ ? 1.0 / static_cast<double>(o_.accumulation_steps) : inverse_scale(); }

  /// Sum of squares (in double: no finite float overflows there) of n gradients, and whether
  /// it is finite.
  template <class G>
  static std::pair<double, bool> squares(const G* g, index_t n) {
    std::array<float, precis::detail::chunk> buf;
    double ssq = 0;
    bool finite = true;
    for (index_t c0 = 0; c0 < n; c0 += precis::detail::chunk) {
      const index_t len = std::min(precis::detail::chunk, n - c0);
      double part = 0;
      if constexpr (std::is_same_v<compute_type, float>) {
        // widened in bulk; eight independent partial sums, so the additions pipeline and
        // vectorize (one chain would be latency-bound at an add per 4 cycles)
        const float* v = precis::detail::load_run<float>(g + c0, len, 1, buf.data());
        std::array<double, 8> acc{};
        index_t i = 0;
        for (; i + 8 <= len; i += 8) {
          for (std::size_t l = 0; l < 8; ++l) {
            const double x = static_cast<double>(v[i + static_cast<index_t>(l)]);
            acc[l] += x * x;
          }
        }
        for (; i < len; ++i) acc[0] += static_cast<double>(v[i]) * static_cast<double>(v[i]);
        part = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      } else {
        for (index_t i = 0; i < len; ++i) {
          const double v = static_cast<double>(precis::detail::load<compute_type>(g[c0 + i]));
          part += v * v;
        }
      }
      finite = finite && std::isfinite(part);
      ssq += part;
    }
    return {ssq, finite};
  }

  /// Adds every gradient times inv into the per-loss sums (master type, arithmetic T) and zeroes
  /// the gradient; returns whether every product was finite.
  bool absorb(double inv) {
    using T = compute_type;
    namespace pd = precis::detail;
    constexpr index_t C = pd::chunk;
    summing_ = true;
    const T f = static_cast<T>(inv);
    bool finite = true;
    std::array<T, C> gbuf, sbuf;
    for (slot& s : slots_) {
      const index_t n = s.p->grad.size();
      if (s.sum.size() != n) s.sum = Tensor<master_type>(s.p->grad.shape());
      for (index_t c0 = 0; c0 < n; c0 += C) {
        const index_t len = std::min(C, n - c0);
        const T* gv = pd::load_run<T>(s.p->grad.data() + c0, len, 1, gbuf.data());
        const T* sv = pd::load_run<T>(s.sum.data() + c0, len, 1, sbuf.data());
        std::array<T, C> out;
        bool ok = true;
        for (index_t i = 0; i < len; ++i) {
          const T v = gv[i] * f;
          ok = ok && std::isfinite(static_cast<double>(v));
          out[static_cast<std::size_t>(i)] = sv[i] + v;
        }
        finite = finite && ok;
        pd::store_run(out.data(), s.sum.data() + c0, len, index_t{1});
      }
      std::fill(s.p->grad.begin(), s.p->grad.end(), grad_type(0));
      s.p->grad_is_zero = true;
    }
    return finite;
  }

  void clear_sums() {
    if (!summing_) return;
    for (slot& s : slots_) std::fill(s.sum.begin(), s.sum.end(), master_type(0));
    summing_ = false;
    loss_inf_ = false;
  }

  /// The update of one parameter tensor, a chunk at a time: gradients, masters and state are
  /// widened in bulk (vector conversion kernels), the rule runs over dense arrays of T, and the
  /// results are rounded back in bulk.
  template <class G, class Ctx>
  void apply_rule(slot& s, const G* g, const Ctx& ctx, compute_type factor) {
    using T = compute_type;
    namespace pd = precis::detail;
    constexpr index_t C = pd::chunk;
    const index_t n = s.p->value.size();
    const std::size_t k = n_states_;
    param_type* w = s.p->value.data();
    std::array<T, C> gbuf, wbuf, old;
    std::array<std::array<T, C>, state_count> sbuf;
    for (index_t c0 = 0; c0 < n; c0 += C) {
      const index_t len = std::min(C, n - c0);
      const T* gv = pd::load_run<T>(g + c0, len, 1, gbuf.data());
      T* wv = wbuf.data();
      if constexpr (has_masters) {
        const T* mv = pd::load_run<T>(s.master.data() + c0, len, 1, wbuf.data());
        if (mv != wbuf.data()) std::copy_n(mv, len, wbuf.data());
      } else {
        const T* pv = pd::load_run<T>(w + c0, len, 1, wbuf.data());
        if (pv != wbuf.data()) std::copy_n(pv, len, wbuf.data());
        if (o_.rounding != update_rounding::nearest) std::copy_n(wbuf.data(), len, old.data());
      }
      std::array<T*, state_count> sv{};
      if constexpr (state_count > 0) {
        for (std::size_t j = 0; j < state_count && j < k; ++j) {
          sv[j] = sbuf[j].data();
          const T* v = pd::load_run<T>(s.state[j].data() + c0, len, 1, sbuf[j].data());
          if (v != sbuf[j].data()) std::copy_n(v, len, sbuf[j].data());
        }
      }
      run_rule(wv, gv, sv, len, k, ctx, factor);
      if constexpr (state_count > 0) {
        for (std::size_t j = 0; j < state_count && j < k; ++j) pd::store_run(sbuf[j].data(), s.state[j].data() + c0, len, index_t{1});
      }
      if constexpr (has_masters) {
        pd::store_run(wv, s.master.data() + c0, len, index_t{1});
        // the parameter is the stored master rounded once (exact when the master is T)
        pd::store_run(wv, w + c0, len, index_t{1});
      } else if (o_.rounding == update_rounding::nearest) {
        pd::store_run(wv, w + c0, len, index_t{1});
      } else if (o_.rounding == update_rounding::stochastic && !std::is_same_v<param_type, T>) {
        // store_update's draws, one per element in order, in bulk
        pd::convert_stochastic(wv, w + c0, static_cast<std::size_t>(len), pd::storage_overflow<param_type>, rng_);
      } else {
        for (index_t i = 0; i < len; ++i) w[c0 + i] = store_update(s, c0 + i, old[static_cast<std::size_t>(i)], wv[i]);
      }
    }
  }

  /// The rule over dense arrays of k active states (sv[j] for j < k): first the rule's vector
  /// kernel where it declares one (for float), then update() on the rest. With at most one state
  /// each weight's state is updated in place, a straight loop the compiler can vectorize.
  template <class Ctx>
  void run_rule(compute_type* w, const compute_type* g, const std::array<compute_type*, state_count>& sv, index_t len,
                std::size_t k, const Ctx& ctx, compute_type factor) const {
    using T = compute_type;
    index_t i = 0;
    if constexpr (std::is_same_v<T, float> && detail::rule_has_update_run<Rule>) {
      i = static_cast<index_t>(rule_.update_run(w, g, sv, static_cast<std::size_t>(len), factor, ctx));
    }
    if constexpr (state_count == 0) {
      for (; i < len; ++i) w[i] = rule_.update(w[i], T(g[i] * factor), static_cast<T*>(nullptr), ctx);
    } else {
      if (k == 0) {
        for (; i < len; ++i) w[i] = rule_.update(w[i], T(g[i] * factor), static_cast<T*>(nullptr), ctx);
      } else if (k == 1) {
        T* s0 = sv[0];
        for (; i < len; ++i) w[i] = rule_.update(w[i], T(g[i] * factor), s0 + i, ctx);
      } else {
        std::array<T, state_count> st{};
        for (; i < len; ++i) {
          for (std::size_t j = 0; j < state_count && j < k; ++j) st[j] = sv[j][i];
          w[i] = rule_.update(w[i], T(g[i] * factor), st.data(), ctx);
          for (std::size_t j = 0; j < state_count && j < k; ++j) sv[j][i] = st[j];
        }
      }
    }
  }

  /// The new value of a parameter without a master, under the chosen rounding.
  param_type store_update(slot& s, index_t i, compute_type old, compute_type updated) {
    using T = compute_type;
    switch (o_.rounding) {
      case update_rounding::nearest: return precis::detail::store<param_type>(updated);
      case update_rounding::stochastic:
        if constexpr (std::is_same_v<param_type, T>) {
          return updated;  // already the parameter's own arithmetic: nothing to round
        } else {
          return round_to<param_type>(updated, rounding::stochastic, precis::detail::storage_overflow<param_type>, rng_);
        }
      case update_rounding::kahan: {
        // Kahan's compensated summation of the updates (Higham 2002, alg. 4.2), with the sum and
        // the compensation both stored in the parameter's format
        param_type& c = s.compensation.data()[i];
        const T y = T(T(updated - old) - precis::detail::load<T>(c));
        const param_type t = precis::detail::store<param_type>(T(old + y));
        c = precis::detail::store<param_type>(T(T(precis::detail::load<T>(t) - old) - y));
        return t;
      }
    }
    return precis::detail::store<param_type>(updated);
  }

  Rule rule_;
  Scaler scaler_;
  options o_;
  xoshiro256pp rng_;
  std::vector<slot> slots_;
  std::size_t n_states_ = 0;
  std::int64_t steps_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
  bool summing_ = false;   // per-loss scaling: this step's gradients are in the slots' sums
  bool loss_inf_ = false;  // some loss of this step had non-finite gradients
  double grad_norm_ = 0;
  double clip_ = 1;
};

template <class P, class Rule, class Scaler>
MixedPrecisionOptimizer(nn::Module<P>&, Rule, Scaler) -> MixedPrecisionOptimizer<P, Rule, Scaler>;
template <class P, class Rule>
MixedPrecisionOptimizer(nn::Module<P>&, Rule) -> MixedPrecisionOptimizer<P, Rule, DynamicLossScaler>;
template <class P, class Rule, class Scaler, class Options>
MixedPrecisionOptimizer(nn::Module<P>&, Rule, Scaler, Options) -> MixedPrecisionOptimizer<P, Rule, Scaler>;

}  // namespace precis::optim
