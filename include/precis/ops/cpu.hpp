// The op layer's CPU backend and what every backend shares.
//
// A backend is where a tape's values live and what runs its ops. It is chosen by the policy
// (precis::backend_t<P>: P::backend, or backend::host) and gives the tape
//   arena_type                       the bump allocator of its memory
//   make_arena(bytes)                one (the tape has two: the step's values, one op's temporaries)
//   context<P>(temp, keep, saving, fp8)
//                                    an op's context: what op definitions reach memory, GEMMs,
//                                    element-wise maps and sums through (op::cpu here)
//   zero_bytes, fill, upload, read   the tape's own writes (new gradients, seeds, inputs copied
//                                    from the host) and item()'s read
//   tensor<T>, download              (optional: what nn modules need) storage the backend owns
//                                    for as long as the object lives, made from a Shape (its
//                                    contents unspecified), with data(), shape(), size() and a
//                                    view() that is a TensorView<T> of its memory; and the copy
//                                    of a view of the backend's memory into the host's
//   host_memory                      whether the host may touch its memory directly: only ops
//                                    that declare context_only run on a backend where it may not
// backend::host is today's engine: host memory (precis::Arena) and op::cpu.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "precis/autodiff/arena.hpp"
#include "precis/error.hpp"
#include "precis/policy/policies.hpp"
#include "precis/tensor/all.hpp"

namespace precis::detail {

/// Copies (and rounds, once, to nearest) a view into another of the same shape.
template <class S, class C, class D, class DC>
void copy_view(const TensorView<S, C>& from, const TensorView<D, DC>& to) {
  if constexpr (std::is_same_v<detail::remove_const_t<S>, D> && std::is_trivially_copyable_v<D>) {
    if (from.is_contiguous() && to.is_contiguous()) {
      std::memcpy(to.data(), from.data(), static_cast<std::size_t>(from.size()) * sizeof(D));
      return;
    }
    if (from.shape() == to.shape()) {  // a strided copy of the same format: no conversion
      detail::check_map("precis::copy", to, from);
      detail::strided_loop<2> loop;
      loop.shape = to.shape();
      loop.strides = {to.strides(), from.strides()};
      loop.coalesce();
      loop.run(0, to.size(), [&](const std::array<index_t, 2>& off, index_t count, const std::array<index_t, 2>& st) {
        D* o = to.data() + off[0];
        const auto* i = from.data() + off[1];
        if (st[0] == 1 && st[1] == 1) {  // a dense run (a head's features, an attention row)
          std::memcpy(static_cast<void*>(o), static_cast<const void*>(i), static_cast<std::size_t>(count) * sizeof(D));
          return;
        }
        for (index_t e = 0; e < count; ++e) o[e * st[0]] = i[e * st[1]];
      });
      return;
    }
  }
  using A = detail::promote_t<default_compute_t<detail::remove_const_t<S>>, default_compute_t<D>>;
  map_into<A>("precis::copy", to, detail::identity{}, from);
}


}  // namespace precis::detail

namespace precis::detail::ad {

template <class T>
using arith_t = default_compute_t<T>;

/// v's value in arithmetic type A (through its storage's own arithmetic type).
template <class A, class S>
A ld(const S& v) {
  return detail::load<A>(detail::load<arith_t<detail::remove_cv_t<S>>>(v));
}

/// The mean of n terms, summed pairwise in Acc.
template <class Acc>
Acc mean_of(const Acc* terms, index_t n) {
  return Acc(detail::sum_fiber<Acc>(terms, n, 1, summation::pairwise, std::identity{}) / Acc(static_cast<double>(n)));
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


}  // namespace precis::detail::ad

#include "precis/ops/cpu_kernels.hpp"  // convolution, pooling and batch norm kernels (use ld above)

namespace precis::op {

/// What a summing reduction computes per fiber, in the accumulator.
enum class reduction { sum, mean, norm, logsumexp };

}  // namespace precis::op

namespace precis::detail::ad {

/// The host's fiber of reduction R in Acc: sums pairwise; the norm scaled by a power of two
/// (detail::norm2_fiber); logsumexp shifted by the fiber's maximum; the mean divides by `count`.
template <class Acc, op::reduction R>
auto reduce_fiber(index_t count) {
  return [count](const auto* p, index_t len, index_t st) {
    (void)count;  // only the mean divides by it
    if constexpr (R == op::reduction::sum) {
      return detail::sum_fiber<Acc>(p, len, st, summation::pairwise, std::identity{});
    } else if constexpr (R == op::reduction::mean) {
      return Acc(detail::sum_fiber<Acc>(p, len, st, summation::pairwise, std::identity{}) / Acc(static_cast<double>(count)));
    } else if constexpr (R == op::reduction::norm) {
      return detail::norm2_fiber<Acc>(p, len, st, summation::pairwise);
    } else {
      return detail::logsumexp_fiber<Acc>(p, len, st, summation::pairwise);
    }
  };
}

/// x [outer, len, inner] around `axis` (x contiguous).
inline std::array<index_t, 3> around_axis(const Shape& s, int axis) {
  index_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  return {outer, s[axis], inner};
}

/// For every fiber along `axis` of a contiguous x, the position of its largest (Max) or
/// smallest element; the first one on ties, a NaN wins (it propagates, as in IEEE max).
template <bool Max, class S, class F>
void select_along(const TensorView<const S>& x, int axis, F&& f) {
  using A = arith_t<detail::remove_cv_t<S>>;
  const auto [outer, len, inner] = around_axis(x.shape(), axis);
  for (index_t o = 0; o < outer; ++o) {
    for (index_t i = 0; i < inner; ++i) {
      const S* p = x.data() + o * len * inner + i;
      index_t best = 0;
      A bv = detail::load<A>(p[0]);
      for (index_t k = 1; k < len && bv == bv; ++k) {
        const A v = detail::load<A>(p[k * inner]);
        if (v != v || (Max ? v > bv : v < bv)) {
          best = k;
          bv = v;
        }
      }
      f(o * inner + i, best);
    }
  }
}

/// The GEMM level policy P allows: all of them, or with P::reproducible_gemm only those whose
/// sums are bit-identical across levels (no vdpbf16ps or AMX, which flush denormals).
template <class P>
constexpr gemm_isa gemm_isa_for() {
  if constexpr (requires { requires P::reproducible_gemm; }) return gemm_isa::avx512;
  return gemm_isa::amx_bf16;
}

}  // namespace precis::detail::ad

namespace precis::op {

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

/// n contiguous values as type R: p itself when they are R, otherwise a temporary of ctx's
/// converted in bulk (exactly, where R holds every value of S).
template <class R, class Ctx, class S>
const R* contiguous_in(const Ctx& ctx, const S* p, index_t n) {
  if constexpr (std::is_same_v<detail::remove_cv_t<S>, R>) {
    return p;
  } else {
    R* buf = ctx.template temp<R>(Shape{n}).data();
    return detail::load_run<R>(p, n, 1, buf);
  }
}

/// y = alpha a b + bias (bias [n] broadcast over y's rows) in three steps through ctx: an Acc
/// buffer (y itself when y is Acc) set to the bias, the product added into it by ctx.gemm
/// (so the bias starts each sum), then rounded once into y. The CPU backend's gemm_bias, and a
/// device backend's where its GEMM cannot add the bias itself.
template <class Acc, class Ctx, class O, class SA, class CA, class SB, class CB, class B>
void gemm_bias_in_steps(const Ctx& ctx, const TensorView<O>& y, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b,
                        const TensorView<const B>& bias, const fp8::gemm_alpha& alpha) {
  const auto acc = [&] {
    if constexpr (std::is_same_v<O, Acc>) return y;
    else return ctx.template temp<Acc>(y.shape());
  }();
  ctx.template map_into<default_compute_t<Acc>>("precis::linear", acc, detail::identity{}, bias);  // broadcast
  ctx.gemm(acc, a, b, true, alpha);
  if constexpr (!std::is_same_v<O, Acc>) ctx.copy(acc.as_const(), y);
}

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

  /// x cast to fp8 by entry g's scaling of operand R (its recipe picks the scale, returned in
  /// `scale`; the values are x * scale rounded once), as a contiguous view kept for the
  /// backward when `for_backward` and saving().
  template <fp8::operand R, class S, class C>
  TensorView<const fp8::operand_format_t<R>> cast_fp8(const TensorView<S, C>& x, fp8::gemm_scaling& g, fp8::scale_ref& scale,
                                                      bool for_backward) const {
    using F8 = fp8::operand_format_t<R>;
    const auto xf = as<float>(x, false);
    const auto out = (for_backward && saving_) ? keep<F8>(x.shape()) : temp<F8>(x.shape());
    scale.value = g.template scaling<R>().cast(xf.data(), static_cast<std::size_t>(xf.size()), out.data(), fp8_ ? fp8_->reducer() : nullptr);
    scale.device = nullptr;
    return out.as_const();
  }

  /// c = alpha a b (+ c when add), a [m, k] and b [k, n] of any storage and strides, the
  /// products accumulated in Acc (by default c's own type), multiplied by alpha in Acc and
  /// rounded once into c's storage. A c of another type than Acc is done in row panels, so the
  /// Acc workspace stays at most ~128K elements (a 16-bit step keeps no fp32 copy of a whole
  /// weight gradient).
  template <class Acc = void, class G, class SA, class CA, class SB, class CB>
  void gemm(const TensorView<G>& c, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, bool add,
            const fp8::gemm_alpha& alpha = 1.0) const {
    using A = std::conditional_t<std::is_void_v<Acc>, G, Acc>;
    if (alpha.divide_by[0] != nullptr || alpha.divide_by[1] != nullptr) {
      throw invalid_argument("precis::gemm: an alpha divided by scales in device memory reached the CPU backend; expected host scales");
    }
    if (take_fresh(c)) add = false;  // asked even when assigning: c is written either way
    const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    const auto al = static_cast<A>(alpha.value);
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

  /// y = alpha a b + bias (bias [n] broadcast over the rows), accumulated in Acc starting from
  /// the bias and rounded once into y (gemm_bias_in_steps).
  template <class Acc, class O, class SA, class CA, class SB, class CB, class B>
  void gemm_bias(const TensorView<O>& y, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, const TensorView<const B>& bias,
                 const fp8::gemm_alpha& alpha = 1.0) const {
    gemm_bias_in_steps<Acc>(*this, y, a, b, bias, alpha);
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

  /// y = reduction R of x's fibers along `axis` (y: x's shape without it), or of all of x into
  /// the scalar y when `whole`, in Acc, rounded once into y's storage (reduce_fiber's order).
  template <class Acc, reduction R, class X, class O>
  void reduce(const char* op, const TensorView<const X>& x, bool whole, int axis, const TensorView<O>& y) const {
    if (whole) {
      detail::reduce_all_into<Acc>(op, x, y.data(), detail::ad::reduce_fiber<Acc, R>(x.size()));
    } else {
      detail::reduce_axis_into<Acc>(op, x, axis, y, detail::ad::reduce_fiber<Acc, R>(x.shape()[axis]));
    }
  }

  /// y = softmax (Log = false) or log_softmax of x along `axis`: each fiber's maximum, its sum
  /// of exponentials pairwise in Acc, each output rounded once into y's storage.
  template <class Acc, bool Log, class X, class O>
  void softmax(const char* op, const TensorView<const X>& x, int axis, const TensorView<O>& y) const {
    detail::softmax_into<Acc, Log>(op, x, axis, y, summation::pairwise);
  }
  /// softmax's backward sums: s = the sum along `axis` of g y (softmax) or of g (log_softmax,
  /// Log), a running sum in Acc per fiber (s: the shape without `axis`; g and y share strides).
  template <class Acc, bool Log, class G, class O>
  void softmax_sums(const TensorView<const G>& g, const TensorView<const O>& y, int axis, const TensorView<Acc>& s) const {
    const index_t len = g.shape()[axis], st = g.strides()[axis];
    detail::for_each_fiber(g, axis, s, false, [&](const G* p, Acc* o, index_t) {
      const O* q = y.data() + (p - g.data());
      Acc acc(0);
      for (index_t k = 0; k < len; ++k) {
        const Acc gv = detail::ad::ld<Acc>(p[k * st]);
        acc += Log ? gv : Acc(gv * detail::ad::ld<Acc>(q[k * st]));
      }
      *o = acc;
    });
  }

  /// Layer normalization of the rows of x (contiguous, [..., d]): each row's mean and biased
  /// variance summed pairwise in Acc, stats[2i] = the mean and stats[2i + 1] = 1 / sqrt(var +
  /// eps) (computed in R), y = (x - mean) rstd gamma + beta element-wise in R, rounded once
  /// into y's storage. Rows split over threads (each row's sums unchanged).
  template <class Acc, class R, class X, class G, class B, class O>
  void layer_norm_forward(const TensorView<const X>& x, const TensorView<const G>& gamma, const TensorView<const B>& beta, double eps,
                          Acc* stats, const TensorView<O>& y) const {
    const index_t d = x.shape().back(), rows = x.size() / d;
    // x and y in R, converted and rounded in bulk where they are stored in another type (x
    // widens exactly, so the sums see the same values)
    const R* xr = contiguous_in<R>(*this, x.data(), x.size());
    R* yr = nullptr;
    if constexpr (std::is_same_v<O, R>) {
      yr = y.data();
    } else {
      yr = temp<R>(y.shape()).data();
    }
    R* gm = temp<R>(Shape{2 * d}).data();  // gamma, then beta
    R* bt = gm + d;
    for (index_t j = 0; j < d; ++j) {
      gm[j] = detail::ad::ld<R>(gamma(j));
      bt[j] = detail::ad::ld<R>(beta(j));
    }
    detail::parallel_ranges(rows, detail::threads_for(x.size(), index_t{1} << 14), [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        const R* r = xr + i * d;
        const Acc mu = Acc(detail::sum_fiber<Acc>(r, d, 1, summation::pairwise, std::identity{}) / Acc(static_cast<double>(d)));
        const Acc var = Acc(detail::sum_fiber<Acc>(r, d, 1, summation::pairwise,
                                                   [mu](const Acc& v) { return Acc((v - mu) * (v - mu)); }) /
                            Acc(static_cast<double>(d)));
        using std::sqrt;
        const R rstd = R(1) / sqrt(R(detail::ad::ld<R>(var) + R(eps)));
        stats[2 * i] = mu;
        stats[2 * i + 1] = detail::store<Acc>(rstd);
        const R m = detail::ad::ld<R>(mu), rs = detail::ad::ld<R>(stats[2 * i + 1]);
        R* out = yr + i * d;
        for (index_t j = 0; j < d; ++j) out[j] = R((r[j] - m) * rs * gm[j] + bt[j]);
        if constexpr (!std::is_same_v<O, R>) detail::store_run(out, y.data() + i * d, d, 1);
      }
    });
  }
  /// Layer normalization's backward over the rows of x and gy (both contiguous), stats from
  /// the forward: gx (+)= rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) with dxhat = gy
  /// gamma, in R, the two means' sums in Acc on eight lanes (assigned when gx is fresh; skipped
  /// when gx is empty); dgamma += gy xhat and dbeta += gy, row after row, in Acc (zeros on entry).
  template <class Acc, class R, class X, class GY, class G, class GX>
  void layer_norm_backward(const TensorView<const X>& x, const TensorView<const GY>& gy, const TensorView<const G>& gamma,
                           const Acc* stats, const TensorView<GX>& gx, const TensorView<Acc>& dgamma,
                           const TensorView<Acc>& dbeta) const {
    const index_t d = x.shape().back(), rows = x.size() / d;
    const auto row = temp<R>(Shape{3, d});  // xhat, dxhat, dx of one row
    const R* xr = contiguous_in<R>(*this, x.data(), x.size());
    const R* gyr = contiguous_in<R>(*this, gy.data(), gy.size());
    const auto gam = temp<R>(Shape{d});
    for (index_t j = 0; j < d; ++j) gam(j) = detail::ad::ld<R>(gamma(j));
    const bool fresh = take_fresh(gx);  // gx holds zeros: write dx, do not add it
    for (index_t i = 0; i < rows; ++i) {
      const R mu = detail::ad::ld<R>(stats[2 * i]), rstd = detail::ad::ld<R>(stats[2 * i + 1]);
      // xhat and dxhat, dgamma and dbeta, then the sums of dxhat and of dxhat xhat on eight
      // lanes (term j into lane j % 8, each lane a running sum), the lanes added pairwise: each
      // term in at most ceil(d / 8) + 2 additions instead of d - 1; every loop vectorizes
      R* const xh = &row(0, 0);
      R* const dxh = &row(1, 0);
      const R* const xi = xr + i * d;
      const R* const gyi = gyr + i * d;
      const R* const gm = gam.data();
      Acc* const dgp = dgamma.data();
      Acc* const dbp = dbeta.data();
      PRECIS_IVDEP for (index_t j = 0; j < d; ++j) {
        xh[j] = R(xi[j] - mu) * rstd;
        dxh[j] = gyi[j] * gm[j];
      }
      PRECIS_IVDEP for (index_t j = 0; j < d; ++j) {
        dgp[j] += detail::store<Acc>(R(gyi[j] * xh[j]));
        dbp[j] += detail::store<Acc>(gyi[j]);
      }
      std::array<Acc, 8> l1, l2;
      l1.fill(Acc(0));
      l2.fill(Acc(0));
      index_t j0 = 0;
      for (; j0 + 8 <= d; j0 += 8)
        for (std::size_t l = 0; l < 8; ++l) {
          const index_t j = j0 + static_cast<index_t>(l);
          l1[l] += detail::store<Acc>(dxh[j]);
          l2[l] += detail::store<Acc>(R(dxh[j] * xh[j]));
        }
      for (std::size_t l = 0; j0 + static_cast<index_t>(l) < d; ++l) {
        const index_t j = j0 + static_cast<index_t>(l);
        l1[l] += detail::store<Acc>(dxh[j]);
        l2[l] += detail::store<Acc>(R(dxh[j] * xh[j]));
      }
      const auto lanes = [](const std::array<Acc, 8>& v) {
        return Acc(Acc(Acc(v[0] + v[1]) + Acc(v[2] + v[3])) + Acc(Acc(v[4] + v[5]) + Acc(v[6] + v[7])));
      };
      const Acc m1 = lanes(l1), m2 = lanes(l2);
      if (gx.data()) {
        const R inv_d = R(1) / R(static_cast<double>(d)), s1 = detail::ad::ld<R>(m1), s2 = detail::ad::ld<R>(m2);
        GX* gi = gx.data() + i * d;
        if constexpr (std::is_same_v<GX, R>) {
          if (fresh) {
            PRECIS_IVDEP for (index_t j = 0; j < d; ++j) gi[j] = rstd * (dxh[j] - inv_d * s1 - xh[j] * inv_d * s2);
          } else {
            PRECIS_IVDEP for (index_t j = 0; j < d; ++j) gi[j] += rstd * (dxh[j] - inv_d * s1 - xh[j] * inv_d * s2);
          }
        } else {
          R* dx = &row(2, 0);
          if (fresh) {
            for (index_t j = 0; j < d; ++j) dx[j] = R(rstd * (dxh[j] - inv_d * s1 - xh[j] * inv_d * s2));
          } else {
            const R* old = detail::load_run<R>(gi, d, 1, dx);
            for (index_t j = 0; j < d; ++j) dx[j] = R(old[j] + rstd * (dxh[j] - inv_d * s1 - xh[j] * inv_d * s2));
          }
          detail::store_run(dx, gi, d, 1);
        }
      }
    }
  }

  /// Attention's scores s [tq, tk] (contiguous, Acc) made probabilities in place, row by row:
  /// scaled, shifted by the row's maximum, exponentiated and divided by their running sum in
  /// Acc; with `causal`, row i keeps keys j <= i and the rest are 0. In float the whole matrix
  /// is exponentiated in one call of the vectorized exp (detail::exp_floats, as the softmax
  /// family's), the masked entries as zeros and then set to 0.
  template <class Acc>
  void attention_probabilities(const TensorView<Acc>& s, Acc scale, bool causal) const {
    const index_t tq = s.shape()[0], tk = s.shape()[1];
    const auto allowed = [&](index_t i) { return causal ? std::min(tk, i + 1) : tk; };
    for (index_t i = 0; i < tq; ++i) {
      Acc* row = s.data() + i * tk;
      const index_t a = allowed(i);
      Acc mx = row[0] * scale;
      for (index_t j = 0; j < a; ++j) {
        row[j] = row[j] * scale;
        if (row[j] > mx) mx = row[j];
      }
      for (index_t j = 0; j < a; ++j) row[j] = Acc(row[j] - mx);
      for (index_t j = a; j < tk; ++j) row[j] = Acc(0);
    }
    if constexpr (std::is_same_v<Acc, float>) {
      detail::exp_floats(s.data(), s.data(), tq * tk);
    } else {
      using std::exp;
      for (index_t i = 0; i < tq * tk; ++i) s.data()[i] = exp(s.data()[i]);
    }
    for (index_t i = 0; i < tq; ++i) {
      Acc* row = s.data() + i * tk;
      const index_t a = allowed(i);
      Acc sum(0);
      for (index_t j = 0; j < a; ++j) sum += row[j];
      for (index_t j = 0; j < a; ++j) row[j] = row[j] / sum;
      for (index_t j = a; j < tk; ++j) row[j] = Acc(0);
    }
  }
  /// Attention's score gradients in place: ds = p (ds - sum_j ds p) scale, row by row (ds and p
  /// [tq, tk], contiguous), the row's sum running in Acc.
  template <class Acc>
  void attention_score_gradients(const TensorView<Acc>& ds, const TensorView<const Acc>& p, Acc scale) const {
    const index_t tq = ds.shape()[0], tk = ds.shape()[1];
    for (index_t i = 0; i < tq; ++i) {
      Acc* d = ds.data() + i * tk;
      const Acc* pr = p.data() + i * tk;
      Acc dot(0);
      for (index_t j = 0; j < tk; ++j) dot += d[j] * pr[j];
      for (index_t j = 0; j < tk; ++j) d[j] = pr[j] * (d[j] - dot) * scale;
    }
  }

  /// n zero bytes at p (fresh_tracking's zeroing).
  static void zero_bytes(void* p, std::size_t n) noexcept { std::memset(p, 0, n); }

  /// Class labels (host memory, checked) in this backend's memory: kept for the step when
  /// `for_backward`, otherwise for the op. (Any host array of int64 indices: embedding's too.)
  const std::int64_t* labels(std::span<const std::int64_t> l, bool for_backward) const {
    std::int64_t* p = (for_backward ? keep_ : temp_)->template allocate_array<std::int64_t>(l.size());
    std::copy(l.begin(), l.end(), p);
    return p;
  }

  /// y = the mean over rows of logsumexp(x[i, :]) - x[i, labels[i]] for logits x [rows,
  /// classes]: each row's logsumexp in Acc (kept in lse, rows elements, for the backward), the
  /// terms' mean summed pairwise in Acc and rounded once into y. A label outside [0, classes)
  /// makes its row's term NaN (labels borrowed from the backend's memory are not checked).
  template <class Acc, class O, class X>
  void cross_entropy_forward(const char*, const TensorView<const X>& x, const std::int64_t* labels, Acc* lse, const TensorView<O>& y) const {
    const index_t rows = x.shape()[0], k = x.shape()[1];
    Acc* terms = temp_->template allocate_array<Acc>(static_cast<std::size_t>(rows));
    for (index_t i = 0; i < rows; ++i) {
      const auto r = x.select(0, i);
      const std::int64_t c = labels[i];
      lse[i] = detail::logsumexp_fiber<Acc>(r.data(), r.shape()[0], r.strides()[0], summation::pairwise);
      terms[i] = c >= 0 && c < k ? Acc(lse[i] - detail::ad::ld<Acc>(r(c))) : Acc(std::numeric_limits<double>::quiet_NaN());
    }
    *y.data() = detail::store<O>(detail::ad::mean_of(terms, rows));
  }
  /// gx += gy / rows (softmax(x[i, :]) - onehot(labels[i])) in R, rounded once into gx (assigned
  /// when gx is fresh); lse from the forward.
  template <class R, class G, class X, class Acc, class GX>
  void cross_entropy_backward(const char*, const TensorView<const G>& gy, const TensorView<const X>& x, const std::int64_t* labels,
                              const Acc* lse, const TensorView<GX>& gx) const {
    const index_t rows = x.shape()[0], k = x.shape()[1];
    const R g = R(detail::ad::ld<R>(*gy.data()) / R(static_cast<double>(rows)));
    const bool fresh = take_fresh(gx);  // gx holds zeros: write, do not add
    for (index_t i = 0; i < rows; ++i) {
      const R l = detail::ad::ld<R>(lse[i]);
      for (index_t j = 0; j < k; ++j) {
        using std::exp;
        const R p = exp(R(detail::ad::ld<R>(x(i, j)) - l));
        const bool valid = labels[i] >= 0 && labels[i] < k;  // borrowed labels are not checked
        const R d = valid ? R(g * (j == labels[i] ? R(p - R(1)) : p)) : R(std::numeric_limits<double>::quiet_NaN());
        GX& gij = gx(i, j);
        gij = detail::store<GX>(fresh ? d : R(detail::ad::ld<R>(gij) + d));
      }
    }
  }

  /// y = the mean over rows of -x[i, labels[i]] (x [rows, classes]; labels checked), the terms
  /// in Acc summed pairwise, rounded once into y.
  template <class Acc, class O, class X>
  void nll_forward(const TensorView<const X>& x, const std::int64_t* labels, const TensorView<O>& y) const {
    const index_t rows = x.shape()[0];
    Acc* terms = temp<Acc>(Shape{rows}).data();
    for (index_t i = 0; i < rows; ++i) terms[i] = Acc(-detail::ad::ld<Acc>(x(i, labels[i])));
    *y.data() = detail::store<O>(detail::ad::mean_of(terms, rows));
  }
  /// gx[i, labels[i]] -= gy / rows, in R, rounded once (gx holds zeros or earlier gradients).
  template <class R, class G, class GX>
  void nll_backward(const TensorView<const G>& gy, const std::int64_t* labels, const TensorView<GX>& gx) const {
    const index_t rows = gx.shape()[0];
    const R g = R(detail::ad::ld<R>(*gy.data()) / R(static_cast<double>(rows)));
    for (index_t i = 0; i < rows; ++i) {
      GX& gij = gx(i, labels[i]);
      gij = detail::store<GX>(R(detail::ad::ld<R>(gij) - g));
    }
  }

  /// y = the largest (Max) or smallest element of each fiber of x (contiguous) along `axis`,
  /// the first on ties and a NaN winning, rounded into y's storage; its position in pos (when
  /// not null).
  template <bool Max, class X, class O>
  void select(const TensorView<const X>& x, int axis, const TensorView<O>& y, std::int32_t* pos) const {
    const auto inner = detail::ad::around_axis(x.shape(), axis)[2];
    const auto len = x.shape()[axis];
    detail::ad::select_along<Max>(x, axis, [&](index_t f, index_t k) {
      const index_t o = f / inner, i = f % inner;
      y.data()[f] = detail::store<O>(detail::ad::ld<detail::ad::arith_t<O>>(x.data()[(o * len + k) * inner + i]));
      if (pos) pos[f] = static_cast<std::int32_t>(k);
    });
  }
  /// g (contiguous) at each fiber's selected position along `axis` += gy (one per fiber), in
  /// g's arithmetic type, rounded once.
  template <class G, class GX>
  void add_selected(const TensorView<const G>& gy, const std::int32_t* pos, int axis, const TensorView<GX>& g) const {
    using R = detail::ad::arith_t<GX>;
    const auto [outer, len, inner] = detail::ad::around_axis(g.shape(), axis);
    for (index_t f = 0; f < outer * inner; ++f) {
      const index_t o = f / inner, i = f % inner;
      GX& d = g.data()[(o * len + pos[f]) * inner + i];
      d = detail::store<GX>(R(detail::ad::ld<R>(d) + detail::ad::ld<R>(gy.data()[f])));
    }
  }

  /// out[i] = f(i, out[i], in[i]) over out's elements in row-major order, i the element's
  /// row-major position (dropout's mask), evaluated in A and rounded once into out's storage
  /// (in has out's shape).
  template <class A, class O, class F, class I>
  void map_indexed(const TensorView<O>& out, F f, const TensorView<const I>& in) const {
    detail::strided_loop<2> loop;
    loop.shape = out.shape();
    loop.strides[0] = out.strides();
    loop.strides[1] = in.strides();
    loop.coalesce();  // merges and drops axes without changing the row-major order
    index_t i = 0;
    loop.run(0, out.size(), [&](const std::array<index_t, 2>& off, index_t count, const std::array<index_t, 2>& st) {
      for (index_t j = 0; j < count; ++j, ++i) {
        O& o = out.data()[off[0] + j * st[0]];
        o = detail::store<O>(f(i, detail::ad::ld<A>(o), detail::ad::ld<A>(in.data()[off[1] + j * st[1]])));
      }
    });
  }

  /// acc[indices[i], :] += gy[i, :] for i = 0, 1, ..., n - 1 in order (gy [n, d] contiguous,
  /// acc [V, d] in Acc): embedding's gradient, repeated indices summed in order.
  template <class Acc, class G>
  void scatter_add_rows(const TensorView<const G>& gy, const std::int64_t* indices, index_t n, const TensorView<Acc>& acc) const {
    const index_t d = acc.shape()[1];
    for (index_t i = 0; i < n; ++i) {
      Acc* row = acc.data() + indices[i] * d;
      for (index_t j = 0; j < d; ++j) row[j] += detail::ad::ld<Acc>(gy.data()[i * d + j]);
    }
  }

  // ---- convolution, pooling and batch normalization (kernels in cpu_kernels.hpp) -------------

  /// Images per conv2d column batch (conv_detail::images_per_batch: at most 2^19 column
  /// elements, sized for the caches).
  static index_t conv_images_per_batch(index_t n, index_t k, index_t plane) { return conv_detail::images_per_batch(n, k, plane); }
  /// col [cs kh kw, count Ho Wo] = the receptive fields of images first..first+count of x
  /// [N, C, H, W] (contiguous; channels c0..c0+cs), zero where they cover padding.
  template <class L, class S>
  void im2col(const conv_detail::geometry& g, const S* x, index_t c0, index_t cs, index_t first, index_t count, L* col) const {
    conv_detail::im2col(g, x, c0, cs, first, count, col);
  }
  /// im2col's transpose: dx [N, C, H, W] (Acc, contiguous) += the column gradients dcol, each
  /// input element's taps added in kernel order (row, then column).
  template <class Acc>
  void col2im(const conv_detail::geometry& g, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count, Acc* dx) const {
    conv_detail::col2im(g, dcol, c0, cs, first, count, dx);
  }

  /// conv2d's outputs from one GEMM: y [N, oc_all, p] (contiguous) at channels oc0..oc0+og of
  /// images n0..n0+count = acc [og, count p] (Acc, overwritten) plus the bias (when
  /// bias.data() is not null) in Acc, rounded once.
  template <class Acc, class B, class O>
  void conv_output(Acc* acc, const TensorView<const B>& bias, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count,
                   index_t p, O* y) const {
    const index_t cols = count * p;
    const bool has_bias = bias.data() != nullptr;
    detail::parallel_ranges(og, detail::threads_for(og * cols, index_t{1} << 15), [&](index_t o0, index_t o1) {
      for (index_t o = o0; o < o1; ++o) {
        const index_t oc = oc0 + o;
        const Acc bv = has_bias ? detail::ad::ld<Acc>(bias(oc)) : Acc(0);
        for (index_t b = 0; b < count; ++b) {
          Acc* in = acc + o * cols + b * p;
          O* out = y + ((n0 + b) * oc_all + oc) * p;
          if constexpr (std::is_same_v<O, Acc>) {
            for (index_t q = 0; q < p; ++q) out[q] = Acc(in[q] + bv);
          } else {
            if (has_bias) {
              for (index_t q = 0; q < p; ++q) in[q] = Acc(in[q] + bv);
            }
            detail::store_run(in, out, p, 1);  // rounded once, vectorized
          }
        }
      }
    });
  }

  /// conv2d's output gradients for one GEMM: gm [og, count p] (when not null) = channels
  /// oc0..oc0+og of images n0..n0+count of gq [N, oc_all, p], and gb[o] (Acc, when not null)
  /// += the sum of gy's channel oc0 + o over those images, in (image, position) order.
  template <class Acc, class GQ, class G>
  void conv_output_grads(const GQ* gq, const G* gy, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count, index_t p,
                         GQ* gm, Acc* gb) const {
    const index_t cols = count * p;
    detail::parallel_ranges(og, detail::threads_for(og * cols, index_t{1} << 15), [&](index_t o0, index_t o1) {
      for (index_t o = gm ? o0 : o1; o < o1; ++o) {
        for (index_t b = 0; b < count; ++b) std::copy_n(gq + ((n0 + b) * oc_all + oc0 + o) * p, p, gm + o * cols + b * p);
      }
      if (gb == nullptr) return;
      // eight channels side by side, so that their chains of additions overlap
      constexpr index_t lanes = 8;
      std::array<std::array<Acc, detail::chunk>, lanes> buf;
      for (index_t c0 = o0; c0 < o1; c0 += lanes) {
        const index_t nc = std::min(lanes, o1 - c0);
        std::array<Acc, lanes> s{};
        std::array<const Acc*, lanes> v{};
        for (index_t j = 0; j < nc; ++j) s[static_cast<std::size_t>(j)] = gb[c0 + j];
        for (index_t b = 0; b < count; ++b) {
          for (index_t q0 = 0; q0 < p; q0 += detail::chunk) {
            const index_t len = std::min(detail::chunk, p - q0);
            for (index_t j = 0; j < nc; ++j) {
              const G* src = gy + ((n0 + b) * oc_all + oc0 + c0 + j) * p + q0;
              v[static_cast<std::size_t>(j)] = detail::load_run<Acc>(src, len, index_t{1}, buf[static_cast<std::size_t>(j)].data());
            }
            if (nc == lanes) {
              // the eight sums in named locals, so that they stay in registers at -O2 too (GCC
              // unrolls a loop over an array of them completely only at -O3)
              Acc t0 = s[0], t1 = s[1], t2 = s[2], t3 = s[3], t4 = s[4], t5 = s[5], t6 = s[6], t7 = s[7];
              const Acc *v0 = v[0], *v1 = v[1], *v2 = v[2], *v3 = v[3], *v4 = v[4], *v5 = v[5], *v6 = v[6], *v7 = v[7];
              for (index_t q = 0; q < len; ++q) {
                t0 += v0[q];
                t1 += v1[q];
                t2 += v2[q];
                t3 += v3[q];
                t4 += v4[q];
                t5 += v5[q];
                t6 += v6[q];
                t7 += v7[q];
              }
              s = {t0, t1, t2, t3, t4, t5, t6, t7};
            } else {
              for (index_t q = 0; q < len; ++q)
                for (index_t j = 0; j < nc; ++j) s[static_cast<std::size_t>(j)] += v[static_cast<std::size_t>(j)][q];
            }
          }
        }
        for (index_t j = 0; j < nc; ++j) gb[c0 + j] = s[static_cast<std::size_t>(j)];
      }
    });
  }

  /// Whether conv2d's forward may take the direct kernel (conv_detail::direct_forward) for these
  /// types: an fp32 accumulator and operands that widen to fp32 exactly.
  template <class Acc, class L>
  static constexpr bool conv_direct_types = std::is_same_v<Acc, float> && conv_detail::widens_to_f32<L>;
  /// conv2d's forward by the direct kernel where it applies (conv_detail::direct_applies: this
  /// CPU, unit stride along the rows, few taps per output): y = x (*) w (+ bias), each output alpha
  /// times its chain of fp32 FMAs in k order, plus the bias, rounded once. False: it did not apply
  /// (nothing written; conv2d takes the columns' GEMM).
  template <class L, class B, class O>
  bool conv_direct(const conv_detail::geometry& g, index_t groups, index_t oc_all, const L* x, const L* w,
                   const TensorView<const B>& bias, float alpha, O* y) const {
    const index_t lanes = conv_detail::direct_lanes();
    if (!conv_detail::direct_applies(g, groups, lanes)) return false;
    const conv_detail::direct_layout d(g, lanes);
    constexpr bool staged = !std::is_same_v<O, float>;
    const index_t nb = conv_detail::direct_images_per_batch(g, d, oc_all, staged);
    const auto xp = temp<float>(Shape{nb * g.c * d.plane()});
    const auto wf = temp<float>(Shape{oc_all * (g.c / groups * g.kh * g.kw + 1)});
    const auto yb = temp<float>(Shape{staged ? nb * oc_all * g.plane() : 0});
    conv_detail::direct_forward(g, d, groups, oc_all, x, w, bias, alpha, y, nb, xp.data(), wf.data(), yb.data());
    return true;
  }

  /// Whether conv2d's weight gradient may skip the GEMM (weight_grad_direct) for these types:
  /// an fp32 accumulator and operands that widen to fp32 exactly; at run time the CPU must also
  /// have AVX2 and FMA (weight_grad_direct_available).
  template <class Acc, class L, class GQ>
  static constexpr bool weight_grad_direct_types =
      std::is_same_v<Acc, float> && conv_detail::widens_to_f32<L> && conv_detail::widens_to_f32<GQ>;
  static bool weight_grad_direct_available() { return conv_detail::weight_grad_direct_available(); }
  /// conv_detail::weight_grad_direct (its comment says what it computes and needs).
  template <class GQ, class L>
  void weight_grad_direct(const GQ* g, index_t gs, index_t og, const L* col, index_t k, index_t count, index_t p, float alpha,
                          float* gw, float* part, GQ* tail_g, L* tail_c) const {
    conv_detail::weight_grad_direct(g, gs, og, col, k, count, p, alpha, gw, part, tail_g, tail_c);
  }
  /// Whether conv2d's backward takes the padded planes (conv_detail::padded_backward_applies:
  /// unit strides, many taps); with the kernels below, for operand types of weight_grad_direct's.
  static bool padded_backward_applies(const conv_detail::geometry& g, index_t groups, index_t oc_all) {
    return conv_detail::padded_backward_applies(g, groups, oc_all);
  }
  /// conv_detail::pad_planes, pad_output_grads and col2im_padded (their comments say what they
  /// compute).
  template <class L>
  void pad_planes(const conv_detail::geometry& g, const conv_detail::padded_layout& d, const L* x, index_t c0, index_t cs,
                  index_t first, index_t count, L* xp) const {
    conv_detail::pad_planes(g, d, x, c0, cs, first, count, xp);
  }
  template <class GQ>
  void pad_output_grads(const conv_detail::geometry& g, const conv_detail::padded_layout& d, const GQ* gq, index_t oc0, index_t og,
                        index_t oc_all, index_t first, index_t count, GQ* gp) const {
    conv_detail::pad_output_grads(g, d, gq, oc0, og, oc_all, first, count, gp);
  }
  template <class Acc>
  void col2im_padded(const conv_detail::geometry& g, const conv_detail::padded_layout& d, const Acc* dcol, index_t c0, index_t cs,
                     index_t first, index_t count, Acc* dxp, Acc* dx) const {
    conv_detail::col2im_padded(g, d, dcol, c0, cs, first, count, dxp, dx);
  }
  /// conv_detail::weight_grad_taps (part: weight_grad_part_size floats; its tap offsets are
  /// scratch of this call's).
  template <class GQ, class L>
  void weight_grad_taps(const conv_detail::geometry& g, const conv_detail::padded_layout& d, const GQ* gp, index_t og, const L* xp,
                        index_t cg, index_t count, float alpha, float* gw, float* part) const {
    index_t* roff = temp_->template allocate_array<index_t>(static_cast<std::size_t>(cg * g.kh * g.kw));
    conv_detail::weight_grad_taps(g, d, gp, og, xp, cg, count, alpha, gw, part, roff);
  }

  /// v (contiguous) = zeros.
  template <class T>
  void fill_zero(const TensorView<T>& v) const {
    std::fill_n(v.data(), v.size(), T(0));
  }

  /// y = the largest element of each window of x [N, C, H, W] (g's geometry; padding never
  /// wins): the first largest in row-major order, or the first NaN; `at` (when not null) gets
  /// each winner's position in its plane. Compared in x's arithmetic type, rounded once into y.
  template <class X, class O>
  void max_pool(const conv_detail::geometry& g, const TensorView<const X>& x, const TensorView<O>& y, std::int32_t* at) const {
    using R = detail::ad::arith_t<detail::remove_const_t<X>>;
    const index_t planes = g.n * g.c;
    const bool two_by_two = g.kh == 2 && g.kw == 2 && g.stride[0] == 2 && g.stride[1] == 2 && g.pad[0] == 0 && g.pad[1] == 0;
#if PRECIS_X86_SIMD
    // 16-bit windows in and out of one format: selected in place (AVX-512 or AVX2 lanes), no
    // widened copy of x
    if constexpr ((std::is_same_v<O, half> || std::is_same_v<O, bfloat16>) && std::is_same_v<detail::remove_const_t<X>, O>) {
      const bool wide = detail::cpu_has_avx512f();
      if (two_by_two && x.is_contiguous() && (wide || detail::cpu_has_avx2_f16c())) {
        const auto wi = static_cast<std::int32_t>(g.w);
        const index_t lanes = wide ? 16 : 8;
        detail::parallel_ranges(planes, detail::threads_for(planes * g.h * g.w, index_t{1} << 15), [&](index_t p0, index_t p1) {
          for (index_t pl = p0; pl < p1; ++pl) {
            const O* in = x.data() + pl * g.h * g.w;
            O* yp = y.data() + pl * g.plane();
            std::int32_t* ap = at ? at + pl * g.plane() : nullptr;
            for (index_t oh = 0; oh < g.ho; ++oh) {
              const O* r0 = in + 2 * oh * g.w;
              const auto row = static_cast<std::int32_t>(2 * oh * g.w);
              for (index_t o1 = 0; o1 < g.wo; o1 += lanes) {
                // AVX2: a row's last 8 windows overlap the previous 8 rather than being fewer
                const index_t o0 = !wide && g.wo >= lanes ? std::min(o1, g.wo - lanes) : o1, len = std::min(lanes, g.wo - o0);
                const std::int32_t c = row + 2 * static_cast<std::int32_t>(o0);
                std::int32_t* apo = ap ? ap + oh * g.wo + o0 : nullptr;
                if (wide) conv_detail::max_pool_2x2_avx512_16(r0 + 2 * o0, r0 + g.w + 2 * o0, len, c, wi, yp + oh * g.wo + o0, apo);
                else conv_detail::max_pool_2x2_avx2_16(r0 + 2 * o0, r0 + g.w + 2 * o0, len, c, wi, yp + oh * g.wo + o0, apo);
              }
            }
          }
        });
        return;
      }
    }
#endif
    const auto xc = as<R>(x, false);  // widened once, vectorized (exact)
    detail::parallel_ranges(planes, detail::threads_for(planes * g.h * g.w, index_t{1} << 15), [&](index_t p0, index_t p1) {
    for (index_t pl = p0; pl < p1; ++pl) {
      const auto* in = xc.data() + pl * g.h * g.w;
      if (two_by_two) {
        O* yp = y.data() + pl * g.plane();
        if (at) conv_detail::max_pool_2x2<true>(in, g.w, g.ho, g.wo, yp, at + pl * g.plane());
        else conv_detail::max_pool_2x2<false>(in, g.w, g.ho, g.wo, yp, at);
        continue;
      }
      if (g.pad[0] == 0 && g.pad[1] == 0) {  // every window inside the plane: no bounds checks
        for (index_t oh = 0; oh < g.ho; ++oh)
          for (index_t ow = 0; ow < g.wo; ++ow) {
            const index_t base = oh * g.stride[0] * g.w + ow * g.stride[1];
            index_t best = base;
            R bv = detail::ad::ld<R>(in[base]);
            for (index_t i = 0; i < g.kh; ++i)
              for (index_t j = 0; j < g.kw; ++j) {
                const index_t at_ij = base + i * g.w + j;
                const R v = detail::ad::ld<R>(in[at_ij]);
                const bool take = v > bv || v != v;  // selects, without a branch to mispredict
                best = take ? at_ij : best;
                bv = take ? v : bv;
              }
            const index_t o = (pl * g.ho + oh) * g.wo + ow;
            y.data()[o] = detail::store<O>(detail::load<detail::ad::arith_t<O>>(bv));
            if (at) at[o] = static_cast<std::int32_t>(best);
          }
        continue;
      }
      for (index_t oh = 0; oh < g.ho; ++oh)
        for (index_t ow = 0; ow < g.wo; ++ow) {
          index_t best = -1;
          R bv(0);
          for (index_t i = 0; i < g.kh; ++i) {
            const index_t ih = oh * g.stride[0] - g.pad[0] + i;
            if (ih < 0 || ih >= g.h) continue;
            for (index_t j = 0; j < g.kw; ++j) {
              const index_t iw = ow * g.stride[1] - g.pad[1] + j;
              if (iw < 0 || iw >= g.w) continue;
              const R v = detail::ad::ld<R>(in[ih * g.w + iw]);
              if (best < 0 || v > bv || v != v) {
                best = ih * g.w + iw;
                bv = v;
              }
            }
          }
          const index_t o = (pl * g.ho + oh) * g.wo + ow;
          y.data()[o] = detail::store<O>(detail::load<detail::ad::arith_t<O>>(bv));
          if (at) at[o] = static_cast<std::int32_t>(best);
        }
    }
    });
  }

  /// max_pool's backward: d (+)= gy at each window's winner (`at`, from the forward), the
  /// contributions to one input summed in R (windows may overlap) and rounded once.
  template <class R, class G, class GX>
  void max_pool_backward(const conv_detail::geometry& g, const TensorView<const G>& gy, const std::int32_t* at,
                         const TensorView<GX>& d) const {
    const index_t planes = g.n * g.c;
    if (g.kh == 2 && g.kw == 2 && g.stride[0] == 2 && g.stride[1] == 2 && g.pad[0] == 0 && g.pad[1] == 0 && g.wo > 0 &&
        g.wo <= detail::chunk) {
      // disjoint 2 x 2 windows: each input gets its window's gradient (0 + g, as the sum below
      // has it) or zero, written a row of windows at a time from gradients widened in runs of
      // whole rows; straight into a fresh fp32 gradient (the inputs no window covers, an odd
      // last row or column, get their zeros here), else into zeros added once
      // (a fresh gradient of another format, bf16 or fp16 under the mixed policies: each plane
      // written in R into a scratch plane, then rounded into d in one conversion, instead of a
      // zeroed R tensor of d's size added into d afterwards; the same values, rounded once)
      GX* direct = nullptr;
      bool narrow = false;
      if (d.is_contiguous() && take_fresh(d)) {
        if constexpr (std::is_same_v<GX, R>) direct = d.data();
        else narrow = true;
      }
      const bool fresh = direct != nullptr || narrow;
      const auto acc = fresh ? TensorView<R>() : zeros<R>(d.shape());
      R* base = direct ? reinterpret_cast<R*>(direct) : acc.data();
      const index_t wo = g.wo, rows_per = detail::chunk / wo;
      const auto wi = static_cast<std::int32_t>(g.w);
      detail::parallel_ranges(planes, detail::threads_for(planes * g.h * g.w, index_t{1} << 15), [&](index_t p0, index_t p1) {
        std::array<R, detail::chunk> buf;
        R* const own = narrow ? detail::scratch<R, 9>(static_cast<std::size_t>(g.h * g.w)) : nullptr;
        for (index_t pl = p0; pl < p1; ++pl) {
          R* plane = narrow ? own : base + pl * g.h * g.w;
          for (index_t oh0 = 0; oh0 < g.ho; oh0 += rows_per) {
            const index_t rows = std::min(rows_per, g.ho - oh0), o = (pl * g.ho + oh0) * wo;
            const R* gv = detail::load_run<R>(gy.data() + o, rows * wo, index_t{1}, buf.data());
            for (index_t r = 0; r < rows; ++r) {
              const index_t oh = oh0 + r;
              conv_detail::max_pool_2x2_grad_row(gv + r * wo, at + o + r * wo, wo, static_cast<std::int32_t>(2 * oh * g.w), wi,
                                                 plane + 2 * oh * g.w);
              if (fresh && g.w > 2 * wo) {
                std::fill(plane + 2 * oh * g.w + 2 * wo, plane + (2 * oh + 1) * g.w, R(0));
                std::fill(plane + (2 * oh + 1) * g.w + 2 * wo, plane + (2 * oh + 2) * g.w, R(0));
              }
            }
          }
          if (fresh) std::fill(plane + 2 * g.ho * g.w, plane + g.h * g.w, R(0));
          if (narrow) detail::store_run(plane, d.data() + pl * g.h * g.w, g.h * g.w, index_t{1});
        }
      });
      if (!fresh) add_into<R>("precis::max_pool2d", d, acc.as_const());
      return;
    }
    const auto acc = zeros<R>(d.shape());  // windows may overlap: sum, then round once
    detail::parallel_ranges(planes, detail::threads_for(planes * g.h * g.w, index_t{1} << 15), [&](index_t p0, index_t p1) {
      for (index_t pl = p0; pl < p1; ++pl)
        for (index_t q = 0; q < g.plane(); ++q) {
          const index_t o = pl * g.plane() + q;
          acc.data()[pl * g.h * g.w + at[o]] += detail::ad::ld<R>(gy.data()[o]);
        }
    });
    add_into<R>("precis::max_pool2d", d, acc.as_const());
  }

  /// y = the mean of each window of x (contiguous; padding counted as zeros, divisor kh kw):
  /// the window's sum in R in row-major order times 1 / (kh kw), rounded once.
  template <class R, class X, class O>
  void avg_pool(const conv_detail::geometry& g, const TensorView<const X>& x, const TensorView<O>& y) const {
    const R inv = R(1) / R(static_cast<double>(g.kh * g.kw));
    for (index_t pl = 0; pl < g.n * g.c; ++pl) {
      const auto* in = x.data() + pl * g.h * g.w;
      for (index_t oh = 0; oh < g.ho; ++oh)
        for (index_t ow = 0; ow < g.wo; ++ow) {
          R s(0);
          for (index_t i = 0; i < g.kh; ++i) {
            const index_t ih = oh * g.stride[0] - g.pad[0] + i;
            if (ih < 0 || ih >= g.h) continue;
            for (index_t j = 0; j < g.kw; ++j) {
              const index_t iw = ow * g.stride[1] - g.pad[1] + j;
              if (iw >= 0 && iw < g.w) s += detail::ad::ld<R>(in[ih * g.w + iw]);
            }
          }
          y.data()[(pl * g.ho + oh) * g.wo + ow] = detail::store<O>(R(s * inv));
        }
    }
  }
  /// avg_pool's backward: acc [N, C, H, W] (R, contiguous) += gy / (kh kw) of every window
  /// covering each element, in the windows' row-major order.
  template <class R, class G>
  void avg_pool_backward(const conv_detail::geometry& g, const TensorView<const G>& gy, const TensorView<R>& acc) const {
    const R inv = R(1) / R(static_cast<double>(g.kh * g.kw));
    for (index_t pl = 0; pl < g.n * g.c; ++pl) {
      R* out = acc.data() + pl * g.h * g.w;
      for (index_t oh = 0; oh < g.ho; ++oh)
        for (index_t ow = 0; ow < g.wo; ++ow) {
          const R v = R(detail::ad::ld<R>(gy.data()[(pl * g.ho + oh) * g.wo + ow]) * inv);
          for (index_t i = 0; i < g.kh; ++i) {
            const index_t ih = oh * g.stride[0] - g.pad[0] + i;
            if (ih < 0 || ih >= g.h) continue;
            for (index_t j = 0; j < g.kw; ++j) {
              const index_t iw = ow * g.stride[1] - g.pad[1] + j;
              if (iw >= 0 && iw < g.w) out[ih * g.w + iw] += v;
            }
          }
        }
    }
  }

  /// Batch normalization's forward over x [N, C, ...] (contiguous), channel by channel: in
  /// training the mean and the biased variance in Acc (detail::bn::lane_sum) and the running
  /// estimates (double, each when not null) moved by `momentum` with the unbiased variance; in
  /// evaluation the running estimates. stats[2c] = the mean, stats[2c + 1] = 1 / sqrt(var +
  /// eps); y = (x - mean) rstd gamma + beta in Acc, rounded once.
  template <class Acc, class X, class Gm, class Bt, class O>
  void batch_norm_forward(const TensorView<const X>& x, const TensorView<const Gm>& gamma, const TensorView<const Bt>& beta, bool training,
                          double momentum, double eps, double* running_mean, double* running_var, Acc* stats,
                          const TensorView<O>& y) const {
    const index_t n = x.shape()[0], c = x.shape()[1], s = x.size() / std::max<index_t>(1, n * c), m = n * s;
    std::array<Acc, detail::chunk> buf;
    for (index_t ch = 0; ch < c; ++ch) {
      Acc mu(0), var(0);
      if (training) {
        detail::bn::lane_sum<Acc> sx;
        detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
          sx.push(detail::bn::load<Acc>(x.data() + at, len, buf.data()), len);
        });
        mu = sx.result() / Acc(static_cast<double>(m));
        detail::bn::lane_sum<Acc> sd;
        detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
          const Acc* v = detail::bn::load<Acc>(x.data() + at, len, buf.data());
          for (index_t k = 0; k < len; ++k) {
            const Acc d = v[k] - mu;
            buf[static_cast<std::size_t>(k)] = d * d;
          }
          sd.push(buf.data(), len);
        });
        var = sd.result() / Acc(static_cast<double>(m));
        if (running_mean != nullptr) running_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * static_cast<double>(mu);
        if (running_var != nullptr) {
          running_var[ch] = (1 - momentum) * running_var[ch] +
                            momentum * static_cast<double>(var) * static_cast<double>(m) / static_cast<double>(m - 1);
        }
      } else {
        mu = Acc(running_mean[ch]);
        var = Acc(running_var[ch]);
      }
      using std::sqrt;
      const Acc rstd = Acc(1) / Acc(sqrt(Acc(var + Acc(eps))));
      stats[2 * ch] = mu;
      stats[2 * ch + 1] = rstd;
      const Acc gm = detail::ad::ld<Acc>(gamma(ch)), bt = detail::ad::ld<Acc>(beta(ch));
      detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
        const Acc* v = detail::bn::load<Acc>(x.data() + at, len, buf.data());
        for (index_t k = 0; k < len; ++k) buf[static_cast<std::size_t>(k)] = Acc((v[k] - mu) * rstd * gm + bt);
        detail::store_run(buf.data(), y.data() + at, len, 1);
      });
    }
  }

  /// Batch normalization's backward (gy and x contiguous, stats from the forward), channel by
  /// channel in Acc: db[c] = the sum of gy, dg[c] = the sum of gy xhat (detail::bn::lane_sum),
  /// and when dx is not null dx = gamma rstd (gy - mean(gy) - xhat mean(gy xhat)) in training,
  /// gamma rstd gy in evaluation.
  template <class Acc, class G, class X, class Gm>
  void batch_norm_backward(const TensorView<const G>& gy, const TensorView<const X>& x, const TensorView<const Gm>& gamma, const Acc* stats,
                           bool training, Acc* dx, Acc* dg, Acc* db) const {
    const index_t n = x.shape()[0], c = x.shape()[1], s = x.size() / std::max<index_t>(1, n * c), m = n * s;
    std::array<Acc, detail::chunk> buf, gbuf;
    for (index_t ch = 0; ch < c; ++ch) {
      const Acc mu = stats[2 * ch], rstd = stats[2 * ch + 1], gm = detail::ad::ld<Acc>(gamma(ch));
      detail::bn::lane_sum<Acc> sum_g, sum_gx;  // sums of gy and gy xhat
      detail::bn::for_runs(n, c, s, ch, [&](index_t at, index_t len) {
        const Acc* g = detail::bn::load<Acc>(gy.data() + at, len, gbuf.data());
        const Acc* v = detail::bn::load<Acc>(x.data() + at, len, buf.data());
        for (index_t k = 0; k < len; ++k) buf[static_cast<std::size_t>(k)] = g[k] * Acc((v[k] - mu) * rstd);
        sum_g.push(g, len);
        sum_gx.push(buf.data(), len);
      });
      const Acc sg = sum_g.result(), sgx = sum_gx.result();
      dg[ch] = sgx;
      db[ch] = sg;
      if (dx == nullptr) continue;
      const Acc inv_m = Acc(1) / Acc(static_cast<double>(m));
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < s; ++j) {
          const index_t at = (i * c + ch) * s + j;
          const Acc g = detail::ad::ld<Acc>(gy.data()[at]);
          if (training) {  // dx = gamma rstd (g - mean(g) - xhat mean(g xhat))
            const Acc xh = (detail::ad::ld<Acc>(x.data()[at]) - mu) * rstd;
            dx[at] = gm * rstd * (g - sg * inv_m - xh * sgx * inv_m);
          } else {
            dx[at] = gm * rstd * g;
          }
        }
    }
  }

  /// to = from, rounded once to nearest into to's storage (same shapes, any strides).
  template <class S, class C, class D, class DC>
  static void copy(const TensorView<S, C>& from, const TensorView<D, DC>& to) {
    detail::copy_view(from, to);
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

namespace precis::backend {

/// Host memory and op::cpu: the tape as it has always run.
struct host {
  using arena_type = Arena;
  static constexpr bool host_memory = true;

  static Arena make_arena(std::size_t bytes) { return Arena(bytes); }
  template <class P>
  static op::cpu context(Arena& temp, Arena& keep, bool saving, fp8::scaling_state* fp8) noexcept {
    return op::cpu(temp, keep, saving, detail::ad::gemm_isa_for<P>(), fp8);
  }
  /// n zero bytes at p (a new gradient buffer of a type whose zero is all zero bytes).
  static void zero_bytes(void* p, std::size_t n) noexcept { std::memset(p, 0, n); }
  /// n copies of v from p.
  template <class S>
  static void fill(S* p, std::size_t n, const S& v) {
    std::fill_n(p, n, v);
  }
  /// to (this backend's memory) = from (the host's), rounded once to nearest into to's storage.
  template <class S, class C, class D>
  static void upload(const TensorView<S, C>& from, const TensorView<D>& to) {
    detail::copy_view(from, to);
  }
  /// The element at p.
  template <class S>
  static S read(const S* p) {
    return *p;
  }

  /// What nn modules keep their parameters and gradients in.
  template <class T>
  using tensor = Tensor<T>;
  /// to (host memory) = from (this backend's), same shape and storage.
  template <class S>
  static void download(const TensorView<const S>& from, const TensorView<S>& to) {
    if (from.shape() != to.shape()) {
      throw shape_error("precis::backend::host::download: " + from.shape().str() + " into " + to.shape().str() +
                        "; expected equal shapes");
    }
    detail::copy_view(from, to);
  }
};

/// The backend of policy P: P::backend when it names one, host otherwise.
template <class P>
struct of {
  using type = host;
};
template <class P>
  requires requires { typename P::backend; }
struct of<P> {
  using type = typename P::backend;
};

}  // namespace precis::backend

namespace precis {

/// Where a Tape<P>'s values live and what runs its ops (see precis/ops/cpu.hpp).
template <class P>
using backend_t = typename backend::of<P>::type;

}  // namespace precis
