// Differentiable ops on precis::Var, found by argument-dependent lookup so model code reads like
// tensor code:  auto loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), labels);
//
// Each op asks the policy for its types (policy::op_types<P, op::tag, In...>):
//   compute     what the value is evaluated in (element-wise math runs in
//               default_compute_t<compute>: float for 8/16-bit formats),
//   accumulate  what its sums (reductions, matmul, the backward's reductions) accumulate in,
//   output      the storage type its value is saved in on the tape.
// Backward rules run in the same types, and each gradient contribution is added to the
// input's gradient buffer in that arithmetic and rounded once into the gradient's storage.
//
// Inputs are only ever rounded down by the low-precision-safe ops (matmul, linear), which save
// the rounded copy they multiplied with; every other op reads its inputs in place (widening is
// exact), so the tape saves each activation exactly once, in its own storage type.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numbers>
#include <span>
#include <string>

#include "precis/autodiff/tape.hpp"
#include "precis/policy/ops.hpp"

namespace precis {
namespace detail::ad {

template <class T>
using arith_t = default_compute_t<T>;

template <class P>
using node_t = typename Tape<P>::Node;

template <class P, class Op, class... S>
using types_t = policy::op_types<P, Op, S...>;

template <class P, class S>
using grad_t = grad_storage_t<P, S>;

/// "precis::exp" for op::exp: the name error messages use.
template <class Op>
const char* name_of() {
  static const std::string s = "precis::" + std::string(Op::name);
  return s.c_str();
}

/// Appends a node when the output needs a gradient.
template <class P, class S>
void record(Tape<P>& t, typename node_t<P>::backward_fn f, const Var<P, S>& out, std::array<std::uint32_t, 3> in,
            std::array<const void*, 3> aux = {}, std::array<index_t, 3> iarg = {}, double darg = 0) {
  if (out.requires_grad()) t.record(node_t<P>{f, out.id(), in, aux, iarg, darg});
  t.end_op();
}

template <class P, class A, class B>
Tape<P>& same_tape(const A& a, const B& b, const char* op) {
  Tape<P>& t = a.tape();
  t.check(a, op);
  t.check(b, op);
  return t;
}

/// x's value in storage C: the value itself when it already is C (saved = nullptr), otherwise a
/// copy rounded once to nearest in the arena (kept: the backward multiplies with it).
template <class C, class P, class S>
std::pair<TensorView<const C>, const void*> rounded_to(Tape<P>& t, const Var<P, S>& x) {
  if constexpr (std::is_same_v<C, S>) {
    return {x.value(), nullptr};
  } else {
    C* p = t.arena().template allocate_array<C>(static_cast<std::size_t>(x.size()));
    const TensorView<C> v(p, x.shape());
    Tape<P>::copy_into(x.value(), v);
    return {v, p};
  }
}

/// The view rounded_to handed out, rebuilt in the backward pass.
template <class C, class S, class P>
TensorView<const C> saved(const Tape<P>& t, const void* aux, std::uint32_t id) {
  if constexpr (std::is_same_v<C, S>) {
    return t.template value_view<const C>(id);
  } else {
    return TensorView<const C>(static_cast<const C*>(aux), t.slot(id).shape);
  }
}

/// Scratch memory for one op (rewound after the op).
template <class T, class P>
TensorView<T> scratch(Tape<P>& t, const Shape& shape) {
  return TensorView<T>(t.scratch().template allocate_array<T>(static_cast<std::size_t>(shape.numel())), shape);
}

/// gx += f(args...) element-wise, computed in A (args broadcast to gx's shape), rounded once.
template <class A, class G, class F, class... V>
void accumulate(const char* op, const TensorView<G>& gx, F f, const V&... args) {
  map_into<A>(op, gx, [f](const A& acc, const auto&... a) { return A(acc + f(a...)); }, TensorView<const G>(gx), args...);
}

/// Sums t (shape `from`, contiguous) over the axes that broadcasting added or stretched, into
/// acc (shape `to`), in T.
template <class T>
void sum_to_shape(const TensorView<T>& acc, const TensorView<const T>& t) {
  std::fill_n(acc.data(), acc.size(), T(0));
  detail::strided_loop<2> loop;
  loop.shape = t.shape();
  loop.strides[0] = TensorView<T>(acc).broadcast_to(t.shape()).strides();
  loop.strides[1] = t.strides();
  loop.coalesce();
  loop.run(0, t.size(), [&](const std::array<index_t, 2>& off, index_t count, const std::array<index_t, 2>& st) {
    for (index_t i = 0; i < count; ++i) acc.data()[off[0] + i * st[0]] += t.data()[off[1] + i * st[1]];
  });
}

/// gx += f(args...) where the args broadcast to `out` (a shape gx broadcasts to): the
/// contributions are summed over the broadcast axes in A first.
template <class A, class G, class P, class F, class... V>
void accumulate_broadcast(Tape<P>& t, const char* op, const TensorView<G>& gx, const Shape& out, F f, const V&... args) {
  if (gx.shape() == out) {
    accumulate<A>(op, gx, f, args...);
    return;
  }
  const auto full = scratch<A>(t, out);
  map_into<A>(op, full, f, args...);
  const auto reduced = scratch<A>(t, gx.shape());
  sum_to_shape<A>(reduced, full);
  accumulate<A>(op, gx, [](const A& r) { return r; }, TensorView<const A>(reduced));
}

/// c (+)= a b, products accumulated in Acc, rounded once into c's storage.
template <class Acc, class P, class G, class SA, class CA, class SB, class CB>
void gemm_into(Tape<P>& t, const TensorView<G>& c, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, bool add) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const int threads = detail::default_gemm_threads(m, n, k);
  if constexpr (std::is_same_v<G, Acc>) {
    detail::gemm_blocked<Acc>(m, n, k, Acc(1), a.data(), a.strides()[0], a.strides()[1], b.data(), b.strides()[0],
                              b.strides()[1], add ? Acc(1) : Acc(0), c.data(), c.strides()[0], c.strides()[1], threads);
  } else {
    // accumulate in Acc, round once into c: in row panels, so the Acc workspace stays at most
    // ~128K elements (a 16-bit step keeps no fp32 copy of a whole weight gradient)
    const index_t panel = std::max<index_t>(1, std::min<index_t>(m, (index_t{1} << 17) / std::max<index_t>(n, 1)));
    const auto w = scratch<Acc>(t, Shape{panel, n});
    for (index_t i0 = 0; i0 < m; i0 += panel) {
      const index_t rows = std::min(panel, m - i0);
      const TensorView<Acc> wv(w.data(), Shape{rows, n});
      detail::gemm_blocked<Acc>(rows, n, k, Acc(1), a.data() + i0 * a.strides()[0], a.strides()[0], a.strides()[1], b.data(),
                                b.strides()[0], b.strides()[1], Acc(0), wv.data(), n, index_t{1},
                                detail::default_gemm_threads(rows, n, k));
      const auto ci = c.slice(0, i0, i0 + rows);
      if (add) {
        accumulate<Acc>("precis::matmul", ci, [](const Acc& v) { return v; }, TensorView<const Acc>(wv));
      } else {
        Tape<P>::copy_into(TensorView<const Acc>(wv), ci);
      }
    }
  }
}

/// x's shape with `axis` kept as extent 1 (for broadcasting a reduced value back).
inline Shape keep_axis(Shape s, int axis) {
  s[axis] = 1;
  return s;
}

// ---- element-wise: one forward functor, one derivative functor d(g, x, y) -----------------

template <class Op, class Fwd, class D, class P, class S>
void unary_backward(Tape<P>& t, const node_t<P>& n) {
  if (!t.slot(n.in[0]).requires_grad) return;
  using C = typename types_t<P, Op, S>::compute;
  using A = arith_t<C>;
  accumulate<A>(name_of<Op>(), t.template grad_view<grad_t<P, S>>(n.in[0]), D{},
                t.template grad_view<grad_t<P, C>>(n.out).as_const(), t.template value_view<const S>(n.in[0]),
                t.template value_view<const C>(n.out));
}

template <class Op, class Fwd, class D, class P, class S>
auto unary(const Var<P, S>& x) {
  Tape<P>& t = x.tape();
  t.check(x, name_of<Op>());
  using C = typename types_t<P, Op, S>::compute;  // output == compute for these classes
  auto y = t.template make<C>(x.shape(), x.requires_grad());
  map_into<arith_t<C>>(name_of<Op>(), t.template value_view<C>(y.id()), Fwd{}, x.value());
  record(t, &unary_backward<Op, Fwd, D, P, S>, y, {x.id()});
  return y;
}

template <class Op, class DA, class DB, class P, class SA, class SB>
void binary_backward(Tape<P>& t, const node_t<P>& n) {
  using C = typename types_t<P, Op, SA, SB>::compute;
  using A = arith_t<C>;
  const auto g = t.template grad_view<grad_t<P, C>>(n.out).as_const();
  const auto a = t.template value_view<const SA>(n.in[0]);
  const auto b = t.template value_view<const SB>(n.in[1]);
  const auto y = t.template value_view<const C>(n.out);
  if (t.slot(n.in[0]).requires_grad) {
    accumulate_broadcast<A>(t, name_of<Op>(), t.template grad_view<grad_t<P, SA>>(n.in[0]), y.shape(), DA{}, g, a, b, y);
  }
  if (t.slot(n.in[1]).requires_grad) {
    accumulate_broadcast<A>(t, name_of<Op>(), t.template grad_view<grad_t<P, SB>>(n.in[1]), y.shape(), DB{}, g, a, b, y);
  }
}

template <class Op, class Fwd, class DA, class DB, class P, class SA, class SB>
auto binary(const Var<P, SA>& a, const Var<P, SB>& b) {
  Tape<P>& t = same_tape<P>(a, b, name_of<Op>());
  using C = typename types_t<P, Op, SA, SB>::compute;
  const Shape s = broadcast_shapes(a.shape(), b.shape(), name_of<Op>());
  auto y = t.template make<C>(s, a.requires_grad() || b.requires_grad());
  map_into<arith_t<C>>(name_of<Op>(), t.template value_view<C>(y.id()), Fwd{}, a.value(), b.value());
  record(t, &binary_backward<Op, DA, DB, P, SA, SB>, y, {a.id(), b.id()});
  return y;
}

// derivative functors: (g, x, y) for unary ops, (g, a, b, y) for binary ones
struct d_neg { template <class T> T operator()(const T& g, const T&, const T&) const { return -g; } };
struct d_abs {
  template <class T> T operator()(const T& g, const T& x, const T&) const {
    return x > T(0) ? g : (x < T(0) ? T(-g) : T(0));
  }
};
struct d_relu { template <class T> T operator()(const T& g, const T& x, const T&) const { return x > T(0) ? g : T(0); } };
struct d_exp { template <class T> T operator()(const T& g, const T&, const T& y) const { return g * y; } };
struct d_log { template <class T> T operator()(const T& g, const T& x, const T&) const { return g / x; } };
struct d_sqrt { template <class T> T operator()(const T& g, const T&, const T& y) const { return g / (T(2) * y); } };
struct d_rsqrt { template <class T> T operator()(const T& g, const T&, const T& y) const { return T(-0.5) * g * y * y * y; } };
struct d_reciprocal { template <class T> T operator()(const T& g, const T&, const T& y) const { return -g * y * y; } };
struct d_tanh { template <class T> T operator()(const T& g, const T&, const T& y) const { return g * (T(1) - y * y); } };
struct d_sigmoid { template <class T> T operator()(const T& g, const T&, const T& y) const { return g * y * (T(1) - y); } };
/// d/dx x Φ(x) = Φ(x) + x φ(x).
struct d_gelu {
  template <class T> T operator()(const T& g, const T& x, const T&) const {
    using std::erf;
    using std::exp;
    using std::sqrt;
    const T cdf = T(0.5) * (T(1) + T(erf(x / sqrt(T(2)))));
    using std::acos;
    const T pdf = exp(T(-0.5) * x * x) / sqrt(T(2) * T(acos(T(-1))));  // pi in T's own precision
    return g * (cdf + x * pdf);
  }
};
struct reciprocal_fn { template <class T> T operator()(const T& a) const { return T(1) / a; } };

struct d_add_a { template <class T> T operator()(const T& g, const T&, const T&, const T&) const { return g; } };
struct d_sub_b { template <class T> T operator()(const T& g, const T&, const T&, const T&) const { return -g; } };
struct d_mul_a { template <class T> T operator()(const T& g, const T&, const T& b, const T&) const { return g * b; } };
struct d_mul_b { template <class T> T operator()(const T& g, const T& a, const T&, const T&) const { return g * a; } };
struct d_div_a { template <class T> T operator()(const T& g, const T&, const T& b, const T&) const { return g / b; } };
struct d_div_b { template <class T> T operator()(const T& g, const T&, const T& b, const T& y) const { return -g * y / b; } };
/// d/da a^b = b a^(b-1).
struct d_pow_a {
  template <class T> T operator()(const T& g, const T& a, const T& b, const T&) const {
    using std::pow;
    return b == T(0) ? T(0) : T(g * b * pow(a, T(b - T(1))));
  }
};
/// d/db a^b = a^b log a, taken as 0 where a == 0 and b >= 0 (as PyTorch does).
struct d_pow_b {
  template <class T> T operator()(const T& g, const T& a, const T& b, const T& y) const {
    using std::log;
    return (a == T(0) && b >= T(0)) ? T(0) : T(g * y * log(a));
  }
};
/// maximum/minimum: the gradient goes to the selected operand, split evenly on ties.
struct d_pick_a {
  template <class T> T operator()(const T& g, const T& a, const T& b, const T& y) const {
    return a == b ? T(g / T(2)) : (a == y ? g : T(0));
  }
};
struct d_pick_b {
  template <class T> T operator()(const T& g, const T& a, const T& b, const T& y) const {
    return a == b ? T(g / T(2)) : (b == y ? g : T(0));
  }
};

// ---- matmul and linear ----------------------------------------------------------------------

template <class P, class SA, class SB>
void matmul_backward(Tape<P>& t, const node_t<P>& n) {
  using T = types_t<P, op::matmul, SA, SB>;
  using L = typename T::compute;
  using Acc = typename T::accumulate;
  const auto g = t.template grad_view<grad_t<P, typename T::output>>(n.out).as_const();
  const auto a = saved<L, SA>(t, n.aux[0], n.in[0]);
  const auto b = saved<L, SB>(t, n.aux[1], n.in[1]);
  if (t.slot(n.in[0]).requires_grad) gemm_into<Acc>(t, t.template grad_view<grad_t<P, SA>>(n.in[0]), g, b.transpose(), true);
  if (t.slot(n.in[1]).requires_grad) gemm_into<Acc>(t, t.template grad_view<grad_t<P, SB>>(n.in[1]), a.transpose(), g, true);
}

template <class P, class SX, class SW, class SB>
void linear_backward(Tape<P>& t, const node_t<P>& n) {
  using T = types_t<P, op::linear, SX, SW, SB>;
  using L = typename T::compute;
  using Acc = typename T::accumulate;
  const auto g = t.template grad_view<grad_t<P, typename T::output>>(n.out).as_const();
  const auto x = saved<L, SX>(t, n.aux[0], n.in[0]);
  const auto w = saved<L, SW>(t, n.aux[1], n.in[1]);
  if (t.slot(n.in[0]).requires_grad) gemm_into<Acc>(t, t.template grad_view<grad_t<P, SX>>(n.in[0]), g, w, true);
  if (t.slot(n.in[1]).requires_grad) gemm_into<Acc>(t, t.template grad_view<grad_t<P, SW>>(n.in[1]), g.transpose(), x, true);
  if (n.iarg[0] != 0 && t.slot(n.in[2]).requires_grad) {  // the bias: column sums of g, row by row in Acc
    const index_t rows = g.shape()[0], cols = g.shape()[1];
    const auto col = scratch<Acc>(t, Shape{cols});
    std::fill_n(col.data(), cols, Acc(0));
    std::array<Acc, detail::chunk> buf;
    for (index_t i = 0; i < rows; ++i) {
      for (index_t c0 = 0; c0 < cols; c0 += detail::chunk) {
        const index_t len = std::min(detail::chunk, cols - c0);
        const Acc* v = detail::load_run<Acc>(g.data() + i * g.strides()[0] + c0 * g.strides()[1], len, g.strides()[1], buf.data());
        for (index_t j = 0; j < len; ++j) col.data()[c0 + j] += v[j];
      }
    }
    accumulate<Acc>("precis::linear", t.template grad_view<grad_t<P, SB>>(n.in[2]), [](const Acc& v) { return v; },
                    TensorView<const Acc>(col));
  }
}

inline void check_linear(const Shape& x, const Shape& w, const Shape* b) {
  if (x.rank() != 2 || w.rank() != 2 || x[1] != w[1] || (b != nullptr && (b->rank() != 1 || (*b)[0] != w[0]))) {
    throw shape_error("precis::linear: x " + x.str() + ", W " + w.str() + (b ? ", bias " + b->str() : std::string()) +
                      "; expected [batch, in], [out, in]" + (b ? ", [out]" : ""));
  }
}

// ---- reductions -----------------------------------------------------------------------------

template <class Acc>
auto sum_fn() {
  return [](const auto* p, index_t len, index_t st) {
    return detail::sum_fiber<Acc>(p, len, st, summation::pairwise, std::identity{});
  };
}
template <class Acc>
auto norm_fn() {
  return [](const auto* p, index_t len, index_t st) { return detail::norm2_fiber<Acc>(p, len, st, summation::pairwise); };
}
template <class Acc>
auto logsumexp_fn() {
  return [](const auto* p, index_t len, index_t st) { return detail::logsumexp_fiber<Acc>(p, len, st, summation::pairwise); };
}

/// The gradient and value of a reduction over `axis` (iarg[0]; -1: all) as views that
/// broadcast against the input.
template <class G, class O, class P>
std::pair<TensorView<const G>, TensorView<const O>> reduced_views(Tape<P>& t, const node_t<P>& n) {
  const Shape& xs = t.slot(n.in[0]).shape;
  const Shape s = n.iarg[0] < 0 ? Shape{} : keep_axis(xs, static_cast<int>(n.iarg[0]));
  return {TensorView<const G>(t.template grad_view<G>(n.out).data(), s),
          TensorView<const O>(t.template value_view<const O>(n.out).data(), s)};
}

template <class Op, class D, class P, class S>
void reduce_backward(Tape<P>& t, const node_t<P>& n) {
  if (!t.slot(n.in[0]).requires_grad) return;
  using T = types_t<P, Op, S>;
  using O = typename T::output;
  using A = arith_t<typename T::accumulate>;
  const auto [g, y] = reduced_views<grad_t<P, O>, O>(t, n);
  const A divisor = A(n.darg);  // 1, or the element count of a mean (exact in A)
  accumulate<A>(name_of<Op>(), t.template grad_view<grad_t<P, S>>(n.in[0]),
                [divisor](const A& gg, const A& x, const A& yy) { return D{}(gg, x, yy, divisor); }, g,
                t.template value_view<const S>(n.in[0]), y);
}

struct d_sum { template <class T> T operator()(const T& g, const T&, const T&, const T& n) const { return g / n; } };
/// d||x|| / dx = x / ||x|| (0 at x = 0).
struct d_norm {
  template <class T> T operator()(const T& g, const T& x, const T& y, const T&) const {
    return y == T(0) ? T(0) : T(g * x / y);
  }
};
struct d_logsumexp {
  template <class T> T operator()(const T& g, const T& x, const T& y, const T&) const {
    using std::exp;
    return g * exp(x - y);
  }
};

/// sum / mean / norm / logsumexp over `axis` (all elements for axis = nullptr); the gradient
/// is divided by `divisor` (a mean's element count).
template <class Op, class D, class P, class S, class Fiber>
auto reduce(const Var<P, S>& x, const int* axis, double divisor, Fiber fiber) {
  Tape<P>& t = x.tape();
  t.check(x, name_of<Op>());
  using T = types_t<P, Op, S>;
  using O = typename T::output;
  using Acc = typename T::accumulate;
  index_t a = -1;
  Shape s{};
  if (axis != nullptr) {
    a = normalize_axis(*axis, x.shape().rank(), name_of<Op>());
    s = x.shape().erased(static_cast<int>(a));
  }
  auto y = t.template make<O>(s, x.requires_grad());
  if (axis != nullptr) {
    detail::reduce_axis_into<Acc>(name_of<Op>(), x.value(), static_cast<int>(a), t.template value_view<O>(y.id()), fiber);
  } else {
    detail::reduce_all_into<Acc>(name_of<Op>(), x.value(), t.template value_view<O>(y.id()).data(), fiber);
  }
  record(t, &reduce_backward<Op, D, P, S>, y, {x.id()}, {}, {a}, divisor);
  return y;
}

// ---- softmax family ---------------------------------------------------------------------------

/// s[fiber] = sum over `axis` of g * y (Product) or of g, in Acc, for contiguous g and y of one shape.
template <class Acc, bool Product, class G, class O>
void fiber_sums(const TensorView<const G>& g, const TensorView<const O>& y, int axis, const TensorView<Acc>& s) {
  const index_t len = g.shape()[axis], st = g.strides()[axis];
  detail::for_each_fiber(g, axis, s, false, [&](const G* p, Acc* o, index_t) {
    const O* q = y.data() + (p - g.data());
    Acc acc(0);
    for (index_t k = 0; k < len; ++k) {
      const Acc gv = detail::load<Acc>(detail::load<arith_t<G>>(p[k * st]));
      acc += Product ? Acc(gv * detail::load<Acc>(detail::load<arith_t<O>>(q[k * st]))) : gv;
    }
    *o = acc;
  });
}

template <class Op, bool Log, class P, class S>
void softmax_backward(Tape<P>& t, const node_t<P>& n) {
  if (!t.slot(n.in[0]).requires_grad) return;
  using T = types_t<P, Op, S>;
  using O = typename T::output;
  using Acc = arith_t<typename T::accumulate>;
  const int axis = static_cast<int>(n.iarg[0]);
  const auto g = t.template grad_view<grad_t<P, O>>(n.out).as_const();
  const auto y = t.template value_view<const O>(n.out);
  const auto s = scratch<Acc>(t, y.shape().erased(axis));
  fiber_sums<Acc, !Log>(g, y, axis, s);
  const TensorView<const Acc> sb(s.data(), keep_axis(y.shape(), axis));
  const auto gx = t.template grad_view<grad_t<P, S>>(n.in[0]);
  if constexpr (Log) {  // dx = g - softmax * sum(g)
    accumulate<Acc>(name_of<Op>(), gx, [](const Acc& gg, const Acc& yy, const Acc& ss) {
      using std::exp;
      return Acc(gg - exp(yy) * ss);
    }, g, y, sb);
  } else {  // dx = y (g - sum(g y))
    accumulate<Acc>(name_of<Op>(), gx, [](const Acc& gg, const Acc& yy, const Acc& ss) { return Acc(yy * (gg - ss)); }, g, y, sb);
  }
}

template <class Op, bool Log, class P, class S>
auto softmax_like(const Var<P, S>& x, int axis) {
  Tape<P>& t = x.tape();
  t.check(x, name_of<Op>());
  using T = types_t<P, Op, S>;
  using O = typename T::output;
  const int a = normalize_axis(axis, x.shape().rank(), name_of<Op>());
  auto y = t.template make<O>(x.shape(), x.requires_grad());
  detail::softmax_into<arith_t<typename T::accumulate>, Log>(name_of<Op>(), x.value(), a, t.template value_view<O>(y.id()),
                                                             summation::pairwise);
  record(t, &softmax_backward<Op, Log, P, S>, y, {x.id()}, {}, {a});
  return y;
}

// ---- losses ---------------------------------------------------------------------------------

/// Copies the labels into the arena (the backward reads them after the caller's span is gone).
template <class P>
const std::int64_t* keep_labels(Tape<P>& t, std::span<const std::int64_t> labels) {
  auto* p = t.arena().template allocate_array<std::int64_t>(labels.size());
  std::copy(labels.begin(), labels.end(), p);
  return p;
}

/// The gradient reaching a loss that is a mean over `rows` rows, divided by rows, in Acc.
template <class Acc, class O, class P>
Acc row_mean_grad(Tape<P>& t, const node_t<P>& n, index_t rows) {
  using G = grad_t<P, O>;
  return Acc(detail::load<Acc>(detail::load<arith_t<G>>(*t.template grad_view<G>(n.out).data())) / Acc(static_cast<double>(rows)));
}

/// The mean of `rows` per-row loss terms (pairwise, in Acc), as a new scalar value stored as O.
template <class O, class Acc, class P, class S>
Var<P, O> mean_of_terms(Tape<P>& t, const Acc* terms, index_t rows, const Var<P, S>& input) {
  auto y = t.template make<O>(Shape{}, input.requires_grad());
  *t.template value_view<O>(y.id()).data() = detail::store<O>(
      Acc(detail::sum_fiber<Acc>(terms, rows, 1, summation::pairwise, std::identity{}) / Acc(static_cast<double>(rows))));
  return y;
}

template <class P, class S>
void cross_entropy_backward(Tape<P>& t, const node_t<P>& n) {
  if (!t.slot(n.in[0]).requires_grad) return;
  using T = types_t<P, op::cross_entropy, S>;
  using Acc = arith_t<typename T::accumulate>;
  const auto x = t.template value_view<const S>(n.in[0]);
  const auto gx = t.template grad_view<grad_t<P, S>>(n.in[0]);
  const auto* labels = static_cast<const std::int64_t*>(n.aux[0]);
  const auto* lse = static_cast<const Acc*>(n.aux[1]);
  const index_t rows = x.shape()[0], k = x.shape()[1];
  const Acc g = row_mean_grad<Acc, typename T::output>(t, n, rows);
  using GS = grad_t<P, S>;
  for (index_t i = 0; i < rows; ++i) {
    for (index_t j = 0; j < k; ++j) {
      using std::exp;
      const Acc p = exp(Acc(detail::load<Acc>(detail::load<arith_t<S>>(x(i, j))) - lse[i]));
      const Acc d = g * (j == labels[i] ? Acc(p - Acc(1)) : p);
      GS& gij = gx(i, j);
      gij = detail::store<GS>(Acc(detail::load<Acc>(detail::load<arith_t<GS>>(gij)) + d));
    }
  }
}

template <class P, class S>
void nll_backward(Tape<P>& t, const node_t<P>& n) {
  if (!t.slot(n.in[0]).requires_grad) return;
  using T = types_t<P, op::nll, S>;
  using Acc = arith_t<typename T::accumulate>;
  using GS = grad_t<P, S>;
  const auto gx = t.template grad_view<GS>(n.in[0]);
  const auto* labels = static_cast<const std::int64_t*>(n.aux[0]);
  const index_t rows = gx.shape()[0];
  const Acc g = row_mean_grad<Acc, typename T::output>(t, n, rows);
  for (index_t i = 0; i < rows; ++i) {
    GS& gij = gx(i, labels[i]);
    gij = detail::store<GS>(Acc(detail::load<Acc>(detail::load<arith_t<GS>>(gij)) - g));
  }
}

template <class P, class SP, class ST>
void mse_backward(Tape<P>& t, const node_t<P>& n) {
  using T = types_t<P, op::mse, SP, ST>;
  using A = arith_t<typename T::accumulate>;
  const auto p = t.template value_view<const SP>(n.in[0]);
  const auto q = t.template value_view<const ST>(n.in[1]);
  const TensorView<const grad_t<P, typename T::output>> g(t.template grad_view<grad_t<P, typename T::output>>(n.out).data(), Shape{});
  const A c = A(2) / A(static_cast<double>(p.size()));
  if (t.slot(n.in[0]).requires_grad) {
    accumulate<A>("precis::mse", t.template grad_view<grad_t<P, SP>>(n.in[0]),
                  [c](const A& gg, const A& a, const A& b) { return A(c * gg * (a - b)); }, g, p, q);
  }
  if (t.slot(n.in[1]).requires_grad) {
    accumulate<A>("precis::mse", t.template grad_view<grad_t<P, ST>>(n.in[1]),
                  [c](const A& gg, const A& a, const A& b) { return A(-c * gg * (a - b)); }, g, p, q);
  }
}

// ---- layer norm -------------------------------------------------------------------------------

template <class P, class SX, class SG, class SB>
void layer_norm_backward(Tape<P>& t, const node_t<P>& n) {
  using T = types_t<P, op::layer_norm, SX, SG, SB>;
  using Acc = arith_t<typename T::accumulate>;
  const auto x = t.template value_view<const SX>(n.in[0]);
  const auto gamma = t.template value_view<const SG>(n.in[1]);
  const auto g = t.template grad_view<grad_t<P, typename T::output>>(n.out).as_const();
  const auto* stats = static_cast<const Acc*>(n.aux[0]);  // mean, rstd per row
  const index_t d = x.shape().back(), rows = x.size() / d;
  const bool want_x = t.slot(n.in[0]).requires_grad, want_g = t.slot(n.in[1]).requires_grad,
             want_b = t.slot(n.in[2]).requires_grad;
  const auto xr = x.reshape(Shape{rows, d});
  const TensorView<const grad_t<P, typename T::output>> gr(g.data(), Shape{rows, d});
  const auto dgamma = scratch<Acc>(t, Shape{d});
  const auto dbeta = scratch<Acc>(t, Shape{d});
  std::fill_n(dgamma.data(), d, Acc(0));
  std::fill_n(dbeta.data(), d, Acc(0));
  const auto row = scratch<Acc>(t, Shape{2, d});  // xhat, dxhat of one row
  using GX = grad_t<P, SX>;
  const TensorView<GX> gx = want_x ? t.template grad_view<GX>(n.in[0]) : TensorView<GX>();
  for (index_t i = 0; i < rows; ++i) {
    const Acc mu = stats[2 * i], rstd = stats[2 * i + 1];
    Acc m1(0), m2(0);  // sums of dxhat and dxhat * xhat
    for (index_t j = 0; j < d; ++j) {
      const Acc xh = Acc(detail::load<Acc>(detail::load<arith_t<SX>>(xr(i, j))) - mu) * rstd;
      const Acc gv = detail::load<Acc>(detail::load<arith_t<grad_t<P, typename T::output>>>(gr(i, j)));
      dgamma.data()[j] += gv * xh;
      dbeta.data()[j] += gv;
      const Acc dxh = gv * detail::load<Acc>(detail::load<arith_t<SG>>(gamma(j)));
      row(0, j) = xh;
      row(1, j) = dxh;
      m1 += dxh;
      m2 += dxh * xh;
    }
    if (want_x) {
      const Acc inv_d = Acc(1) / Acc(static_cast<double>(d));
      for (index_t j = 0; j < d; ++j) {
        GX& gij = gx.data()[i * d + j];
        const Acc dx = rstd * (row(1, j) - inv_d * m1 - row(0, j) * inv_d * m2);
        gij = detail::store<GX>(Acc(detail::load<Acc>(detail::load<arith_t<GX>>(gij)) + dx));
      }
    }
  }
  if (want_g) accumulate<Acc>("precis::layer_norm", t.template grad_view<grad_t<P, SG>>(n.in[1]), [](const Acc& v) { return v; }, TensorView<const Acc>(dgamma));
  if (want_b) accumulate<Acc>("precis::layer_norm", t.template grad_view<grad_t<P, SB>>(n.in[2]), [](const Acc& v) { return v; }, TensorView<const Acc>(dbeta));
}

// ---- views and concatenation ----------------------------------------------------------------

/// g added into gx viewed through `view` (a transpose, slice or reshape of gx).
template <class P, class S, class ViewOf>
void view_backward_impl(Tape<P>& t, const node_t<P>& n, ViewOf view) {
  if (!t.slot(n.in[0]).requires_grad) return;
  using G = grad_t<P, S>;
  using A = arith_t<G>;
  accumulate<A>("precis::view", view(t.template grad_view<G>(n.in[0])), [](const A& v) { return v; },
                t.template grad_view<G>(n.out).as_const());
}
template <class P, class S>
void transpose_backward(Tape<P>& t, const node_t<P>& n) {
  view_backward_impl<P, S>(t, n, [](const auto& gx) { return gx.transpose(); });
}
template <class P, class S>
void slice_backward(Tape<P>& t, const node_t<P>& n) {
  const Shape& ys = t.slot(n.out).shape;
  const int axis = static_cast<int>(n.iarg[0]);
  const index_t begin = n.iarg[1], step = n.iarg[2];
  view_backward_impl<P, S>(t, n, [&](const auto& gx) { return gx.slice(axis, begin, begin + (ys[axis] - 1) * step + (ys[axis] > 0 ? 1 : 0), step); });
}
template <class P, class S>
void reshape_backward(Tape<P>& t, const node_t<P>& n) {
  const Shape ys = t.slot(n.out).shape;
  view_backward_impl<P, S>(t, n, [&](const auto& gx) { return gx.reshape(ys); });
}

template <class P, class S>
void cat_backward(Tape<P>& t, const node_t<P>& n) {
  using G = grad_t<P, S>;
  using A = arith_t<G>;
  const auto* ids = static_cast<const std::uint32_t*>(n.aux[0]);
  const int axis = static_cast<int>(n.iarg[0]);
  const auto g = t.template grad_view<G>(n.out).as_const();
  index_t at = 0;
  for (index_t i = 0; i < n.iarg[1]; ++i) {
    const index_t len = t.slot(ids[i]).shape[axis];
    if (t.slot(ids[i]).requires_grad) {
      accumulate<A>("precis::cat", t.template grad_view<G>(ids[i]), [](const A& v) { return v; }, g.slice(axis, at, at + len));
    }
    at += len;
  }
}

}  // namespace detail::ad

// ---- element-wise -------------------------------------------------------------------------------

template <class P, class S>
auto neg(const Var<P, S>& x) { return detail::ad::unary<op::neg, fn::neg, detail::ad::d_neg>(x); }
template <class P, class S>
auto abs(const Var<P, S>& x) { return detail::ad::unary<op::abs, fn::abs, detail::ad::d_abs>(x); }
template <class P, class S>
auto relu(const Var<P, S>& x) { return detail::ad::unary<op::relu, fn::relu, detail::ad::d_relu>(x); }
template <class P, class S>
auto exp(const Var<P, S>& x) { return detail::ad::unary<op::exp, fn::exp, detail::ad::d_exp>(x); }
template <class P, class S>
auto log(const Var<P, S>& x) { return detail::ad::unary<op::log, fn::log, detail::ad::d_log>(x); }
template <class P, class S>
auto sqrt(const Var<P, S>& x) { return detail::ad::unary<op::sqrt, fn::sqrt, detail::ad::d_sqrt>(x); }
template <class P, class S>
auto rsqrt(const Var<P, S>& x) { return detail::ad::unary<op::rsqrt, fn::rsqrt, detail::ad::d_rsqrt>(x); }
template <class P, class S>
auto reciprocal(const Var<P, S>& x) {
  return detail::ad::unary<op::reciprocal, detail::ad::reciprocal_fn, detail::ad::d_reciprocal>(x);
}
template <class P, class S>
auto tanh(const Var<P, S>& x) { return detail::ad::unary<op::tanh, fn::tanh, detail::ad::d_tanh>(x); }
template <class P, class S>
auto sigmoid(const Var<P, S>& x) { return detail::ad::unary<op::sigmoid, fn::sigmoid, detail::ad::d_sigmoid>(x); }
/// The exact GELU, x Φ(x).
template <class P, class S>
auto gelu(const Var<P, S>& x) { return detail::ad::unary<op::gelu, fn::gelu, detail::ad::d_gelu>(x); }

/// Element-wise with NumPy broadcasting; the gradient of a broadcast operand is summed over the
/// broadcast axes in the op's arithmetic type.
template <class P, class SA, class SB>
auto add(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::add, fn::add, detail::ad::d_add_a, detail::ad::d_add_a>(a, b);
}
template <class P, class SA, class SB>
auto sub(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::sub, fn::sub, detail::ad::d_add_a, detail::ad::d_sub_b>(a, b);
}
template <class P, class SA, class SB>
auto mul(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::mul, fn::mul, detail::ad::d_mul_a, detail::ad::d_mul_b>(a, b);
}
template <class P, class SA, class SB>
auto div(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::div, fn::div, detail::ad::d_div_a, detail::ad::d_div_b>(a, b);
}
template <class P, class SA, class SB>
auto pow(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::pow, fn::pow, detail::ad::d_pow_a, detail::ad::d_pow_b>(a, b);
}
template <class P, class SA, class SB>
auto maximum(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::maximum, fn::max, detail::ad::d_pick_a, detail::ad::d_pick_b>(a, b);
}
template <class P, class SA, class SB>
auto minimum(const Var<P, SA>& a, const Var<P, SB>& b) {
  return detail::ad::binary<op::minimum, fn::min, detail::ad::d_pick_a, detail::ad::d_pick_b>(a, b);
}

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

// ---- matmul, linear ---------------------------------------------------------------------------

/// a [m, k] times b [k, n]: both rounded to the policy's compute type (the rounded copies are
/// what the backward multiplies with), products accumulated in its accumulator.
template <class P, class SA, class SB>
auto matmul(const Var<P, SA>& a, const Var<P, SB>& b) {
  constexpr const char* name = "precis::matmul";
  Tape<P>& t = detail::ad::same_tape<P>(a, b, name);
  using T = policy::op_types<P, op::matmul, SA, SB>;
  using L = typename T::compute;
  if (a.shape().rank() != 2 || b.shape().rank() != 2 || a.shape()[1] != b.shape()[0]) {
    throw shape_error(std::string(name) + ": A " + a.shape().str() + " times B " + b.shape().str() +
                      "; expected [m, k] and [k, n]");
  }
  const auto [al, a_saved] = detail::ad::rounded_to<L>(t, a);
  const auto [bl, b_saved] = detail::ad::rounded_to<L>(t, b);
  auto y = t.template make<typename T::output>(Shape{a.shape()[0], b.shape()[1]}, a.requires_grad() || b.requires_grad());
  detail::ad::gemm_into<typename T::accumulate>(t, t.template value_view<typename T::output>(y.id()), al, bl, false);
  detail::ad::record(t, &detail::ad::matmul_backward<P, SA, SB>, y, {a.id(), b.id()}, {a_saved, b_saved});
  return y;
}

/// x W^T + bias for x [batch, in], W [out, in], bias [out]; the bias is added in the
/// accumulator before the one rounding to the output type.
template <class P, class SX, class SW, class SB>
auto linear(const Var<P, SX>& x, const Var<P, SW>& w, const Var<P, SB>& bias) {
  constexpr const char* name = "precis::linear";
  Tape<P>& t = detail::ad::same_tape<P>(x, w, name);
  t.check(bias, name);
  detail::ad::check_linear(x.shape(), w.shape(), &bias.shape());
  using T = policy::op_types<P, op::linear, SX, SW, SB>;
  using L = typename T::compute;
  using Acc = typename T::accumulate;
  using O = typename T::output;
  const auto [xl, x_saved] = detail::ad::rounded_to<L>(t, x);
  const auto [wl, w_saved] = detail::ad::rounded_to<L>(t, w);
  const Shape s{x.shape()[0], w.shape()[0]};
  auto y = t.template make<O>(s, x.requires_grad() || w.requires_grad() || bias.requires_grad());
  const auto yv = t.template value_view<O>(y.id());
  const auto acc = [&] {
    if constexpr (std::is_same_v<O, Acc>) return yv;
    else return detail::ad::scratch<Acc>(t, s);
  }();
  map_into<Acc>(name, acc, detail::identity{}, bias.value());  // the bias, broadcast over rows
  detail::gemm_blocked<Acc>(s[0], s[1], x.shape()[1], Acc(1), xl.data(), xl.strides()[0], xl.strides()[1], wl.data(),
                            wl.strides()[1], wl.strides()[0], Acc(1), acc.data(), s[1], index_t{1},
                            detail::default_gemm_threads(s[0], s[1], x.shape()[1]));
  if constexpr (!std::is_same_v<O, Acc>) Tape<P>::copy_into(TensorView<const Acc>(acc), yv);
  detail::ad::record(t, &detail::ad::linear_backward<P, SX, SW, SB>, y, {x.id(), w.id(), bias.id()},
                     {x_saved, w_saved}, {1});
  return y;
}
/// x W^T without a bias.
template <class P, class SX, class SW>
auto linear(const Var<P, SX>& x, const Var<P, SW>& w) {
  constexpr const char* name = "precis::linear";
  Tape<P>& t = detail::ad::same_tape<P>(x, w, name);
  detail::ad::check_linear(x.shape(), w.shape(), nullptr);
  using T = policy::op_types<P, op::linear, SX, SW>;
  using L = typename T::compute;
  const auto [xl, x_saved] = detail::ad::rounded_to<L>(t, x);
  const auto [wl, w_saved] = detail::ad::rounded_to<L>(t, w);
  auto y = t.template make<typename T::output>(Shape{x.shape()[0], w.shape()[0]}, x.requires_grad() || w.requires_grad());
  detail::ad::gemm_into<typename T::accumulate>(t, t.template value_view<typename T::output>(y.id()), xl, wl.transpose(), false);
  detail::ad::record(t, &detail::ad::linear_backward<P, SX, SW, SW>, y, {x.id(), w.id(), x.id()}, {x_saved, w_saved}, {0});
  return y;
}

// ---- reductions -------------------------------------------------------------------------------

template <class P, class S>
auto sum(const Var<P, S>& x) {
  using Acc = typename policy::op_types<P, op::sum, S>::accumulate;
  return detail::ad::reduce<op::sum, detail::ad::d_sum>(x, nullptr, 1.0, detail::ad::sum_fn<Acc>());
}
template <class P, class S>
auto sum(const Var<P, S>& x, int axis) {
  using Acc = typename policy::op_types<P, op::sum, S>::accumulate;
  return detail::ad::reduce<op::sum, detail::ad::d_sum>(x, &axis, 1.0, detail::ad::sum_fn<Acc>());
}
template <class P, class S>
auto mean(const Var<P, S>& x) {
  using Acc = typename policy::op_types<P, op::mean, S>::accumulate;
  const auto n = static_cast<double>(x.size());
  return detail::ad::reduce<op::mean, detail::ad::d_sum>(x, nullptr, n, [n](const auto* p, index_t len, index_t st) {
    return Acc(detail::sum_fiber<Acc>(p, len, st, summation::pairwise, std::identity{}) / Acc(n));
  });
}
template <class P, class S>
auto mean(const Var<P, S>& x, int axis) {
  using Acc = typename policy::op_types<P, op::mean, S>::accumulate;
  const int a = normalize_axis(axis, x.shape().rank(), "precis::mean");
  const auto n = static_cast<double>(x.shape()[a]);
  return detail::ad::reduce<op::mean, detail::ad::d_sum>(x, &axis, n, [n](const auto* p, index_t len, index_t st) {
    return Acc(detail::sum_fiber<Acc>(p, len, st, summation::pairwise, std::identity{}) / Acc(n));
  });
}
/// The Euclidean norm (scaled, so squares neither overflow nor underflow).
template <class P, class S>
auto norm(const Var<P, S>& x) {
  using Acc = typename policy::op_types<P, op::norm, S>::accumulate;
  return detail::ad::reduce<op::norm, detail::ad::d_norm>(x, nullptr, 1.0, detail::ad::norm_fn<Acc>());
}
template <class P, class S>
auto norm(const Var<P, S>& x, int axis) {
  using Acc = typename policy::op_types<P, op::norm, S>::accumulate;
  return detail::ad::reduce<op::norm, detail::ad::d_norm>(x, &axis, 1.0, detail::ad::norm_fn<Acc>());
}
template <class P, class S>
auto logsumexp(const Var<P, S>& x, int axis) {
  using Acc = typename policy::op_types<P, op::logsumexp, S>::accumulate;
  return detail::ad::reduce<op::logsumexp, detail::ad::d_logsumexp>(x, &axis, 1.0, detail::ad::logsumexp_fn<Acc>());
}
template <class P, class S>
auto softmax(const Var<P, S>& x, int axis) { return detail::ad::softmax_like<op::softmax, false>(x, axis); }
template <class P, class S>
auto log_softmax(const Var<P, S>& x, int axis) { return detail::ad::softmax_like<op::log_softmax, true>(x, axis); }

// ---- normalization and losses ---------------------------------------------------------------

/// (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance); mean and
/// 1/sqrt(var + eps) are saved per row in the accumulator type.
template <class P, class SX, class SG, class SB>
Var<P, typename policy::op_types<P, op::layer_norm, SX, SG, SB>::output> layer_norm(
    const Var<P, SX>& x, const Var<P, SG>& gamma, const Var<P, SB>& beta, double eps = 1e-5) {
  constexpr const char* name = "precis::layer_norm";
  Tape<P>& t = detail::ad::same_tape<P>(x, gamma, name);
  t.check(beta, name);
  const Shape& xs = x.shape();
  if (xs.rank() < 1 || gamma.shape().rank() != 1 || beta.shape().rank() != 1 || gamma.shape()[0] != xs.back() ||
      beta.shape()[0] != xs.back() || xs.back() == 0) {
    throw shape_error(std::string(name) + ": x " + xs.str() + ", gamma " + gamma.shape().str() + ", beta " +
                      beta.shape().str() + "; expected [..., d], [d], [d] with d > 0");
  }
  if (!(eps >= 0)) throw invalid_argument(std::string(name) + ": eps = " + std::to_string(eps) + "; expected >= 0");
  if (!x.value().is_contiguous()) return layer_norm(reshape(x, xs), gamma, beta, eps);  // a dense copy
  using T = policy::op_types<P, op::layer_norm, SX, SG, SB>;
  using Acc = detail::ad::arith_t<typename T::accumulate>;
  using O = typename T::output;
  const index_t d = xs.back(), rows = xs.numel() / d;
  auto y = t.template make<O>(xs, x.requires_grad() || gamma.requires_grad() || beta.requires_grad());
  auto* stats = t.arena().template allocate_array<Acc>(static_cast<std::size_t>(2 * rows));
  const auto xr = x.value().reshape(Shape{rows, d});
  const auto gv = gamma.value(), bv = beta.value();
  O* out = t.template value_view<O>(y.id()).data();
  const auto ld = [](const auto& v) { return detail::load<Acc>(detail::load<detail::ad::arith_t<detail::remove_cvref_t<decltype(v)>>>(v)); };
  for (index_t i = 0; i < rows; ++i) {
    const auto r = xr.select(0, i);
    const Acc mu = detail::sum_fiber<Acc>(r.data(), d, r.strides()[0], summation::pairwise, std::identity{}) / Acc(static_cast<double>(d));
    const Acc var = detail::sum_fiber<Acc>(r.data(), d, r.strides()[0], summation::pairwise,
                                           [mu](const Acc& v) { return Acc((v - mu) * (v - mu)); }) /
                    Acc(static_cast<double>(d));
    using std::sqrt;
    const Acc rstd = Acc(1) / sqrt(Acc(var + Acc(eps)));
    stats[2 * i] = mu;
    stats[2 * i + 1] = rstd;
    for (index_t j = 0; j < d; ++j) {
      out[i * d + j] = detail::store<O>(Acc((ld(r(j)) - mu) * rstd * ld(gv(j)) + ld(bv(j))));
    }
  }
  detail::ad::record(t, &detail::ad::layer_norm_backward<P, SX, SG, SB>, y, {x.id(), gamma.id(), beta.id()}, {stats});
  return y;
}

/// Mean over rows of -log softmax(logits)[row, label]: fused and stable (log-sum-exp per row in
/// the accumulator); the backward recomputes softmax from the saved log-sum-exp values.
template <class P, class S>
auto cross_entropy(const Var<P, S>& logits, std::span<const std::int64_t> labels) {
  constexpr const char* name = "precis::cross_entropy";
  Tape<P>& t = logits.tape();
  t.check(logits, name);
  if (logits.shape().rank() != 2) throw shape_error(std::string(name) + ": logits " + logits.shape().str() + "; expected [batch, classes]");
  policy::detail::check_labels(name, labels, logits.shape()[0], logits.shape()[1]);
  using T = policy::op_types<P, op::cross_entropy, S>;
  using Acc = detail::ad::arith_t<typename T::accumulate>;
  using O = typename T::output;
  const auto x = logits.value();
  const index_t rows = x.shape()[0];
  auto* lse = t.arena().template allocate_array<Acc>(static_cast<std::size_t>(rows));
  auto* terms = t.scratch().template allocate_array<Acc>(static_cast<std::size_t>(rows));
  for (index_t i = 0; i < rows; ++i) {
    const auto r = x.select(0, i);
    lse[i] = detail::logsumexp_fiber<Acc>(r.data(), r.shape()[0], r.strides()[0], summation::pairwise);
    terms[i] = lse[i] - detail::load<Acc>(detail::load<detail::ad::arith_t<S>>(r(labels[static_cast<std::size_t>(i)])));
  }
  auto y = detail::ad::mean_of_terms<O>(t, terms, rows, logits);
  detail::ad::record(t, &detail::ad::cross_entropy_backward<P, S>, y, {logits.id()}, {detail::ad::keep_labels(t, labels), lse});
  return y;
}

/// Mean over rows of -logp[row, label] for log-probabilities logp [batch, classes].
template <class P, class S>
auto nll(const Var<P, S>& logp, std::span<const std::int64_t> labels) {
  constexpr const char* name = "precis::nll";
  Tape<P>& t = logp.tape();
  t.check(logp, name);
  if (logp.shape().rank() != 2) throw shape_error(std::string(name) + ": input " + logp.shape().str() + "; expected [batch, classes]");
  policy::detail::check_labels(name, labels, logp.shape()[0], logp.shape()[1]);
  using T = policy::op_types<P, op::nll, S>;
  using Acc = detail::ad::arith_t<typename T::accumulate>;
  using O = typename T::output;
  const auto x = logp.value();
  const index_t rows = x.shape()[0];
  auto* terms = t.scratch().template allocate_array<Acc>(static_cast<std::size_t>(rows));
  for (index_t i = 0; i < rows; ++i) terms[i] = -detail::load<Acc>(detail::load<detail::ad::arith_t<S>>(x(i, labels[static_cast<std::size_t>(i)])));
  auto y = detail::ad::mean_of_terms<O>(t, terms, rows, logp);
  detail::ad::record(t, &detail::ad::nll_backward<P, S>, y, {logp.id()}, {detail::ad::keep_labels(t, labels)});
  return y;
}

/// Mean of (pred - target)^2 over all elements.
template <class P, class SP, class ST>
auto mse(const Var<P, SP>& pred, const Var<P, ST>& target) {
  constexpr const char* name = "precis::mse";
  Tape<P>& t = detail::ad::same_tape<P>(pred, target, name);
  if (!(pred.shape() == target.shape())) {
    throw shape_error(std::string(name) + ": prediction " + pred.shape().str() + " and target " + target.shape().str() + " differ");
  }
  using T = policy::op_types<P, op::mse, SP, ST>;
  using Acc = detail::ad::arith_t<typename T::accumulate>;
  using O = typename T::output;
  const auto sq = detail::ad::scratch<Acc>(t, pred.shape());
  map_into<Acc>(name, sq, [](const Acc& a, const Acc& b) { return Acc((a - b) * (a - b)); }, pred.value(), target.value());
  auto y = t.template make<O>(Shape{}, pred.requires_grad() || target.requires_grad());
  *t.template value_view<O>(y.id()).data() = detail::store<O>(
      Acc(detail::sum_fiber<Acc>(sq.data(), sq.size(), 1, summation::pairwise, std::identity{}) / Acc(static_cast<double>(sq.size()))));
  detail::ad::record(t, &detail::ad::mse_backward<P, SP, ST>, y, {pred.id(), target.id()});
  return y;
}

// ---- views and concatenation (values share memory; gradients flow back through the view) -----

/// Axes reversed (the matrix transpose for rank 2): a view.
template <class P, class S>
auto transpose(const Var<P, S>& x) {
  Tape<P>& t = x.tape();
  t.check(x, "precis::transpose");
  (void)policy::op_types<P, op::transpose, S>::safety_class;
  auto y = t.make_view(x, x.value().transpose());
  detail::ad::record(t, &detail::ad::transpose_backward<P, S>, y, {x.id()});
  return y;
}
/// Elements begin, begin + step, ... < end along `axis`: a view.
template <class P, class S>
auto slice(const Var<P, S>& x, int axis, index_t begin, index_t end, index_t step = 1) {
  Tape<P>& t = x.tape();
  t.check(x, "precis::slice");
  (void)policy::op_types<P, op::slice, S>::safety_class;
  const int a = normalize_axis(axis, x.shape().rank(), "precis::slice");
  auto y = t.make_view(x, x.value().slice(a, begin, end, step));
  detail::ad::record(t, &detail::ad::slice_backward<P, S>, y, {x.id()}, {}, {a, begin, step});
  return y;
}
/// The same elements in row-major order with another shape: a view of a contiguous value, a
/// copy of a strided one.
template <class P, class S>
auto reshape(const Var<P, S>& x, const Shape& shape) {
  constexpr const char* name = "precis::reshape";
  Tape<P>& t = x.tape();
  t.check(x, name);
  (void)policy::op_types<P, op::reshape, S>::safety_class;
  detail::check_extents(shape, name);
  if (shape.numel() != x.size()) {
    throw shape_error(std::string(name) + ": cannot view shape " + x.shape().str() + " (" + std::to_string(x.size()) +
                      " elements) as " + shape.str() + " (" + std::to_string(shape.numel()) + " elements)");
  }
  Var<P, S> y;
  if (x.value().is_contiguous()) {
    y = t.make_view(x, x.value().reshape(shape));
  } else {
    y = t.template make<S>(shape, x.requires_grad());
    Tape<P>::copy_into(x.value(), t.template value_view<S>(y.id()).reshape(x.shape()));
  }
  detail::ad::record(t, &detail::ad::reshape_backward<P, S>, y, {x.id()});
  return y;
}
/// Concatenation along `axis` of values of one storage type; every other extent must agree.
template <class P, class S>
auto cat(int axis, std::initializer_list<Var<P, S>> xs) {
  constexpr const char* name = "precis::cat";
  if (xs.size() == 0) throw invalid_argument(std::string(name) + ": no inputs; expected at least one");
  Tape<P>& t = xs.begin()->tape();
  for (const auto& x : xs) t.check(x, name);
  (void)policy::op_types<P, op::cat, S>::safety_class;
  Shape shape = xs.begin()->shape();
  const int a = normalize_axis(axis, shape.rank(), name);
  index_t total = 0;
  bool needs_grad = false;
  for (const auto& x : xs) {
    bool ok = x.shape().rank() == shape.rank();
    for (int i = 0; ok && i < shape.rank(); ++i) ok = i == a || x.shape()[i] == shape[i];
    if (!ok) throw shape_error(std::string(name) + ": shape " + x.shape().str() + " does not match " + shape.str() + " off axis " + std::to_string(a));
    total += x.shape()[a];
    needs_grad = needs_grad || x.requires_grad();
  }
  shape[a] = total;
  auto y = t.template make<S>(shape, needs_grad);
  auto* ids = t.arena().template allocate_array<std::uint32_t>(xs.size());
  index_t at = 0;
  std::size_t i = 0;
  for (const auto& x : xs) {
    const index_t len = x.shape()[a];
    Tape<P>::copy_into(x.value(), t.template value_view<S>(y.id()).slice(a, at, at + len));
    ids[i++] = x.id();
    at += len;
  }
  detail::ad::record(t, &detail::ad::cat_backward<P, S>, y, {}, {ids}, {a, static_cast<index_t>(xs.size())});
  return y;
}

}  // namespace precis
