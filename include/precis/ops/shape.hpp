// Ops of the op layer that move values without arithmetic: transpose, slice and reshape (views
// of their input's memory), and cat (a copy).
#pragma once

#include "precis/config.hpp"

#include <initializer_list>
#include <new>
#include <array>
#include <string>
#include <tuple>

#include "precis/ops/op.hpp"

namespace precis::op {

/// Gradients of a view op: gy added into gx seen through the same view.
template <class Op>
struct view_def : def<policy::safety::neutral> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr bool is_view = true;
  template <class T, class Ctx, class Attrs, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const Attrs& a, const saved<T>&, const TensorView<const G>& gy,
                       const TensorView<const O>&, const std::tuple<TensorView<const X>>&,
                       const std::tuple<TensorView<GX>>& gx) {
    const auto& g = std::get<0>(gx);
    if (g.data() == nullptr) return;
    ctx.template add_into<detail::ad::arith_t<GX>>(detail::ad::name_of<Op>(), Op::view(a, g), gy);
  }
};

/// The axes reversed (the matrix transpose for rank 2).
struct transpose : view_def<transpose> {
  static constexpr std::string_view name = "transpose";
  static constexpr std::string_view reason = "moves no value";
  template <class S, class C>
  static auto view(const attrs&, const TensorView<S, C>& x) {
    return x.transpose();
  }
};

/// Elements begin, begin + step, ... < end along an axis.
struct slice : view_def<slice> {
  static constexpr std::string_view name = "slice";
  static constexpr std::string_view reason = "moves no value";
  struct attrs {
    int axis = 0;
    index_t begin = 0, end = 0, step = 1;
  };
  template <class S, class C>
  static auto view(const attrs& a, const TensorView<S, C>& x) {
    return x.slice(normalize_axis(a.axis, x.rank(), "precis::slice"), a.begin, a.end, a.step);
  }
};

/// The same elements in row-major order with another shape: a view of a contiguous input; the
/// tape copies a strided one (copies_strided).
struct reshape : view_def<reshape> {
  static constexpr std::string_view name = "reshape";
  static constexpr std::string_view reason = "moves no value";
  static constexpr bool copies_strided = true;
  static constexpr std::array<bool, 1> shares_gradient{true};
  struct attrs {
    Shape shape;
  };
  static Shape shape(const attrs& a, const Shape& x) {
    detail::check_extents(a.shape, "precis::reshape");
    if (a.shape.numel() != x.numel()) {
      throw shape_error("precis::reshape: cannot view shape " + x.str() + " (" + std::to_string(x.numel()) +
                        " elements) as " + a.shape.str() + " (" + std::to_string(a.shape.numel()) + " elements)");
    }
    return a.shape;
  }
  template <class S, class C>
  static auto view(const attrs& a, const TensorView<S, C>& x) {
    (void)shape(a, x.shape());
    return x.reshape(a.shape);
  }
};

/// Concatenation along an axis; every other extent must agree. The output is in the widest
/// input type; each input's gradient is its slice of the output's.
struct cat : def<policy::safety::promote> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "cat";
  static constexpr std::string_view reason = "copies: exact in the widest input type";
  struct attrs {
    int axis = 0;
  };

  /// The shape of `so_far` with x appended along the axis.
  static Shape join(const attrs& a, Shape so_far, const Shape& x) {
    const int ax = normalize_axis(a.axis, so_far.rank(), "precis::cat");
    bool ok = x.rank() == so_far.rank();
    for (int i = 0; ok && i < x.rank(); ++i) ok = i == ax || x[i] == so_far[i];
    if (!ok) {
      throw shape_error("precis::cat: shape " + x.str() + " does not match " + so_far.str() + " off axis " +
                        std::to_string(ax));
    }
    so_far[ax] += x[ax];
    return so_far;
  }
  template <class... S>
  static Shape shape(const attrs& a, const Shape& first, const S&... rest) {
    Shape s = first;
    s[normalize_axis(a.axis, s.rank(), "precis::cat")] = 0;
    s = join(a, s, first);
    ((s = join(a, s, rest)), ...);
    return s;
  }
  /// y's slice at `at` along the axis = x; returns the next position.
  template <class Ctx, class O, class X>
  static index_t place(const Ctx& ctx, const attrs& a, const TensorView<O>& y, index_t at, const TensorView<const X>& x) {
    const int ax = normalize_axis(a.axis, y.rank(), "precis::cat");
    const index_t len = x.shape()[ax];
    ctx.copy(x, y.slice(ax, at, at + len));
    return at + len;
  }
  /// gx += gy's slice at `at`; returns the next position.
  template <class Ctx, class G, class GX>
  static index_t take(const Ctx& ctx, const attrs& a, const TensorView<const G>& gy, index_t at, const TensorView<GX>& gx, index_t len) {
    const int ax = normalize_axis(a.axis, gy.rank(), "precis::cat");
    if (gx.data()) ctx.template add_into<detail::ad::arith_t<GX>>("precis::cat", gx, gy.slice(ax, at, at + len));
    return at + len;
  }
  template <class T, class Ctx, class O, class... X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>&... x) {
    index_t at = 0;
    ((at = place(ctx, a, y, at, x)), ...);
  }
  template <class T, class Ctx, class G, class O, class... X, class... GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>...>& x, const std::tuple<TensorView<GX>...>& gx) {
    const int ax = normalize_axis(a.axis, gy.rank(), "precis::cat");
    index_t at = 0;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((at = take(ctx, a, gy, at, std::get<I>(gx), std::get<I>(x).shape()[ax])), ...);
    }(std::index_sequence_for<X...>{});
  }
};

}  // namespace precis::op

namespace precis {

/// The axes reversed: a view (op::transpose).
template <class P, class S>
auto transpose(const Var<P, S>& x) { return record<op::transpose>({}, x); }
/// Elements begin, begin + step, ... < end along `axis`: a view (op::slice).
template <class P, class S>
auto slice(const Var<P, S>& x, int axis, index_t begin, index_t end, index_t step = 1) {
  return record<op::slice>({axis, begin, end, step}, x);
}
/// The same elements in row-major order with another shape: a view of a contiguous value, a
/// copy of a strided one (op::reshape).
template <class P, class S>
auto reshape(const Var<P, S>& x, const Shape& shape) { return record<op::reshape>({shape}, x); }

namespace detail::ad {
/// cat over a run-time list of values: the state holds the axis and the inputs' ids.
struct cat_state {
  op::cat::attrs attrs;
  std::size_t count;
  const std::uint32_t* in;
};
template <class P, class S>
void cat_backward(Tape<P>& t, const node_t<P>& n) {
  using G = grad_t<P, S>;
  const auto& st = *static_cast<const cat_state*>(n.state);
  const auto ctx = t.context(false);  // no fresh buffers: every take adds
  const auto gy = t.template grad_view<G>(n.out).as_const();
  const int ax = normalize_axis(st.attrs.axis, gy.rank(), "precis::cat");
  index_t at = 0;
  for (std::size_t i = 0; i < st.count; ++i) {
    const std::uint32_t id = st.in[i];
    const index_t len = t.slot(id).shape[ax];
    at = op::cat::take(ctx, st.attrs, gy, at, grad_or_empty<G>(t, id), len);
  }
}
}  // namespace detail::ad

/// Concatenation along `axis` of values of one storage type (op::cat).
template <class P, class S>
auto cat(int axis, std::initializer_list<Var<P, S>> xs) {
  constexpr const char* name = "precis::cat";
  if (xs.size() == 0) throw invalid_argument(std::string(name) + ": no inputs; expected at least one");
  Tape<P>& t = xs.begin()->tape();
  for (const auto& x : xs) t.check(x, name);
  const op::cat::attrs a{axis};
  Shape shape = xs.begin()->shape();
  shape[normalize_axis(axis, shape.rank(), name)] = 0;
  bool needs_grad = false;
  for (const auto& x : xs) {
    shape = op::cat::join(a, shape, x.shape());
    needs_grad = needs_grad || x.requires_grad();
  }
  auto y = t.template make<S>(shape, needs_grad && t.grad_enabled());
  index_t at = 0;
  {
    const auto ctx = t.context(false);
    for (const auto& x : xs) at = op::cat::place(ctx, a, t.template value_view<S>(y.id()), at, x.value());
  }
  if (y.requires_grad()) {
    auto* ids = t.state_arena().template allocate_array<std::uint32_t>(xs.size());
    std::size_t i = 0;
    for (const auto& x : xs) ids[i++] = x.id();
    auto* st = new (t.state_arena().allocate(sizeof(detail::ad::cat_state))) detail::ad::cat_state{a, xs.size(), ids};
    typename Tape<P>::Node n{};
    n.backward = &detail::ad::cat_backward<P, S>;
    n.out = y.id();
    n.state = st;
    t.record(n, std::span<const std::uint32_t>(ids, xs.size()));
  }
  t.end_op();
  return y;
}

}  // namespace precis
