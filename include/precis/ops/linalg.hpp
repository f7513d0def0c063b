// Ops of the op layer that multiply or reorder matrices: matmul, linear, batched matmul,
// permute (a view).
#pragma once

#include "precis/config.hpp"

#include <string>
#include <tuple>

#include "precis/ops/op.hpp"

namespace precis::detail::ad {

/// The row-major index, in a batch shape `in` right-aligned to and broadcast against `out`, of
/// position l of `out`.
inline index_t broadcast_index(const Shape& out, const Shape& in, index_t l) {
  index_t r = 0, scale = 1;
  for (int i = out.rank() - 1, j = in.rank() - 1; i >= 0; --i, --j) {
    const index_t c = l % out[i];
    l /= out[i];
    if (j >= 0) {
      if (in[j] != 1) r += c * scale;
      scale *= in[j];
    }
  }
  return r;
}

/// The leading (batch) axes of a shape of rank >= 2.
inline Shape batch_of(const Shape& s) {
  Shape b;
  for (int i = 0; i + 2 < s.rank(); ++i) b.push_back(s[i]);
  return b;
}

/// Matrix `i` of a contiguous [..., r, c] view, as a 2-D view.
template <class S>
TensorView<S> matrix(const TensorView<S>& v, index_t i) {
  const index_t r = v.shape()[v.rank() - 2], c = v.shape()[v.rank() - 1];
  return TensorView<S>(v.data() + i * r * c, Shape{r, c});
}

}  // namespace precis::detail::ad

namespace precis::op {

/// Axes reordered (axis i of the result is axis perm[i] of x): a view; the gradient flows back
/// through the inverse reordering.
struct permute : def<policy::safety::neutral> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "permute";
  static constexpr std::string_view reason = "moves no value";
  static constexpr bool is_view = true;
  struct attrs {
    Shape perm;
  };
  template <class S, class C>
  static auto view(const attrs& a, const TensorView<S, C>& x) {
    return x.permute(a.perm);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;
    ctx.template add_into<detail::ad::arith_t<GX>>("precis::permute", std::get<0>(gx).permute(a.perm), gy);
  }
};

/// a [m, k] times b [k, n]: both read in the op's storage type (a wider input is rounded once
/// and the rounded copy kept for the backward), products accumulated in its accumulator. Under an
/// fp8 policy both are cast to scaled e4m3 and the output gradient to scaled e5m2; the products
/// are divided by the scales in the accumulator.
struct matmul : def<policy::safety::low_precision_safe> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "matmul";
  static constexpr std::string_view reason =
      "a product of two fp16/bf16/fp8 values is exact in fp32, so the error comes from the accumulator "
      "alone: gamma_K(u_acc) (block-FMA bound, numerics case 9); a wide accumulator makes K harmless";
  static constexpr bool scaled_fp8 = true;
  template <class T>
  struct saved {
    TensorView<const typename T::storage> a, b;
    detail::ad::gemm_scales sc;
  };

  static Shape shape(const attrs&, const Shape& a, const Shape& b) {
    if (a.rank() != 2 || b.rank() != 2 || a[1] != b[0]) {
      throw shape_error("precis::matmul: A " + a.str() + " times B " + b.str() + "; expected [m, k] and [k, n]");
    }
    return Shape{a[0], b[1]};
  }
  template <class T, class Ctx, class O, class A, class B>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>& sv, const TensorView<const A>& a,
                      const TensorView<const B>& b) {
    if constexpr (detail::ad::scaled<T>) sv.sc.fp8 = &ctx.fp8_gemm(name);
    sv.a = detail::ad::gemm_operand<T, 0>(ctx, a, sv.sc);
    sv.b = detail::ad::gemm_operand<T, 1>(ctx, b, sv.sc);
    ctx.template gemm<typename T::accumulator>(y, sv.a, sv.b, false, fp8::descale(sv.sc.s0, sv.sc.s1));
  }
  template <class T, class Ctx, class G, class O, class A, class B, class GA, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const G>& gy,
                       const TensorView<const O>&, const std::tuple<TensorView<const A>, TensorView<const B>>&,
                       const std::tuple<TensorView<GA>, TensorView<GB>>& gx) {
    using Acc = typename T::accumulator;
    fp8::scale_ref sg;
    const auto g = detail::ad::grad_operand<T>(ctx, gy, sv.sc, sg);
    if (std::get<0>(gx).data()) ctx.template gemm<Acc>(std::get<0>(gx), g, sv.b.transpose(), true, fp8::descale(sg, sv.sc.s1));
    if (std::get<1>(gx).data()) ctx.template gemm<Acc>(std::get<1>(gx), sv.a.transpose(), g, true, fp8::descale(sv.sc.s0, sg));
  }
};

/// x W^T (+ bias) for x [batch, in], W [out, in], bias [out]: a matmul whose bias is added in
/// the accumulator before the one rounding to the output type (the context's gemm_bias: on the
/// CPU the bias starts each sum, on the GPU the GEMM's epilogue adds it to the fp32 sum; fp8
/// policies: as matmul; the bias gradient is summed from the unscaled output gradient).
struct linear : def<policy::safety::low_precision_safe> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "linear";
  static constexpr std::string_view reason = "x W^T + b: a matmul; the bias is added in the accumulator before the one rounding";
  static constexpr bool scaled_fp8 = true;
  template <class T>
  struct saved {
    TensorView<const typename T::storage> x, w;
    detail::ad::gemm_scales sc;
  };

  template <class... B>
  static Shape shape(const attrs&, const Shape& x, const Shape& w, const B&... bias) {
    bool ok = x.rank() == 2 && w.rank() == 2 && x[1] == w[1];
    ((ok = ok && bias.rank() == 1 && bias[0] == w[0]), ...);
    if (!ok) {
      std::string b;
      ((b = ", bias " + bias.str()), ...);
      throw shape_error("precis::linear: x " + x.str() + ", W " + w.str() + b + "; expected [batch, in], [out, in]" +
                        (sizeof...(B) ? ", [out]" : ""));
    }
    return Shape{x[0], w[0]};
  }
  template <class T, class Ctx, class O, class X, class W, class... B>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x,
                      const TensorView<const W>& w, const TensorView<const B>&... bias) {
    using Acc = typename T::accumulator;
    if constexpr (detail::ad::scaled<T>) sv.sc.fp8 = &ctx.fp8_gemm(name);
    sv.x = detail::ad::gemm_operand<T, 0>(ctx, x, sv.sc);
    sv.w = detail::ad::gemm_operand<T, 1>(ctx, w, sv.sc);
    const fp8::gemm_alpha alpha = fp8::descale(sv.sc.s0, sv.sc.s1);
    if constexpr (sizeof...(B) == 0) ctx.template gemm<Acc>(y, sv.x, sv.w.transpose(), false, alpha);
    else ctx.template gemm_bias<Acc>(y, sv.x, sv.w.transpose(), bias..., alpha);
  }
  template <class T, class Ctx, class G, class O, class... X, class... GX>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const G>& gy,
                       const TensorView<const O>&, const std::tuple<TensorView<const X>...>&,
                       const std::tuple<TensorView<GX>...>& gx) {
    using Acc = typename T::accumulator;
    fp8::scale_ref sg;
    const auto g = detail::ad::grad_operand<T>(ctx, gy, sv.sc, sg);
    if (std::get<0>(gx).data()) ctx.template gemm<Acc>(std::get<0>(gx), g, sv.w, true, fp8::descale(sg, sv.sc.s1));
    if (std::get<1>(gx).data()) ctx.template gemm<Acc>(std::get<1>(gx), g.transpose(), sv.x, true, fp8::descale(sg, sv.sc.s0));
    if constexpr (sizeof...(GX) == 3) {  // from the unscaled gradient
      const auto& gb = std::get<2>(gx);
      if (gb.data() == nullptr) return;
      // the bias: column sums of g in Acc
      const auto col = ctx.template temp<Acc>(Shape{gy.shape()[1]});
      ctx.sum_rows(col, gy);
      ctx.template add_into<default_compute_t<Acc>>("precis::linear", gb, col.as_const());
    }
  }
};

/// Batched matrix product a [..., m, k] b [..., k, n] -> [..., m, n]; the batch axes broadcast
/// (NumPy's matmul rule). Both operands are read in the policy's storage type and their
/// products accumulated in its accumulator, as for matmul.
struct bmm : def<policy::safety::low_precision_safe> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "bmm";
  static constexpr std::string_view reason =
      "a batch of matmuls: each product is exact in fp32 and only the wide accumulator rounds";
  template <class T>
  struct saved {
    TensorView<const typename T::storage> a, b;
  };

  static Shape shape(const attrs&, const Shape& a, const Shape& b) {
    if (a.rank() < 2 || b.rank() < 2 || a[a.rank() - 1] != b[b.rank() - 2]) {
      throw shape_error("precis::bmm: a " + a.str() + " times b " + b.str() +
                        "; expected a [..., m, k] and b [..., k, n] with the same k");
    }
    Shape s = broadcast_shapes(detail::ad::batch_of(a), detail::ad::batch_of(b), "precis::bmm (batch axes)");
    s.push_back(a[a.rank() - 2]);
    s.push_back(b[b.rank() - 1]);
    return s;
  }

  template <class T, class Ctx, class O, class A, class B>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>& sv, const TensorView<const A>& a,
                      const TensorView<const B>& b) {
    using L = typename T::storage;
    using Acc = typename T::accumulator;
    sv.a = ctx.template as<L>(a, true);
    sv.b = ctx.template as<L>(b, true);
    const Shape yb = detail::ad::batch_of(y.shape()), ab = detail::ad::batch_of(a.shape()), bb = detail::ad::batch_of(b.shape());
    const index_t m = y.shape()[y.rank() - 2], n = y.shape()[y.rank() - 1];
    const auto acc = ctx.template temp<Acc>(Shape{m, n});
    for (index_t i = 0; i < yb.numel(); ++i) {
      const auto ai = detail::ad::matrix(sv.a, detail::ad::broadcast_index(yb, ab, i));
      const auto bi = detail::ad::matrix(sv.b, detail::ad::broadcast_index(yb, bb, i));
      ctx.gemm(acc, ai, bi, false);
      ctx.copy(acc.as_const(), detail::ad::matrix(y, i));
    }
  }

  template <class T, class Ctx, class G, class O, class A, class B, class GA, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const A>, TensorView<const B>>&,
                       const std::tuple<TensorView<GA>, TensorView<GB>>& gx) {
    using Acc = typename T::accumulator;
    const Shape yb = detail::ad::batch_of(gy.shape());
    // each gradient is summed over the batch (and its broadcast axes) in Acc, rounded once
    const auto grad = [&](const auto& g, const Shape& own, auto product) {
      if (g.data() == nullptr) return;
      const auto acc = ctx.template zeros<Acc>(g.shape());
      const Shape ob = detail::ad::batch_of(own);
      for (index_t i = 0; i < yb.numel(); ++i) product(detail::ad::matrix(acc, detail::ad::broadcast_index(yb, ob, i)), i);
      ctx.template add_into<Acc>("precis::bmm", g, acc.as_const());
    };
    const Shape ab = detail::ad::batch_of(sv.a.shape()), bb = detail::ad::batch_of(sv.b.shape());
    grad(std::get<0>(gx), sv.a.shape(), [&](const TensorView<Acc>& c, index_t i) {  // ga += g b^T
      ctx.gemm(c, detail::ad::matrix(gy, i), detail::ad::matrix(sv.b, detail::ad::broadcast_index(yb, bb, i)).transpose(), true);
    });
    grad(std::get<1>(gx), sv.b.shape(), [&](const TensorView<Acc>& c, index_t i) {  // gb += a^T g
      ctx.gemm(c, detail::ad::matrix(sv.a, detail::ad::broadcast_index(yb, ab, i)).transpose(), detail::ad::matrix(gy, i), true);
    });
  }
};

}  // namespace precis::op

namespace precis {

/// a [m, k] times b [k, n] (op::matmul).
template <class P, class SA, class SB>
auto matmul(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::matmul>({}, a, b); }
/// x W^T + bias for x [batch, in], W [out, in], bias [out] (op::linear).
template <class P, class SX, class SW, class SB>
auto linear(const Var<P, SX>& x, const Var<P, SW>& w, const Var<P, SB>& bias) { return record<op::linear>({}, x, w, bias); }
/// x W^T without a bias.
template <class P, class SX, class SW>
auto linear(const Var<P, SX>& x, const Var<P, SW>& w) { return record<op::linear>({}, x, w); }

/// Axes reordered: axis i of the result is axis perm[i] of x (a view).
template <class P, class S>
auto permute(const Var<P, S>& x, const Shape& perm) { return record<op::permute>({perm}, x); }
template <class P, tensor_like X>
auto permute(const X& x, const Shape& perm) { return evaluate<P, op::permute>({perm}, x); }
/// Axes a and b swapped (a view).
template <class P, class S>
auto transpose(const Var<P, S>& x, int a, int b) {
  const int r = x.shape().rank();
  Shape perm;
  for (int i = 0; i < r; ++i) perm.push_back(i);
  const int ia = normalize_axis(a, r, "precis::transpose"), ib = normalize_axis(b, r, "precis::transpose");
  perm[ia] = ib;
  perm[ib] = ia;
  return permute(x, perm);
}

/// Batched matrix product with broadcast batch axes: a [..., m, k] b [..., k, n].
template <class P, class SA, class SB>
auto bmm(const Var<P, SA>& a, const Var<P, SB>& b) { return record<op::bmm>({}, a, b); }
template <class P, tensor_like A, tensor_like B>
auto bmm(const A& a, const B& b) { return evaluate<P, op::bmm>({}, a, b); }

}  // namespace precis
