// Reductions: sum, mean, norm and logsumexp (over one axis or all elements), softmax and
// log_softmax, max and min over an axis by selection (differentiable), argmax and argmin.
#pragma once

#include "precis/config.hpp"

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "precis/ops/op.hpp"

namespace precis::op {

namespace fn_ {
/// A reduction's derivative D(g, x, y, count) in the gradient's arithmetic (count: the
/// fiber's length, exact in T).
template <class D, class T>
struct d_reduce {
  T count;
  PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T& y) const { return D{}(g, x, y, count); }
};
}  // namespace fn_

/// A summing reduction over one axis (attrs.all = false) or over every element (true). Its
/// forward sums in the accumulator (ctx.reduce: pairwise on the host); its backward is
/// element-wise: the output's gradient times D(x, y), broadcast back over the reduced axis, in
/// the arithmetic type.
template <class Op, reduction R, class D>
struct reduce_def : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  struct attrs {
    int axis = 0;
    bool all = true;
  };

  static Shape shape(const attrs& a, const Shape& x) {
    const char* name = detail::ad::name_of<Op>();
    const int ax = a.all ? 0 : normalize_axis(a.axis, x.rank(), name);
    if (a.all ? x.numel() == 0 : x[ax] == 0) {
      throw shape_error(std::string(name) + ": input " + x.str() + (a.all ? "" : " along axis " + std::to_string(ax)) +
                        " is empty; expected at least one element to reduce");
    }
    return a.all ? Shape{} : x.erased(ax);
  }
  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    const char* name = detail::ad::name_of<Op>();
    const int ax = a.all ? 0 : normalize_axis(a.axis, x.rank(), name);
    ctx.template reduce<typename T::accumulator, R>(name, x, a.all, ax, y);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>& y,
                       const std::tuple<TensorView<const X>>& x, const std::tuple<TensorView<GX>>& gx) {
    const auto& g = std::get<0>(gx);
    if (g.data() == nullptr) return;
    using A = typename T::arithmetic;
    const Shape& xs = std::get<0>(x).shape();
    const int ax = a.all ? 0 : normalize_axis(a.axis, xs.rank(), detail::ad::name_of<Op>());
    const Shape s = a.all ? Shape{} : detail::ad::keep_axis(xs, ax);
    const A count = A(static_cast<double>(a.all ? xs.numel() : xs[ax]));  // exact in A
    ctx.template accumulate<A>(detail::ad::name_of<Op>(), g, fn_::d_reduce<D, A>{count}, TensorView<const G>(gy.data(), s),
                              std::get<0>(x), TensorView<const O>(y.data(), s));
  }
};

namespace fn_ {
struct d_sum { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T&, const T&) const { return g; } };
struct d_mean { template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T&, const T&, const T& n) const { return g / n; } };
/// d||x|| / dx = x / ||x|| (0 at x = 0).
struct d_norm {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T& y, const T&) const {
    return y == T(0) ? T(0) : T(g * x / y);
  }
};
struct d_logsumexp {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& x, const T& y, const T&) const {
    using std::exp;
    return g * exp(x - y);
  }
};
/// softmax's gradient y (g - s) and log_softmax's g - exp(y) s (s: the fiber's backward sum).
struct d_softmax {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& y, const T& s) const { return T(y * (g - s)); }
};
struct d_log_softmax {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& g, const T& y, const T& s) const {
    using std::exp;
    return T(g - exp(y) * s);
  }
};
}  // namespace fn_

struct sum : reduce_def<sum, reduction::sum, fn_::d_sum> {
  static constexpr std::string_view name = "sum";
  static constexpr std::string_view reason =
      "accumulation length: 4096 values of 32 sum to 131072 > 65504 (fp16 overflow); fp16 sums of ones stop "
      "at 2048 and bf16 at 256 (numerics case 2)";
};
struct mean : reduce_def<mean, reduction::mean, fn_::d_mean> {
  static constexpr std::string_view name = "mean";
  static constexpr std::string_view reason = "a sum divided by n: the same accumulation";
};
struct norm : reduce_def<norm, reduction::norm, fn_::d_norm> {
  static constexpr std::string_view name = "norm";
  static constexpr std::string_view reason =
      "squares overflow fp16 for |x| > 255.9 (sqrt(65504)) and flush for |x| < 2^-12.5; then a sum";
};
struct logsumexp : reduce_def<logsumexp, reduction::logsumexp, fn_::d_logsumexp> {
  static constexpr std::string_view name = "logsumexp";
  static constexpr std::string_view reason = "softmax's sum of exponentials";
};

/// softmax (Log = false) or log_softmax along an axis: the sum of exponentials in the
/// accumulator; the backward's per-fiber sums too.
template <class Op, bool Log>
struct softmax_def : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  struct attrs {
    int axis = -1;
  };

  static Shape shape(const attrs& a, const Shape& x) {
    (void)normalize_axis(a.axis, x.rank(), detail::ad::name_of<Op>());
    return x;
  }
  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    const char* name = detail::ad::name_of<Op>();
    ctx.template softmax<typename T::accumulator, Log>(name, x, normalize_axis(a.axis, x.rank(), name), y);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>&, const TensorView<const G>& g, const TensorView<const O>& y,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    using Acc = typename T::accumulator;
    using A = typename T::arithmetic;
    const int axis = normalize_axis(a.axis, y.rank(), detail::ad::name_of<Op>());
    const auto s = ctx.template temp<Acc>(y.shape().erased(axis));
    ctx.template softmax_sums<Acc, Log>(g, y, axis, s);  // sum over the axis of g y (softmax) or of g (log_softmax)
    const TensorView<const Acc> sb(s.data(), detail::ad::keep_axis(y.shape(), axis));
    // softmax: dx = y (g - s); log_softmax: dx = g - softmax s
    ctx.template accumulate<A>(detail::ad::name_of<Op>(), std::get<0>(gx),
                              std::conditional_t<Log, fn_::d_log_softmax, fn_::d_softmax>{}, g, y, sb);
  }
};

struct softmax : softmax_def<softmax, false> {
  static constexpr std::string_view name = "softmax";
  static constexpr std::string_view reason =
      "sum of n exponentials: exceeds 65504 in fp16 for a softmax over more than 65504 near-equal logits "
      "(vocabulary-sized), and low-precision accumulation stagnates (numerics cases 2-3)";
};
struct log_softmax : softmax_def<log_softmax, true> {
  static constexpr std::string_view name = "log_softmax";
  static constexpr std::string_view reason = "x - logsumexp(x): softmax's sum, then a difference of nearby values";
};

template <class Op, bool Max>
struct select_def : def<policy::safety::neutral> {
  static constexpr bool context_only = true;
  struct attrs {
    int axis = -1;
  };
  template <class T>
  struct saved {
    const std::int32_t* pos = nullptr;  // the selected position along the axis, per fiber
  };

  static Shape shape(const attrs& a, const Shape& x) {
    const int ax = normalize_axis(a.axis, x.rank(), detail::ad::name_of<Op>());
    if (x[ax] == 0) {
      throw shape_error(std::string(detail::ad::name_of<Op>()) + ": input " + x.str() + " is empty along axis " +
                        std::to_string(ax) + "; expected at least one element to select");
    }
    return x.erased(ax);
  }
  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x) {
    const int ax = normalize_axis(a.axis, x.rank(), detail::ad::name_of<Op>());
    const auto xc = ctx.template as<detail::remove_const_t<X>>(x, false);
    std::int32_t* pos = ctx.saving() ? ctx.template keep_array<std::int32_t>(y.size()) : nullptr;
    ctx.template select<Max>(xc, ax, y, pos);
    sv.pos = pos;
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    const auto& g = std::get<0>(gx);
    if (g.data() == nullptr) return;
    ctx.add_selected(gy, sv.pos, normalize_axis(a.axis, g.rank(), detail::ad::name_of<Op>()), g);
  }
};

struct max : select_def<max, true> {
  static constexpr std::string_view name = "max";
  static constexpr std::string_view reason = "reduction by selection: exact";
};
struct min : select_def<min, false> {
  static constexpr std::string_view name = "min";
  static constexpr std::string_view reason = "reduction by selection: exact";
};

}  // namespace precis::op

namespace precis {

/// The sum of all elements, or along `axis` (op::sum).
template <class P, class S>
auto sum(const Var<P, S>& x) { return record<op::sum>({0, true}, x); }
template <class P, class S>
auto sum(const Var<P, S>& x, int axis) { return record<op::sum>({axis, false}, x); }
template <class P, class S>
auto mean(const Var<P, S>& x) { return record<op::mean>({0, true}, x); }
template <class P, class S>
auto mean(const Var<P, S>& x, int axis) { return record<op::mean>({axis, false}, x); }
/// The Euclidean norm (scaled, so squares neither overflow nor underflow).
template <class P, class S>
auto norm(const Var<P, S>& x) { return record<op::norm>({0, true}, x); }
template <class P, class S>
auto norm(const Var<P, S>& x, int axis) { return record<op::norm>({axis, false}, x); }
template <class P, class S>
auto logsumexp(const Var<P, S>& x, int axis) { return record<op::logsumexp>({axis, false}, x); }
template <class P, class S>
auto softmax(const Var<P, S>& x, int axis) { return record<op::softmax>({axis}, x); }
template <class P, class S>
auto log_softmax(const Var<P, S>& x, int axis) { return record<op::log_softmax>({axis}, x); }

/// The largest element along `axis` (the first on ties); its gradient goes to that element.
template <class P, class S>
auto max(const Var<P, S>& x, int axis) { return record<op::max>({axis}, x); }
/// The smallest element along `axis` (the first on ties).
template <class P, class S>
auto min(const Var<P, S>& x, int axis) { return record<op::min>({axis}, x); }

namespace detail::ad {
template <bool Max, class S, class C>
std::vector<std::int64_t> arg_select(const TensorView<S, C>& x, int axis, const char* name) {
  const int ax = normalize_axis(axis, x.rank(), name);
  if (x.shape()[ax] == 0) {
    throw shape_error(std::string(name) + ": input " + x.shape().str() + " is empty along axis " + std::to_string(ax));
  }
  const Tensor<detail::remove_const_t<S>> xc(x);
  std::vector<std::int64_t> out(static_cast<std::size_t>(x.size() / x.shape()[ax]));
  select_along<Max>(xc.view(), ax, [&](index_t f, index_t k) { out[static_cast<std::size_t>(f)] = k; });
  return out;
}
}  // namespace detail::ad

/// The position of the largest element along `axis` (first on ties), per fiber, in row-major
/// order of the remaining axes: predicted classes are argmax(logits, 1). Not differentiable.
template <tensor_like X>
std::vector<std::int64_t> argmax(const X& x, int axis) {
  return detail::ad::arg_select<true>(as_view(x), axis, "precis::argmax");
}
/// On a backend whose memory the host cannot touch, x is copied to the host first (to_host).
template <class P, class S>
std::vector<std::int64_t> argmax(const Var<P, S>& x, int axis) {
  if constexpr (backend_t<P>::host_memory) return detail::ad::arg_select<true>(x.value(), axis, "precis::argmax");
  else return detail::ad::arg_select<true>(to_host(x).view(), axis, "precis::argmax");
}
template <tensor_like X>
std::vector<std::int64_t> argmin(const X& x, int axis) {
  return detail::ad::arg_select<false>(as_view(x), axis, "precis::argmin");
}
template <class P, class S>
std::vector<std::int64_t> argmin(const Var<P, S>& x, int axis) {
  if constexpr (backend_t<P>::host_memory) return detail::ad::arg_select<false>(x.value(), axis, "precis::argmin");
  else return detail::ad::arg_select<false>(to_host(x).view(), axis, "precis::argmin");
}

}  // namespace precis
