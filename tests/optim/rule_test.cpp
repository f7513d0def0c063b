// Optimizer rules as an extension point: a user-defined rule with four state arrays (Adan, from
// examples/adan_rule.hpp) through MixedPrecisionOptimizer against the paper's update written
// out independently in double; rules with no state and with a vector kernel of their own;
// hyperparameters that ask for more state than the rule declares.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <precis/precis.hpp>
#include <vector>

#include "adan_rule.hpp"

using namespace precis;
namespace pol = precis::policy;

namespace {

template <class P>
struct vec_module : nn::Module<P> {
  typename nn::Module<P>::parameter& w;
  explicit vec_module(index_t n) : w(this->register_parameter("w", Shape{n})) {
    for (index_t i = 0; i < n; ++i) w.value.data()[i] = static_cast<typename P::param_type>(0.1 * static_cast<double>(i) - 1.3);
  }
};

/// Gradient of element i at step k: magnitudes in [0.1, 0.7], signs changing along i and k.
double grad(index_t i, int k) {
  const double s = std::sin(0.7 * static_cast<double>(i) + 1.3 * k);
  return (s >= 0 ? 1 : -1) * (0.1 + 0.6 * std::abs(s));
}

/// Adan's update in the paper's notation (arXiv:2208.06677, Algorithm 1: beta1, beta2, beta3 are
/// the weights of the new terms) with the authors' bias corrections, over whole vectors.
struct adan_reference {
  double lr, beta1, beta2, beta3, eps, wd;
  std::vector<double> theta, m, v, n, g_prev;
  int k = 0;
  void step(const std::vector<double>& g) {
    ++k;
    if (k == 1) g_prev = g;  // the first difference is zero
    const double c1 = 1 - std::pow(1 - beta1, k), c2 = 1 - std::pow(1 - beta2, k), c3 = 1 - std::pow(1 - beta3, k);
    for (std::size_t i = 0; i < theta.size(); ++i) {
      const double diff = g[i] - g_prev[i];
      m[i] = (1 - beta1) * m[i] + beta1 * g[i];
      v[i] = (1 - beta2) * v[i] + beta2 * diff;
      const double nesterov = g[i] + (1 - beta2) * diff;
      n[i] = (1 - beta3) * n[i] + beta3 * nesterov * nesterov;
      const double eta = lr / (std::sqrt(n[i] / c3) + eps);
      theta[i] = (theta[i] - eta * (m[i] / c1 + (1 - beta2) * v[i] / c2)) / (1 + lr * wd);
    }
    g_prev = g;
  }
};

TEST(UserRule, AdanWithFourStateArraysMatchesThePaperInDouble) {
  using P = pol::named<"64-true">;  // no masters, no rounding of the update
  constexpr index_t n = 29;
  vec_module<P> m(n);
  const adan_example::Adan rule{.lr = 0.02, .weight_decay = 0.05};
  optim::MixedPrecisionOptimizer opt(m, rule, optim::NoLossScaler{});
  adan_reference ref{0.02, 1 - rule.b1, 1 - rule.b2, 1 - rule.b3, rule.eps, 0.05, {}, {}, {}, {}, {}};
  for (index_t i = 0; i < n; ++i) ref.theta.push_back(m.w.value.data()[i]);
  ref.m = ref.v = ref.n = std::vector<double>(n, 0.0);
  constexpr int steps = 20;
  for (int k = 1; k <= steps; ++k) {
    std::vector<double> g(n);
    for (index_t i = 0; i < n; ++i) m.w.grad.data()[i] = g[static_cast<std::size_t>(i)] = grad(i, k);
    ASSERT_TRUE(opt.step());
    ref.step(g);
  }
  // the two evaluation orders differ by a few roundings per step in each quantity: 64 u per step
  // of |theta| (the update is at most lr * (|m| + |v|) / sqrt(n) ~ lr * 3 here, smaller than |theta|'s
  // scale of 1)
  const double u = std::ldexp(1.0, -53);
  for (index_t i = 0; i < n; ++i) {
    const double want = ref.theta[static_cast<std::size_t>(i)];
    EXPECT_NEAR(m.w.value.data()[i], want, steps * 64 * u * std::max(1.0, std::abs(want))) << "element " << i;
  }
  // four arrays per parameter, each n doubles
  EXPECT_EQ(opt.state_bytes(), 4 * n * sizeof(double));
}

TEST(UserRule, AdanStateIsCheckpointedAndASkippedStepLeavesIt) {
  using P = pol::named<"bf16-mixed">;
  vec_module<P> a(19), b(19);
  const adan_example::Adan rule{.lr = 0.01};
  optim::MixedPrecisionOptimizer oa(a, rule, optim::StaticLossScaler(8));
  for (int k = 1; k <= 3; ++k) {
    for (index_t i = 0; i < 19; ++i) a.w.grad.data()[i] = bfloat16(static_cast<float>(8 * grad(i, k)));
    ASSERT_TRUE(oa.step());
  }
  const auto path = (std::filesystem::temp_directory_path() / "precis_rule_test.ckpt").string();
  oa.save(path);
  optim::MixedPrecisionOptimizer ob(b, rule, optim::StaticLossScaler(8));
  ob.load(path);
  std::filesystem::remove(path);
  // an overflowing step is skipped in a: its state is untouched, so a and b continue alike
  a.w.grad.data()[4] = bfloat16(std::numeric_limits<float>::infinity());
  EXPECT_FALSE(oa.step());
  for (int k = 4; k <= 6; ++k) {
    for (index_t i = 0; i < 19; ++i) {
      a.w.grad.data()[i] = b.w.grad.data()[i] = bfloat16(static_cast<float>(8 * grad(i, k)));
    }
    ASSERT_TRUE(oa.step());
    ASSERT_TRUE(ob.step());
  }
  for (index_t i = 0; i < 19; ++i) EXPECT_EQ(oa.master(0).data()[i], ob.master(0).data()[i]) << i;
}

/// signSGD: no state at all.
struct SignSGD {
  double lr = 0.1;
  static constexpr std::size_t state_count = 0;
  struct context {};
  context prepare(std::int64_t) const { return {}; }
  void validate() const {}
  template <class T>
  T update(T w, T g, T*, const context&) const {
    return g > T(0) ? T(w - T(lr)) : g < T(0) ? T(w + T(lr)) : w;
  }
};

TEST(UserRule, ARuleWithoutState) {
  using P = pol::named<"32-true">;
  vec_module<P> m(5);
  optim::MixedPrecisionOptimizer opt(m, SignSGD{.lr = 0.25}, optim::NoLossScaler{});
  const std::array<float, 5> g{1.0f, -2.0f, 0.0f, 1e-30f, -0.5f};
  for (index_t i = 0; i < 5; ++i) m.w.grad.data()[i] = g[static_cast<std::size_t>(i)];
  const std::vector<float> before(m.w.value.begin(), m.w.value.end());
  ASSERT_TRUE(opt.step());
  EXPECT_EQ(opt.state_bytes(), 0u);
  for (std::size_t i = 0; i < 5; ++i) {
    const float d = g[i] > 0 ? -0.25f : g[i] < 0 ? 0.25f : 0.0f;
    EXPECT_EQ(m.w.value.data()[i], before[i] + d) << i;
  }
}

/// SGD with momentum whose vector kernel is its own: it handles whole blocks of 4 and counts
/// the elements it was given, so the test sees the optimizer chose it from the declaration.
struct CountingSGD : optim::SGD {
  std::size_t* seen = nullptr;
  std::size_t update_run(float* w, const float* g, std::array<float*, 1> s, std::size_t n, float factor,
                         const context& c) const {
    *seen += n;
    const std::size_t done = n / 4 * 4;
    for (std::size_t i = 0; i < done; ++i) w[i] = update(w[i], g[i] * factor, s[0] + i, c);
    return done;
  }
};

TEST(UserRule, AVectorKernelIsUsedBecauseTheRuleDeclaresIt) {
  using P = pol::named<"32-true">;
  vec_module<P> m(11), ref(11);
  std::size_t seen = 0;
  CountingSGD rule;
  rule.lr = 0.1;
  rule.momentum = 0.9;
  rule.seen = &seen;
  optim::MixedPrecisionOptimizer opt(m, rule, optim::NoLossScaler{});
  optim::MixedPrecisionOptimizer plain(ref, optim::SGD{.lr = 0.1, .momentum = 0.9}, optim::NoLossScaler{});
  for (int k = 1; k <= 3; ++k) {
    for (index_t i = 0; i < 11; ++i) m.w.grad.data()[i] = ref.w.grad.data()[i] = static_cast<float>(grad(i, k));
    ASSERT_TRUE(opt.step());
    ASSERT_TRUE(plain.step());
  }
  EXPECT_EQ(seen, 3u * 11u);
  // the same arithmetic as SGD's scalar update (SGD's own AVX2 kernel rounds the same way)
  for (index_t i = 0; i < 11; ++i) EXPECT_EQ(m.w.value.data()[i], ref.w.value.data()[i]) << i;
}

/// A rule whose hyperparameters ask for more state than it declares.
struct Overreaching {
  static constexpr std::size_t state_count = 1;
  struct context {};
  context prepare(std::int64_t) const { return {}; }
  void validate() const {}
  std::size_t active_states() const { return 2; }
  template <class T>
  T update(T w, T, T*, const context&) const {
    return w;
  }
};

TEST(UserRule, MoreActiveStatesThanDeclaredIsRejected) {
  using P = pol::named<"32-true">;
  vec_module<P> m(3);
  try {
    optim::MixedPrecisionOptimizer opt(m, Overreaching{}, optim::NoLossScaler{});
    FAIL() << "constructed";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("active_states() is 2; expected at most its state_count, 1"), std::string::npos) << e.what();
  }
}

static_assert(optim::optimizer_rule<adan_example::Adan> && optim::optimizer_rule<adan_example::Adan, double>);
static_assert(optim::optimizer_rule<SignSGD> && optim::optimizer_rule<CountingSGD>);
struct NotARule {
  double lr;
};
static_assert(!optim::optimizer_rule<NotARule>);

}  // namespace
