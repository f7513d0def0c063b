// One loss scale shared by several optimizers (torch.amp.GradScaler's multi-optimizer use, per its
// documentation: every optimizer unscales and checks its own gradients and skips its own step;
// one update() per iteration backs off if any of them found a non-finite gradient), and scales of
// their own for several losses (apex amp's num_losses). Expected scales and updates are written
// out by hand from those rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <precis/precis.hpp>
#include <string>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

using P = pol::named<"16-mixed">;

template <class Q>
struct vec_module : nn::Module<Q> {
  typename nn::Module<Q>::parameter& w;
  explicit vec_module(index_t n) : w(this->register_parameter("w", Shape{n})) {
    for (auto& x : w.value) x = static_cast<typename Q::param_type>(1.0f);
  }
};

/// Gradients as a backward seeded with `scale` leaves them: scale * g, rounded into fp16 (inf
/// when it overflows).
void set_scaled_grads(vec_module<P>& m, double scale, float g, bool overflow) {
  for (auto& x : m.w.grad) x = half(static_cast<float>(scale) * g);
  if (overflow) m.w.grad.data()[1] = half(std::numeric_limits<float>::infinity());
}

TEST(SharedScaler, TwoOptimizersFollowGradScalersMultiOptimizerRule) {
  optim::DynamicLossScaler::options o;
  o.growth_interval = 2;
  optim::SharedLossScaler<> scaler{optim::DynamicLossScaler(o)};
  vec_module<P> a(4), b(4);
  optim::MixedPrecisionOptimizer oa(a, optim::SGD{.lr = 0.25}, scaler.share());
  optim::MixedPrecisionOptimizer ob(b, optim::SGD{.lr = 0.25}, scaler.share());
  struct iteration {
    bool inf_a, inf_b;        // which optimizer's gradients overflow
    double scale_after;       // after the one update() of the iteration
    std::int64_t tracker_after;
  };
  // 2^16 initially; growth every 2 clean iterations; any overflow halves once per iteration
  const std::vector<iteration> script = {
      {false, false, 65536, 1}, {false, false, 131072, 0}, {true, false, 65536, 0},
      {false, true, 32768, 0},  {true, true, 16384, 0},    {false, false, 16384, 1},
  };
  float want_a = 1, want_b = 1;  // masters, updated by hand: -lr * 2^-6 per step taken
  for (std::size_t it = 0; it < script.size(); ++it) {
    const auto& s = script[it];
    // both optimizers see the one scale
    ASSERT_EQ(oa.loss_scale(), scaler.scale());
    ASSERT_EQ(ob.loss_scale(), scaler.scale());
    set_scaled_grads(a, scaler.scale(), 0.015625f, s.inf_a);
    set_scaled_grads(b, scaler.scale(), 0.015625f, s.inf_b);
    EXPECT_EQ(oa.step(), !s.inf_a) << "iteration " << it;  // each decides for itself
    EXPECT_EQ(ob.step(), !s.inf_b) << "iteration " << it;
    EXPECT_EQ(scaler.scale(), scaler.scaler().scale());
    EXPECT_EQ(scaler.update(), !s.inf_a && !s.inf_b) << "iteration " << it;
    EXPECT_EQ(scaler.scale(), s.scale_after) << "iteration " << it;
    EXPECT_EQ(scaler.scaler().growth_tracker(), s.tracker_after) << "iteration " << it;
    if (!s.inf_a) want_a -= 0.25f * 0.015625f;
    if (!s.inf_b) want_b -= 0.25f * 0.015625f;
    EXPECT_EQ(oa.master(0).data()[0], want_a) << "iteration " << it;
    EXPECT_EQ(ob.master(0).data()[0], want_b) << "iteration " << it;
  }
  EXPECT_EQ(oa.steps_taken(), 4);
  EXPECT_EQ(ob.steps_taken(), 4);
  // one scaler update per iteration, whatever the number of optimizers
  EXPECT_EQ(scaler.scaler().state().steps, 6);
  EXPECT_EQ(scaler.scaler().skipped_steps(), 3);
}

TEST(SharedScaler, CallsOutOfOrderAreErrors) {
  optim::SharedLossScaler<> scaler;
  vec_module<P> a(2), b(2);
  optim::MixedPrecisionOptimizer oa(a, optim::SGD{.lr = 0.1}, scaler.share());
  optim::MixedPrecisionOptimizer ob(b, optim::SGD{.lr = 0.1}, scaler.share());
  try {
    scaler.update();
    FAIL() << "update() with no step";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("no optimizer has stepped since the last update()"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(oa.step());
  try {
    oa.step();
    FAIL() << "second step";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer 0 stepped twice since the last update()"), std::string::npos) << e.what();
  }
  // an optimizer that does not step in an iteration (GradScaler: only stepped optimizers count)
  EXPECT_TRUE(scaler.update());
  EXPECT_EQ(scaler.scaler().growth_tracker(), 1);
  EXPECT_TRUE(ob.step());
  EXPECT_TRUE(scaler.update());
}

TEST(SharedScaler, ACheckpointRestoresTheSharedScale) {
  optim::SharedLossScaler<> scaler;
  vec_module<P> a(3), b(3);
  optim::MixedPrecisionOptimizer oa(a, optim::SGD{.lr = 0.1}, scaler.share());
  optim::MixedPrecisionOptimizer ob(b, optim::SGD{.lr = 0.1}, scaler.share());
  set_scaled_grads(a, scaler.scale(), 0.5f, true);
  set_scaled_grads(b, scaler.scale(), 0.5f, false);
  EXPECT_FALSE(oa.step());
  EXPECT_TRUE(ob.step());
  EXPECT_FALSE(scaler.update());
  ASSERT_EQ(scaler.scale(), 32768.0);
  const auto path = (std::filesystem::temp_directory_path() / "precis_shared_scaler.ckpt").string();
  oa.save(path);
  for (int i = 0; i < 3; ++i) {
    set_scaled_grads(a, scaler.scale(), 0.5f, true);
    EXPECT_FALSE(oa.step());
    EXPECT_FALSE(scaler.update());
  }
  ASSERT_EQ(scaler.scale(), 4096.0);
  oa.load(path);
  std::filesystem::remove(path);
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(ob.loss_scale(), 32768.0);  // the other optimizer sees it too
}

/// Two parameter vectors: u, which only loss a reads, and v, which only loss b reads; both start
/// at 0 and 1 in fp16.
struct two_heads : nn::Module<P> {
  parameter& u;
  parameter& v;
  two_heads() : u(register_parameter("u", Shape{5})), v(register_parameter("v", Shape{5})) {
    for (auto& x : u.value) x = half(0.0f);
    for (auto& x : v.value) x = half(1.0f);
  }
};

/// p -> sum(p * c) with c in fp32: the gradient of p is the seed times c, rounded once into fp16.
auto weighted_sum(Tape<P>& tape, nn::Parameter<half, half>& p, float c) {
  Tensor<float> cs(p.value.shape());
  for (auto& x : cs) x = c;
  return sum(tape.param(p) * tape.input(cs));
}

constexpr float ca = 0x1p-40f;  // loss a's gradient: needs a scale >= 2^16 to be normal in fp16
constexpr float cb = 4.0f;      // loss b's: overflows fp16 at a scale >= 2^14

TEST(PerLossScales, TwoLossesOfVeryDifferentMagnitudesEachWithItsOwnScale) {
  two_heads m;
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 0.0625}, optim::NoLossScaler{});
  optim::DynamicLossScaler::options oa, ob;
  oa.init_scale = 0x1p30;  // a's gradient 2^-10
  ob.init_scale = 0x1p14;  // b's 2^16: overflows once, then 2^15 at 2^13
  optim::DynamicLossScaler sa(oa), sb(ob);
  Tape<P> tape;
  const auto iteration = [&](bool a_finite, bool b_finite) {
    tape.reset();
    opt.zero_grad();
    auto la = weighted_sum(tape, m.u, ca);
    auto lb = weighted_sum(tape, m.v, cb);
    EXPECT_EQ(opt.backward(tape, la, sa, /*retain_graph=*/true), a_finite);
    EXPECT_EQ(opt.backward(tape, lb, sb), b_finite);
  };
  // iteration 1: b overflows: its scale backs off, the step is skipped, nothing changes
  iteration(true, false);
  EXPECT_FALSE(opt.step());
  EXPECT_EQ(sa.scale(), 0x1p30);
  EXPECT_EQ(sb.scale(), 0x1p13);
  EXPECT_EQ(opt.master(0).data()[0], 0.0f);
  EXPECT_EQ(opt.master(1).data()[0], 1.0f);
  // iteration 2: both finite, each unscaled by its own scale into the fp32 sum:
  // u = 0 - 2^-4 * 2^-40 = -2^-44 (fp16 cannot hold it, the fp32 master does), v = 1 - 2^-4 * 4
  iteration(true, true);
  EXPECT_DOUBLE_EQ(opt.unscale(), std::sqrt(5 * 0x1p-80 + 5 * 16.0));
  EXPECT_TRUE(opt.step());
  for (index_t i = 0; i < 5; ++i) {
    EXPECT_EQ(opt.master(0).data()[i], -0x1p-44f) << i;
    EXPECT_EQ(opt.master(1).data()[i], 0.75f) << i;
    EXPECT_EQ(float(m.u.grad.data()[i]), 0.0f);  // moved into the sum, not applied twice
  }
  EXPECT_EQ(sa.state().steps, 2);
  EXPECT_EQ(sb.skipped_steps(), 1);
  EXPECT_EQ(opt.steps_taken(), 1);
}

TEST(PerLossScales, OneSharedScaleLosesTheSmallLoss) {
  // the same losses summed at one dynamic scale: b overflows at 2^16, 2^15 and 2^14; at 2^13 a's
  // gradient 2^13 * 2^-40 = 2^-27 is below half fp16's smallest subnormal and flushes to zero
  two_heads m;
  optim::MixedPrecisionOptimizer opt(m, optim::SGD{.lr = 0.0625});
  Tape<P> tape;
  int skipped = 0;
  for (int it = 0; it < 8; ++it) {
    tape.reset();
    opt.zero_grad();
    auto loss = weighted_sum(tape, m.u, ca) + weighted_sum(tape, m.v, cb);
    opt.backward(tape, loss);
    skipped += !opt.step();
  }
  EXPECT_EQ(skipped, 3);
  EXPECT_EQ(opt.loss_scale(), 0x1p13);
  EXPECT_EQ(opt.master(0).data()[0], 0.0f);  // a's updates were lost
  EXPECT_EQ(opt.master(1).data()[0], 1.0f - 5 * 0.0625f * 4.0f);
}

}  // namespace
