// Reductions by selection: max and min over an axis (differentiable), argmax and argmin.
#pragma once

#include "precis/config.hpp"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "precis/ops/op.hpp"

namespace precis::detail::ad {

/// x [outer, len, inner] around `axis` (x contiguous).
inline std::array<index_t, 3> around_axis(const Shape& s, int axis) {
  index_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  return {outer, s[axis], inner};
}

/// For every fiber along `axis` of a contiguous x, the position of its largest (Max) or
/// smallest element; the first one on ties, a NaN wins (it propagates, as in IEEE max).
template <bool Max, class S, class F>
void select_along(const TensorView<const S>& x, int axis, F&& f) {
  using A = arith_t<detail::remove_cv_t<S>>;
  const auto [outer, len, inner] = around_axis(x.shape(), axis);
  for (index_t o = 0; o < outer; ++o) {
    for (index_t i = 0; i < inner; ++i) {
      const S* p = x.data() + o * len * inner + i;
      index_t best = 0;
      A bv = detail::load<A>(p[0]);
      for (index_t k = 1; k < len && bv == bv; ++k) {
        const A v = detail::load<A>(p[k * inner]);
        if (v != v || (Max ? v > bv : v < bv)) {
          best = k;
          bv = v;
        }
      }
      f(o * inner + i, best);
    }
  }
}

}  // namespace precis::detail::ad

namespace precis::op {

template <class Op, bool Max>
struct select_def : def<policy::safety::neutral> {
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
    const auto inner = detail::ad::around_axis(xc.shape(), ax)[2];
    const auto len = xc.shape()[ax];
    detail::ad::select_along<Max>(xc, ax, [&](index_t f, index_t k) {
      const index_t o = f / inner, i = f % inner;
      y.data()[f] = detail::store<O>(detail::ad::ld<detail::ad::arith_t<O>>(xc.data()[(o * len + k) * inner + i]));
      if (pos) pos[f] = static_cast<std::int32_t>(k);
    });
    sv.pos = pos;
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    const auto& g = std::get<0>(gx);
    if (g.data() == nullptr) return;
    using R = detail::ad::arith_t<GX>;
    const int ax = normalize_axis(a.axis, g.rank(), detail::ad::name_of<Op>());
    const auto [outer, len, inner] = detail::ad::around_axis(g.shape(), ax);
    (void)ctx;
    for (index_t f = 0; f < outer * inner; ++f) {
      const index_t o = f / inner, i = f % inner;
      GX& d = g.data()[(o * len + sv.pos[f]) * inner + i];
      d = detail::store<GX>(R(detail::ad::ld<R>(d) + detail::ad::ld<R>(gy.data()[f])));
    }
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
template <class P, class S>
std::vector<std::int64_t> argmax(const Var<P, S>& x, int axis) {
  return detail::ad::arg_select<true>(x.value(), axis, "precis::argmax");
}
template <tensor_like X>
std::vector<std::int64_t> argmin(const X& x, int axis) {
  return detail::ad::arg_select<false>(as_view(x), axis, "precis::argmin");
}
template <class P, class S>
std::vector<std::int64_t> argmin(const Var<P, S>& x, int axis) {
  return detail::ad::arg_select<false>(x.value(), axis, "precis::argmin");
}

}  // namespace precis
