// Reductions along an axis and other row and index kernels on the device, as the op layer's
// definitions compute them through op::cpu (reduce, softmax, softmax_sums,
// layer_norm_forward / backward, attention_probabilities / attention_score_gradients, select /
// add_selected, scatter_add_rows): sum, mean, the Euclidean norm (scaled by a power of two so
// the squares neither overflow nor underflow), logsumexp (shifted by the maximum), softmax and
// log_softmax and softmax's backward sums, layer normalization's rows, attention's
// probabilities and score gradients, max/min by selection, and embedding's scatter-add; each
// fiber's sums in the accumulator Acc (double, float, or fp16 / bf16 with every operation
// rounded into it: acc_t, as the host's 16-bit arithmetic) and each output rounded once into its
// format. Include only from .cu translation units.
//
//   precis::cuda::reduce_fibers<float, precis::op::reduction::sum>(stream, "precis::sum", x, false, 1, y);
//   precis::cuda::softmax_fibers<float, false>(stream, "precis::softmax", x, 1, y);
//
// Every fiber is one block's: thread t takes the elements t, t + threads, t + 2 threads, ... in
// order, the 32 lanes of each warp combine by a butterfly, then the warps' results are combined
// in warp order. The order depends only on the shapes, so a result has the same bits on every
// run; a sum of m terms goes through at most ceil(m / threads) + 5 + 7 additions (gamma of that
// times the sum of magnitudes; Higham 2002, 4.2), where the host sums pairwise. A reduction of a
// few long fibers (fewer than 128 of at least 2^16 elements: a whole tensor's sum, a loss over
// everything) splits each into ranges of about 16384 elements, a block per range, and combines
// the ranges' results by a block per fiber (fiber_detail::split; the norm and logsumexp take two
// such passes, the largest magnitude or value first), so it is spread over the GPU rather than
// one block's work. Inputs are dense (the context makes a strided one dense first); outputs are
// dense. A product the host rounds before it is added is written with acc_math::mul_rn /
// add_rn, so nvcc does not fuse the two into one fused multiply-add (-fmad=true, its default).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/elementwise.cuh"
#include "precis/ops/cpu.hpp"

namespace precis::cuda {

namespace fiber_detail {

/// Fibers of a dense tensor around one axis: fiber f starts at (f / inner) len inner + f % inner
/// and its elements are `inner` apart; fibers are numbered in the row-major order of the other
/// axes (so a dense output of the shape without the axis has fiber f at f).
struct layout {
  index_t fibers = 1, len = 1, inner = 1;
};

__device__ inline index_t start(const layout& l, index_t f) { return (f / l.inner) * l.len * l.inner + f % l.inner; }

struct add_op {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const {
    return a + b;
  }
};
/// The larger; a NaN wins (it propagates, as in the host's maximum).
struct max_op {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const {
    return b > a || b != b ? b : a;
  }
};

/// v combined over the block by op, the same value on every thread: a butterfly within each
/// warp, then the warps' results in warp order. shared: 32 elements; blockDim.x a multiple of 32.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* shared) {
  for (int w = 16; w > 0; w /= 2) v = op(v, acc_math::shfl_xor(v, w));
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  __syncthreads();  // every thread has read the previous call's results
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = shared[0];
  for (int i = 1; i < static_cast<int>(blockDim.x / 32); ++i) r = op(r, shared[i]);
  return r;
}

/// The fiber's sum, maximum, and sum of exp(x - m), in the accumulator register type V (acc_t).
template <class V>
__device__ V fiber_sum(const auto* p, const layout& l, V* shared) {
  V s = 0;
  for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) s += ew_detail::load<V>(p + k * l.inner);
  return block_reduce(s, add_op{}, shared);
}
template <class V>
__device__ V fiber_max(const auto* p, const layout& l, V* shared) {
  V m = -V(INFINITY);
  for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) m = max_op{}(m, ew_detail::load<V>(p + k * l.inner));
  return block_reduce(m, max_op{}, shared);
}
template <class V>
__device__ V fiber_exp_sum(const auto* p, const layout& l, V m, V* shared) {
  V s = 0;
  for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) s += acc_math::exp(V(ew_detail::load<V>(p + k * l.inner) - m));
  return block_reduce(s, add_op{}, shared);
}

template <class Acc, op::reduction R, class X, class O>
__global__ void reduce_kernel(const X* x, layout l, O* y) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  for (index_t f = blockIdx.x; f < l.fibers; f += gridDim.x) {
    const X* p = x + start(l, f);
    V r;
    if constexpr (R == op::reduction::sum) {
      r = fiber_sum<V>(p, l, shared);
    } else if constexpr (R == op::reduction::mean) {
      r = V(fiber_sum<V>(p, l, shared) / V(l.len));
    } else if constexpr (R == op::reduction::logsumexp) {
      const V m = fiber_max<V>(p, l, shared);
      const bool finite = m == m && m != V(INFINITY) && m != -V(INFINITY);
      // NaN, +inf, or -inf (every element -inf): the maximum is the result (the block agrees)
      r = finite ? V(m + acc_math::log(fiber_exp_sum<V>(p, l, m, shared))) : m;
    } else {  // the norm: the largest magnitude, then the squares scaled by 2^k near 1 / it
      V amax = 0;
      for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) amax = max_op{}(amax, V(acc_math::fabs(ew_detail::load<V>(p + k * l.inner))));
      amax = block_reduce(amax, max_op{}, shared);
      if (amax == V(0) || amax != amax || amax == V(INFINITY)) {
        r = amax;
      } else {
        int e = 0;
        (void)::frexp(static_cast<double>(amax), &e);
        constexpr int lo = format_traits<Acc>::emin, hi = format_traits<Acc>::emax;
        const V scale = V(::ldexp(1.0, ::min(::max(-e, lo), hi)));
        V s = 0;
        for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) {
          const V v = V(ew_detail::load<V>(p + k * l.inner) * scale);
          s = acc_math::add_rn(s, acc_math::mul_rn(v, v));
        }
        r = V(acc_math::sqrt(block_reduce(s, add_op{}, shared)) / scale);
      }
    }
    if (threadIdx.x == 0) ew_detail::store(y + f, r);
  }
}

template <class Acc, bool Log, class X, class O>
__global__ void softmax_kernel(const X* x, layout l, O* y) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  for (index_t f = blockIdx.x; f < l.fibers; f += gridDim.x) {
    const index_t s0 = start(l, f);
    const X* p = x + s0;
    const V m = fiber_max<V>(p, l, shared);
    const V s = fiber_exp_sum<V>(p, l, m, shared);
    const V ls = acc_math::log(s);
    for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) {
      const V v = ew_detail::load<V>(p + k * l.inner);
      ew_detail::store(y + s0 + k * l.inner, Log ? V(V(v - m) - ls) : V(acc_math::exp(V(v - m)) / s));
    }
  }
}

template <class Acc, bool Log, class G, class O>
__global__ void softmax_sums_kernel(const G* g, const O* y, layout l, Acc* out) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  for (index_t f = blockIdx.x; f < l.fibers; f += gridDim.x) {
    const index_t s0 = start(l, f);
    V a = 0;
    for (index_t k = threadIdx.x; k < l.len; k += blockDim.x) {
      const V gv = ew_detail::load<V>(g + s0 + k * l.inner);
      a = acc_math::add_rn(a, Log ? gv : acc_math::mul_rn(gv, ew_detail::load<V>(y + s0 + k * l.inner)));
    }
    a = block_reduce(a, add_op{}, shared);
    if (threadIdx.x == 0) ew_detail::store(out + f, a);
  }
}

/// Layer normalization's forward, a block per row of d: the mean and the biased variance in
/// Acc, rstd = 1 / sqrt(var + eps) in R (kept with the mean in stats), y in R rounded once.
template <class Acc, class R, class X, class G, class B, class O>
__global__ void layer_norm_forward_kernel(const X* x, index_t rows, index_t d, const G* gamma, index_t gs, const B* beta, index_t bs,
                                          double eps, Acc* stats, O* y) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  const layout l{1, d, 1};
  for (index_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const X* r = x + i * d;
    const V mu = V(fiber_sum<V>(r, l, shared) / V(d));
    V v = 0;
    for (index_t j = threadIdx.x; j < d; j += blockDim.x) {
      const V c = V(ew_detail::load<V>(r + j) - mu);
      v = acc_math::add_rn(v, acc_math::mul_rn(c, c));
    }
    const V var = V(block_reduce(v, add_op{}, shared) / V(d));
    const R rstd = R(1) / R(acc_math::sqrt(R(R(var) + R(eps))));
    if (threadIdx.x == 0) {
      ew_detail::store(stats + 2 * i, mu);
      ew_detail::store(stats + 2 * i + 1, V(rstd));
    }
    const R m = R(mu), rs = R(V(rstd));
    for (index_t j = threadIdx.x; j < d; j += blockDim.x) {
      const R xv = ew_detail::load<R>(r + j);
      ew_detail::store(y + i * d + j, acc_math::add_rn(acc_math::mul_rn(R(R(xv - m) * rs), ew_detail::load<R>(gamma + j * gs)),
                                                       ew_detail::load<R>(beta + j * bs)));
    }
  }
}

/// Layer normalization's input gradient, a block per row: dxhat = gy gamma, the row's sums of
/// dxhat and dxhat xhat in Acc, gx = rstd (dxhat - s1 / d - xhat s2 / d) in R, assigned when
/// `fresh`, added otherwise.
template <class Acc, class R, class X, class GY, class G, class GX>
__global__ void layer_norm_backward_rows(const X* x, const GY* gy, index_t rows, index_t d, const G* gamma, index_t gs, const Acc* stats,
                                         GX* gx, bool fresh) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  for (index_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const R mu = ew_detail::load<R>(stats + 2 * i), rstd = ew_detail::load<R>(stats + 2 * i + 1);
    V m1 = 0, m2 = 0;
    for (index_t j = threadIdx.x; j < d; j += blockDim.x) {
      const R xh = R(R(ew_detail::load<R>(x + i * d + j) - mu) * rstd);
      const R dxh = acc_math::mul_rn(ew_detail::load<R>(gy + i * d + j), ew_detail::load<R>(gamma + j * gs));
      m1 += V(dxh);
      m2 = acc_math::add_rn(m2, V(acc_math::mul_rn(dxh, xh)));
    }
    const R s1 = R(block_reduce(m1, add_op{}, shared));
    const R s2 = R(block_reduce(m2, add_op{}, shared));
    const R inv_d = R(1) / static_cast<R>(d);
    for (index_t j = threadIdx.x; j < d; j += blockDim.x) {
      const R xh = R(R(ew_detail::load<R>(x + i * d + j) - mu) * rstd);
      const R dxh = acc_math::mul_rn(ew_detail::load<R>(gy + i * d + j), ew_detail::load<R>(gamma + j * gs));
      const R dx = acc_math::mul_rn(
          rstd, acc_math::sub_rn(acc_math::sub_rn(dxh, acc_math::mul_rn(inv_d, s1)), acc_math::mul_rn(R(xh * inv_d), s2)));
      GX* out = gx + i * d + j;
      ew_detail::store(out, fresh ? dx : acc_math::add_rn(ew_detail::load<R>(out), dx));
    }
  }
}

/// Layer normalization's parameter gradients: a thread per column j, dgamma[j] += gy xhat and
/// dbeta[j] += gy over the rows in order, in Acc.
template <class Acc, class R, class X, class GY>
__global__ void layer_norm_backward_columns(const X* x, const GY* gy, index_t rows, index_t d, const Acc* stats, Acc* dgamma, Acc* dbeta) {
  using V = acc_t<Acc>;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t j = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < d; j += step) {
    V a = ew_detail::load<V>(dgamma + j), b = ew_detail::load<V>(dbeta + j);
    for (index_t i = 0; i < rows; ++i) {
      const R xh = R(R(ew_detail::load<R>(x + i * d + j) - ew_detail::load<R>(stats + 2 * i)) * ew_detail::load<R>(stats + 2 * i + 1));
      const R gv = ew_detail::load<R>(gy + i * d + j);
      a = acc_math::add_rn(a, V(acc_math::mul_rn(gv, xh)));
      b += V(gv);
    }
    ew_detail::store(dgamma + j, a);
    ew_detail::store(dbeta + j, b);
  }
}

/// Attention's scores made probabilities in place, a block per row of s [tq, tk]: scaled, the
/// row's maximum, exp(s - max) and their sum in Acc, divided; keys past i are 0 when `causal`.
template <class Acc>
__global__ void attention_probabilities_kernel(Acc* s, index_t tq, index_t tk, Acc scale, bool causal) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  const V sc = ew_detail::load<V>(&scale);
  for (index_t i = blockIdx.x; i < tq; i += gridDim.x) {
    Acc* row = s + i * tk;
    const index_t allowed = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
    V mx = -V(INFINITY);
    for (index_t j = threadIdx.x; j < allowed; j += blockDim.x) {
      const V v = ew_detail::load<V>(row + j) * sc;
      ew_detail::store(row + j, v);
      mx = max_op{}(mx, v);
    }
    mx = block_reduce(mx, max_op{}, shared);
    V sum = 0;
    for (index_t j = threadIdx.x; j < allowed; j += blockDim.x) {
      const V e = acc_math::exp(V(ew_detail::load<V>(row + j) - mx));
      ew_detail::store(row + j, e);
      sum += e;
    }
    sum = block_reduce(sum, add_op{}, shared);
    for (index_t j = threadIdx.x; j < tk; j += blockDim.x) ew_detail::store(row + j, j < allowed ? V(ew_detail::load<V>(row + j) / sum) : V(0));
  }
}

/// Attention's score gradients in place, a block per row: ds = p (ds - sum(ds p)) scale.
template <class Acc>
__global__ void attention_score_gradients_kernel(Acc* ds, const Acc* p, index_t tq, index_t tk, Acc scale) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  const V sc = ew_detail::load<V>(&scale);
  for (index_t i = blockIdx.x; i < tq; i += gridDim.x) {
    Acc* d = ds + i * tk;
    const Acc* pr = p + i * tk;
    V dot = 0;
    for (index_t j = threadIdx.x; j < tk; j += blockDim.x) dot = acc_math::add_rn(dot, acc_math::mul_rn(ew_detail::load<V>(d + j), ew_detail::load<V>(pr + j)));
    dot = block_reduce(dot, add_op{}, shared);
    for (index_t j = threadIdx.x; j < tk; j += blockDim.x) {
      ew_detail::store(d + j, V(V(ew_detail::load<V>(pr + j) * V(ew_detail::load<V>(d + j) - dot)) * sc));
    }
  }
}

/// max (Max) or min along an axis by selection, a thread per fiber scanning it in order (the
/// first on ties; a NaN wins and ends the scan, as on the host): the value rounded into y, its
/// position into pos (when not null).
template <bool Max, class X, class O>
__global__ void select_kernel(const X* x, layout l, O* y, std::int32_t* pos) {
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t f = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < l.fibers; f += step) {
    const X* p = x + start(l, f);
    index_t best = 0;
    double bv = ew_detail::load<double>(p);
    for (index_t k = 1; k < l.len && bv == bv; ++k) {
      const double v = ew_detail::load<double>(p + k * l.inner);
      if (v != v || (Max ? v > bv : v < bv)) {
        best = k;
        bv = v;
      }
    }
    ew_detail::store(y + f, bv);
    if (pos) pos[f] = static_cast<std::int32_t>(best);
  }
}

/// g at each fiber's selected position += gy[f], a thread per fiber (distinct elements).
template <class R, class G, class GX>
__global__ void add_selected_kernel(const G* gy, const std::int32_t* pos, layout l, GX* g) {
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t f = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < l.fibers; f += step) {
    GX* d = g + start(l, f) + pos[f] * l.inner;
    ew_detail::store(d, R(ew_detail::load<R>(d) + ew_detail::load<R>(gy + f)));
  }
}

/// acc[indices[i], j] += gy[i, j] for i in order, a thread per column j (no two threads write
/// one element; repeated indices add in the host's order).
template <class Acc, class G>
__global__ void scatter_add_rows_kernel(const G* gy, const std::int64_t* indices, index_t n, index_t d, Acc* acc) {
  using V = acc_t<Acc>;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t j = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < d; j += step) {
    for (index_t i = 0; i < n; ++i) {
      Acc* a = acc + indices[i] * d + j;
      ew_detail::store(a, V(ew_detail::load<V>(a) + ew_detail::load<V>(gy + i * d + j)));
    }
  }
}

/// Few long fibers (a whole tensor's sum, a loss over everything) split into `parts` consecutive
/// ranges of `chunk` elements, a block per (fiber, range), and the ranges' results combined by
/// a block per fiber: the same order for the same shapes, ceil(chunk / threads) + 12 +
/// ceil(parts / threads) + 12 additions per sum.
struct split {
  index_t parts = 1, chunk = 0;
};
inline split split_of(const layout& l) {
  if (l.len < (index_t{1} << 16) || l.fibers >= 128) return {};  // a block per fiber is enough
  const index_t parts = std::min<index_t>((l.len + 16383) / 16384, std::max<index_t>(2, 1024 / std::max<index_t>(l.fibers, 1)));
  return {parts, (l.len + parts - 1) / parts};
}

/// What a range's block computes: the sum, the largest magnitude, the largest value, the sum of
/// squares scaled by the fiber's arg, the sum of exp(x - the fiber's arg).
enum class partial { sum, max_abs, max, scaled_squares, exp_sum };

template <class Acc, partial Q, class X>
__global__ void partial_kernel(const X* x, layout l, split sp, const Acc* arg, Acc* out) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  constexpr bool maximum = Q == partial::max_abs || Q == partial::max;
  for (index_t b = blockIdx.x; b < l.fibers * sp.parts; b += gridDim.x) {
    const index_t f = b / sp.parts, k0 = (b % sp.parts) * sp.chunk, k1 = k0 + sp.chunk < l.len ? k0 + sp.chunk : l.len;
    const X* p = x + start(l, f);
    const V a0 = arg != nullptr ? ew_detail::load<V>(arg + f) : V(0);
    V a = Q == partial::max ? -V(INFINITY) : V(0);
    for (index_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
      const V v = ew_detail::load<V>(p + k * l.inner);
      if constexpr (Q == partial::sum) {
        a += v;
      } else if constexpr (Q == partial::max_abs) {
        a = max_op{}(a, V(acc_math::fabs(v)));
      } else if constexpr (Q == partial::max) {
        a = max_op{}(a, v);
      } else if constexpr (Q == partial::scaled_squares) {
        const V sv = V(v * a0);
        a = acc_math::add_rn(a, acc_math::mul_rn(sv, sv));
      } else {
        a += acc_math::exp(V(v - a0));
      }
    }
    if constexpr (maximum) a = block_reduce(a, max_op{}, shared);
    else a = block_reduce(a, add_op{}, shared);
    if (threadIdx.x == 0) ew_detail::store(out + b, a);
  }
}

/// What the block per fiber does with its ranges' results: reduction R's value into y (the sum,
/// the mean, the norm from the scaled squares and aux's scale, logsumexp from the exp sums and
/// aux's maximum), or a first pass's result into aux (norm: the largest magnitude at aux[f] and
/// the power of two that scales it near 1 at aux[fibers + f]; logsumexp: the maximum at aux[f]).
enum class combine { sum, mean, norm_scale, norm, lse_max, lse };

template <class Acc, combine C, class O>
__global__ void combine_kernel(const Acc* part, layout l, split sp, Acc* aux, O* y) {
  __shared__ acc_t<Acc> shared[32];
  using V = acc_t<Acc>;
  constexpr bool maximum = C == combine::norm_scale || C == combine::lse_max;
  for (index_t f = blockIdx.x; f < l.fibers; f += gridDim.x) {
    V a = C == combine::lse_max ? -V(INFINITY) : V(0);
    for (index_t k = threadIdx.x; k < sp.parts; k += blockDim.x) {
      const V v = ew_detail::load<V>(part + f * sp.parts + k);
      a = maximum ? max_op{}(a, v) : V(a + v);
    }
    if constexpr (maximum) a = block_reduce(a, max_op{}, shared);
    else a = block_reduce(a, add_op{}, shared);
    if (threadIdx.x != 0) continue;
    if constexpr (C == combine::sum) {
      ew_detail::store(y + f, a);
    } else if constexpr (C == combine::mean) {
      ew_detail::store(y + f, V(a / V(l.len)));
    } else if constexpr (C == combine::norm_scale) {
      int e = 0;
      (void)::frexp(static_cast<double>(a), &e);
      constexpr int lo = format_traits<Acc>::emin, hi = format_traits<Acc>::emax;
      ew_detail::store(aux + f, a);
      ew_detail::store(aux + l.fibers + f, V(::ldexp(1.0, ::min(::max(-e, lo), hi))));
    } else if constexpr (C == combine::norm) {
      const V amax = ew_detail::load<V>(aux + f), scale = ew_detail::load<V>(aux + l.fibers + f);
      const bool special = amax == V(0) || amax != amax || amax == V(INFINITY);
      ew_detail::store(y + f, special ? amax : V(acc_math::sqrt(a) / scale));
    } else if constexpr (C == combine::lse_max) {
      ew_detail::store(aux + f, a);
    } else {
      const V m = ew_detail::load<V>(aux + f);
      const bool finite = m == m && m != V(INFINITY) && m != -V(INFINITY);
      ew_detail::store(y + f, finite ? V(m + acc_math::log(a)) : m);
    }
  }
}

/// Row-major without gaps, as TensorView::is_contiguous: the stride of an axis of extent 1 is
/// never used, so any value is accepted there (the tape gives a contiguous view's gradient the
/// view's own strides, a transpose of an [n, 1] tensor's included).
template <class S>
bool dense(const DeviceView<S>& v) {
  index_t expected = 1;
  for (int i = v.rank() - 1; i >= 0; --i) {
    if (v.shape()[i] != 1 && v.strides()[i] != expected) return false;
    expected *= v.shape()[i];
  }
  return true;
}

/// The fibers of x (dense) along `axis`, or of all of x as one fiber (`whole`).
template <class X>
layout fibers_of(const char* op, const DeviceView<X>& x, bool whole, int axis) {
  if (!dense(x)) {
    throw shape_error(std::string(op) + ": a device reduction of an input of shape " + x.shape().str() + " and strides " +
                      x.strides().str() + "; expected a dense input");
  }
  layout l;
  if (whole) {
    l.len = x.size();
    return l;
  }
  const int a = normalize_axis(axis, x.rank(), op);
  l.fibers = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if (d < a) l.fibers *= x.shape()[d];
    if (d > a) l.inner *= x.shape()[d];
  }
  l.fibers *= l.inner;
  l.len = x.shape()[a];
  return l;
}

/// A block per fiber, as many threads as the fiber has elements up to 256 (a multiple of 32).
inline std::pair<unsigned, unsigned> grid(const layout& l) {
  const auto threads = static_cast<unsigned>(std::min<index_t>(256, std::max<index_t>(32, (l.len + 31) / 32 * 32)));
  return {static_cast<unsigned>(std::min<index_t>(l.fibers, 65535)), threads};
}

}  // namespace fiber_detail

/// The Acc elements of scratch reduce_fibers needs for x's fibers along `axis` (or all of x):
/// 0 where a block per fiber does the work; long fibers split otherwise (fiber_detail::split).
template <class X>
index_t reduce_scratch_elements(const char* op, const DeviceView<X>& x, bool whole, int axis) {
  const auto l = fiber_detail::fibers_of(op, x, whole, axis);
  const auto sp = fiber_detail::split_of(l);
  return sp.parts > 1 ? l.fibers * (sp.parts + 2) : 0;
}

/// y = reduction R of x's fibers along `axis` (y dense, x's shape without it), or of all of x
/// into one element (`whole`), in Acc, rounded once into y's format; on `stream`. x dense.
/// `scratch`: reduce_scratch_elements(...) elements of device memory (may be null when that is 0).
template <class Acc, op::reduction R, class X, class O>
void reduce_fibers(cudaStream_t stream, const char* op, const DeviceView<X>& x, bool whole, int axis, const DeviceView<O>& y,
                   Acc* scratch = nullptr) {
  static_assert(acc_format<Acc>, "precis::cuda::reduce_fibers: Acc is double, float, precis::half or precis::bfloat16");
  const auto l = fiber_detail::fibers_of(op, x, whole, axis);
  if (l.len == 0 || y.size() != l.fibers || !fiber_detail::dense(y)) {
    throw shape_error(std::string(op) + ": a device reduction of " + x.shape().str() + " into " + y.shape().str() +
                      "; expected a non-empty fiber and a dense output of one element per fiber");
  }
  if (l.fibers == 0) return;
  const auto sp = fiber_detail::split_of(l);
  if (sp.parts > 1) {
    if (scratch == nullptr) {
      throw invalid_argument(std::string(op) + ": a device reduction of " + std::to_string(l.fibers) + " fibers of " + std::to_string(l.len) +
                             " elements needs reduce_scratch_elements() of scratch; none was given");
    }
    namespace fd = fiber_detail;
    using fd::combine;
    using fd::partial;
    Acc* part = scratch;
    Acc* aux = scratch + l.fibers * sp.parts;
    const auto pblocks = static_cast<unsigned>(std::min<index_t>(l.fibers * sp.parts, 65535));
    const auto cblocks = static_cast<unsigned>(std::min<index_t>(l.fibers, 65535));
    const auto cthreads = static_cast<unsigned>(std::min<index_t>(256, std::max<index_t>(32, (sp.parts + 31) / 32 * 32)));
    const auto first = [&](auto q, auto c, const Acc* arg) {
      fd::partial_kernel<Acc, decltype(q)::value><<<pblocks, 256, 0, stream>>>(x.data(), l, sp, arg, part);
      check(cudaGetLastError(), std::string(op) + ": launch of the split reduction's partial kernel");
      fd::combine_kernel<Acc, decltype(c)::value><<<cblocks, cthreads, 0, stream>>>(part, l, sp, aux, y.data());
      check(cudaGetLastError(), std::string(op) + ": launch of the split reduction's combining kernel");
    };
    using P = std::integral_constant<partial, partial::sum>;
    if constexpr (R == op::reduction::sum) {
      first(P{}, std::integral_constant<combine, combine::sum>{}, nullptr);
    } else if constexpr (R == op::reduction::mean) {
      first(P{}, std::integral_constant<combine, combine::mean>{}, nullptr);
    } else if constexpr (R == op::reduction::norm) {
      first(std::integral_constant<partial, partial::max_abs>{}, std::integral_constant<combine, combine::norm_scale>{}, nullptr);
      fd::partial_kernel<Acc, partial::scaled_squares><<<pblocks, 256, 0, stream>>>(x.data(), l, sp, aux + l.fibers, part);
      check(cudaGetLastError(), std::string(op) + ": launch of the split reduction's partial kernel");
      fd::combine_kernel<Acc, combine::norm><<<cblocks, cthreads, 0, stream>>>(part, l, sp, aux, y.data());
      check(cudaGetLastError(), std::string(op) + ": launch of the split reduction's combining kernel");
    } else {
      first(std::integral_constant<partial, partial::max>{}, std::integral_constant<combine, combine::lse_max>{}, nullptr);
      fd::partial_kernel<Acc, partial::exp_sum><<<pblocks, 256, 0, stream>>>(x.data(), l, sp, aux, part);
      check(cudaGetLastError(), std::string(op) + ": launch of the split reduction's partial kernel");
      fd::combine_kernel<Acc, combine::lse><<<cblocks, cthreads, 0, stream>>>(part, l, sp, aux, y.data());
      check(cudaGetLastError(), std::string(op) + ": launch of the split reduction's combining kernel");
    }
    return;
  }
  const auto [blocks, threads] = fiber_detail::grid(l);
  fiber_detail::reduce_kernel<Acc, R><<<blocks, threads, 0, stream>>>(x.data(), l, y.data());
  check(cudaGetLastError(), std::string(op) + ": launch of the reduction kernel");
}

/// y = softmax (Log = false) or log_softmax of x along `axis` (x and y dense, the same shape),
/// in Acc, each output rounded once into y's format; on `stream`.
template <class Acc, bool Log, class X, class O>
void softmax_fibers(cudaStream_t stream, const char* op, const DeviceView<X>& x, int axis, const DeviceView<O>& y) {
  static_assert(acc_format<Acc>, "precis::cuda::softmax_fibers: Acc is double, float, precis::half or precis::bfloat16");
  const auto l = fiber_detail::fibers_of(op, x, false, axis);
  if (y.shape() != x.shape() || !fiber_detail::dense(y)) {
    throw shape_error(std::string(op) + ": a device softmax of " + x.shape().str() + " into " + y.shape().str() +
                      "; expected a dense output of the same shape");
  }
  if (l.fibers == 0 || l.len == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(l);
  fiber_detail::softmax_kernel<Acc, Log><<<blocks, threads, 0, stream>>>(x.data(), l, y.data());
  check(cudaGetLastError(), std::string(op) + ": launch of the softmax kernel");
}

/// s = the sum along `axis` of g y (softmax) or of g (log_softmax, Log) per fiber, in Acc (g
/// and y dense, the same shape; s dense, the shape without `axis`); on `stream`.
template <class Acc, bool Log, class G, class O>
void softmax_sums(cudaStream_t stream, const char* op, const DeviceView<G>& g, const DeviceView<O>& y, int axis, const DeviceView<Acc>& s) {
  const auto l = fiber_detail::fibers_of(op, g, false, axis);
  if (y.shape() != g.shape() || !fiber_detail::dense(y) || s.size() != l.fibers || !fiber_detail::dense(s)) {
    throw shape_error(std::string(op) + ": softmax's backward sums of " + g.shape().str() + " and " + y.shape().str() + " into " +
                      s.shape().str() + "; expected dense operands of one shape and one sum per fiber");
  }
  if (l.fibers == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(l);
  fiber_detail::softmax_sums_kernel<Acc, Log><<<blocks, threads, 0, stream>>>(g.data(), y.data(), l, s.data());
  check(cudaGetLastError(), std::string(op) + ": launch of the softmax backward sums' kernel");
}

/// Layer normalization of the rows of x ([..., d], dense) on `stream`: stats[2i] the mean and
/// stats[2i + 1] 1 / sqrt(var + eps) of row i (Acc, device memory), y (dense, x's shape) =
/// (x - mean) rstd gamma + beta in R, rounded once.
template <class Acc, class R, class X, class G, class B, class O>
void layer_norm_forward(cudaStream_t stream, const DeviceView<X>& x, const DeviceView<G>& gamma, const DeviceView<B>& beta, double eps,
                        Acc* stats, const DeviceView<O>& y) {
  static_assert(acc_format<Acc>, "precis::cuda::layer_norm_forward: Acc is double, float, precis::half or precis::bfloat16");
  const index_t d = x.rank() > 0 ? x.shape().back() : 0;
  if (d == 0 || !fiber_detail::dense(x) || !fiber_detail::dense(y) || y.shape() != x.shape() || gamma.size() != d || beta.size() != d) {
    throw shape_error("precis::layer_norm: on the device, x " + x.shape().str() + ", gamma " + gamma.shape().str() + ", beta " +
                      beta.shape().str() + ", y " + y.shape().str() + "; expected dense x and y of one shape [..., d > 0] and [d] parameters");
  }
  const index_t rows = x.size() / d;
  if (rows == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{rows, d, 1});
  fiber_detail::layer_norm_forward_kernel<Acc, R><<<blocks, threads, 0, stream>>>(x.data(), rows, d, gamma.data(), gamma.strides()[0],
                                                                                 beta.data(), beta.strides()[0], eps, stats, y.data());
  check(cudaGetLastError(), "precis::layer_norm: launch of the forward kernel");
}

/// Layer normalization's backward on `stream` (x and gy dense, stats from the forward): gx
/// (+)= the input's gradient (assigned when `fresh`; none when gx is empty), dgamma += gy xhat
/// and dbeta += gy over the rows (Acc, dense [d]).
template <class Acc, class R, class X, class GY, class G, class GX>
void layer_norm_backward(cudaStream_t stream, const DeviceView<X>& x, const DeviceView<GY>& gy, const DeviceView<G>& gamma, const Acc* stats,
                         const DeviceView<GX>& gx, bool fresh, Acc* dgamma, Acc* dbeta) {
  const index_t d = x.rank() > 0 ? x.shape().back() : 0;
  if (d == 0 || !fiber_detail::dense(x) || !fiber_detail::dense(gy) || gy.shape() != x.shape() || gamma.size() != d ||
      (gx.data() != nullptr && (gx.shape() != x.shape() || !fiber_detail::dense(gx)))) {
    throw shape_error("precis::layer_norm: on the device, the backward of x " + x.shape().str() + " with gy " + gy.shape().str() +
                      ", gamma " + gamma.shape().str() + " and gx " + gx.shape().str() + "; expected dense operands of one shape [..., d > 0]");
  }
  const index_t rows = x.size() / d;
  if (rows == 0) return;
  if (gx.data() != nullptr) {
    const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{rows, d, 1});
    fiber_detail::layer_norm_backward_rows<Acc, R><<<blocks, threads, 0, stream>>>(x.data(), gy.data(), rows, d, gamma.data(),
                                                                                  gamma.strides()[0], stats, gx.data(), fresh);
    check(cudaGetLastError(), "precis::layer_norm: launch of the input gradient's kernel");
  }
  const auto cblocks = static_cast<unsigned>(std::min<index_t>((d + 255) / 256, 65535));
  fiber_detail::layer_norm_backward_columns<Acc, R><<<cblocks, 256, 0, stream>>>(x.data(), gy.data(), rows, d, stats, dgamma, dbeta);
  check(cudaGetLastError(), "precis::layer_norm: launch of the parameters' gradient kernel");
}

/// Attention's scores s [tq, tk] (dense, Acc) made probabilities in place on `stream` (see
/// op::cpu::attention_probabilities).
template <class Acc>
void attention_probabilities(cudaStream_t stream, const DeviceView<Acc>& s, Acc scale, bool causal) {
  if (s.rank() != 2 || !fiber_detail::dense(s)) {
    throw shape_error("precis::attention: on the device, scores " + s.shape().str() + "; expected a dense matrix");
  }
  const index_t tq = s.shape()[0], tk = s.shape()[1];
  if (tq == 0 || tk == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{tq, tk, 1});
  fiber_detail::attention_probabilities_kernel<Acc><<<blocks, threads, 0, stream>>>(s.data(), tq, tk, scale, causal);
  check(cudaGetLastError(), "precis::attention: launch of the probabilities' kernel");
}
/// Attention's score gradients ds = p (ds - sum(ds p)) scale in place on `stream` (ds and p
/// [tq, tk], dense).
template <class Acc>
void attention_score_gradients(cudaStream_t stream, const DeviceView<Acc>& ds, const DeviceView<const Acc>& p, Acc scale) {
  if (ds.rank() != 2 || p.shape() != ds.shape() || !fiber_detail::dense(ds) || !fiber_detail::dense(p)) {
    throw shape_error("precis::attention: on the device, score gradients " + ds.shape().str() + " and probabilities " +
                      p.shape().str() + "; expected dense matrices of one shape");
  }
  const index_t tq = ds.shape()[0], tk = ds.shape()[1];
  if (tq == 0 || tk == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{tq, tk, 1});
  fiber_detail::attention_score_gradients_kernel<Acc><<<blocks, threads, 0, stream>>>(ds.data(), p.data(), tq, tk, scale);
  check(cudaGetLastError(), "precis::attention: launch of the score gradients' kernel");
}

/// y = the largest (Max) or smallest element of each fiber of x (dense) along `axis`, the
/// selected positions into pos (device memory, one per fiber; null: not kept), on `stream`.
template <bool Max, class X, class O>
void select_fibers(cudaStream_t stream, const char* op, const DeviceView<X>& x, int axis, const DeviceView<O>& y, std::int32_t* pos) {
  const auto l = fiber_detail::fibers_of(op, x, false, axis);
  if (l.len == 0 || y.size() != l.fibers || !fiber_detail::dense(y)) {
    throw shape_error(std::string(op) + ": a device selection from " + x.shape().str() + " into " + y.shape().str() +
                      "; expected a non-empty axis and a dense output of one element per fiber");
  }
  if (l.fibers == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((l.fibers + 255) / 256, 65535));
  fiber_detail::select_kernel<Max><<<blocks, 256, 0, stream>>>(x.data(), l, y.data(), pos);
  check(cudaGetLastError(), std::string(op) + ": launch of the selection kernel");
}
/// g (dense) at each fiber's selected position along `axis` += gy (dense, one per fiber), in
/// R, on `stream`.
template <class R, class G, class GX>
void add_selected(cudaStream_t stream, const char* op, const DeviceView<G>& gy, const std::int32_t* pos, int axis, const DeviceView<GX>& g) {
  const auto l = fiber_detail::fibers_of(op, g, false, axis);
  if (gy.size() != l.fibers || !fiber_detail::dense(gy)) {
    throw shape_error(std::string(op) + ": a gradient " + gy.shape().str() + " for a selection from " + g.shape().str() +
                      "; expected one dense element per fiber");
  }
  if (l.fibers == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((l.fibers + 255) / 256, 65535));
  fiber_detail::add_selected_kernel<R><<<blocks, 256, 0, stream>>>(gy.data(), pos, l, g.data());
  check(cudaGetLastError(), std::string(op) + ": launch of the selection's gradient kernel");
}

/// acc [V, d] (dense, Acc) rows at `indices` (device memory, n of them, checked where the host
/// had them) += the rows of gy [n, d] (dense), in index order, on `stream`.
template <class Acc, class G>
void scatter_add_rows(cudaStream_t stream, const DeviceView<G>& gy, const std::int64_t* indices, index_t n, const DeviceView<Acc>& acc) {
  const index_t d = acc.rank() == 2 ? acc.shape()[1] : 0;
  if (acc.rank() != 2 || !fiber_detail::dense(acc) || !fiber_detail::dense(gy) || gy.size() != n * d) {
    throw shape_error("precis::embedding: on the device, a gradient " + gy.shape().str() + " of " + std::to_string(n) +
                      " rows into a table " + acc.shape().str() + "; expected dense operands, one row of the table's width per index");
  }
  if (n == 0 || d == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((d + 255) / 256, 65535));
  fiber_detail::scatter_add_rows_kernel<<<blocks, 256, 0, stream>>>(gy.data(), indices, n, d, acc.data());
  check(cudaGetLastError(), "precis::embedding: launch of the scatter-add kernel");
}

}  // namespace precis::cuda
