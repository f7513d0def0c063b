// Layer normalization, an op of the op layer.
#pragma once

#include "precis/config.hpp"

#include <cmath>
#include <string>
#include <tuple>

#include "precis/ops/op.hpp"

namespace precis::op {

/// n contiguous values as type R: p itself when they are R, otherwise a temporary converted in
/// bulk (exactly, where R holds every value of S).
template <class R, class Ctx, class S>
const R* contiguous_in(const Ctx& ctx, const S* p, index_t n) {
  if constexpr (std::is_same_v<detail::remove_cv_t<S>, R>) {
    return p;
  } else {
    R* buf = ctx.template temp<R>(Shape{n}).data();
    return detail::load_run<R>(p, n, 1, buf);
  }
}

/// (x - mean) / sqrt(var + eps) gamma + beta over the last axis (biased variance). A row's mean
/// and variance are summed in the accumulator and kept (mean, 1/sqrt(var + eps)) for the
/// backward; the normalization itself is element-wise in the arithmetic type.
struct layer_norm : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
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
    // x and y in R, converted and rounded in bulk where they are stored in another type (x
    // widens exactly, so the sums see the same values)
    const R* xr = contiguous_in<R>(ctx, x.data(), x.size());
    R* yr = nullptr;
    if constexpr (std::is_same_v<O, R>) {
      yr = y.data();
    } else {
      yr = ctx.template temp<R>(y.shape()).data();
    }
    R* gm = ctx.template temp<R>(Shape{2 * d}).data();  // gamma, then beta
    R* bt = gm + d;
    for (index_t j = 0; j < d; ++j) {
      gm[j] = detail::ad::ld<R>(gamma(j));
      bt[j] = detail::ad::ld<R>(beta(j));
    }
    const double eps = a.eps;
    // rows are independent: split them over threads (each row's sums are unchanged)
    detail::parallel_ranges(rows, detail::threads_for(x.size(), index_t{1} << 14), [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        const R* r = xr + i * d;
        const Acc mu = Acc(detail::sum_fiber<Acc>(r, d, 1, summation::pairwise, std::identity{}) / Acc(static_cast<double>(d)));
        const Acc var = Acc(detail::sum_fiber<Acc>(r, d, 1, summation::pairwise,
                                                   [mu](const Acc& v) { return Acc((v - mu) * (v - mu)); }) /
                            Acc(static_cast<double>(d)));
        using std::sqrt;
        const R rstd = R(1) / sqrt(R(detail::ad::ld<R>(var) + R(eps)));
        stats[2 * i] = mu;
        stats[2 * i + 1] = detail::store<Acc>(rstd);
        const R m = detail::ad::ld<R>(mu), rs = detail::ad::ld<R>(stats[2 * i + 1]);
        R* out = yr + i * d;
        for (index_t j = 0; j < d; ++j) out[j] = R((r[j] - m) * rs * gm[j] + bt[j]);
        if constexpr (!std::is_same_v<O, R>) detail::store_run(out, y.data() + i * d, d, 1);
      }
    });
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
    const auto row = ctx.template temp<R>(Shape{3, d});  // xhat, dxhat, dx of one row
    const R* xr = contiguous_in<R>(ctx, x.data(), x.size());
    const R* gyr = contiguous_in<R>(ctx, gy.data(), gy.size());
    const auto gam = ctx.template temp<R>(Shape{d});
    for (index_t j = 0; j < d; ++j) gam(j) = detail::ad::ld<R>(gamma(j));
    const bool fresh = ctx.take_fresh(gx);  // gx holds zeros: write dx, do not add it
    for (index_t i = 0; i < rows; ++i) {
      const R mu = detail::ad::ld<R>(sv.stats[2 * i]), rstd = detail::ad::ld<R>(sv.stats[2 * i + 1]);
      Acc m1(0), m2(0);  // sums of dxhat and dxhat xhat
      for (index_t j = 0; j < d; ++j) {
        const R xh = R(xr[i * d + j] - mu) * rstd;
        const R gv = gyr[i * d + j];
        dgamma.data()[j] += detail::store<Acc>(R(gv * xh));
        dbeta.data()[j] += detail::store<Acc>(gv);
        const R dxh = gv * gam(j);
        row(0, j) = xh;
        row(1, j) = dxh;
        m1 += detail::store<Acc>(dxh);
        m2 += detail::store<Acc>(R(dxh * xh));
      }
      if (gx.data()) {
        const R inv_d = R(1) / R(static_cast<double>(d)), s1 = detail::ad::ld<R>(m1), s2 = detail::ad::ld<R>(m2);
        GX* gi = gx.data() + i * d;
        if constexpr (std::is_same_v<GX, R>) {
          if (fresh) {
            for (index_t j = 0; j < d; ++j) gi[j] = rstd * (row(1, j) - inv_d * s1 - row(0, j) * inv_d * s2);
          } else {
            for (index_t j = 0; j < d; ++j) gi[j] += rstd * (row(1, j) - inv_d * s1 - row(0, j) * inv_d * s2);
          }
        } else {
          R* dx = &row(2, 0);
          if (fresh) {
            for (index_t j = 0; j < d; ++j) dx[j] = R(rstd * (row(1, j) - inv_d * s1 - row(0, j) * inv_d * s2));
          } else {
            const R* old = detail::load_run<R>(gi, d, 1, dx);
            for (index_t j = 0; j < d; ++j) dx[j] = R(old[j] + rstd * (row(1, j) - inv_d * s1 - row(0, j) * inv_d * s2));
          }
          detail::store_run(dx, gi, d, 1);
        }
      }
    }
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
