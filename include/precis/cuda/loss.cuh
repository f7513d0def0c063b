// Cross-entropy over the rows of a logits matrix on the device: the loss (mean over rows of
// logsumexp(row) - row[label]) and its gradient, as the op layer's cross_entropy computes them
// (precis/ops/loss.hpp): logsumexp in the accumulator Acc, the gradient g / rows (softmax - one
// hot) in the arithmetic R. Include only from .cu translation units.
//
//   precis::cuda::cross_entropy_forward<float>(stream, "precis::cross_entropy", logits, labels, lse, loss);
//   precis::cuda::cross_entropy_backward<float>(stream, "precis::cross_entropy", gloss, logits, labels, lse, glogits, false);
//
// Each row is one warp's: the maximum by a butterfly of maxima, then lane l adds
// exp(x_j - max) for j = l, l + 32, ... in order and the lane sums are added pairwise, so a
// loss gives the same bits on every run. The mean over rows is one warp's sum in the same
// order. Labels are device int64 values; the host checks them where it has them
// (check_labels), and a label outside [0, classes) on the device gives a NaN loss and NaN
// gradients in its row rather than reading outside the row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/elementwise.cuh"

namespace precis::cuda {

namespace loss_detail {

template <class V, class X>
__device__ V row_lse(const X* row, index_t k, index_t stride, int lane) {
  V m = -V(INFINITY);
  for (index_t j = lane; j < k; j += 32) {
    const V v = ew_detail::load<V>(row + j * stride);
    m = v > m || v != v ? v : m;  // NaN propagates
  }
  for (int w = 16; w > 0; w /= 2) {
    const V o = acc_math::shfl_xor(m, w);
    m = o > m || o != o ? o : m;
  }
  if (m == V(INFINITY) || m == -V(INFINITY) || m != m) return m;  // lse = max there
  V s = 0;
  for (index_t j = lane; j < k; j += 32) s += acc_math::exp(V(ew_detail::load<V>(row + j * stride) - m));
  for (int w = 16; w > 0; w /= 2) s += acc_math::shfl_xor(s, w);
  return m + acc_math::log(s);
}

/// A warp per row: the row's logsumexp into lse, its term (lse - x[label]) into terms; a second
/// launch takes the terms' mean (a fixed order, independent of the grid).
template <class Acc, class X>
__global__ void forward_rows(const X* x, index_t rows, index_t k, index_t s0, index_t s1, const std::int64_t* labels, Acc* lse,
                             Acc* terms) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto warps = static_cast<index_t>(gridDim.x) * (blockDim.x / 32);
  for (index_t i = static_cast<index_t>((blockIdx.x * blockDim.x + threadIdx.x) / 32); i < rows; i += warps) {
    using V = acc_t<Acc>;
    const X* row = x + i * s0;
    const V l = row_lse<V>(row, k, s1, lane);
    if (lane == 0) {
      const std::int64_t c = labels[i];
      ew_detail::store(lse + i, l);
      ew_detail::store(terms + i, (c >= 0 && c < k) ? V(l - ew_detail::load<V>(row + c * s1)) : V(NAN));
    }
  }
}

/// loss = mean of the terms: one warp, lanes in order, then pairwise.
template <class Acc, class O>
__global__ void mean_of(const Acc* terms, index_t rows, O* loss) {
  using V = acc_t<Acc>;
  const int lane = static_cast<int>(threadIdx.x);
  V s = 0;
  for (index_t i = lane; i < rows; i += 32) s += ew_detail::load<V>(terms + i);
  for (int w = 16; w > 0; w /= 2) s += acc_math::shfl_down(s, w);
  if (lane == 0) ew_detail::store(loss, V(s / V(rows)));
}

template <class R, class G, class X, class Acc, class GX>
__global__ void backward_rows(const G* gloss, const X* x, index_t rows, index_t k, index_t s0, index_t s1, const std::int64_t* labels,
                              const Acc* lse, GX* gx, index_t g0, index_t g1, bool fresh) {
  const R g = R(ew_detail::load<R>(gloss) / R(static_cast<double>(rows)));
  const index_t n = rows * k;
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    const index_t i = t / k, j = t % k;
    const std::int64_t c = labels[i];
    const R p = ::exp(R(ew_detail::load<R>(x + i * s0 + j * s1) - ew_detail::load<R>(lse + i)));
    const R d = (c >= 0 && c < k) ? acc_math::mul_rn(g, j == c ? R(p - R(1)) : p) : static_cast<R>(NAN);
    GX* out = gx + i * g0 + j * g1;
    ew_detail::store(out, fresh ? d : acc_math::add_rn(ew_detail::load<R>(out), d));
  }
}

/// nll's loss: one warp, lane l adding -x[i, labels[i]] for rows i = l, l + 32, ... in order,
/// then the lanes pairwise; divided by the rows.
template <class Acc, class X, class O>
__global__ void nll_forward_kernel(const X* x, index_t rows, index_t s0, index_t s1, const std::int64_t* labels, O* loss) {
  using V = acc_t<Acc>;
  const int lane = static_cast<int>(threadIdx.x);
  V s = 0;
  for (index_t i = lane; i < rows; i += 32) s += -ew_detail::load<V>(x + i * s0 + labels[i] * s1);
  for (int w = 16; w > 0; w /= 2) s += acc_math::shfl_down(s, w);
  if (lane == 0) ew_detail::store(loss, V(s / V(rows)));
}

/// nll's gradient: a thread per row, gx[i, labels[i]] -= gloss / rows in R.
template <class R, class G, class GX>
__global__ void nll_backward_kernel(const G* gloss, index_t rows, const std::int64_t* labels, GX* gx, index_t g0, index_t g1) {
  const R g = R(ew_detail::load<R>(gloss) / R(static_cast<double>(rows)));
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += step) {
    GX* out = gx + i * g0 + labels[i] * g1;
    ew_detail::store(out, R(ew_detail::load<R>(out) - g));
  }
}

}  // namespace loss_detail

/// Throws precis::invalid_argument naming `op` when a label is outside [0, classes); for labels
/// the host holds before copying them to the device.
inline void check_labels(const char* op, std::span<const std::int64_t> labels, index_t classes) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw invalid_argument(std::string(op) + ": label " + std::to_string(labels[i]) + " at row " + std::to_string(i) +
                             "; expected 0 <= label < " + std::to_string(classes));
    }
  }
}

/// loss[0] = mean over rows of logsumexp(x[i, :]) - x[i, labels[i]], in Acc; lse[i] keeps each
/// row's logsumexp for the backward, `terms` is Acc workspace of `rows` elements. x [rows,
/// classes] of any strides; labels, lse and terms dense device arrays of `rows` elements.
template <class Acc, class O, class X>
void cross_entropy_forward(cudaStream_t stream, const char* op, const DeviceView<X>& x, const std::int64_t* labels, Acc* lse,
                           Acc* terms, const DeviceView<O>& loss) {
  static_assert(acc_format<Acc>, "precis::cuda::cross_entropy: Acc is double, float, precis::half or precis::bfloat16");
  if (x.rank() != 2 || x.shape()[0] < 1 || x.shape()[1] < 1 || loss.size() != 1) {
    throw shape_error(std::string(op) + ": logits " + x.shape().str() + " and a loss of shape " + loss.shape().str() +
                      "; expected logits [rows >= 1, classes >= 1] and one loss element");
  }
  const index_t rows = x.shape()[0], k = x.shape()[1];
  const auto blocks = static_cast<unsigned>(std::min<index_t>((rows * 32 + 255) / 256, 65535));
  loss_detail::forward_rows<Acc><<<blocks, 256, 0, stream>>>(x.data(), rows, k, x.strides()[0], x.strides()[1], labels, lse, terms);
  check(cudaGetLastError(), std::string(op) + ": launch of the row kernel");
  loss_detail::mean_of<Acc><<<1, 32, 0, stream>>>(terms, rows, loss.data());
  check(cudaGetLastError(), std::string(op) + ": launch of the mean kernel");
}

/// gx (+)= gloss / rows * (softmax(x[i, :]) - onehot(labels[i])), in R, rounded once into gx's
/// format: assigned when `fresh`, added otherwise. lse from the forward.
template <class R, class G, class X, class Acc, class GX>
void cross_entropy_backward(cudaStream_t stream, const char* op, const DeviceView<G>& gloss, const DeviceView<X>& x,
                            const std::int64_t* labels, const Acc* lse, const DeviceView<GX>& gx, bool fresh) {
  static_assert(std::is_same_v<R, float> || std::is_same_v<R, double>, "precis::cuda::cross_entropy: R is float or double");
  if (x.rank() != 2 || gx.shape() != x.shape() || gloss.size() != 1) {
    throw shape_error(std::string(op) + ": logits " + x.shape().str() + ", their gradient " + gx.shape().str() +
                      " and the loss's gradient " + gloss.shape().str() + "; expected equal logits shapes and one element");
  }
  const index_t n = x.size();
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((n + 255) / 256, 65535));
  loss_detail::backward_rows<R><<<blocks, 256, 0, stream>>>(gloss.data(), x.data(), x.shape()[0], x.shape()[1], x.strides()[0],
                                                             x.strides()[1], labels, lse, gx.data(), gx.strides()[0],
                                                             gx.strides()[1], fresh);
  check(cudaGetLastError(), std::string(op) + ": launch of the gradient kernel");
}

/// loss[0] = the mean over rows of -x[i, labels[i]] in Acc (x [rows, classes], any strides;
/// labels on the device, checked where the host had them), on `stream`.
template <class Acc, class O, class X>
void nll_forward(cudaStream_t stream, const DeviceView<X>& x, const std::int64_t* labels, const DeviceView<O>& loss) {
  static_assert(acc_format<Acc>, "precis::cuda::nll: Acc is double, float, precis::half or precis::bfloat16");
  if (x.rank() != 2 || x.shape()[0] < 1 || loss.size() != 1) {
    throw shape_error("precis::nll: input " + x.shape().str() + " and a loss of shape " + loss.shape().str() +
                      "; expected [rows >= 1, classes] and one loss element");
  }
  loss_detail::nll_forward_kernel<Acc><<<1, 32, 0, stream>>>(x.data(), x.shape()[0], x.strides()[0], x.strides()[1], labels, loss.data());
  check(cudaGetLastError(), "precis::nll: launch of the loss kernel");
}
/// gx[i, labels[i]] -= gloss / rows in R, rounded once, on `stream`.
template <class R, class G, class GX>
void nll_backward(cudaStream_t stream, const DeviceView<G>& gloss, const std::int64_t* labels, const DeviceView<GX>& gx) {
  if (gx.rank() != 2 || gloss.size() != 1) {
    throw shape_error("precis::nll: a gradient " + gx.shape().str() + " and the loss's gradient " + gloss.shape().str() +
                      "; expected [rows, classes] and one element");
  }
  const index_t rows = gx.shape()[0];
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((rows + 255) / 256, 65535));
  loss_detail::nll_backward_kernel<R><<<blocks, 256, 0, stream>>>(gloss.data(), rows, labels, gx.data(), gx.strides()[0], gx.strides()[1]);
  check(cudaGetLastError(), "precis::nll: launch of the gradient kernel");
}

}  // namespace precis::cuda
