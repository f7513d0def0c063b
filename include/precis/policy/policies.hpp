// Precision policies: which type each op computes, accumulates and returns in, which type
// parameters, gradients and master weights are stored in, and whether loss scaling is on by
// default. Policies are types, chosen at compile time:
//   true_<T>                 everything in T ("32-true" = true_<float>)
//   mixed<Low, High = float> autocast-like: parameters and activations in Low, master weights
//                            and needs-wide ops in High, matmul accumulates in High
//   fp8_mixed                bf16-mixed with fp8 GEMMs: matmul, linear and conv2d cast their
//                            operands to scaled e4m3 (forward) and e5m2 (gradients), accumulate
//                            and return in fp32; fp8_mixed_with<Recipe> picks the scaling recipe
//   strict<P>                P, with every unsafe choice a compile error
//   named<"bf16-mixed">      the strings PyTorch Lightning users know
// op_types<P, Op, In...> answers for an op and its input storage types; users customize a
// policy's classification (a member `safety_of`) or its types (specialize op_types).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "precis/error.hpp"
#include "precis/format/all.hpp"
#include "precis/fp8/scaling.hpp"
#include "precis/policy/table.hpp"
#include "precis/tensor/elementwise.hpp"

namespace precis::policy {

namespace detail {

template <class... T>
struct widest;
template <class T>
struct widest<T> {
  using type = T;
};
template <class A, class B, class... Rest>
struct widest<A, B, Rest...> {
  using type = typename widest<precis::detail::promote_t<A, B>, Rest...>::type;
};

/// At least fp32's precision and exponent range: what needs-wide ops and accumulators need.
template <class T>
constexpr bool is_wide() {
  return format_traits<T>::digits >= format_traits<float>::digits && format_traits<T>::emax >= format_traits<float>::emax;
}

template <class T>
constexpr bool narrow_range() {  // fp16, fp8: gradients underflow without loss scaling
  return format_traits<T>::emax < format_traits<float>::emax;
}

template <class... T>
struct always_false : std::false_type {};

/// The precision strings of PyTorch Lightning ("16", "bf16", "32", "64"); the format's name for
/// any other type.
template <class T>
std::string precision_string() {
  if constexpr (std::is_same_v<T, half>) return "16";
  else if constexpr (std::is_same_v<T, float>) return "32";
  else if constexpr (std::is_same_v<T, double>) return "64";
  else return std::string(format_traits<T>::name);
}

}  // namespace detail

/// The widest of the given storage types (precis's promotion: a type that holds every value).
template <class... T>
using widest_t = typename detail::widest<T...>::type;

/// A policy that casts GEMM operands to scaled fp8 (it names an fp8 recipe: fp8_mixed_with).
template <class P>
concept fp8_policy = requires { typename P::fp8_recipe; };

/// Shared by the built-in policies. Low: low-precision-safe ops and parameter storage; High:
/// needs-wide ops and accumulators; Grad: gradient storage; Master: master weights.
template <class Low, class High, class Grad, class Master, bool LossScaling>
struct basic_policy {
  using low_type = Low;
  using high_type = High;
  using param_type = Low;
  using activation_type = Low;
  using grad_type = Grad;
  using master_type = Master;
  static constexpr bool needs_loss_scaling = LossScaling;
  static constexpr bool per_tensor_scaling = false;
  static constexpr bool is_strict = false;
  /// Whether GEMMs must give the same bits on every CPU: true keeps them on the kernels that sum
  /// in IEEE fp32 with gradual underflow, false (the default) also allows the AVX512-BF16 and
  /// AMX ones, which flush fp32 denormals to zero, AMX also summing in its own order
  /// (tensor/gemm/kernel_avx512_bf16.hpp, kernel_amx_bf16.hpp).
  static constexpr bool reproducible_gemm = false;
  /// The classification this policy uses; hide it in a derived policy to reclassify ops.
  template <class Op>
  static constexpr safety safety_of = op_safety<Op>::value;
};

/// Everything in T: storage, compute, accumulation, master weights. No loss scaling.
template <class T>
struct true_ : basic_policy<T, T, T, T, false> {
  static std::string name() { return detail::precision_string<T>() + "-true"; }
};

/// Autocast-like mixed precision. Loss scaling is on by default when Low has a narrower
/// exponent range than fp32 (fp16: yes; bf16: no).
template <class Low, class High = float>
struct mixed : basic_policy<Low, High, Low, High, detail::narrow_range<Low>()> {
  static std::string name() {
    return detail::precision_string<Low>() + "-mixed" +
           (std::is_same_v<High, float> ? "" : "<" + std::string(format_traits<High>::name) + ">");
  }
};

/// fp8 training in the style of NVIDIA's Transformer Engine: the GEMM ops (matmul, linear,
/// conv2d) cast their forward operands to e4m3 and their output gradient to e5m2, each tensor
/// with its own fp32 scale chosen by Recipe (fp8::current_scaling, fp8::delayed_scaling or
/// fp8::no_scaling), accumulate in fp32 and return fp32. Every other op runs as under
/// bf16-mixed: parameters and activations in bf16, fp32 masters; needs-wide ops never see fp8.
/// Per-tensor scaling replaces loss scaling. The scales live in the tape (Tape::fp8()).
template <class Recipe = fp8::current_scaling>
struct fp8_mixed_with : basic_policy<bfloat16, float, bfloat16, float, false> {
  static constexpr bool per_tensor_scaling = !std::is_same_v<Recipe, fp8::no_scaling>;
  using fp8_recipe = Recipe;
  using fp8_forward = float8_e4m3;   // GEMM operands in the forward pass
  using fp8_backward = float8_e5m2;  // the output gradient in the backward pass
  static std::string name() {
    if constexpr (std::is_same_v<Recipe, fp8::current_scaling>) return "fp8-mixed";
    else if constexpr (std::is_same_v<Recipe, fp8::delayed_scaling>) return "fp8-mixed<delayed>";
    else if constexpr (std::is_same_v<Recipe, fp8::no_scaling>) return "fp8-mixed<unscaled>";
    else return "fp8-mixed<" + fp8::recipe(Recipe{}).str() + ">";
  }
};

/// "fp8-mixed": current scaling (each cast scales from the tensor's own amax), so the first step
/// is already scaled; fp8_mixed_with<fp8::delayed_scaling> is Transformer Engine's DelayedScaling.
using fp8_mixed = fp8_mixed_with<>;

/// P with every unsafe choice a compile error (see op_types).
template <class P>
struct strict : P {
  static constexpr bool is_strict = true;
  static std::string name() { return "strict<" + P::name() + ">"; }
};

/// P whose GEMMs give the same bits on every x86 CPU (see basic_policy::reproducible_gemm).
template <class P>
struct reproducible : P {
  static constexpr bool reproducible_gemm = true;
  static std::string name() { return "reproducible<" + P::name() + ">"; }
};

/// Diagnostics of strict<P>: the op, the type it would use, and a policy that is safe are the
/// template arguments, so the compiler prints all three in the instantiation context.
template <class Op, class Type, class SafeAlternative>
struct unsafe_compute_type {
  static_assert(detail::always_false<Op, Type>::value,
                "precis::policy::strict: this op is 'needs wide' in the op-safety table and would compute or "
                "accumulate in a type narrower than fp32. The op, that type and a safe alternative policy are "
                "the template arguments of unsafe_compute_type<Op, Type, SafeAlternative> in the "
                "'In instantiation of' line of this diagnostic.");
};

template <class Op, class Type, class SafeAlternative>
struct unscaled_fp8_storage {
  static_assert(detail::always_false<Op, Type>::value,
                "precis::policy::strict: this op would store or read its values in an fp8 format without a "
                "scale. fp8 is only safe as a scaled GEMM operand (fp8_mixed: matmul, linear and conv2d cast "
                "with a per-tensor scale); the op, the fp8 type and a safe alternative policy are the template "
                "arguments of unscaled_fp8_storage<Op, Type, SafeAlternative> in the 'In instantiation of' line "
                "of this diagnostic.");
};

template <class Op, class Type, class SafeAlternative>
struct unsafe_accumulator {
  static_assert(detail::always_false<Op, Type>::value,
                "precis::policy::strict: this op is 'low-precision safe' only with a wide accumulator, and "
                "would accumulate in a type narrower than fp32. The op, that type and a safe alternative "
                "policy are the template arguments of unsafe_accumulator<Op, Type, SafeAlternative> in the "
                "'In instantiation of' line of this diagnostic.");
};

namespace detail {

/// The fp8 formats of a policy with a recipe (void for the others).
template <class P, bool Scaled>
struct fp8_types {
  using forward = void;
  using backward = void;
};
template <class P>
struct fp8_types<P, true> {
  using forward = typename P::fp8_forward;
  using backward = typename P::fp8_backward;
};

/// Whether policy P casts op Op's GEMM operands to scaled fp8 (P names an fp8 recipe and Op is
/// one of the GEMM ops that take part: Op::scaled_fp8).
template <class P, class Op>
constexpr bool scaled_fp8() {
  return fp8_policy<P> && requires { requires Op::scaled_fp8; };
}

/// Under a strict policy, instantiates the diagnostic for an unsafe (op, type) pair.
template <class P, class Op, safety Class, class Compute, class Accumulate, class Output, bool Scaled, class SafeAlternative>
constexpr bool strict_check() {
  if constexpr (P::is_strict) {
    if constexpr (!Scaled && (fp8::is_fp8<Compute> || fp8::is_fp8<Output>)) {
      return sizeof(unscaled_fp8_storage<Op, std::conditional_t<fp8::is_fp8<Compute>, Compute, Output>, fp8_mixed>) > 0;
    } else if constexpr (Class == safety::needs_wide && !is_wide<Compute>()) {
      return sizeof(unsafe_compute_type<Op, Compute, SafeAlternative>) > 0;
    } else if constexpr (Class == safety::low_precision_safe && !is_wide<Accumulate>()) {
      return sizeof(unsafe_accumulator<Op, Accumulate, SafeAlternative>) > 0;
    }
  }
  return true;
}

}  // namespace detail

/// The four precision roles of an op under policy P for inputs stored as In...:
///   storage     the format the op reads its inputs in: an input stored wider is rounded to it
///               once (only low-precision-safe ops ever narrow an input, autocast's rule)
///   arithmetic  the type each element-wise expression is evaluated in before its one rounding
///               to a stored result: default_compute_t<storage> (fp32 for the 8- and 16-bit
///               formats, the format itself otherwise); Tensor's Compute parameter
///   accumulator the type every sum of the op runs in, forward and backward: reductions, GEMM
///               products, sums over broadcast axes, a bias's gradient, a norm's statistics
///   output      the storage type of the result
/// Rules by safety class:
///   low-precision safe: storage = Low, accumulator = High, output = Low
///   needs wide:         storage = accumulator = output = widest(High, In...)
///   promote:            storage = output = widest(In...), accumulator = arithmetic
///   neutral:            storage = output = widest(In...), accumulator = arithmetic
/// (promote and neutral ops have no sum in their forward; their backward's sums over broadcast
/// axes run in the arithmetic type, as autocast's do). Under an fp8 policy (P::fp8_recipe), the
/// GEMM ops that take part (Op::scaled_fp8: matmul, linear, conv2d) read their operands as
/// scaled P::fp8_forward, their output gradient as scaled P::fp8_backward (grad_operand), and
/// accumulate and return in High. A strict policy rejects any other fp8 storage. Specialize for
/// your own policy and an op to change one entry.
template <class P, class Op, class... In>
struct op_types {
  static_assert(sizeof...(In) > 0, "precis::policy::op_types: name the op's input storage types");
  static constexpr safety safety_class = P::template safety_of<Op>;
  using low = typename P::low_type;
  using high = typename P::high_type;
  /// Whether the op casts its operands to scaled fp8 (see above).
  static constexpr bool scaled = detail::scaled_fp8<P, Op>();
  using storage = std::conditional_t<
      scaled, typename detail::fp8_types<P, scaled>::forward,
      std::conditional_t<safety_class == safety::low_precision_safe, low,
                         std::conditional_t<safety_class == safety::needs_wide, widest_t<high, In...>, widest_t<In...>>>>;
  /// The format the output gradient is cast to in the backward (scaled ops; storage otherwise).
  using grad_operand = std::conditional_t<scaled, typename detail::fp8_types<P, scaled>::backward, storage>;
  using arithmetic = default_compute_t<storage>;
  using accumulator = std::conditional_t<safety_class == safety::low_precision_safe, high,
                                         std::conditional_t<safety_class == safety::needs_wide, storage, arithmetic>>;
  using output = std::conditional_t<scaled, high, std::conditional_t<safety_class == safety::low_precision_safe, low, storage>>;

  static_assert(detail::strict_check<P, Op, safety_class, storage, accumulator, output, scaled, mixed<low, float>>());
};

// ---- named policies -------------------------------------------------------------------------

/// A string usable as a template argument: named<"bf16-mixed">.
template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&s)[N]) { std::copy_n(s, N, chars); }
  constexpr std::string_view view() const { return {chars, N - 1}; }
};

namespace detail {

/// Position of a precision string in `names` (aliases included); -1 for an unknown one.
constexpr int policy_index(std::string_view s) {
  if (s == "16-mixed" || s == "16") return 0;
  if (s == "bf16-mixed" || s == "bf16") return 1;
  if (s == "fp8-mixed") return 2;
  if (s == "16-true") return 3;
  if (s == "bf16-true") return 4;
  if (s == "32-true" || s == "32") return 5;
  if (s == "64-true" || s == "64") return 6;
  return -1;
}

template <int I>
struct policy_at {
  static_assert(I >= 0,
                "precis::policy::named: unknown policy name. Valid names: \"16-mixed\", \"bf16-mixed\", "
                "\"fp8-mixed\", \"16-true\", \"bf16-true\", \"32-true\", \"64-true\", and the aliases \"16\" "
                "(16-mixed), \"bf16\" (bf16-mixed), \"32\" (32-true), \"64\" (64-true).");
  using type = void;
};
template <>
struct policy_at<0> {
  using type = mixed<half, float>;
};
template <>
struct policy_at<1> {
  using type = mixed<bfloat16, float>;
};
template <>
struct policy_at<2> {
  using type = fp8_mixed;
};
template <>
struct policy_at<3> {
  using type = true_<half>;
};
template <>
struct policy_at<4> {
  using type = true_<bfloat16>;
};
template <>
struct policy_at<5> {
  using type = true_<float>;
};
template <>
struct policy_at<6> {
  using type = true_<double>;
};

}  // namespace detail

/// The policy a precision string names; named<"bf16-mixed"> is mixed<bfloat16, float>.
template <fixed_string Name>
using named = typename detail::policy_at<detail::policy_index(Name.view())>::type;

/// The canonical names, in the order dispatch tries them.
inline constexpr std::array<std::string_view, 7> names{"16-mixed", "bf16-mixed", "fp8-mixed", "16-true",
                                                       "bf16-true", "32-true", "64-true"};

/// Runs f.template operator()<P>() for the policy `name` names (canonical names and aliases),
/// from a run-time string such as a command-line flag; each named policy is instantiated once.
/// An unknown name throws invalid_argument listing the valid names.
template <class F>
decltype(auto) dispatch(std::string_view name, F&& f) {
  switch (detail::policy_index(name)) {
    case 0: return f.template operator()<detail::policy_at<0>::type>();
    case 1: return f.template operator()<detail::policy_at<1>::type>();
    case 2: return f.template operator()<detail::policy_at<2>::type>();
    case 3: return f.template operator()<detail::policy_at<3>::type>();
    case 4: return f.template operator()<detail::policy_at<4>::type>();
    case 5: return f.template operator()<detail::policy_at<5>::type>();
    case 6: return f.template operator()<detail::policy_at<6>::type>();
    default: break;
  }
  std::string valid;
  for (auto n : names) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw invalid_argument("precis::policy::dispatch: unknown policy name \"" + std::string(name) +
                         "\"; valid names: " + valid + " (aliases: 16, bf16, 32, 64)");
}

}  // namespace precis::policy
