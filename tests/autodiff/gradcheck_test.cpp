// Every differentiable op, and random compositions of ops, under true_<double> (against central
// finite differences, normwise relative error < 1e-6, and against the multiprecision tape),
// true_<float>, bf16-mixed and 16-mixed (against the multiprecision tape). Tolerances come from
// precis::gradient_tolerance<P>(k): gamma_{2 k kappa}(u) with u the policy's unit roundoff, k
// the ops on the longest path, kappa = 4 for every test (inputs chosen away from cancellation
// and kinks); nothing is tuned per test.
#include <gtest/gtest.h>

#include <cstdint>
#include <precis/autodiff/gradcheck.hpp>
#include <precis/precis.hpp>
#include <random>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

Tensor<double> rnd(Shape s, double lo, double hi, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor<double> t(s);
  for (auto& v : t) v = u(g);
  return t;
}

/// Values in [lo, hi] with random signs: away from zero (for abs, relu and division).
Tensor<double> away_from_zero(Shape s, double lo, double hi, unsigned seed) {
  auto t = rnd(s, lo, hi, seed);
  std::mt19937_64 g(seed + 99);
  for (auto& v : t) v = (g() & 1) ? v : -v;
  return t;
}

template <class P>
class Gradcheck : public ::testing::Test {
 protected:
  /// Runs gradcheck with k ops on the longest path; finite differences for the double policy.
  template <class F>
  void check(F f, const std::vector<Tensor<double>>& at, int k) {
    gradcheck_options o;
    o.ops = k;
    // the rule checks (finite differences in double and in multiprecision) do not depend on
    // the policy: run them once per graph, with the double policy
    o.finite_differences = o.check_rules = std::is_same_v<P, pol::true_<double>>;
    const auto r = gradcheck<P>(f, at, o);
    EXPECT_TRUE(r.passed()) << r.report();
    if (o.finite_differences) {
      EXPECT_LT(r.worst_fd(), 1e-6) << r.report();
    }
    for (double e : r.error) EXPECT_TRUE(std::isfinite(e)) << r.report();
  }
};

using Policies = ::testing::Types<pol::true_<double>, pol::true_<float>, pol::named<"bf16-mixed">, pol::named<"16-mixed">>;
TYPED_TEST_SUITE(Gradcheck, Policies);

/// The scalar-valued loss sum(y * c) of a value y and weights c: every element of y matters.
#define WEIGHTED(expr) sum(mul((expr), p.back()))

TYPED_TEST(Gradcheck, ElementwiseUnary) {
  const Shape s{3, 5};
  const auto c = rnd(s, -1, 1, 7);
  this->check([](auto&, const auto& p) { return WEIGHTED(neg(p[0])); }, {rnd(s, -1, 1, 1), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(abs(p[0])); }, {away_from_zero(s, 0.25, 1, 2), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(relu(p[0])); }, {away_from_zero(s, 0.25, 1, 3), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(exp(p[0])); }, {rnd(s, -2, 2, 4), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(log(p[0])); }, {rnd(s, 0.5, 4, 5), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(sqrt(p[0])); }, {rnd(s, 0.5, 4, 6), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(rsqrt(p[0])); }, {rnd(s, 0.5, 4, 8), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(reciprocal(p[0])); }, {away_from_zero(s, 0.5, 2, 9), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(tanh(p[0])); }, {rnd(s, -2, 2, 10), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(sigmoid(p[0])); }, {rnd(s, -3, 3, 11), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(gelu(p[0])); }, {rnd(s, 0.25, 2, 12), c}, 3);
}

TYPED_TEST(Gradcheck, ElementwiseBinaryWithBroadcasting) {
  const auto a = rnd({3, 4}, -1, 1, 20), b = rnd({4}, -1, 1, 21), c = rnd({3, 4}, -1, 1, 22);
  const auto col = rnd({3, 1}, -1, 1, 23);
  this->check([](auto&, const auto& p) { return WEIGHTED(add(p[0], p[1])); }, {a, b, c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(sub(p[0], p[1])); }, {a, col, c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(p[0] * p[1]); }, {a, b, c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(div(p[0], p[1])); }, {a, away_from_zero({4}, 0.5, 2, 24), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(pow(p[0], p[1])); }, {rnd({3, 4}, 0.5, 2, 25), rnd({4}, -1.5, 2, 26), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(maximum(p[0], p[1])); }, {a, rnd({3, 4}, -1, 1, 27), c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(minimum(p[0], p[1])); }, {a, rnd({3, 4}, -1, 1, 28), c}, 3);
}

TYPED_TEST(Gradcheck, MatmulAndLinear) {
  this->check([](auto&, const auto& p) { return WEIGHTED(matmul(p[0], p[1])); },
              {rnd({4, 6}, -1, 1, 30), rnd({6, 3}, -1, 1, 31), rnd({4, 3}, -1, 1, 32)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(linear(p[0], p[1], p[2])); },
              {rnd({5, 6}, -1, 1, 33), rnd({3, 6}, -1, 1, 34), rnd({3}, -1, 1, 35), rnd({5, 3}, -1, 1, 36)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(linear(p[0], p[1])); },
              {rnd({5, 6}, -1, 1, 37), rnd({3, 6}, -1, 1, 38), rnd({5, 3}, -1, 1, 39)}, 3);
  // a matmul of a transposed view
  this->check([](auto&, const auto& p) { return WEIGHTED(matmul(transpose(p[0]), p[1])); },
              {rnd({6, 4}, -1, 1, 40), rnd({6, 3}, -1, 1, 41), rnd({4, 3}, -1, 1, 42)}, 4);
}

TYPED_TEST(Gradcheck, Reductions) {
  const auto x = rnd({4, 5}, 0.5, 1.5, 50);
  const auto c0 = rnd({}, 0.5, 1.5, 51), c5 = rnd({5}, -1, 1, 52), c4 = rnd({4}, -1, 1, 53);
  this->check([](auto&, const auto& p) { return mul(sum(p[0]), p[1]); }, {x, c0}, 2);
  this->check([](auto&, const auto& p) { return WEIGHTED(sum(p[0], 0)); }, {x, c5}, 3);
  this->check([](auto&, const auto& p) { return mul(mean(p[0]), p[1]); }, {x, c0}, 2);
  this->check([](auto&, const auto& p) { return WEIGHTED(mean(p[0], 1)); }, {x, c4}, 3);
  this->check([](auto&, const auto& p) { return mul(norm(p[0]), p[1]); }, {x, c0}, 2);
  this->check([](auto&, const auto& p) { return WEIGHTED(norm(p[0], 1)); }, {x, c4}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(logsumexp(p[0], 1)); }, {rnd({4, 5}, -2, 2, 54), c4}, 3);
}

TYPED_TEST(Gradcheck, SoftmaxFamily) {
  const auto x = rnd({4, 5}, -2, 2, 60);
  // weights of one sign: sum(softmax * c) has no cancellation in c - sum(softmax c)
  const auto c = rnd({4, 5}, 0.1, 1, 61);
  this->check([](auto&, const auto& p) { return WEIGHTED(softmax(p[0], 1)); }, {x, rnd({4, 5}, -1, 1, 62)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(softmax(p[0], 0)); }, {x, rnd({4, 5}, -1, 1, 63)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(log_softmax(p[0], 1)); }, {x, c}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(log_softmax(p[0], 0)); }, {x, c}, 3);
}

TYPED_TEST(Gradcheck, LayerNormAndLosses) {
  this->check([](auto&, const auto& p) { return WEIGHTED(layer_norm(p[0], p[1], p[2])); },
              {rnd({3, 6}, -2, 2, 70), rnd({6}, 0.5, 1.5, 71), rnd({6}, -1, 1, 72), rnd({3, 6}, -1, 1, 73)}, 3);
  static const std::vector<std::int64_t> labels{2, 0, 4, 1};
  this->check([](auto&, const auto& p) { return cross_entropy(p[0], labels); }, {rnd({4, 5}, -2, 2, 74)}, 1);
  this->check([](auto&, const auto& p) { return nll(log_softmax(p[0], 1), labels); }, {rnd({4, 5}, -2, 2, 75)}, 2);
  this->check([](auto&, const auto& p) { return mse(p[0], p[1]); }, {rnd({3, 4}, -1, 1, 76), rnd({3, 4}, 2, 3, 77)}, 1);
}

TYPED_TEST(Gradcheck, ViewsAndConcatenation) {
  const auto a = rnd({3, 4}, -1, 1, 80), b = rnd({2, 4}, -1, 1, 81);
  this->check([](auto&, const auto& p) { return WEIGHTED(transpose(p[0])); }, {a, rnd({4, 3}, -1, 1, 82)}, 2);
  this->check([](auto&, const auto& p) { return WEIGHTED(reshape(p[0], Shape{2, 6})); }, {a, rnd({2, 6}, -1, 1, 83)}, 2);
  this->check([](auto&, const auto& p) { return WEIGHTED(reshape(transpose(p[0]), Shape{12})); }, {a, rnd({12}, -1, 1, 84)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(slice(p[0], 1, 1, 4, 2)); }, {a, rnd({3, 2}, -1, 1, 85)}, 2);
  this->check([](auto&, const auto& p) { return WEIGHTED(cat(0, {p[0], p[1], p[0]})); }, {a, b, rnd({8, 4}, -1, 1, 86)}, 2);
}

/// A value used several times: its gradient is the sum of every use's contribution.
TYPED_TEST(Gradcheck, ReusedValues) {
  this->check([](auto&, const auto& p) {
    const auto h = tanh(p[0]);
    return sum(mul(add(mul(h, h), h), p[1]));
  }, {rnd({3, 4}, -1, 1, 90), rnd({3, 4}, -1, 1, 91)}, 4);
  // one value as query, key and value, and again through two views: the first contribution to
  // a gradient is written, every later one added
  this->check([](auto&, const auto& p) {
    const auto h = tanh(p[0]);  // [batch, heads, tokens, features]
    const auto back = permute(permute(h, Shape{0, 2, 1, 3}), Shape{0, 2, 1, 3});
    return sum(mul(add(attention(h, h, h, {false, 0}), back), p[1]));
  }, {rnd({2, 2, 3, 4}, -1, 1, 92), rnd({2, 2, 3, 4}, -1, 1, 93)}, 5);
}

/// Random programs of shape-preserving ops on [4, 6] values, interpreted on any tape.
struct program {
  struct step {
    int op, a, b;
  };
  std::vector<step> steps;

  template <class Tape, class Params>
  auto operator()(Tape& t, const Params& p) const {
    using S = typename Tape::param_type;
    using V = typename Tape::template var<S>;
    (void)t;
    // every op below keeps the parameter storage (promote, neutral and matmul under these policies)
    std::vector<V> pool(p.begin(), p.end() - 1);
    for (const auto& s : steps) {
      const V& a = pool[static_cast<std::size_t>(s.a)];
      const V& b = pool[static_cast<std::size_t>(s.b)];
      switch (s.op) {
        case 0: pool.push_back(V(add(a, b))); break;
        case 1: pool.push_back(V(sub(a, b))); break;
        case 2: pool.push_back(V(mul(a, b))); break;
        case 3: pool.push_back(V(tanh(a))); break;
        case 4: pool.push_back(V(sigmoid(a))); break;
        case 5: pool.push_back(V(matmul(matmul(a, transpose(b)), tanh(a)))); break;
        default: pool.push_back(V(cat(0, {slice(a, 0, 2, 4), slice(b, 0, 0, 2)}))); break;
      }
    }
    return sum(mul(tanh(pool.back()), p.back()));
  }
};

TYPED_TEST(Gradcheck, RandomCompositions) {
  std::mt19937 g(2026);
  for (int trial = 0; trial < 12; ++trial) {
    program prog;
    const int n_params = 3;
    const int n_steps = 3 + static_cast<int>(g() % 4);
    int depth = 0;
    std::vector<int> depth_of(n_params, 0);
    for (int i = 0; i < n_steps; ++i) {
      const int pool = n_params + i;
      program::step s{static_cast<int>(g() % 7), static_cast<int>(g() % static_cast<unsigned>(pool)),
                      static_cast<int>(g() % static_cast<unsigned>(pool))};
      prog.steps.push_back(s);
      const int len = s.op == 5 ? 3 : (s.op == 6 ? 2 : 1);
      depth_of.push_back(std::max(depth_of[static_cast<std::size_t>(s.a)], depth_of[static_cast<std::size_t>(s.b)]) + len);
    }
    depth = depth_of.back() + 3;  // tanh, mul, sum
    std::vector<Tensor<double>> at;
    for (int i = 0; i < n_params; ++i) at.push_back(rnd({4, 6}, -1, 1, 1000u + static_cast<unsigned>(10 * trial + i)));
    at.push_back(rnd({4, 6}, 0.1, 1, 2000u + static_cast<unsigned>(trial)));
    SCOPED_TRACE("trial " + std::to_string(trial) + ", depth " + std::to_string(depth));
    this->check(prog, at, depth);
  }
}

}  // namespace
