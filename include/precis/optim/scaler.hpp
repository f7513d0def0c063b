// Loss scalers: what a step's loss is multiplied by before backward, and what happens to the
// scale after the step's gradients were found finite or not.
//
// DynamicLossScaler follows torch.cuda.amp.GradScaler's defaults and update rule exactly
// (torch/csrc/.../AmpKernels: _amp_update_scale_):
//   non-finite gradients: scale *= backoff_factor, growth tracker = 0, step skipped;
//   finite gradients:     tracker += 1; when it reaches growth_interval, scale *= growth_factor
//                         if the result is finite (otherwise the scale stays), tracker = 0.
// Options beyond GradScaler, all off by default: a floor and a ceiling on the scale (with a
// diagnostic each time the floor stops a backoff), hysteresis (back off only after k
// consecutive overflows; every overflowing step is still skipped), and a callback on every
// skipped step.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "precis/config.hpp"
#include "precis/error.hpp"

namespace precis::optim {

/// What a scaler's update saw and decided, for callbacks and logs.
struct scaler_event {
  std::int64_t step = 0;      // updates so far, this one included
  double scale_before = 0;
  double scale_after = 0;
  bool skipped = false;       // the step's update was not applied
  bool hit_floor = false;     // a backoff was stopped by min_scale
};

/// The state a checkpoint stores.
struct scaler_state {
  double scale = 1;
  std::int64_t growth_tracker = 0;
  std::int64_t hysteresis_left = 1;
  std::int64_t steps = 0;
  std::int64_t skipped = 0;
  std::int64_t floor_hits = 0;
};

/// A loss scaler's rule as plain values, without callbacks: DynamicLossScaler's update and the
/// device's mixed-precision step (precis/cuda/optim.cuh) both run it through advance().
/// `dynamic` false is a constant scale (StaticLossScaler): only the step counts move.
struct scaling_rule {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  double min_scale = 0;
  double max_scale = std::numeric_limits<double>::infinity();
  std::int64_t hysteresis = 1;
  bool dynamic = true;
};

/// What advance() decided.
struct scaler_outcome {
  bool skipped = false;    // the step's update is not applied
  bool hit_floor = false;  // a backoff was stopped by min_scale
};

/// The scaler's state after a step whose gradients were (found_inf) or were not all finite.
PRECIS_HOST_DEVICE inline scaler_outcome advance(scaler_state& s, const scaling_rule& r, bool found_inf) {
  scaler_outcome out;
  ++s.steps;
  out.skipped = found_inf;
  if (found_inf) ++s.skipped;
  if (!r.dynamic) return out;
  if (found_inf) {
    s.growth_tracker = 0;
    if (--s.hysteresis_left <= 0) {
      s.hysteresis_left = r.hysteresis;
      const double backed = s.scale * r.backoff_factor;
      if (backed < r.min_scale) {
        s.scale = r.min_scale;
        out.hit_floor = true;
        ++s.floor_hits;
      } else {
        s.scale = backed;
      }
    }
  } else {
    s.hysteresis_left = r.hysteresis;  // "consecutive" overflows: a clean step resets the count
    const std::int64_t successful = s.growth_tracker + 1;
    if (successful == r.growth_interval) {
      const double grown = s.scale * r.growth_factor;
      if (grown - grown == 0) s.scale = grown < r.max_scale ? grown : r.max_scale;  // finite: grow
      s.growth_tracker = 0;
    } else {
      s.growth_tracker = successful;
    }
  }
  return out;
}

/// What every scaler offers: the current scale, and the update after a step, which returns
/// whether the step's update should be applied.
template <class S>
concept loss_scaler = requires(S s, const S cs, bool found_inf, const scaler_state& st) {
  { cs.scale() } -> std::convertible_to<double>;
  { s.update(found_inf) } -> std::same_as<bool>;
  { cs.state() } -> std::same_as<scaler_state>;
  s.load_state(st);
};

class DynamicLossScaler {
 public:
  struct options {
    double init_scale = 65536.0;  // 2^16
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    std::int64_t growth_interval = 2000;
    double min_scale = 0;  // 0: no floor
    double max_scale = std::numeric_limits<double>::infinity();
    std::int64_t hysteresis = 1;  // overflows in a row before a backoff (1: GradScaler's rule)
    std::function<void(const scaler_event&)> on_skip;   // called on every skipped step
    std::function<void(const scaler_event&)> on_floor;  // called when min_scale stops a backoff
  };

  DynamicLossScaler() : DynamicLossScaler(options{}) {}
  explicit DynamicLossScaler(options o) : o_(std::move(o)) {
    const auto bad = [](const std::string& what) {
      throw invalid_argument("precis::optim::DynamicLossScaler: " + what);
    };
    if (!(o_.init_scale > 0) || !std::isfinite(o_.init_scale)) bad("init_scale = " + std::to_string(o_.init_scale) + "; expected finite and > 0");
    if (!(o_.growth_factor > 1)) bad("growth_factor = " + std::to_string(o_.growth_factor) + "; expected > 1");
    if (!(o_.backoff_factor > 0 && o_.backoff_factor < 1)) bad("backoff_factor = " + std::to_string(o_.backoff_factor) + "; expected in (0, 1)");
    if (o_.growth_interval < 1) bad("growth_interval = " + std::to_string(o_.growth_interval) + "; expected >= 1");
    if (o_.hysteresis < 1) bad("hysteresis = " + std::to_string(o_.hysteresis) + "; expected >= 1");
    if (!(o_.min_scale >= 0) || !(o_.max_scale >= o_.min_scale) || !(o_.init_scale >= o_.min_scale) || !(o_.init_scale <= o_.max_scale)) {
      bad("min_scale = " + std::to_string(o_.min_scale) + ", max_scale = " + std::to_string(o_.max_scale) +
          ", init_scale = " + std::to_string(o_.init_scale) + "; expected 0 <= min_scale <= init_scale <= max_scale");
    }
    s_.scale = o_.init_scale;
    s_.hysteresis_left = o_.hysteresis;
  }

  double scale() const noexcept { return s_.scale; }
  std::int64_t growth_tracker() const noexcept { return s_.growth_tracker; }
  std::int64_t skipped_steps() const noexcept { return s_.skipped; }
  std::int64_t floor_hits() const noexcept { return s_.floor_hits; }
  const options& settings() const noexcept { return o_; }

  /// After a step whose gradients were (found_inf) or were not all finite; returns whether the
  /// step's update is applied.
  bool update(bool found_inf) {
    scaler_event e;
    e.scale_before = s_.scale;
    const scaler_outcome o = advance(s_, rule(), found_inf);
    e.step = s_.steps;
    e.skipped = o.skipped;
    e.hit_floor = o.hit_floor;
    e.scale_after = s_.scale;
    if (e.skipped && o_.on_skip) o_.on_skip(e);
    if (e.hit_floor && o_.on_floor) o_.on_floor(e);
    return !found_inf;
  }

  /// The update rule of these options, as advance() runs it.
  scaling_rule rule() const noexcept {
    return {o_.growth_factor, o_.backoff_factor, o_.growth_interval, o_.min_scale, o_.max_scale, o_.hysteresis, true};
  }

  scaler_state state() const { return s_; }
  void load_state(const scaler_state& st) {
    if (!(st.scale > 0) || !std::isfinite(st.scale) || st.growth_tracker < 0 || st.growth_tracker >= o_.growth_interval ||
        st.hysteresis_left < 1 || st.hysteresis_left > o_.hysteresis || st.steps < 0 || st.skipped < 0 || st.skipped > st.steps ||
        st.floor_hits < 0 || st.floor_hits > st.skipped) {
      throw invalid_argument("precis::optim::DynamicLossScaler::load_state: scale " + std::to_string(st.scale) + ", tracker " +
                             std::to_string(st.growth_tracker) + ", hysteresis " + std::to_string(st.hysteresis_left) +
                             " is not a state this scaler's options can reach");
    }
    s_ = st;
  }

 private:
  options o_;
  scaler_state s_;
};

/// A constant scale; steps with non-finite gradients are skipped (the weights stay finite).
class StaticLossScaler {
 public:
  explicit StaticLossScaler(double scale) {
    if (!(scale > 0) || !std::isfinite(scale)) {
      throw invalid_argument("precis::optim::StaticLossScaler: scale = " + std::to_string(scale) + "; expected finite and > 0");
    }
    s_.scale = scale;
  }
  double scale() const noexcept { return s_.scale; }
  bool update(bool found_inf) {
    advance(s_, rule(), found_inf);
    return !found_inf;
  }
  /// A constant scale's rule: advance() only counts the steps.
  scaling_rule rule() const noexcept {
    scaling_rule r;
    r.dynamic = false;
    return r;
  }
  std::int64_t skipped_steps() const noexcept { return s_.skipped; }
  scaler_state state() const { return s_; }
  void load_state(const scaler_state& st) {
    if (st.scale != s_.scale) {
      throw invalid_argument("precis::optim::StaticLossScaler::load_state: scale " + std::to_string(st.scale) +
                             " differs from this scaler's " + std::to_string(s_.scale));
    }
    if (st.steps < 0 || st.skipped < 0 || st.skipped > st.steps || st.growth_tracker != 0 || st.hysteresis_left != 1 ||
        st.floor_hits != 0) {
      throw invalid_argument("precis::optim::StaticLossScaler::load_state: steps " + std::to_string(st.steps) + ", skipped " +
                             std::to_string(st.skipped) + ", tracker " + std::to_string(st.growth_tracker) + ", hysteresis " +
                             std::to_string(st.hysteresis_left) + ", floor hits " + std::to_string(st.floor_hits) +
                             "; expected 0 <= skipped <= steps and the rest as a constant scale leaves them (0, 1, 0)");
    }
    s_ = st;
  }

 private:
  scaler_state s_;
};

/// No scaling (scale 1); steps with non-finite gradients are still skipped.
class NoLossScaler : public StaticLossScaler {
 public:
  NoLossScaler() : StaticLossScaler(1.0) {}
};

/// One loss scale for several optimizers, as torch.amp.GradScaler serves several optimizers
/// (GANs, models with parameter groups under different rules): every optimizer seeds its backward
/// with the same scale, unscales and checks its own gradients, and skips its own step when they
/// are not finite; update(), once per iteration after every step(), applies the scaler's rule to
/// "some optimizer found a non-finite gradient".
///
///   optim::SharedLossScaler<> scaler;                    // a DynamicLossScaler inside
///   optim::MixedPrecisionOptimizer gen(g, optim::Adam{}, scaler.share());
///   optim::MixedPrecisionOptimizer dis(d, optim::Adam{}, scaler.share());
///   ... gen.backward(tape, loss_g) ... dis.backward(tape, loss_d) ...
///   gen.step();  dis.step();                             // each skips on its own found_inf
///   scaler.update();                                     // one backoff or growth per iteration
///
/// The handles share the scaler with it (it lives as long as any of them). An optimizer that
/// steps twice without an update() in between is a usage_error, as is an update() with no step
/// since the last. A handle checkpoints the shared state: loading any one optimizer's checkpoint
/// restores the scale for all (optimizers saved together hold the same one).
template <loss_scaler S = DynamicLossScaler>
class SharedLossScaler {
  struct shared {
    S scaler;
    bool found_inf = false;
    std::vector<bool> stepped;  // per handle, since the last update()
  };

 public:
  /// What each optimizer holds: a loss_scaler whose update() records instead of updating.
  class handle {
   public:
    double scale() const { return st_->scaler.scale(); }
    bool update(bool found_inf) {
      auto&& stepped = st_->stepped[index_];
      if (stepped) {
        throw usage_error("precis::optim::SharedLossScaler: optimizer " + std::to_string(index_) +
                          " stepped twice since the last update(); call the shared scaler's update() once per "
                          "iteration, after every optimizer's step()");
      }
      stepped = true;
      st_->found_inf = st_->found_inf || found_inf;
      return !found_inf;
    }
    scaler_state state() const { return st_->scaler.state(); }
    void load_state(const scaler_state& st) {
      S trial = st_->scaler;
      trial.load_state(st);  // throws, changing nothing, when st is not a state S can reach
      st_->scaler = std::move(trial);
      st_->found_inf = false;
      st_->stepped.assign(st_->stepped.size(), false);
    }
    /// This optimizer's position among the scaler's handles.
    std::size_t index() const noexcept { return index_; }

   private:
    friend class SharedLossScaler;
    handle(std::shared_ptr<shared> st, std::size_t index) : st_(std::move(st)), index_(index) {}
    std::shared_ptr<shared> st_;
    std::size_t index_;
  };

  explicit SharedLossScaler(S scaler = S{}) : st_(std::make_shared<shared>(shared{std::move(scaler), false, {}})) {}

  /// A handle for one more optimizer.
  handle share() {
    st_->stepped.push_back(false);
    return handle(st_, st_->stepped.size() - 1);
  }

  double scale() const { return st_->scaler.scale(); }
  /// Whether some optimizer has found a non-finite gradient since the last update().
  bool found_inf() const noexcept { return st_->found_inf; }
  S& scaler() noexcept { return st_->scaler; }
  const S& scaler() const noexcept { return st_->scaler; }

  /// Once per iteration, after the optimizers' step(): updates the scale from whether any of them
  /// found a non-finite gradient; returns whether none did. Optimizers that did not step this
  /// iteration do not count (GradScaler counts only the optimizers stepped).
  bool update() {
    bool any = false;
    for (bool b : st_->stepped) any = any || b;
    if (!any) {
      throw usage_error("precis::optim::SharedLossScaler::update: no optimizer has stepped since the last update(); "
                        "expected update() once per iteration, after the optimizers' step()");
    }
    const bool inf = st_->found_inf;
    st_->scaler.update(inf);
    st_->found_inf = false;
    st_->stepped.assign(st_->stepped.size(), false);
    return !inf;
  }

 private:
  std::shared_ptr<shared> st_;
};

static_assert(loss_scaler<DynamicLossScaler> && loss_scaler<StaticLossScaler> && loss_scaler<NoLossScaler> &&
              loss_scaler<SharedLossScaler<>::handle>);

}  // namespace precis::optim
