// Sums over broadcast axes on the device: to = sum of `from` over the axes along which `to`
// broadcasts to `from`'s shape (a bias's gradient from its output's, a row of sums, a total),
// accumulated in Acc and rounded once into to's format. Include only from .cu translation units.
//
//   precis::cuda::sum_into<float>(stream, "precis::linear", gb.view(), gy.view());  // [n] from [m, n]
//
// Every output element is one warp's: lane l adds the elements l, l + 32, l + 64, ... of its
// reduced set in order, then the 32 lane sums are added pairwise (five levels). The order
// depends only on the shapes, so a sum gives the same bits on every run and every GPU. Each
// element goes through at most ceil(m / 32) + 5 additions (m the number of terms), so the error
// is at most gamma(ceil(m / 32) + 5) times the sum of the terms' magnitudes (Higham 2002, 4.2),
// plus the final rounding into to's format.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <string>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/elementwise.cuh"

namespace precis::cuda {

namespace reduce_detail {

/// The output's shape (kept axes) and the reduced axes, with both operands' strides.
struct layout {
  int kept = 0, reduced = 0;
  index_t kept_shape[max_rank] = {};
  index_t kept_to[max_rank] = {};    // to's strides on the kept axes
  index_t kept_from[max_rank] = {};  // from's strides on the kept axes
  index_t red_shape[max_rank] = {};
  index_t red_from[max_rank] = {};
  index_t m = 1;                     // terms per output element
};

__device__ inline index_t offset(index_t i, int rank, const index_t* shape, const index_t* strides) {
  index_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

template <class Acc, class O, class S>
__global__ void sum_kernel(O* to, const S* from, layout l, index_t outputs) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto warp = static_cast<index_t>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const auto warps = static_cast<index_t>(gridDim.x) * (blockDim.x / 32);
  for (index_t o = warp; o < outputs; o += warps) {
    const S* base = from + offset(o, l.kept, l.kept_shape, l.kept_from);
    acc_t<Acc> acc = 0;
    for (index_t t = lane; t < l.m; t += 32) acc += ew_detail::load<acc_t<Acc>>(base + offset(t, l.reduced, l.red_shape, l.red_from));
    for (int w = 16; w > 0; w /= 2) acc += acc_math::shfl_down(acc, w);  // pairwise, fixed order
    if (lane == 0) ew_detail::store(to + offset(o, l.kept, l.kept_shape, l.kept_to), acc);
  }
}

}  // namespace reduce_detail

/// to = the sum of `from` over the axes along which to's shape broadcasts to from's (NumPy
/// rules; to's missing leading axes and its extent-1 axes), in Acc (double, float, or fp16 /
/// bf16 with every partial sum rounded into it: acc_t), rounded once into to's format; on
/// `stream`, asynchronously. Formats fp64, fp32, fp16, bf16. A to whose shape does not
/// broadcast to from's is a shape_error naming `op`; to overlapping from, or with a zero-stride
/// axis, an aliasing_error.
template <class Acc, class O, class S>
void sum_into(cudaStream_t stream, const char* op, const DeviceView<O>& to, const DeviceView<S>& from) {
  static_assert(acc_format<Acc>, "precis::cuda::sum_into: Acc is double, float, precis::half or precis::bfloat16");
  static_assert(!std::is_const_v<O>, "precis::cuda::sum_into: the output view must be writable");
  static_assert(ew_detail::format<O> && ew_detail::format<precis::detail::remove_const_t<S>>,
                "precis::cuda::sum_into: formats fp64, fp32, fp16, bf16");
  const Shape& fs = from.shape();
  const Shape& ts = to.shape();
  if (ts.rank() > fs.rank() || broadcast_shapes(ts, fs, op) != fs) {
    throw shape_error(std::string(op) + ": a sum into shape " + ts.str() + " from shape " + fs.str() +
                      "; expected a shape that broadcasts to the summed one");
  }
  for (int d = 0; d < ts.rank(); ++d) {
    if (ts[d] > 1 && to.strides()[d] == 0) {
      throw aliasing_error(std::string(op) + ": the output " + ts.str() + " has strides " + to.strides().str() +
                           "; expected no broadcast (zero-stride) axis in an output");
    }
  }
  if (may_overlap(DeviceView<const O>(to), from)) {
    throw aliasing_error(std::string(op) + ": the sum's output " + ts.str() + " overlaps its input " + fs.str());
  }
  reduce_detail::layout l;
  index_t outputs = 1;
  for (int d = 0; d < fs.rank(); ++d) {
    const int k = d - (fs.rank() - ts.rank());
    const bool kept = k >= 0 && ts[k] == fs[d];
    if (fs[d] == 1) continue;
    if (kept) {
      l.kept_shape[l.kept] = fs[d];
      l.kept_to[l.kept] = to.strides()[k];
      l.kept_from[l.kept] = from.strides()[d];
      ++l.kept;
      outputs *= fs[d];
    } else {
      l.red_shape[l.reduced] = fs[d];
      l.red_from[l.reduced] = from.strides()[d];
      ++l.reduced;
      l.m *= fs[d];
    }
  }
  if (outputs == 0 || ts.numel() == 0) return;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((outputs * 32 + threads - 1) / threads, 65535));
  reduce_detail::sum_kernel<Acc><<<blocks, threads, 0, stream>>>(to.data(), from.data(), l, outputs);
  check(cudaGetLastError(), std::string(op) + ": launch of the sum kernel (" + std::to_string(outputs) + " sums of " +
                                std::to_string(l.m) + ")");
}

}  // namespace precis::cuda
