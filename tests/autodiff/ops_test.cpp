// The op layer (precis/ops/): every op gradchecked under 64-true, 32-true, bf16-mixed and
// 16-mixed (tolerances from precis::gradient_tolerance, as in gradcheck_test.cpp); attention,
// batch norm and gelu against direct references evaluated in double (conv2d and max pooling in
// conv_pool_test.cpp); the table, the tape and the eager calls list the same ops; bad input gets
// named errors.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <precis/autodiff/gradcheck.hpp>
#include <precis/precis.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attention_bound.hpp"
#include "uniform_tensor.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

using namespace precis;
namespace pol = precis::policy;

namespace {

using precis_test::uniform;

/// 0/1 values with probability 1/2.
Tensor<double> bits(Shape s, unsigned seed) {
  std::mt19937_64 g(seed);
  Tensor<double> t(s);
  for (auto& v : t) v = static_cast<double>(g() & 1);
  return t;
}

template <class P>
class OpLayer : public ::testing::Test {
 protected:
  template <class F>
  void check(F f, const std::vector<Tensor<double>>& at, int k) {
    gradcheck_options o;
    o.ops = k;
    o.finite_differences = o.check_rules = std::is_same_v<P, pol::true_<double>>;
    const auto r = gradcheck<P>(f, at, o);
    EXPECT_TRUE(r.passed()) << r.report();
    for (double e : r.error) EXPECT_TRUE(std::isfinite(e)) << r.report();
  }
};

using Policies = ::testing::Types<pol::true_<double>, pol::true_<float>, pol::named<"bf16-mixed">, pol::named<"16-mixed">>;
TYPED_TEST_SUITE(OpLayer, Policies);

/// sum(y * c): every element of y reaches the loss with its own weight.
#define WEIGHTED(expr) sum(mul((expr), p.back()))

TYPED_TEST(OpLayer, Conv2d) {
  // stride, padding, dilation and groups together, with a bias
  const conv2d_options o{{2, 1}, {1, 2}, {1, 2}, 2};
  this->check([o](auto&, const auto& p) { return WEIGHTED(conv2d(p[0], p[1], p[2], o)); },
              {uniform({2, 4, 5, 6}, -1, 1, 1), uniform({6, 2, 3, 2}, -1, 1, 2), uniform({6}, -1, 1, 3),
               uniform({2, 6, 3, 8}, -1, 1, 4)},
              3);
  // no bias, the plain 3x3 "same" convolution of the demo's CNN
  const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
  this->check([same](auto&, const auto& p) { return WEIGHTED(conv2d(p[0], p[1], same)); },
              {uniform({2, 3, 4, 4}, -1, 1, 5), uniform({2, 3, 3, 3}, -1, 1, 6), uniform({2, 2, 4, 4}, -1, 1, 7)}, 3);
}

TYPED_TEST(OpLayer, Pooling) {
  const auto x = uniform({2, 2, 5, 5}, -1, 1, 10);
  this->check([](auto&, const auto& p) { return WEIGHTED(max_pool2d(p[0], {{2, 2}, {2, 2}, {0, 0}})); },
              {x, uniform({2, 2, 2, 2}, -1, 1, 11)}, 3);
  // overlapping windows with padding: one input may win several windows
  this->check([](auto&, const auto& p) { return WEIGHTED(max_pool2d(p[0], {{3, 3}, {1, 1}, {1, 1}})); },
              {x, uniform({2, 2, 5, 5}, -1, 1, 12)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(avg_pool2d(p[0], {{3, 2}, {2, 1}, {1, 1}})); },
              {x, uniform({2, 2, 3, 6}, -1, 1, 13)}, 3);
}

TYPED_TEST(OpLayer, BatchNorm) {
  this->check([](auto&, const auto& p) { return WEIGHTED(batch_norm(p[0], p[1], p[2])); },
              {uniform({4, 3, 2, 2}, -2, 2, 20), uniform({3}, 0.5, 1.5, 21), uniform({3}, -1, 1, 22),
               uniform({4, 3, 2, 2}, -1, 1, 23)},
              3);
  static double mean[3] = {0.1, -0.2, 0.3}, var[3] = {0.5, 1.5, 2.0};
  batch_norm_options eval;
  eval.training = false;
  eval.running_mean = mean;
  eval.running_var = var;
  this->check([eval](auto&, const auto& p) { return WEIGHTED(batch_norm(p[0], p[1], p[2], eval)); },
              {uniform({2, 3}, -2, 2, 24), uniform({3}, 0.5, 1.5, 25), uniform({3}, -1, 1, 26), uniform({2, 3}, -1, 1, 27)},
              3);
}

TYPED_TEST(OpLayer, Embedding) {
  // repeated indices: their gradients sum in the accumulator
  static const std::vector<std::int64_t> idx{3, 0, 3, 1, 3, 4};
  this->check([](auto&, const auto& p) { return WEIGHTED(embedding(p[0], idx, Shape{2, 3})); },
              {uniform({5, 4}, -1, 1, 30), uniform({2, 3, 4}, -1, 1, 31)}, 3);
}

TYPED_TEST(OpLayer, BatchedMatmulWithBroadcasting) {
  this->check([](auto&, const auto& p) { return WEIGHTED(bmm(p[0], p[1])); },
              {uniform({2, 3, 4}, -1, 1, 40), uniform({2, 4, 5}, -1, 1, 41), uniform({2, 3, 5}, -1, 1, 42)}, 3);
  // b broadcast over a's batch, and a batch axis of 1 stretched
  this->check([](auto&, const auto& p) { return WEIGHTED(bmm(p[0], p[1])); },
              {uniform({2, 1, 3, 4}, -1, 1, 43), uniform({3, 4, 2}, -1, 1, 44), uniform({2, 3, 3, 2}, -1, 1, 45)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(bmm(p[0], transpose(p[1], 1, 2))); },
              {uniform({2, 3, 4}, -1, 1, 46), uniform({2, 5, 4}, -1, 1, 47), uniform({2, 3, 5}, -1, 1, 48)}, 4);
}

TYPED_TEST(OpLayer, Attention) {
  for (const bool causal : {false, true}) {
    const attention_options o{causal, 0};
    this->check([o](auto&, const auto& p) { return WEIGHTED(attention(p[0], p[1], p[2], o)); },
                {uniform({2, 2, 4, 3}, -1, 1, 50), uniform({2, 2, 4, 3}, -1, 1, 51), uniform({2, 2, 4, 5}, -1, 1, 52),
                 uniform({2, 2, 4, 5}, -1, 1, 53)},
                4);
    // q, k and v also feed ops recorded after the attention, so their gradients already hold
    // values when its backward adds each head's part into them
    this->check(
        [o](auto&, const auto& p) {
          const auto y = WEIGHTED(attention(p[0], p[1], p[2], o));
          const auto later = add(sum(mul(p[0], p[1])), sum(mul(p[2], p[2])));
          return add(y, later);
        },
        {uniform({2, 2, 4, 3}, -1, 1, 54), uniform({2, 2, 4, 3}, -1, 1, 55), uniform({2, 2, 4, 5}, -1, 1, 56),
         uniform({2, 2, 4, 5}, -1, 1, 57)},
        9);
    // three heads side by side in the last axis ([2, Tq, 3 x 2], v [2, Tk, 3 x 4]), q of its own
    // length, and self-attention of one value (the heads' gradients into one buffer)
    const attention_options heads{causal, 0, 3};
    this->check([heads](auto&, const auto& p) { return WEIGHTED(attention(p[0], p[1], p[2], heads)); },
                {uniform({2, 4, 6}, -1, 1, 58), uniform({2, 5, 6}, -1, 1, 59), uniform({2, 5, 12}, -1, 1, 150),
                 uniform({2, 4, 12}, -1, 1, 151)},
                4);
    this->check([heads](auto&, const auto& p) { return WEIGHTED(attention(p[0], p[0], p[0], heads)); },
                {uniform({2, 4, 6}, -1, 1, 152), uniform({2, 4, 6}, -1, 1, 153)}, 2);
  }
}

TYPED_TEST(OpLayer, DropoutWhereMaskedFill) {
  const dropout_options d{0.3, 7, 11, true};
  this->check([d](auto&, const auto& p) { return WEIGHTED(dropout(p[0], d)); },
              {uniform({4, 6}, -1, 1, 60), uniform({4, 6}, -1, 1, 61)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(where(p[0], p[1], p[2])); },
              {bits({3, 4}, 62), uniform({3, 4}, -1, 1, 63), uniform({4}, -1, 1, 64), uniform({3, 4}, -1, 1, 65)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(masked_fill(p[0], p[1], -3.0)); },
              {uniform({3, 4}, -1, 1, 66), bits({4}, 67), uniform({3, 4}, -1, 1, 68)}, 3);
}

TYPED_TEST(OpLayer, SelectionAndActivations) {
  const auto x = uniform({3, 5}, -2, 2, 70);
  this->check([](auto&, const auto& p) { return WEIGHTED(max(p[0], 1)); }, {x, uniform({3}, -1, 1, 71)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(min(p[0], 0)); }, {x, uniform({5}, -1, 1, 72)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(silu(p[0])); }, {x, uniform({3, 5}, -1, 1, 73)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(gelu_tanh(p[0])); }, {uniform({3, 5}, 0.25, 2, 74), uniform({3, 5}, -1, 1, 75)}, 3);
  this->check([](auto&, const auto& p) { return WEIGHTED(permute(p[0], Shape{2, 0, 1})); },
              {uniform({2, 3, 4}, -1, 1, 76), uniform({4, 2, 3}, -1, 1, 77)}, 2);
}

/// The gradient buffers the tape allocates for intermediate values are handed to most ops
/// without zeros (an op that assigns its first contribution writes them whole); whatever such
/// an op does not write must still come out zero. A step recorded on memory that NaNs filled
/// before (the arena hands out the same addresses for the same shapes) must
/// give the gradients of a step on a new tape, bit for bit: ops whose gradients reach only part
/// of their input (an odd-sized max pool, a slice), none of it (where's condition), inputs used
/// twice, and the 2 x 2 max pool and conv2d, whose fp32 gradients are written (conv2d: summed)
/// straight into the buffer.
template <class P>
class FreshGradients : public ::testing::Test {};
TYPED_TEST_SUITE(FreshGradients, Policies);

TYPED_TEST(FreshGradients, NeedNoZerosFromTheArena) {
  using P = TypeParam;
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  const std::vector<Shape> shapes{{2, 3, 7, 7}, {4, 3, 3, 3}, {4}, {10, 66}, {10}, {10}, {10}, {4}, {4}, {2, 4, 7, 7}};
  std::vector<Tensor<S>> values;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Tensor<S> t(shapes[i]);
    const auto u = uniform(shapes[i], i == 5 || i == 7 ? 0.5 : -1.0, 1.0, 300u + static_cast<unsigned>(i));
    for (index_t e = 0; e < t.size(); ++e) t.data()[e] = detail::store<S>(u.data()[e]);
    values.push_back(std::move(t));
  }
  const auto mask = bits({2, 4, 7, 7}, 400);
  static const std::vector<std::int64_t> labels{3, 7};
  const auto step = [&](Tape<P>& tape, std::vector<Tensor<G>>& grads, bool poison) {
    std::vector<Tensor<S>> in = values;
    if (poison) {
      for (auto& t : in)
        for (index_t e = 0; e < t.size(); ++e) t.data()[e] = detail::store<S>(std::numeric_limits<double>::quiet_NaN());
    }
    grads.clear();
    std::vector<Var<P, S>> p;
    for (auto& t : in) {
      grads.emplace_back(t.shape());
      p.push_back(tape.param(t.view(), grads.back().view()));
    }
    const auto h = conv2d(tanh(p[0]), p[1], p[2], conv2d_options{{1, 1}, {1, 1}, {1, 1}, 1});  // [2, 4, 7, 7]
    const auto bn = batch_norm(h, p[7], p[8]);                                              // h used twice
    const auto pooled = max_pool2d(relu(h), {{2, 2}, {2, 2}, {0, 0}});                      // [2, 4, 3, 3]: row 7 and column 7 get no gradient
    const auto avg = avg_pool2d(mul(h, p[9]), {{3, 3}, {2, 2}, {1, 1}});                    // [2, 4, 4, 4]
    const auto flat = slice(reshape(pooled, Shape{2, 36}), 1, 2, 32);                        // a slice: part of the gradient
    const auto perm = reshape(permute(pooled, Shape{0, 2, 3, 1}), Shape{2, 36});           // a strided reshape
    const auto joined = cat(1, {flat, perm});                                               // [2, 66]
    const auto logits = layer_norm(linear(joined, p[3], p[4]), p[5], p[6]);
    const auto z = reshape(avg, Shape{2, 4, 16});
    const auto att = attention(z, neg(z), tanh(z), attention_options{true, 0});
    const auto picked = where(relu(p[9]), masked_fill(bn, tape.input(mask), 0.5), sub(bn, h));  // no gradient for the condition
    const auto loss = add(add(cross_entropy(logits, labels), mean(mul(att, att))), mean(mul(picked, picked)));
    tape.backward(loss);
  };
  std::vector<Tensor<G>> clean, reused;
  Tape<P> a;
  step(a, clean, false);
  Tape<P> b;
  {  // NaNs through the arena (a step's first use of its memory), then through the scratch too
    Tensor<S> nans(Shape{1 << 20});
    for (index_t e = 0; e < nans.size(); ++e) nans.data()[e] = detail::store<S>(std::numeric_limits<double>::quiet_NaN());
    (void)b.input(nans);
    b.reset();
  }
  step(b, reused, true);
  b.reset();
  step(b, reused, false);
  ASSERT_EQ(clean.size(), reused.size());
  for (std::size_t i = 0; i < clean.size(); ++i) {
    for (index_t e = 0; e < clean[i].size(); ++e) {
      const double want = detail::load<double>(clean[i].data()[e]), got = detail::load<double>(reused[i].data()[e]);
      ASSERT_TRUE(std::isfinite(want)) << "parameter " << i << " element " << e;
      ASSERT_EQ(std::memcmp(&clean[i].data()[e], &reused[i].data()[e], sizeof(G)), 0)
          << "parameter " << i << " element " << e << ": " << got << " after a poisoned step, " << want << " on a new tape";
    }
  }
}


// ---- direct references in double (conv2d's and max pooling's: conv_pool_test.cpp) ------------

/// batch_norm's sums over a channel (102 400 values here) are pairwise on eight lanes in the
/// accumulator, each value in at most ceil(log2 m) + 2 additions: the batch mean within
/// gamma(ceil(log2 m) + 3) sum|x| / m of the exact mean, the variance within gamma(ceil(log2 m)
/// + 6) of the exact one (the difference, its square, the sum, the division) plus the mean's
/// error squared, and beta's gradient within gamma(ceil(log2 m) + 2) sum|gy|, u the
/// accumulator's unit roundoff: fp32 under 32-true, bf16 and fp16 under bf16-true and 16-true.
/// Values near `offset` (channel 0; 100 makes a running fp32 sum miss these bounds) and
/// gradients near 1; fp16's sums stay below its largest value (65504) with offset 0 and m / 4.
template <class S>
void expect_batch_norm_sums_pairwise(index_t n, float offset) {
  using P = pol::true_<S>;  // S stores, computes and accumulates
  const index_t c = 2, s = 6400, m = n * s;
  Tensor<S> x(Shape{n, c, 80, 80}), w(x.shape()), gamma(Shape{c}), beta(Shape{c});
  fill_uniform(x.view(), -1, 1, 400);
  fill_uniform(w.view(), 0.5, 1.5, 401);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < s; ++j) {  // channel 0 around offset
      S& v = x.data()[(i * c) * s + j];
      v = detail::store<S>(detail::load<float>(v) + offset);
    }
  std::fill(gamma.begin(), gamma.end(), detail::store<S>(1.0f));
  std::fill(beta.begin(), beta.end(), detail::store<S>(0.0f));
  std::array<double, 2> run_mean{}, run_var{};
  batch_norm_options o;
  o.momentum = 1;  // the running statistics become the batch's
  o.running_mean = run_mean.data();
  o.running_var = run_var.data();
  Tensor<S> gx(x.shape()), gg(gamma.shape()), gb(beta.shape());
  Tape<P> tape;
  tape.backward(sum(mul(batch_norm(tape.param(x.view(), gx.view()), tape.param(gamma.view(), gg.view()),
                                   tape.param(beta.view(), gb.view()), o),
                        tape.input(w, false))));
  const double u = unit_roundoff<S>();
  const int lg = bounds::ceil_log2(static_cast<double>(m));
  const auto at_ = [](const Tensor<S>& t, index_t k) { return static_cast<double>(detail::load<float>(t.data()[k])); };
  for (index_t ch = 0; ch < c; ++ch) {
    double sx = 0, sa = 0, sw = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < s; ++j) {
        const index_t k = (i * c + ch) * s + j;
        sx += at_(x, k);
        sa += std::abs(at_(x, k));
        sw += at_(w, k);
      }
    const double mu = sx / static_cast<double>(m);
    double v = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < s; ++j) {
        const double d = at_(x, (i * c + ch) * s + j) - mu;
        v += d * d;
      }
    v /= static_cast<double>(m);
    const double mean_err = std::abs(run_mean[static_cast<std::size_t>(ch)] - mu);
    EXPECT_LE(mean_err, bounds::gamma(lg + 3, u) * sa / static_cast<double>(m)) << "channel " << ch;
    const double var = run_var[static_cast<std::size_t>(ch)] * static_cast<double>(m - 1) / static_cast<double>(m);
    EXPECT_LE(std::abs(var - v), bounds::gamma(lg + 6, u) * var + mean_err * mean_err + 1e-12 * v) << "channel " << ch;
    EXPECT_LE(std::abs(at_(gb, ch) - sw), bounds::gamma(lg + 2, u) * sw) << "channel " << ch;  // S holds Acc exactly
  }
}

TEST(OpLayerReference, BatchNormSumsArePairwise) {
  expect_batch_norm_sums_pairwise<float>(16, 100.0f);
  expect_batch_norm_sums_pairwise<bfloat16>(16, 100.0f);  // bf16-true
  expect_batch_norm_sums_pairwise<half>(4, 0.0f);         // 16-true
}

/// softmax(q k^T / sqrt(d), causal) v by its definition, in double.
Tensor<double> attention_reference(const Tensor<double>& q, const Tensor<double>& k, const Tensor<double>& v, bool causal) {
  const index_t b = q.shape()[0], tq = q.shape()[1], d = q.shape()[2], tk = k.shape()[1], dv = v.shape()[2];
  Tensor<double> y(Shape{b, tq, dv});
  for (index_t n = 0; n < b; ++n)
    for (index_t i = 0; i < tq; ++i) {
      std::vector<double> s(static_cast<std::size_t>(tk), -INFINITY);
      double mx = -INFINITY;
      for (index_t j = 0; j < tk; ++j) {
        if (causal && j > i) continue;
        double dot = 0;
        for (index_t e = 0; e < d; ++e) dot += q(n, i, e) * k(n, j, e);
        s[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[static_cast<std::size_t>(j)]);
      }
      double z = 0;
      for (auto& e : s) z += (e = std::exp(e - mx));
      for (index_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (index_t j = 0; j < tk; ++j) acc += s[static_cast<std::size_t>(j)] / z * v(n, j, c);
        y(n, i, c) = acc;
      }
    }
  return y;
}

TEST(OpLayerReference, AttentionMatchesDefinition) {
  const auto q = uniform({3, 5, 4}, -1, 1, 300), k = uniform({3, 6, 4}, -1, 1, 301), v = uniform({3, 6, 3}, -1, 1, 302);
  for (const bool causal : {false, true}) {
    const auto ref = attention_reference(q, k, v, causal);
    const auto y64 = attention<pol::true_<double>>(q, k, v, {causal, 0});
    const auto y32 = attention<pol::true_<float>>(astype<float>(q), astype<float>(k), astype<float>(v), {causal, 0});
    // |v| <= 1 and the probabilities sum to 1: absolute errors of a few dozen unit roundoffs
    // (the scores' dot products, exp, the normalization and the weighted sum of Tk values)
    for (index_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(y64.data()[i], ref.data()[i], 64 * unit_roundoff<double>()) << "causal " << causal << " element " << i;
      EXPECT_NEAR(y32.data()[i], ref.data()[i], 64 * unit_roundoff<float>()) << "causal " << causal << " element " << i;
    }
    if (causal) {  // the first query sees only the first key
      for (index_t n = 0; n < 3; ++n)
        for (index_t c = 0; c < 3; ++c) EXPECT_DOUBLE_EQ(y64(n, 0, c), v(n, 0, c));
    }
  }
}

/// q and k of width 0 with a scale given: every score is 0, so each query attends uniformly
/// to the keys it sees (causal: its first i + 1). y is the mean of those rows of v and v's
/// gradient, for y's gradient 1, sums 1/a over the queries that see the key. Each probability is
/// 1/a rounded once (e^0 and a are exact), so y's a products and a - 1 sums leave it within
/// gamma_2a max|v| of the mean, and v's gradient (at most Tq terms 1/a, each within u) within
/// gamma_2Tq of its sum. The default scale, 1/sqrt(0), is refused.
TEST(OpLayerReference, AttentionOfZeroWidthAttendsUniformly) {
  using P = pol::named<"32-true">;
  const index_t b = 2, tq = 3, tk = 4, dv = 2;
  const auto v = astype<float>(uniform({b, tk, dv}, -1, 1, 320));
  const double u = unit_roundoff<float>();
  const auto gamma = [&](double n) { return n * u / (1 - n * u); };
  for (const bool causal : {false, true}) {
    Tape<P> t;
    const auto vv = t.input(v, true);
    const auto y = attention(t.input(Tensor<float>(Shape{b, tq, 0})),
                             t.input(Tensor<float>(Shape{b, tk, 0})), vv, {causal, 1.0});
    ASSERT_EQ(y.shape(), (Shape{b, tq, dv}));
    t.backward(sum(y));
    const auto gv = vv.grad();
    for (index_t n = 0; n < b; ++n) {
      for (index_t i = 0; i < tq; ++i) {
        const index_t a = causal ? std::min(tk, i + 1) : tk;
        for (index_t c = 0; c < dv; ++c) {
          double mean = 0;
          for (index_t j = 0; j < a; ++j)
            mean += static_cast<double>(v(n, j, c)) / static_cast<double>(a);
          EXPECT_NEAR(y.value()(n, i, c), mean, gamma(2.0 * static_cast<double>(a)))
              << "causal " << causal;
        }
      }
      for (index_t j = 0; j < tk; ++j) {
        double want = 0;
        for (index_t i = 0; i < tq; ++i) {
          const index_t a = causal ? std::min(tk, i + 1) : tk;
          if (j < a) want += 1.0 / static_cast<double>(a);
        }
        for (index_t c = 0; c < dv; ++c) {
          EXPECT_NEAR(gv(n, j, c), want, gamma(2.0 * static_cast<double>(tq)) * want)
              << "causal " << causal << " key " << j;
        }
      }
    }
  }
}

/// attention with H heads side by side in the last axis against the definition head by head
/// (in double), and bit for bit against the heads split into an axis of their own, attended and
/// merged back (permutes and copies): outputs and the gradients of q, k and v, under 32-true and
/// bf16-mixed.
template <class P>
void expect_heads_in_place_are_split_heads() {
  using S = typename P::param_type;
  using G = typename P::grad_type;
  const index_t b = 2, tq = 5, tk = 7, h = 3, d = 4, dv = 2;
  const auto q64 = uniform({b, tq, h * d}, -1, 1, 310), k64 = uniform({b, tk, h * d}, -1, 1, 311);
  const auto v64 = uniform({b, tk, h * dv}, -1, 1, 312), c64 = uniform({b, tq, h * dv}, -1, 1, 313);
  auto q = astype<S>(q64), k = astype<S>(k64), v = astype<S>(v64);
  const auto c = astype<S>(c64);
  const auto split = [&](const auto& x) { return permute(reshape(x, Shape{b, x.shape()[1], h, x.shape()[2] / h}), Shape{0, 2, 1, 3}); };
  for (const bool causal : {false, true}) {
    Tensor<G> gq(q.shape()), gk(k.shape()), gv(v.shape()), sq(q.shape()), sk(k.shape()), sv(v.shape());
    Tape<P> t1, t2;
    const auto y1 = attention(t1.param(q.view(), gq.view()), t1.param(k.view(), gk.view()), t1.param(v.view(), gv.view()),
                              {causal, 0, h});
    t1.backward(sum(mul(y1, t1.input(c))));
    const auto o = attention(split(t2.param(q.view(), sq.view())), split(t2.param(k.view(), sk.view())),
                             split(t2.param(v.view(), sv.view())), {causal, 0});
    const auto y2 = reshape(permute(o, Shape{0, 2, 1, 3}), Shape{b, tq, h * dv});
    t2.backward(sum(mul(y2, t2.input(c))));
    const std::string at = std::string(P::name()) + (causal ? ", causal" : "");
    ASSERT_EQ(y1.shape(), (Shape{b, tq, h * dv})) << at;
    const auto same = [&](const auto& x, const auto& y, const char* what) {
      for (index_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(std::memcmp(&x.data()[i], &y.data()[i], sizeof(x.data()[i])), 0) << what << " element " << i << " (" << at << ")";
      }
    };
    same(y1.value(), y2.value(), "y");
    same(gq, sq, "dq");
    same(gk, sk, "dk");
    same(gv, sv, "dv");
    // head by head against the definition: |v| <= 1 and the probabilities sum to 1, so rounding
    // them to the storage for the second product moves y by at most u_S, and rounding y once
    // more by u_S; the accumulator's sums, exp and normalization a few dozen u_acc
    for (index_t hd = 0; hd < h; ++hd) {
      Tensor<double> qh(Shape{b, tq, d}), kh(Shape{b, tk, d}), vh(Shape{b, tk, dv});
      for (index_t n = 0; n < b; ++n) {
        for (index_t i = 0; i < tq; ++i)
          for (index_t e = 0; e < d; ++e) qh(n, i, e) = detail::load<double>(q(n, i, hd * d + e));
        for (index_t j = 0; j < tk; ++j) {
          for (index_t e = 0; e < d; ++e) kh(n, j, e) = detail::load<double>(k(n, j, hd * d + e));
          for (index_t e = 0; e < dv; ++e) vh(n, j, e) = detail::load<double>(v(n, j, hd * dv + e));
        }
      }
      const auto ref = attention_reference(qh, kh, vh, causal);
      const double tol = 4 * unit_roundoff<S>() + 64 * unit_roundoff<typename P::high_type>();
      for (index_t n = 0; n < b; ++n)
        for (index_t i = 0; i < tq; ++i)
          for (index_t e = 0; e < dv; ++e) {
            EXPECT_NEAR(detail::load<double>(y1.value()(n, i, hd * dv + e)), ref(n, i, e), tol) << "head " << hd << " (" << at << ")";
          }
    }
  }
}

TEST(OpLayerReference, AttentionHeadsInPlaceAreSplitHeads32True) { expect_heads_in_place_are_split_heads<pol::named<"32-true">>(); }
TEST(OpLayerReference, AttentionHeadsInPlaceAreSplitHeadsBf16Mixed) {
  expect_heads_in_place_are_split_heads<pol::named<"bf16-mixed">>();
}

/// attention under P on the tape (q, k and v parameters, the loss sum(y * c)) against its
/// definition in long double, within the bound derived in attention_bound.hpp: y and the
/// gradients of q, k and v, with and without the causal mask. The large case has more keys than
/// a warp's lanes and more queries than a block's warps (the device's fused kernel walks both),
/// and fewer queries than keys.
template <class P>
void expect_attention_within_bound(precis_test::attention_case n, unsigned seed) {
  using S = typename P::param_type;
  using G = typename P::grad_type;
  using X = typename P::activation_type;
  using Acc = typename P::high_type;
  const Shape qs{n.b, n.tq, n.h * n.d}, ks{n.b, n.tk, n.h * n.d}, vs{n.b, n.tk, n.h * n.dv},
      ys{n.b, n.tq, n.h * n.dv};
  auto q = astype<S>(uniform(qs, -1, 1, seed)), k = astype<S>(uniform(ks, -1, 1, seed + 1)),
       v = astype<S>(uniform(vs, -1, 1, seed + 2));
  const auto c = astype<S>(uniform(ys, -1, 1, seed + 3));
  const auto doubles = [](const auto& x) {
    std::vector<double> out(static_cast<std::size_t>(x.size()));
    for (index_t i = 0; i < x.size(); ++i)
      out[static_cast<std::size_t>(i)] = detail::load<double>(x.data()[i]);
    return out;
  };
  const precis_test::attention_units un{unit_roundoff<S>(),
                                        unit_roundoff<Acc>(),
                                        unit_roundoff<X>(),
                                        unit_roundoff<G>(),
                                        static_cast<double>(format_traits<Acc>::min_subnormal()),
                                        static_cast<double>(format_traits<S>::min_subnormal())};
  for (const bool causal : {false, true}) {
    n.causal = causal;
    Tensor<G> gq(qs), gk(ks), gv(vs);
    Tape<P> t;
    const auto y = attention(t.param(q.view(), gq.view()), t.param(k.view(), gk.view()),
                             t.param(v.view(), gv.view()), {causal, 0, n.h});
    t.backward(sum(mul(y, t.input(c))));
    double worst = 0;
    const auto failure = precis_test::check_attention_bound(
        n, {doubles(q), doubles(k), doubles(v), doubles(c)},
        {doubles(y.value()), doubles(gq), doubles(gk), doubles(gv)}, un, &worst);
    EXPECT_EQ(failure, "") << P::name() << (causal ? ", causal" : "");
    ::testing::Test::RecordProperty(
        std::string(P::name()) + (causal ? "_causal" : "") + "_worst_error_over_bound",
        std::to_string(worst));
  }
}

constexpr precis_test::attention_case attention_large{
    .b = 2, .tq = 37, .tk = 45, .h = 4, .d = 8, .dv = 6};
constexpr precis_test::attention_case attention_small{
    .b = 2, .tq = 9, .tk = 12, .h = 2, .d = 4, .dv = 3};

TEST(OpLayerReference, AttentionWithinItsBound) {
  expect_attention_within_bound<pol::named<"64-true">>(attention_large, 320);
  expect_attention_within_bound<pol::named<"32-true">>(attention_large, 320);
  expect_attention_within_bound<pol::named<"bf16-mixed">>(attention_large, 320);
  expect_attention_within_bound<pol::named<"16-mixed">>(attention_large, 320);
  expect_attention_within_bound<pol::named<"16-true">>(attention_large, 320);
  expect_attention_within_bound<pol::named<"bf16-true">>(attention_small, 330);
}

// ---- one list of ops -------------------------------------------------------------------------

/// An op definition: its policy entry, its attributes and its typed saved state. The tape front
/// end (record<Op>) and the eager one (ops<P>::call<Op>, evaluate<P, Op>) are generic over
/// definitions, so an op that is one is on the tape and eager alike.
template <class Op>
concept op_definition = requires {
  { Op::name } -> std::convertible_to<std::string_view>;
  { Op::reason } -> std::convertible_to<std::string_view>;
  Op::safety_class;
  typename Op::attrs;
  typename Op::template saved<pol::op_types<pol::named<"32-true">, Op, float>>;
};

/// gelu_tanh and its derivative in fp32 (the vectorized tanh, 1 - 2 / (e^(2u) + 1)) against the
/// same formulas in double, over [-12, 12] (tanh saturated at both ends). exp_floats is within
/// a few ulp, so tanh is within about 8 u of the exact value in absolute terms (u = 2^-24): the
/// output's error is bounded by 0.5 |x| 8 u plus the final roundings, 2 u |y|.
TEST(OpLayerReference, GeluTanhVectorizedMatchesDouble) {
  using P = pol::named<"32-true">;
  const index_t n = 4801;
  Tensor<float> x(Shape{n});
  for (index_t i = 0; i < n; ++i) x.data()[i] = static_cast<float>(-12.0 + 24.0 * static_cast<double>(i) / (n - 1));
  const auto y = gelu_tanh<P>(x);
  Tape<P> t;
  Tensor<float> gx(Shape{n});
  const auto xv = t.param(x.view(), gx.view());
  t.backward(sum(gelu_tanh(xv)));
  const double u = std::ldexp(1.0, -24), c = std::sqrt(2.0 / std::acos(-1.0));
  for (index_t i = 0; i < n; ++i) {
    const double v = x.data()[i], th = std::tanh(c * (v + 0.044715 * v * v * v));
    const double ref = 0.5 * v * (1 + th);
    const double dref = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * c * (1 + 3 * 0.044715 * v * v);
    ASSERT_LE(std::abs(y.data()[i] - ref), 0.5 * std::abs(v) * 8 * u + 2 * u * std::abs(ref) + 1e-30) << "x = " << v;
    // the derivative: t's error enters through 0.5 (1 + t) and 0.5 x (1 - t^2) c (1 + 3 a x^2)
    const double dt = 8 * u, slope = std::abs(v) * c * (1 + 3 * 0.044715 * v * v);
    ASSERT_LE(std::abs(gx.data()[i] - dref), 0.5 * dt + slope * dt + 8 * u * (1 + slope)) << "x = " << v;
  }
}


TEST(OpLayerRegistry, TheTableListsEveryOpOnceAndEachIsADefinition) {
  std::set<std::string> table;
  op::all::for_each([&]<class Op>() {
    static_assert(op_definition<Op>);
    static_assert(std::is_trivially_destructible_v<typename Op::attrs>, "attrs live in the tape's arena");
    EXPECT_TRUE(table.insert(std::string(Op::name)).second) << Op::name << " twice";
    EXPECT_FALSE(Op::reason.empty()) << Op::name;
  });
  EXPECT_EQ(table.size(), op::all::size);
  // the front ends named after an op reach that op: a few of each kind, eager and taped
  using P = pol::named<"32-true">;
  const Tensor<float> x = Tensor<float>::full(Shape{2, 3}, 0.5f);
  EXPECT_FLOAT_EQ(ops<P>::sum(x).data()[0], 3.0f);
  EXPECT_FLOAT_EQ(ops<P>::call<op::sum>({0, true}, x).data()[0], 3.0f);
  Tape<P> t;
  const auto v = t.input(x.view());
  EXPECT_FLOAT_EQ(sum(v).value().data()[0], 3.0f);
  EXPECT_FLOAT_EQ(record<op::sum>({0, true}, v).value().data()[0], 3.0f);
}

TEST(OpLayerRegistry, EagerAndTapeAgree) {
  using P = pol::named<"bf16-mixed">;
  const auto x = astype<bfloat16>(uniform({2, 3, 6, 6}, -1, 1, 400));
  const auto w = astype<bfloat16>(uniform({4, 3, 3, 3}, -1, 1, 401));
  const auto eager = max_pool2d<P>(conv2d<P>(x, w, {{1, 1}, {1, 1}, {1, 1}, 1}));
  Tape<P> t;
  const auto y = max_pool2d(conv2d(t.input(x), t.input(w), {{1, 1}, {1, 1}, {1, 1}, 1}));
  ASSERT_EQ(eager.shape(), y.shape());
  for (index_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(static_cast<float>(eager.data()[i]), static_cast<float>(y.value().data()[i])) << i;
  }
  const auto via_ops = ops<P>::call<op::attention>({true, 0}, x.view().select(0, 0), x.view().select(0, 1), x.view().select(0, 0));
  const auto direct = attention<P>(x.view().select(0, 0), x.view().select(0, 1), x.view().select(0, 0), {true, 0});
  for (index_t i = 0; i < direct.size(); ++i) EXPECT_EQ(static_cast<float>(via_ops.data()[i]), static_cast<float>(direct.data()[i]));
}

/// The ops that used to have a tape implementation and a separate eager one (which disagreed
/// on layer_norm's rounding) now run one forward: the values agree bit for bit, here under
/// bf16-mixed on bf16 inputs, a strided (transposed) one included.
TEST(OpLayerRegistry, EagerAndTapeAgreeOnTheFormerlyDuplicatedOps) {
  using P = pol::named<"bf16-mixed">;
  using O = ops<P>;
  const auto x = astype<bfloat16>(uniform({6, 8}, -2, 2, 410));
  const auto w = astype<bfloat16>(uniform({5, 8}, -1, 1, 411));
  const auto b = astype<bfloat16>(uniform({5}, -1, 1, 412));
  const auto g = astype<bfloat16>(uniform({8}, 0.5, 1.5, 413));
  const auto h = astype<bfloat16>(uniform({8}, -0.5, 0.5, 414));
  const std::vector<std::int64_t> labels{0, 4, 2, 1, 3, 4};
  Tape<P> t;
  const auto xv = t.input(x), wv = t.input(w), bv = t.input(b), gv = t.input(g), hv = t.input(h);
  const auto same = [](const auto& eager, const auto& var, const char* what) {
    ASSERT_EQ(as_view(eager).shape(), var.shape()) << what;
    for (index_t i = 0; i < var.size(); ++i) {
      EXPECT_EQ(load<double>(as_view(eager).value_at_linear(i)), load<double>(var.value().value_at_linear(i))) << what << " " << i;
    }
  };
  same(O::layer_norm(x, g, h), layer_norm(xv, gv, hv), "layer_norm");
  same(O::linear(x, w, b), linear(xv, wv, bv), "linear");
  same(O::matmul(x, O::transpose(w)), matmul(xv, transpose(wv)), "matmul of a transposed view");
  same(O::softmax(x, 1), softmax(xv, 1), "softmax");
  same(O::log_softmax(x, 0), log_softmax(xv, 0), "log_softmax");
  same(O::sum(x, 1), sum(xv, 1), "sum");
  same(O::norm(x), norm(xv), "norm");
  same(O::cross_entropy(O::linear(x, w, b), labels), cross_entropy(linear(xv, wv, bv), labels), "cross_entropy");
  same(O::mul(O::gelu(x), g), mul(gelu(xv), gv), "gelu, mul (broadcast)");
  same(O::cat(0, x, x), cat(0, {xv, xv}), "cat");
}

// ---- dropout ---------------------------------------------------------------------------------

TEST(OpLayerDropout, KeepsAboutOneMinusPAndScales) {
  using P = pol::true_<float>;
  const Tensor<float> ones = Tensor<float>::full(Shape{200, 500}, 1.0f);
  const auto y = dropout<P>(ones, {0.25, 3, 0, true});
  index_t kept = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || v == static_cast<float>(1 / 0.75)) << v;
    kept += v != 0.0f;
  }
  // binomial(1e5, 0.75): standard deviation 137; 6 of them
  EXPECT_NEAR(static_cast<double>(kept), 75000.0, 6 * 137.0);
  const auto again = dropout<P>(ones, {0.25, 3, 0, true});
  const auto other = dropout<P>(ones, {0.25, 3, 1, true});
  index_t same = 0, differ = 0;
  for (index_t i = 0; i < y.size(); ++i) {
    same += y.data()[i] == again.data()[i];
    differ += y.data()[i] != other.data()[i];
  }
  EXPECT_EQ(same, y.size());
  EXPECT_GT(differ, 0);
  const auto eval = dropout<P>(ones, {0.25, 3, 0, false});
  for (float v : eval) ASSERT_EQ(v, 1.0f);
}

// ---- bad input -------------------------------------------------------------------------------

template <class E, class F>
void expect_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(OpLayerErrors, NameTheOpShapesAndExpectation) {
  using P = pol::true_<float>;
  const Tensor<float> x(Shape{2, 3, 5, 5});
  expect_error<shape_error>([&] { (void)conv2d<P>(x, Tensor<float>(Shape{4, 2, 3, 3})); },
                            {"precis::conv2d", "[2, 3, 5, 5]", "[4, 2, 3, 3]", "mismatched channels"});
  expect_error<shape_error>([&] { (void)conv2d<P>(x, Tensor<float>(Shape{4, 3, 7, 3})); },
                            {"precis::conv2d", "no larger than the padded input"});
  expect_error<shape_error>([&] { (void)max_pool2d<P>(x, {{6, 6}, {0, 0}, {0, 0}}); }, {"precis::max_pool2d", "padded input"});
  // a plane of width 0 padded into windows of padding only: nothing to take the max of
  expect_error<shape_error>([&] { (void)max_pool2d<P>(Tensor<float>(Shape{1, 1, 0, 4}), {{2, 2}, {0, 0}, {1, 1}}); },
                            {"precis::max_pool2d", "[1, 1, 0, 4]", "H and W of at least 1"});
  expect_error<shape_error>([&] { (void)avg_pool2d<P>(Tensor<float>(Shape{1, 1, 4, 0}), {{2, 2}, {0, 0}, {1, 1}}); },
                            {"precis::avg_pool2d", "H and W of at least 1"});
  expect_error<shape_error>([&] { (void)masked_fill<P>(x, Tensor<float>(Shape{4}), 0.0); },
                            {"precis::masked_fill", "mask [4]", "[2, 3, 5, 5]", "broadcasts"});
  expect_error<shape_error>([&] { (void)attention<P>(Tensor<float>(Shape{2, 3, 4}), Tensor<float>(Shape{2, 3, 5}),
                                                     Tensor<float>(Shape{2, 3, 4})); },
                            {"precis::attention", "same D"});
  expect_error<shape_error>([&] { (void)attention<P>(Tensor<float>(Shape{2, 3, 6}), Tensor<float>(Shape{2, 3, 6}),
                                                     Tensor<float>(Shape{2, 3, 4}), {false, 0, 3}); },
                            {"precis::attention", "v [2, 3, 4]", "heads 3", "divisible by the 3 heads"});
  expect_error<shape_error>([&] { (void)attention<P>(Tensor<float>(Shape{2, 3, 6}), Tensor<float>(Shape{2, 3, 6}),
                                                     Tensor<float>(Shape{2, 3, 6}), {false, 0, 0}); },
                            {"precis::attention", "heads >= 1"});
  expect_error<shape_error>(
      [&] {
        (void)attention<P>(Tensor<float>(Shape{2, 3, 0}), Tensor<float>(Shape{2, 3, 0}),
                           Tensor<float>(Shape{2, 3, 4}));
      },
      {"precis::attention", "q [2, 3, 0]", "D >= 1 for the scale 1/sqrt(D)"});
  const std::vector<std::int64_t> idx{0, 7};
  expect_error<invalid_argument>([&] { (void)embedding<P>(Tensor<float>(Shape{5, 2}), idx, Shape{2}); },
                                 {"precis::embedding", "index 7", "[0, 5)", "[5, 2]"});
  expect_error<shape_error>([&] { (void)batch_norm<P>(x, Tensor<float>(Shape{4}), Tensor<float>(Shape{4})); },
                            {"precis::batch_norm", "mismatched channels"});
  expect_error<shape_error>([&] { (void)bmm<P>(Tensor<float>(Shape{2, 3, 4}), Tensor<float>(Shape{3, 5, 2})); },
                            {"precis::bmm", "[2, 3, 4]", "[3, 5, 2]"});
}

}  // namespace
