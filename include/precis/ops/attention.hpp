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

namespace precis::op {

/// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (the same leading axes) -> [..., Tq, Dv].
/// With causal, query i attends to keys j <= i (PyTorch's is_causal). scale 0 means 1/sqrt(D).
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
  };
  template <class T>
  struct saved {
    TensorView<const typename T::storage> q, k, v;
    TensorView<const typename T::accumulator> p;  // the probabilities [..., Tq, Tk]
  };

  static Shape shape(const attrs& a, const Shape& q, const Shape& k, const Shape& v) {
    const auto fail = [&](const std::string& expected) {
      throw shape_error("precis::attention: q " + q.str() + ", k " + k.str() + ", v " + v.str() + "; expected " + expected);
    };
    if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank()) fail("q, k and v of one rank >= 2");
    const int r = q.rank();
    for (int i = 0; i + 2 < r; ++i) {
      if (k[i] != q[i] || v[i] != q[i]) fail("the same leading (batch, head) axes");
    }
    if (k[r - 1] != q[r - 1]) fail("q [..., Tq, D] and k [..., Tk, D] with the same D");
    if (v[r - 2] != k[r - 2]) fail("k [..., Tk, D] and v [..., Tk, Dv] with the same Tk");
    if (k[r - 2] == 0) fail("at least one key");
    if (!(a.scale >= 0) || !std::isfinite(a.scale)) fail("a finite scale >= 0 (0: 1/sqrt(D))");
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

  template <class T, class Ctx, class O, class Q, class K, class V>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const Q>& q,
                      const TensorView<const K>& k, const TensorView<const V>& v) {
    using L = typename T::storage;
    using Acc = typename T::accumulator;
    sv.q = ctx.template as<L>(q, true);
    sv.k = ctx.template as<L>(k, true);
    sv.v = ctx.template as<L>(v, true);
    const int r = q.rank();
    const index_t tq = q.shape()[r - 2], tk = k.shape()[r - 2], dv = v.shape()[r - 1];
    const index_t batch = q.size() / std::max<index_t>(1, tq * q.shape()[r - 1]);
    Shape ps = q.shape();
    ps[r - 1] = tk;
    const auto p = ctx.saving() ? ctx.template keep<Acc>(ps) : ctx.template temp<Acc>(ps);
    // the probabilities rounded to L, and the second product in Acc, each through a workspace
    // only where L or the output's type is another than Acc
    constexpr bool round_p = !std::is_same_v<L, Acc>, round_y = !std::is_same_v<detail::remove_cv_t<O>, Acc>;
    const auto pl = round_p ? ctx.template temp<L>(Shape{tq, tk}) : TensorView<L>();
    const auto acc = round_y ? ctx.template temp<Acc>(Shape{tq, dv}) : TensorView<Acc>();
    const Acc scale = scale_of<T>(a, q.shape()[r - 1]);
    for (index_t b = 0; b < (q.size() == 0 ? 0 : batch); ++b) {
      const auto s = detail::ad::matrix(p, b);
      ctx.gemm(s, detail::ad::matrix(sv.q, b), detail::ad::matrix(sv.k, b).transpose(), false);
      ctx.attention_probabilities(s, scale, a.causal);
      const auto product = [&](const auto& operand) {
        if constexpr (round_y) {
          ctx.gemm(acc, operand, detail::ad::matrix(sv.v, b), false);
          ctx.copy(acc.as_const(), detail::ad::matrix(y, b));
        } else {
          ctx.gemm(detail::ad::matrix(y, b), operand, detail::ad::matrix(sv.v, b), false);
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
    const index_t tq = sv.q.shape()[r - 2], tk = sv.k.shape()[r - 2];
    const index_t batch = sv.q.size() / std::max<index_t>(1, tq * sv.q.shape()[r - 1]);
    const Acc scale = scale_of<T>(a, sv.q.shape()[r - 1]);
    // Each head's gradients go straight into a gradient of the accumulator's type (ctx.gemm
    // assigns the first into a fresh one, then adds, c + ab rounded once: the sums a workspace
    // added once would give), into a workspace otherwise, or where two of q, k and v share one
    // gradient (self-attention of one value), so that its three parts still add in that order.
    const bool distinct = gq.data() != gk.data() && gq.data() != gv.data() && gk.data() != gv.data();
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
    for (index_t b = 0; b < (sv.q.size() == 0 ? 0 : batch); ++b) {
      const auto p = detail::ad::matrix(sv.p, b);
      const auto g = detail::ad::matrix(gy, b);
      if (gv.data()) {  // dV += P^T dO, with P as the product used it
        if constexpr (round_p) {
          ctx.copy(p, pl);
          ctx.gemm(detail::ad::matrix(av, b), pl.as_const().transpose(), g, true);
        } else {
          ctx.gemm(detail::ad::matrix(av, b), p.transpose(), g, true);
        }
      }
      if (!gq.data() && !gk.data()) continue;
      ctx.gemm(ds, g, detail::ad::matrix(sv.v, b).transpose(), false);  // dP = dO V^T
      ctx.attention_score_gradients(ds, p, scale);  // dS = P (dP - sum(dP P)) scale
      if (gq.data()) ctx.gemm(detail::ad::matrix(aq, b), ds.as_const(), detail::ad::matrix(sv.k, b), true);
      if (gk.data()) ctx.gemm(detail::ad::matrix(ak, b), ds.as_const().transpose(), detail::ad::matrix(sv.q, b), true);
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
