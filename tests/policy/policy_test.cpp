// Precision policies: every op of every named policy resolves to the documented types; the
// fp16 overflow cases that motivate the table fail under true_<half> and succeed under
// named<"16-mixed">; run-time dispatch; user extension; strict policies accept safe code (the
// unsafe cases are compile-fail tests in tests/compile_fail).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <precis/precis.hpp>
#include <string>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

/// The classification as documented in docs/policies.md, written out independently of
/// include/precis/policy/table.hpp.
const std::map<std::string, pol::safety>& documented_classes() {
  using enum pol::safety;
  static const std::map<std::string, pol::safety> m{
      {"matmul", low_precision_safe}, {"linear", low_precision_safe},
      {"exp", needs_wide}, {"log", needs_wide}, {"pow", needs_wide}, {"reciprocal", needs_wide},
      {"rsqrt", needs_wide}, {"softmax", needs_wide}, {"log_softmax", needs_wide}, {"logsumexp", needs_wide},
      {"sum", needs_wide}, {"mean", needs_wide}, {"norm", needs_wide}, {"layer_norm", needs_wide},
      {"cross_entropy", needs_wide}, {"nll", needs_wide}, {"mse", needs_wide},
      {"add", promote}, {"sub", promote}, {"mul", promote}, {"div", promote}, {"maximum", promote},
      {"minimum", promote}, {"where", promote}, {"cat", promote},
      {"neg", neutral}, {"abs", neutral}, {"relu", neutral}, {"sqrt", neutral}, {"tanh", neutral},
      {"sigmoid", neutral}, {"gelu", neutral}, {"max", neutral}, {"min", neutral}, {"reshape", neutral},
      {"transpose", neutral}, {"slice", neutral},
      // the op layer's ops
      {"bmm", low_precision_safe}, {"conv2d", low_precision_safe}, {"attention", low_precision_safe},
      {"embedding", low_precision_safe}, {"batch_norm", needs_wide}, {"avg_pool2d", needs_wide}, {"dropout", promote},
      {"gelu_tanh", neutral}, {"silu", neutral}, {"max_pool2d", neutral}, {"masked_fill", neutral}, {"permute", neutral}};
  return m;
}

/// Expected (storage, arithmetic, accumulator, output) for an op of class c under a policy
/// whose parameters are stored as Low (element-wise arithmetic LowArith) and whose wide type is
/// High, inputs stored as Low.
template <class Low, class LowArith, class High, class T>
void expect_types(pol::safety c, const std::string& what) {
  using S = typename T::storage;
  using R = typename T::arithmetic;
  using A = typename T::accumulator;
  using O = typename T::output;
  switch (c) {
    case pol::safety::low_precision_safe:
      EXPECT_TRUE((std::is_same_v<S, Low> && std::is_same_v<R, LowArith> && std::is_same_v<A, High> &&
                   std::is_same_v<O, Low>)) << what;
      break;
    case pol::safety::needs_wide:  // High is at least fp32 or the policy's own type: its own arithmetic
      EXPECT_TRUE((std::is_same_v<S, High> && std::is_same_v<R, default_compute_t<High>> && std::is_same_v<A, High> &&
                   std::is_same_v<O, High>)) << what;
      break;
    default:  // promote, neutral: no sum in the forward; the backward's broadcast sums in LowArith
      EXPECT_TRUE((std::is_same_v<S, Low> && std::is_same_v<R, LowArith> && std::is_same_v<A, LowArith> &&
                   std::is_same_v<O, Low>)) << what;
  }
}

template <class P, class Low, class LowArith, class High>
void expect_policy() {
  int seen = 0;
  op::all::for_each([&]<class Op>() {
    const std::string name(Op::name);
    ASSERT_TRUE(documented_classes().count(name)) << name << " is not documented";
    EXPECT_EQ(Op::safety_class, documented_classes().at(name)) << name;
    using T = pol::op_types<P, Op, Low>;
    if constexpr (T::scaled) {  // fp8 policies' GEMM ops: scaled e4m3 operands, e5m2 gradient, fp32 out
      EXPECT_TRUE(name == "matmul" || name == "linear" || name == "conv2d") << name;
      EXPECT_TRUE((std::is_same_v<typename T::storage, float8_e4m3> && std::is_same_v<typename T::grad_operand, float8_e5m2> &&
                   std::is_same_v<typename T::accumulator, float> && std::is_same_v<typename T::output, float>)) << name;
    } else {
      expect_types<Low, LowArith, High, T>(documented_classes().at(name), P::name() + " " + name);
    }
    ++seen;
  });
  EXPECT_EQ(seen, static_cast<int>(documented_classes().size()));
}

}  // namespace

TEST(Policy, NamedPoliciesResolveEveryOpToTheDocumentedTypes) {
  // policy, storage of parameters, their arithmetic, the wide type
  expect_policy<pol::named<"16-mixed">, half, float, float>();
  expect_policy<pol::named<"bf16-mixed">, bfloat16, float, float>();
  expect_policy<pol::named<"fp8-mixed">, bfloat16, float, float>();  // bf16-mixed but the scaled fp8 GEMMs
  expect_policy<pol::named<"16-true">, half, float, half>();
  expect_policy<pol::named<"bf16-true">, bfloat16, float, bfloat16>();
  expect_policy<pol::named<"32-true">, float, float, float>();
  expect_policy<pol::named<"64-true">, double, double, double>();
}

TEST(Policy, NamesAliasesAndTrainingTypes) {
  static_assert(std::is_same_v<pol::named<"16">, pol::mixed<half, float>>);
  static_assert(std::is_same_v<pol::named<"bf16">, pol::mixed<bfloat16>>);
  static_assert(std::is_same_v<pol::named<"32">, pol::true_<float>>);
  static_assert(std::is_same_v<pol::named<"64">, pol::true_<double>>);
  // each named policy's name() is its canonical string
  pol::dispatch("16", []<class P>() { EXPECT_EQ(P::name(), "16-mixed"); });
  EXPECT_EQ((pol::mixed<half, double>::name()), "16-mixed<fp64>");
  EXPECT_EQ(pol::strict<pol::true_<bfloat16>>::name(), "strict<bf16-true>");
  // loss scaling by default only where the low type lacks fp32's exponent range
  EXPECT_TRUE(pol::named<"16-mixed">::needs_loss_scaling);
  EXPECT_FALSE(pol::named<"bf16-mixed">::needs_loss_scaling);
  EXPECT_FALSE(pol::named<"fp8-mixed">::needs_loss_scaling);  // per-tensor scales instead
  EXPECT_TRUE(pol::named<"fp8-mixed">::per_tensor_scaling);
  EXPECT_FALSE(pol::fp8_mixed_with<fp8::no_scaling>::per_tensor_scaling);
  EXPECT_EQ(pol::fp8_mixed_with<fp8::delayed_scaling>::name(), "fp8-mixed<delayed>");
  EXPECT_FALSE(pol::named<"32-true">::needs_loss_scaling);
  static_assert(std::is_same_v<pol::named<"16-mixed">::master_type, float>);
  static_assert(std::is_same_v<pol::named<"16-mixed">::param_type, half>);
  static_assert(std::is_same_v<pol::named<"fp8-mixed">::param_type, bfloat16>);  // fp8 only inside the GEMMs
  static_assert(std::is_same_v<pol::named<"fp8-mixed">::master_type, float>);
  static_assert(std::is_same_v<pol::op_types<pol::named<"fp8-mixed">, op::bmm, bfloat16>::storage, bfloat16>);
  static_assert(!pol::op_types<pol::strict<pol::named<"fp8-mixed">>, op::linear, bfloat16>::scaled ||
                std::is_same_v<pol::op_types<pol::strict<pol::named<"fp8-mixed">>, op::linear, bfloat16>::storage, float8_e4m3>);
  static_assert(std::is_same_v<pol::named<"bf16-true">::master_type, bfloat16>);
  // inputs are never narrowed by needs-wide ops, and promote ops take the widest input
  static_assert(std::is_same_v<pol::op_types<pol::named<"16-mixed">, op::exp, double>::storage, double>);
  static_assert(std::is_same_v<pol::op_types<pol::named<"16-mixed">, op::add, half, float>::storage, float>);
  static_assert(std::is_same_v<pol::op_types<pol::named<"16-mixed">, op::matmul, float, float>::storage, half>);
}

TEST(Policy, DispatchFromARuntimeName) {
  for (auto name : pol::names) EXPECT_EQ(pol::dispatch(name, []<class P>() { return P::name(); }), name);
  EXPECT_EQ(pol::dispatch("bf16", []<class P>() { return P::name(); }), "bf16-mixed");
  EXPECT_EQ(pol::dispatch("64", []<class P>() { return P::name(); }), "64-true");
  try {
    pol::dispatch("17-mixed", []<class P>() { return 0; });
    FAIL() << "an unknown name must throw";
  } catch (const invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("17-mixed"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16-mixed"), std::string::npos) << what;  // lists the valid names
  }
}

namespace {

template <class T>
Tensor<T> filled(Shape s, double v) {
  Tensor<T> t(s);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = precis::detail::store<T>(v);
  return t;
}

template <class T>
double value(const T& t, index_t i = 0) {
  return precis::detail::load<double>(as_view(t).value_at_linear(i));
}

double to_bf16(float v) { return precis::detail::load<double>(round_to<bfloat16>(v)); }

}  // namespace

TEST(Policy, Fp16OverflowCasesFailUnderTrueHalfAndNotUnder16Mixed) {
  using unsafe = precis::ops<pol::true_<half>>;
  using safe = precis::ops<pol::named<"16-mixed">>;
  // exp(12) = 162754.79 > 65504, fp16's maximum
  const auto x = filled<half>({1}, 12.0);
  EXPECT_TRUE(std::isinf(value(unsafe::exp(x))));
  const auto e = safe::exp(x);
  static_assert(std::is_same_v<storage_of<decltype(e)>, float>);
  EXPECT_NEAR(value(e), std::exp(12.0), std::exp(12.0) * 2 * format_traits<float>::unit_roundoff());
  // 4096 values of 32 sum to 131072 > 65504
  const auto v = filled<half>({4096}, 32.0);
  EXPECT_TRUE(std::isinf(value(unsafe::sum(v))));
  EXPECT_EQ(value(safe::sum(v)), 131072.0);  // exact: every partial sum is an integer below 2^24
  // softmax over a vocabulary-sized row of logits near 12: in fp16 the sum of the shifted
  // exponentials (each in [e^-1, 1]) passes 65504, so every probability comes out 0
  const index_t n = 131072;
  Tensor<half> logits({1, n});
  fill_uniform(logits, 11.5, 12.5, 7);
  const auto p_unsafe = unsafe::softmax(logits, 1);
  const auto p_safe = safe::softmax(logits, 1);
  double total_unsafe = 0, total_safe = 0, worst = 0;
  long double ref_sum = 0;
  std::vector<double> shifted(static_cast<std::size_t>(n));
  double m = -1e300;
  for (index_t i = 0; i < n; ++i) m = std::max(m, value(logits, i));
  for (index_t i = 0; i < n; ++i) ref_sum += shifted[static_cast<std::size_t>(i)] = std::exp(value(logits, i) - m);
  for (index_t i = 0; i < n; ++i) {
    total_unsafe += value(p_unsafe, i);
    total_safe += value(p_safe, i);
    const double ref = shifted[static_cast<std::size_t>(i)] / static_cast<double>(ref_sum);
    worst = std::max(worst, std::abs(value(p_safe, i) - ref) / ref);
  }
  EXPECT_EQ(total_unsafe, 0.0);
  EXPECT_NEAR(total_safe, 1.0, 1e-4);
  // fp32 softmax: the exp's error (< 2.25 u, vexp's bound), the pairwise sum's
  // gamma_{ceil log2 n} = 17u and the division's u: under 21u relative per element
  EXPECT_LT(worst, 21 * format_traits<float>::unit_roundoff());
}

TEST(Policy, OpsComputeWhatTheyName) {
  using O = ops<pol::named<"bf16-mixed">>;
  Tensor<float> x({2, 3}), w({4, 3}), b({4});
  fill_uniform(x, -1, 1, 1);
  fill_uniform(w, -1, 1, 2);
  fill_uniform(b, -1, 1, 3);
  const auto y = O::linear(x, w, b);  // inputs rounded to bf16, fp32 accumulation, bf16 output
  static_assert(std::is_same_v<storage_of<decltype(y)>, bfloat16>);
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 4; ++j) {
      double ref = static_cast<double>(b(j));
      for (index_t k = 0; k < 3; ++k)
        ref += to_bf16(x(i, k)) * to_bf16(w(j, k));
      // one bf16 rounding of an fp32 sum of 4 exact products: u_bf16 + gamma_3(u32), relative to sum |terms|
      double mag = std::abs(static_cast<double>(b(j)));
      for (index_t k = 0; k < 3; ++k) mag += std::abs(to_bf16(x(i, k)) * to_bf16(w(j, k)));
      EXPECT_LE(std::abs(value(y, i * 4 + j) - ref), (format_traits<bfloat16>::unit_roundoff() + 4 * format_traits<float>::unit_roundoff()) * mag);
    }
  // cross entropy against the definition, in fp32
  Tensor<float> logits({2, 3});
  fill_uniform(logits, -2, 2, 4);
  const std::vector<std::int64_t> labels{2, 0};
  const auto ce = ops<pol::named<"32-true">>::cross_entropy(logits, labels);
  double ref = 0;
  for (index_t i = 0; i < 2; ++i) {
    double s = 0;
    for (index_t j = 0; j < 3; ++j) s += std::exp(static_cast<double>(logits(i, j)));
    ref += (std::log(s) - static_cast<double>(logits(i, labels[static_cast<std::size_t>(i)]))) / 2;
  }
  EXPECT_NEAR(value(ce), ref, 8 * format_traits<float>::unit_roundoff() * std::abs(ref));
  EXPECT_THROW(ops<pol::named<"32-true">>::cross_entropy(logits, std::vector<std::int64_t>{2, 3}), invalid_argument);
  EXPECT_THROW(ops<pol::named<"32-true">>::cross_entropy(logits, std::vector<std::int64_t>{2}), shape_error);
  // layer norm: zero mean, unit variance per row (gamma 1, beta 0)
  Tensor<half> h({3, 64});
  fill_normal(h, 3.0, 2.0, 5);
  const auto ln = O::layer_norm(h, filled<float>({64}, 1.0), filled<float>({64}, 0.0), 0.0);
  static_assert(std::is_same_v<storage_of<decltype(ln)>, float>);
  for (index_t r = 0; r < 3; ++r) {
    double s = 0, sq = 0;
    for (index_t j = 0; j < 64; ++j) {
      s += value(ln, r * 64 + j);
      sq += value(ln, r * 64 + j) * value(ln, r * 64 + j);
    }
    EXPECT_NEAR(s / 64, 0.0, 1e-5);
    EXPECT_NEAR(sq / 64, 1.0, 1e-5);
  }
  // cat promotes: half and float into float
  const auto c = O::cat(0, filled<half>({1, 2}, 1.5), filled<float>({2, 2}, 2.25));
  static_assert(std::is_same_v<storage_of<decltype(c)>, float>);
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(value(c, 0), 1.5);
  EXPECT_EQ(value(c, 5), 2.25);
  EXPECT_THROW(O::cat(0, filled<half>({1, 2}, 1), filled<half>({1, 3}, 1)), shape_error);
  // mse in the wide type
  EXPECT_DOUBLE_EQ(value(O::mse(filled<half>({4}, 3.0), filled<half>({4}, 1.0))), 4.0);
}

namespace {

/// A user's policy, outside precis's headers: fp16-mixed, but gelu computed in fp32 too.
struct gelu_wide_policy : pol::mixed<half> {
  template <class Op>
  static constexpr pol::safety safety_of =
      std::is_same_v<Op, op::gelu> ? pol::safety::needs_wide : pol::op_safety<Op>::value;
  static std::string name() { return "fp16-mixed, gelu wide"; }
};

}  // namespace

/// ... and one entry of it changed by specialization: matmul accumulates in double.
template <class In>
struct precis::policy::op_types<gelu_wide_policy, precis::op::matmul, In, In> {
  using storage = half;
  using arithmetic = float;
  using accumulator = double;
  using output = half;
};

TEST(Policy, UserExtensionByInheritanceAndSpecialization) {
  static_assert(std::is_same_v<pol::op_types<gelu_wide_policy, op::gelu, half>::output, float>);
  static_assert(std::is_same_v<pol::op_types<gelu_wide_policy, op::relu, half>::output, half>);
  static_assert(std::is_same_v<pol::op_types<gelu_wide_policy, op::matmul, half, half>::accumulator, double>);
  const auto g = ops<gelu_wide_policy>::gelu(filled<half>({2}, 1.0));
  static_assert(std::is_same_v<storage_of<decltype(g)>, float>);
  EXPECT_NEAR(value(g), 0.8413447460685429, 1e-6);  // 1 * Phi(1)
}

TEST(Policy, StrictAcceptsSafePolicies) {
  // every op under strict 16-mixed and strict fp32 compiles and runs (the unsafe cases are in
  // tests/compile_fail)
  using S = ops<pol::strict<pol::named<"16-mixed">>>;
  const auto x = filled<half>({2, 3}, 0.5);
  EXPECT_NEAR(value(S::softmax(x, 1)), 1.0 / 3, 1e-6);
  EXPECT_EQ(value(S::sum(x)), 3.0);
  EXPECT_EQ(value(S::matmul(x, S::transpose(x))), 0.75);
  using F = ops<pol::strict<pol::true_<float>>>;
  EXPECT_EQ(value(F::mean(filled<float>({4}, 2.0))), 2.0);
}

namespace {

/// Every op of ops<P> on small inputs stored as P's parameter type: shapes and finiteness.
template <class P>
void run_every_op() {
  using O = precis::ops<P>;
  using L = typename P::param_type;
  const std::string who = P::name();
  Tensor<L> x({4, 6}), y({4, 6}), w({3, 6}), b({3}), g({6}), z({6});
  fill_uniform(x, 0.5, 1.5, 1);
  fill_uniform(y, 0.5, 1.5, 2);
  fill_uniform(w, -1, 1, 3);
  fill_uniform(b, -1, 1, 4);
  fill_uniform(g, 0.5, 1.5, 5);
  fill_uniform(z, -0.5, 0.5, 6);
  const std::vector<std::int64_t> labels{0, 5, 2, 3};
  const auto finite = [&](const auto& t, const char* op, Shape shape) {
    EXPECT_EQ(as_view(t).shape(), shape) << who << " " << op;
    for (index_t i = 0; i < as_view(t).size(); ++i)
      EXPECT_TRUE(std::isfinite(value(t, i))) << who << " " << op << " element " << i;
  };
  const Shape xs{4, 6}, rows{4}, scalar{};
  finite(O::matmul(x, O::transpose(w)), "matmul", {4, 3});
  finite(O::linear(x, w, b), "linear", {4, 3});
  finite(O::linear(x, w), "linear", {4, 3});
  finite(O::exp(x), "exp", xs);
  finite(O::log(x), "log", xs);
  finite(O::pow(x, y), "pow", xs);
  finite(O::reciprocal(x), "reciprocal", xs);
  finite(O::rsqrt(x), "rsqrt", xs);
  finite(O::softmax(x, 1), "softmax", xs);
  finite(O::log_softmax(x, 1), "log_softmax", xs);
  finite(O::logsumexp(x, 1), "logsumexp", rows);
  finite(O::sum(x), "sum", scalar);
  finite(O::sum(x, 1), "sum", rows);
  finite(O::mean(x), "mean", scalar);
  finite(O::mean(x, 1), "mean", rows);
  finite(O::norm(x), "norm", scalar);
  finite(O::norm(x, 1), "norm", rows);
  finite(O::layer_norm(x, g, z), "layer_norm", xs);
  finite(O::cross_entropy(x, labels), "cross_entropy", scalar);
  finite(O::nll(O::log_softmax(x, 1), labels), "nll", scalar);
  finite(O::mse(x, y), "mse", scalar);
  finite(O::add(x, y), "add", xs);
  finite(O::sub(x, y), "sub", xs);
  finite(O::mul(x, y), "mul", xs);
  finite(O::div(x, y), "div", xs);
  finite(O::maximum(x, y), "maximum", xs);
  finite(O::minimum(x, y), "minimum", xs);
  finite(O::where(O::sub(x, y), x, y), "where", xs);
  finite(O::cat(0, x, y), "cat", {8, 6});
  finite(O::neg(x), "neg", xs);
  finite(O::abs(x), "abs", xs);
  finite(O::relu(x), "relu", xs);
  finite(O::sqrt(x), "sqrt", xs);
  finite(O::tanh(x), "tanh", xs);
  finite(O::sigmoid(x), "sigmoid", xs);
  finite(O::gelu(x), "gelu", xs);
  finite(O::max(x, 1), "max", rows);
  finite(O::min(x, 1), "min", rows);
  finite(O::reshape(x, {6, 4}), "reshape", {6, 4});
  finite(O::slice(x, 1, 1, 3), "slice", {4, 2});
  // the output storage follows the table
  static_assert(std::is_same_v<storage_of<decltype(O::softmax(x, 1))>, typename pol::op_types<P, op::softmax, L>::output>);
  static_assert(std::is_same_v<storage_of<decltype(O::matmul(x, x))>, typename pol::op_types<P, op::matmul, L, L>::output>);
}

}  // namespace

TEST(Policy, EveryOpRunsUnderEveryNamedPolicy) {
  for (auto name : pol::names) pol::dispatch(name, []<class P>() { run_every_op<P>(); });
}

TEST(Policy, ReproducibleGemmKeepsTheIeeeKernels) {
  // 2^-64 * 2^-64 = 2^-128: an fp32 denormal, and a bf16 one. The IEEE fp32 kernels keep it;
  // the AVX512-BF16 and AMX kernels (where the CPU has them) flush it to zero. reproducible<P>
  // asks for the former on every CPU, with the same types as P. (A 1 x 300 x 1 product, the
  // other products zero: a product within the small path's limit runs the fp32 chains at
  // every level.)
  using P = pol::named<"bf16-mixed">;
  using R = pol::reproducible<P>;
  static_assert(!P::reproducible_gemm && R::reproducible_gemm);
  static_assert(std::is_same_v<pol::op_types<R, op::matmul, bfloat16, bfloat16>::accumulator,
                               pol::op_types<P, op::matmul, bfloat16, bfloat16>::accumulator>);
  static_assert(std::is_same_v<pol::op_types<R, op::matmul, bfloat16, bfloat16>::output,
                               pol::op_types<P, op::matmul, bfloat16, bfloat16>::output>);
  EXPECT_EQ(R::name(), "reproducible<bf16-mixed>");
  Tensor<bfloat16> a({1, 300}), b({300, 1});
  a(0, 0) = bfloat16(std::ldexp(1.0f, -64));
  b(0, 0) = bfloat16(std::ldexp(1.0f, -64));
  EXPECT_EQ(static_cast<float>(ops<R>::matmul(a, b)(0, 0)), std::ldexp(1.0f, -128));
  Tape<R> tape;
  auto x = tape.input(a);
  auto w = tape.input(b, true);
  EXPECT_EQ(static_cast<float>(matmul(x, w).value()(0, 0)), std::ldexp(1.0f, -128));
  const float flushed = static_cast<float>(ops<P>::matmul(a, b)(0, 0));
  if (gemm_isa_in_use() >= gemm_isa::avx512_bf16) {
    EXPECT_EQ(flushed, 0.0f);
  } else {
    EXPECT_EQ(flushed, std::ldexp(1.0f, -128));
  }
}
