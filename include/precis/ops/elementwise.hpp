// Element-wise ops of the op layer: the unary functions (neg, abs, relu, exp, log, sqrt, rsqrt,
// reciprocal, tanh, sigmoid, gelu, gelu_tanh, silu), the broadcasting binary ones (add, sub, mul,
// div, pow, maximum, minimum), dropout, where, masked_fill.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "precis/format/random.hpp"
#include "precis/ops/op.hpp"

namespace precis::op {

namespace fn_ {
template <class D>
struct add_derivative;
}  // namespace fn_

/// A unary element-wise op from a forward functor f(x) and a derivative functor d(g, x, y)
/// (= g f'(x)), both evaluated in the arithmetic type of the op's compute type.
template <class Op, policy::safety S, class Fwd, class D>
struct unary_def : def<S> {
  static constexpr bool context_only = true;
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  using attrs = typename def<S>::attrs;
  template <class T>
  using saved = typename def<S>::template saved<T>;

  static Shape shape(const attrs&, const Shape& x) { return x; }

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    ctx.template map_into<typename T::arithmetic>(detail::ad::name_of<Op>(), y, Fwd{}, x);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>&, const TensorView<const G>& gy,
                       const TensorView<const O>& y, const std::tuple<TensorView<const X>>& x,
                       const std::tuple<TensorView<GX>>& gx) {
    const auto& g = std::get<0>(gx);
    if (g.data() == nullptr) return;
    if (ctx.take_fresh(g)) {
      ctx.template map_into<typename T::arithmetic>(detail::ad::name_of<Op>(), g, D{}, gy, std::get<0>(x), y);
    } else {
      ctx.template map_into<typename T::arithmetic>(detail::ad::name_of<Op>(), g, fn_::add_derivative<D>{}, g.as_const(), gy,
                                       std::get<0>(x), y);
    }
  }
};

/// A binary element-wise op with NumPy broadcasting, from a forward functor f(a, b) and the
/// derivative functors da(g, a, b, y) = g df/da and db(g, a, b, y) = g df/db, evaluated in the
/// op's arithmetic type. A broadcast operand's gradient is summed over the broadcast axes in
/// the accumulator.
template <class Op, policy::safety S, class Fwd, class DA, class DB>
struct binary_def : def<S> {
  static constexpr bool context_only = true;
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  using attrs = typename def<S>::attrs;
  template <class T>
  using saved = typename def<S>::template saved<T>;

  static Shape shape(const attrs&, const Shape& a, const Shape& b) {
    return broadcast_shapes(a, b, detail::ad::name_of<Op>());
  }

  template <class T, class Ctx, class O, class A, class B>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>&, const TensorView<const A>& a,
                      const TensorView<const B>& b) {
    ctx.template map_into<typename T::arithmetic>(detail::ad::name_of<Op>(), y, Fwd{}, a, b);
  }
  template <class T, class Ctx, class G, class O, class A, class B, class GA, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>&, const TensorView<const G>& gy,
                       const TensorView<const O>& y, const std::tuple<TensorView<const A>, TensorView<const B>>& x,
                       const std::tuple<TensorView<GA>, TensorView<GB>>& gx) {
    using R = typename T::arithmetic;
    using Acc = typename T::accumulator;
    const char* name = detail::ad::name_of<Op>();
    const auto& a = std::get<0>(x);
    const auto& b = std::get<1>(x);
    const auto one = [&](const auto& g, auto d) {
      if (g.data() == nullptr) return;
      if (g.shape() == gy.shape()) {
        if constexpr (requires { requires decltype(d)::passes_gradient; }) {
          ctx.template add_into<R>(name, g, gy);  // no operand read (a copy of gy when g is fresh)
        } else {
          ctx.template accumulate<R>(name, g, d, gy, a, b, y);
        }
        return;
      }
      const auto full = ctx.template temp<Acc>(gy.shape());
      ctx.template map_into<R>(name, full, d, gy, a, b, y);
      const auto red = ctx.template temp<Acc>(g.shape());
      ctx.sum_to_shape(red, full.as_const());
      ctx.template add_into<R>(name, g, red.as_const());
    };
    one(std::get<0>(gx), DA{});
    one(std::get<1>(gx), DB{});
  }
};

namespace fn_ {
// derivative functors: (g, x, y) for unary ops, (g, a, b, y) for binary ones
struct d_neg { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T&) const { return -g; } };
struct d_abs {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T&) const {
    return x > T(0) ? g : (x < T(0) ? T(-g) : T(0));
  }
};
struct d_relu {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T&) const { return x > T(0) ? g : T(0); }
  /// The same on float arrays as a select the compiler vectorizes: both loads unconditional
  /// (the generic loop, inside add_derivative, compiled to a branch per element that the signs
  /// of x mispredict, and a conditional load of g keeps GCC from vectorizing).
  static void bulk(float* o, const float* g, const float* x, const float*, index_t n) {
    for (index_t i = 0; i < n; ++i) {
      const float gi = g[i], xi = x[i];
      o[i] = xi > 0.0f ? gi : 0.0f;
    }
  }
};
struct d_exp { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& y) const { return g * y; } };
struct d_log { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T&) const { return g / x; } };
struct d_sqrt { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& y) const { return g / (T(2) * y); } };
struct d_rsqrt { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& y) const { return T(-0.5) * g * y * y * y; } };
struct d_reciprocal { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& y) const { return -g * y * y; } };
struct d_tanh { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& y) const { return g * (T(1) - y * y); } };
struct d_sigmoid { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& y) const { return g * y * (T(1) - y); } };
/// d/dx x Phi(x) = Phi(x) + x phi(x).
struct d_gelu {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T&) const {
    using std::acos;
    using std::erf;
    using std::exp;
    using std::sqrt;
    const T cdf = T(0.5) * (T(1) + T(erf(x / sqrt(T(2)))));
    const T pdf = exp(T(-0.5) * x * x) / sqrt(T(2) * T(acos(T(-1))));  // pi in T's own precision
    return g * (cdf + x * pdf);
  }
};
struct reciprocal { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { return T(1) / a; } };

struct d_add_a {
  static constexpr bool passes_gradient = true;  // the derivative is g itself
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T&, const T&) const {
    return g;
  }
};
struct d_sub_b { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T&, const T&) const { return -g; } };
struct d_mul_a { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& b, const T&) const { return g * b; } };
struct d_mul_b { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& a, const T&, const T&) const { return g * a; } };
struct d_div_a { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& b, const T&) const { return g / b; } };
struct d_div_b { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T& b, const T& y) const { return -g * y / b; } };
/// d/da a^b = b a^(b-1).
struct d_pow_a {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& a, const T& b, const T&) const {
    using std::pow;
    return b == T(0) ? T(0) : T(g * b * pow(a, T(b - T(1))));
  }
};
/// d/db a^b = a^b log a, taken as 0 where a == 0 and b >= 0 (as PyTorch does).
struct d_pow_b {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& a, const T& b, const T& y) const {
    using std::log;
    return (a == T(0) && b >= T(0)) ? T(0) : T(g * y * log(a));
  }
};
/// maximum/minimum: the gradient goes to the selected operand, split evenly on ties.
struct d_pick_a {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& a, const T& b, const T& y) const {
    return a == b ? T(g / T(2)) : (a == y ? g : T(0));
  }
};
struct d_pick_b {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& a, const T& b, const T& y) const {
    return a == b ? T(g / T(2)) : (b == y ? g : T(0));
  }
};

/// where: a where c != 0, else b.
struct select {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& c, const T& a, const T& b) const { return c != T(0) ? a : b; }
};
/// where's gradient to its first (first = true) or second operand: g where the condition picked it.
struct pick_grad {
  bool first;
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& c, const T& g) const { return (c != T(0)) == first ? g : T(0); }
};
/// masked_fill: v where m != 0, else x.
template <class R>
struct fill_masked {
  R v;
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& x, const T& m) const { return m != T(0) ? T(v) : x; }
};
/// masked_fill's gradient: g where the mask is 0.
struct d_masked {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& m) const { return m != T(0) ? T(0) : g; }
};

/// x sigmoid(x).
struct silu {
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& x) const {
    using std::exp;
    return x / (T(1) + exp(-x));
  }
};
/// d/dx x s(x) = s (1 + x (1 - s)).
struct d_silu {
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T&) const {
    using std::exp;
    const T s = T(1) / (T(1) + exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
};
/// sqrt(2 / pi) in T's own precision.
template <class T>
PRECIS_HOST_DEVICE T sqrt_2_over_pi() {
  using std::acos;
  using std::sqrt;
  return sqrt(T(2) / T(acos(T(-1))));
}
/// tanh of n floats through the vectorized exp: 1 - 2 / (e^(2u) + 1), within a few ulp of 1 in
/// absolute terms (e^(2u) = inf gives 1, 0 gives -1). out may equal u.
inline void tanh_floats(float* out, const float* u, index_t n) {
  for (index_t i = 0; i < n; ++i) out[i] = 2.0f * u[i];
  detail::exp_floats(out, out, n);
  for (index_t i = 0; i < n; ++i) out[i] = 1.0f - 2.0f / (out[i] + 1.0f);
}
/// f(t, i) over blocks of n floats, t[j] = tanh(sqrt(2/pi) (x + 0.044715 x^3)) of x[i].
template <class F>
void with_gelu_tanh(const float* x, index_t n, F f) {
  const float c = sqrt_2_over_pi<float>();
  std::array<float, detail::chunk> t;
  for (index_t i0 = 0; i0 < n; i0 += detail::chunk) {
    const index_t m = std::min(detail::chunk, n - i0);
    for (index_t j = 0; j < m; ++j) {
      const float v = x[i0 + j];
      t[static_cast<std::size_t>(j)] = c * (v + 0.044715f * v * v * v);
    }
    tanh_floats(t.data(), t.data(), m);
    for (index_t j = 0; j < m; ++j) f(t[static_cast<std::size_t>(j)], i0 + j);
  }
}
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel's tanh approximation);
/// float arrays take the vectorized tanh.
struct gelu_tanh {
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& x) const {
    using std::tanh;
    return T(0.5) * x * (T(1) + T(tanh(sqrt_2_over_pi<T>() * (x + T(0.044715) * x * x * x))));
  }
  static void bulk(float* o, const float* x, index_t n) {
    with_gelu_tanh(x, n, [&](float t, index_t i) { o[i] = 0.5f * x[i] * (1.0f + t); });
  }
};
struct d_gelu_tanh {
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T&) const {
    using std::tanh;
    const T c = sqrt_2_over_pi<T>();
    const T t = tanh(c * (x + T(0.044715) * x * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * T(0.044715) * x * x));
  }
  static void bulk(float* o, const float* g, const float* x, const float*, index_t n) {
    const float c = sqrt_2_over_pi<float>();
    with_gelu_tanh(x, n, [&](float t, index_t i) {
      const float v = x[i];
      o[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * v * v));
    });
  }
};
/// acc + d(g, x, y), with d's vectorized kernel on float arrays when it has one.
template <class D>
struct add_derivative {
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& acc, const T& g, const T& x, const T& y) const {
    return T(acc + D{}(g, x, y));
  }
  static void bulk(float* o, const float* acc, const float* g, const float* x, const float* y, index_t n)
    requires requires(float* p, const float* q) { D::bulk(p, q, q, q, n); }
  {
    std::array<float, detail::chunk> d;
    for (index_t i0 = 0; i0 < n; i0 += detail::chunk) {
      const index_t m = std::min(detail::chunk, n - i0);
      D::bulk(d.data(), g + i0, x + i0, y + i0, m);
      for (index_t j = 0; j < m; ++j) o[i0 + j] = acc[i0 + j] + d[static_cast<std::size_t>(j)];
    }
  }
};
}  // namespace fn_

// ---- needs wide: overflow thresholds and underflow ---------------------------------------------
struct exp : unary_def<exp, policy::safety::needs_wide, fn::exp, fn_::d_exp> {
  static constexpr std::string_view name = "exp";
  static constexpr std::string_view reason =
      "overflows fp16 for x > 11.09 (e^11.09 = 65504) and flushes to 0 for x < -17.33 (half of 2^-24)";
};
struct log : unary_def<log, policy::safety::needs_wide, fn::log, fn_::d_log> {
  static constexpr std::string_view name = "log";
  static constexpr std::string_view reason =
      "log(1 + d) is about d: near x = 1 an fp16 input keeps only its rounding error; the derivative 1/x "
      "overflows fp16 for |x| < 1/65504";
};
struct pow : binary_def<pow, policy::safety::needs_wide, fn::pow, fn_::d_pow_a, fn_::d_pow_b> {
  static constexpr std::string_view name = "pow";
  static constexpr std::string_view reason = "x^y leaves fp16's range for modest arguments (2^16 > 65504, 10^5 > 65504)";
};
struct reciprocal : unary_def<reciprocal, policy::safety::needs_wide, fn_::reciprocal, fn_::d_reciprocal> {
  static constexpr std::string_view name = "reciprocal";
  static constexpr std::string_view reason =
      "1/x overflows fp16 for |x| < 2^-16, which are ordinary fp16 values (the normal range starts at 2^-14 "
      "and subnormals reach 2^-24)";
};
struct rsqrt : unary_def<rsqrt, policy::safety::needs_wide, fn::rsqrt, fn_::d_rsqrt> {
  static constexpr std::string_view name = "rsqrt";
  static constexpr std::string_view reason =
      "applied to variances (+ eps): the usual eps = 1e-5 is below fp16's smallest normal 2^-14 and keeps "
      "only 4 significant bits there";
};

// ---- promote: one rounding in the widest input type ------------------------------------------
struct add : binary_def<add, policy::safety::promote, fn::add, fn_::d_add_a, fn_::d_add_a> {
  static constexpr std::array<bool, 2> shares_gradient{true, true};  // d(a + b)/da = d(a + b)/db = 1
  static constexpr std::string_view name = "add";
  static constexpr std::string_view reason =
      "one rounding of two values; mixed inputs promote so neither is narrowed (range: the inputs' own)";
};
struct sub : binary_def<sub, policy::safety::promote, fn::sub, fn_::d_add_a, fn_::d_sub_b> {
  static constexpr std::array<bool, 2> shares_gradient{true, false};
  static constexpr std::string_view name = "sub";
  static constexpr std::string_view reason = "as add";
};
struct mul : binary_def<mul, policy::safety::promote, fn::mul, fn_::d_mul_a, fn_::d_mul_b> {
  static constexpr std::string_view name = "mul";
  static constexpr std::string_view reason = "one rounding of a product; mixed inputs promote";
};
struct div : binary_def<div, policy::safety::promote, fn::div, fn_::d_div_a, fn_::d_div_b> {
  static constexpr std::string_view name = "div";
  static constexpr std::string_view reason = "one rounding of a quotient; mixed inputs promote";
};
struct maximum : binary_def<maximum, policy::safety::promote, fn::max, fn_::d_pick_a, fn_::d_pick_b> {
  static constexpr std::string_view name = "maximum";
  static constexpr std::string_view reason = "element-wise max of two tensors: exact selection in the widest input type";
};
struct minimum : binary_def<minimum, policy::safety::promote, fn::min, fn_::d_pick_a, fn_::d_pick_b> {
  static constexpr std::string_view name = "minimum";
  static constexpr std::string_view reason = "as maximum";
};

// ---- neutral: exact, or bounded so no overflow ------------------------------------------------
struct neg : unary_def<neg, policy::safety::neutral, fn::neg, fn_::d_neg> {
  static constexpr std::string_view name = "neg";
  static constexpr std::string_view reason = "exact in any format";
};
struct abs : unary_def<abs, policy::safety::neutral, fn::abs, fn_::d_abs> {
  static constexpr std::string_view name = "abs";
  static constexpr std::string_view reason = "exact in any format";
};
struct relu : unary_def<relu, policy::safety::neutral, fn::relu, fn_::d_relu> {
  static constexpr std::string_view name = "relu";
  static constexpr std::string_view reason = "max(x, 0): exact";
};
struct sqrt : unary_def<sqrt, policy::safety::neutral, fn::sqrt, fn_::d_sqrt> {
  static constexpr std::string_view name = "sqrt";
  static constexpr std::string_view reason = "halves the exponent: cannot overflow or underflow; one rounding";
};
struct tanh : unary_def<tanh, policy::safety::neutral, fn::tanh, fn_::d_tanh> {
  static constexpr std::string_view name = "tanh";
  static constexpr std::string_view reason = "bounded by 1: no overflow; one rounding";
};
struct sigmoid : unary_def<sigmoid, policy::safety::neutral, fn::sigmoid, fn_::d_sigmoid> {
  static constexpr std::string_view name = "sigmoid";
  static constexpr std::string_view reason = "bounded in [0, 1]: no overflow; one rounding";
};
struct gelu : unary_def<gelu, policy::safety::neutral, fn::gelu, fn_::d_gelu> {
  static constexpr std::string_view name = "gelu";
  static constexpr std::string_view reason = "|gelu(x)| <= |x|: no overflow beyond the input's; one rounding";
};
struct silu : unary_def<silu, policy::safety::neutral, fn_::silu, fn_::d_silu> {
  static constexpr std::string_view name = "silu";
  static constexpr std::string_view reason = "x sigmoid(x): |silu(x)| <= |x|, no overflow beyond the input's; one rounding";
};
struct gelu_tanh : unary_def<gelu_tanh, policy::safety::neutral, fn_::gelu_tanh, fn_::d_gelu_tanh> {
  static constexpr std::string_view name = "gelu_tanh";
  static constexpr std::string_view reason =
      "the tanh approximation of GELU: |gelu(x)| <= |x|, no overflow beyond the input's; one rounding";
};

/// Inverted dropout: each element is kept with probability 1 - p and scaled by 1 / (1 - p), or
/// zeroed. Element i of a call keeps iff the Philox4x32-10 draw keyed by (seed) at counter
/// (i, offset) is >= p 2^32: the same mask for any thread count, and the backward recomputes it
/// instead of saving it. Pass a new offset (e.g. the step number) every step.
struct dropout : def<policy::safety::promote> {
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "dropout";
  static constexpr std::string_view reason =
      "multiplies by 0 or 1/(1-p): one rounding in the input type; |y| <= |x|/(1-p)";
  struct attrs {
    double p = 0.5;
    std::uint64_t seed = 0;
    std::uint64_t offset = 0;
    bool training = true;
  };
  template <class T>
  struct saved {};

  /// Whether element i (its row-major position) is kept: Philox4x32-10 of (i, offset) under the
  /// seed, its first word compared with p 2^32 (the same mask on every backend and thread count).
  PRECIS_HOST_DEVICE static bool keeps(double p, std::uint64_t seed, std::uint64_t offset, index_t i) {
    const auto u = static_cast<std::uint64_t>(i);
    const auto r = philox4x32_10(static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(u >> 32), static_cast<std::uint32_t>(offset),
                                 static_cast<std::uint32_t>(offset >> 32), static_cast<std::uint32_t>(seed),
                                 static_cast<std::uint32_t>(seed >> 32));
    return static_cast<double>(r.v[0]) >= p * 4294967296.0;
  }
  static bool keeps(const attrs& a, index_t i) { return keeps(a.p, a.seed, a.offset, i); }

  static Shape shape(const attrs& a, const Shape& x) {
    if (!(a.p >= 0 && a.p < 1)) {
      throw invalid_argument("precis::dropout: p = " + std::to_string(a.p) + " for an input of shape " + x.str() +
                             "; expected 0 <= p < 1");
    }
    return x;
  }

  /// (i, o, v) -> v m_i (Grad: o + v m_i) with m_i = 0 or 1/(1-p), i the element's row-major
  /// position (its identity for the mask); a host-device functor for ctx.map_indexed.
  template <class A, bool Grad>
  struct apply {
    double p;
    std::uint64_t seed, offset;
    bool training;
    A scale;
    PRECIS_HOST_DEVICE A operator()(index_t i, const A& o, const A& v) const {
      const A m = (!training || keeps(p, seed, offset, i)) ? scale : A(0);
      if constexpr (Grad) return A(o + v * m);
      else return A(v * m);
    }
  };
  template <class A, bool Grad>
  static apply<A, Grad> applying(const attrs& a) {
    return {a.p, a.seed, a.offset, a.training, a.training ? A(A(1) / A(1 - a.p)) : A(1)};
  }

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    using A = typename T::arithmetic;
    ctx.template map_indexed<A>(y, applying<A, false>(a), x);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    using A = typename T::arithmetic;
    ctx.template map_indexed<A>(std::get<0>(gx), applying<A, true>(a), gy);
  }
};

/// where(cond, a, b): a where cond != 0, else b, with broadcasting. cond is a constant (no
/// gradient reaches it); the gradient goes to the selected operand.
struct where : def<policy::safety::promote> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "where";
  static constexpr std::string_view reason = "selects between two tensors: exact in the widest input type";
  template <class P, class SC, class SA, class SB>
  using types_for = policy::op_types<P, where, SA, SB>;

  static Shape shape(const attrs&, const Shape& c, const Shape& a, const Shape& b) {
    const Shape ab = broadcast_shapes(a, b, "precis::where");
    Shape out = ab;
    try {
      out = broadcast_shapes(c, ab, "precis::where");
    } catch (const shape_error&) {
      out = Shape{-1};
    }
    if (!(out == ab)) {
      throw shape_error("precis::where: condition " + c.str() + " for operands " + a.str() + " and " + b.str() +
                        "; expected a condition that broadcasts to " + ab.str());
    }
    return ab;
  }
  template <class T, class Ctx, class O, class C, class A, class B>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>&, const TensorView<const C>& c,
                      const TensorView<const A>& a, const TensorView<const B>& b) {
    ctx.template map_into<typename T::arithmetic>("precis::where", y, fn_::select{}, c, a, b);
  }
  template <class T, class Ctx, class G, class O, class C, class A, class B, class GC, class GA, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const C>, TensorView<const A>, TensorView<const B>>& x,
                       const std::tuple<TensorView<GC>, TensorView<GA>, TensorView<GB>>& gx) {
    using R = typename T::arithmetic;
    const auto& c = std::get<0>(x);
    const auto pick = [&](const auto& g, bool first) {
      if (g.data() == nullptr) return;
      const auto full = ctx.template temp<R>(gy.shape());
      ctx.template map_into<R>("precis::where", full, fn_::pick_grad{first}, c, gy);
      const auto red = ctx.template temp<R>(g.shape());
      ctx.sum_to_shape(red, full.as_const());
      ctx.template add_into<R>("precis::where", g, red.as_const());
    };
    pick(std::get<1>(gx), true);
    pick(std::get<2>(gx), false);
  }
};

/// masked_fill(x, mask, value): value where mask != 0, x elsewhere; mask broadcasts to x's
/// shape and is a constant. Attention's masks are built with it.
struct masked_fill : def<policy::safety::neutral> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "masked_fill";
  static constexpr std::string_view reason = "writes a constant (rounded once) or copies: no arithmetic";
  struct attrs {
    double value = 0;
  };
  template <class P, class SX, class SM>
  using types_for = policy::op_types<P, masked_fill, SX>;

  static Shape shape(const attrs&, const Shape& x, const Shape& m) {
    bool ok = m.rank() <= x.rank();
    for (int i = 0; ok && i < m.rank(); ++i) {
      const index_t e = m[m.rank() - 1 - i];
      ok = e == 1 || e == x[x.rank() - 1 - i];
    }
    if (!ok) {
      throw shape_error("precis::masked_fill: mask " + m.str() + " for an input of shape " + x.str() +
                        "; expected a mask that broadcasts to the input's shape");
    }
    return x;
  }
  template <class T, class Ctx, class O, class X, class M>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x,
                      const TensorView<const M>& m) {
    using R = typename T::arithmetic;
    ctx.template map_into<R>("precis::masked_fill", y, fn_::fill_masked<R>{detail::load<R>(a.value)}, x, m);
  }
  template <class T, class Ctx, class G, class O, class X, class M, class GX, class GM>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>, TensorView<const M>>& x,
                       const std::tuple<TensorView<GX>, TensorView<GM>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    using R = typename T::arithmetic;
    ctx.template accumulate<R>("precis::masked_fill", std::get<0>(gx), fn_::d_masked{}, gy, std::get<1>(x));
  }
};

}  // namespace precis::op

namespace precis {

// ---- front ends: Var arguments record on their tape; ops<P> (ops/eager.hpp) calls them eagerly

template <class P, class S>
auto neg(const Var<P, S>& x) { return record<op::neg>({}, x); }
template <class P, class S>
auto abs(const Var<P, S>& x) { return record<op::abs>({}, x); }
template <class P, class S>
auto relu(const Var<P, S>& x) { return record<op::relu>({}, x); }
template <class P, class S>
auto exp(const Var<P, S>& x) { return record<op::exp>({}, x); }
template <class P, class S>
auto log(const Var<P, S>& x) { return record<op::log>({}, x); }
template <class P, class S>
auto sqrt(const Var<P, S>& x) { return record<op::sqrt>({}, x); }
template <class P, class S>
auto rsqrt(const Var<P, S>& x) { return record<op::rsqrt>({}, x); }
template <class P, class S>
auto reciprocal(const Var<P, S>& x) { return record<op::reciprocal>({}, x); }
template <class P, class S>
auto tanh(const Var<P, S>& x) { return record<op::tanh>({}, x); }
template <class P, class S>
auto sigmoid(const Var<P, S>& x) { return record<op::sigmoid>({}, x); }
/// The exact GELU, x Phi(x).
template <class P, class S>
auto gelu(const Var<P, S>& x) { return record<op::gelu>({}, x); }

/// Element-wise with NumPy broadcasting; the gradient of a broadcast operand is summed over the
/// broadcast axes in the op's accumulator.
template <class P, class SA, class SB>
auto add(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::add>({}, a, b); }
template <class P, class SA, class SB>
auto sub(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::sub>({}, a, b); }
template <class P, class SA, class SB>
auto mul(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::mul>({}, a, b); }
template <class P, class SA, class SB>
auto div(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::div>({}, a, b); }
template <class P, class SA, class SB>
auto pow(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::pow>({}, a, b); }
template <class P, class SA, class SB>
auto maximum(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::maximum>({}, a, b); }
template <class P, class SA, class SB>
auto minimum(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::minimum>({}, a, b); }

template <class P, class SA, class SB>
auto operator+(const Var<P, SA>& a, const Var<P, SB>& b) { return add(a, b); }
template <class P, class SA, class SB>
auto operator-(const Var<P, SA>& a, const Var<P, SB>& b) { return sub(a, b); }
template <class P, class SA, class SB>
auto operator*(const Var<P, SA>& a, const Var<P, SB>& b) { return mul(a, b); }
template <class P, class SA, class SB>
auto operator/(const Var<P, SA>& a, const Var<P, SB>& b) { return div(a, b); }
template <class P, class S>
auto operator-(const Var<P, S>& a) { return neg(a); }

/// x sigmoid(x) (SiLU, swish).
template <class P, class S>
auto silu(const Var<P, S>& x) { return record<op::silu>({}, x); }
template <class P, tensor_like X>
auto silu(const X& x) { return evaluate<P, op::silu>({}, x); }

/// GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class P, class S>
auto gelu_tanh(const Var<P, S>& x) { return record<op::gelu_tanh>({}, x); }
template <class P, tensor_like X>
auto gelu_tanh(const X& x) { return evaluate<P, op::gelu_tanh>({}, x); }

using dropout_options = op::dropout::attrs;
/// Inverted dropout with a counter-based mask (op::dropout); identity when !o.training.
template <class P, class S>
auto dropout(const Var<P, S>& x, const dropout_options& o) { return record<op::dropout>(o, x); }
template <class P, tensor_like X>
auto dropout(const X& x, const dropout_options& o) { return evaluate<P, op::dropout>(o, x); }

/// a where cond != 0, else b (broadcasting); cond receives no gradient.
template <class P, class SC, class SA, class SB>
auto where(const Var<P, SC>& cond, const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::where>({}, cond, a, b); }

/// value where mask != 0, else x; the mask broadcasts to x and receives no gradient.
template <class P, class S, class SM>
auto masked_fill(const Var<P, S>& x, const Var<P, SM>& mask, double value) {
  return record<op::masked_fill>({value}, x, mask);
}
template <class P, tensor_like X, tensor_like M>
auto masked_fill(const X& x, const M& mask, double value) { return evaluate<P, op::masked_fill>({value}, x, mask); }

}  // namespace precis
