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

namespace precis::detail::bn {

/// Calls f(at, len) for the runs of channel ch's values in x [N, C, S] (S the product of the
/// axes after C), each run contiguous and at most `chunk` long, image after image.
template <class F>
void for_runs(index_t n, index_t c, index_t s, index_t ch, F&& f) {
  for (index_t i = 0; i < n; ++i) {
    for (index_t j = 0; j < s; j += chunk) f((i * c + ch) * s + j, std::min(chunk, s - j));
  }
}

/// len values from p in Acc: p itself when it already holds Acc, else converted into buf.
template <class Acc, class X>
const Acc* load(const X* p, index_t len, Acc* buf) {
  if constexpr (std::is_same_v<X, Acc>) {
    return p;
  } else if constexpr (std::is_same_v<Acc, float> && std::is_same_v<ad::arith_t<X>, float>) {
    return load_run<float>(p, len, 1, buf);  // the vectorized widening (exact, as ld's)
  } else {
    for (index_t k = 0; k < len; ++k) buf[k] = ad::ld<Acc>(p[k]);
    return buf;
  }
}

/// Pairwise summation on eight lanes: value t of the stream goes to lane t % 8, each lane's values
/// are summed pairwise (eight lanes added as one vector), then the lanes pairwise, then the last
/// t % 8 values (summed pairwise) added. Each value takes part in at most ceil(log2 m) + 2
/// additions (m values in all), two more than the scalar tree, in a third of the time.
template <class Acc>
struct lane_sum {
  struct lanes {
    std::array<Acc, 8> v;  // lanes{0}, pairwise_sum's starting value, zeroes all eight
    lanes operator+(const lanes& o) const {
      lanes r;
      for (std::size_t k = 0; k < 8; ++k) r.v[k] = v[k] + o.v[k];
      return r;
    }
  };
  pairwise_sum<lanes> rows;
  std::array<Acc, 8> pending{};
  index_t filled = 0;

  void push(const Acc* x, index_t n) {
    index_t i = 0;
    while (filled != 0 && i < n) {
      pending[static_cast<std::size_t>(filled++)] = x[i++];
      if (filled == 8) {
        lanes r;
        r.v = pending;
        rows.push(r);
        filled = 0;
      }
    }
    std::array<lanes, 32> buf;
    while (i + 8 <= n) {
      const index_t rows_now = std::min<index_t>(32, (n - i) / 8);
      for (index_t r = 0; r < rows_now; ++r)
        for (std::size_t k = 0; k < 8; ++k) buf[static_cast<std::size_t>(r)].v[k] = x[i + 8 * r + static_cast<index_t>(k)];
      push_all(rows, buf.data(), rows_now);
      i += 8 * rows_now;
    }
    while (i < n) pending[static_cast<std::size_t>(filled++)] = x[i++];
  }
  Acc result() const {
    const lanes r = rows.result();
    const auto& v = r.v;
    Acc s = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    if (filled != 0) {
      pairwise_sum<Acc> tail;
      push_all(tail, pending.data(), filled);
      s = s + tail.result();
    }
    return s;
  }
};

}  // namespace precis::detail::bn

namespace precis::op {

/// y = (x - mean_c) / sqrt(var_c + eps) gamma_c + beta_c. Training: mean and (biased) variance
/// of the batch, per channel, and the running estimates (if given) move by `momentum`, with the
/// unbiased variance, as PyTorch does. Evaluation: the running estimates. Every sum over a
/// channel's N x S values (the mean, the variance about it, and the backward's sums of gy and gy
/// xhat) is pairwise on eight lanes in the accumulator (detail::bn::lane_sum): error at most
/// gamma(ceil(log2(N S)) + 2) times the sum of the terms' magnitudes, and short dependency chains
/// (a running sum costs one add's latency per value).
struct batch_norm : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr std::string_view name = "batch_norm";
  static constexpr std::string_view reason =
      "a channel's mean and variance over the batch: long sums, squares, and an eps below fp16's normal range";
  struct attrs {
    bool training = true;
    double momentum = 0.1;
    double eps = 1e-5;
    double* running_mean = nullptr;  // [C], updated in training, read in evaluation
    double* running_var = nullptr;
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
    using Acc = detail::ad::arith_t<typename T::accumulator>;
    static_assert(std::is_same_v<Acc, typename T::accumulator>, "batch_norm accumulates in an arithmetic type");
    const auto xc = ctx.template as<detail::remove_const_t<X>>(x, false);
    const index_t n = x.shape()[0], c = x.shape()[1], s = x.size() / std::max<index_t>(1, n * c), m = n * s;
    auto* stats = (ctx.saving() ? ctx.template keep<Acc>(Shape{2 * c}) : ctx.template temp<Acc>(Shape{2 * c})).data();
    std::array<Acc, detail::chunk> buf;
    for (index_t ch = 0; ch < c; ++ch) {
      Acc mu(0), var(0);
      if (a.training) {
        detail::bn::lane_sum<Acc> sx;
        detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
          sx.push(detail::bn::load<Acc>(xc.data() + at, len, buf.data()), len);
        });
        mu = sx.result() / Acc(static_cast<double>(m));
        detail::bn::lane_sum<Acc> sd;
        detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
          const Acc* v = detail::bn::load<Acc>(xc.data() + at, len, buf.data());
          for (index_t k = 0; k < len; ++k) {
            const Acc d = v[k] - mu;
            buf[static_cast<std::size_t>(k)] = d * d;
          }
          sd.push(buf.data(), len);
        });
        var = sd.result() / Acc(static_cast<double>(m));
        if (a.running_mean != nullptr) {
          a.running_mean[ch] = (1 - a.momentum) * a.running_mean[ch] + a.momentum * static_cast<double>(mu);
        }
        if (a.running_var != nullptr) {
          a.running_var[ch] = (1 - a.momentum) * a.running_var[ch] +
                              a.momentum * static_cast<double>(var) * static_cast<double>(m) / static_cast<double>(m - 1);
        }
      } else {
        mu = Acc(a.running_mean[ch]);
        var = Acc(a.running_var[ch]);
      }
      using std::sqrt;
      const Acc rstd = Acc(1) / Acc(sqrt(Acc(var + Acc(a.eps))));
      stats[2 * ch] = mu;
      stats[2 * ch + 1] = rstd;
      const Acc gm = detail::ad::ld<Acc>(gamma(ch)), bt = detail::ad::ld<Acc>(beta(ch));
      detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
        const Acc* v = detail::bn::load<Acc>(xc.data() + at, len, buf.data());
        for (index_t k = 0; k < len; ++k) buf[static_cast<std::size_t>(k)] = Acc((v[k] - mu) * rstd * gm + bt);
        detail::store_run(buf.data(), y.data() + at, len, 1);
      });
    }
    sv.stats = stats;
  }

  template <class T, class Ctx, class G, class O, class X, class Gm, class Bt, class GX, class GG, class GB>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>, TensorView<const Gm>, TensorView<const Bt>>& in,
                       const std::tuple<TensorView<GX>, TensorView<GG>, TensorView<GB>>& gx) {
    using Acc = typename T::accumulator;
    const auto& [dx, dgamma, dbeta] = gx;
    const auto xc = ctx.template as<detail::remove_const_t<X>>(std::get<0>(in), false);
    const auto& gamma = std::get<1>(in);
    const index_t n = xc.shape()[0], c = xc.shape()[1], s = xc.size() / std::max<index_t>(1, n * c), m = n * s;
    const auto dxa = dx.data() ? ctx.template temp<Acc>(xc.shape()) : TensorView<Acc>();
    const auto dg = ctx.template temp<Acc>(Shape{c});
    const auto db = ctx.template temp<Acc>(Shape{c});
    std::array<Acc, detail::chunk> buf, gbuf;
    for (index_t ch = 0; ch < c; ++ch) {
      const Acc mu = sv.stats[2 * ch], rstd = sv.stats[2 * ch + 1], gm = detail::ad::ld<Acc>(gamma(ch));
      detail::bn::lane_sum<Acc> sum_g, sum_gx;  // sums of gy and gy xhat
      detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
        const Acc* g = detail::bn::load<Acc>(gy.data() + at, len, gbuf.data());
        const Acc* v = detail::bn::load<Acc>(xc.data() + at, len, buf.data());
        for (index_t k = 0; k < len; ++k) buf[static_cast<std::size_t>(k)] = g[k] * Acc((v[k] - mu) * rstd);
        sum_g.push(g, len);
        sum_gx.push(buf.data(), len);
      });
      const Acc sg = sum_g.result(), sgx = sum_gx.result();
      dg.data()[ch] = sgx;
      db.data()[ch] = sg;
      if (!dx.data()) continue;
      const Acc inv_m = Acc(1) / Acc(static_cast<double>(m));
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < s; ++j) {
          const index_t at = (i * c + ch) * s + j;
          const Acc g = detail::ad::ld<Acc>(gy.data()[at]);
          if (a.training) {  // dx = gamma rstd (g - mean(g) - xhat mean(g xhat))
            const Acc xh = (detail::ad::ld<Acc>(xc.data()[at]) - mu) * rstd;
            dxa.data()[at] = gm * rstd * (g - sg * inv_m - xh * sgx * inv_m);
          } else {
            dxa.data()[at] = gm * rstd * g;
          }
        }
    }
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
