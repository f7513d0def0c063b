// Convolution, pooling and batch normalization on the device, as the op layer's definitions
// compute them through op::cpu (im2col, col2im, conv_output, conv_output_grads, max_pool,
// avg_pool and batch_norm_forward with their backwards; see precis/ops/cpu.hpp): conv2d is
// the host's im2col + GEMM + col2im, its GEMMs precis::cuda::gemm's. Include only from .cu
// translation units.
//
// Orders, so that a result has the same bits on every run:
// - im2col and the output's bias copy and round; col2im is a thread per input element adding
//   its taps in kernel order (row, then column), the host's order: the same bits;
// - max pooling is a thread per output scanning its window in row-major order with the host's
//   rule (the first largest, a later NaN replaces the winner): the same values and positions;
//   its backward a thread per plane adding into the plane in output order, as the host;
// - average pooling sums each window in row-major order and its backward adds, per input
//   element, the windows covering it in row-major order: the host's orders and bits;
// - the bias gradient and batch normalization's channel sums are a block per channel (thread
//   t takes elements t, t + threads, ..., then fiber_detail::block_reduce): another order than
//   the host's (lane_sum), gamma(ceil(m / threads) + 12) times the sum of magnitudes.
// Products and sums that the host rounds one at a time are written with __fmul_rn / __fadd_rn
// (and the double forms), so nvcc does not fuse them into one fused multiply-add.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/elementwise.cuh"
#include "precis/cuda/fiber.cuh"
#include "precis/ops/cpu.hpp"

namespace precis::cuda {

namespace conv_kernels {

/// op::conv_detail::geometry as plain values a kernel takes by value.
struct windows {
  index_t n, c, h, w, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw;
  __host__ __device__ index_t plane() const { return ho * wo; }
};

inline windows windows_of(const op::conv_detail::geometry& g) {
  return {g.n, g.c, g.h, g.w, g.kh, g.kw, g.ho, g.wo, g.stride[0], g.stride[1], g.pad[0], g.pad[1], g.dil[0], g.dil[1]};
}

using acc_math::add_rn;
using acc_math::mul_rn;
using acc_math::sub_rn;

/// The arithmetic type a copy from S to L goes through (exact for S's values).
template <class S, class L>
using through_t = std::conditional_t<std::is_same_v<S, double> || std::is_same_v<L, double>, double, float>;

/// A grid-stride loop's launch over n elements.
inline unsigned blocks_for(index_t n) { return static_cast<unsigned>(std::max<index_t>(1, std::min<index_t>((n + 255) / 256, 65535))); }

template <class L, class S>
__global__ void im2col_kernel(windows g, const S* x, index_t c0, index_t cs, index_t first, index_t count, L* col) {
  const index_t p = g.plane(), cols = count * p, total = cs * g.kh * g.kw * cols;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const index_t r = e / cols, rest = e % cols, b = rest / p, q = rest % p;
    const index_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
    const index_t ih = (q / g.wo) * g.sh - g.ph + i * g.dh, iw = (q % g.wo) * g.sw - g.pw + j * g.dw;
    const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    const S* src = x + ((first + b) * g.c + c0 + c) * g.h * g.w + ih * g.w + iw;
    if constexpr (std::is_same_v<S, L>) {
      if (inside) memcpy(col + e, src, sizeof(L));
      else memset(col + e, 0, sizeof(L));
    } else {
      using A = through_t<S, L>;
      ew_detail::store(col + e, inside ? ew_detail::load<A>(src) : A(0));
    }
  }
}

template <class Acc>
__global__ void col2im_kernel(windows g, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count, Acc* dx) {
  const index_t p = g.plane(), cols = count * p, hw = g.h * g.w, total = count * cs * hw;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const index_t b = e / (cs * hw), c = (e / hw) % cs, ih = (e % hw) / g.w, iw = e % g.w;
    Acc* d = dx + ((first + b) * g.c + c0 + c) * hw + ih * g.w + iw;
    acc_t<Acc> v = ew_detail::load<acc_t<Acc>>(d);
    for (index_t i = 0; i < g.kh; ++i) {
      const index_t oh = op::conv_detail::tap_source(ih, i, g.sh, g.ph, g.dh, g.ho);
      if (oh < 0) continue;
      for (index_t j = 0; j < g.kw; ++j) {
        const index_t ow = op::conv_detail::tap_source(iw, j, g.sw, g.pw, g.dw, g.wo);
        if (ow >= 0) v = add_rn(v, ew_detail::load<acc_t<Acc>>(dcol + ((c * g.kh + i) * g.kw + j) * cols + b * p + oh * g.wo + ow));
      }
    }
    ew_detail::store(d, v);
  }
}

/// y = acc + bias (Acc) rounded once; without a bias an Acc output still adds the zero (as the
/// host does: -0 becomes +0), another output takes acc rounded.
template <class Acc, class B, class O>
__global__ void conv_output_kernel(const Acc* acc, const B* bias, index_t bias_stride, index_t oc0, index_t og, index_t oc_all, index_t n0,
                                   index_t count, index_t p, O* y) {
  const index_t cols = count * p, total = og * cols;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const index_t o = e / cols, b = (e % cols) / p, q = e % p;
    using V = acc_t<Acc>;
    const V bv = bias ? ew_detail::load<V>(bias + (oc0 + o) * bias_stride) : V(0);
    const V v = (bias || std::is_same_v<O, Acc>) ? add_rn(ew_detail::load<V>(acc + e), bv) : ew_detail::load<V>(acc + e);
    ew_detail::store(y + ((n0 + b) * oc_all + oc0 + o) * p + q, v);
  }
}

/// gm [og, count p] = the channels oc0.. of images n0.. of gq [N, oc_all, p] (bits copied).
template <class GQ>
__global__ void conv_gather_kernel(const GQ* gq, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count, index_t p, GQ* gm) {
  const index_t cols = count * p, total = og * cols;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const index_t o = e / cols, b = (e % cols) / p, q = e % p;
    memcpy(gm + e, gq + ((n0 + b) * oc_all + oc0 + o) * p + q, sizeof(GQ));
  }
}

/// gb[o] += the sum of gy's channel oc0 + o over images n0.. (a block per channel).
template <class Acc, class G>
__global__ void conv_bias_grad_kernel(const G* gy, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count, index_t p, Acc* gb) {
  using V = acc_t<Acc>;
  __shared__ V shared[32];
  for (index_t o = blockIdx.x; o < og; o += gridDim.x) {
    V s = 0;
    for (index_t k = threadIdx.x; k < count * p; k += blockDim.x) {
      s += ew_detail::load<V>(gy + ((n0 + k / p) * oc_all + oc0 + o) * p + k % p);
    }
    s = fiber_detail::block_reduce(s, fiber_detail::add_op{}, shared);
    if (threadIdx.x == 0) ew_detail::store(gb + o, add_rn(ew_detail::load<V>(gb + o), s));
  }
}

/// A thread per output of the N C planes: the window's first element inside the plane, then
/// the others in row-major order, each taken when larger or a NaN; compared in R.
template <class R, class X, class O>
__global__ void max_pool_kernel(windows g, const X* x, O* y, std::int32_t* at) {
  const index_t total = g.n * g.c * g.plane();
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t o = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += step) {
    const index_t pl = o / g.plane(), oh = (o % g.plane()) / g.wo, ow = o % g.wo;
    const X* in = x + pl * g.h * g.w;
    index_t best = -1;
    R bv = 0;
    for (index_t i = 0; i < g.kh; ++i) {
      const index_t ih = oh * g.sh - g.ph + i;
      if (ih < 0 || ih >= g.h) continue;
      for (index_t j = 0; j < g.kw; ++j) {
        const index_t iw = ow * g.sw - g.pw + j;
        if (iw < 0 || iw >= g.w) continue;
        const R v = ew_detail::load<R>(in + ih * g.w + iw);
        if (best < 0 || v > bv || v != v) {
          best = ih * g.w + iw;
          bv = v;
        }
      }
    }
    ew_detail::store(y + o, bv);
    if (at) at[o] = static_cast<std::int32_t>(best);
  }
}

/// acc (R, zeros in) += gy at each output's winner, a thread per plane in output order.
template <class R, class G>
__global__ void max_pool_backward_kernel(windows g, const G* gy, const std::int32_t* at, R* acc) {
  const index_t planes = g.n * g.c;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t pl = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; pl < planes; pl += step) {
    R* plane = acc + pl * g.h * g.w;
    for (index_t q = 0; q < g.plane(); ++q) {
      const index_t o = pl * g.plane() + q;
      plane[at[o]] = add_rn(plane[at[o]], ew_detail::load<R>(gy + o));
    }
  }
}

template <class R, class X, class O>
__global__ void avg_pool_kernel(windows g, const X* x, O* y) {
  const index_t total = g.n * g.c * g.plane();
  const R inv = R(1) / R(g.kh * g.kw);
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t o = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += step) {
    const index_t pl = o / g.plane(), oh = (o % g.plane()) / g.wo, ow = o % g.wo;
    const X* in = x + pl * g.h * g.w;
    R s = 0;
    for (index_t i = 0; i < g.kh; ++i) {
      const index_t ih = oh * g.sh - g.ph + i;
      if (ih < 0 || ih >= g.h) continue;
      for (index_t j = 0; j < g.kw; ++j) {
        const index_t iw = ow * g.sw - g.pw + j;
        if (iw >= 0 && iw < g.w) s = add_rn(s, ew_detail::load<R>(in + ih * g.w + iw));
      }
    }
    ew_detail::store(y + o, mul_rn(s, inv));
  }
}

/// acc (R) += gy / (kh kw) of every window covering each element, a thread per element, the
/// windows in row-major order.
template <class R, class G>
__global__ void avg_pool_backward_kernel(windows g, const G* gy, R* acc) {
  const index_t hw = g.h * g.w, total = g.n * g.c * hw;
  const R inv = R(1) / R(g.kh * g.kw);
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const index_t pl = e / hw, ih = (e % hw) / g.w, iw = e % g.w;
    const auto rows = op::conv_detail::covering(ih, g.kh, g.sh, g.ph, g.ho), cols = op::conv_detail::covering(iw, g.kw, g.sw, g.pw, g.wo);
    R v = acc[e];
    for (index_t oh = rows.lo; oh <= rows.hi; ++oh)
      for (index_t ow = cols.lo; ow <= cols.hi; ++ow) v = add_rn(v, mul_rn(ew_detail::load<R>(gy + (pl * g.ho + oh) * g.wo + ow), inv));
    acc[e] = v;
  }
}

/// Batch normalization's forward, a block per channel of x [N, C, S]: in training the mean and
/// the biased variance in Acc (block sums) and the running estimates moved by thread 0; in
/// evaluation the running estimates; stats and y as op::cpu::batch_norm_forward.
template <class Acc, class X, class Gm, class Bt, class O>
__global__ void batch_norm_forward_kernel(const X* x, index_t n, index_t c, index_t s, const Gm* gamma, index_t gs, const Bt* beta,
                                          index_t bs, bool training, double momentum, double eps, double* running_mean,
                                          double* running_var, Acc* stats, O* y) {
  using V = acc_t<Acc>;
  __shared__ V shared[32];
  const index_t m = n * s;
  for (index_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const auto at = [&](index_t k) { return ((k / s) * c + ch) * s + k % s; };
    V mu, var;
    if (training) {
      V a = 0;
      for (index_t k = threadIdx.x; k < m; k += blockDim.x) a += ew_detail::load<V>(x + at(k));
      mu = V(fiber_detail::block_reduce(a, fiber_detail::add_op{}, shared) / V(m));
      V d2 = 0;
      for (index_t k = threadIdx.x; k < m; k += blockDim.x) {
        const V d = sub_rn(ew_detail::load<V>(x + at(k)), mu);
        d2 = add_rn(d2, mul_rn(d, d));
      }
      var = V(fiber_detail::block_reduce(d2, fiber_detail::add_op{}, shared) / V(m));
      if (threadIdx.x == 0) {
        if (running_mean) running_mean[ch] = __dadd_rn(__dmul_rn(1 - momentum, running_mean[ch]), __dmul_rn(momentum, static_cast<double>(mu)));
        if (running_var) {
          running_var[ch] = __dadd_rn(__dmul_rn(1 - momentum, running_var[ch]),
                                      __dmul_rn(momentum, static_cast<double>(var)) * static_cast<double>(m) / static_cast<double>(m - 1));
        }
      }
    } else {
      mu = V(running_mean[ch]);
      var = V(running_var[ch]);
    }
    const V rstd = V(1) / V(acc_math::sqrt(add_rn(var, V(eps))));
    if (threadIdx.x == 0) {
      ew_detail::store(stats + 2 * ch, mu);
      ew_detail::store(stats + 2 * ch + 1, rstd);
    }
    const V gm = ew_detail::load<V>(gamma + ch * gs), bt = ew_detail::load<V>(beta + ch * bs);
    for (index_t k = threadIdx.x; k < m; k += blockDim.x) {
      const V v = ew_detail::load<V>(x + at(k));
      ew_detail::store(y + at(k), add_rn(mul_rn(mul_rn(sub_rn(v, mu), rstd), gm), bt));
    }
  }
}

/// Batch normalization's backward, a block per channel: db = the sum of gy, dg = the sum of gy
/// xhat (block sums in Acc), and dx (when not null) as op::cpu::batch_norm_backward.
template <class Acc, class G, class X, class Gm>
__global__ void batch_norm_backward_kernel(const G* gy, const X* x, index_t n, index_t c, index_t s, const Gm* gamma, index_t gs,
                                           const Acc* stats, bool training, Acc* dx, Acc* dg, Acc* db) {
  using V = acc_t<Acc>;
  __shared__ V shared[32];
  const index_t m = n * s;
  const V inv_m = V(1) / V(m);
  for (index_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const auto at = [&](index_t k) { return ((k / s) * c + ch) * s + k % s; };
    const V mu = ew_detail::load<V>(stats + 2 * ch), rstd = ew_detail::load<V>(stats + 2 * ch + 1), gm = ew_detail::load<V>(gamma + ch * gs);
    V sg = 0, sgx = 0;
    for (index_t k = threadIdx.x; k < m; k += blockDim.x) {
      const V g = ew_detail::load<V>(gy + at(k));
      sg = add_rn(sg, g);
      sgx = add_rn(sgx, mul_rn(g, mul_rn(sub_rn(ew_detail::load<V>(x + at(k)), mu), rstd)));
    }
    sg = fiber_detail::block_reduce(sg, fiber_detail::add_op{}, shared);
    sgx = fiber_detail::block_reduce(sgx, fiber_detail::add_op{}, shared);
    if (threadIdx.x == 0) {
      ew_detail::store(dg + ch, sgx);
      ew_detail::store(db + ch, sg);
    }
    if (dx == nullptr) continue;
    const V scale = mul_rn(gm, rstd);
    for (index_t k = threadIdx.x; k < m; k += blockDim.x) {
      const V g = ew_detail::load<V>(gy + at(k));
      if (training) {  // gamma rstd (g - mean(g) - xhat mean(g xhat))
        const V xh = mul_rn(sub_rn(ew_detail::load<V>(x + at(k)), mu), rstd);
        ew_detail::store(dx + at(k), mul_rn(scale, sub_rn(sub_rn(g, mul_rn(sg, inv_m)), mul_rn(mul_rn(xh, sgx), inv_m))));
      } else {
        ew_detail::store(dx + at(k), mul_rn(scale, g));
      }
    }
  }
}

}  // namespace conv_kernels

/// col = im2col of images first..first+count of x (device memory, [N, C, H, W] contiguous),
/// channels c0..c0+cs; see op::cpu::im2col.
template <class L, class S>
void im2col(cudaStream_t stream, const op::conv_detail::geometry& g, const S* x, index_t c0, index_t cs, index_t first, index_t count,
            L* col) {
  const index_t total = cs * g.kh * g.kw * count * g.plane();
  if (total == 0) return;
  conv_kernels::im2col_kernel<<<conv_kernels::blocks_for(total), 256, 0, stream>>>(conv_kernels::windows_of(g), x, c0, cs, first, count, col);
  check(cudaGetLastError(), "precis::conv2d: launch of the im2col kernel");
}

/// dx += col2im of the column gradients dcol; see op::cpu::col2im.
template <class Acc>
void col2im(cudaStream_t stream, const op::conv_detail::geometry& g, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count,
            Acc* dx) {
  const index_t total = count * cs * g.h * g.w;
  if (total == 0) return;
  conv_kernels::col2im_kernel<<<conv_kernels::blocks_for(total), 256, 0, stream>>>(conv_kernels::windows_of(g), dcol, c0, cs, first, count, dx);
  check(cudaGetLastError(), "precis::conv2d: launch of the col2im kernel");
}

/// conv2d's outputs from one GEMM's acc, plus the bias; see op::cpu::conv_output.
template <class Acc, class B, class O>
void conv_output(cudaStream_t stream, const Acc* acc, const DeviceView<const B>& bias, index_t oc0, index_t og, index_t oc_all, index_t n0,
                 index_t count, index_t p, O* y) {
  const index_t total = og * count * p;
  if (total == 0) return;
  const index_t bias_stride = bias.data() != nullptr ? bias.strides()[0] : 0;
  conv_kernels::conv_output_kernel<<<conv_kernels::blocks_for(total), 256, 0, stream>>>(acc, bias.data(), bias_stride, oc0, og, oc_all, n0,
                                                                                         count, p, y);
  check(cudaGetLastError(), "precis::conv2d: launch of the output kernel");
}

/// conv2d's output gradients for one GEMM; see op::cpu::conv_output_grads.
template <class Acc, class GQ, class G>
void conv_output_grads(cudaStream_t stream, const GQ* gq, const G* gy, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count,
                       index_t p, GQ* gm, Acc* gb) {
  if (og == 0 || count * p == 0) return;
  if (gm != nullptr) {
    conv_kernels::conv_gather_kernel<<<conv_kernels::blocks_for(og * count * p), 256, 0, stream>>>(gq, oc0, og, oc_all, n0, count, p, gm);
    check(cudaGetLastError(), "precis::conv2d: launch of the output gradient's gather");
  }
  if (gb != nullptr) {
    const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{og, count * p, 1});
    conv_kernels::conv_bias_grad_kernel<<<blocks, threads, 0, stream>>>(gy, oc0, og, oc_all, n0, count, p, gb);
    check(cudaGetLastError(), "precis::conv2d: launch of the bias gradient's kernel");
  }
}

/// Max pooling of x (contiguous) into y, winners' positions into at (when not null); see
/// op::cpu::max_pool.
template <class R, class X, class O>
void max_pool(cudaStream_t stream, const op::conv_detail::geometry& g, const X* x, O* y, std::int32_t* at) {
  const index_t total = g.n * g.c * g.plane();
  if (total == 0) return;
  conv_kernels::max_pool_kernel<R><<<conv_kernels::blocks_for(total), 256, 0, stream>>>(conv_kernels::windows_of(g), x, y, at);
  check(cudaGetLastError(), "precis::max_pool2d: launch of the forward kernel");
}
/// acc (R, zeros) += gy at the winners; see op::cpu::max_pool_backward.
template <class R, class G>
void max_pool_backward(cudaStream_t stream, const op::conv_detail::geometry& g, const G* gy, const std::int32_t* at, R* acc) {
  if (g.n * g.c == 0) return;
  conv_kernels::max_pool_backward_kernel<<<conv_kernels::blocks_for(g.n * g.c), 256, 0, stream>>>(conv_kernels::windows_of(g), gy, at, acc);
  check(cudaGetLastError(), "precis::max_pool2d: launch of the backward kernel");
}

/// Average pooling of x (contiguous) into y; see op::cpu::avg_pool.
template <class R, class X, class O>
void avg_pool(cudaStream_t stream, const op::conv_detail::geometry& g, const X* x, O* y) {
  const index_t total = g.n * g.c * g.plane();
  if (total == 0) return;
  conv_kernels::avg_pool_kernel<R><<<conv_kernels::blocks_for(total), 256, 0, stream>>>(conv_kernels::windows_of(g), x, y);
  check(cudaGetLastError(), "precis::avg_pool2d: launch of the forward kernel");
}
/// acc (R) += average pooling's input gradient; see op::cpu::avg_pool_backward.
template <class R, class G>
void avg_pool_backward(cudaStream_t stream, const op::conv_detail::geometry& g, const G* gy, R* acc) {
  const index_t total = g.n * g.c * g.h * g.w;
  if (total == 0) return;
  conv_kernels::avg_pool_backward_kernel<<<conv_kernels::blocks_for(total), 256, 0, stream>>>(conv_kernels::windows_of(g), gy, acc);
  check(cudaGetLastError(), "precis::avg_pool2d: launch of the backward kernel");
}

/// Batch normalization's forward over x [N, C, ...] (contiguous device memory); the running
/// estimates, when not null, in device memory; see op::cpu::batch_norm_forward.
template <class Acc, class X, class Gm, class Bt, class O>
void batch_norm_forward(cudaStream_t stream, const DeviceView<const X>& x, const DeviceView<const Gm>& gamma, const DeviceView<const Bt>& beta,
                        bool training, double momentum, double eps, double* running_mean, double* running_var, Acc* stats, O* y) {
  static_assert(acc_format<Acc>, "precis::cuda::batch_norm_forward: Acc is double, float, precis::half or precis::bfloat16");
  const index_t n = x.shape()[0], c = x.shape()[1], s = x.size() / std::max<index_t>(1, n * c);
  if (c == 0 || n * s == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{c, n * s, 1});
  conv_kernels::batch_norm_forward_kernel<Acc><<<blocks, threads, 0, stream>>>(x.data(), n, c, s, gamma.data(), gamma.strides()[0], beta.data(),
                                                                              beta.strides()[0], training, momentum, eps, running_mean,
                                                                              running_var, stats, y);
  check(cudaGetLastError(), "precis::batch_norm: launch of the forward kernel");
}
/// Batch normalization's backward; see op::cpu::batch_norm_backward.
template <class Acc, class G, class X, class Gm>
void batch_norm_backward(cudaStream_t stream, const G* gy, const DeviceView<const X>& x, const DeviceView<const Gm>& gamma, const Acc* stats,
                         bool training, Acc* dx, Acc* dg, Acc* db) {
  const index_t n = x.shape()[0], c = x.shape()[1], s = x.size() / std::max<index_t>(1, n * c);
  if (c == 0 || n * s == 0) return;
  const auto [blocks, threads] = fiber_detail::grid(fiber_detail::layout{c, n * s, 1});
  conv_kernels::batch_norm_backward_kernel<Acc><<<blocks, threads, 0, stream>>>(gy, x.data(), n, c, s, gamma.data(), gamma.strides()[0], stats,
                                                                               training, dx, dg, db);
  check(cudaGetLastError(), "precis::batch_norm: launch of the backward kernel");
}

}  // namespace precis::cuda
