// The op-safety classes and the list of every op. Each op's class and the reason for it are
// part of its definition (precis/ops/); policies read the class through policy::op_safety<Op>
// (a user may specialize that for one op) or a policy's own safety_of<Op> (see policies.hpp).
// docs/policies.md prints the table from the definitions.
//
// Thresholds quoted below follow from format_traits (fp16: max 65504, smallest normal 2^-14,
// smallest subnormal 2^-24, t = 11; bf16: t = 8 with fp32's exponent range).
#pragma once

#include <string_view>

namespace precis::policy {

/// How an op may run under a mixed policy (in the spirit of PyTorch's autocast lists):
enum class safety {
  low_precision_safe,  // low-precision inputs, accumulated in the policy's high type (matmul)
  needs_wide,          // computed, accumulated and returned in the policy's high type
  promote,             // computed in the widest input type
  neutral,             // runs in its input type: exact, or bounded so it cannot overflow
};

constexpr std::string_view to_string(safety s) noexcept {
  switch (s) {
    case safety::low_precision_safe: return "low-precision safe";
    case safety::needs_wide: return "needs wide";
    case safety::promote: return "promote";
    case safety::neutral: return "neutral";
  }
  return "?";
}

namespace detail {
template <safety S>
struct tag {
  static constexpr policy::safety safety_class = S;
};
}  // namespace detail

}  // namespace precis::policy

/// The ops. Each is defined once, in precis/ops/<file>.hpp, as a struct deriving from
/// op::def<safety class> with its name, the reason for its class, its forward and its backward;
/// the policies need only the declarations.
namespace precis::op {

// low-precision safe (precis/ops/linalg.hpp, conv.hpp, attention.hpp, batch_norm.hpp)
struct matmul;
struct linear;
struct bmm;
struct conv2d;
struct attention;
struct embedding;
// needs wide (elementwise.hpp, reduce.hpp, norm.hpp, batch_norm.hpp, conv.hpp, loss.hpp)
struct exp;
struct log;
struct pow;
struct reciprocal;
struct rsqrt;
struct softmax;
struct log_softmax;
struct logsumexp;
struct sum;
struct mean;
struct norm;
struct layer_norm;
struct batch_norm;
struct avg_pool2d;
struct cross_entropy;
struct nll;
struct mse;
// promote (elementwise.hpp, shape.hpp)
struct add;
struct sub;
struct mul;
struct div;
struct maximum;
struct minimum;
struct where;
struct dropout;
struct cat;
// neutral (elementwise.hpp, reduce.hpp, conv.hpp, shape.hpp)
struct neg;
struct abs;
struct relu;
struct sqrt;
struct tanh;
struct sigmoid;
struct gelu;
struct gelu_tanh;
struct silu;
struct max;
struct min;
struct max_pool2d;
struct masked_fill;
struct reshape;
struct transpose;
struct permute;
struct slice;

/// Every op tag, in table order.
template <class... Ops>
struct list {
  static constexpr std::size_t size = sizeof...(Ops);
  template <class F>
  static constexpr void for_each(F&& f) {
    (f.template operator()<Ops>(), ...);
  }
};

using all = list<matmul, linear, bmm, conv2d, attention, embedding, exp, log, pow, reciprocal, rsqrt, softmax,
                 log_softmax, logsumexp, sum, mean, norm, layer_norm, batch_norm, avg_pool2d, cross_entropy, nll, mse,
                 add, sub, mul, div, maximum, minimum, where, dropout, cat, neg, abs, relu, sqrt, tanh, sigmoid, gelu,
                 gelu_tanh, silu, max, min, max_pool2d, masked_fill, reshape, transpose, permute, slice>;

}  // namespace precis::op

namespace precis::policy {

/// The table's entry for Op. Specialize to reclassify an op for every policy.
template <class Op>
struct op_safety {
  static constexpr safety value = Op::safety_class;
};

}  // namespace precis::policy
