// The op layer (precis/ops/): every op gradchecked under 64-true, 32-true, bf16-mixed and
// 16-mixed (tolerances from precis::gradient_tolerance, as in gradcheck_test.cpp); conv2d and
// attention against direct references evaluated in double; the table, the tape and the eager
// calls list the same ops; bad input gets named errors.
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

#if defined(_OPENMP)
#include <omp.h>
#endif

using namespace precis;
namespace pol = precis::policy;

namespace {

Tensor<double> uniform(Shape s, double lo, double hi, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor<double> t(s);
  for (auto& v : t) v = u(g);
  return t;
}

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

// ---- direct references in double ------------------------------------------------------------

/// conv2d by its definition, each output as a sum over (c, i, j), with the sum of |terms|.
void conv_reference(const Tensor<double>& x, const Tensor<double>& w, const Tensor<double>& b, const conv2d_options& o,
                    Tensor<double>& y, Tensor<double>& mag) {
  const index_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  const index_t oc = w.shape()[0], cg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3], og = oc / o.groups;
  const index_t ho = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const index_t wo = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  y = Tensor<double>(Shape{n, oc, ho, wo});
  mag = Tensor<double>(Shape{n, oc, ho, wo});
  (void)c;
  for (index_t in = 0; in < n; ++in)
    for (index_t f = 0; f < oc; ++f)
      for (index_t oh = 0; oh < ho; ++oh)
        for (index_t ow = 0; ow < wo; ++ow) {
          double s = b(f), m = std::abs(b(f));
          const index_t g = f / og;
          for (index_t ci = 0; ci < cg; ++ci)
            for (index_t i = 0; i < kh; ++i)
              for (index_t j = 0; j < kw; ++j) {
                const index_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const index_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const double t = x(in, g * cg + ci, ih, iw) * w(f, ci, i, j);
                s += t;
                m += std::abs(t);
              }
          y(in, f, oh, ow) = s;
          mag(in, f, oh, ow) = m;
        }
}

template <class P>
void expect_conv_matches(const conv2d_options& o, const Shape& xs, const Shape& ws, unsigned seed) {
  using S = typename P::param_type;
  // the operands rounded to the policy's storage, so both sides multiply the same numbers
  auto rounded = [](Tensor<double> t) {
    for (auto& v : t) v = detail::load<double>(detail::load<default_compute_t<S>>(detail::store<S>(detail::load<default_compute_t<S>>(v))));
    return t;
  };
  const auto x = rounded(uniform(xs, -1, 1, seed)), w = rounded(uniform(ws, -1, 1, seed + 1)),
             b = rounded(uniform({ws[0]}, -1, 1, seed + 2));
  Tensor<double> ref, mag;
  conv_reference(x, w, b, o, ref, mag);
  const auto y = conv2d<P>(astype<S>(x), astype<S>(w), astype<S>(b), o);
  ASSERT_EQ(y.shape(), ref.shape());
  // accumulation of K + 1 terms in the accumulator, then one rounding to the output storage
  using T = pol::op_types<P, op::conv2d, S, S, S>;
  const double k = static_cast<double>(ws[1] * ws[2] * ws[3] + 1);
  const double tol_acc = bounds::gamma(k, unit_roundoff<typename T::accumulator>());
  const double u_out = unit_roundoff<typename T::output>();
  for (index_t i = 0; i < y.size(); ++i) {
    const double got = detail::load<double>(detail::load<default_compute_t<typename T::output>>(y.data()[i]));
    const double bound = tol_acc * mag.data()[i] + u_out * (std::abs(ref.data()[i]) + tol_acc * mag.data()[i]);
    ASSERT_LE(std::abs(got - ref.data()[i]), bound) << "element " << i << " under " << P::name();
  }
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

TEST(OpLayerReference, Conv2dMatchesDefinition) {
  const std::vector<std::tuple<conv2d_options, Shape, Shape>> cases{
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {2, 3, 6, 5}, {4, 3, 3, 3}},
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 1, 7, 7}, {5, 1, 3, 3}},
      {{{2, 3}, {2, 1}, {1, 1}, 1}, {1, 2, 9, 8}, {3, 2, 4, 3}},
      {{{1, 2}, {1, 0}, {2, 1}, 3}, {2, 6, 7, 7}, {6, 2, 3, 2}},
      {{{1, 1}, {0, 0}, {1, 1}, 4}, {1, 4, 3, 3}, {8, 1, 2, 2}},  // depthwise, channel multiplier 2
      {{{1, 1}, {2, 1}, {1, 1}, 1}, {2, 2, 4, 6}, {3, 2, 5, 3}},  // same width, taps past every edge
      // 259200 column elements an image: batches of 2 images and 1 (im2col's buffer holds 2^19)
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 2, 120, 120}, {3, 2, 3, 3}},
  };
  unsigned seed = 100;
  for (const auto& [o, xs, ws] : cases) {
    expect_conv_matches<pol::true_<double>>(o, xs, ws, seed);
    expect_conv_matches<pol::true_<float>>(o, xs, ws, seed);
    expect_conv_matches<pol::named<"bf16-mixed">>(o, xs, ws, seed);
    expect_conv_matches<pol::named<"16-mixed">>(o, xs, ws, seed);
    seed += 10;
  }
}

/// conv2d's forward with an fp32 accumulator, written out: per output, the chain of fp32 FMAs
/// over its taps in k order (channel, kernel row, kernel column) from +0, a tap over padding
/// multiplying +0, then the bias added in fp32 and one rounding to the storage. The direct kernel
/// computes exactly this, and so does the columns' GEMM (K within one block, fp32 lanes).
template <class S>
Tensor<S> conv_fma_chain(const Tensor<S>& x, const Tensor<S>& w, const Tensor<S>& b, const conv2d_options& o, const Shape& ys) {
  Tensor<S> y(ys);
  const index_t og = w.shape()[0] / o.groups, cg = w.shape()[1];
  for (index_t n = 0; n < ys[0]; ++n)
    for (index_t f = 0; f < ys[1]; ++f)
      for (index_t oh = 0; oh < ys[2]; ++oh)
        for (index_t ow = 0; ow < ys[3]; ++ow) {
          float ab = 0.0f;
          for (index_t ci = 0; ci < cg; ++ci)
            for (index_t i = 0; i < w.shape()[2]; ++i)
              for (index_t j = 0; j < w.shape()[3]; ++j) {
                const index_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const index_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                const bool inside = ih >= 0 && ih < x.shape()[2] && iw >= 0 && iw < x.shape()[3];
                const float xv = inside ? detail::load<float>(x(n, (f / og) * cg + ci, ih, iw)) : 0.0f;
                ab = std::fma(detail::load<float>(w(f, ci, i, j)), xv, ab);
              }
          y(n, f, oh, ow) = detail::store<S>(ab + detail::load<float>(b(f)));
        }
  return y;
}

/// conv2d's forward under 32-true, bf16-mixed and 16-mixed against conv_fma_chain, bit for bit,
/// at every vector level this CPU has (AVX2, AVX-512: the direct kernel's two widths) and for
/// one thread and two: output widths that leave a partial vector, channel counts that leave a
/// partial block of 8 (or 4), padding, dilation, row stride, groups, several image batches, and
/// one infinite weight (its taps over padding give NaN, inf x 0, as the GEMM over zero-filled
/// columns does); a column stride of 2 takes the columns' GEMM, with the same bits (more taps than
/// the GEMM's K block, 256, take it too: its blocks are added one after the other, not this chain).
template <class P>
void expect_conv_forward_fma_chain() {
  using S = typename P::param_type;
  struct geometry_case {
    conv2d_options o;
    Shape xs, ws;
    bool inf_weight = false;
  };
  const std::vector<geometry_case> cases{
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 1, 28, 28}, {16, 1, 3, 3}},  // the demo CNN's first convolution
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 16, 14, 14}, {32, 16, 3, 3}, true},  // its second
      {{{2, 1}, {2, 1}, {1, 2}, 2}, {2, 4, 9, 19}, {6, 2, 3, 2}},
      {{{1, 1}, {0, 3}, {2, 1}, 1}, {1, 3, 8, 33}, {5, 3, 2, 3}, true},
      {{{1, 1}, {0, 0}, {1, 1}, 3}, {2, 3, 5, 7}, {9, 1, 1, 1}},  // depthwise 1 x 1, 3 outputs a channel
      {{{1, 2}, {1, 1}, {1, 1}, 1}, {2, 2, 6, 9}, {3, 2, 3, 3}},  // column stride 2: the GEMM
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 8, 150, 150}, {3, 8, 1, 1}},  // image batches of 2 and 1
  };
  std::vector<gemm_isa> levels;
  for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512})
    if (isa <= gemm_isa_available()) levels.push_back(isa);
  if (levels.empty()) GTEST_SKIP() << "AVX2 and FMA are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  unsigned seed = 300;
  for (const auto& [o, xs, ws, inf_weight] : cases) {
    const auto x = astype<S>(uniform(xs, -1, 1, seed)), b = astype<S>(uniform({ws[0]}, -1, 1, seed + 2));
    auto w = astype<S>(uniform(ws, -1, 1, seed + 1));
    seed += 10;
    if (inf_weight) w(1, 0, 0, 0) = detail::store<S>(std::numeric_limits<float>::infinity());
    const auto want = conv_fma_chain(x, w, b, o, conv2d<P>(x, w, b, o).shape());
    const std::string at = std::string(P::name()) + ", x " + xs.str() + ", w " + ws.str();
    for (gemm_isa isa : levels) {
      const gemm_isa before = limit_gemm_isa(isa);
      for (int threads : {1, 2}) {
#if defined(_OPENMP)
        const int before_threads = omp_get_max_threads();
        omp_set_num_threads(threads);
#endif
        const auto y = conv2d<P>(x, w, b, o);
#if defined(_OPENMP)
        omp_set_num_threads(before_threads);
#endif
        for (index_t i = 0; i < y.size(); ++i) {
          const float got = detail::load<float>(y.data()[i]), ref = detail::load<float>(want.data()[i]);
          if (std::isnan(ref)) {
            ASSERT_TRUE(std::isnan(got)) << "element " << i << " (" << at << ", " << to_string(isa) << ", " << threads << " threads)";
            continue;
          }
          ASSERT_EQ(std::memcmp(&y.data()[i], &want.data()[i], sizeof(S)), 0)
              << "element " << i << ": " << got << " against the chain's " << ref << " (" << at << ", " << to_string(isa) << ", "
              << threads << " threads)";
        }
      }
      limit_gemm_isa(before);
    }
    if (inf_weight) {  // the infinite weight's taps over padding did give NaN
      const auto y = conv2d<P>(x, w, b, o);
      ASSERT_TRUE(std::isnan(detail::load<float>(y(0, 1, 0, 0)))) << at;
    }
  }
  // the cases meant for the direct kernel take it, the others the GEMM, and the last one several batches
  const auto geometry = [](const geometry_case& c) { return op::conv2d::geometry_of(c.o, c.xs, c.ws); };
  EXPECT_TRUE(op::conv_detail::direct_applies(geometry(cases[0]), 1, 16));
  EXPECT_FALSE(op::conv_detail::direct_applies(geometry(cases[5]), 1, 16));
  EXPECT_FALSE(op::conv_detail::direct_applies(geometry({{{1, 1}, {1, 1}, {1, 1}, 1}, {1, 32, 5, 6}, {4, 32, 3, 3}}), 1, 16));
  const auto last = geometry(cases.back());
  EXPECT_LT(op::conv_detail::direct_images_per_batch(last, op::conv_detail::direct_layout(last, 16), 3, true), last.n);
}

TEST(OpLayerReference, Conv2dForwardIsTheFmaChain32True) { expect_conv_forward_fma_chain<pol::named<"32-true">>(); }
TEST(OpLayerReference, Conv2dForwardIsTheFmaChainBf16Mixed) { expect_conv_forward_fma_chain<pol::named<"bf16-mixed">>(); }
TEST(OpLayerReference, Conv2dForwardIsTheFmaChain16Mixed) { expect_conv_forward_fma_chain<pol::named<"16-mixed">>(); }

/// conv2d's gradients under 64-true and 32-true against the adjoint of the definition (dx, dw,
/// db of sum(y * c)), each a plain sum of products evaluated in double from the values the tape
/// sees; geometries that take every im2col / col2im path (strided, dilated, grouped, and "same"
/// unit-stride sweeps with taps off every edge) and, in fp32, the weight gradient read straight
/// from the output gradient (tiles of 3 x 3 entries: channel counts that leave partial tiles,
/// planes that leave a tail of positions past a multiple of 8). Each entry's error is bounded by
/// gamma(n) times the sum of its terms' magnitudes, n the number of terms (any summation order).
template <class S>
void expect_conv_gradients_match_adjoint() {
  struct geometry_case {
    conv2d_options o;
    Shape xs, ws;
  };
  const std::vector<geometry_case> cases{
      {{{2, 1}, {1, 1}, {1, 2}, 2}, {2, 4, 6, 5}, {4, 2, 3, 2}},
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 3, 7, 6}, {4, 3, 3, 3}},  // same size out: contiguous rows
      {{{1, 1}, {2, 2}, {2, 2}, 1}, {1, 2, 5, 5}, {3, 2, 3, 3}},  // dilated, same size
      {{{1, 1}, {2, 1}, {1, 1}, 1}, {1, 2, 4, 6}, {2, 2, 5, 3}},  // taps past both edges
      {{{1, 2}, {0, 1}, {1, 1}, 1}, {2, 2, 5, 7}, {3, 2, 2, 3}},  // horizontal stride
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 2, 5, 4}, {10, 2, 3, 3}},  // 10 channels: bias sums 8 side by side, then 2
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 1, 4, 4}, {16, 1, 3, 3}},  // 16 planes of 16 positions: no tail
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {5, 3, 7, 9}, {7, 3, 2, 2}},  // 6 x 8 = 48 positions: no tail; k = 12
      // several column batches (2 images, then 1), each recomputing its columns in the backward
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 2, 120, 120}, {3, 2, 3, 3}},
  };
  // the last case must take more than one column batch
  const auto& last = cases.back();
  ASSERT_LT(op::conv_detail::images_per_batch(last.xs[0], last.ws[1] * last.ws[2] * last.ws[3], last.xs[2] * last.xs[3]), last.xs[0]);
  unsigned seed = 200;
  const auto to_s = [](Tensor<double>& t) {  // the values the tape sees, in double
    for (auto& v : t) v = static_cast<double>(static_cast<S>(v));
  };
  for (const auto& [o, xs, ws] : cases) {
    auto x = uniform(xs, -1, 1, seed), w = uniform(ws, -1, 1, seed + 1), b = uniform({ws[0]}, -1, 1, seed + 2);
    to_s(x), to_s(w), to_s(b);
    Tensor<double> ref, mag;
    conv_reference(x, w, b, o, ref, mag);
    auto c = uniform(ref.shape(), -1, 1, seed + 3);
    to_s(c);
    seed += 10;
    using P = pol::true_<S>;
    auto xt = astype<S>(x), wt = astype<S>(w), bt = astype<S>(b);
    const auto ct = astype<S>(c);
    Tensor<S> gx(x.shape()), gw(w.shape()), gb(b.shape());
    Tape<P> t;
    const auto xv = t.param(xt.view(), gx.view());
    const auto wv = t.param(wt.view(), gw.view());
    const auto bv = t.param(bt.view(), gb.view());
    t.backward(sum(mul(conv2d(xv, wv, bv, o), t.input(ct))));
    // the adjoint and, beside each entry, the sum of its terms' magnitudes
    Tensor<double> rx(x.shape()), rw(w.shape()), rb(b.shape()), ax(x.shape()), aw(w.shape()), ab(b.shape());
    const index_t og = ws[0] / o.groups, cg = ws[1];
    for (index_t n = 0; n < xs[0]; ++n)
      for (index_t f = 0; f < ws[0]; ++f)
        for (index_t oh = 0; oh < ref.shape()[2]; ++oh)
          for (index_t ow = 0; ow < ref.shape()[3]; ++ow) {
            const double g = c(n, f, oh, ow);
            rb(f) += g;
            ab(f) += std::abs(g);
            for (index_t ci = 0; ci < cg; ++ci)
              for (index_t i = 0; i < ws[2]; ++i)
                for (index_t j = 0; j < ws[3]; ++j) {
                  const index_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                  const index_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                  if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                  const index_t ch = (f / og) * cg + ci;
                  rx(n, ch, ih, iw) += g * w(f, ci, i, j);
                  ax(n, ch, ih, iw) += std::abs(g * w(f, ci, i, j));
                  rw(f, ci, i, j) += g * x(n, ch, ih, iw);
                  aw(f, ci, i, j) += std::abs(g * x(n, ch, ih, iw));
                }
          }
    // dw and db: one term per image and output position; dx: one per output channel of its
    // group and tap; and one rounding more into the gradient's storage
    const auto terms = static_cast<double>(std::max(xs[0] * ref.shape()[2] * ref.shape()[3], og * ws[2] * ws[3]));
    const double gam = bounds::gamma(terms + 1, unit_roundoff<S>());
    const std::string at = " (" + std::string(P::name()) + ", case x " + xs.str() + ", w " + ws.str() + ")";
    for (index_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gx.data()[i], rx.data()[i], gam * ax.data()[i]) << "dx " << i << at;
    for (index_t i = 0; i < w.size(); ++i) ASSERT_NEAR(gw.data()[i], rw.data()[i], gam * aw.data()[i]) << "dw " << i << at;
    for (index_t i = 0; i < b.size(); ++i) ASSERT_NEAR(gb.data()[i], rb.data()[i], gam * ab.data()[i]) << "db " << i << at;
  }
}

TEST(OpLayerReference, Conv2dGradientsMatchAdjoint) {
  expect_conv_gradients_match_adjoint<double>();
  expect_conv_gradients_match_adjoint<float>();
}

/// conv_detail::weight_grad_direct (the fp32 weight gradient read in place) for fp32, bf16 and
/// fp16 operands against sums in double: partial tiles of both levels in both directions (the
/// AVX2 tiles are 3 x 3 entries, the AVX-512 ones 8 x 6), planes with and without a tail past a
/// multiple of 8, several images; gw starts non-zero and alpha scales. The same bits for one
/// thread and two, and with the AVX2 and the AVX-512 tiles.
template <class S>
void expect_weight_grad_direct() {
  if (!op::conv_detail::weight_grad_direct_available()) GTEST_SKIP() << "AVX2 and FMA are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& [og, oc, k, count, p] :
       std::vector<std::array<index_t, 5>>{{5, 6, 7, 3, 13}, {5, 5, 7, 2, 16}, {1, 2, 1, 1, 3}, {16, 16, 9, 4, 49}, {7, 9, 6, 2, 21},
                                          {19, 20, 13, 2, 27}, {8, 8, 12, 3, 24}}) {
    std::vector<S> g(static_cast<std::size_t>(count * oc * p)), col(static_cast<std::size_t>(k * count * p));
    for (auto& v : g) v = static_cast<S>(u(rng));
    for (auto& v : col) v = static_cast<S>(u(rng));
    std::vector<float> gw0(static_cast<std::size_t>(og * k));
    for (auto& v : gw0) v = u(rng);
    const float alpha = 0.5f;
    auto run = [&](int threads) {
      std::vector<float> gw = gw0, part(static_cast<std::size_t>(op::conv_detail::weight_grad_part_size(og, k)));
      const index_t tail = op::conv_detail::weight_grad_tail_len(count, p);
      std::vector<S> tg(static_cast<std::size_t>(og * tail + 1)), tc(static_cast<std::size_t>(k * tail + 1));
#if defined(_OPENMP)
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
#else
      (void)threads;
#endif
      op::conv_detail::weight_grad_direct(g.data(), oc * p, og, col.data(), k, count, p, alpha, gw.data(), part.data(), tg.data(), tc.data());
#if defined(_OPENMP)
      omp_set_num_threads(before);
#endif
      return gw;
    };
    const auto gw = run(1);
    EXPECT_EQ(run(2), gw) << "og " << og << ", k " << k << ", p " << p;
    // the AVX-512 tiles (8 x 6 entries) add the AVX2 tiles' (3 x 3) products in their order
    for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512}) {
      if (isa > gemm_isa_available()) continue;
      const gemm_isa before = limit_gemm_isa(isa);
      EXPECT_EQ(run(1), gw) << to_string(isa) << ", og " << og << ", k " << k << ", p " << p;
      EXPECT_EQ(run(2), gw) << to_string(isa) << ", 2 threads, og " << og << ", k " << k << ", p " << p;
      limit_gemm_isa(before);
    }
    const double gam = bounds::gamma(static_cast<double>(count * p + 2), unit_roundoff<float>());
    for (index_t o = 0; o < og; ++o)
      for (index_t t = 0; t < k; ++t) {
        double s = 0, a = 0;
        for (index_t b = 0; b < count; ++b)
          for (index_t q = 0; q < p; ++q) {
            const double v = static_cast<double>(static_cast<float>(g[static_cast<std::size_t>(b * oc * p + o * p + q)])) *
                             static_cast<double>(static_cast<float>(col[static_cast<std::size_t>(t * count * p + b * p + q)]));
            s += v;
            a += std::abs(v);
          }
        const double ref = gw0[static_cast<std::size_t>(o * k + t)] + alpha * s;
        const double tol = gam * (std::abs(gw0[static_cast<std::size_t>(o * k + t)]) + alpha * a);
        ASSERT_NEAR(gw[static_cast<std::size_t>(o * k + t)], ref, tol) << "o " << o << ", t " << t << ", og " << og << ", k " << k << ", p " << p;
      }
  }
}

/// conv2d's backward on padded planes (unit strides, no columns), for fp32, bf16 and fp16
/// operands: padding on neither, one or both axes, dilation, groups, rows that are and are not a
/// whole number of vectors, several image batches.
/// - The weight gradient (pad_planes, pad_output_grads, weight_grad_taps) against sums in double,
///   gw starting non-zero and alpha scaling; the same bits for one thread and two, and with the
///   AVX2 and the AVX-512 tiles.
/// - The data gradient (the GEMM on the padded positions, then col2im_padded): the same bits as
///   the columns' path (the GEMM on the reorganised output gradient, then col2im).
/// The demo CNN's second convolution takes it, its first (one input channel) keeps its columns.
template <class S>
void expect_conv_backward_padded() {
  if (!op::conv_detail::weight_grad_direct_available()) GTEST_SKIP() << "AVX2 and FMA are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  struct geometry_case {
    conv2d_options o;
    Shape xs, ws;
    index_t nb;  // images per batch
  };
  const std::vector<geometry_case> cases{
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {5, 3, 7, 6}, {4, 3, 3, 3}, 2},
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {3, 4, 6, 9}, {7, 4, 2, 3}, 3},
      {{{1, 1}, {2, 0}, {2, 1}, 1}, {2, 3, 8, 5}, {5, 3, 3, 2}, 1},
      {{{1, 1}, {1, 2}, {1, 2}, 2}, {3, 4, 5, 7}, {6, 2, 3, 3}, 2},
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {4, 16, 14, 14}, {32, 16, 3, 3}, 3},  // the demo CNN's second convolution
  };
  std::mt19937_64 rng(78);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& [o, xs, ws, nb] : cases) {
    const auto g = op::conv2d::geometry_of(o, xs, ws);
    const index_t oc = ws[0], groups = o.groups, cg = ws[1], og = oc / groups, k = cg * ws[2] * ws[3], p = g.plane();
    ASSERT_TRUE(op::conv_detail::padded_backward_applies(g, groups, oc)) << xs.str() << " " << ws.str();
    const op::conv_detail::padded_layout d(g);
    std::vector<S> x(static_cast<std::size_t>(xs.numel())), w(static_cast<std::size_t>(ws.numel())),
        gy(static_cast<std::size_t>(xs[0] * oc * p));
    for (auto& v : x) v = static_cast<S>(u(rng));
    for (auto& v : w) v = static_cast<S>(u(rng));
    for (auto& v : gy) v = static_cast<S>(u(rng));
    std::vector<float> gw0(static_cast<std::size_t>(oc * k));
    for (auto& v : gw0) v = u(rng);
    const float alpha = 0.5f;
    std::vector<S> xp(static_cast<std::size_t>(nb * cg * d.plane)), gp(static_cast<std::size_t>(og * nb * d.len));
    auto weight_grad = [&](int threads) {
      std::vector<float> gw = gw0, part(static_cast<std::size_t>(op::conv_detail::weight_grad_part_size(og, k)));
      std::vector<index_t> roff(static_cast<std::size_t>(k));
#if defined(_OPENMP)
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
#else
      (void)threads;
#endif
      for (index_t n0 = 0; n0 < xs[0]; n0 += nb) {
        const index_t count = std::min(nb, xs[0] - n0);
        for (index_t gi = 0; gi < groups; ++gi) {
          op::conv_detail::pad_planes(g, d, x.data(), gi * cg, cg, n0, count, xp.data());
          op::conv_detail::pad_output_grads(g, d, gy.data(), gi * og, og, oc, n0, count, gp.data());
          op::conv_detail::weight_grad_taps(g, d, gp.data(), og, xp.data(), cg, count, alpha, gw.data() + gi * og * k, part.data(),
                                            roff.data());
        }
      }
#if defined(_OPENMP)
      omp_set_num_threads(before);
#endif
      return gw;
    };
    const std::string at = "x " + xs.str() + ", w " + ws.str();
    const auto gw = weight_grad(1);
    EXPECT_EQ(weight_grad(2), gw) << at;
    for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512}) {
      if (isa > gemm_isa_available()) continue;
      const gemm_isa before = limit_gemm_isa(isa);
      EXPECT_EQ(weight_grad(1), gw) << to_string(isa) << ", " << at;
      EXPECT_EQ(weight_grad(2), gw) << to_string(isa) << ", 2 threads, " << at;
      limit_gemm_isa(before);
    }
    const double gam = bounds::gamma(static_cast<double>(xs[0] * p + 2), unit_roundoff<float>());
    const auto val = [](S v) { return static_cast<double>(static_cast<float>(v)); };
    for (index_t f = 0; f < oc; ++f)
      for (index_t ci = 0; ci < cg; ++ci)
        for (index_t i = 0; i < ws[2]; ++i)
          for (index_t j = 0; j < ws[3]; ++j) {
            double sum = 0, mag = 0;
            for (index_t n = 0; n < xs[0]; ++n)
              for (index_t oh = 0; oh < g.ho; ++oh)
                for (index_t ow = 0; ow < g.wo; ++ow) {
                  const index_t ih = oh - o.padding[0] + i * o.dilation[0], iw = ow - o.padding[1] + j * o.dilation[1];
                  if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                  const index_t ch = (f / og) * cg + ci;
                  const double v = val(gy[static_cast<std::size_t>(((n * oc + f) * g.ho + oh) * g.wo + ow)]) *
                                   val(x[static_cast<std::size_t>(((n * xs[1] + ch) * xs[2] + ih) * xs[3] + iw)]);
                  sum += v;
                  mag += std::abs(v);
                }
            const auto e = static_cast<std::size_t>(((f * cg + ci) * ws[2] + i) * ws[3] + j);
            ASSERT_NEAR(gw[e], gw0[e] + alpha * sum, gam * (std::abs(gw0[e]) + alpha * mag))
                << "f " << f << ", c " << ci << ", tap " << i << " " << j << ", " << at;
          }
    // the data gradient both ways, batch by batch and group by group, into zeros
    std::vector<float> dx_cols(x.size(), 0.0f), dx_pad(x.size(), 0.0f), dcol(static_cast<std::size_t>(k * nb * p)),
        dcp(static_cast<std::size_t>(k * nb * d.len)), dxp(static_cast<std::size_t>(nb * cg * d.plane));
    std::vector<S> gm(static_cast<std::size_t>(og * nb * p));
    for (index_t n0 = 0; n0 < xs[0]; n0 += nb) {
      const index_t count = std::min(nb, xs[0] - n0);
      for (index_t gi = 0; gi < groups; ++gi) {
        const TensorView<const S> wt = TensorView<const S>(w.data() + gi * og * k, Shape{og, k}).transpose();
        for (index_t f = 0; f < og; ++f)
          for (index_t b = 0; b < count; ++b)
            std::copy_n(gy.data() + ((n0 + b) * oc + gi * og + f) * p, p, gm.data() + (f * count + b) * p);
        precis::gemm(1.0f, wt, TensorView<const S>(gm.data(), Shape{og, count * p}), 0.0f, TensorView<float>(dcol.data(), Shape{k, count * p}));
        op::conv_detail::col2im(g, dcol.data(), gi * cg, cg, n0, count, dx_cols.data());
        op::conv_detail::pad_output_grads(g, d, gy.data(), gi * og, og, oc, n0, count, gp.data());
        precis::gemm(1.0f, wt, TensorView<const S>(gp.data(), Shape{og, count * d.len}), 0.0f,
                     TensorView<float>(dcp.data(), Shape{k, count * d.len}));
        op::conv_detail::col2im_padded(g, d, dcp.data(), gi * cg, cg, n0, count, dxp.data(), dx_pad.data());
      }
    }
    for (std::size_t i = 0; i < dx_cols.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(dx_pad[i]), std::bit_cast<std::uint32_t>(dx_cols[i])) << "dx " << i << ", " << at;
  }
  // the demo CNN: conv1 (1 channel, 28 x 28, 16 filters) keeps its columns, conv2 pads
  const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
  EXPECT_FALSE(op::conv_detail::padded_backward_applies(op::conv2d::geometry_of(same, Shape{128, 1, 28, 28}, Shape{16, 1, 3, 3}), 1, 16));
  EXPECT_TRUE(op::conv_detail::padded_backward_applies(op::conv2d::geometry_of(same, Shape{128, 16, 14, 14}, Shape{32, 16, 3, 3}), 1, 32));
  // strided sweeps keep their columns
  EXPECT_FALSE(op::conv_detail::padded_backward_applies(
      op::conv2d::geometry_of({{2, 1}, {1, 1}, {1, 1}, 1}, Shape{2, 16, 14, 14}, Shape{32, 16, 3, 3}), 1, 32));
}

TEST(OpLayerReference, Conv2dBackwardPaddedFloat) { expect_conv_backward_padded<float>(); }
TEST(OpLayerReference, Conv2dBackwardPaddedBfloat16) { expect_conv_backward_padded<bfloat16>(); }
TEST(OpLayerReference, Conv2dBackwardPaddedHalf) { expect_conv_backward_padded<half>(); }

TEST(OpLayerReference, Conv2dWeightGradientDirectFloat) { expect_weight_grad_direct<float>(); }
TEST(OpLayerReference, Conv2dWeightGradientDirectBfloat16) { expect_weight_grad_direct<bfloat16>(); }
TEST(OpLayerReference, Conv2dWeightGradientDirectHalf) { expect_weight_grad_direct<half>(); }

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


/// max_pool2d's 2 x 2, stride-2 path (vectorized where the CPU allows) against the rule written
/// out here: in each window, in the order (0,0) (0,1) (1,0) (1,1), an element replaces the best
/// so far when it is larger or a NaN. Inputs drawn from {-1, -0, 0, 1, 2, NaN} make ties, signed
/// zeros and NaNs common; rows of 18 and 7 windows cover a full and a partial vector of 16 and
/// an odd width (the last column belongs to no window). The gradient of sum(y * w) lands on each
/// window's winner, so it checks the saved positions.
template <class P>
void check_max_pool_2x2(index_t w) {
  using S = typename P::param_type;
  const index_t n = 2, c = 3, h = 5, ho = h / 2, wo = w / 2;
  const float pool[] = {-1.0f, -0.0f, 0.0f, 1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  Tensor<S> x(Shape{n, c, h, w});
  std::uint32_t state = 12345;
  for (index_t i = 0; i < x.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    x.data()[i] = S(pool[(state >> 16) % 6]);
  }
  Tape<P> t;
  Tensor<S> gx(x.shape());
  const auto xv = t.param(x.view(), gx.view());
  const auto y = max_pool2d(xv, {{2, 2}, {2, 2}, {0, 0}});
  Tensor<S> wts(y.shape());
  for (index_t i = 0; i < wts.size(); ++i) wts.data()[i] = S(static_cast<float>(i % 61 + 1));
  t.backward(sum(mul(y, t.input(wts.view()))));
  std::vector<float> want_gx(static_cast<std::size_t>(x.size()), 0.0f);
  for (index_t pl = 0; pl < n * c; ++pl)
    for (index_t oh = 0; oh < ho; ++oh)
      for (index_t ow = 0; ow < wo; ++ow) {
        const index_t base = pl * h * w + 2 * oh * w + 2 * ow, o = (pl * ho + oh) * wo + ow;
        index_t best = base;
        float bv = static_cast<float>(x.data()[base]);
        for (const index_t at : {base + 1, base + w, base + w + 1}) {
          const float v = static_cast<float>(x.data()[at]);
          if (v > bv || std::isnan(v)) {
            bv = v;
            best = at;
          }
        }
        const float got = static_cast<float>(y.value().data()[o]);
        std::uint32_t gb, wb;
        std::memcpy(&gb, &got, 4);
        std::memcpy(&wb, &bv, 4);
        if (std::isnan(bv)) {
          ASSERT_TRUE(std::isnan(got)) << "window " << o << ", width " << w;
        } else {
          ASSERT_EQ(gb, wb) << "window " << o << " (plane " << pl << ", row " << oh << ", column " << ow << "), width " << w;
        }
        want_gx[static_cast<std::size_t>(best)] = static_cast<float>(wts.data()[o]);
      }
  for (index_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(static_cast<float>(gx.data()[i]), want_gx[static_cast<std::size_t>(i)]) << "input " << i << ", width " << w;
  }
}

TEST(OpLayerReference, MaxPool2x2KeepsTheFirstLargestOrTheNaN) {
  for (const index_t w : {36, 37, 14}) {
    check_max_pool_2x2<pol::named<"32-true">>(w);
    check_max_pool_2x2<pol::named<"bf16-mixed">>(w);
    check_max_pool_2x2<pol::named<"64-true">>(w);
    check_max_pool_2x2<pol::named<"bf16-true">>(w);  // 16-bit in and out: selected in place
    check_max_pool_2x2<pol::named<"16-true">>(w);
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
  const std::vector<std::int64_t> idx{0, 7};
  expect_error<invalid_argument>([&] { (void)embedding<P>(Tensor<float>(Shape{5, 2}), idx, Shape{2}); },
                                 {"precis::embedding", "index 7", "[0, 5)", "[5, 2]"});
  expect_error<shape_error>([&] { (void)batch_norm<P>(x, Tensor<float>(Shape{4}), Tensor<float>(Shape{4})); },
                            {"precis::batch_norm", "mismatched channels"});
  expect_error<shape_error>([&] { (void)bmm<P>(Tensor<float>(Shape{2, 3, 4}), Tensor<float>(Shape{3, 5, 2})); },
                            {"precis::bmm", "[2, 3, 4]", "[3, 5, 2]"});
}

}  // namespace
