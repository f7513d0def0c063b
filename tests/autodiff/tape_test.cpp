// The tape's semantics: misuse raises clear errors and leaves the tape usable; no_grad, detach,
// retain_graph, gradient accumulation into parameters; value and gradient storage types per
// policy; 16-bit activations take half the bytes; a steady-state training step performs no
// heap allocation (counted by replacing the global operator new in this binary).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <precis/nn/nn.hpp>
#include <precis/precis.hpp>
#include <vector>

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// Counting replacements of the global allocation functions (C++17 [new.delete]). GCC 12 at -O2
// and above inlines a replaced operator new and delete into one caller and then reports
// free() of operator new's pointer as mismatched (-Wmismatched-new-delete), though both sides
// are the malloc and free below.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  ++g_allocations;
  const auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (std::max<std::size_t>(n, 1) + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using namespace precis;
namespace pol = precis::policy;

namespace {

using P32 = pol::named<"32-true">;
using PBF = pol::named<"bf16-mixed">;

template <class S>
Tensor<S> filled(Shape s, double lo, double hi, std::uint64_t seed) {
  Tensor<S> t(s);
  fill_uniform(t, lo, hi, seed);
  return t;
}

template <class E, class F>
void expect_throw_containing(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing \"" << needle << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Tape, BackwardTwiceWithoutRetainThrowsAndRetainAccumulates) {
  Tape<P32> t;
  auto w = filled<float>({3}, -1, 1, 1);
  Tensor<float> g(Shape{3});
  auto x = t.param(w.view(), g.view());
  auto loss = sum(mul(x, x));
  t.backward(loss, 1.0, /*retain_graph=*/true);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.data()[i], 2 * w.data()[i]);
  t.backward(loss);  // retained: runs again, and parameter gradients accumulate
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.data()[i], 4 * w.data()[i]);
  expect_throw_containing<autodiff_error>([&] { t.backward(loss); }, "already differentiated");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.data()[i], 4 * w.data()[i]);  // untouched by the failed call
}

TEST(Tape, NonScalarNeedsASeedAndASeedGivesTheVectorJacobianProduct) {
  Tape<P32> t;
  auto w = filled<float>({2, 3}, -1, 1, 2);
  Tensor<float> g(Shape{2, 3});
  auto x = t.param(w.view(), g.view());
  auto y = mul(x, x);
  expect_throw_containing<shape_error>([&] { t.backward(y); }, "expected a single element");
  auto seed = filled<float>({2, 3}, -1, 1, 3);
  expect_throw_containing<shape_error>([&] { t.backward(y, Tensor<float>(Shape{3, 2})); }, "seed of shape [3, 2]");
  t.backward(y, seed);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g.data()[i], 2 * w.data()[i] * seed.data()[i]);
}

TEST(Tape, AReshapeThatIsItsInputsOnlyReaderSharesTheGradientBuffer) {
  // reshape's gradient is its output's in the same row-major order: where the reshape is the
  // only op reading its input, the input takes the output's gradient buffer (no copy, no
  // second buffer); where another op reads the input too, each keeps its own gradient
  auto w = filled<float>({2, 6}, -1, 1, 4);
  const auto c = filled<float>({3, 4}, -1, 1, 5);
  Tensor<float> g(Shape{2, 6});
  {  // p -> h = p * p -> reshape -> * c -> sum: h's only reader is the reshape
    Tape<P32> t;
    auto p = t.param(w.view(), g.view());
    auto h = mul(p, p);
    auto y = reshape(h, Shape{3, 4});
    t.backward(sum(mul(y, t.input(c))));
    EXPECT_EQ(h.grad().data(), y.grad().data());
    for (int i = 0; i < 12; ++i) {
      EXPECT_EQ(y.grad().data()[i], c.data()[i]);
      EXPECT_EQ(h.grad().data()[i], c.data()[i]);
      EXPECT_EQ(g.data()[i], 2 * w.data()[i] * c.data()[i]);
    }
  }
  for (const bool reader_first : {true, false}) {
    // h read by the reshape and by an op recorded before it (its gradient added after the
    // reshape's backward) or after it (before): h's gradient is the sum, y's stays y's own
    SCOPED_TRACE(reader_first ? "the other reader recorded first" : "the other reader recorded last");
    Tape<P32> t;
    std::fill(g.begin(), g.end(), 0.0f);
    auto p = t.param(w.view(), g.view());
    auto h = mul(p, p);
    Var<P32, float> other, y;
    if (reader_first) other = sum(mul(h, h));
    y = reshape(h, Shape{3, 4});
    if (!reader_first) other = sum(mul(h, h));
    t.backward(add(sum(mul(y, t.input(c))), other));
    EXPECT_NE(h.grad().data(), y.grad().data());
    for (int i = 0; i < 12; ++i) {
      const float hv = w.data()[i] * w.data()[i];
      EXPECT_EQ(y.grad().data()[i], c.data()[i]) << i;
      EXPECT_FLOAT_EQ(h.grad().data()[i], c.data()[i] + 2 * hv) << i;
    }
  }
  {  // a chain of reshapes of a strided value (the tape copies it densely): one buffer for all
    Tape<P32> t;
    auto p = t.param(w.view(), g.view());
    auto h = mul(p, p);
    auto a = reshape(transpose(h), Shape{12});
    auto b = reshape(a, Shape{4, 3});
    t.backward(sum(mul(reshape(b, Shape{3, 4}), t.input(c))));
    EXPECT_EQ(a.grad().data(), b.grad().data());
    for (int i = 0; i < 12; ++i) EXPECT_EQ(a.grad().data()[i], c.data()[i]);
    // the transpose reads h alone, but its gradient is in another order: h has a buffer of its own
    EXPECT_NE(h.grad().data(), a.grad().data());
    for (index_t r = 0; r < 2; ++r) {
      for (index_t k = 0; k < 6; ++k) EXPECT_EQ(h.grad()(r, k), c.data()[k * 2 + r]) << r << ", " << k;
    }
  }
}

TEST(Tape, AnAddThatIsItsInputsOnlyReaderSharesTheGradientBuffer) {
  // add's gradient is its output's for both inputs, sub's for its first: an input that the op
  // alone reads, with as many elements as the output, takes the output's gradient buffer; a
  // broadcast input, one read twice, or sub's second input gets a buffer of its own
  auto w = filled<float>({3, 4}, -1, 1, 6);
  auto v = filled<float>({4}, -1, 1, 7);
  const auto c = filled<float>({3, 4}, -1, 1, 8);
  Tensor<float> gw(Shape{3, 4}), gv(Shape{4});
  {
    Tape<P32> t;
    auto p = t.param(w.view(), gw.view());
    auto a = mul(p, p), b = neg(p);
    auto y = add(a, b);
    t.backward(sum(mul(y, t.input(c))));
    EXPECT_EQ(a.grad().data(), y.grad().data());
    EXPECT_EQ(b.grad().data(), y.grad().data());
    for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(gw.data()[i], c.data()[i] * (2 * w.data()[i] - 1)) << i;
  }
  {  // b broadcast along the rows (4 elements against 12): summed into its own buffer
    Tape<P32> t;
    std::fill(gw.begin(), gw.end(), 0.0f);
    auto p = t.param(w.view(), gw.view());
    auto q = t.param(v.view(), gv.view());
    auto a = mul(p, p), b = neg(q);
    auto y = add(a, b);
    t.backward(sum(mul(y, t.input(c))));
    EXPECT_EQ(a.grad().data(), y.grad().data());
    EXPECT_NE(b.grad().data(), y.grad().data());
    for (index_t j = 0; j < 4; ++j) {
      EXPECT_FLOAT_EQ(b.grad()(j), c(0, j) + c(1, j) + c(2, j)) << j;
      EXPECT_FLOAT_EQ(gv.data()[j], -(c(0, j) + c(1, j) + c(2, j))) << j;
    }
  }
  {  // a read twice by one add: its gradient is the sum of both, in its own buffer
    Tape<P32> t;
    std::fill(gw.begin(), gw.end(), 0.0f);
    auto p = t.param(w.view(), gw.view());
    auto a = mul(p, p);
    auto y = add(a, a);
    t.backward(sum(mul(y, t.input(c))));
    EXPECT_NE(a.grad().data(), y.grad().data());
    for (int i = 0; i < 12; ++i) EXPECT_EQ(a.grad().data()[i], 2 * c.data()[i]) << i;
  }
  {  // sub: the first input shares, the second gets -gy in a buffer of its own
    Tape<P32> t;
    std::fill(gw.begin(), gw.end(), 0.0f);
    auto p = t.param(w.view(), gw.view());
    auto a = mul(p, p), b = mul(p, t.input(c));
    auto y = sub(a, b);
    t.backward(sum(mul(y, t.input(c))));
    EXPECT_EQ(a.grad().data(), y.grad().data());
    EXPECT_NE(b.grad().data(), y.grad().data());
    for (int i = 0; i < 12; ++i) EXPECT_EQ(b.grad().data()[i], -c.data()[i]) << i;
  }
}

TEST(Tape, ShapeErrorsNameTheOpAndLeaveTheStepUsable) {
  Tape<P32> t;
  auto wa = filled<float>({2, 3}, -1, 1, 4);
  Tensor<float> ga(Shape{2, 3});
  auto a = t.param(wa.view(), ga.view());
  auto b = t.input(filled<float>({4, 5}, -1, 1, 5));
  auto loss = sum(a);
  const auto nodes = t.nodes();
  expect_throw_containing<shape_error>([&] { (void)matmul(a, b); }, "precis::matmul: A [2, 3] times B [4, 5]");
  expect_throw_containing<shape_error>([&] { (void)add(a, b); }, "[2, 3]");
  expect_throw_containing<shape_error>([&] { (void)linear(a, b); }, "precis::linear");
  const std::vector<std::int64_t> bad{0, 3};
  expect_throw_containing<invalid_argument>([&] { (void)cross_entropy(a, bad); }, "label 3 at row 1 is outside [0, 3)");
  const std::vector<std::int64_t> short_labels{0};
  expect_throw_containing<shape_error>([&] { (void)nll(a, short_labels); }, "1 labels for 2 rows");
  expect_throw_containing<shape_error>([&] { (void)reshape(a, Shape{4}); }, "cannot view shape [2, 3]");
  expect_throw_containing<shape_error>([&] { t.param(wa.view(), Tensor<float>(Shape{3}).view()); }, "gradient of shape [3]");
  EXPECT_EQ(t.nodes(), nodes);  // nothing recorded by the failed calls
  t.backward(loss);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ga.data()[i], 1.0f);
}

TEST(Tape, VarsFromAResetStepOrAnotherTapeAreRejected) {
  Tape<P32> t, other;
  auto x = t.input(filled<float>({3}, -1, 1, 6), true);
  auto y = other.input(filled<float>({3}, -1, 1, 7), true);
  expect_throw_containing<autodiff_error>([&] { (void)add(x, y); }, "another tape");
  t.reset();
  EXPECT_FALSE(x.valid());
  expect_throw_containing<autodiff_error>([&] { (void)exp(x); }, "since been reset");
  expect_throw_containing<autodiff_error>([&] { (void)x.value(); }, "since been reset");
  expect_throw_containing<autodiff_error>([&] { t.backward(x); }, "since been reset");
  Var<P32, float> empty;
  expect_throw_containing<autodiff_error>([&] { (void)relu(empty); }, "empty");
}

TEST(Tape, NoGradRecordsNothingAndDetachStopsGradients) {
  Tape<P32> t;
  auto w = filled<float>({4}, 0.5, 1, 8);
  Tensor<float> g(Shape{4});
  auto x = t.param(w.view(), g.view());
  {
    auto guard = t.no_grad();
    auto y = exp(x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(t.nodes(), 0u);
    expect_throw_containing<autodiff_error>([&] { t.backward(sum(y)); }, "does not depend");
  }
  EXPECT_TRUE(t.grad_enabled());
  // loss = sum(x * detach(x)): the gradient is detach(x) = x, not 2x
  auto loss = sum(mul(x, t.detach(x)));
  t.backward(loss);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g.data()[i], w.data()[i]);
  expect_throw_containing<autodiff_error>([&] { (void)t.detach(x).grad(); }, "does not require a gradient");
}

TEST(Tape, ParameterGradientsAccumulateOverMicroBatchesUntilZeroed) {
  nn::Linear<P32> layer(3, 2, 11);
  const auto x = filled<float>({4, 3}, -1, 1, 12);
  Tape<P32> t;
  for (int step = 0; step < 2; ++step) {
    t.backward(sum(layer(t.input(x))));
    t.reset();
  }
  // d sum(x W^T + b) / db = batch size per step
  for (int j = 0; j < 2; ++j) EXPECT_EQ(layer.bias()->grad.data()[j], 8.0f);
  layer.zero_grad();
  for (int j = 0; j < 2; ++j) EXPECT_EQ(layer.bias()->grad.data()[j], 0.0f);
}

/// Every layer with parameters: a convolution, batch norm, an embedding added to tokens, a
/// transformer block, one Linear applied twice (two nodes write its gradient), a head.
template <class P>
struct Zoo : nn::Module<P> {
  explicit Zoo(std::uint64_t seed) {
    conv = &this->register_module(
        "conv", std::make_unique<nn::Conv2d<P>>(2, 4, std::array<index_t, 2>{3, 3},
                                                conv2d_options{{1, 1}, {1, 1}, {1, 1}, 1}, seed));
    bn = &this->register_module("bn", std::make_unique<nn::BatchNorm2d<P>>(4));
    pos = &this->register_module("pos", std::make_unique<nn::Embedding<P>>(4, 16, seed + 1));
    block = &this->register_module("block",
                                   std::make_unique<nn::TransformerBlock<P>>(16, 2, 2, seed + 2));
    twice = &this->register_module("twice", std::make_unique<nn::Linear<P>>(16, 16, seed + 3));
    head = &this->register_module("head", std::make_unique<nn::Linear<P>>(16, 5, seed + 4));
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    Tape<P>& t = x.tape();
    const index_t b = x.shape()[0];
    const std::int64_t at[4] = {0, 1, 2, 3};
    const auto h = reshape((*bn)((*conv)(x)), Shape{b, 4, 16});
    const auto z = reshape((*block)(add(h, (*pos)(t, at, Shape{4}))), Shape{b * 4, 16});
    return (*head)((*twice)(relu((*twice)(z))));
  }
  nn::Conv2d<P>* conv;
  nn::BatchNorm2d<P>* bn;
  nn::Embedding<P>* pos;
  nn::TransformerBlock<P>* block;
  nn::Linear<P>* twice;
  nn::Linear<P>* head;
};

/// One backward of the zoo's loss on a fixed batch, into whatever the gradients hold.
template <class P>
void zoo_backward(Zoo<P>& net, Tape<P>& t) {
  const auto x = filled<float>({2, 2, 4, 4}, -1, 1, 40);
  std::vector<std::int64_t> labels(8);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 5);
  t.reset();
  t.backward(cross_entropy(net(t.input(x)), labels));
}

template <class P>
std::vector<std::vector<double>> zoo_grads(Zoo<P>& net) {
  std::vector<std::vector<double>> out;
  for (auto* p : net.parameters()) {
    out.emplace_back();
    for (index_t i = 0; i < p->grad.size(); ++i)
      out.back().push_back(static_cast<double>(p->grad.data()[i]));
  }
  return out;
}

/// zero_grad() marks the gradients as zeros, and the next backward's first write into each
/// assigns instead of adding: the same values as adding into the zeros, for every layer, a
/// parameter two nodes write, and a second backward that adds (gradient accumulation).
template <class P>
void zeroed_gradients_are_assigned_with_the_values_of_adding() {
  Zoo<P> net(30);
  Tape<P> t;
  net.zero_grad();
  for (auto* p : net.parameters()) EXPECT_TRUE(p->grad_is_zero) << p->name;
  zoo_backward(net, t);
  for (auto& [name, p] : net.named_parameters())
    EXPECT_FALSE(p->grad_is_zero) << name << ": the backward wrote it";
  const auto assigned = zoo_grads(net);
  zoo_backward(net, t);  // no zero_grad: adds (gradient accumulation)
  const auto assigned_twice = zoo_grads(net);

  net.zero_grad();
  for (auto* p : net.parameters()) p->grad_is_zero = false;  // the same zeros, added into
  zoo_backward(net, t);
  const auto added = zoo_grads(net);
  zoo_backward(net, t);
  const auto added_twice = zoo_grads(net);

  const auto named = net.named_parameters();
  ASSERT_EQ(assigned.size(), named.size());
  for (std::size_t k = 0; k < named.size(); ++k) {
    std::size_t differ = 0, differ_twice = 0, nonzero = 0;
    for (std::size_t i = 0; i < added[k].size(); ++i) {
      differ += assigned[k][i] == added[k][i] ? 0u : 1u;
      differ_twice += assigned_twice[k][i] == added_twice[k][i] ? 0u : 1u;
      nonzero += added[k][i] != 0 ? 1u : 0u;
    }
    EXPECT_EQ(differ, 0u) << named[k].first;
    EXPECT_EQ(differ_twice, 0u) << named[k].first << ": the second backward must add";
    EXPECT_GT(nonzero, 0u) << named[k].first
                           << ": a gradient that never reached the parameter tests nothing";
  }
}

TEST(Tape, ZeroedGradientsAreAssignedWithTheValuesOfAdding) {
  zeroed_gradients_are_assigned_with_the_values_of_adding<P32>();
  zeroed_gradients_are_assigned_with_the_values_of_adding<PBF>();
  zeroed_gradients_are_assigned_with_the_values_of_adding<pol::named<"16-mixed">>();
}

TEST(Tape, TheZeroMarkIsTheCallersWordAndReadAtBackward) {
  // integers throughout, so every sum is exact in any order. d sum(x w) / dw = x's column sums
  // broadcast over w's columns; the concatenation adds 3 + 3 per element through its own path
  Tensor<float> x(Shape{3, 4}), w(Shape{4, 2}), g(Shape{4, 2});
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(i % 5) - 2;
  for (index_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>(i % 3) - 1;
  const auto run = [&](bool* mark, bool through_cat) {
    Tape<P32> t;
    auto wv = t.param(w.view(), g.view(), mark);
    auto loss = sum(matmul(t.input(x), wv));
    if (through_cat) loss = add(loss, sum(mul(cat(0, {wv, wv}), t.full<float>(Shape{8, 2}, 3.0))));
    t.backward(loss);
  };
  const auto expect_grad = [&](float base, float extra) {
    for (index_t k = 0; k < 4; ++k) {
      const float col = x(0, k) + x(1, k) + x(2, k);
      for (index_t j = 0; j < 2; ++j) EXPECT_EQ(g(k, j), base + extra + col) << k << "," << j;
    }
  };
  std::fill_n(g.data(), g.size(), 100.0f);
  bool mark = true;  // wrong on purpose: the GEMM is the first to write
#ifndef NDEBUG
  // checked where NDEBUG is not defined: an error, and the gradient left as it was
  expect_throw_containing<autodiff_error>([&] { run(&mark, false); }, "grad_is_zero");
  EXPECT_FALSE(mark);
  for (index_t i = 0; i < g.size(); ++i) EXPECT_EQ(g.data()[i], 100.0f) << i;
  std::fill_n(g.data(), g.size(), 0.0f);
  mark = true;
#endif
  run(&mark, false);  // assigned: with NDEBUG the 100s are not read
  EXPECT_FALSE(mark);
  expect_grad(0, 0);
  std::fill_n(g.data(), g.size(), 100.0f);
  run(&mark, false);  // cleared by that backward: added to
  expect_grad(100, 0);
  std::fill_n(g.data(), g.size(), 100.0f);
  mark = true;  // the concatenation writes first (adding) and clears the mark: the GEMM adds too
  run(&mark, true);
  EXPECT_FALSE(mark);
  expect_grad(100, 6);
  std::fill_n(g.data(), g.size(), 100.0f);
  run(nullptr, false);  // no mark: added to
  expect_grad(100, 0);
}

TEST(Tape, ValuesAndGradientsUseThePolicysStorageTypes) {
  Tape<PBF> t;
  Tensor<bfloat16> w(Shape{3, 4}), gw(Shape{3, 4});
  auto W = t.param(w.view(), gw.view());
  auto x = t.input(filled<float>({2, 4}, -1, 1, 13));  // fp32 data
  auto h = matmul(x, transpose(W));
  static_assert(std::is_same_v<decltype(h), Var<PBF, bfloat16>>, "matmul is low-precision safe: bf16 output");
  auto p = softmax(h, 1);
  static_assert(std::is_same_v<decltype(p), Var<PBF, float>>, "softmax needs wide: fp32 output");
  auto r = relu(h);
  static_assert(std::is_same_v<decltype(r), Var<PBF, bfloat16>>, "relu is neutral: keeps bf16");
  static_assert(std::is_same_v<decltype(x.grad()), TensorView<const float>>, "an fp32 value has an fp32 gradient");
  static_assert(std::is_same_v<decltype(h.grad()), TensorView<const bfloat16>>, "bf16 activations have bf16 gradients");
  static_assert(std::is_same_v<grad_storage_t<pol::fp8_mixed, bfloat16>, bfloat16>, "fp8-mixed: bf16 activation gradients");
  t.backward(sum(mul(p, p)));
  EXPECT_EQ(h.grad().shape(), (Shape{2, 3}));
}

/// Bytes of arena an MLP forward pass takes under P, input already in P's parameter storage.
template <class P>
std::size_t forward_bytes(index_t batch) {
  nn::MLP<P> net({256, 128, 128, 10}, nn::activation::relu, 1);
  using S = typename P::param_type;
  const auto x = filled<S>({batch, 256}, -1, 1, 14);
  Tape<P> t;
  (void)net(t.input(x));
  return t.arena().bytes_in_use();
}

TEST(Tape, SixteenBitActivationsTakeHalfTheBytes) {
  const double ratio = static_cast<double>(forward_bytes<PBF>(64)) / static_cast<double>(forward_bytes<P32>(64));
  // every saved value is bf16 instead of fp32; 64-byte alignment of each block is the slack
  EXPECT_NEAR(ratio, 0.5, 0.01) << forward_bytes<PBF>(64) << " vs " << forward_bytes<P32>(64);
}

/// Heap allocations of training steps 3 and 4 (forward, backward, in-place SGD) of `net` on
/// one batch x [16, ...] with labels 0..9: forward(t, xv) returns the logits.
template <class P, class Net, class Forward>
long steady_state_allocations(Net& net, const Tensor<float>& x, Forward forward) {
  std::vector<std::int64_t> labels(static_cast<std::size_t>(x.shape()[0]));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const auto params = net.parameters();
  Tape<P> t;
  long during = 0;
  for (int step = 0; step < 5; ++step) {
    const long before = g_allocations.load();
    t.reset();
    net.zero_grad();
    auto loss = cross_entropy(forward(t, t.input(x)), labels);
    t.backward(loss);
    for (auto* p : params) {
      for (index_t i = 0; i < p->value.size(); ++i) {
        p->value.data()[i] = static_cast<typename P::param_type>(float(p->value.data()[i]) - 0.01f * float(p->grad.data()[i]));
      }
    }
    if (step >= 3) during += g_allocations.load() - before;
  }
  return during;
}

template <class P>
long steady_state_allocations() {
  nn::MLP<P> net({64, 32, 32, 10}, nn::activation::relu, 2);
  return steady_state_allocations<P>(net, filled<float>({16, 64}, -1, 1, 15), [&](Tape<P>&, const auto& x) { return net(x); });
}

/// conv2d - batch norm - relu - max pool - dropout - linear, as the demo's CNN.
template <class P>
struct small_cnn : nn::Module<P> {
  small_cnn() {
    conv = &this->register_module("conv", std::make_unique<nn::Conv2d<P>>(2, 4, std::array<index_t, 2>{3, 3},
                                                                          conv2d_options{{1, 1}, {1, 1}, {1, 1}, 1}, 3));
    bn = &this->register_module("bn", std::make_unique<nn::BatchNorm2d<P>>(4));
    drop = &this->register_module("drop", std::make_unique<nn::Dropout<P>>(0.25, 4));
    head = &this->register_module("head", std::make_unique<nn::Linear<P>>(4 * 4 * 4, 10, 5));
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    const auto h = (*drop)(max_pool2d(relu((*bn)((*conv)(x)))));
    return (*head)(reshape(h, Shape{x.shape()[0], 4 * 4 * 4}));
  }
  nn::Conv2d<P>* conv;
  nn::BatchNorm2d<P>* bn;
  nn::Dropout<P>* drop;
  nn::Linear<P>* head;
};

/// A pre-LN transformer block (attention, layer norms, GELU MLP) on 8 tokens of width 16, the
/// token mean and a linear head, as the demo's ViT.
template <class P>
struct small_transformer : nn::Module<P> {
  small_transformer() {
    block = &this->register_module("block", std::make_unique<nn::TransformerBlock<P>>(16, 2, 2, 6));
    head = &this->register_module("head", std::make_unique<nn::Linear<P>>(16, 10, 7));
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    return (*head)(mean((*block)(x, true), 1));
  }
  nn::TransformerBlock<P>* block;
  nn::Linear<P>* head;
};

template <class P>
long steady_state_allocations_cnn() {
  small_cnn<P> net;
  return steady_state_allocations<P>(net, filled<float>({16, 2, 8, 8}, -1, 1, 16), [&](Tape<P>&, const auto& x) { return net(x); });
}
template <class P>
long steady_state_allocations_transformer() {
  small_transformer<P> net;
  return steady_state_allocations<P>(net, filled<float>({16, 8, 16}, -1, 1, 17), [&](Tape<P>&, const auto& x) { return net(x); });
}

TEST(Tape, SteadyStateTrainingStepsAllocateNothing) {
  EXPECT_EQ(steady_state_allocations<P32>(), 0);
  EXPECT_EQ(steady_state_allocations<PBF>(), 0);
  EXPECT_EQ(steady_state_allocations<pol::named<"16-mixed">>(), 0);
  EXPECT_EQ(steady_state_allocations_cnn<P32>(), 0);
  EXPECT_EQ(steady_state_allocations_cnn<PBF>(), 0);
  EXPECT_EQ(steady_state_allocations_transformer<P32>(), 0);
  EXPECT_EQ(steady_state_allocations_transformer<pol::named<"16-mixed">>(), 0);
  // the counter works: a Tensor (aligned new) and a vector (plain new) are counted
  const long before = g_allocations.load();
  Tensor<float> probe(Shape{16});
  EXPECT_EQ(g_allocations.load(), before + 1);
  std::vector<std::string> names(3);
  names.emplace_back("a name longer than the small-string buffer");
  EXPECT_GE(g_allocations.load(), before + 3);
}

}  // namespace
