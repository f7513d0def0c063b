// fp8-mixed on the tape: the GEMM ops cast their operands with per-tensor scales. Every result
// is checked against exact (double) arithmetic on the stored inputs, within a bound built from
// the formats' unit roundoffs: each cast of v with scale s returns v (1 + d) + e, |d| <= u,
// |e| <= (half the smallest subnormal) / s, and s >= fp8_max / amax / 2 for any scale the
// recipes choose from amax; fp8 products are exact in fp32; the fp32 sums add gamma_(K+3)(2^-24)
// (K products, the bias, the division by the scales); a bf16-stored result adds 2^-8.
// Magnitudes are chosen so that unscaled casts would saturate (|x| up to 3000 > 448) or flush
// (gradients near 1e-4, below e5m2's normal range after a 1e-4 weight): the bounds fail there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <precis/nn/nn.hpp>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>

using namespace precis;
namespace pol = precis::policy;

namespace {

using PF8 = pol::named<"fp8-mixed">;
using PDelayed = pol::fp8_mixed_with<fp8::delayed_scaling>;
using PUnscaled = pol::fp8_mixed_with<fp8::no_scaling>;

/// How a GEMM operand is cast: unit roundoff and absolute subnormal error for the tensor's amax.
struct cast_error {
  double u = 0, e = 0;
  template <class F8>
  static cast_error of(double amax) {
    const double max = format_traits<F8>::max_finite();
    const double h = format_traits<F8>::min_subnormal() / 2;
    return {format_traits<F8>::unit_roundoff(), amax > 0 ? h * 2 * amax / max : 0};
  }
};

/// sum_k a_k b_k in double with the bound on |computed - exact| when a and b are cast as given
/// and the products summed in fp32 (see the file comment).
struct dot_bound {
  double exact = 0, abs_sum = 0, cast_err = 0, extra = 0;
  int k = 0;
  void add(double a, double b, const cast_error& ca, const cast_error& cb) {
    exact += a * b;
    const double da = ca.u * std::fabs(a) + ca.e, db = cb.u * std::fabs(b) + cb.e;
    cast_err += da * std::fabs(b) + std::fabs(a) * db + da * db;
    abs_sum += (std::fabs(a) + da) * (std::fabs(b) + db);
    ++k;
  }
  void add_exact(double v) {  // a bias term, added in fp32
    exact += v;
    extra += std::fabs(v);
  }
  double bound(double stored_u = 0) const {
    const double u32 = std::ldexp(1.0, -24), g = (k + 3) * u32 / (1 - (k + 3) * u32);
    const double b = cast_err + g * (abs_sum + extra);
    return b + stored_u * (std::fabs(exact) + b);
  }
};

double amax_of(const auto& t) {
  double m = 0;
  for (const auto& v : t) m = std::max(m, std::fabs(static_cast<double>(static_cast<float>(v))));
  return m;
}

template <class T>
double at(const T& v) {
  return static_cast<double>(static_cast<float>(v));
}

}  // namespace

// The case that motivates scaling: a [1, 2] of 1000s times b [2, 1] of ones is 2000, and the
// weight gradient under sum() is 1000. Unscaled, e4m3 saturates at 448 (448 + 448 = 896).
TEST(Fp8Mixed, MatmulOfThousandsIsScaled) {
  const auto run = []<class P>(int steps) {
    Tape<P> t;
    Tensor<bfloat16> a(Shape{1, 2}), b(Shape{2, 1}), ga(Shape{1, 2}), gb(Shape{2, 1});
    std::fill(a.begin(), a.end(), bfloat16(1000.0f));
    std::fill(b.begin(), b.end(), bfloat16(1.0f));
    std::vector<double> out;
    for (int s = 0; s < steps; ++s) {
      t.reset();
      std::fill(gb.begin(), gb.end(), bfloat16(0.0f));
      auto y = matmul(t.param(a.view(), ga.view()), t.param(b.view(), gb.view()));
      t.backward(sum(y));
      out = {y.item(), at(gb(0, 0)), at(gb(1, 0))};
    }
    return out;
  };
  const double u4 = std::ldexp(1.0, -4), u5 = std::ldexp(1.0, -3), u32 = std::ldexp(1.0, -24);
  const auto within = [&](const std::vector<double>& r) {
    EXPECT_LE(std::fabs(r[0] - 2000), 2000 * (2 * u4 + u4 * u4 + 5 * u32)) << r[0];
    for (std::size_t i = 1; i < 3; ++i) EXPECT_LE(std::fabs(r[i] - 1000), 1000 * (u4 + u5 + u4 * u5 + 5 * u32) + 1000 * std::ldexp(1.0, -8)) << r[i];
  };
  within(run.operator()<PF8>(1));  // current scaling: the first step is scaled
  // delayed scaling starts from scale 1 (Transformer Engine's initial state): the first step
  // saturates, the second uses the first step's amax
  const auto d1 = run.operator()<PDelayed>(1);
  EXPECT_EQ(d1[0], 896.0);
  within(run.operator()<PDelayed>(2));
  EXPECT_EQ(run.operator()<PUnscaled>(1)[0], 896.0);
  // the eager front end scales from the tensors (an eager call has no history)
  Tensor<float> af(Shape{1, 2}), bf(Shape{2, 1});
  std::fill(af.begin(), af.end(), 1000.0f);
  std::fill(bf.begin(), bf.end(), 1.0f);
  EXPECT_LE(std::fabs(static_cast<double>(ops<PDelayed>::matmul(af, bf)(0, 0)) - 2000), 2000 * (2 * u4 + u4 * u4 + 5 * u32));
}

TEST(Fp8Mixed, LinearForwardAndGradientsWithinTheCastBound) {
  Tensor<float> x(Shape{8, 16}), c(Shape{8, 5});
  fill_uniform(x, -3000, 3000, 1);
  fill_uniform(c, -2e-4, 2e-4, 2);
  Tensor<bfloat16> w(Shape{5, 16}), b(Shape{5}), gw(Shape{5, 16}), gb(Shape{5});
  Tensor<float> wf(Shape{5, 16}), bf(Shape{5});
  fill_uniform(wf, -0.01, 0.01, 3);
  fill_uniform(bf, -5, 5, 4);
  for (index_t i = 0; i < wf.size(); ++i) w.data()[i] = bfloat16(wf.data()[i]);
  for (index_t i = 0; i < bf.size(); ++i) b.data()[i] = bfloat16(bf.data()[i]);
  std::fill(gw.begin(), gw.end(), bfloat16(0.0f));
  std::fill(gb.begin(), gb.end(), bfloat16(0.0f));

  Tape<PF8> t;
  auto xv = t.input(x, true);
  auto y = linear(xv, t.param(w.view(), gw.view()), t.param(b.view(), gb.view()));
  static_assert(std::is_same_v<decltype(y), Var<PF8, float>>, "fp8 GEMMs return fp32");
  t.backward(sum(mul(y, t.input(c))));

  const auto e4x = cast_error::of<float8_e4m3>(amax_of(x)), e4w = cast_error::of<float8_e4m3>(amax_of(w)),
             e5c = cast_error::of<float8_e5m2>(amax_of(c));
  const double ubf = std::ldexp(1.0, -8);
  for (index_t i = 0; i < 8; ++i) {
    for (index_t j = 0; j < 5; ++j) {
      dot_bound d;
      for (index_t k = 0; k < 16; ++k) d.add(x(i, k), at(w(j, k)), e4x, e4w);
      d.add_exact(at(b(j)));
      EXPECT_LE(std::fabs(static_cast<double>(y.value()(i, j)) - d.exact), d.bound()) << "y " << i << "," << j;
    }
    for (index_t k = 0; k < 16; ++k) {
      dot_bound d;
      for (index_t j = 0; j < 5; ++j) d.add(c(i, j), at(w(j, k)), e5c, e4w);
      EXPECT_LE(std::fabs(static_cast<double>(xv.grad()(i, k)) - d.exact), d.bound()) << "gx " << i << "," << k;
    }
  }
  for (index_t j = 0; j < 5; ++j) {
    for (index_t k = 0; k < 16; ++k) {
      dot_bound d;
      for (index_t i = 0; i < 8; ++i) d.add(c(i, j), x(i, k), e5c, e4x);
      EXPECT_LE(std::fabs(at(gw(j, k)) - d.exact), d.bound(ubf)) << "gw " << j << "," << k;
    }
    dot_bound d;  // the bias gradient: sums of the unscaled fp32 gradient
    for (index_t i = 0; i < 8; ++i) d.add(c(i, j), 1.0, {}, {});
    EXPECT_LE(std::fabs(at(gb(j)) - d.exact), d.bound(ubf)) << "gb " << j;
  }
  // one entry, three scaled tensors, each cast once, nothing saturated or flushed
  ASSERT_EQ(t.fp8().size(), 1u);
  EXPECT_EQ(t.fp8()[0].op, "linear");
  const auto tot = t.fp8().totals();
  EXPECT_EQ(tot.casts, 3u);
  EXPECT_EQ(tot.count, std::size_t{8 * 16 + 5 * 16 + 8 * 5});
  EXPECT_EQ(tot.saturated, 0u);
}

TEST(Fp8Mixed, Conv2dForwardAndGradientsWithinTheCastBound) {
  const index_t n = 2, ci = 3, co = 4, h = 5, wd = 6;
  Tensor<float> x(Shape{n, ci, h, wd}), c(Shape{n, co, h, wd});
  fill_uniform(x, -3000, 3000, 5);
  fill_uniform(c, -2e-4, 2e-4, 6);
  Tensor<bfloat16> w(Shape{co, ci, 3, 3}), gw(Shape{co, ci, 3, 3});
  Tensor<float> wf(Shape{co, ci, 3, 3});
  fill_uniform(wf, -0.01, 0.01, 7);
  for (index_t i = 0; i < wf.size(); ++i) w.data()[i] = bfloat16(wf.data()[i]);
  std::fill(gw.begin(), gw.end(), bfloat16(0.0f));

  Tape<PF8> t;
  auto xv = t.input(x, true);
  const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
  auto y = conv2d(xv, t.param(w.view(), gw.view()), same);
  t.backward(sum(mul(y, t.input(c))));

  const auto e4x = cast_error::of<float8_e4m3>(amax_of(x)), e4w = cast_error::of<float8_e4m3>(amax_of(w)),
             e5c = cast_error::of<float8_e5m2>(amax_of(c));
  // direct convolution in double: every (output, input, tap) triple
  std::vector<dot_bound> yb(static_cast<std::size_t>(n * co * h * wd)), gxb(static_cast<std::size_t>(n * ci * h * wd)),
      gwb(static_cast<std::size_t>(co * ci * 9));
  for (index_t b = 0; b < n; ++b)
    for (index_t o = 0; o < co; ++o)
      for (index_t r = 0; r < h; ++r)
        for (index_t q = 0; q < wd; ++q)
          for (index_t i = 0; i < ci; ++i)
            for (index_t kr = 0; kr < 3; ++kr)
              for (index_t kq = 0; kq < 3; ++kq) {
                const index_t rr = r + kr - 1, qq = q + kq - 1;
                if (rr < 0 || rr >= h || qq < 0 || qq >= wd) continue;
                const double xv0 = x(b, i, rr, qq), wv = at(w(o, i, kr, kq)), cv = c(b, o, r, q);
                yb[static_cast<std::size_t>(((b * co + o) * h + r) * wd + q)].add(xv0, wv, e4x, e4w);
                gxb[static_cast<std::size_t>(((b * ci + i) * h + rr) * wd + qq)].add(cv, wv, e5c, e4w);
                gwb[static_cast<std::size_t>(((o * ci + i) * 3 + kr) * 3 + kq)].add(cv, xv0, e5c, e4x);
              }
  for (index_t i = 0; i < y.size(); ++i) {
    EXPECT_LE(std::fabs(static_cast<double>(y.value().data()[i]) - yb[static_cast<std::size_t>(i)].exact),
              yb[static_cast<std::size_t>(i)].bound()) << "y " << i;
  }
  for (index_t i = 0; i < xv.size(); ++i) {
    EXPECT_LE(std::fabs(static_cast<double>(xv.grad().data()[i]) - gxb[static_cast<std::size_t>(i)].exact),
              gxb[static_cast<std::size_t>(i)].bound()) << "gx " << i;
  }
  for (index_t i = 0; i < gw.size(); ++i) {
    EXPECT_LE(std::fabs(at(gw.data()[i]) - gwb[static_cast<std::size_t>(i)].exact), gwb[static_cast<std::size_t>(i)].bound(std::ldexp(1.0, -8)))
        << "gw " << i;
  }
  EXPECT_EQ(t.fp8()[0].op, "conv2d");
}

// Delayed scaling through the tape: each step's amax enters the history when the op casts, and
// reset() applies Transformer Engine's update, so step s casts with the scale from steps
// s - history_len .. s - 1. History length 2, input amaxes 1000, 4000, 2000, 500 (worked by
// hand: 448 / max of the window): scales 0.448, 0.112, 0.112, 0.224 after steps 1-4.
TEST(Fp8Mixed, DelayedScalingFollowsTheHistoryAcrossSteps) {
  struct window2 : fp8::delayed_scaling {
    window2() : fp8::delayed_scaling{2, fp8::amax_reduction::max, 0} {}
  };
  using P = pol::fp8_mixed_with<window2>;
  Tape<P> t;
  Tensor<float> x(Shape{1, 2});
  Tensor<bfloat16> w(Shape{2, 1}), gw(Shape{2, 1});
  std::fill(w.begin(), w.end(), bfloat16(1.0f));
  const float amax[4] = {1000, 4000, 2000, 500};
  const float expected[4] = {448.0f / 1000, 448.0f / 4000, 448.0f / 4000, 448.0f / 2000};
  for (int s = 0; s < 4; ++s) {
    x(0, 0) = amax[s];
    x(0, 1) = -amax[s] / 2;
    auto y = matmul(t.input(x), t.param(w.view(), gw.view()));
    t.backward(sum(y));
    // step 1 casts with scale 1 (1000 and 500 > 464 saturate), step 2 with 0.448 (4000 and 2000
    // times 0.448 > 464), steps 3 and 4 with 0.112 (at most 224)
    EXPECT_EQ(t.fp8()[0].input.last().saturated, s < 2 ? 2u : 0u) << "step " << s;
    t.reset();
    EXPECT_FLOAT_EQ(t.fp8()[0].input.delayed().scale(), expected[s]) << "step " << s;
  }
  // the weight's amax was 1 every step: 448; the output gradient's 1 in e5m2: 57344
  EXPECT_FLOAT_EQ(t.fp8()[0].weight.delayed().scale(), 448.0f);
  EXPECT_FLOAT_EQ(t.fp8()[0].grad_output.delayed().scale(), 57344.0f);
  // a step that records another op at entry 0 is a different graph: named error
  Tensor<float> x4(Shape{1, 1, 2, 2});
  Tensor<bfloat16> w4(Shape{1, 1, 1, 1}), g4(Shape{1, 1, 1, 1});
  try {
    (void)conv2d(t.input(x4), t.param(w4.view(), g4.view()));
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
}

// Without scaling, casts saturate (1000 > 464, where e4m3's rounding overflows) and flush
// (1e-4 < 2^-10, half e4m3's smallest subnormal), and the telemetry says how many; with current
// scaling the same tensors cast cleanly.
TEST(Fp8Mixed, TelemetryCountsWhatUnscaledCastsLose) {
  const auto run = []<class P>(float v) {
    Tape<P> t;
    Tensor<float> x(Shape{4, 2});
    std::fill(x.begin(), x.end(), v);
    Tensor<bfloat16> w(Shape{2, 1}), gw(Shape{2, 1});
    std::fill(w.begin(), w.end(), bfloat16(1.0f));
    (void)matmul(t.input(x), t.param(w.view(), gw.view()));
    return t.fp8()[0].input.last();
  };
  const auto big = run.template operator()<PUnscaled>(1000.0f), small = run.template operator()<PUnscaled>(1e-4f);
  EXPECT_EQ(big.count, 8u);
  EXPECT_EQ(big.saturated, 8u);
  EXPECT_EQ(big.flushed, 0u);
  EXPECT_EQ(small.saturated, 0u);
  EXPECT_EQ(small.flushed, 8u);
  for (const float v : {1000.0f, 1e-4f}) {
    const auto on = run.template operator()<PF8>(v);
    EXPECT_EQ(on.saturated + on.flushed, 0u) << v;
    EXPECT_FLOAT_EQ(on.amax, v);
  }
}

namespace {

std::string temp_file(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("precis_fp8_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

template <class P>
struct fp8_task {
  nn::MLP<P> net;
  optim::MixedPrecisionOptimizer<P, optim::SGD, optim::NoLossScaler> opt;
  Tape<P> tape;
  Tensor<float> x{Shape{16, 4}};
  std::vector<std::int64_t> y = std::vector<std::int64_t>(16);

  explicit fp8_task(std::uint64_t seed) : net({4, 8, 3}, nn::activation::relu, seed), opt(net, optim::SGD{.lr = 0.1}, optim::NoLossScaler{}) {
    fill_uniform(x, -50, 50, 11);
    for (index_t i = 0; i < 16; ++i) y[static_cast<std::size_t>(i)] = (x(i, 0) > 0) + (x(i, 1) > 0);
  }
  double step(float input_scale) {
    tape.reset();
    opt.zero_grad();
    Tensor<float> xs = x;
    for (auto& v : xs) v *= input_scale;
    auto loss = cross_entropy(net(tape.input(xs)), y);
    opt.backward(tape, loss);
    opt.step();
    return loss.item();
  }
  /// Every scale and history entry of the tape's fp8 state, then the parameters.
  std::vector<double> snapshot() {
    std::vector<double> s;
    for (std::size_t k = 0; k < tape.fp8().size(); ++k) {
      const auto& g = tape.fp8()[k];
      for (const auto* d : {&g.input.delayed(), &g.weight.delayed()}) {
        s.push_back(d->scale());
        s.insert(s.end(), d->amax_history().begin(), d->amax_history().end());
      }
      s.push_back(g.grad_output.delayed().scale());
      s.insert(s.end(), g.grad_output.delayed().amax_history().begin(), g.grad_output.delayed().amax_history().end());
    }
    for (auto* p : net.parameters())
      for (auto v : p->value) s.push_back(at(v));
    return s;
  }
};

struct short_history : fp8::delayed_scaling {
  short_history() : fp8::delayed_scaling{4, fp8::amax_reduction::max, 1} {}
};

}  // namespace

TEST(Fp8Mixed, CheckpointKeepsTheScalingStateAndRejectsACorruptRecord) {
  using P = pol::fp8_mixed_with<short_history>;
  const auto path = temp_file("fp8.ckpt");
  fp8_task<P> a(1);
  const float scales[5] = {1, 3, 0.5f, 2, 1};
  for (int s = 0; s < 3; ++s) a.step(scales[s]);
  a.tape.reset();  // closes step 3: its amaxes are in the histories
  a.opt.save(path, a.tape.fp8());

  fp8_task<P> b(2);
  b.opt.load(path, b.tape.fp8());
  ASSERT_EQ(b.tape.fp8().size(), 2u);  // two linear layers
  EXPECT_EQ(b.snapshot(), a.snapshot());
  for (int s = 3; s < 5; ++s) EXPECT_EQ(b.step(scales[s]), a.step(scales[s])) << "resumed step " << s;

  // the first entry's input scale set to -1, the checksum recomputed: a well-formed file whose
  // scaling record is wrong
  auto bytes = [&] {
    std::ifstream f(path, std::ios::binary);
    return std::vector<unsigned char>{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }();
  const std::string name = "fp8/0/linear/input";
  const auto it = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(it, bytes.end());
  std::size_t at_ = static_cast<std::size_t>(it - bytes.begin()) + name.size();
  std::uint32_t len = 0, rank = 0;
  std::memcpy(&len, bytes.data() + at_, 4);
  at_ += 4 + len;
  std::memcpy(&rank, bytes.data() + at_, 4);
  at_ += 4 + 8 * rank + 8;
  const float bad = -1.0f;
  std::memcpy(bytes.data() + at_, &bad, 4);
  const std::size_t end = bytes.size() - 12;
  const std::uint32_t crc = optim::detail::crc32(bytes.data(), end);
  std::memcpy(bytes.data() + end, &crc, 4);
  const auto bad_path = temp_file("fp8_bad.ckpt");
  {
    std::ofstream f(bad_path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  b.tape.reset();
  const auto before = b.snapshot();
  try {
    b.opt.load(bad_path, b.tape.fp8());
    FAIL() << "expected checkpoint_error";
  } catch (const optim::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scale"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.snapshot(), before);

  // a checkpoint of another recipe is refused, naming both
  fp8_task<PF8> c(3);
  try {
    c.opt.load(path, c.tape.fp8());
    FAIL() << "expected checkpoint_error";
  } catch (const optim::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("current scaling"), std::string::npos) << e.what();
  }
}

// The strict form of fp8-mixed accepts its own scaled GEMMs and bf16 elsewhere (the unscaled
// cases are compile-fail tests).
TEST(Fp8Mixed, StrictPolicyAcceptsScaledGemms) {
  using PS = pol::strict<PF8>;
  Tape<PS> t;
  Tensor<float> x(Shape{2, 3});
  fill_uniform(x, -1000, 1000, 9);
  Tensor<bfloat16> w(Shape{4, 3}), gw(Shape{4, 3});
  std::fill(w.begin(), w.end(), bfloat16(0.5f));
  auto y = softmax(relu(linear(t.input(x), t.param(w.view(), gw.view()))), 1);
  t.backward(sum(y));
  EXPECT_EQ(t.fp8().size(), 1u);
  EXPECT_TRUE(std::isfinite(static_cast<double>(gw(0, 0))));
}
