// Policy-aware tensor ops: ops<P>::softmax(x) converts its inputs to the compute type the
// policy gives for (op, input storage types), runs the tensor engine with the policy's
// accumulator, and returns the policy's output storage type. The same model code runs under
// every policy:
//   template <class P> auto head(const auto& x, const auto& w) {
//     using O = precis::ops<P>;
//     return O::log_softmax(O::relu(O::matmul(x, w)), -1);
//   }
// Views returned by reshape/transpose/slice alias their argument (pass an lvalue).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "precis/policy/policies.hpp"
#include "precis/tensor/all.hpp"

namespace precis {

/// Op Op evaluated eagerly under policy P (defined with the op layer, precis/ops/op.hpp).
template <class P, class Op, class... X>
auto evaluate(const typename Op::attrs& a, const X&... x);

namespace policy::detail {

template <class T>
inline constexpr overflow overflow_into = format_traits<T>::has_infinity ? overflow::infinity : overflow::saturate;

/// x as storage T: a view when it already is, otherwise rounded once to nearest (formats
/// without infinities saturate, as fp8 training recipes do).
template <class T, tensor_like X>
auto stored_as(const X& x) {
  if constexpr (std::is_same_v<storage_of<X>, T>) {
    return as_view(x);
  } else {
    return astype<T>(x, rounding::nearest_even, overflow_into<T>);
  }
}

/// A result tensor in storage T (rounded once if it is not already).
template <class T, class S, class C>
auto result_as(Tensor<S, C>&& r) {
  if constexpr (std::is_same_v<S, T>) {
    return std::move(r);
  } else {
    return astype<T>(r, rounding::nearest_even, overflow_into<T>);
  }
}

struct reciprocal_fn {
  template <class T>
  T operator()(const T& a) const {
    return T(1) / a;
  }
};

struct identity_fn {
  template <class T>
  T operator()(const T& a) const {
    return a;
  }
};

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

template <class X>
void check_2d(const char* op, const X& x) {
  if (as_view(x).rank() != 2) {
    throw shape_error(std::string(op) + ": input " + as_view(x).shape().str() + "; expected [batch, classes]");
  }
}

}  // namespace policy::detail

/// The tensor ops under policy P. Every function names its op tag, so op_types<P, Tag, In...>
/// decides its types; P = policy::strict<...> turns an unsafe choice into a compile error.
template <class P>
struct ops {
  using policy_type = P;
  template <class Op, class... X>
  using types = policy::op_types<P, Op, storage_of<X>...>;

 private:
  template <class Op, class F, tensor_like X>
  static auto unary(const X& x, F f) {
    using T = types<Op, X>;
    return policy::detail::result_as<typename T::output>(f(policy::detail::stored_as<typename T::compute>(x)));
  }
  template <class Op, class F, tensor_like A, tensor_like B>
  static auto binary(const A& a, const B& b, F f) {
    using T = types<Op, A, B>;
    using C = typename T::compute;
    return policy::detail::result_as<typename T::output>(
        f(policy::detail::stored_as<C>(a), policy::detail::stored_as<C>(b)));
  }
  /// Reductions and the softmax family: compute in C, accumulate in Acc, return Out.
  template <class Op, tensor_like X>
  using acc_t = typename types<Op, X>::accumulate;

 public:
  /// Any op of the op layer, a user's own included: call<op::conv2d>(options, x, w).
  template <class Op, tensor_like... X>
  static auto call(const typename Op::attrs& a, const X&... x) {
    return precis::evaluate<P, Op>(a, x...);
  }

  // ---- low-precision safe ----
  template <tensor_like A, tensor_like B>
  static auto matmul(const A& a, const B& b) {
    using T = types<op::matmul, A, B>;
    using L = typename T::compute;
    return policy::detail::result_as<typename T::output>(precis::matmul<typename T::accumulate>(
        policy::detail::stored_as<L>(a), policy::detail::stored_as<L>(b)));
  }
  /// x W^T + bias for x [m, in], W [out, in], bias [out]: bias added in the accumulator.
  template <tensor_like X, tensor_like W, tensor_like Bias>
  static auto linear(const X& x, const W& w, const Bias& bias) {
    using T = types<op::linear, X, W, Bias>;
    using L = typename T::compute;
    using Acc = typename T::accumulate;
    const auto xl = policy::detail::stored_as<L>(x);
    const auto wl = policy::detail::stored_as<L>(w);
    const auto xv = as_view(xl), wv = as_view(wl), bv = as_view(bias);
    if (xv.rank() != 2 || wv.rank() != 2 || bv.rank() != 1 || xv.shape()[1] != wv.shape()[1] ||
        bv.shape()[0] != wv.shape()[0]) {
      throw shape_error("precis::ops::linear: x " + xv.shape().str() + ", W " + wv.shape().str() + ", bias " +
                        bv.shape().str() + "; expected [m, in], [out, in], [out]");
    }
    Tensor<Acc> y(Shape{xv.shape()[0], wv.shape()[0]});
    map_into<Acc>("precis::ops::linear", y.view(), policy::detail::identity_fn{}, bv);  // broadcast the bias
    gemm<Acc>(Acc(1), xv, wv.transpose(), Acc(1), y);
    return policy::detail::result_as<typename T::output>(std::move(y));
  }
  template <tensor_like X, tensor_like W>
  static auto linear(const X& x, const W& w) {
    using T = types<op::linear, X, W>;
    using L = typename T::compute;
    return policy::detail::result_as<typename T::output>(precis::matmul<typename T::accumulate>(
        policy::detail::stored_as<L>(x), as_view(policy::detail::stored_as<L>(w)).transpose()));
  }

  // ---- needs wide ----
  template <tensor_like X>
  static auto exp(const X& x) { return unary<op::exp>(x, [](const auto& v) { return precis::exp(v); }); }
  template <tensor_like X>
  static auto log(const X& x) { return unary<op::log>(x, [](const auto& v) { return precis::log(v); }); }
  template <tensor_like X, tensor_like Y>
  static auto pow(const X& x, const Y& y) {
    return binary<op::pow>(x, y, [](const auto& a, const auto& b) { return precis::pow(a, b); });
  }
  template <tensor_like X>
  static auto reciprocal(const X& x) {
    return unary<op::reciprocal>(x, [](const auto& v) {
      using V = decltype(as_view(v));
      return map<storage_of<V>, compute_of<V>>("precis::ops::reciprocal", policy::detail::reciprocal_fn{}, as_view(v));
    });
  }
  template <tensor_like X>
  static auto rsqrt(const X& x) { return unary<op::rsqrt>(x, [](const auto& v) { return precis::rsqrt(v); }); }
  template <tensor_like X>
  static auto softmax(const X& x, int axis) {
    return unary<op::softmax>(x, [axis](const auto& v) { return precis::softmax<acc_t<op::softmax, X>>(v, axis); });
  }
  template <tensor_like X>
  static auto log_softmax(const X& x, int axis) {
    return unary<op::log_softmax>(x, [axis](const auto& v) { return precis::log_softmax<acc_t<op::log_softmax, X>>(v, axis); });
  }
  template <tensor_like X>
  static auto logsumexp(const X& x, int axis) {
    return unary<op::logsumexp>(x, [axis](const auto& v) { return precis::logsumexp<acc_t<op::logsumexp, X>>(v, axis); });
  }
  template <tensor_like X>
  static auto sum(const X& x) { return unary<op::sum>(x, [](const auto& v) { return precis::sum<acc_t<op::sum, X>>(v); }); }
  template <tensor_like X>
  static auto sum(const X& x, int axis) {
    return unary<op::sum>(x, [axis](const auto& v) { return precis::sum<acc_t<op::sum, X>>(v, axis); });
  }
  template <tensor_like X>
  static auto mean(const X& x) { return unary<op::mean>(x, [](const auto& v) { return precis::mean<acc_t<op::mean, X>>(v); }); }
  template <tensor_like X>
  static auto mean(const X& x, int axis) {
    return unary<op::mean>(x, [axis](const auto& v) { return precis::mean<acc_t<op::mean, X>>(v, axis); });
  }
  /// The 2-norm.
  template <tensor_like X>
  static auto norm(const X& x) { return unary<op::norm>(x, [](const auto& v) { return precis::norm2<acc_t<op::norm, X>>(v); }); }
  template <tensor_like X>
  static auto norm(const X& x, int axis) {
    return unary<op::norm>(x, [axis](const auto& v) { return precis::norm2<acc_t<op::norm, X>>(v, axis); });
  }
  /// (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance).
  template <tensor_like X, tensor_like G, tensor_like B>
  static auto layer_norm(const X& x, const G& gamma, const B& beta, double eps = 1e-5) {
    using T = types<op::layer_norm, X, G, B>;
    using C = typename T::compute;
    using Acc = typename T::accumulate;
    const auto xc = policy::detail::stored_as<C>(x);
    const auto xv = as_view(xc);
    if (xv.rank() < 1 || as_view(gamma).rank() != 1 || as_view(beta).rank() != 1 ||
        as_view(gamma).shape()[0] != xv.shape().back() || as_view(beta).shape()[0] != xv.shape().back()) {
      throw shape_error("precis::ops::layer_norm: x " + xv.shape().str() + ", gamma " + as_view(gamma).shape().str() +
                        ", beta " + as_view(beta).shape().str() + "; expected [..., d], [d], [d]");
    }
    if (!(eps >= 0)) throw invalid_argument("precis::ops::layer_norm: eps = " + std::to_string(eps) + "; expected >= 0");
    Shape keep = xv.shape();
    keep[keep.rank() - 1] = 1;
    const auto mu = precis::mean<Acc>(xc, -1);
    const auto centered = precis::sub(xc, mu.view().reshape(keep));
    const auto var = precis::mean<Acc>(precis::mul(centered, centered), -1);
    Tensor<C> e(Shape{});
    e.data()[0] = precis::detail::store<C>(precis::detail::load<Acc>(eps));
    const auto inv = precis::rsqrt(precis::add(var, e));
    auto y = precis::add(precis::mul(precis::mul(centered, inv.view().reshape(keep)), policy::detail::stored_as<C>(gamma)),
                               policy::detail::stored_as<C>(beta));
    return policy::detail::result_as<typename T::output>(std::move(y));
  }
  /// mean over rows of -log_softmax(logits)[row, label]: logits [batch, classes].
  template <tensor_like X>
  static auto cross_entropy(const X& logits, std::span<const std::int64_t> labels) {
    policy::detail::check_2d("precis::ops::cross_entropy", logits);
    using T = types<op::cross_entropy, X>;
    const auto ls = precis::log_softmax<typename T::accumulate>(policy::detail::stored_as<typename T::compute>(logits), 1);
    return picked_mean<T>("precis::ops::cross_entropy", ls, labels);
  }
  /// mean over rows of -logp[row, label]: logp [batch, classes] (log-probabilities).
  template <tensor_like X>
  static auto nll(const X& logp, std::span<const std::int64_t> labels) {
    policy::detail::check_2d("precis::ops::nll", logp);
    using T = types<op::nll, X>;
    return picked_mean<T>("precis::ops::nll", policy::detail::stored_as<typename T::compute>(logp), labels);
  }
  /// mean of (pred - target)^2 over all elements.
  template <tensor_like X, tensor_like Y>
  static auto mse(const X& pred, const Y& target) {
    using T = types<op::mse, X, Y>;
    using C = typename T::compute;
    if (!(as_view(pred).shape() == as_view(target).shape())) {
      throw shape_error("precis::ops::mse: prediction " + as_view(pred).shape().str() + " and target " +
                        as_view(target).shape().str() + " differ");
    }
    const auto d = precis::sub(policy::detail::stored_as<C>(pred), policy::detail::stored_as<C>(target));
    return policy::detail::result_as<typename T::output>(precis::mean<typename T::accumulate>(precis::mul(d, d)));
  }

  // ---- promote ----
  template <tensor_like A, tensor_like B>
  static auto add(const A& a, const B& b) { return binary<op::add>(a, b, [](const auto& x, const auto& y) { return precis::add(x, y); }); }
  template <tensor_like A, tensor_like B>
  static auto sub(const A& a, const B& b) { return binary<op::sub>(a, b, [](const auto& x, const auto& y) { return precis::sub(x, y); }); }
  template <tensor_like A, tensor_like B>
  static auto mul(const A& a, const B& b) { return binary<op::mul>(a, b, [](const auto& x, const auto& y) { return precis::mul(x, y); }); }
  template <tensor_like A, tensor_like B>
  static auto div(const A& a, const B& b) { return binary<op::div>(a, b, [](const auto& x, const auto& y) { return precis::div(x, y); }); }
  template <tensor_like A, tensor_like B>
  static auto maximum(const A& a, const B& b) { return binary<op::maximum>(a, b, [](const auto& x, const auto& y) { return precis::max(x, y); }); }
  template <tensor_like A, tensor_like B>
  static auto minimum(const A& a, const B& b) { return binary<op::minimum>(a, b, [](const auto& x, const auto& y) { return precis::min(x, y); }); }
  template <tensor_like Cond, tensor_like A, tensor_like B>
  static auto where(const Cond& cond, const A& a, const B& b) {
    return precis::evaluate<P, op::where>({}, cond, a, b);
  }
  /// Concatenation along `axis`; every other extent must agree.
  template <tensor_like A, tensor_like... Rest>
  static auto cat(int axis, const A& first, const Rest&... rest) {
    using T = types<op::cat, A, Rest...>;
    using C = typename T::output;
    const int ax = normalize_axis(axis, as_view(first).rank(), "precis::ops::cat");
    Shape shape = as_view(first).shape();
    index_t total = 0;
    const auto count = [&](const auto& x) {
      const Shape s = as_view(x).shape();
      bool ok = s.rank() == shape.rank();
      for (int i = 0; ok && i < s.rank(); ++i) ok = i == ax || s[i] == shape[i];
      if (!ok) {
        throw shape_error("precis::ops::cat: shape " + s.str() + " does not match " + shape.str() + " off axis " +
                          std::to_string(ax));
      }
      total += s[ax];
    };
    count(first);
    (count(rest), ...);
    shape[ax] = total;
    auto out = Tensor<C>::uninitialized(shape);
    index_t at = 0;
    const auto copy = [&](const auto& x) {
      const index_t len = as_view(x).shape()[ax];
      map_into<compute_of<Tensor<C>>>("precis::ops::cat", out.view().slice(ax, at, at + len),
                                      policy::detail::identity_fn{}, as_view(policy::detail::stored_as<C>(x)));
      at += len;
    };
    copy(first);
    (copy(rest), ...);
    return out;
  }

  // ---- neutral ----
  template <tensor_like X>
  static auto neg(const X& x) { return unary<op::neg>(x, [](const auto& v) { return precis::neg(v); }); }
  template <tensor_like X>
  static auto abs(const X& x) { return unary<op::abs>(x, [](const auto& v) { return precis::abs(v); }); }
  template <tensor_like X>
  static auto relu(const X& x) { return unary<op::relu>(x, [](const auto& v) { return precis::relu(v); }); }
  template <tensor_like X>
  static auto sqrt(const X& x) { return unary<op::sqrt>(x, [](const auto& v) { return precis::sqrt(v); }); }
  template <tensor_like X>
  static auto tanh(const X& x) { return unary<op::tanh>(x, [](const auto& v) { return precis::tanh(v); }); }
  template <tensor_like X>
  static auto sigmoid(const X& x) { return unary<op::sigmoid>(x, [](const auto& v) { return precis::sigmoid(v); }); }
  template <tensor_like X>
  static auto gelu(const X& x) { return unary<op::gelu>(x, [](const auto& v) { return precis::gelu(v); }); }
  template <tensor_like X>
  static auto max(const X& x, int axis) { return precis::evaluate<P, op::max>({axis}, x); }
  template <tensor_like X>
  static auto min(const X& x, int axis) { return precis::evaluate<P, op::min>({axis}, x); }
  template <tensor_like X>
  static auto reshape(const X& x, const Shape& shape) {
    (void)types<op::reshape, X>::safety_class;
    return as_view(x).reshape(shape);
  }
  template <tensor_like X>
  static auto transpose(const X& x) {
    (void)types<op::transpose, X>::safety_class;
    return as_view(x).transpose();
  }
  template <tensor_like X>
  static auto slice(const X& x, int axis, index_t begin, index_t end) {
    (void)types<op::slice, X>::safety_class;
    return as_view(x).slice(axis, begin, end);
  }

 private:
  template <class T, class L>
  static auto picked_mean(const char* op, const L& logp_, std::span<const std::int64_t> labels) {
    using C = typename T::compute;
    const auto logp = as_view(logp_);
    policy::detail::check_labels(op, labels, logp.shape()[0], logp.shape()[1]);
    Tensor<C> picked(Shape{logp.shape()[0]});
    for (index_t i = 0; i < logp.shape()[0]; ++i) {
      picked.data()[i] = precis::detail::store<C>(-precis::detail::load<typename T::accumulate>(logp(i, labels[static_cast<std::size_t>(i)])));
    }
    return policy::detail::result_as<typename T::output>(precis::mean<typename T::accumulate>(picked));
  }
};

}  // namespace precis
