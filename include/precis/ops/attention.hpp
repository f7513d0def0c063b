// Scaled dot-product attention, fused: softmax(q k^T scale + mask) v, with the two products in
// the policy's compute type and accumulator and the softmax between them in the accumulator
// (the wide type under a mixed policy). The probabilities are kept in the accumulator type for
// the backward; they are rounded to the compute type only as the operand of the second product,
// as a tensor-core kernel would.
#pragma once

#include "precis/config.hpp"

#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>

#include "precis/ops/linalg.hpp"
#include "precis/ops/op.hpp"

namespace precis::detail::ad {

/// Matrix i of attention's operands: with one head, matrix i of the contiguous [..., r, c] view
/// v; with H heads, v is [..., r, H c] and matrix i is head i % H of its entry i / H, columns
/// (i % H) c to (i % H + 1) c of each row (rows H c apart: a view, nothing copied).
template <class S>
TensorView<S> head_matrix(const TensorView<S>& v, index_t i, index_t heads) {
  if (heads == 1) return matrix(v, i);
  const index_t r = v.shape()[v.rank() - 2], w = v.shape()[v.rank() - 1], c = w / heads;
  return TensorView<S>(v.data() + i / heads * r * w + i % heads * c, Shape{r, c}, Shape{w, 1}, typename TensorView<S>::unchecked{});
}

}  // namespace precis::detail::ad

namespace precis::op {

/// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (the same leading axes) -> [..., Tq, Dv].
/// With causal, query i attends to keys j <= i (PyTorch's is_causal). scale 0 means 1/sqrt(D).
/// With heads H > 1 the last axes hold H heads side by side: q [..., Tq, H D], k [..., Tk, H D],
/// v [..., Tk, H Dv] -> [..., Tq, H Dv], head h reading and writing columns h D to (h + 1) D
/// (h Dv to (h + 1) Dv of v and the output), scale 0 meaning 1/sqrt(D): what splitting the heads
/// into an axis of their own, attending and merging them back computes, without the copies.
struct attention : def<policy::safety::low_precision_safe> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "attention";
  static constexpr std::string_view reason =
      "two matmuls with a wide accumulator; the softmax between them runs in the accumulator type, so its sum "
      "of exponentials neither overflows nor stagnates";
  struct attrs {
    bool causal = false;
    double scale = 0;
    index_t heads = 1;
  };
  template <class T>
  struct saved {
    TensorView<const typename T::storage> q, k, v;
    TensorView<const typename T::accumulator> p;  // the probabilities [..., (H,) Tq, Tk]
  };

  static Shape shape(const attrs& a, const Shape& q, const Shape& k, const Shape& v) {
    const auto fail = [&](const std::string& expected) {
      throw shape_error("precis::attention: q " + q.str() + ", k " + k.str() + ", v " + v.str() +
                        (a.heads != 1 ? ", heads " + std::to_string(a.heads) : std::string()) + "; expected " + expected);
    };
    if (a.heads < 1) fail("heads >= 1");
    if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank()) fail("q, k and v of one rank >= 2");
    const int r = q.rank();
    for (int i = 0; i + 2 < r; ++i) {
      if (k[i] != q[i] || v[i] != q[i]) fail("the same leading (batch, head) axes");
    }
    if (k[r - 1] != q[r - 1]) fail("q [..., Tq, D] and k [..., Tk, D] with the same D");
    if (v[r - 2] != k[r - 2]) fail("k [..., Tk, D] and v [..., Tk, Dv] with the same Tk");
    if (a.heads > 1 && (q[r - 1] % a.heads != 0 || v[r - 1] % a.heads != 0)) {
      fail("the last axes of q, k and v divisible by the " + std::to_string(a.heads) + " heads");
    }
    if (k[r - 2] == 0) fail("at least one key");
    if (!(a.scale >= 0) || !std::isfinite(a.scale)) fail("a finite scale >= 0 (0: 1/sqrt(D))");
    if (a.scale == 0 && q[r - 1] == 0) fail("D >= 1 for the scale 1/sqrt(D), or a scale given");
    Shape s = q;
    s[r - 1] = v[r - 1];
    return s;
  }

  template <class T>
  static typename T::accumulator scale_of(const attrs& a, index_t d) {
    using Acc = typename T::accumulator;
    using std::sqrt;
    return a.scale > 0 ? Acc(a.scale) : Acc(Acc(1) / Acc(sqrt(Acc(static_cast<double>(d)))));
  }

  /// The matrices the op multiplies: q's leading axes' entries times the heads (counted from
  /// the shape, so that a q of width 0 still has them).
  static index_t matrices(const attrs& a, const Shape& q) {
    index_t n = a.heads;
    for (int i = 0; i + 2 < q.rank(); ++i) n *= q[i];
    return n;
  }

  /// The probabilities' shape: q's leading axes, the heads (when more than one), [Tq, Tk].
  static Shape probabilities_shape(const attrs& a, const Shape& q, index_t tk) {
    Shape ps;
    for (int i = 0; i + 2 < q.rank(); ++i) ps.push_back(q[i]);
    if (a.heads > 1) ps.push_back(a.heads);
    ps.push_back(q[q.rank() - 2]);
    ps.push_back(tk);
    return ps;
  }

  template <class T, class Ctx, class O, class Q, class K, class V>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const Q>& q,
                      const TensorView<const K>& k, const TensorView<const V>& v) {
    using L = typename T::storage;
    using Acc = typename T::accumulator;
    sv.q = ctx.template as<L>(q, true);
    sv.k = ctx.template as<L>(k, true);
    sv.v = ctx.template as<L>(v, true);
    const int r = q.rank();
    const index_t h = a.heads, tq = q.shape()[r - 2], tk = k.shape()[r - 2], dv = v.shape()[r - 1] / h;
    const index_t batch = tq == 0 ? 0 : matrices(a, q.shape());
    const auto p = ctx.saving() ? ctx.template keep<Acc>(probabilities_shape(a, q.shape(), tk))
                                : ctx.template temp<Acc>(probabilities_shape(a, q.shape(), tk));
    // the probabilities rounded to L, and the second product in Acc, each through a workspace
    // only where L or the output's type is another than Acc
    constexpr bool round_p = !std::is_same_v<L, Acc>, round_y = !std::is_same_v<detail::remove_cv_t<O>, Acc>;
    const auto pl = round_p ? ctx.template temp<L>(Shape{tq, tk}) : TensorView<L>();
    // (with several heads, the workspace holds an entry's heads side by side, so that the
    // entry's rows are rounded into y in one dense pass once its last head is done)
    const auto acc = round_y ? ctx.template temp<Acc>(Shape{tq, h * dv}) : TensorView<Acc>();
    const Acc scale = scale_of<T>(a, q.shape()[r - 1] / h);
    using detail::ad::head_matrix;
    for (index_t b = 0; b < batch; ++b) {
      const auto s = detail::ad::matrix(p, b);
      ctx.gemm(s, head_matrix(sv.q, b, h), head_matrix(sv.k, b, h).transpose(), false);
      ctx.attention_probabilities(s, scale, a.causal);
      const auto product = [&](const auto& operand) {
        if constexpr (round_y) {
          ctx.gemm(head_matrix(acc, b % h, h), operand, head_matrix(sv.v, b, h), false);
          if (b % h == h - 1) ctx.copy(acc.as_const(), detail::ad::matrix(y, b / h));
        } else {
          ctx.gemm(head_matrix(y, b, h), operand, head_matrix(sv.v, b, h), false);
        }
      };
      if constexpr (round_p) {
        ctx.copy(s.as_const(), pl);
        product(pl.as_const());
      } else {
        product(s.as_const());
      }
    }
    sv.p = p.as_const();
  }

  template <class T, class Ctx, class G, class O, class Q, class K, class V, class GQ, class GK, class GV>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const Q>, TensorView<const K>, TensorView<const V>>&,
                       const std::tuple<TensorView<GQ>, TensorView<GK>, TensorView<GV>>& gx) {
    using L = typename T::storage;
    using Acc = typename T::accumulator;
    const auto& [gq, gk, gv] = gx;
    const int r = sv.q.rank();
    const index_t h = a.heads, tq = sv.q.shape()[r - 2], tk = sv.k.shape()[r - 2];
    const index_t batch = tq == 0 ? 0 : matrices(a, sv.q.shape());
    const Acc scale = scale_of<T>(a, sv.q.shape()[r - 1] / h);
    using detail::ad::head_matrix;
    // Each head's gradients go straight into a gradient of the accumulator's type (ctx.gemm
    // assigns the first into a fresh one, then adds, c + ab rounded once: the sums a workspace
    // added once would give), into a workspace otherwise, or where two of q, k and v share one
    // gradient (self-attention of one value), so that its three parts still add in that order.
    const void* pq = gq.data();
    const void* pk = gk.data();
    const void* pv = gv.data();  // (q, k and v may have gradients of different types)
    const bool distinct = pq != pk && pq != pv && pk != pv;
    const auto target = [&](const auto& gxv, const Shape& s) {
      using GT = detail::remove_cv_t<std::remove_pointer_t<decltype(gxv.data())>>;
      if (gxv.data() == nullptr) return TensorView<Acc>();
      if constexpr (std::is_same_v<GT, Acc>) {
        if (distinct && gxv.is_contiguous()) return TensorView<Acc>(gxv.data(), s);
      }
      return ctx.template zeros<Acc>(s);
    };
    const auto aq = target(gq, sv.q.shape()), ak = target(gk, sv.k.shape()), av = target(gv, sv.v.shape());
    constexpr bool round_p = !std::is_same_v<L, Acc>;
    const auto pl = round_p ? ctx.template temp<L>(Shape{tq, tk}) : TensorView<L>();
    const auto ds = ctx.template temp<Acc>(Shape{tq, tk});
    for (index_t b = 0; b < batch; ++b) {
      const auto p = detail::ad::matrix(sv.p, b);
      const auto g = head_matrix(gy, b, h);
      if (gv.data()) {  // dV += P^T dO, with P as the product used it
        if constexpr (round_p) {
          ctx.copy(p, pl);
          ctx.gemm(head_matrix(av, b, h), pl.as_const().transpose(), g, true);
        } else {
          ctx.gemm(head_matrix(av, b, h), p.transpose(), g, true);
        }
      }
      if (!gq.data() && !gk.data()) continue;
      ctx.gemm(ds, g, head_matrix(sv.v, b, h).transpose(), false);  // dP = dO V^T
      ctx.attention_score_gradients(ds, p, scale);  // dS = P (dP - sum(dP P)) scale
      if (gq.data()) ctx.gemm(head_matrix(aq, b, h), ds.as_const(), head_matrix(sv.k, b, h), true);
      if (gk.data()) ctx.gemm(head_matrix(ak, b, h), ds.as_const().transpose(), head_matrix(sv.q, b, h), true);
    }
    const auto finish = [&](const auto& gxv, const TensorView<Acc>& w) {
      if (gxv.data() != nullptr && static_cast<const void*>(gxv.data()) != static_cast<const void*>(w.data())) {
        ctx.template add_into<Acc>("precis::attention", gxv, w.as_const());
      }
    };
    finish(gq, aq);
    finish(gk, ak);
    finish(gv, av);
  }
};

}  // namespace precis::op

namespace precis {

using attention_options = op::attention::attrs;

/// softmax(q k^T scale, causal mask) v (op::attention).
template <class P, class SQ, class SK, class SV>
auto attention(const Var<P, SQ>& q, const Var<P, SK>& k, const Var<P, SV>& v, const attention_options& o = {}) {
  return record<op::attention>(o, q, k, v);
}
template <class P, tensor_like Q, tensor_like K, tensor_like V>
auto attention(const Q& q, const K& k, const V& v, const attention_options& o = {}) {
  return evaluate<P, op::attention>(o, q, k, v);
}

}  // namespace precis
