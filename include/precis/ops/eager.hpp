// Policy-aware eager calls: ops<P>::softmax(x, -1) evaluates op::softmax's forward on tensors
// under policy P, in the types op_types<P, op::softmax, storage of x> gives, and returns a tensor
// of the op's output type (a view for view ops). The same model code runs under every policy:
//   template <class P> auto head(const auto& x, const auto& w) {
//     using O = precis::ops<P>;
//     return O::log_softmax(O::relu(O::matmul(x, w)), -1);
//   }
// Every member is a front end of an op definition in precis/ops/; call<Op> reaches any op,
// a user's own included. Views returned by reshape/transpose/slice/permute alias their argument
// (pass an lvalue).
#pragma once

#include "precis/config.hpp"

#include <cstdint>
#include <span>

#include "precis/ops/attention.hpp"
#include "precis/ops/batch_norm.hpp"
#include "precis/ops/conv.hpp"
#include "precis/ops/elementwise.hpp"
#include "precis/ops/linalg.hpp"
#include "precis/ops/loss.hpp"
#include "precis/ops/norm.hpp"
#include "precis/ops/op.hpp"
#include "precis/ops/reduce.hpp"
#include "precis/ops/shape.hpp"

namespace precis {

/// The ops under policy P, evaluated eagerly on tensors or views. P = policy::strict<...> turns
/// an unsafe choice into a compile error.
template <class P>
struct ops {
  using policy_type = P;
  /// The four precision roles of Op on inputs like X...: storage, arithmetic, accumulator, output.
  template <class Op, class... X>
  using types = policy::op_types<P, Op, storage_of<X>...>;

  /// Any op of the op layer, a user's own included: call<op::conv2d>(options, x, w).
  template <class Op, tensor_like... X>
  static auto call(const typename Op::attrs& a, const X&... x) {
    return precis::evaluate<P, Op>(a, x...);
  }

  // ---- low-precision safe ----
  template <tensor_like A, tensor_like B>
  static auto matmul(const A& a, const B& b) { return call<op::matmul>({}, a, b); }
  /// x W^T + bias for x [m, in], W [out, in], bias [out]: the bias added in the accumulator.
  template <tensor_like X, tensor_like W, tensor_like Bias>
  static auto linear(const X& x, const W& w, const Bias& bias) { return call<op::linear>({}, x, w, bias); }
  template <tensor_like X, tensor_like W>
  static auto linear(const X& x, const W& w) { return call<op::linear>({}, x, w); }
  template <tensor_like A, tensor_like B>
  static auto bmm(const A& a, const B& b) { return call<op::bmm>({}, a, b); }

  // ---- needs wide ----
  template <tensor_like X>
  static auto exp(const X& x) { return call<op::exp>({}, x); }
  template <tensor_like X>
  static auto log(const X& x) { return call<op::log>({}, x); }
  template <tensor_like X, tensor_like Y>
  static auto pow(const X& x, const Y& y) { return call<op::pow>({}, x, y); }
  template <tensor_like X>
  static auto reciprocal(const X& x) { return call<op::reciprocal>({}, x); }
  template <tensor_like X>
  static auto rsqrt(const X& x) { return call<op::rsqrt>({}, x); }
  template <tensor_like X>
  static auto softmax(const X& x, int axis) { return call<op::softmax>({axis}, x); }
  template <tensor_like X>
  static auto log_softmax(const X& x, int axis) { return call<op::log_softmax>({axis}, x); }
  template <tensor_like X>
  static auto logsumexp(const X& x, int axis) { return call<op::logsumexp>({axis, false}, x); }
  template <tensor_like X>
  static auto sum(const X& x) { return call<op::sum>({0, true}, x); }
  template <tensor_like X>
  static auto sum(const X& x, int axis) { return call<op::sum>({axis, false}, x); }
  template <tensor_like X>
  static auto mean(const X& x) { return call<op::mean>({0, true}, x); }
  template <tensor_like X>
  static auto mean(const X& x, int axis) { return call<op::mean>({axis, false}, x); }
  /// The 2-norm.
  template <tensor_like X>
  static auto norm(const X& x) { return call<op::norm>({0, true}, x); }
  template <tensor_like X>
  static auto norm(const X& x, int axis) { return call<op::norm>({axis, false}, x); }
  /// (x - mean) / sqrt(var + eps) gamma + beta over the last axis (biased variance).
  template <tensor_like X, tensor_like G, tensor_like B>
  static auto layer_norm(const X& x, const G& gamma, const B& beta, double eps = 1e-5) {
    return call<op::layer_norm>({eps}, x, gamma, beta);
  }
  /// mean over rows of -log_softmax(logits)[row, label]: logits [batch, classes].
  template <tensor_like X>
  static auto cross_entropy(const X& logits, std::span<const std::int64_t> labels) {
    return call<op::cross_entropy>({labels}, logits);
  }
  /// mean over rows of -logp[row, label]: logp [batch, classes] (log-probabilities).
  template <tensor_like X>
  static auto nll(const X& logp, std::span<const std::int64_t> labels) { return call<op::nll>({labels}, logp); }
  /// mean of (pred - target)^2 over all elements.
  template <tensor_like X, tensor_like Y>
  static auto mse(const X& pred, const Y& target) { return call<op::mse>({}, pred, target); }

  // ---- promote ----
  template <tensor_like A, tensor_like B>
  static auto add(const A& a, const B& b) { return call<op::add>({}, a, b); }
  template <tensor_like A, tensor_like B>
  static auto sub(const A& a, const B& b) { return call<op::sub>({}, a, b); }
  template <tensor_like A, tensor_like B>
  static auto mul(const A& a, const B& b) { return call<op::mul>({}, a, b); }
  template <tensor_like A, tensor_like B>
  static auto div(const A& a, const B& b) { return call<op::div>({}, a, b); }
  template <tensor_like A, tensor_like B>
  static auto maximum(const A& a, const B& b) { return call<op::maximum>({}, a, b); }
  template <tensor_like A, tensor_like B>
  static auto minimum(const A& a, const B& b) { return call<op::minimum>({}, a, b); }
  template <tensor_like Cond, tensor_like A, tensor_like B>
  static auto where(const Cond& cond, const A& a, const B& b) { return call<op::where>({}, cond, a, b); }
  /// Concatenation along `axis`; every other extent must agree.
  template <tensor_like A, tensor_like... Rest>
  static auto cat(int axis, const A& first, const Rest&... rest) { return call<op::cat>({axis}, first, rest...); }

  // ---- neutral ----
  template <tensor_like X>
  static auto neg(const X& x) { return call<op::neg>({}, x); }
  template <tensor_like X>
  static auto abs(const X& x) { return call<op::abs>({}, x); }
  template <tensor_like X>
  static auto relu(const X& x) { return call<op::relu>({}, x); }
  template <tensor_like X>
  static auto sqrt(const X& x) { return call<op::sqrt>({}, x); }
  template <tensor_like X>
  static auto tanh(const X& x) { return call<op::tanh>({}, x); }
  template <tensor_like X>
  static auto sigmoid(const X& x) { return call<op::sigmoid>({}, x); }
  template <tensor_like X>
  static auto gelu(const X& x) { return call<op::gelu>({}, x); }
  template <tensor_like X>
  static auto gelu_tanh(const X& x) { return call<op::gelu_tanh>({}, x); }
  template <tensor_like X>
  static auto silu(const X& x) { return call<op::silu>({}, x); }
  template <tensor_like X>
  static auto max(const X& x, int axis) { return call<op::max>({axis}, x); }
  template <tensor_like X>
  static auto min(const X& x, int axis) { return call<op::min>({axis}, x); }
  template <tensor_like X, tensor_like M>
  static auto masked_fill(const X& x, const M& mask, double value) { return call<op::masked_fill>({value}, x, mask); }
  template <tensor_like X>
  static auto reshape(const X& x, const Shape& shape) { return call<op::reshape>({shape}, x); }
  template <tensor_like X>
  static auto transpose(const X& x) { return call<op::transpose>({}, x); }
  template <tensor_like X>
  static auto permute(const X& x, const Shape& perm) { return call<op::permute>({perm}, x); }
  template <tensor_like X>
  static auto slice(const X& x, int axis, index_t begin, index_t end, index_t step = 1) {
    return call<op::slice>({axis, begin, end, step}, x);
  }
};

}  // namespace precis
