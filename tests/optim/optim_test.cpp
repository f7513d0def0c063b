// Loss scalers against GradScaler's rule (scripted sequences of clean and overflowing steps,
// written out by hand), the optimizer rules against PyTorch's formulas evaluated independently
// in double, and the mixed-precision wrapper: skipped steps leave everything untouched, masters
// keep updates a 16-bit parameter cannot hold, and the master-less roundings (nearest,
// stochastic, Kahan) behave as their definitions say.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <random>
#include <string>
#include <vector>

using namespace precis;
namespace pol = precis::policy;
using optim::DynamicLossScaler;

namespace {

struct expected_step {
  bool found_inf;
  double scale_after;
  std::int64_t tracker_after;
};

void replay(DynamicLossScaler& s, const std::vector<expected_step>& script) {
  for (std::size_t i = 0; i < script.size(); ++i) {
    const bool applied = s.update(script[i].found_inf);
    EXPECT_EQ(applied, !script[i].found_inf) << "step " << i;
    EXPECT_EQ(s.scale(), script[i].scale_after) << "step " << i;
    EXPECT_EQ(s.growth_tracker(), script[i].tracker_after) << "step " << i;
  }
}

TEST(Scaler, GradScalerDefaults) {
  const DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.settings().growth_factor, 2.0);
  EXPECT_EQ(s.settings().backoff_factor, 0.5);
  EXPECT_EQ(s.settings().growth_interval, 2000);
}

TEST(Scaler, ScriptedSequenceFollowsGradScalersRule) {
  DynamicLossScaler::options o;
  o.growth_interval = 3;
  DynamicLossScaler s(o);
  const double k = 65536;
  replay(s, {{false, k, 1}, {false, k, 2}, {false, 2 * k, 0},   // grows at the interval
             {true, k, 0},                                       // backoff, tracker reset
             {false, k, 1}, {false, k, 2}, {true, k / 2, 0},     // an overflow resets the tracker
             {false, k / 2, 1}, {false, k / 2, 2}, {false, k, 0},
             {true, k / 2, 0}, {true, k / 4, 0}});               // consecutive overflows
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(Scaler, GrowthToInfinityKeepsTheScale) {
  DynamicLossScaler::options o;
  o.init_scale = std::ldexp(1.0, 1023);
  o.growth_interval = 1;
  DynamicLossScaler s(o);
  replay(s, {{false, std::ldexp(1.0, 1023), 0}, {false, std::ldexp(1.0, 1023), 0}, {true, std::ldexp(1.0, 1022), 0},
             {false, std::ldexp(1.0, 1023), 0}});
}

TEST(Scaler, FloorCeilingHysteresisAndCallbacks) {
  DynamicLossScaler::options o;
  o.init_scale = 32768;
  o.min_scale = 16384;
  o.max_scale = 65536;
  o.growth_interval = 2;
  int skips = 0, floors = 0;
  o.on_skip = [&](const optim::scaler_event& e) {
    ++skips;
    EXPECT_TRUE(e.skipped);
  };
  o.on_floor = [&](const optim::scaler_event& e) {
    ++floors;
    EXPECT_EQ(e.scale_before, 16384.0);
    EXPECT_EQ(e.scale_after, 16384.0);
  };
  DynamicLossScaler s(o);
  replay(s, {{true, 16384, 0},                       // 32768 * 0.5 = the floor exactly: no diagnostic
             {true, 16384, 0},                       // 8192 < floor: stays, diagnostic
             {false, 16384, 1}, {false, 32768, 0},   // growth
             {false, 32768, 1}, {false, 65536, 0},   // reaches the ceiling
             {false, 65536, 1}, {false, 65536, 0}}); // held at the ceiling
  EXPECT_EQ(skips, 2);
  EXPECT_EQ(floors, 1);
  EXPECT_EQ(s.floor_hits(), 1);

  DynamicLossScaler::options h;
  h.hysteresis = 2;
  h.growth_interval = 100;
  DynamicLossScaler hs(h);
  const double k = 65536;
  // back off only after 2 overflows in a row; every overflowing step is skipped
  replay(hs, {{true, k, 0}, {false, k, 1}, {true, k, 0}, {true, k / 2, 0}, {true, k / 2, 0}, {true, k / 4, 0}});
  EXPECT_EQ(hs.skipped_steps(), 5);
}

TEST(Scaler, StateRoundTripsAndBadStatesAreRejected) {
  DynamicLossScaler::options o;
  o.growth_interval = 5;
  DynamicLossScaler a(o), b(o);
  for (bool f : {false, false, true, false}) a.update(f);
  b.load_state(a.state());
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  for (bool f : {false, false, false, false, true}) EXPECT_EQ(a.update(f), b.update(f));
  EXPECT_EQ(a.scale(), b.scale());
  auto bad = a.state();
  bad.growth_tracker = 7;  // >= growth_interval: unreachable
  EXPECT_THROW(b.load_state(bad), invalid_argument);
  bad = a.state();
  bad.scale = std::numeric_limits<double>::infinity();
  EXPECT_THROW(b.load_state(bad), invalid_argument);
  DynamicLossScaler::options bad_backoff;
  bad_backoff.backoff_factor = 1.5;
  EXPECT_THROW(DynamicLossScaler{bad_backoff}, invalid_argument);
  EXPECT_THROW(optim::StaticLossScaler(0.0), invalid_argument);
  optim::StaticLossScaler st(1024);
  EXPECT_FALSE(st.update(true));
  EXPECT_TRUE(st.update(false));
  EXPECT_EQ(st.scale(), 1024.0);
}

// ---- rules ---------------------------------------------------------------------------------

TEST(Rules, SGDMomentumAndNesterovMatchTorchsFormulas) {
  const std::vector<double> grads{0.5, -0.25, 1.0, 0.125};
  for (bool nesterov : {false, true}) {
    optim::SGD r{.lr = 0.1, .momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = nesterov};
    double w = 1, s = 0;
    double rw = 1, rb = 0;  // the reference, written from torch.optim.SGD's documentation
    for (std::size_t t = 0; t < grads.size(); ++t) {
      w = r.update(w, grads[t], &s, r.prepare(static_cast<std::int64_t>(t + 1)));
      double g = grads[t] + 0.01 * rw;
      rb = t == 0 ? g : 0.9 * rb + g;
      g = nesterov ? g + 0.9 * rb : rb;
      rw -= 0.1 * g;
      EXPECT_DOUBLE_EQ(w, rw) << "step " << t;
    }
  }
}

TEST(Rules, AdamAndAdamWMatchTorchsFormulas) {
  const std::vector<double> grads{0.5, -0.25, 1.0, 0.125};
  for (bool decoupled : {false, true}) {
    optim::Adam r{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .decoupled = decoupled};
    double w = 1, s[2] = {0, 0};
    double rw = 1, m = 0, v = 0;
    for (std::size_t t = 0; t < grads.size(); ++t) {
      w = r.update(w, grads[t], s, r.prepare(static_cast<std::int64_t>(t + 1)));
      double g = grads[t];
      if (decoupled) rw *= 1 - 0.01 * 0.1;
      else g += 0.1 * rw;
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double n = static_cast<double>(t + 1);
      rw -= 0.01 * (m / (1 - std::pow(0.9, n))) / (std::sqrt(v / (1 - std::pow(0.999, n))) + 1e-8);
      EXPECT_NEAR(w, rw, 4 * std::numeric_limits<double>::epsilon()) << "step " << t;
    }
  }
  EXPECT_TRUE(optim::AdamW{}.decoupled);
  EXPECT_EQ(optim::AdamW{}.weight_decay, 0.01);
  EXPECT_THROW((optim::Adam{.beta1 = 1.0}.validate()), invalid_argument);
  EXPECT_THROW((optim::SGD{.nesterov = true}.validate()), invalid_argument);
}

// ---- the wrapper ---------------------------------------------------------------------------

/// A module with one parameter vector, for driving the optimizer by hand.
template <class P>
struct vec_module : nn::Module<P> {
  typename nn::Module<P>::parameter& w;
  explicit vec_module(index_t n, double value) : w(this->register_parameter("w", Shape{n})) {
    for (auto& x : w.value) x = static_cast<typename P::param_type>(value);
  }
};

TEST(MixedPrecision, OverflowSkipsTheStepAndTouchesNothing) {
  using P = pol::named<"16-mixed">;
  vec_module<P> m(4, 1.0);
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 0.1});
  for (auto& g : m.w.grad) g = half(1024.0f);
  m.w.grad.data()[2] = half(std::numeric_limits<float>::infinity());
  const auto before = m.w.value;
  EXPECT_FALSE(opt.step());
  EXPECT_TRUE(opt.found_inf());
  for (index_t i = 0; i < 4; ++i) {
    EXPECT_EQ(float(m.w.value.data()[i]), float(before.data()[i]));
    EXPECT_EQ(opt.master(0).data()[i], 1.0f);
  }
  EXPECT_EQ(opt.loss_scale(), 32768.0);
  EXPECT_EQ(opt.steps_taken(), 0);
}

TEST(MixedPrecision, GradientsAreUnscaledInTheMasterArithmetic) {
  using P = pol::named<"16-mixed">;
  vec_module<P> m(3, 1.0);
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 1.0}, optim::StaticLossScaler(65536));
  // scaled gradients 3 * 2^-14 * 65536 = 12: unscaled 3 * 2^-14, a subnormal in fp16 had it been
  // unscaled in place
  for (auto& g : m.w.grad) g = half(12.0f);
  const double norm = opt.unscale();
  EXPECT_DOUBLE_EQ(norm, std::sqrt(3.0) * 3 * std::ldexp(1.0, -14));
  EXPECT_TRUE(opt.step());
  EXPECT_EQ(opt.master(0).data()[0], 1.0f - 3 * std::ldexp(1.0f, -14));
  // the parameter is the master rounded once to fp16: 1 - 3 * 2^-14 lies between 1 - 2^-11 * k
  EXPECT_EQ(float(m.w.value.data()[0]), float(half(1.0f - 3 * std::ldexp(1.0f, -14))));
}

TEST(MixedPrecision, AStepThatGrowsTheScaleIsUnscaledByTheScaleItsGradientsHad) {
  // growth_interval 1: every clean step doubles the scale. The gradients of a step were seeded
  // with the scale before that step's growth, and are unscaled by it: with SGD at lr 1 and an
  // unscaled gradient of 2^-4 each step, the master goes 1 - 2^-4, 1 - 2^-3, ... exactly.
  using P = pol::named<"16-mixed">;
  vec_module<P> m(1, 1.0);
  DynamicLossScaler::options o;
  o.init_scale = 1024;
  o.growth_interval = 1;
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 1.0}, DynamicLossScaler(o));
  for (int step = 1; step <= 4; ++step) {
    const double scale = opt.loss_scale();
    m.w.grad.data()[0] = half(static_cast<float>(scale / 16));  // 2^-4 scaled: exact in fp16
    ASSERT_TRUE(opt.step());
    EXPECT_EQ(opt.loss_scale(), 2 * scale);
    EXPECT_EQ(opt.master(0).data()[0], 1.0f - static_cast<float>(step) / 16) << "step " << step;
  }
}

TEST(MixedPrecision, MastersKeepUpdatesBelowHalfAnUlp) {
  // w = 1 in fp16 has ulp 2^-10 above 1 (2^-11 below); an update of 2^-14 per step is lost in
  // fp16 arithmetic but accumulates in the fp32 master: after 64 steps w = 1 - 64 * 2^-14.
  using P = pol::named<"16-mixed">;
  vec_module<P> m(1, 1.0);
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 1.0}, optim::NoLossScaler{});
  for (int step = 0; step < 64; ++step) {
    m.w.grad.data()[0] = half(std::ldexp(1.0f, -14));
    ASSERT_TRUE(opt.step());
  }
  EXPECT_EQ(opt.master(0).data()[0], 1.0f - 64 * std::ldexp(1.0f, -14));
  EXPECT_EQ(float(m.w.value.data()[0]), 1.0f - 64 * std::ldexp(1.0f, -14));  // 1 - 2^-8: representable
}

template <class S>
double final_value(optim::update_rounding how, int steps, float delta) {
  using P = pol::true_<S>;
  vec_module<P> m(256, 1.0);
  typename optim::MixedPrecisionOptimizer<P, optim::SGD, optim::NoLossScaler>::options o;
  o.rounding = how;
  o.seed = 7;
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 1.0}, optim::NoLossScaler{}, o);
  for (int step = 0; step < steps; ++step) {
    for (auto& g : m.w.grad) g = static_cast<S>(delta);
    opt.step();
  }
  double mean = 0;
  for (auto v : m.w.value) mean += static_cast<double>(static_cast<float>(v));
  return mean / 256;
}

TEST(MixedPrecision, WithoutMastersStochasticAndKahanUpdatesAreNotLost) {
  // bf16 around 1: ulp below 1 is 2^-8; updates of 2^-12 (1/16 ulp) per step, 256 steps: the
  // exact result is 1 - 256 * 2^-12 = 0.9375.
  const float delta = std::ldexp(1.0f, -12);
  const double exact = 1.0 - 256 * std::ldexp(1.0, -12);
  EXPECT_EQ(final_value<bfloat16>(optim::update_rounding::nearest, 256, delta), 1.0);  // every update lost
  // Kahan: the compensation carries the lost part; the error stays within an ulp of the result
  EXPECT_NEAR(final_value<bfloat16>(optim::update_rounding::kahan, 256, delta), exact, std::ldexp(1.0, -8));
  // stochastic rounding: unbiased; each of the 256 elements is a sum of 256 independent roundings,
  // each with variance below (2^-8)^2 / 4, so the mean over elements has a standard deviation
  // below 2^-8 / 2 * sqrt(256) / sqrt(256) = 2^-9; 5 sigma
  EXPECT_NEAR(final_value<bfloat16>(optim::update_rounding::stochastic, 256, delta), exact, 5 * std::ldexp(1.0, -9));
}

TEST(MixedPrecision, ClippingAndAccumulation) {
  using P = pol::named<"32-true">;
  vec_module<P> m(2, 0.0);
  typename optim::MixedPrecisionOptimizer<P, optim::SGD, optim::StaticLossScaler>::options o;
  o.accumulation_steps = 2;
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 1.0}, optim::StaticLossScaler(8), o);
  // two micro-batches accumulated, each scaled by 8: summed gradient (3, 4) * 8 * 2
  m.w.grad.data()[0] = 48;
  m.w.grad.data()[1] = 64;
  EXPECT_DOUBLE_EQ(opt.clip_grad_norm(1.0), 5.0);  // the mean gradient (3, 4)
  EXPECT_TRUE(opt.step());
  EXPECT_NEAR(m.w.value.data()[0], -0.6, 1e-6);
  EXPECT_NEAR(m.w.value.data()[1], -0.8, 1e-6);
  EXPECT_THROW(opt.clip_grad_norm(0), invalid_argument);
  opt.zero_grad();
  EXPECT_EQ(m.w.grad.data()[0], 0.0f);
}

}  // namespace

namespace {

/// Parameters of 5100, 4099 and 3 elements, their values and gradients drawn once.
template <class P>
struct three_params : nn::Module<P> {
  std::vector<typename nn::Module<P>::parameter*> ps;
  three_params() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::normal_distribution<float> nd(0.0f, 1e-2f);
    for (const index_t n : {index_t{5100}, index_t{4099}, index_t{3}}) {
      auto& p = this->register_parameter("p" + std::to_string(ps.size()), Shape{n});
      for (auto& x : p.value) x = detail::store<typename P::param_type>(u(rng));
      for (auto& g : p.grad) g = detail::store<grad_storage_t<P, typename P::param_type>>(nd(rng));
      ps.push_back(&p);
    }
  }
};

/// AdamW under a "-true" policy: 16-bit parameters and 16-bit state, no masters, the update
/// computed in fp32 over chunks converted in bulk (the vector conversion kernels where the CPU
/// has them, whole vectors and padded tails, and the vector Adam kernel beside the scalar rule).
/// A step with an infinite gradient changes no bit; the first applied step from zero state is
/// AdamW's, w (1 - lr wd) - lr g / (|g| + eps) (m-hat = g and v-hat = g^2 at t = 1), evaluated
/// in double: each weight within the rounding to the parameter's format, u |w| (plus half its
/// smallest subnormal), plus the fp32 evaluation, gamma_8(2^-24) (|w0| + 2 lr), of it.
template <class P>
void adamw_first_step_in_16_bits() {
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  three_params<P> m;
  std::vector<std::vector<S>> w0;
  std::vector<std::vector<G>> g0;
  for (auto* p : m.ps) {
    w0.emplace_back(p->value.begin(), p->value.end());
    g0.emplace_back(p->grad.begin(), p->grad.end());
  }
  optim::AdamW r;
  r.lr = 1e-2;  // each weight moves by several ulps: a weight left unmoved fails
  optim::MixedPrecisionOptimizer opt(m, r, optim::NoLossScaler{});
  const G keep = m.ps[2]->grad.data()[1];
  m.ps[2]->grad.data()[1] = detail::store<G>(std::numeric_limits<float>::infinity());
  ASSERT_FALSE(opt.step());
  for (std::size_t i = 0; i < m.ps.size(); ++i) {
    for (std::size_t k = 0; k < w0[i].size(); ++k) {
      ASSERT_EQ(detail::load<float>(m.ps[i]->value.data()[k]), detail::load<float>(w0[i][k])) << "a skipped step moved p" << i << "[" << k << "]";
    }
  }
  m.ps[2]->grad.data()[1] = keep;
  ASSERT_TRUE(opt.step());
  const double u = format_traits<S>::unit_roundoff(), tiny = std::ldexp(format_traits<S>::min_subnormal(), -1);
  const double uf = std::ldexp(1.0, -24), g8 = 8 * uf / (1 - 8 * uf);
  for (std::size_t i = 0; i < m.ps.size(); ++i) {
    int bad = 0;
    for (std::size_t k = 0; k < w0[i].size(); ++k) {
      const double w = detail::load<double>(w0[i][k]), g = detail::load<double>(g0[i][k]);
      const double exact = w * (1 - r.lr * r.weight_decay) - r.lr * g / (std::fabs(g) + r.eps);
      const double got = detail::load<double>(m.ps[i]->value.data()[k]);
      const double tol = u * std::fabs(got) + tiny + g8 * (std::fabs(w) + 2 * r.lr);
      if (!(std::fabs(got - exact) <= tol)) {
        if (++bad <= 3) ADD_FAILURE() << "p" << i << "[" << k << "]: " << got << ", AdamW's first step gives " << exact << " (bound " << tol << ")";
      }
    }
    EXPECT_EQ(bad, 0) << "p" << i << " (" << w0[i].size() << " weights)";
  }
}

TEST(MixedPrecision, AdamWFirstStepWith16BitStateIsAdamWs) {
  adamw_first_step_in_16_bits<pol::named<"16-true">>();
  adamw_first_step_in_16_bits<pol::named<"bf16-true">>();
}

TEST(MixedPrecision, AdamThroughTheWrapperMatchesTheRule) {
  // 32-true: no masters, no scaling; the wrapper's vectorized pass against Adam::update applied
  // element by element in double (the kernel may fuse multiply-adds: a few fp32 ulps)
  using P = pol::named<"32-true">;
  vec_module<P> m(37, 0.0);  // not a multiple of 8: the scalar tail runs too
  for (index_t i = 0; i < 37; ++i) m.w.value.data()[i] = 0.05f * static_cast<float>(i) - 0.9f;
  const optim::Adam rule{.lr = 0.01, .weight_decay = 0.1};
  optim::MixedPrecisionOptimizer opt(m, rule, optim::NoLossScaler{});
  std::vector<double> w(37), s(74, 0.0);
  for (index_t i = 0; i < 37; ++i) w[static_cast<std::size_t>(i)] = m.w.value.data()[i];
  for (int t = 1; t <= 3; ++t) {
    for (index_t i = 0; i < 37; ++i) m.w.grad.data()[i] = std::sin(static_cast<float>(i + t));
    ASSERT_TRUE(opt.step());
    for (std::size_t i = 0; i < 37; ++i) {
      double st[2] = {s[2 * i], s[2 * i + 1]};
      w[i] = rule.update(w[i], static_cast<double>(std::sin(static_cast<float>(i) + static_cast<float>(t))), st, rule.prepare(t));
      s[2 * i] = st[0];
      s[2 * i + 1] = st[1];
    }
  }
  for (std::size_t i = 0; i < 37; ++i) EXPECT_NEAR(m.w.value.data()[i], w[i], 3e-7) << i;
}

}  // namespace
