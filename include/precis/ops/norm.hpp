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
/// backward; the normalization itself is element-wise in the arithmetic type.
struct layer_norm : def<policy::safety::needs_wide> {
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
    using R = typename T::arithmetic;
    const auto x = ctx.template as<detail::remove_const_t<X>>(x_, true);
    const index_t d = x.shape().back(), rows = x.size() / d;
    Acc* stats = ctx.template keep_array<Acc>(2 * rows);
    for (index_t i = 0; i < rows; ++i) {
      const X* r = x.data() + i * d;
      const Acc mu = Acc(detail::sum_fiber<Acc>(r, d, 1, summation::pairwise, std::identity{}) / Acc(static_cast<double>(d)));
      const Acc var = Acc(detail::sum_fiber<Acc>(r, d, 1, summation::pairwise,
                                                 [mu](const Acc& v) { return Acc((v - mu) * (v - mu)); }) /
                          Acc(static_cast<double>(d)));
      using std::sqrt;
      const R rstd = R(1) / sqrt(R(detail::ad::ld<R>(var) + R(a.eps)));
      stats[2 * i] = mu;
      stats[2 * i + 1] = detail::store<Acc>(rstd);
      const R m = detail::ad::ld<R>(mu), rs = detail::ad::ld<R>(stats[2 * i + 1]);
      for (index_t j = 0; j < d; ++j) {
        y.data()[i * d + j] =
            detail::store<O>(R((detail::ad::ld<R>(r[j]) - m) * rs * detail::ad::ld<R>(gamma(j)) + detail::ad::ld<R>(beta(j))));
      }
    }
    sv.stats = stats;
  }

  template <class T, class Ctx, class GY, class O, class X, class G, class B, class GX, class GG, class GB>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const GY>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>, TensorView<const G>, TensorView<const B>>& in,
                       const std::tuple<TensorView<GX>, TensorView<GG>, TensorView<GB>>& gin) {
    using Acc = typename T::accumulator;
    using R = typename T::arithmetic;
    const auto x = ctx.template as<X>(std::get<0>(in), false);
    const auto& gamma = std::get<1>(in);
    const auto& [gx, dg, db] = gin;
    const index_t d = x.shape().back(), rows = x.size() / d;
    const auto dgamma = ctx.template zeros<Acc>(Shape{d});
    const auto dbeta = ctx.template zeros<Acc>(Shape{d});
    const auto row = ctx.template temp<R>(Shape{2, d});  // xhat, dxhat of one row
    for (index_t i = 0; i < rows; ++i) {
      const R mu = detail::ad::ld<R>(sv.stats[2 * i]), rstd = detail::ad::ld<R>(sv.stats[2 * i + 1]);
      Acc m1(0), m2(0);  // sums of dxhat and dxhat xhat
      for (index_t j = 0; j < d; ++j) {
        const R xh = R(detail::ad::ld<R>(x.data()[i * d + j]) - mu) * rstd;
        const R gv = detail::ad::ld<R>(gy.data()[i * d + j]);
        dgamma.data()[j] += detail::store<Acc>(R(gv * xh));
        dbeta.data()[j] += detail::store<Acc>(gv);
        const R dxh = gv * detail::ad::ld<R>(gamma(j));
        row(0, j) = xh;
        row(1, j) = dxh;
        m1 += detail::store<Acc>(dxh);
        m2 += detail::store<Acc>(R(dxh * xh));
      }
      if (gx.data()) {
        const R inv_d = R(1) / R(static_cast<double>(d)), s1 = detail::ad::ld<R>(m1), s2 = detail::ad::ld<R>(m2);
        for (index_t j = 0; j < d; ++j) {
          GX& gij = gx.data()[i * d + j];
          const R dx = rstd * (row(1, j) - inv_d * s1 - row(0, j) * inv_d * s2);
          gij = detail::store<GX>(R(detail::ad::ld<R>(gij) + dx));
        }
      }
    }
    if (dg.data()) op::cpu::add_into<R>("precis::layer_norm", dg, dgamma.as_const());
    if (db.data()) op::cpu::add_into<R>("precis::layer_norm", db, dbeta.as_const());
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
