// Reductions over one axis or over all elements, with the accumulator type and the summation
// algorithm named at the call:
//   precis::sum<double>(x, 1, precis::summation::compensated)
// Error bounds (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., ch. 4), u the
// accumulator's unit roundoff, S = sum |x_i|:
//   recursive    |E| <= gamma_{n-1} S
//   pairwise     |E| <= gamma_{ceil(log2 n)} S
//   compensated  |E| <= (2u + O(n u^2)) S   (Kahan)
// A wider accumulator is the recursive algorithm with a wider Acc.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "precis/tensor/elementwise.hpp"

namespace precis {

enum class summation { recursive, pairwise, compensated };

constexpr const char* to_string(summation s) noexcept {
  switch (s) {
    case summation::recursive: return "recursive";
    case summation::pairwise: return "pairwise";
    case summation::compensated: return "compensated";
  }
  return "?";
}

namespace detail {

/// Recursive summation s = (((x1 + x2) + x3) + ...).
template <class Acc>
struct recursive_sum {
  Acc s{0};
  void push(const Acc& x) { s = s + x; }
  Acc result() const { return s; }
};

/// Kahan's compensated summation. Written without reassociation-sensitive shortcuts: it relies
/// on the compiler keeping IEEE semantics (no -ffast-math).
template <class Acc>
struct compensated_sum {
  Acc s{0}, c{0};
  void push(const Acc& x) {
    const Acc y = x - c;
    const Acc t = s + y;
    c = (t - s) - y;
    s = t;
  }
  Acc result() const { return s; }
};

/// Pairwise summation, streamed: a binary counter of partial sums, where level b holds the sum
/// of a complete block of 2^b consecutive elements. Each element takes part in at most
/// ceil(log2 n) additions, the bound of the recursive halving algorithm.
template <class Acc>
struct pairwise_sum {
  // level[b] is read only after a push wrote it (while bit b of count is set): no zeroing, which
  // cost as much as a short row's sum (a layer norm's 64 features)
  std::array<Acc, 64> level;
  std::uint64_t count = 0;
  void push(Acc v) {
    int b = 0;
    for (std::uint64_t c = count; c & 1; c >>= 1, ++b) v = level[static_cast<std::size_t>(b)] + v;
    level[static_cast<std::size_t>(b)] = std::move(v);
    ++count;
  }
  /// Eight elements at once when count is a multiple of 8: the same tree as eight push() calls.
  void push8(const Acc* x) { push_block(((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7])), 3); }
  /// The next 2^b elements at once (count a multiple of 2^b), v their sum added as push() calls
  /// would add them: the balanced tree of the block.
  void push_block(Acc v, int b) {
    const std::uint64_t n = std::uint64_t{1} << b;
    for (std::uint64_t c = count >> b; c & 1; c >>= 1, ++b) v = level[static_cast<std::size_t>(b)] + v;
    level[static_cast<std::size_t>(b)] = std::move(v);
    count += n;
  }
  /// Combines the remaining blocks smallest first.
  Acc result() const {
    Acc s{};  // zero (value-initialized: also an aggregate of 16-bit lanes, whose int constructor is explicit)
    bool any = false;
    for (int b = 0; b < 64 && (count >> b) != 0; ++b) {
      if ((count >> b) & 1) {
        s = any ? level[static_cast<std::size_t>(b)] + s : level[static_cast<std::size_t>(b)];
        any = true;
      }
    }
    return s;
  }
};

#if PRECIS_X86_SIMD
/// The sum of the 64 floats at x as pairwise_sum adds a block of 64 (the balanced tree: push8's
/// blocks of eight, ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)), then pairs of blocks), in
/// AVX2 lanes: a horizontal add adds neighbours, and at every level the neighbours are the pairs
/// the tree adds, so the sum is pairwise_sum's bit for bit (an addition commuted at most).
PRECIS_TARGET_AVX2 inline float block64_sum_avx2(const float* x) {
  __m256 p[4];  // neighbours' sums, two blocks a vector: [x0+x1, x2+x3 of both | x4+x5, x6+x7 of both]
  for (int k = 0; k < 4; ++k) p[k] = _mm256_hadd_ps(_mm256_loadu_ps(x + 16 * k), _mm256_loadu_ps(x + 16 * k + 8));
  // blocks 0-3: [(x0+x1)+(x2+x3) of each | (x4+x5)+(x6+x7) of each]; then blocks 4-7
  const __m256 lo = _mm256_hadd_ps(p[0], p[1]), hi = _mm256_hadd_ps(p[2], p[3]);
  // the eight blocks' sums s0..s7, then [s0+s1, s2+s3, .. | s4+s5, s6+s7, ..], then the halves
  const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
  const __m256 q = _mm256_hadd_ps(s, s);
  const __m256 h = _mm256_hadd_ps(q, q);  // [(s0+s1)+(s2+s3) .. | (s4+s5)+(s6+s7) ..]
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
#endif

/// Feeds n Acc values to a summer. Pairwise float sums take whole blocks of 64 at once in AVX2
/// lanes where the CPU has them (block64_sum_avx2: the same sums, with a 64th of the counter's
/// bookkeeping, which is most of a short row's cost).
template <class Summer, class Acc>
void push_all(Summer& sm, const Acc* x, index_t n) {
  index_t i = 0;
  if constexpr (requires { sm.push8(x); }) {
    while (i < n && (sm.count & 7) != 0) sm.push(x[i++]);
#if PRECIS_X86_SIMD
    if constexpr (std::is_same_v<Acc, float>) {
      if (n - i >= 64 && cpu_has_avx2_f16c()) {
        for (; i + 8 <= n && (sm.count & 63) != 0; i += 8) sm.push8(x + i);
        for (; i + 64 <= n; i += 64) sm.push_block(block64_sum_avx2(x + i), 6);
      }
    }
#endif
    for (; i + 8 <= n; i += 8) sm.push8(x + i);
  }
  for (; i < n; ++i) sm.push(x[i]);
}

/// Sum of the n values (stride st) at p, loaded into Acc, with algorithm `alg`; `f` maps each
/// loaded value first (identity for a plain sum).
template <class Acc, class S, class F>
Acc sum_fiber(const S* p, index_t n, index_t st, summation alg, F f) {
  std::array<Acc, chunk> buf;
  // asked here, not inside the generic lambda below, where nvcc's front end answers it wrongly
  constexpr bool has_bulk = requires(const F& g, Acc* b, index_t k) { g.bulk(b, k); };
  auto run = [&](auto& sm) {
    for (index_t c0 = 0; c0 < n; c0 += chunk) {
      const index_t m = std::min(chunk, n - c0);
      const Acc* x = load_run<Acc>(p + c0 * st, m, st, buf.data());
      if constexpr (!std::is_same_v<F, std::identity>) {
        if (x != buf.data()) std::copy_n(x, m, buf.data());
        if constexpr (has_bulk) {
          f.bulk(buf.data(), m);
        } else {
          for (index_t i = 0; i < m; ++i) buf[static_cast<std::size_t>(i)] = f(buf[static_cast<std::size_t>(i)]);
        }
        x = buf.data();
      }
      push_all(sm, x, m);
    }
    return sm.result();
  };
  switch (alg) {
    case summation::recursive: { recursive_sum<Acc> sm; return run(sm); }
    case summation::pairwise: { pairwise_sum<Acc> sm; return run(sm); }
    case summation::compensated: { compensated_sum<Acc> sm; return run(sm); }
  }
  throw invalid_argument("precis::sum: unknown summation algorithm");
}

/// True for finite values; works for any arithmetic type (inf - inf and NaN - NaN are NaN).
template <class T>
bool is_finite(const T& x) { return x - x == T(0); }

/// max (or min) of n values, NaN if any is NaN.
template <class Acc, class S, bool Max>
Acc extreme_fiber(const S* p, index_t n, index_t st) {
  if constexpr (std::is_same_v<Acc, S> && std::is_arithmetic_v<S>) {
    if (st == 1 && n >= 16) {
      // eight independent lanes and a NaN flag: branch-free, so the compiler vectorizes it
      S lane[8];
      bool nan = false;
      for (int j = 0; j < 8; ++j) lane[j] = p[j];
      index_t i = 8;
      for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) {
          const S x = p[i + j];
          nan |= x != x;
          lane[j] = (Max ? lane[j] < x : x < lane[j]) ? x : lane[j];
        }
      }
      for (int j = 0; j < 8; ++j) nan |= lane[j] != lane[j];
      if (nan) return std::numeric_limits<S>::quiet_NaN();
      S m = lane[0];
      for (int j = 1; j < 8; ++j) m = (Max ? m < lane[j] : lane[j] < m) ? lane[j] : m;
      for (; i < n; ++i) {
        const S x = p[i];
        if (x != x) return x;
        if (Max ? m < x : x < m) m = x;
      }
      return m;
    }
  }
  Acc m = load<Acc>(p[0]);
  for (index_t i = 1; i < n && m == m; ++i) {
    const Acc x = load<Acc>(p[i * st]);
    if (x != x) return x;
    if (Max ? m < x : x < m) m = x;
  }
  return m;
}

/// Calls fn(in_ptr, out_ptr, out_stride_along_axis) for every fiber along `axis`; the output
/// view has either the input's shape (same_shape) or the shape with `axis` removed.
template <class S, class C, class OS, class OC, class Fn>
void for_each_fiber(const TensorView<const S, C>& x, int axis, const TensorView<OS, OC>& out,
                    bool same_shape, Fn fn) {
  strided_loop<2> loop;
  loop.shape = x.shape().erased(axis);
  loop.strides[0] = x.strides().erased(axis);
  loop.strides[1] = same_shape ? out.strides().erased(axis) : out.strides();
  const index_t out_axis_stride = same_shape ? out.strides()[axis] : 0;
  loop.coalesce();
  const index_t fibers = loop.shape.numel();
  const index_t work = fibers * x.shape()[axis];
  parallel_ranges(fibers, fibers > 1 ? threads_for(work, index_t{1} << 15) : 1,
                  [&](index_t b, index_t e) {
                    loop.run(b, e, [&](const std::array<index_t, 2>& off, index_t count,
                                       const std::array<index_t, 2>& st) {
                      for (index_t i = 0; i < count; ++i)
                        fn(x.data() + off[0] + i * st[0], out.data() + off[1] + i * st[1],
                           out_axis_stride);
                    });
                  });
}

/// Reduces every fiber along `axis` of x into out (x's shape with `axis` removed, any storage).
template <class Acc, class X, class OS, class OC, class Fiber>
void reduce_axis_into(const char* op, const X& xx, int axis, const TensorView<OS, OC>& out, Fiber fiber) {
  const auto x = as_view(xx);
  const int a = normalize_axis(axis, x.rank(), op);
  if (x.shape()[a] == 0) {
    throw shape_error(std::string(op) + ": axis " + std::to_string(a) + " of shape " +
                      x.shape().str() + " is empty; expected at least one element to reduce");
  }
  if (!(out.shape() == x.shape().erased(a))) {
    throw shape_error(std::string(op) + ": output of shape " + out.shape().str() + " for a reduction of " +
                      x.shape().str() + " along axis " + std::to_string(a) + "; expected " + x.shape().erased(a).str());
  }
  const index_t n = x.shape()[a], st = x.strides()[a];
  for_each_fiber(x, a, out, false, [&](const auto* p, OS* o, index_t) {
    *o = store<OS>(fiber(p, n, st));
  });
}

template <class OutS, class Acc, class X, class Fiber>
auto reduce_axis(const char* op, const X& xx, int axis, Fiber fiber) {
  const auto x = as_view(xx);
  const int a = normalize_axis(axis, x.rank(), op);
  using O = std::conditional_t<std::is_void_v<OutS>, storage_of<X>, OutS>;
  auto out = Tensor<O, default_compute_t<O>>::uninitialized(x.shape().erased(a));
  reduce_axis_into<Acc>(op, x, a, out.view(), fiber);
  return out;
}

/// Reduces all of x into the single element *out. A strided x is first copied densely.
template <class Acc, class X, class O, class Fiber>
void reduce_all_into(const char* op, const X& xx, O* out, Fiber fiber) {
  const auto x = as_view(xx);
  if (x.empty()) {
    throw shape_error(std::string(op) + ": tensor of shape " + x.shape().str() +
                      " is empty; expected at least one element to reduce");
  }
  if (x.is_contiguous()) {
    *out = store<O>(fiber(x.data(), x.size(), index_t{1}));
  } else {
    const auto dense = to_tensor(x);
    *out = store<O>(fiber(dense.data(), dense.size(), index_t{1}));
  }
}

template <class OutS, class Acc, class X, class Fiber>
auto reduce_all(const char* op, const X& xx, Fiber fiber) {
  using O = std::conditional_t<std::is_void_v<OutS>, storage_of<X>, OutS>;
  Tensor<O, default_compute_t<O>> out(Shape{});
  reduce_all_into<Acc>(op, xx, out.data(), fiber);
  return out;
}

/// 2^k with k chosen so that max_abs * 2^k is near 1, limited to powers Acc can hold.
template <class Acc>
Acc norm_scale(const Acc& max_abs) {
  int e = 0;
  (void)std::frexp(static_cast<double>(load<double>(max_abs)), &e);
  const int lo = format_traits<Acc>::emin, hi = format_traits<Acc>::emax;
  const int k = std::min(std::max(-e, lo), hi);
  return load<Acc>(std::ldexp(1.0, k));
}

/// Euclidean norm, scaled by a power of two (exact) so the squares neither overflow nor
/// underflow (as LAPACK's nrm2).
template <class Acc, class S>
Acc norm2_fiber(const S* p, index_t n, index_t st, summation alg) {
  Acc amax{0};
  for (index_t i = 0; i < n; ++i) {
    using std::abs;
    const Acc v = abs(load<Acc>(p[i * st]));
    if (v != v) return v;
    if (amax < v) amax = v;
  }
  if (amax == Acc(0) || !is_finite(amax)) return amax;
  const Acc scale = norm_scale(amax);
  using std::sqrt;
  const Acc ssq = sum_fiber<Acc>(p, n, st, alg, [&](const Acc& v) { const Acc y = v * scale; return y * y; });
  return sqrt(ssq) / scale;
}

/// v -> exp(v - m), with the vectorized exp on float chunks.
template <class Acc>
struct exp_shifted {
  Acc m;
  Acc operator()(const Acc& v) const {
    using std::exp;
    return exp(v - m);
  }
  void bulk(Acc* x, index_t n) const {
    if constexpr (std::is_same_v<Acc, float>) {
      for (index_t i = 0; i < n; ++i) x[i] = x[i] - m;
      exp_floats(x, x, n);
    } else {
      for (index_t i = 0; i < n; ++i) x[i] = (*this)(x[i]);
    }
  }
};

/// log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the maximum, in Acc.
template <class Acc, class S>
Acc logsumexp_fiber(const S* p, index_t n, index_t st, summation alg) {
  const Acc m = extreme_fiber<Acc, S, true>(p, n, st);
  if (!is_finite(m)) return m;  // NaN, +inf, or -inf (all elements -inf)
  using std::log;
  return m + log(sum_fiber<Acc>(p, n, st, alg, exp_shifted<Acc>{m}));
}

}  // namespace detail

/// Sum along `axis` (Out: the result's storage; void keeps the input's).
template <class Acc, class Out = void, tensor_like X>
auto sum(const X& x, int axis, summation alg = summation::pairwise) {
  return detail::reduce_axis<Out, Acc>("precis::sum", x, axis, [alg](const auto* p, index_t n, index_t st) {
    return detail::sum_fiber<Acc>(p, n, st, alg, std::identity{});
  });
}
/// Sum of all elements (a rank-0 tensor).
template <class Acc, class Out = void, tensor_like X>
auto sum(const X& x, summation alg = summation::pairwise) {
  return detail::reduce_all<Out, Acc>("precis::sum", x, [alg](const auto* p, index_t n, index_t st) {
    return detail::sum_fiber<Acc>(p, n, st, alg, std::identity{});
  });
}

template <class Acc, class Out = void, tensor_like X>
auto mean(const X& x, int axis, summation alg = summation::pairwise) {
  return detail::reduce_axis<Out, Acc>("precis::mean", x, axis, [alg](const auto* p, index_t n, index_t st) {
    return detail::sum_fiber<Acc>(p, n, st, alg, std::identity{}) / Acc(static_cast<double>(n));
  });
}
template <class Acc, class Out = void, tensor_like X>
auto mean(const X& x, summation alg = summation::pairwise) {
  return detail::reduce_all<Out, Acc>("precis::mean", x, [alg](const auto* p, index_t n, index_t st) {
    return detail::sum_fiber<Acc>(p, n, st, alg, std::identity{}) / Acc(static_cast<double>(n));
  });
}

/// Largest element along `axis` (NaN if any is NaN). Exact, so no accumulator is named.
template <tensor_like X>
auto max(const X& x, int axis) {
  using C = compute_of<X>;
  return detail::reduce_axis<void, C>("precis::max", x, axis, [](const auto* p, index_t n, index_t st) {
    return detail::extreme_fiber<C, storage_of<X>, true>(p, n, st);
  });
}
template <tensor_like X>
auto min(const X& x, int axis) {
  using C = compute_of<X>;
  return detail::reduce_axis<void, C>("precis::min", x, axis, [](const auto* p, index_t n, index_t st) {
    return detail::extreme_fiber<C, storage_of<X>, false>(p, n, st);
  });
}
template <tensor_like X>
auto max(const X& x) {
  using C = compute_of<X>;
  return detail::reduce_all<void, C>("precis::max", x, [](const auto* p, index_t n, index_t st) {
    return detail::extreme_fiber<C, storage_of<X>, true>(p, n, st);
  });
}
template <tensor_like X>
auto min(const X& x) {
  using C = compute_of<X>;
  return detail::reduce_all<void, C>("precis::min", x, [](const auto* p, index_t n, index_t st) {
    return detail::extreme_fiber<C, storage_of<X>, false>(p, n, st);
  });
}

/// Euclidean norm along `axis`, or of all elements.
template <class Acc, class Out = void, tensor_like X>
auto norm2(const X& x, int axis, summation alg = summation::pairwise) {
  return detail::reduce_axis<Out, Acc>("precis::norm2", x, axis, [alg](const auto* p, index_t n, index_t st) {
    return detail::norm2_fiber<Acc>(p, n, st, alg);
  });
}
template <class Acc, class Out = void, tensor_like X>
auto norm2(const X& x, summation alg = summation::pairwise) {
  return detail::reduce_all<Out, Acc>("precis::norm2", x, [alg](const auto* p, index_t n, index_t st) {
    return detail::norm2_fiber<Acc>(p, n, st, alg);
  });
}

/// log(sum(exp(x))) along `axis`, stable for any range of inputs.
template <class Acc, class Out = void, tensor_like X>
auto logsumexp(const X& x, int axis, summation alg = summation::pairwise) {
  return detail::reduce_axis<Out, Acc>("precis::logsumexp", x, axis, [alg](const auto* p, index_t n, index_t st) {
    return detail::logsumexp_fiber<Acc>(p, n, st, alg);
  });
}

namespace detail {

/// softmax (Log = false) or log_softmax of x along `axis` into out (x's shape, any storage).
template <class Acc, bool Log, class X, class OS, class OC>
void softmax_into(const char* op, const X& xx, int axis, const TensorView<OS, OC>& out, summation alg) {
  const auto x = as_view(xx);
  const int a = normalize_axis(axis, x.rank(), op);
  using S = storage_of<X>;
  if (!(out.shape() == x.shape())) {
    throw shape_error(std::string(op) + ": output of shape " + out.shape().str() + " for an input of shape " +
                      x.shape().str() + "; expected the same shape");
  }
  const index_t n = x.shape()[a], st = x.strides()[a];
  if (n == 0) return;
  for_each_fiber(x, a, out, true, [&](const S* p, OS* o, index_t ost) {
    using std::log;
    const Acc m = extreme_fiber<Acc, S, true>(p, n, st);
    const exp_shifted<Acc> e{m};
    const Acc s = sum_fiber<Acc>(p, n, st, alg, e);
    const Acc ls = log(s);
    std::array<Acc, chunk> buf;
    for (index_t c0 = 0; c0 < n; c0 += chunk) {
      const index_t len = std::min(chunk, n - c0);
      const Acc* v = load_run<Acc>(p + c0 * st, len, st, buf.data());
      if (v != buf.data()) std::copy_n(v, len, buf.data());
      if constexpr (Log) {
        for (index_t i = 0; i < len; ++i) buf[static_cast<std::size_t>(i)] = (buf[static_cast<std::size_t>(i)] - m) - ls;
      } else {
        e.bulk(buf.data(), len);
        for (index_t i = 0; i < len; ++i) buf[static_cast<std::size_t>(i)] = buf[static_cast<std::size_t>(i)] / s;
      }
      store_run(buf.data(), o + c0 * ost, len, ost);
    }
  });
}

template <class Acc, bool Log, class X>
auto softmax_impl(const char* op, const X& xx, int axis, summation alg) {
  auto out = Tensor<storage_of<X>, compute_of<X>>::uninitialized(as_view(xx).shape());
  softmax_into<Acc, Log>(op, xx, axis, out.view(), alg);
  return out;
}

}  // namespace detail

/// exp(x - max) / sum(exp(x - max)) along `axis`, sums in Acc.
template <class Acc, tensor_like X>
auto softmax(const X& x, int axis, summation alg = summation::pairwise) {
  return detail::softmax_impl<Acc, false>("precis::softmax", x, axis, alg);
}
/// x - logsumexp(x) along `axis`.
template <class Acc, tensor_like X>
auto log_softmax(const X& x, int axis, summation alg = summation::pairwise) {
  return detail::softmax_impl<Acc, true>("precis::log_softmax", x, axis, alg);
}

}  // namespace precis
