// The op layer: an op is written once, as one struct in one file (precis/ops/<op>.hpp), and
// both the tape's recording and the eager policy-aware call come from that definition.
//
// A definition derives from op::def<safety class> and has:
//   name, reason                     its entry in the policy table (docs/policies.md)
//   attrs                            its non-tensor arguments (stride, axis, eps, ...)
//   saved<T>                         what its forward keeps for the backward (typed; in the arena)
//   shape(attrs, in shapes...)       the output shape; throws precis::shape_error on bad input
//   forward<T>(ctx, attrs, y, saved, x...)
//                                    writes y from the inputs x (views of their storage types)
//   backward<T>(ctx, attrs, saved, gy, y, tuple{x...}, tuple{gx...})
//                                    ADDS each input's gradient contribution into gx_i (an
//                                    empty view, data() == nullptr, when input i needs none)
// T is policy::op_types<P, Op, In...>: its compute (the storage format inputs are rounded to),
// accumulate (what sums run in) and output (the result's storage) types. ctx is the op's
// context, made by the tape's backend (precis/ops/cpu.hpp): temporary and kept memory, the GEMM,
// element-wise maps, broadcast sums and copies (op::cpu on the host). A definition that touches
// tensor memory only through ctx declares context_only = true and runs on every backend. A view
// op (permute) defines view(attrs, x) instead of shape/forward.
//
// The front ends every op file adds, generic over the definition:
//   conv2d(x, w, opts)                      Var inputs: recorded on their tape
//   conv2d<P>(x, w, opts)                   tensors: evaluated eagerly under policy P
// and a definition outside precis gets the same two from precis::record<Op> and
// precis::evaluate<P, Op> (examples/custom_op.cpp).
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "precis/autodiff/tape.hpp"
#include "precis/policy/policies.hpp"
#include "precis/tensor/all.hpp"

namespace precis::detail::ad {

template <class P>
using node_t = typename Tape<P>::Node;

template <class P, class S>
using grad_t = grad_storage_t<P, S>;

/// "precis::exp" for op::exp: the name error messages use.
template <class Op>
const char* name_of() {
  static const std::string s = "precis::" + std::string(Op::name);
  return s.c_str();
}

/// x's shape with `axis` kept as extent 1 (for broadcasting a reduced value back).
inline Shape keep_axis(Shape s, int axis) {
  s[axis] = 1;
  return s;
}

}  // namespace precis::detail::ad

namespace precis::op {

/// The base of an op definition: its safety class, and empty attrs and saved state for ops
/// that have none (a definition declares its own to replace them).
template <policy::safety S>
struct def : policy::detail::tag<S> {
  struct attrs {};
  template <class T>
  struct saved {};
};


}  // namespace precis::op

namespace precis {
namespace detail::ad {

/// The types an op runs in: op_types over its inputs, unless the definition names its own
/// (`types_for`, e.g. where's condition does not take part in promotion).
template <class Op, class P, class... S>
struct op_types_of {
  using type = policy::op_types<P, Op, S...>;
};
template <class Op, class P, class... S>
  requires requires { typename Op::template types_for<P, S...>; }
struct op_types_of<Op, P, S...> {
  using type = typename Op::template types_for<P, S...>;
};
template <class Op, class P, class... S>
using op_types_t = typename op_types_of<Op, P, S...>::type;

/// A view op (is_view = true) returns a view of its input's memory; it has no forward.
template <class Op>
concept view_op = requires { requires Op::is_view; };

/// An op whose forward and backward read and write tensor memory only through their context
/// (context_only = true): it runs on every backend, including one whose memory the host cannot
/// touch (backend_t<P>::host_memory false, a GPU's).
template <class Op>
concept context_only = requires { requires Op::context_only; };

/// An op whose backward writes its inputs' gradients only through the context (gemm, add_into,
/// accumulate, or its own loops after take_fresh answered, assigning only when it said true):
/// the tape hands it freshly allocated gradient buffers without zeroing them first.
template <class Op>
concept assigns_fresh = requires { requires Op::assigns_fresh_gradients; };

/// An op some of whose inputs' gradients are its output's, element for element in row-major
/// order, whenever such an input has as many elements as the output (shares_gradient, one flag
/// per input: reshape {true}; add {true, true}, where neither input is broadcast; sub {true,
/// false}): where the op is such an input's only reader, and the gradient types agree, the input
/// takes the output's gradient buffer (Tape::share_grad) and the backward skips it.
template <class Op>
concept shares_gradient = requires { requires Op::shares_gradient.size() > 0; };

/// A recorded op's state in the arena: its attributes, its inputs' ids and its saved values.
template <class Op, class T, std::size_t N>
struct op_state {
  typename Op::attrs attrs;
  std::array<std::uint32_t, N> in;
  typename Op::template saved<T> saved;
};

template <class G, class P>
TensorView<G> grad_or_empty(Tape<P>& t, std::uint32_t id) {
  if (!t.slot(id).requires_grad) return TensorView<G>();
  return t.template grad_view<G>(id);
}

/// A recorded value's view, or its gradient's (empty when it needs none), made where it is
/// converted to: a tuple of views built from these constructs each view in place (no copy of
/// a freshly written 152-byte view, which costs a store-forwarding stall per element).
template <class S, class P>
struct value_ref {
  Tape<P>* t;
  std::uint32_t id;
  operator TensorView<const S>() const { return t->template value_view<const S>(id); }
};
template <class G, class P>
struct grad_ref {
  Tape<P>* t;
  std::uint32_t id;
  operator TensorView<G>() const { return grad_or_empty<G>(*t, id); }
};

template <class V>
auto plain_view(const V& v) {
  using S = std::remove_pointer_t<decltype(v.data())>;
  return TensorView<S>(v.data(), v.shape(), v.strides(), typename TensorView<S>::unchecked{});
}


/// Whether an op's types cast its GEMM operands to scaled fp8 (policy::op_types::scaled).
template <class T>
constexpr bool scaled = requires { requires T::scaled; };

/// The saved state every GEMM op keeps besides its operands: the fp8 entry and the scales its
/// operands were cast with (null and 1 when the op is not scaled; on a device backend the
/// scales are device floats: fp8::scale_ref).
struct gemm_scales {
  fp8::gemm_scaling* fp8 = nullptr;
  fp8::scale_ref s0, s1;
};

/// A GEMM op's forward operand I (0: the input, 1: the weight) read in T::storage: when T is
/// scaled (fp8), cast by the entry's input or weight scaling with its scale written to s0 or
/// s1; otherwise x itself or its copy rounded once (the scale stays 1). Kept for the backward.
template <class T, int I, class Ctx, class S, class C>
auto gemm_operand(const Ctx& ctx, const TensorView<S, C>& x, gemm_scales& sc) {
  if constexpr (scaled<T>) {
    if constexpr (I == 0) return ctx.template cast_fp8<fp8::operand::input>(x, *sc.fp8, sc.s0, true);
    else return ctx.template cast_fp8<fp8::operand::weight>(x, *sc.fp8, sc.s1, true);
  } else {
    return ctx.template as<typename T::storage>(x, true);
  }
}

/// The output gradient gy as a GEMM operand of the backward: under a scaled T, cast to
/// T::grad_operand with the entry's grad_output scaling (scale written to `scale`); gy itself
/// otherwise.
template <class T, class Ctx, class G>
auto grad_operand(const Ctx& ctx, const TensorView<const G>& gy, const gemm_scales& sc, fp8::scale_ref& scale) {
  if constexpr (scaled<T>) return ctx.template cast_fp8<fp8::operand::grad_output>(gy, *sc.fp8, scale, false);
  else return gy;
}

/// Whether an op's state is stored in its tape node rather than in the arena.
template <class St, class P>
constexpr bool state_fits_node() {
  return sizeof(St) <= node_t<P>::inline_bytes && alignof(St) <= 8;
}

template <class Op, class P, class... S>
void op_backward(Tape<P>& t, const node_t<P>& n) {
  using T = op_types_t<Op, P, S...>;
  using O = typename T::output;
  using St = op_state<Op, T, sizeof...(S)>;
  const St& st = state_fits_node<St, P>() ? *std::launder(reinterpret_cast<const St*>(n.local)) : *static_cast<const St*>(n.state);
  std::array<bool, sizeof...(S)> shared{};  // inputs given the output's gradient buffer
  if constexpr (shares_gradient<Op>) {
    static_assert(Op::shares_gradient.size() == sizeof...(S), "shares_gradient: one flag per input");
    const index_t out_elems = t.slot(n.out).shape.numel();
    std::size_t i = 0;
    ((shared[i] = Op::shares_gradient[i] && std::is_same_v<grad_t<P, S>, grad_t<P, O>> &&
                  t.slot(st.in[i]).shape.numel() == out_elems && t.share_grad(st.in[i], n.out),
      ++i),
     ...);
    if (std::all_of(shared.begin(), shared.end(), [](bool b) { return b; })) return;
  }
  const auto ctx = t.context(false);
  // the inputs' gradient buffers this node allocates hold nothing yet: the op's first write
  // into each may assign (op::fresh_tracking::mark_fresh). Under an op that declares
  // assigns_fresh_gradients they are not even zeroed first, when their type's zero is all
  // zero bytes (the binary formats; not Boost.Multiprecision's): its writes zero what they do
  // not cover, and settle_fresh() what it never wrote. (When the backward throws, they are left
  // as they are: the sweep stops, and a sweep run again allocates intermediate gradients
  // afresh.) A value that is two inputs is allocated, and marked, once. A parameter's
  // gradient that zero_grad() left as zeros is marked the same way (zeroed), once per step.
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          const std::uint32_t id = st.in[I];
          using GI = grad_t<P, S>;
          if (t.template take_zeroed_grad<GI>(id)) {
            ctx.mark_fresh(t.slot(id).grad,
                           static_cast<std::size_t>(t.slot(id).shape.numel()) * sizeof(GI));
            return;
          }
          if (!t.slot(id).requires_grad || t.has_grad(id)) return;
          if constexpr (assigns_fresh<Op> && std::is_trivially_copyable_v<GI>) {  // zeroed by memset
            const auto elems = static_cast<std::size_t>(t.slot(id).shape.numel());
            GI* g = t.template new_grad<GI>(id, elems);
            if (!ctx.mark_fresh(g, elems * sizeof(GI), false))
              ctx.zero_bytes(g, elems * sizeof(GI));
          } else {
            const auto g = t.template grad_view<GI>(id);
            ctx.mark_fresh(g.data(), static_cast<std::size_t>(g.size()) * sizeof(GI));
          }
        }(),
        ...);
  }(std::index_sequence_for<S...>{});
  using G = grad_t<P, O>;
  const TensorView<const G> gy = grad_ref<const G, P>{&t, n.out};  // allocated (zero) if never reached
  const TensorView<const O> y = value_ref<O, P>{&t, n.out};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    Op::template backward<T>(ctx, st.attrs, st.saved, gy, y,
                             std::tuple<TensorView<const S>...>(value_ref<S, P>{&t, st.in[I]}...),
                             std::tuple<TensorView<grad_t<P, S>>...>(
                                 shared[I] ? TensorView<grad_t<P, S>>() : TensorView<grad_t<P, S>>(grad_ref<grad_t<P, S>, P>{&t, st.in[I]})...));
  }(std::index_sequence_for<S...>{});
  if constexpr (assigns_fresh<Op>) ctx.settle_fresh();
}

template <class First, class... Rest>
const First& first_of(const First& f, const Rest&...) {
  return f;
}

}  // namespace detail::ad

/// Records op Op on the tape of its Var inputs: the output is computed by Op::forward in the
/// types the policy gives, and a node whose backward is Op::backward is appended when any input
/// needs a gradient.
template <class Op, class P, class... S>
auto record(const typename Op::attrs& a, const Var<P, S>&... x) {
  const char* name = detail::ad::name_of<Op>();
  Tape<P>& t = detail::ad::first_of(x...).tape();
  (t.check(x, name), ...);
  using T = detail::ad::op_types_t<Op, P, S...>;
  using O = typename T::output;
  using St = detail::ad::op_state<Op, T, sizeof...(S)>;
  static_assert(std::is_trivially_destructible_v<St> && std::is_trivially_copyable_v<St>,
                "an op's attrs and saved state live in the tape's node or arena: they must be trivially copyable "
                "and destructible");
  static_assert(backend_t<P>::host_memory || detail::ad::context_only<Op>,
                "precis::record: this op's definition touches tensor memory outside its context (it does not declare "
                "context_only), so it runs only on a backend whose memory the host reaches (backend::host); the op is "
                "the first template argument of record<Op> in the instantiation context.");
  const bool needs_grad = (x.requires_grad() || ...) && t.grad_enabled();
  Var<P, O> y;
  if constexpr (detail::ad::view_op<Op>) {
    const auto& x0 = detail::ad::first_of(x...);
    if constexpr (requires { requires Op::copies_strided; }) {
      if (!x0.value().is_contiguous()) {  // a dense copy, then the view of it
        y = t.template make<O>(x0.shape(), needs_grad);
        t.context(false).copy(x0.value(), t.template value_view<O>(y.id()));
        y = t.make_view(y, Op::view(a, y.value()));
      } else {
        y = t.make_view(x0, Op::view(a, x0.value()));
      }
    } else {
      y = t.make_view(x0, Op::view(a, x.value()...));
    }
  } else {
    y = t.template make<O>(Op::shape(a, x.shape()...), needs_grad);
  }
  St st{a, {x.id()...}, {}};
  if constexpr (!detail::ad::view_op<Op>) {
    const auto ctx = t.context(needs_grad);
    Op::template forward<T>(ctx, st.attrs, t.template value_view<O>(y.id()), st.saved, x.value()...);
  }
  if (y.requires_grad()) {
    typename Tape<P>::Node n;
    n.backward = &detail::ad::op_backward<Op, P, S...>;
    n.out = y.id();
    if constexpr (detail::ad::state_fits_node<St, P>()) {
      new (n.local) St(st);
    } else {
      n.state = new (t.state_arena().allocate(sizeof(St))) St(st);
    }
    t.record(n, st.in);
  }
  t.end_op();
  return y;
}

/// A host copy of x's value: on a backend whose memory the host cannot touch, a download
/// through the tape's backend (it waits for the device; a strided value is made dense there
/// first), so a device tape's logits can be read: to_host(logits), argmax(logits, 1).
template <class P, class S>
Tensor<S> to_host(const Var<P, S>& x) {
  const TensorView<const S> v = x.value();
  auto out = Tensor<S>::uninitialized(v.shape());
  if constexpr (backend_t<P>::host_memory) {
    detail::copy_view(v, out.view());
  } else {
    static_assert(requires(const backend_t<P>& b) { b.download(v, out.view()); },
                  "precis::to_host: the policy's backend has no download(from, to)");
    Tape<P>& t = x.tape();
    t.backend().download(t.context(false).template as<S>(v, false), out.view());
    t.end_op();  // the dense copy's scratch
  }
  return out;
}

/// Evaluates op Op eagerly under policy P on tensors or views: the same forward as the tape's,
/// nothing recorded. A view op returns a view of its argument. Under an fp8 policy an eager call
/// has no history, so its casts use current scaling (or none under fp8::no_scaling).
template <class P, class Op, class... X>
auto evaluate(const typename Op::attrs& a, const X&... x) {
  if constexpr (detail::ad::view_op<Op>) {
    return Op::view(a, as_view(x)...);
  } else {
    using T = detail::ad::op_types_t<Op, P, storage_of<X>...>;
    using O = typename T::output;
    auto y = Tensor<O>::uninitialized(Op::shape(a, as_view(x).shape()...));
    Arena temp, keep;
    std::unique_ptr<fp8::scaling_state> f8;
    if constexpr (policy::fp8_policy<P>) {
      fp8::recipe r(typename P::fp8_recipe{});
      if (r.which == fp8::recipe::kind::delayed) r = fp8::current_scaling{};
      f8 = std::make_unique<fp8::scaling_state>(r);
    }
    const op::cpu ctx(temp, keep, false, detail::ad::gemm_isa_for<P>(), f8.get());
    typename Op::template saved<T> sv{};
    Op::template forward<T>(ctx, a, y.view(), sv, detail::ad::plain_view(as_view(x).as_const())...);
    return y;
  }
}

namespace detail::ad {

/// "precis::conv2d: " + message.
template <class Op>
std::string op_message(const std::string& what) {
  return "precis::" + std::string(Op::name) + ": " + what;
}

}  // namespace detail::ad
}  // namespace precis
