// precis::nn: the parameter registry, the initializers' distributions, and an MLP that learns
// a small task under 32-true and bf16-mixed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <precis/nn/nn.hpp>
#include <precis/precis.hpp>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

TEST(NN, MLPRegistersNamedParametersOfThePolicysTypes) {
  nn::MLP<pol::named<"bf16-mixed">> net({784, 512, 512, 10}, nn::activation::relu, 1);
  const auto named = net.named_parameters();
  ASSERT_EQ(named.size(), 6u);
  EXPECT_EQ(named[0].first, "layer0.weight");
  EXPECT_EQ(named[5].first, "layer2.bias");
  EXPECT_EQ(named[0].second->value.shape(), (Shape{512, 784}));
  EXPECT_EQ(net.parameter_count(), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  static_assert(std::is_same_v<decltype(named[0].second->value), Tensor<bfloat16>>);
  EXPECT_THROW(nn::MLP<pol::named<"32-true">>({10}, nn::activation::relu, 1), invalid_argument);
  EXPECT_THROW(nn::Linear<pol::named<"32-true">>(0, 3, 1), invalid_argument);
}

TEST(NN, KaimingAndXavierDrawFromTheirUniformRanges) {
  Tensor<double> w(Shape{256, 400});
  nn::kaiming_uniform(w.view(), 400, 3);
  const double b = std::sqrt(2.0) * std::sqrt(3.0 / 400);
  double ss = 0, mx = 0;
  for (double v : w) {
    ss += v * v;
    mx = std::max(mx, std::abs(v));
  }
  const double n = static_cast<double>(w.size());
  EXPECT_LE(mx, b);
  EXPECT_GT(mx, 0.99 * b);
  // variance b^2/3 = 2/fan_in; the sample variance's standard error is b^2 sqrt(4/45 / n)
  EXPECT_NEAR(ss / n, b * b / 3, 5 * b * b * std::sqrt(4.0 / 45 / n));
  nn::xavier_uniform(w.view(), 400, 256, 4);
  const double bx = std::sqrt(6.0 / 656);
  for (double v : w) EXPECT_LE(std::abs(v), bx);
}

/// Two-class spirals-free toy task: the label is the sign of x0 * x1 (XOR of signs), not
/// linearly separable. SGD on an MLP must bring the loss well below log 2.
template <class P>
double trained_loss() {
  nn::MLP<P> net({2, 32, 32, 2}, nn::activation::tanh, 5);
  Tensor<float> x(Shape{64, 2});
  fill_uniform(x, -1, 1, 6);
  std::vector<std::int64_t> y(64);
  for (index_t i = 0; i < 64; ++i) y[static_cast<std::size_t>(i)] = (x(i, 0) * x(i, 1) > 0) ? 1 : 0;
  Tape<P> t;
  double loss = 0;
  for (int step = 0; step < 300; ++step) {
    t.reset();
    net.zero_grad();
    auto l = cross_entropy(net(t.input(x)), y);
    loss = l.item();
    t.backward(l);
    for (auto* p : net.parameters()) {
      for (index_t i = 0; i < p->value.size(); ++i) {
        p->value.data()[i] = static_cast<typename P::param_type>(float(p->value.data()[i]) - 0.5f * float(p->grad.data()[i]));
      }
    }
  }
  return loss;
}

TEST(NN, AnMLPLearnsANonlinearTask) {
  const double l32 = trained_loss<pol::named<"32-true">>();
  EXPECT_LT(l32, 0.25 * std::log(2.0)) << l32;
  const double lbf = trained_loss<pol::named<"bf16-mixed">>();
  EXPECT_LT(lbf, 0.5 * std::log(2.0)) << lbf;
}

}  // namespace
