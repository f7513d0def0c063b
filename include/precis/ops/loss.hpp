// Losses of the op layer: cross_entropy (fused log-softmax and negative log-likelihood), nll,
// mse. Each is a mean over rows (or elements), summed in the accumulator.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>

#include "precis/ops/op.hpp"

namespace precis::detail::ad {

inline void check_labels(const char* op, std::span<const std::int64_t> labels, index_t rows, index_t classes) {
  if (static_cast<index_t>(labels.size()) != rows) {
    throw shape_error(std::string(op) + ": " + std::to_string(labels.size()) + " labels for " + std::to_string(rows) +
                      " rows; expected one label per row");
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw invalid_argument(std::string(op) + ": label " + std::to_string(labels[i]) + " at row " + std::to_string(i) +
                             " is outside [0, " + std::to_string(classes) + ")");
    }
  }
}

/// The shape check of a loss over [batch, classes] with one label per row.
template <class Op>
Shape labelled_loss_shape(std::span<const std::int64_t> labels, const Shape& x, const char* what) {
  if (x.rank() != 2) {
    throw shape_error(std::string(name_of<Op>()) + ": " + what + " " + x.str() + "; expected [batch, classes]");
  }
  check_labels(name_of<Op>(), labels, x[0], x[1]);
  return Shape{};
}

}  // namespace precis::detail::ad

namespace precis::op {

/// Mean over rows of -log softmax(logits)[row, label]: fused and stable (a log-sum-exp per row
/// in the accumulator, kept); the backward recomputes softmax from it. Labels in host memory are
/// checked and copied into the step's memory; borrowed labels (already in the tape's backend
/// memory) are read in place and only counted: a label outside [0, classes) there gives a NaN
/// loss and NaN gradients in its row.
struct cross_entropy : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "cross_entropy";
  static constexpr std::string_view reason = "logsumexp over the classes, then a mean over the batch";
  struct attrs {
    std::span<const std::int64_t> labels;
    bool borrowed = false;  // the labels are in the backend's memory
  };
  template <class T>
  struct saved {
    const std::int64_t* labels = nullptr;
    const typename T::accumulator* lse = nullptr;
  };

  static Shape shape(const attrs& a, const Shape& x) {
    if (!a.borrowed) return detail::ad::labelled_loss_shape<cross_entropy>(a.labels, x, "logits");
    if (x.rank() != 2 || static_cast<index_t>(a.labels.size()) != x[0]) {
      throw shape_error("precis::cross_entropy: logits " + x.str() + " and " + std::to_string(a.labels.size()) +
                        " borrowed labels; expected [batch, classes] and one label per row");
    }
    return Shape{};
  }

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x) {
    using Acc = typename T::accumulator;
    const index_t rows = x.shape()[0];
    Acc* lse = ctx.saving() ? ctx.template keep_array<Acc>(rows) : ctx.template temp<Acc>(Shape{rows}).data();
    const std::int64_t* labels = a.borrowed ? a.labels.data() : ctx.labels(a.labels, ctx.saving());
    ctx.template cross_entropy_forward<Acc>("precis::cross_entropy", x, labels, lse, y);
    sv.lse = lse;
    sv.labels = labels;
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>& in, const std::tuple<TensorView<GX>>& gin) {
    if (std::get<0>(gin).data() == nullptr) return;
    ctx.template cross_entropy_backward<typename T::arithmetic>("precis::cross_entropy", gy, std::get<0>(in), sv.labels, sv.lse,
                                                                std::get<0>(gin));
  }
};

/// Mean over rows of -logp[row, label] for log-probabilities logp [batch, classes]. The labels
/// are checked on the host and copied into the step's memory (ctx.labels).
struct nll : def<policy::safety::needs_wide> {
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "nll";
  static constexpr std::string_view reason = "a mean over the batch of log-probabilities";
  struct attrs {
    std::span<const std::int64_t> labels;
  };
  template <class T>
  struct saved {
    const std::int64_t* labels = nullptr;
  };

  static Shape shape(const attrs& a, const Shape& x) { return detail::ad::labelled_loss_shape<nll>(a.labels, x, "input"); }

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x) {
    const std::int64_t* labels = ctx.labels(a.labels, ctx.saving());
    ctx.template nll_forward<typename T::accumulator>(x, labels, y);
    sv.labels = labels;
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gin) {
    if (std::get<0>(gin).data() == nullptr) return;
    ctx.template nll_backward<typename T::arithmetic>(gy, sv.labels, std::get<0>(gin));
  }
};

namespace fn_ {
/// (a - b)^2, and mse's gradients c g (a - b) with c = 2 / n (its negation for the target).
struct squared_difference {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const { return T((a - b) * (a - b)); }
};
template <class T>
struct d_mse {
  T c;
  PRECIS_HOST_DEVICE T operator()(const T& g, const T& a, const T& b) const { return T(c * g * (a - b)); }
};
}  // namespace fn_

/// Mean of (pred - target)^2 over all elements.
struct mse : def<policy::safety::needs_wide> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "mse";
  static constexpr std::string_view reason = "squared differences overflow fp16 above 255.9, then a mean over all elements";

  static Shape shape(const attrs&, const Shape& p, const Shape& t) {
    if (!(p == t)) throw shape_error("precis::mse: prediction " + p.str() + " and target " + t.str() + " differ");
    if (p.numel() == 0) throw shape_error("precis::mse: prediction " + p.str() + " is empty; expected at least one element");
    return Shape{};
  }
  /// The squares computed in the arithmetic type and kept in the accumulator, their mean summed
  /// pairwise there.
  template <class T, class Ctx, class O, class SP, class ST>
  static void forward(const Ctx& ctx, const attrs&, const TensorView<O>& y, saved<T>&, const TensorView<const SP>& p,
                      const TensorView<const ST>& t) {
    using Acc = typename T::accumulator;
    using R = typename T::arithmetic;
    const auto sq = ctx.template temp<Acc>(p.shape());
    ctx.template map_into<R>("precis::mse", sq, fn_::squared_difference{}, p, t);
    ctx.template reduce<Acc, reduction::mean>("precis::mse", sq.as_const(), true, 0, y);
  }
  template <class T, class Ctx, class G, class O, class SP, class ST, class GP, class GT>
  static void backward(const Ctx& ctx, const attrs&, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const SP>, TensorView<const ST>>& in,
                       const std::tuple<TensorView<GP>, TensorView<GT>>& gin) {
    using R = typename T::arithmetic;
    const auto& [p, t] = in;
    const R c = R(2) / R(static_cast<double>(p.size()));
    const TensorView<const G> g(gy.data(), Shape{});
    if (std::get<0>(gin).data()) ctx.template accumulate<R>("precis::mse", std::get<0>(gin), fn_::d_mse<R>{c}, g, p, t);
    if (std::get<1>(gin).data()) ctx.template accumulate<R>("precis::mse", std::get<1>(gin), fn_::d_mse<R>{R(-c)}, g, p, t);
  }
};

}  // namespace precis::op

namespace precis {

/// Class labels in a tape's backend memory (a device array on a GPU tape), read in place by
/// cross_entropy: not checked on the host, and they must stay unchanged until the step is reset.
struct borrowed_labels {
  std::span<const std::int64_t> labels;
};

/// Mean over rows of -log softmax(logits)[row, label] (op::cross_entropy).
template <class P, class S>
auto cross_entropy(const Var<P, S>& logits, std::span<const std::int64_t> labels) {
  return record<op::cross_entropy>({labels}, logits);
}
/// The same with labels the backend holds (a label outside [0, classes) gives NaN in its row).
template <class P, class S>
auto cross_entropy(const Var<P, S>& logits, borrowed_labels labels) {
  return record<op::cross_entropy>({labels.labels, true}, logits);
}
/// Mean over rows of -logp[row, label] (op::nll).
template <class P, class S>
auto nll(const Var<P, S>& logp, std::span<const std::int64_t> labels) { return record<op::nll>({labels}, logp); }
/// Mean of (pred - target)^2 over all elements (op::mse).
template <class P, class SP, class ST>
auto mse(const Var<P, SP>& pred, const Var<P, ST>& target) { return record<op::mse>({}, pred, target); }

}  // namespace precis
