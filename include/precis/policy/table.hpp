// The op-safety table: one tag type per differentiable op, each with its safety class and the
// reason for it. This file is the only place the classification lives; policies read it
// through policy::op_safety<Op> (a user may specialize that for one op) or a policy's own
// safety_of<Op> (see policies.hpp). docs/policies.md prints the table from these tags.
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

/// Op tags. Each names the op, its safety class and why.
namespace precis::op {

namespace pd = precis::policy::detail;
using precis::policy::safety;

// --- low-precision safe: products are exact in fp32; only the accumulator rounds -------------
struct matmul : pd::tag<safety::low_precision_safe> {
  static constexpr std::string_view name = "matmul";
  static constexpr std::string_view reason =
      "a product of two fp16/bf16/fp8 values is exact in fp32, so the error comes from the accumulator "
      "alone: gamma_K(u_acc) (block-FMA bound, numerics case 9); a wide accumulator makes K harmless";
};
struct linear : pd::tag<safety::low_precision_safe> {
  static constexpr std::string_view name = "linear";
  static constexpr std::string_view reason = "x W^T + b: a matmul; the bias is added in the accumulator before the one rounding";
};

// --- needs wide: overflow thresholds, underflow, accumulation length -------------------------
struct exp : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "exp";
  static constexpr std::string_view reason =
      "overflows fp16 for x > 11.09 (e^11.09 = 65504) and flushes to 0 for x < -17.33 (half of 2^-24)";
};
struct log : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "log";
  static constexpr std::string_view reason =
      "log(1 + d) is about d: near x = 1 an fp16 input keeps only its rounding error; the derivative 1/x "
      "overflows fp16 for |x| < 1/65504";
};
struct pow : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "pow";
  static constexpr std::string_view reason = "x^y leaves fp16's range for modest arguments (2^16 > 65504, 10^5 > 65504)";
};
struct reciprocal : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "reciprocal";
  static constexpr std::string_view reason =
      "1/x overflows fp16 for |x| < 2^-16, which are ordinary fp16 values (the normal range starts at 2^-14 "
      "and subnormals reach 2^-24)";
};
struct rsqrt : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "rsqrt";
  static constexpr std::string_view reason =
      "applied to variances (+ eps): the usual eps = 1e-5 is below fp16's smallest normal 2^-14 and keeps "
      "only 4 significant bits there";
};
struct softmax : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "softmax";
  static constexpr std::string_view reason =
      "sum of n exponentials: exceeds 65504 in fp16 for a softmax over more than 65504 near-equal logits "
      "(vocabulary-sized), and low-precision accumulation stagnates (numerics cases 2-3)";
};
struct log_softmax : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "log_softmax";
  static constexpr std::string_view reason = "x - logsumexp(x): softmax's sum, then a difference of nearby values";
};
struct logsumexp : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "logsumexp";
  static constexpr std::string_view reason = "softmax's sum of exponentials";
};
struct sum : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "sum";
  static constexpr std::string_view reason =
      "accumulation length: 4096 values of 32 sum to 131072 > 65504 (fp16 overflow); fp16 sums of ones stop "
      "at 2048 and bf16 at 256 (numerics case 2)";
};
struct mean : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "mean";
  static constexpr std::string_view reason = "a sum divided by n: the same accumulation";
};
struct norm : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "norm";
  static constexpr std::string_view reason =
      "squares overflow fp16 for |x| > 255.9 (sqrt(65504)) and flush for |x| < 2^-12.5; then a sum";
};
struct layer_norm : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "layer_norm";
  static constexpr std::string_view reason = "a row's mean and variance: accumulation, squares, and an eps below fp16's normal range";
};
struct cross_entropy : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "cross_entropy";
  static constexpr std::string_view reason = "logsumexp over the classes, then a mean over the batch";
};
struct nll : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "nll";
  static constexpr std::string_view reason = "a mean over the batch of log-probabilities";
};
struct mse : pd::tag<safety::needs_wide> {
  static constexpr std::string_view name = "mse";
  static constexpr std::string_view reason = "squared differences overflow fp16 above 255.9, then a mean over all elements";
};

// --- promote: one rounding in the widest input type ------------------------------------------
struct add : pd::tag<safety::promote> {
  static constexpr std::string_view name = "add";
  static constexpr std::string_view reason =
      "one rounding of two values; mixed inputs promote so neither is narrowed (range: the inputs' own)";
};
struct sub : pd::tag<safety::promote> {
  static constexpr std::string_view name = "sub";
  static constexpr std::string_view reason = "as add";
};
struct mul : pd::tag<safety::promote> {
  static constexpr std::string_view name = "mul";
  static constexpr std::string_view reason = "one rounding of a product; mixed inputs promote";
};
struct div : pd::tag<safety::promote> {
  static constexpr std::string_view name = "div";
  static constexpr std::string_view reason = "one rounding of a quotient; mixed inputs promote";
};
struct maximum : pd::tag<safety::promote> {
  static constexpr std::string_view name = "maximum";
  static constexpr std::string_view reason = "element-wise max of two tensors: exact selection in the widest input type";
};
struct minimum : pd::tag<safety::promote> {
  static constexpr std::string_view name = "minimum";
  static constexpr std::string_view reason = "as maximum";
};
struct cat : pd::tag<safety::promote> {
  static constexpr std::string_view name = "cat";
  static constexpr std::string_view reason = "copies: exact in the widest input type";
};

// --- neutral: exact, or bounded so no overflow ------------------------------------------------
struct neg : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "neg";
  static constexpr std::string_view reason = "exact in any format";
};
struct abs : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "abs";
  static constexpr std::string_view reason = "exact in any format";
};
struct relu : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "relu";
  static constexpr std::string_view reason = "max(x, 0): exact";
};
struct sqrt : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "sqrt";
  static constexpr std::string_view reason = "halves the exponent: cannot overflow or underflow; one rounding";
};
struct tanh : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "tanh";
  static constexpr std::string_view reason = "bounded by 1: no overflow; one rounding";
};
struct sigmoid : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "sigmoid";
  static constexpr std::string_view reason = "bounded in [0, 1]: no overflow; one rounding";
};
struct gelu : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "gelu";
  static constexpr std::string_view reason = "|gelu(x)| <= |x|: no overflow beyond the input's; one rounding";
};
struct reshape : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "reshape";
  static constexpr std::string_view reason = "moves no value";
};
struct transpose : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "transpose";
  static constexpr std::string_view reason = "moves no value";
};
struct slice : pd::tag<safety::neutral> {
  static constexpr std::string_view name = "slice";
  static constexpr std::string_view reason = "moves no value";
};

// --- ops of the op layer: each defined, with its forward and backward, in precis/ops/ ------------
struct conv2d;
struct max_pool2d;
struct avg_pool2d;
struct batch_norm;
struct embedding;
struct bmm;
struct attention;
struct dropout;
struct where;
struct masked_fill;
struct max;
struct min;
struct silu;
struct gelu_tanh;
struct permute;

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

/// The ops defined in the op layer (precis/ops/): each one struct with its policy entry,
/// forward and backward, from which the tape op and the eager call both come.
using layer = list<conv2d, max_pool2d, avg_pool2d, batch_norm, embedding, bmm, attention, dropout, where, masked_fill,
                   max, min, silu, gelu_tanh, permute>;

}  // namespace precis::op

namespace precis::policy {

/// The table's entry for Op. Specialize to reclassify an op for every policy.
template <class Op>
struct op_safety {
  static constexpr safety value = Op::safety_class;
};

}  // namespace precis::policy
