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
// accumulate (what sums run in) and output (the result's storage) types. ctx is the backend:
// temporary and kept memory, the GEMM, element-wise maps and broadcast sums (op::cpu is today's
// engine). A view op (permute) defines view(attrs, x) instead of shape/forward.
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

template <class T>
using arith_t = default_compute_t<T>;

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

/// Sums t over the axes that broadcasting added or stretched, into acc (a shape t's broadcasts
/// from), in T.
template <class T>
void sum_to_shape(const TensorView<T>& acc, const TensorView<const T>& t) {
  std::fill_n(acc.data(), acc.size(), T(0));
  detail::strided_loop<2> loop;
  loop.shape = t.shape();
  loop.strides[0] = TensorView<T>(acc).broadcast_to(t.shape()).strides();
  loop.strides[1] = t.strides();
  loop.coalesce();
  loop.run(0, t.size(), [&](const std::array<index_t, 2>& off, index_t count, const std::array<index_t, 2>& st) {
    for (index_t i = 0; i < count; ++i) acc.data()[off[0] + i * st[0]] += t.data()[off[1] + i * st[1]];
  });
}

/// x's shape with `axis` kept as extent 1 (for broadcasting a reduced value back).
inline Shape keep_axis(Shape s, int axis) {
  s[axis] = 1;
  return s;
}

/// v's value in arithmetic type A (through its storage's own arithmetic type).
template <class A, class S>
A ld(const S& v) {
  return detail::load<A>(detail::load<arith_t<detail::remove_cv_t<S>>>(v));
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

/// The fresh-gradient bookkeeping every backend's context shares (see mark_fresh); Derived
/// zeroes memory its own way: zero_bytes(p, n).
template <class Derived>
class fresh_tracking {
 public:
  /// Backward: the gradient buffer [p, p + bytes) was allocated for this node and nothing has
  /// added into it. `zeroed`: it holds zeros; otherwise it holds nothing yet (an op that
  /// declares assigns_fresh_gradients was handed it uninitialized) and settle_fresh() zeroes it
  /// if no write took it. The first write into it through add_into, accumulate or gemm assigns
  /// instead of adding (the same values: 0 + v rounded once is v rounded once, except that a
  /// -0 stays -0), which skips reading zeros back; any later write adds. Returns false when
  /// there is no room to track another buffer (the caller then zeroes it and forgets it).
  bool mark_fresh(void* p, std::size_t bytes, bool zeroed = true) const noexcept {
    for (fresh_buffer& f : fresh_) {
      if (f.begin == nullptr) {
        f = {static_cast<unsigned char*>(p), bytes, zeroed};
        unzeroed_ += zeroed ? 0 : 1;
        return true;
      }
    }
    return false;
  }
  /// Whether a write into v may assign: v starts at a fresh buffer's first element, and either
  /// covers all of it or the rest holds zeros. A buffer without its zeros yet is zeroed here
  /// unless v covers every byte of it once. Any write that starts inside a fresh buffer ends
  /// its freshness; a write that does not start at its first element adds (into zeros).
  template <class T, class C>
  bool take_fresh(const TensorView<T, C>& v) const {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    if (p == nullptr) return false;
    for (fresh_buffer& f : fresh_) {
      if (f.begin != nullptr && !std::less<>{}(p, f.begin) && std::less<>{}(p, f.begin + f.bytes)) {
        const bool at_start = p == f.begin;
        if (!f.zeroed) {
          if (!(at_start && covers_densely(v, f.bytes))) static_cast<const Derived&>(*this).zero_bytes(f.begin, f.bytes);
          --unzeroed_;
        }
        f = {};
        return at_start;
      }
    }
    return false;
  }
  /// After an op's backward: the fresh buffers it never wrote, and that were handed out
  /// without zeros, get them (the context is not used again).
  void settle_fresh() const {
    if (unzeroed_ == 0) return;  // every buffer handed out unzeroed was written
    for (fresh_buffer& f : fresh_) {
      if (f.begin != nullptr && !f.zeroed) {
        static_cast<const Derived&>(*this).zero_bytes(f.begin, f.bytes);
        f = {};
      }
    }
    unzeroed_ = 0;
  }

 private:
  struct fresh_buffer {
    unsigned char* begin = nullptr;
    std::size_t bytes = 0;
    bool zeroed = true;
  };
  /// Whether v's elements are `bytes` bytes from its first element, each once: its axes, by
  /// increasing stride, are those of a contiguous array in some order (a permuted or
  /// transposed view of the whole buffer; no broadcast or overlapping axes).
  template <class T, class C>
  static bool covers_densely(const TensorView<T, C>& v, std::size_t bytes) noexcept {
    index_t count = 1;  // the element count and row-major contiguity in one pass
    bool row_major = true;
    for (int i = v.rank() - 1; i >= 0; --i) {
      row_major = row_major && (v.shape()[i] == 1 || v.strides()[i] == count);
      count *= v.shape()[i];
    }
    if (static_cast<std::size_t>(count) * sizeof(T) != bytes) return false;
    if (row_major) return true;
    // in some order: the axes longer than 1 have strides 1, e1, e1 e2, ... (each used once)
    std::array<bool, static_cast<std::size_t>(max_rank)> used{};
    index_t expect = 1;
    for (int found = 0; expect < count; ++found) {
      int next = -1;
      for (int i = 0; i < v.rank() && next < 0; ++i) {
        if (!used[static_cast<std::size_t>(i)] && v.shape()[i] != 1 && v.strides()[i] == expect) next = i;
      }
      if (next < 0 || found == max_rank) return false;
      used[static_cast<std::size_t>(next)] = true;
      expect *= v.shape()[next];
    }
    return true;
  }
  mutable std::array<fresh_buffer, 4> fresh_{};
  mutable int unzeroed_ = 0;  // fresh buffers not zeroed and not yet written
};

/// gx = f(args...) in A: a fresh gradient's first write.
template <class A, class F>
struct assign_fn {
  F f;
  template <class... V>
  PRECIS_HOST_DEVICE A operator()(const V&... v) const {
    return A(f(v...));
  }
};
/// gx + f(args...) in A.
template <class A, class F>
struct accumulate_fn {
  F f;
  template <class... V>
  PRECIS_HOST_DEVICE A operator()(const A& acc, const V&... v) const {
    return A(acc + f(v...));
  }
};
/// acc + v in A.
template <class A>
struct add_fn {
  PRECIS_HOST_DEVICE A operator()(const A& acc, const A& v) const { return A(acc + v); }
};

/// The CPU backend: memory from the tape's arenas (or an eager call's own) and precis's blocked
/// GEMM. Ops reach memory and matrix products only through their context, so a device backend
/// with the same members runs the same definitions.
class cpu : public fresh_tracking<cpu> {
 public:
  /// max_isa caps the GEMM's instruction-set level (a policy's reproducible_gemm asks for the
  /// kernels whose sums are the same on every level).
  /// fp8: the scaling state of an fp8 policy's tape (or of an eager call), null otherwise.
  cpu(Arena& temp, Arena& keep, bool saving, gemm_isa max_isa = gemm_isa::amx_bf16,
      fp8::scaling_state* fp8 = nullptr) noexcept
      : temp_(&temp), keep_(&keep), saving_(saving), max_isa_(max_isa), fp8_(fp8) {}

  /// Whether the forward's saved state will be used (false in eager calls and when no input
  /// needs a gradient): an op may skip keeping what only its backward reads.
  bool saving() const noexcept { return saving_; }

  /// Uninitialized memory rewound after the op (forward) or the node (backward).
  template <class T>
  TensorView<T> temp(const Shape& s) const {
    return TensorView<T>(temp_->template allocate_array<T>(static_cast<std::size_t>(s.numel())), s);
  }
  /// temp() filled with zeros.
  template <class T>
  TensorView<T> zeros(const Shape& s) const {
    const auto v = temp<T>(s);
    std::fill_n(v.data(), v.size(), T(0));
    return v;
  }
  /// Uninitialized memory that lives as long as the step (saved state).
  template <class T>
  TensorView<T> keep(const Shape& s) const {
    return TensorView<T>(keep_->template allocate_array<T>(static_cast<std::size_t>(s.numel())), s);
  }

  /// n uninitialized objects of trivially copyable T that live as long as the step.
  template <class T>
  T* keep_array(index_t n) const {
    return keep_->template allocate_array<T>(static_cast<std::size_t>(n));
  }

  /// x as a contiguous view of storage L: x itself when it already is one, otherwise a copy
  /// rounded once to nearest, kept for the backward when `for_backward` and saving().
  template <class L, class S, class C>
  TensorView<const L> as(const TensorView<S, C>& x, bool for_backward) const {
    if constexpr (std::is_same_v<detail::remove_const_t<S>, L>) {
      if (x.is_contiguous()) return TensorView<const L>(x.data(), x.shape());
    }
    const auto out = (for_backward && saving_) ? keep<L>(x.shape()) : temp<L>(x.shape());
    copy(x, out);
    return out.as_const();
  }

  /// The fp8 scaling entry of the next fp8 GEMM op `name` of this step (ops whose types are
  /// scaled, policy::op_types::scaled, call it once per forward).
  fp8::gemm_scaling& fp8_gemm(std::string_view name) const {
    if (fp8_ == nullptr) throw invalid_argument("precis::" + std::string(name) + ": an fp8 GEMM without fp8 scaling state");
    return fp8_->next(name);
  }

  /// x cast to F8 by `ts` (its recipe picks the scale, returned in `scale`; the values are
  /// x * scale rounded once), as a contiguous view kept for the backward when `for_backward`
  /// and saving().
  template <class F8, class S, class C>
  TensorView<const F8> cast_fp8(const TensorView<S, C>& x, fp8::tensor_scaling<F8>& ts, float& scale, bool for_backward) const {
    const auto xf = as<float>(x, false);
    const auto out = (for_backward && saving_) ? keep<F8>(x.shape()) : temp<F8>(x.shape());
    scale = ts.cast(xf.data(), static_cast<std::size_t>(xf.size()), out.data(), fp8_ ? fp8_->reducer() : nullptr);
    return out.as_const();
  }

  /// c = alpha a b (+ c when add), a [m, k] and b [k, n] of any storage and strides, the
  /// products accumulated in Acc (by default c's own type), multiplied by alpha in Acc and
  /// rounded once into c's storage. A c of another type than Acc is done in row panels, so the
  /// Acc workspace stays at most ~128K elements (a 16-bit step keeps no fp32 copy of a whole
  /// weight gradient).
  template <class Acc = void, class G, class SA, class CA, class SB, class CB>
  void gemm(const TensorView<G>& c, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, bool add, double alpha = 1.0) const {
    using A = std::conditional_t<std::is_void_v<Acc>, G, Acc>;
    if (take_fresh(c)) add = false;  // asked even when assigning: c is written either way
    const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    const auto al = static_cast<A>(alpha);
    if constexpr (std::is_same_v<G, A>) {
      detail::gemm_blocked<A>(m, n, k, al, a.data(), a.strides()[0], a.strides()[1], b.data(), b.strides()[0],
                              b.strides()[1], add ? A(1) : A(0), c.data(), c.strides()[0], c.strides()[1],
                              detail::default_gemm_threads(m, n, k), max_isa_);
    } else {
      const index_t panel = std::max<index_t>(1, std::min<index_t>(m, (index_t{1} << 17) / std::max<index_t>(n, 1)));
      A* w = temp_->template allocate_array<A>(static_cast<std::size_t>(panel * n));
      for (index_t i0 = 0; i0 < m; i0 += panel) {
        const index_t rows = std::min(panel, m - i0);
        const TensorView<A> wv(w, Shape{rows, n});
        detail::gemm_blocked<A>(rows, n, k, al, a.data() + i0 * a.strides()[0], a.strides()[0], a.strides()[1],
                                b.data(), b.strides()[0], b.strides()[1], A(0), w, n, index_t{1},
                                detail::default_gemm_threads(rows, n, k), max_isa_);
        const auto ci = c.slice(0, i0, i0 + rows);
        if (add) {
          add_into<default_compute_t<A>>("precis::gemm", ci, wv.as_const());
        } else {
          copy(wv.as_const(), ci);
        }
      }
    }
  }

  /// y = f(x...) element-wise (x broadcast to y's shape), evaluated in A and rounded once into
  /// y's storage: precis::map_into on this backend.
  template <class A, class Y, class F, class... X>
  void map_into(const char* op, const Y& y, F f, const X&... x) const {
    precis::map_into<A>(op, y, f, x...);
  }

  /// to = the sum of `from` over the axes along which to's shape broadcasts to from's, in to's
  /// type (the gradient of a broadcast operand).
  template <class T>
  void sum_to_shape(const TensorView<T>& to, const TensorView<const T>& from) const {
    detail::ad::sum_to_shape(to, from);
  }

  /// col = the column sums of the matrix g [rows, cols], in Acc (col's type), row by row: each
  /// column a running sum in row order, the rows widened a chunk at a time.
  template <class Acc, class S, class C>
  void sum_rows(const TensorView<Acc>& col, const TensorView<S, C>& g) const {
    const index_t rows = g.shape()[0], cols = g.shape()[1];
    std::fill_n(col.data(), cols, Acc(0));
    std::array<Acc, detail::chunk> buf;
    for (index_t i = 0; i < rows; ++i) {
      for (index_t c0 = 0; c0 < cols; c0 += detail::chunk) {
        const index_t len = std::min(detail::chunk, cols - c0);
        const Acc* v = detail::load_run<Acc>(g.data() + i * g.strides()[0] + c0 * g.strides()[1], len, g.strides()[1], buf.data());
        for (index_t j = 0; j < len; ++j) col.data()[c0 + j] += v[j];
      }
    }
  }

  /// n zero bytes at p (fresh_tracking's zeroing).
  static void zero_bytes(void* p, std::size_t n) noexcept { std::memset(p, 0, n); }

  /// to = from, rounded once to nearest into to's storage (same shapes, any strides).
  template <class S, class C, class D, class DC>
  static void copy(const TensorView<S, C>& from, const TensorView<D, DC>& to) {
    Tape<policy::true_<float>>::copy_into(from, to);
  }

  /// to += from element-wise (from broadcasts), in A, rounded once into to's storage; a fresh
  /// gradient is assigned instead (see mark_fresh).
  template <class A, class D, class S, class C>
  void add_into(const char* op, const TensorView<D>& to, const TensorView<S, C>& from) const {
    if (take_fresh(to)) {
      if constexpr (std::is_same_v<detail::remove_const_t<S>, D> && detail::converts_exactly<D, A>()) {
        if (from.shape() == to.shape()) {  // v rounded once is v: a plain copy
          copy(from, to);
          return;
        }
      }
      map_into<A>(op, to, detail::identity{}, from);
      return;
    }
    map_into<A>(op, to, add_fn<A>{}, to.as_const(), from);
  }

  /// gx += f(args...) element-wise, computed in A (args broadcast to gx's shape), rounded once;
  /// a fresh gradient is assigned f(args...) instead (see mark_fresh).
  template <class A, class G, class F, class... V>
  void accumulate(const char* op, const TensorView<G>& gx, F f, const V&... args) const {
    if (take_fresh(gx)) {
      map_into<A>(op, gx, assign_fn<A, F>{f}, args...);
    } else {
      map_into<A>(op, gx, accumulate_fn<A, F>{f}, TensorView<const G>(gx), args...);
    }
  }

 private:
  Arena* temp_;
  Arena* keep_;
  bool saving_;
  gemm_isa max_isa_;
  fp8::scaling_state* fp8_;
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

/// An op whose backward writes its inputs' gradients only through the context (gemm, add_into,
/// accumulate, or its own loops after take_fresh answered, assigning only when it said true):
/// the tape hands it freshly allocated gradient buffers without zeroing them first.
template <class Op>
concept assigns_fresh = requires { requires Op::assigns_fresh_gradients; };

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

/// The GEMM level policy P allows: all of them, or with P::reproducible_gemm only those whose
/// sums are bit-identical across levels (no vdpbf16ps or AMX, which flush denormals).
template <class P>
constexpr gemm_isa gemm_isa_for() {
  if constexpr (requires { requires P::reproducible_gemm; }) return gemm_isa::avx512;
  return gemm_isa::amx_bf16;
}

/// The tape's fp8 scaling state under an fp8 policy, null otherwise.
template <class P>
fp8::scaling_state* fp8_state_of(Tape<P>& t) {
  if constexpr (policy::fp8_policy<P>) return &t.fp8();
  else return nullptr;
}

/// Whether an op's types cast its GEMM operands to scaled fp8 (policy::op_types::scaled).
template <class T>
constexpr bool scaled = requires { requires T::scaled; };

/// The saved state every GEMM op keeps besides its operands: the fp8 entry and the operands'
/// scales (null and 1 when the op is not scaled).
struct gemm_scales {
  fp8::gemm_scaling* fp8 = nullptr;
  float s0 = 1.0f, s1 = 1.0f;
};

/// A GEMM op's forward operand I (0: the input, 1: the weight) read in T::storage: when T is
/// scaled (fp8), cast by the entry's input or weight scaling with its scale written to s0 or
/// s1; otherwise x itself or its copy rounded once (the scale stays 1). Kept for the backward.
template <class T, int I, class Ctx, class S, class C>
auto gemm_operand(const Ctx& ctx, const TensorView<S, C>& x, gemm_scales& sc) {
  if constexpr (scaled<T>) {
    if constexpr (I == 0) return ctx.cast_fp8(x, sc.fp8->input, sc.s0, true);
    else return ctx.cast_fp8(x, sc.fp8->weight, sc.s1, true);
  } else {
    return ctx.template as<typename T::storage>(x, true);
  }
}

/// The output gradient gy as a GEMM operand of the backward: under a scaled T, cast to
/// T::grad_operand with the entry's grad_output scaling (scale written to `scale`); gy itself
/// otherwise.
template <class T, class Ctx, class G>
auto grad_operand(const Ctx& ctx, const TensorView<const G>& gy, const gemm_scales& sc, float& scale) {
  if constexpr (scaled<T>) return ctx.cast_fp8(gy, sc.fp8->grad_output, scale, false);
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
  const op::cpu ctx(t.scratch(), t.arena(), false, gemm_isa_for<P>(), fp8_state_of(t));
  // the inputs' gradient buffers this node allocates hold nothing yet: the op's first write
  // into each may assign (op::cpu::mark_fresh). Under an op that declares
  // assigns_fresh_gradients they are not even zeroed first, when their type's zero is all
  // zero bytes (the binary formats; not Boost.Multiprecision's): its writes zero what they do
  // not cover, and settle_fresh() what it never wrote. (When the backward throws, they are left
  // as they are: the sweep stops, and a sweep run again allocates intermediate gradients
  // afresh.) A value that is two inputs is allocated, and marked, once.
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          const std::uint32_t id = st.in[I];
          if (!t.slot(id).requires_grad || t.has_grad(id)) return;
          using GI = grad_t<P, S>;
          if constexpr (assigns_fresh<Op> && std::is_trivially_copyable_v<GI>) {  // zeroed by memset
            const auto elems = static_cast<std::size_t>(t.slot(id).shape.numel());
            GI* g = t.template new_grad<GI>(id, elems);
            if (!ctx.mark_fresh(g, elems * sizeof(GI), false)) std::uninitialized_fill_n(g, elems, GI(0));
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
                             std::tuple<TensorView<grad_t<P, S>>...>(grad_ref<grad_t<P, S>, P>{&t, st.in[I]}...));
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
  const bool needs_grad = (x.requires_grad() || ...) && t.grad_enabled();
  Var<P, O> y;
  if constexpr (detail::ad::view_op<Op>) {
    const auto& x0 = detail::ad::first_of(x...);
    if constexpr (requires { requires Op::copies_strided; }) {
      if (!x0.value().is_contiguous()) {  // a dense copy, then the view of it
        y = t.template make<O>(x0.shape(), needs_grad);
        Tape<P>::copy_into(x0.value(), t.template value_view<O>(y.id()));
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
    const op::cpu ctx(t.scratch(), t.arena(), needs_grad, detail::ad::gemm_isa_for<P>(), detail::ad::fp8_state_of(t));
    Op::template forward<T>(ctx, st.attrs, t.template value_view<O>(y.id()), st.saved, x.value()...);
  }
  if (y.requires_grad()) {
    typename Tape<P>::Node n;
    n.backward = &detail::ad::op_backward<Op, P, S...>;
    n.out = y.id();
    if constexpr (detail::ad::state_fits_node<St, P>()) {
      new (n.local) St(st);
    } else {
      n.state = new (t.arena().allocate(sizeof(St))) St(st);
    }
    t.record(n);
  }
  t.end_op();
  return y;
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
