// Sums over broadcast axes on the device: to = sum of `from` over the axes along which `to`
// broadcasts to `from`'s shape (a bias's gradient from its output's, a row of sums, a total),
// accumulated in Acc and rounded once into to's format. Include only from .cu translation units.
//
//   precis::cuda::sum_into<float>(stream, "precis::linear", gb.view(), gy.view());  // [n] from [m, n]
//
// Two orders, each depending only on the shapes, so a sum gives the same bits on every run and
// every GPU:
// - Column sums (the kept elements contiguous in `from` and the reduced axes one stride apart:
//   a bias gradient [n] from [m, n]): the m rows are cut into S chunks of ceil(m / S) rows, S =
//   min(32, max(1, floor(m / 512))). In a chunk, each column has 32 lanes (one per warp of a
//   block of 32 x 32 threads, a warp reading 32 neighbouring columns at once, coalesced): lane
//   l adds the chunk's rows l, l + 32, l + 64, ... in order, then the 32 lane sums are added
//   pairwise (five levels), then the S chunk sums pairwise (ceil(log2 S) levels). A term goes
//   through at most ceil(m / (32 S)) + 5 + ceil(log2 S) additions, which never exceeds the
//   bound below (each chunk has at least 512 rows when S > 1).
// - Otherwise every output element is one warp's: lane l adds the elements l, l + 32, l + 64,
//   ... of its reduced set in order, then the 32 lane sums are added pairwise (five levels).
// Each element goes through at most ceil(m / 32) + 5 additions (m the number of terms), so the
// error is at most gamma(ceil(m / 32) + 5) times the sum of the terms' magnitudes (Higham 2002,
// 4.2), plus the final rounding into to's format.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <optional>
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

/// The value of an accumulator as a word of shared or global memory, and back.
template <class V>
using word_t = std::conditional_t<std::is_same_v<V, double>, double, float>;
template <class V>
__device__ word_t<V> to_word(V v) {
  if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) return v;
  else return v.value();
}
template <class V>
__device__ V from_word(word_t<V> w) {
  if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) return w;
  else return V::exact(w);
}

/// Column sums: from is m rows of n columns (row r, column c at r * ld + c); block (x, z)
/// sums columns 32x .. 32x + 31 over chunk z's rows (see the file comment) with 32 x 32
/// threads, and writes the chunk's sums to ws[z * n + c] (words of the accumulator), or, with
/// one chunk, rounds them into to[c * to_stride].
template <class Acc, class O, class S>
__global__ void __launch_bounds__(1024) column_sum_kernel(O* to, index_t to_stride, word_t<acc_t<Acc>>* ws, const S* from,
                                                          index_t ld, index_t m, index_t n, index_t chunk_rows) {
  using V = acc_t<Acc>;
  __shared__ word_t<V> part[32][33];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const index_t c = static_cast<index_t>(blockIdx.x) * 32 + tx;
  const index_t r0 = static_cast<index_t>(blockIdx.y) * chunk_rows;
  const index_t r1 = r0 + chunk_rows < m ? r0 + chunk_rows : m;
  V acc = 0;
  if (c < n) {
    const S* p = from + c;
#pragma unroll 4
    for (index_t r = r0 + ty; r < r1; r += 32) acc += ew_detail::load<V>(p + r * ld);
  }
  part[ty][tx] = to_word(acc);
  __syncthreads();
  // the 32 lane sums of column tx, pairwise: (0+16), (1+17), ... then (0+8), ... (fixed order)
  for (int w = 16; w > 0; w /= 2) {
    if (ty < w) part[ty][tx] = to_word(from_word<V>(part[ty][tx]) + from_word<V>(part[ty + w][tx]));
    __syncthreads();
  }
  if (ty == 0 && c < n) {
    if (gridDim.y == 1) ew_detail::store(to + c * to_stride, from_word<V>(part[0][tx]));
    else ws[static_cast<index_t>(blockIdx.y) * n + c] = part[0][tx];
  }
}

/// to[c * to_stride] = the S chunk sums of column c (ws[z * n + c]) added pairwise: (z, z + h)
/// for h = 16, 8, 4, 2, 1 over the chunks present (a warp per column, lane z holding chunk z).
template <class Acc, class O>
__global__ void __launch_bounds__(256) column_sum_chunks_kernel(O* to, index_t to_stride, const word_t<acc_t<Acc>>* ws, index_t n,
                                                                int chunks) {
  using V = acc_t<Acc>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const index_t c = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (c >= n) return;  // whole warps leave together
  V v = lane < chunks ? from_word<V>(ws[lane * n + c]) : V(0);
  for (int h = 16; h > 0; h /= 2) {
    const V other = acc_math::shfl_down(v, h);
    if (lane + h < chunks) v = v + other;
  }
  if (lane == 0) ew_detail::store(to + c * to_stride, v);
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
  // column sums: one kept axis, contiguous in from, and reduced axes that are one stride
  bool rows_one_stride = l.kept == 1 && l.kept_from[0] == 1 && l.reduced >= 1;
  for (int d = 0; rows_one_stride && d + 1 < l.reduced; ++d) rows_one_stride = l.red_from[d] == l.red_from[d + 1] * l.red_shape[d + 1];
  if (rows_one_stride) {
    const index_t m = l.m, n = l.kept_shape[0], ld = l.red_from[l.reduced - 1];
    const index_t chunks = std::min<index_t>(32, std::max<index_t>(1, m / 512));
    const index_t chunk_rows = (m + chunks - 1) / chunks;
    using Word = reduce_detail::word_t<acc_t<Acc>>;
    std::optional<detail::stream_scratch> ws;
    if (chunks > 1) ws.emplace(static_cast<std::size_t>(chunks * n) * sizeof(Word), stream);
    Word* w = chunks > 1 ? static_cast<Word*>(ws->get()) : nullptr;
    const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks)), block(32, 32);
    reduce_detail::column_sum_kernel<Acc><<<grid, block, 0, stream>>>(to.data(), l.kept_to[0], w, from.data(), ld, m, n, chunk_rows);
    check(cudaGetLastError(), std::string(op) + ": launch of the column sum kernel (" + std::to_string(n) + " sums of " +
                                  std::to_string(m) + ")");
    if (chunks > 1) {
      reduce_detail::column_sum_chunks_kernel<Acc><<<static_cast<unsigned>((n * 32 + 255) / 256), 256, 0, stream>>>(
          to.data(), l.kept_to[0], w, n, static_cast<int>(chunks));
      check(cudaGetLastError(), std::string(op) + ": launch of the column sum kernel's second pass (" + std::to_string(n) +
                                    " sums of " + std::to_string(chunks) + " chunks)");
    }
    return;
  }
  const int threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((outputs * 32 + threads - 1) / threads, 65535));
  reduce_detail::sum_kernel<Acc><<<blocks, threads, 0, stream>>>(to.data(), from.data(), l, outputs);
  check(cudaGetLastError(), std::string(op) + ": launch of the sum kernel (" + std::to_string(outputs) + " sums of " +
                                std::to_string(l.m) + ")");
}

}  // namespace precis::cuda
