// Element-wise maps with NumPy broadcasting. Each op loads its inputs' storage, computes in
// the Compute type, and rounds once into the output storage.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <type_traits>

#include "precis/error.hpp"
#include "precis/format/convert.hpp"
#include "precis/tensor/detail/strided_loop.hpp"
#include "precis/tensor/detail/vexp.hpp"
#include "precis/tensor/tensor.hpp"

namespace precis {

/// Two operands share memory in a way that would make the result depend on evaluation order.
class aliasing_error : public error {
 public:
  using error::error;
};

template <class T>
struct tensor_traits : std::false_type {};
template <class S, class C>
struct tensor_traits<Tensor<S, C>> : std::true_type {
  using storage_type = S;
  using compute_type = C;
};
template <class S, class C>
struct tensor_traits<TensorView<S, C>> : std::true_type {
  using storage_type = detail::remove_const_t<S>;
  using compute_type = C;
};

/// A Tensor or a TensorView.
template <class T>
concept tensor_like = tensor_traits<detail::remove_cvref_t<T>>::value;

template <tensor_like T>
using storage_of = typename tensor_traits<detail::remove_cvref_t<T>>::storage_type;
template <tensor_like T>
using compute_of = typename tensor_traits<detail::remove_cvref_t<T>>::compute_type;

/// Read-only view of a Tensor or view.
template <class S, class C>
TensorView<const S, C> as_view(const Tensor<S, C>& t) { return t.view(); }
template <class S, class C>
TensorView<const detail::remove_const_t<S>, C> as_view(const TensorView<S, C>& v) { return v; }

/// Writable view of a Tensor or (non-const) view.
template <class S, class C>
TensorView<S, C> as_mutable_view(Tensor<S, C>& t) { return t.view(); }
template <class S, class C>
  requires(!std::is_const_v<S>)
TensorView<S, C> as_mutable_view(const TensorView<S, C>& v) { return v; }

namespace detail {

/// The element-wise copy functor (map_into rounds once into the destination's storage, and
/// converts a copy straight from the input's storage into the output's).
struct identity {
  template <class T>
  PRECIS_HOST_DEVICE T operator()(const T& a) const {
    return a;
  }
};

template <class F, class C, class Seq>
struct bulk_callable;
template <class F, class C, std::size_t... I>
struct bulk_callable<F, C, std::index_sequence<I...>> {
  static constexpr bool value =
      requires(const F& f, C* o, const std::array<const C*, sizeof...(I)>& in, index_t n) { f.bulk(o, in[I]..., n); };
};

/// Whether f has a vectorized kernel f.bulk(out, in_1, ..., in_n, n) over arrays of C (a trait
/// outside the generic lambdas below: nvcc's front end misjudges the same requires-expression
/// written inline in them).
template <class F, class C, std::size_t Inputs>
concept has_bulk = bulk_callable<F, C, std::make_index_sequence<Inputs>>::value;

/// Of two formats, one that holds every value of both (float or double when neither does).
template <class A, class B>
using promote_t = std::conditional_t<
    converts_exactly<A, B>(), B,
    std::conditional_t<converts_exactly<B, A>(), A,
                       std::conditional_t<converts_exactly<A, float>() && converts_exactly<B, float>(),
                                          float, double>>>;

inline constexpr index_t chunk = 256;

/// Dense fp16 and bf16 runs at most this long widen in one AVX2 call (widen_short_avx2), or
/// in the portable vectors where AVX2 is not used (half_to_float_portable,
/// bf16_to_float_portable): convert_dispatch's checks and call cost more than such a run's
/// conversion (the rows of an attention head, 16 values).
inline constexpr index_t inline_widen_max = 64;

#if PRECIS_X86_SIMD
/// fp16 or bf16 -> float for a dense run of at most inline_widen_max values in one AVX2 call,
/// without convert_dispatch's checks and calls: decode_to_float_avx2's arithmetic (F16C's
/// vcvtph2ps for fp16, a shift for bf16; NaNs quieted), 8 values at a time and the last ones
/// one by one. An attention head's rows of 16 fp16 values took 12-19 ns through convert_dispatch
/// on a Zen 3 core and 5-8 ns here (docs/benchmarks.md).
template <class S>
PRECIS_TARGET_AVX2 void widen_short_avx2(const S* p, index_t n, float* dst) {
  static_assert(std::is_same_v<S, half> || std::is_same_v<S, bfloat16>);
  const auto* bits = reinterpret_cast<const std::uint16_t*>(p);
  index_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i));
    __m256i f;
    if constexpr (std::is_same_v<S, half>) {
      f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    } else {
      f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), quiet_nans(f));
  }
  for (; i < n; ++i) {
    std::uint32_t u;
    if constexpr (std::is_same_v<S, half>) {
      const float f = _cvtsh_ss(bits[i]);
      std::memcpy(&u, &f, 4);
    } else {
      u = std::uint32_t{bits[i]} << 16;
    }
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
    std::memcpy(dst + i, &u, 4);
  }
}
#endif

/// Loads `n` elements (stride `st`) as Compute into buf, or returns them in place when they
/// already are a dense run of Compute.
template <class C, class S>
const C* load_run(const S* p, index_t n, index_t st, C* buf) {
  if constexpr (std::is_same_v<S, C>) {
    if (st == 1) return p;
  }
  constexpr bool widens_16_bits = (std::is_same_v<S, half> || std::is_same_v<S, bfloat16>);
  if constexpr (widens_16_bits && std::is_same_v<C, float>) {
    if (st == 1 && n <= inline_widen_max) {
#if PRECIS_X86_SIMD
      if (cpu_has_avx2_f16c()) {
        widen_short_avx2(p, n, buf);
        return buf;
      }
#endif
      const auto* bits = reinterpret_cast<const std::uint16_t*>(p);
      if constexpr (std::is_same_v<S, half>) {
        half_to_float_portable(bits, buf, static_cast<std::size_t>(n));
      } else {
        bf16_to_float_portable(bits, buf, static_cast<std::size_t>(n));
      }
      return buf;
    }
  }
  if (st == 0) {
    const C v = load<C>(*p);
    for (index_t i = 0; i < n; ++i) buf[i] = v;
  } else if (st == 1 && std::is_same_v<C, float> && !std::is_same_v<S, float>) {
    convert_dispatch(p, reinterpret_cast<float*>(buf), static_cast<std::size_t>(n),
                     rounding::nearest_even, overflow::infinity);
  } else {
    for (index_t i = 0; i < n; ++i) buf[i] = load<C>(p[i * st]);
  }
  return buf;
}

/// Rounds n Compute values into storage (stride `st`).
template <class S, class C>
void store_run(const C* buf, S* p, index_t n, index_t st) {
  if (st == 1 && std::is_same_v<C, float> && !std::is_same_v<S, float>) {
    convert_dispatch(reinterpret_cast<const float*>(buf), p, static_cast<std::size_t>(n),
                     rounding::nearest_even, storage_overflow<S>);
  } else {
    for (index_t i = 0; i < n; ++i) p[i * st] = store<S>(buf[i]);
  }
}

/// dst[0, n) = src[0, n) for a short n: whole 32-byte blocks by fixed-size copies (inlined, no
/// call into memcpy per run), then element by element.
template <class T>
void copy_short(const T* src, index_t n, T* dst) {
  index_t i = 0;
  if constexpr (std::is_trivially_copyable_v<T> && sizeof(T) <= 32 && 32 % sizeof(T) == 0) {
    constexpr index_t block = 32 / sizeof(T);
    for (; i + block <= n; i += block) std::memcpy(dst + i, src + i, 32);
  }
  for (; i < n; ++i) dst[i] = src[i];
}

/// Up to Cap elements of strided runs (each with one offset and inner stride per operand),
/// gathered into and scattered from dense blocks.
template <std::size_t N, index_t Cap>
struct gathered_runs {
  struct run_t {
    std::array<index_t, N> off, st;
    index_t count;
  };
  std::array<run_t, static_cast<std::size_t>(Cap)> runs;
  std::size_t nruns = 0;
  index_t size = 0;

  void add(const std::array<index_t, N>& off, index_t count, const std::array<index_t, N>& st) {
    runs[nruns++] = run_t{off, st, count};
    size += count;
  }
  void clear() {
    nruns = 0;
    size = 0;
  }
  /// Operand k's elements of every run, in order, into dst.
  template <class S>
  void gather(const S* base, std::size_t k, detail::remove_const_t<S>* dst) const {
    for (std::size_t r = 0; r < nruns; ++r) {
      const run_t& u = runs[r];
      const S* p = base + u.off[k];
      if (u.st[k] == 1) {
        copy_short(p, u.count, dst);
      } else {
        for (index_t i = 0; i < u.count; ++i) dst[i] = p[i * u.st[k]];
      }
      dst += u.count;
    }
  }
  /// src back to operand 0's (the output's) elements of every run.
  template <class S>
  void scatter(const S* src, S* base) const {
    for (std::size_t r = 0; r < nruns; ++r) {
      const run_t& u = runs[r];
      S* p = base + u.off[0];
      if (u.st[0] == 1) {
        copy_short(src, u.count, p);
      } else {
        for (index_t i = 0; i < u.count; ++i) p[i * u.st[0]] = src[i];
      }
      src += u.count;
    }
  }
};

template <class OS, class OC, class... IS, class... IC>
void check_map(const char* op, const TensorView<OS, OC>& out, const TensorView<IS, IC>&... in) {
  Shape b = out.shape();
  ((b = broadcast_shapes(b, in.shape(), op)), ...);
  if (!(b == out.shape())) {
    std::string shapes;
    ((shapes += (shapes.empty() ? "" : ", ") + in.shape().str()), ...);
    throw shape_error(std::string(op) + ": inputs of shapes " + shapes + " broadcast to " +
                      b.str() + ", which does not fit the output of shape " + out.shape().str());
  }
  auto check_alias = [&](const auto& v) {
    if (may_overlap(out, v) && !same_elements(out, v)) {
      throw aliasing_error(std::string(op) + ": the output (shape " + out.shape().str() +
                           ", strides " + out.strides().str() +
                           ") partially overlaps an input (shape " + v.shape().str() +
                           ", strides " + v.strides().str() +
                           "); expected disjoint memory or exactly the same elements");
    }
  };
  (check_alias(in), ...);
}

}  // namespace detail

/// out[i] = f(in_1[i], ..., in_k[i]) with broadcasting, computed in C and rounded once into
/// out's storage. The output may be one of the inputs (in-place) but must not partially
/// overlap any of them.
template <class C, class F, class OS, class OC, class... IS, class... IC>
void map_into(const char* op, const TensorView<OS, OC>& out, F f, const TensorView<IS, IC>&... in) {
  static_assert(!std::is_const_v<OS>, "precis::map_into: the output view must be writable");
  constexpr std::size_t N = sizeof...(IS) + 1;
  const auto inputs = std::forward_as_tuple(in...);
  // One 1-D run of `count` elements at offsets `off` with strides `st`, in chunks.
  auto run = [&](const std::array<index_t, N>& off, index_t count, const std::array<index_t, N>& st) {
    std::array<std::array<C, detail::chunk>, sizeof...(IS)> ibuf;
    std::array<C, detail::chunk> obuf;
    if constexpr (std::is_same_v<F, detail::identity> && sizeof...(IS) == 1) {
      // a copy: each value loaded as C and rounded into the output's storage, with no copy of
      // the C values between (a dense output of type C is loaded into directly)
      for (index_t c0 = 0; c0 < count; c0 += detail::chunk) {
        const index_t n = std::min(detail::chunk, count - c0);
        OS* dst = out.data() + off[0] + c0 * st[0];
        const auto* src = std::get<0>(inputs).data() + off[1] + c0 * st[1];
        if constexpr (std::is_same_v<OS, C>) {
          if (st[0] == 1) {
            const C* v = detail::load_run<C>(src, n, st[1], dst);
            if (v != dst) std::copy_n(v, n, dst);  // src itself: disjoint from dst, or dst (check_map)
            continue;
          }
        }
        detail::store_run(detail::load_run<C>(src, n, st[1], ibuf[0].data()), dst, n, st[0]);
      }
    } else {
      for (index_t c0 = 0; c0 < count; c0 += detail::chunk) {
        const index_t n = std::min(detail::chunk, count - c0);
        OS* dst = out.data() + off[0] + c0 * st[0];
        C* o = obuf.data();
        if constexpr (std::is_same_v<OS, C>) {
          if (st[0] == 1) o = dst;
        }
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          const std::array<const C*, sizeof...(IS)> src{detail::load_run<C>(
              std::get<I>(inputs).data() + off[I + 1] + c0 * st[I + 1], n, st[I + 1],
              ibuf[I].data())...};
          if constexpr (detail::has_bulk<F, C, sizeof...(IS)>) {
            f.bulk(o, src[I]..., n);  // a vectorized kernel for this Compute type
          } else {
            // o is either disjoint from every input or the very same elements (check_map), so
            // element i is read before it is written: vectorizing is safe
PRECIS_IVDEP
            for (index_t i = 0; i < n; ++i) o[i] = f(src[I][i]...);
          }
        }(std::make_index_sequence<sizeof...(IS)>{});
        if (o != static_cast<void*>(dst)) detail::store_run(o, dst, n, st[0]);
      }
    }
  };
  const index_t total = out.size();
  // Dense operands of one shape (the common case, and all of a small tensor's cost): one run,
  // no broadcasting or stride bookkeeping.
  if (out.is_contiguous() && ((in.shape() == out.shape() && in.is_contiguous()) && ...)) {
    auto check_alias = [&](const auto& v) {
      // dense and of one shape: the same start and element size means the same elements
      const bool same = static_cast<const void*>(v.data()) == static_cast<const void*>(out.data()) &&
                        sizeof(*v.data()) == sizeof(OS);
      const auto* o0 = reinterpret_cast<const unsigned char*>(out.data());
      const auto* v0 = reinterpret_cast<const unsigned char*>(v.data());
      const auto n = static_cast<std::size_t>(total);
      const bool overlap = total > 0 && std::less<>{}(o0, v0 + n * sizeof(*v.data())) && std::less<>{}(v0, o0 + n * sizeof(OS));
      if (!same && overlap) {
        detail::check_map(op, out, in...);  // throws, naming the overlapping operands
      }
    };
    (check_alias(in), ...);
    std::array<index_t, N> ones;
    ones.fill(1);
    detail::parallel_ranges(total, detail::threads_for(total, index_t{1} << 15), [&](index_t begin, index_t end) {
      std::array<index_t, N> off;
      off.fill(begin);
      run(off, end - begin, ones);
    });
    return;
  }
  detail::check_map(op, out, in...);
  detail::strided_loop<N> loop;
  loop.shape = out.shape();
  loop.strides[0] = out.strides();
  std::size_t k = 1;
  ((loop.strides[k++] = in.broadcast_to(out.shape()).strides()), ...);
  loop.coalesce();
  // Short runs (a head's 16 features after a permute) with a conversion on the way: the runs of
  // a chunk are gathered in their storage formats, converted and computed as one block, and
  // scattered, so that each conversion and f run over a whole chunk rather than per run.
  constexpr bool converts = !std::is_same_v<OS, C> || (!std::is_same_v<detail::remove_const_t<IS>, C> || ...);
  if constexpr (converts) {
    if (loop.shape[loop.shape.rank() - 1] <= detail::chunk / 4) {
      detail::parallel_ranges(total, detail::threads_for(total, index_t{1} << 15), [&](index_t begin, index_t end) {
        detail::gathered_runs<N, detail::chunk> g;
        std::tuple<std::array<detail::remove_const_t<IS>, detail::chunk>...> raw;
        std::array<std::array<C, detail::chunk>, sizeof...(IS)> ibuf;
        std::array<C, detail::chunk> obuf;
        std::array<OS, detail::chunk> oraw;
        auto flush = [&] {
          const index_t n = g.size;
          [&]<std::size_t... I>(std::index_sequence<I...>) {
            (g.gather(std::get<I>(inputs).data(), I + 1, std::get<I>(raw).data()), ...);
            const std::array<const C*, sizeof...(IS)> src{detail::load_run<C>(std::get<I>(raw).data(), n, 1, ibuf[I].data())...};
            if constexpr (detail::has_bulk<F, C, sizeof...(IS)>) {
              f.bulk(obuf.data(), src[I]..., n);
            } else {
PRECIS_IVDEP
              for (index_t i = 0; i < n; ++i) obuf.data()[i] = f(src[I][i]...);
            }
          }(std::make_index_sequence<sizeof...(IS)>{});
          if constexpr (std::is_same_v<OS, C>) {
            g.scatter(obuf.data(), out.data());
          } else {
            detail::store_run(obuf.data(), oraw.data(), n, 1);
            g.scatter(oraw.data(), out.data());
          }
          g.clear();
        };
        loop.run(begin, end, [&](const std::array<index_t, N>& off, index_t count, const std::array<index_t, N>& st) {
          for (index_t c0 = 0; c0 < count;) {
            const index_t n = std::min(count - c0, detail::chunk - g.size);
            std::array<index_t, N> o = off;
            for (std::size_t q = 0; q < N; ++q) o[q] += c0 * st[q];
            g.add(o, n, st);
            c0 += n;
            if (g.size == detail::chunk) flush();
          }
        });
        if (g.size > 0) flush();
      });
      return;
    }
  }
  detail::parallel_ranges(total, detail::threads_for(total, index_t{1} << 15),
                          [&](index_t begin, index_t end) { loop.run(begin, end, run); });
}

/// A new tensor holding f applied element-wise (with broadcasting) to the inputs.
template <class OutS, class C, class F, class... IS, class... IC>
Tensor<OutS, C> map(const char* op, F f, const TensorView<IS, IC>&... in) {
  Shape s = Shape{};
  bool first = true;
  auto grow = [&](const Shape& x) {
    s = first ? x : broadcast_shapes(s, x, op);
    first = false;
  };
  (grow(in.shape()), ...);
  auto out = Tensor<OutS, C>::uninitialized(s);
  map_into<C>(op, out.view(), f, in...);
  return out;
}

namespace fn {

// The scalar functions behind the element-wise ops; found by ADL for multiprecision types.
struct add { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const { return a + b; } };
struct sub { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const { return a - b; } };
struct mul { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const { return a * b; } };
struct div { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const { return a / b; } };
struct neg { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { return -a; } };
struct abs { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::abs; return abs(a); } };
struct exp {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::exp; return exp(a); }
  /// float arrays: the vectorized kernel (detail/vexp.hpp)
  static void bulk(float* o, const float* a, index_t n) { detail::exp_floats(o, a, n); }
};
struct log { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::log; return log(a); } };
struct sqrt { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::sqrt; return sqrt(a); } };
struct rsqrt {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::sqrt; return T(1) / sqrt(a); }
};
struct tanh { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::tanh; return tanh(a); } };
/// 1 / (1 + e^-x): e^-x overflows to +inf for very negative x, giving the correct limit 0.
struct sigmoid {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { using std::exp; return T(1) / (T(1) + exp(-a)); }
  static void bulk(float* o, const float* a, index_t n) {
    for (index_t i = 0; i < n; ++i) o[i] = -a[i];
    detail::exp_floats(o, o, n);
    for (index_t i = 0; i < n; ++i) o[i] = 1.0f / (1.0f + o[i]);
  }
};
/// max(x, 0), propagating NaN.
struct relu { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const { return a < T(0) ? T(0) : a; } };
/// The exact GELU, x Φ(x) = x (1 + erf(x / √2)) / 2 (Hendrycks & Gimpel 2016).
struct gelu {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a) const {
    using std::erf;
    using std::sqrt;
    return T(0.5) * a * (T(1) + T(erf(a / sqrt(T(2)))));
  }
};
struct pow { template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const { using std::pow; return pow(a, b); } };
/// Larger of the two, NaN if either is NaN (as torch.maximum).
struct max {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? b : a;
  }
};
struct min {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& a, const T& b) const {
    if (a != a) return a;
    if (b != b) return b;
    return b < a ? b : a;
  }
};
/// cond != 0 ? a : b.
struct where {
  template <class T> PRECIS_HOST_DEVICE T operator()(const T& c, const T& a, const T& b) const { return c != T(0) ? a : b; }
};

}  // namespace fn

namespace detail {
template <class A, class B>
using binary_result_t = Tensor<promote_t<storage_of<A>, storage_of<B>>,
                               promote_t<compute_of<A>, compute_of<B>>>;
}  // namespace detail

#define PRECIS_UNARY_OP(name)                                                               \
  template <tensor_like A>                                                                  \
  Tensor<storage_of<A>, compute_of<A>> name(const A& a) {                                   \
    return map<storage_of<A>, compute_of<A>>("precis::" #name, fn::name{}, as_view(a));    \
  }                                                                                         \
  template <tensor_like A, tensor_like Out>                                                 \
  void name(const A& a, Out&& out) {                                                        \
    map_into<compute_of<Out>>("precis::" #name, as_mutable_view(out), fn::name{}, as_view(a)); \
  }

#define PRECIS_BINARY_OP(name)                                                                  \
  template <tensor_like A, tensor_like B>                                                       \
  detail::binary_result_t<A, B> name(const A& a, const B& b) {                                  \
    using R = detail::binary_result_t<A, B>;                                                    \
    return map<storage_of<R>, compute_of<R>>("precis::" #name, fn::name{}, as_view(a), as_view(b)); \
  }                                                                                             \
  template <tensor_like A, tensor_like B, tensor_like Out>                                      \
  void name(const A& a, const B& b, Out&& out) {                                                \
    map_into<compute_of<Out>>("precis::" #name, as_mutable_view(out), fn::name{}, as_view(a), \
                              as_view(b));                                                      \
  }

PRECIS_UNARY_OP(neg)
PRECIS_UNARY_OP(abs)
PRECIS_UNARY_OP(exp)
PRECIS_UNARY_OP(log)
PRECIS_UNARY_OP(sqrt)
PRECIS_UNARY_OP(rsqrt)
PRECIS_UNARY_OP(tanh)
PRECIS_UNARY_OP(sigmoid)
PRECIS_UNARY_OP(relu)
PRECIS_UNARY_OP(gelu)
PRECIS_BINARY_OP(add)
PRECIS_BINARY_OP(sub)
PRECIS_BINARY_OP(mul)
PRECIS_BINARY_OP(div)
PRECIS_BINARY_OP(pow)
PRECIS_BINARY_OP(max)
PRECIS_BINARY_OP(min)

#undef PRECIS_UNARY_OP
#undef PRECIS_BINARY_OP

/// cond != 0 ? a : b element-wise, with broadcasting over all three.
template <tensor_like Cond, tensor_like A, tensor_like B>
detail::binary_result_t<A, B> where(const Cond& cond, const A& a, const B& b) {
  using R = detail::binary_result_t<A, B>;
  return map<storage_of<R>, compute_of<R>>("precis::where", fn::where{}, as_view(cond),
                                           as_view(a), as_view(b));
}

template <tensor_like A, tensor_like B>
auto operator+(const A& a, const B& b) { return add(a, b); }
template <tensor_like A, tensor_like B>
auto operator-(const A& a, const B& b) { return sub(a, b); }
template <tensor_like A, tensor_like B>
auto operator*(const A& a, const B& b) { return mul(a, b); }
template <tensor_like A, tensor_like B>
auto operator/(const A& a, const B& b) { return div(a, b); }
template <tensor_like A>
auto operator-(const A& a) { return neg(a); }

}  // namespace precis
