// End to end: what masters, loss scaling and stochastic rounding each buy on one small task.
//
// The task: a student MLP 8-16-1 (tanh) learns a fixed random teacher of the same shape from 64
// Gaussian samples by full-batch SGD (lr 0.003, no momentum) on the mean squared error, 8000
// steps. The data is generated in fp32 and rounded once into each policy's storage type; every
// student starts from the same seed. The same run under six configurations:
//
//   32-true                     the reference
//   16-mixed + dynamic scaling  fp16 storage and activations, fp32 masters, DynamicLossScaler
//   16-true                     fp16 everything, no scaling, no masters, round-to-nearest updates
//   16-true + SR                as 16-true, but the updates are stochastically rounded
//   bf16-true                   bf16 everything, round-to-nearest updates
//   bf16-true + SR              as bf16-true, stochastically rounded updates
//
// At this learning rate most late updates are smaller than half an ulp of an fp16 weight
// (2^-11 |w|), so 16-true stops moving: it stalls. 16-true + SR differs from it only in how the
// update is rounded, and it does not stall; so the stall is lost updates, not underflowed
// gradients or fp16 forward error. The tests print their measurements; docs/optim.md records them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <string>
#include <vector>

using namespace precis;
namespace pol = precis::policy;
using optim::update_rounding;

namespace {

constexpr index_t samples = 64, inputs = 8, hidden = 16;
constexpr int steps = 8000;
constexpr double lr = 0.003;

struct run_result {
  std::vector<double> loss;  // loss[s]: the loss before update s; loss[steps]: after the last
  double changed = 0;        // mean fraction of parameter elements an update changed, last quarter
  double unchanged = 0;      // mean fraction that did not change although their gradient was nonzero
};

/// The teacher's data in fp32: x ~ N(0, 1), y = teacher(x).
struct dataset {
  Tensor<float> x{Shape{samples, inputs}}, y{Shape{samples, 1}};
  dataset() {
    fill_normal(x, 0.0, 1.0, 123);
    using T = pol::named<"32-true">;
    nn::MLP<T> teacher({inputs, hidden, 1}, nn::activation::tanh, 999);
    Tape<T> tape;
    const auto out = teacher(tape.borrow(x)).value();
    for (index_t i = 0; i < samples; ++i) y(i, 0) = out(i, 0);
  }
};

const dataset& data() {
  static const dataset d;
  return d;
}

template <class P, class Scaler>
run_result train(Scaler scaler, update_rounding how) {
  using S = typename P::param_type;
  nn::MLP<P> net({inputs, hidden, 1}, nn::activation::tanh, 42);
  typename optim::MixedPrecisionOptimizer<P, optim::SGD, Scaler>::options o;
  o.rounding = how;
  o.seed = 5;
  optim::MixedPrecisionOptimizer<P, optim::SGD, Scaler> opt(net, optim::SGD{.lr = lr}, scaler, o);
  Tensor<S> x(Shape{samples, inputs}), y(Shape{samples, 1});
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<S>(data().x.data()[i]);
  for (index_t i = 0; i < y.size(); ++i) y.data()[i] = static_cast<S>(data().y.data()[i]);

  run_result r;
  Tape<P> tape;
  std::vector<float> before;
  const int last_quarter = steps - steps / 4;
  for (int s = 0; s < steps; ++s) {
    tape.reset();
    opt.zero_grad();
    auto loss = mse(net(tape.borrow(x)), tape.borrow(y));
    r.loss.push_back(loss.item());
    opt.backward(tape, loss);
    if (s >= last_quarter) {
      before.clear();
      net.for_each_parameter([&](auto& p) {
        for (auto v : p.value) before.push_back(static_cast<float>(v));
      });
    }
    opt.step();
    if (s >= last_quarter) {
      std::size_t k = 0, changed = 0, unchanged = 0;
      net.for_each_parameter([&](auto& p) {
        for (index_t i = 0; i < p.value.size(); ++i, ++k) {
          const bool moved = static_cast<float>(p.value.data()[i]) != before[k];
          changed += moved;
          unchanged += !moved && static_cast<float>(p.grad.data()[i]) != 0.0f;
        }
      });
      r.changed += static_cast<double>(changed) / static_cast<double>(k);
      r.unchanged += static_cast<double>(unchanged) / static_cast<double>(k);
    }
  }
  r.changed /= steps / 4;
  r.unchanged /= steps / 4;
  tape.reset();
  auto guard = tape.no_grad();
  r.loss.push_back(mse(net(tape.borrow(x)), tape.borrow(y)).item());
  return r;
}

/// Each configuration is trained once per process, on first use.
const run_result& result(const std::string& name) {
  static std::map<std::string, run_result> done;
  if (auto it = done.find(name); it != done.end()) return it->second;
  run_result r;
  if (name == "32-true") r = train<pol::named<"32-true">>(optim::NoLossScaler{}, update_rounding::nearest);
  else if (name == "16-mixed") r = train<pol::named<"16-mixed">>(optim::DynamicLossScaler{}, update_rounding::nearest);
  else if (name == "16-true") r = train<pol::named<"16-true">>(optim::NoLossScaler{}, update_rounding::nearest);
  else if (name == "16-true+SR") r = train<pol::named<"16-true">>(optim::NoLossScaler{}, update_rounding::stochastic);
  else if (name == "bf16-true") r = train<pol::named<"bf16-true">>(optim::NoLossScaler{}, update_rounding::nearest);
  else if (name == "bf16-true+SR") r = train<pol::named<"bf16-true">>(optim::NoLossScaler{}, update_rounding::stochastic);
  else throw std::logic_error("no configuration " + name);
  std::printf("%-13s loss at steps 0, 1000, ..., 8000:", name.c_str());
  for (int s = 0; s <= steps; s += steps / 8) std::printf(" %.6g", r.loss[static_cast<std::size_t>(s)]);
  std::printf("; last quarter: %.4f of the weights change per step, %.4f stay although their gradient is nonzero\n",
              r.changed, r.unchanged);
  return done.emplace(name, std::move(r)).first->second;
}

double final_loss(const std::string& name) { return result(name).loss.back(); }

/// Relative fall of the loss over the last quarter of training.
double last_quarter_fall(const std::string& name) {
  const auto& l = result(name).loss;
  const double start = l[static_cast<std::size_t>(steps - steps / 4)];
  return (start - l.back()) / start;
}

TEST(EndToEnd, SixteenMixedWithDynamicScalingMatches32True) {
  const double ref = final_loss("32-true"), mixed = final_loss("16-mixed");
  std::printf("final loss: 32-true %.6g, 16-mixed %.6g (relative difference %.2e)\n", ref, mixed, std::abs(mixed - ref) / ref);
  // The stated tolerance is 1% of the reference loss. This is a claim about a whole training
  // run, not a rounding bound; for scale, 16-true ends 5x above the reference (next test).
  EXPECT_NEAR(mixed, ref, 0.01 * ref);
  EXPECT_GT(result("32-true").loss.front() / ref, 50.0) << "the task must be learned for the comparison to mean anything";
}

TEST(EndToEnd, SixteenTrueWithoutScalingOrMastersStallsOnLostUpdates) {
  const double ref = final_loss("32-true"), fp16 = final_loss("16-true"), sr = final_loss("16-true+SR");
  std::printf("final loss: 32-true %.6g, 16-true %.6g, 16-true+SR %.6g; last-quarter fall: 32-true %.3f, 16-true %.2e\n", ref, fp16,
              sr, last_quarter_fall("32-true"), last_quarter_fall("16-true"));
  // A stall: over the last quarter, the reference still learns (its loss falls by more than a
  // tenth) while 16-true's loss moves by less than 0.1% ...
  EXPECT_GT(last_quarter_fall("32-true"), 0.1);
  EXPECT_LT(std::abs(last_quarter_fall("16-true")), 1e-3);
  // ... fewer than 1% of its weights change per step, and the gradient of nearly every weight
  // that does not change is nonzero: the update was computed and then lost in the rounding ...
  EXPECT_LT(result("16-true").changed, 0.01);
  EXPECT_GT(result("16-true").unchanged, 0.9);
  // ... and it ends at least twice the reference loss.
  EXPECT_GT(fp16, 2 * ref);
  // The same fp16 arithmetic with unbiased (stochastic) rounding of the update does not stall; it
  // ends within 5% of the reference (a looser tolerance than 16-mixed's 1%: the random rounding
  // adds noise of an fp16 ulp per update). So the stall is the lost updates.
  EXPECT_GT(last_quarter_fall("16-true+SR"), 0.1);
  EXPECT_NEAR(sr, ref, 0.05 * ref);
}

TEST(EndToEnd, Bf16TrueWithStochasticRoundingRecoversTheGap) {
  const double ref = final_loss("32-true"), nearest = final_loss("bf16-true"), sr = final_loss("bf16-true+SR");
  const double recovered = (nearest - sr) / (nearest - ref);
  std::printf("final loss: 32-true %.6g, bf16-true %.6g, bf16-true+SR %.6g; SR recovers %.4f of the gap\n", ref, nearest, sr,
              recovered);
  EXPECT_GT(nearest, 2 * ref);       // round-to-nearest updates lose most of the training
  EXPECT_GT(recovered, 0.9);         // "most of the gap": more than nine tenths of it
  EXPECT_LT(result("bf16-true").changed, 0.01);
}

}  // namespace
