// Layer normalization, an op of the op layer.
#pragma once

#include "precis/config.hpp"

#include <cmath>
#include <string>
#include <tuple>

#include "precis/ops/op.hpp"

namespace precis::op {

/// (x - mean) / sqrt(var + eps) gamma + beta over the last axis (biased variance). A row's mean
/// and variance are summed in the accumulator and kept (mean, 1/sqrt(var + eps)) for the
/// backward; the normalization itself is element-wise in the arithmetic type. The rows run in
/// the context (op::cpu::layer_norm_forward / layer_norm_backward).
struct layer_norm : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "layer_norm";
  static constexpr std::string_view reason =
      "a row's mean and variance: accumulation, squares, and an eps below fp16's normal range";
  struct attrs {
    double eps = 1e-5;
  };
  template <class T>
  struct saved {
    const typename T::accumulator* stats = nullptr;  // mean, 1/sqrt(var + eps) per row
  };

  static Shape shape(const attrs& a, const Shape& x, const Shape& gamma, const Shape& beta) {
    if (x.rank() < 1 || gamma.rank() != 1 || beta.rank() != 1 || gamma[0] != x.back() || beta[0] != x.back() ||
        x.back() == 0) {
      throw shape_error("precis::layer_norm: x " + x.str() + ", gamma " + gamma.str() + ", beta " + beta.str() +
                        "; expected [..., d], [d], [d] with d > 0");
    }
    if (!(a.eps >= 0)) throw invalid_argument("precis::layer_norm: eps = " + std::to_string(a.eps) + "; expected >= 0");
    return x;
  }

  template <class T, class Ctx, class O, class X, class G, class B>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x_,
                      const TensorView<const G>& gamma, const TensorView<const B>& beta) {
    using Acc = typename T::accumulator;
    const auto x = ctx.template as<detail::remove_const_t<X>>(x_, true);
    Acc* stats = ctx.template keep_array<Acc>(2 * (x.size() / x.shape().back()));
    ctx.template layer_norm_forward<Acc, typename T::arithmetic>(x, gamma, beta, a.eps, stats, y);
    sv.stats = stats;
  }

  template <class T, class Ctx, class GY, class O, class X, class G, class B, class GX, class GG, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const GY>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>, TensorView<const G>, TensorView<const B>>& in,
                       const std::tuple<TensorView<GX>, TensorView<GG>, TensorView<GB>>& gin) {
    using Acc = typename T::accumulator;
    using R = typename T::arithmetic;
    const auto x = ctx.template as<X>(std::get<0>(in), false);
    const auto& [gx, dg, db] = gin;
    const index_t d = x.shape().back();
    const auto dgamma = ctx.template zeros<Acc>(Shape{d});
    const auto dbeta = ctx.template zeros<Acc>(Shape{d});
    ctx.template layer_norm_backward<Acc, R>(x, ctx.template as<GY>(gy, false), std::get<1>(in), sv.stats, gx, dgamma, dbeta);
    if (dg.data()) ctx.template add_into<R>("precis::layer_norm", dg, dgamma.as_const());
    if (db.data()) ctx.template add_into<R>("precis::layer_norm", db, dbeta.as_const());
  }
};

}  // namespace precis::op

namespace precis {

/// (x - mean) / sqrt(var + eps) gamma + beta over the last axis (op::layer_norm).
template <class P, class SX, class SG, class SB>
auto layer_norm(const Var<P, SX>& x, const Var<P, SG>& gamma, const Var<P, SB>& beta, double eps = 1e-5) {
  return record<op::layer_norm>({eps}, x, gamma, beta);
}

}  // namespace precis
