// Element-wise ops of the op layer: silu, gelu_tanh, dropout, where, masked_fill.
#pragma once

#include "precis/config.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "precis/format/random.hpp"
#include "precis/ops/op.hpp"

namespace precis::op {

/// A unary element-wise op from a forward functor f(x) and a derivative functor d(g, x, y)
/// (= g f'(x)), both evaluated in the arithmetic type of the op's compute type.
template <class Op, policy::safety S, class Fwd, class D>
struct unary_def : def<S> {
  using attrs = typename def<S>::attrs;
  template <class T>
  using saved = typename def<S>::template saved<T>;

  static Shape shape(const attrs&, const Shape& x) { return x; }

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx&, const attrs&, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    map_into<detail::ad::arith_t<typename T::compute>>(detail::ad::name_of<Op>(), y, Fwd{}, x);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx&, const attrs&, const saved<T>&, const TensorView<const G>& gy,
                       const TensorView<const O>& y, const std::tuple<TensorView<const X>>& x,
                       const std::tuple<TensorView<GX>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    detail::ad::accumulate<detail::ad::arith_t<typename T::compute>>(detail::ad::name_of<Op>(), std::get<0>(gx), D{}, gy,
                                                                      std::get<0>(x), y);
  }
};

namespace fn_ {
/// x sigmoid(x).
struct silu {
  template <class T>
  T operator()(const T& x) const {
    using std::exp;
    return x / (T(1) + exp(-x));
  }
};
/// d/dx x s(x) = s (1 + x (1 - s)).
struct d_silu {
  template <class T>
  T operator()(const T& g, const T& x, const T&) const {
    using std::exp;
    const T s = T(1) / (T(1) + exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
};
/// sqrt(2 / pi) in T's own precision.
template <class T>
T sqrt_2_over_pi() {
  using std::acos;
  using std::sqrt;
  return sqrt(T(2) / T(acos(T(-1))));
}
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel's tanh approximation).
struct gelu_tanh {
  template <class T>
  T operator()(const T& x) const {
    using std::tanh;
    return T(0.5) * x * (T(1) + T(tanh(sqrt_2_over_pi<T>() * (x + T(0.044715) * x * x * x))));
  }
};
struct d_gelu_tanh {
  template <class T>
  T operator()(const T& g, const T& x, const T&) const {
    using std::tanh;
    const T c = sqrt_2_over_pi<T>();
    const T t = tanh(c * (x + T(0.044715) * x * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * T(0.044715) * x * x));
  }
};
}  // namespace fn_

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

  static bool keeps(const attrs& a, index_t i) {
    const auto u = static_cast<std::uint64_t>(i);
    const auto r = philox4x32_10(static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(u >> 32),
                                 static_cast<std::uint32_t>(a.offset), static_cast<std::uint32_t>(a.offset >> 32),
                                 static_cast<std::uint32_t>(a.seed), static_cast<std::uint32_t>(a.seed >> 32));
    return static_cast<double>(r.v[0]) >= a.p * 4294967296.0;
  }

  static Shape shape(const attrs& a, const Shape& x) {
    if (!(a.p >= 0 && a.p < 1)) {
      throw invalid_argument("precis::dropout: p = " + std::to_string(a.p) + " for an input of shape " + x.str() +
                             "; expected 0 <= p < 1");
    }
    return x;
  }

  /// out[i] = f(out[i], m_i, in[i]) with m_i = 0 or 1/(1-p), over out's elements in row-major
  /// order (the element's row-major position is its identity).
  template <class A, class O, class F, class I>
  static void masked(const attrs& a, const TensorView<O>& out, F f, const TensorView<const I>& in) {
    const A scale = a.training ? A(1) / A(1 - a.p) : A(1);
    detail::strided_loop<2> loop;
    loop.shape = out.shape();
    loop.strides[0] = out.strides();
    loop.strides[1] = in.strides();
    loop.coalesce();  // merges and drops axes without changing the row-major order
    index_t i = 0;
    loop.run(0, out.size(), [&](const std::array<index_t, 2>& off, index_t count, const std::array<index_t, 2>& st) {
      for (index_t j = 0; j < count; ++j, ++i) {
        const A m = (!a.training || keeps(a, i)) ? scale : A(0);
        O& o = out.data()[off[0] + j * st[0]];
        o = detail::store<O>(f(detail::ad::ld<A>(o), m, detail::ad::ld<A>(in.data()[off[1] + j * st[1]])));
      }
    });
  }

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx&, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    using A = detail::ad::arith_t<typename T::compute>;
    masked<A>(a, y, [](const A&, const A& m, const A& v) { return A(v * m); }, x);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx&, const attrs& a, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    using A = detail::ad::arith_t<typename T::compute>;
    masked<A>(a, std::get<0>(gx), [](const A& acc, const A& m, const A& g) { return A(acc + g * m); }, gy);
  }
};

/// where(cond, a, b): a where cond != 0, else b, with broadcasting. cond is a constant (no
/// gradient reaches it); the gradient goes to the selected operand.
struct where : def<policy::safety::promote> {
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
  static void forward(const Ctx&, const attrs&, const TensorView<O>& y, saved<T>&, const TensorView<const C>& c,
                      const TensorView<const A>& a, const TensorView<const B>& b) {
    using R = detail::ad::arith_t<typename T::compute>;
    map_into<R>("precis::where", y, [](const R& cv, const R& av, const R& bv) { return cv != R(0) ? av : bv; }, c, a, b);
  }
  template <class T, class Ctx, class G, class O, class C, class A, class B, class GC, class GA, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const C>, TensorView<const A>, TensorView<const B>>& x,
                       const std::tuple<TensorView<GC>, TensorView<GA>, TensorView<GB>>& gx) {
    using R = detail::ad::arith_t<typename T::compute>;
    const auto& c = std::get<0>(x);
    const auto pick = [&](const auto& g, bool first) {
      if (g.data() == nullptr) return;
      const auto full = ctx.template temp<R>(gy.shape());
      map_into<R>("precis::where", full, [first](const R& cv, const R& gv) { return (cv != R(0)) == first ? gv : R(0); }, c, gy);
      const auto red = ctx.template temp<R>(g.shape());
      detail::ad::sum_to_shape<R>(red, full.as_const());
      op::cpu::add_into<R>("precis::where", g, red.as_const());
    };
    pick(std::get<1>(gx), true);
    pick(std::get<2>(gx), false);
  }
};

/// masked_fill(x, mask, value): value where mask != 0, x elsewhere; mask broadcasts to x's
/// shape and is a constant. Attention's masks are built with it.
struct masked_fill : def<policy::safety::neutral> {
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
  static void forward(const Ctx&, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x,
                      const TensorView<const M>& m) {
    using R = detail::ad::arith_t<typename T::compute>;
    const R v = detail::load<R>(a.value);
    map_into<R>("precis::masked_fill", y, [v](const R& xv, const R& mv) { return mv != R(0) ? v : xv; }, x, m);
  }
  template <class T, class Ctx, class G, class O, class X, class M, class GX, class GM>
  static void backward(const Ctx&, const attrs&, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>, TensorView<const M>>& x,
                       const std::tuple<TensorView<GX>, TensorView<GM>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    using R = detail::ad::arith_t<typename T::compute>;
    detail::ad::accumulate<R>("precis::masked_fill", std::get<0>(gx),
                              [](const R& g, const R& mv) { return mv != R(0) ? R(0) : g; }, gy, std::get<1>(x));
  }
};

}  // namespace precis::op

namespace precis {

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
