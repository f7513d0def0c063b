// Batch normalization over the channel axis 1 of x [N, C, ...] (Ioffe & Szegedy 2015).
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>

#include "precis/ops/op.hpp"
#include "precis/tensor/reduce.hpp"

namespace precis::op {

/// y = (x - mean_c) / sqrt(var_c + eps) gamma_c + beta_c. Training: mean and (biased) variance
/// of the batch, per channel, and the running estimates (if given) move by `momentum`, with the
/// unbiased variance, as PyTorch does. Evaluation: the running estimates. Every sum over a
/// channel's N x S values (the mean, the variance about it, and the backward's sums of gy and gy
/// xhat) is pairwise on eight lanes in the accumulator (detail::bn::lane_sum): error at most
/// gamma(ceil(log2(N S)) + 2) times the sum of the terms' magnitudes, and short dependency chains
/// (a running sum costs one add's latency per value). The loops are the context's
/// (batch_norm_forward / _backward; the device's sum a block per channel).
struct batch_norm : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "batch_norm";
  static constexpr std::string_view reason =
      "a channel's mean and variance over the batch: long sums, squares, and an eps below fp16's normal range";
  struct attrs {
    bool training = true;
    double momentum = 0.1;
    double eps = 1e-5;
    double* running_mean = nullptr;  // [C], updated in training, read in evaluation; in the
    double* running_var = nullptr;   // backend's memory (the host's, or the device's on cuda)
  };
  template <class T>
  struct saved {
    const typename T::accumulator* stats = nullptr;  // per channel: mean, 1 / sqrt(var + eps)
  };

  static Shape shape(const attrs& a, const Shape& x, const Shape& g, const Shape& b) {
    const auto fail = [&](const std::string& expected) {
      throw shape_error("precis::batch_norm: x " + x.str() + ", gamma " + g.str() + ", beta " + b.str() + "; expected " +
                        expected);
    };
    if (x.rank() < 2) fail("x [N, C, ...]");
    if (g.rank() != 1 || b.rank() != 1 || g[0] != x[1] || b[0] != x[1]) {
      fail("gamma and beta [" + std::to_string(x[1]) + "] (mismatched channels)");
    }
    if (a.training && x.numel() / std::max<index_t>(1, x[1]) < 2) fail("more than one value per channel in training");
    if (!a.training && (a.running_mean == nullptr || a.running_var == nullptr)) {
      throw invalid_argument("precis::batch_norm: evaluation mode without running statistics; pass running_mean and "
                             "running_var");
    }
    if (!(a.eps >= 0) || !(a.momentum >= 0 && a.momentum <= 1)) {
      throw invalid_argument("precis::batch_norm: eps = " + std::to_string(a.eps) + ", momentum = " +
                             std::to_string(a.momentum) + "; expected eps >= 0 and 0 <= momentum <= 1");
    }
    return x;
  }

  template <class T, class Ctx, class O, class X, class Gm, class Bt>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x,
                      const TensorView<const Gm>& gamma, const TensorView<const Bt>& beta) {
    using Acc = typename T::accumulator;
    const auto xc = ctx.template as<detail::remove_const_t<X>>(x, false);
    const index_t c = x.shape()[1];
    auto* stats = (ctx.saving() ? ctx.template keep<Acc>(Shape{2 * c}) : ctx.template temp<Acc>(Shape{2 * c})).data();
    ctx.template batch_norm_forward<Acc>(xc, gamma, beta, a.training, a.momentum, a.eps, a.running_mean, a.running_var, stats, y);
    sv.stats = stats;
  }

  template <class T, class Ctx, class G, class O, class X, class Gm, class Bt, class GX, class GG, class GB>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>, TensorView<const Gm>, TensorView<const Bt>>& in,
                       const std::tuple<TensorView<GX>, TensorView<GG>, TensorView<GB>>& gx) {
    using Acc = typename T::accumulator;
    const auto& [dx, dgamma, dbeta] = gx;
    const auto xc = ctx.template as<detail::remove_const_t<X>>(std::get<0>(in), false);
    const index_t c = xc.shape()[1];
    const auto dxa = dx.data() ? ctx.template temp<Acc>(xc.shape()) : TensorView<Acc>();
    const auto dg = ctx.template temp<Acc>(Shape{c});
    const auto db = ctx.template temp<Acc>(Shape{c});
    ctx.template batch_norm_backward<Acc>(gy, xc, std::get<1>(in), sv.stats, a.training, dxa.data(), dg.data(), db.data());
    if (dx.data()) ctx.template add_into<Acc>("precis::batch_norm", dx, dxa.as_const());
    if (dgamma.data()) ctx.template add_into<Acc>("precis::batch_norm", dgamma, dg.as_const());
    if (dbeta.data()) ctx.template add_into<Acc>("precis::batch_norm", dbeta, db.as_const());
  }
};

/// Row lookup: weight [V, D] and integer indices of any shape -> [indices..., D]. The backward
/// scatter-adds each row's gradient in the accumulator, so repeated indices sum there first.
struct embedding : def<policy::safety::low_precision_safe> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "embedding";
  static constexpr std::string_view reason =
      "a gather: exact in the compute type; the backward's scatter-add of repeated indices runs in the wide "
      "accumulator";
  struct attrs {
    const std::int64_t* indices = nullptr;  // read during the call only; the forward keeps a copy
    Shape index_shape;
  };
  template <class T>
  struct saved {
    const std::int64_t* indices = nullptr;
  };

  static Shape shape(const attrs& a, const Shape& w) {
    if (w.rank() != 2) {
      throw shape_error("precis::embedding: weight " + w.str() + " for indices " + a.index_shape.str() +
                        "; expected a weight [V, D]");
    }
    for (index_t i = 0; i < a.index_shape.numel(); ++i) {
      if (a.indices[i] < 0 || a.indices[i] >= w[0]) {
        throw invalid_argument("precis::embedding: index " + std::to_string(a.indices[i]) + " at position " +
                               std::to_string(i) + " of indices " + a.index_shape.str() + " is outside [0, " +
                               std::to_string(w[0]) + ") for a weight of shape " + w.str());
      }
    }
    Shape s = a.index_shape;
    s.push_back(w[1]);
    return s;
  }
  template <class T, class Ctx, class O, class W>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const W>& w) {
    const index_t n = a.index_shape.numel(), d = w.shape()[1];
    for (index_t i = 0; i < n; ++i) {  // the indices are the host's (checked): a copy per row
      ctx.copy(w.select(0, a.indices[i]), TensorView<O>(y.data() + i * d, Shape{d}));
    }
    if (ctx.saving()) sv.indices = ctx.labels(std::span<const std::int64_t>(a.indices, static_cast<std::size_t>(n)), true);
  }
  template <class T, class Ctx, class G, class O, class W, class GW>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const W>>&, const std::tuple<TensorView<GW>>& gx) {
    const auto& gw = std::get<0>(gx);
    if (gw.data() == nullptr) return;
    using Acc = typename T::accumulator;
    const auto acc = ctx.template zeros<Acc>(gw.shape());
    ctx.template scatter_add_rows<Acc>(gy, sv.indices, a.index_shape.numel(), acc);  // in index order
    ctx.template add_into<Acc>("precis::embedding", gw, acc.as_const());
  }
};

}  // namespace precis::op

namespace precis {

using batch_norm_options = op::batch_norm::attrs;

/// Batch normalization of x [N, C, ...] over all axes but 1 (op::batch_norm).
template <class P, class SX, class SG, class SB>
auto batch_norm(const Var<P, SX>& x, const Var<P, SG>& gamma, const Var<P, SB>& beta, const batch_norm_options& o = {}) {
  return record<op::batch_norm>(o, x, gamma, beta);
}
template <class P, tensor_like X, tensor_like G, tensor_like B>
auto batch_norm(const X& x, const G& gamma, const B& beta, const batch_norm_options& o = {}) {
  return evaluate<P, op::batch_norm>(o, x, gamma, beta);
}

/// Rows of weight [V, D] at `indices` (row-major, of shape index_shape) -> [index_shape..., D].
template <class P, class S>
auto embedding(const Var<P, S>& weight, std::span<const std::int64_t> indices, const Shape& index_shape) {
  if (static_cast<index_t>(indices.size()) != index_shape.numel()) {
    throw shape_error("precis::embedding: " + std::to_string(indices.size()) + " indices for an index shape " +
                      index_shape.str() + "; expected " + std::to_string(index_shape.numel()));
  }
  return record<op::embedding>({indices.data(), index_shape}, weight);
}
template <class P, tensor_like W>
auto embedding(const W& weight, std::span<const std::int64_t> indices, const Shape& index_shape) {
  if (static_cast<index_t>(indices.size()) != index_shape.numel()) {
    throw shape_error("precis::embedding: " + std::to_string(indices.size()) + " indices for an index shape " +
                      index_shape.str() + "; expected " + std::to_string(index_shape.numel()));
  }
  return evaluate<P, op::embedding>({indices.data(), index_shape}, weight);
}

}  // namespace precis
