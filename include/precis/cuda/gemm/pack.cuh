// Staging copy for the tensor-core kernels, which read each operand K-major (rows of K
// contiguous elements) from 16-byte aligned rows. An operand that is not already so (a
// transposed view, an odd leading dimension, a format the kernel does not read directly) is
// copied once into a K-major buffer, converted on the way: one pass over the operand, O(mk)
// against the product's O(mnk).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "precis/cuda/gemm/epilogue.cuh"

namespace precis::cuda::detail {

/// The value stored at p rounded once to Op (nearest even; void: no rounding), stored as a
/// Dst value, which must hold every Op value exactly.
template <class Dst, class Op, class Src>
__device__ __forceinline__ void convert_one(const Src* p, Dst* q) {
  if constexpr (std::is_same_v<Dst, Src> && (std::is_void_v<Op> || std::is_same_v<Op, Src>)) {
    *q = *p;
  } else {
    using W = std::conditional_t<std::is_same_v<decoded_t<Src>, double>, double, float>;
    const W x = decode<W>(p);
    if constexpr (std::is_void_v<Op> || std::is_same_v<Op, Dst>) {
      round_store(q, x, rounding::nearest_even, overflow::infinity, 0);
    } else {
      const auto ob = round_bits<Op>(x, rounding::nearest_even, overflow::infinity, 0);
      round_store(q, decode<W>(reinterpret_cast<const Op*>(&ob)), rounding::nearest_even, overflow::infinity, 0);
    }
  }
}

/// dst[r * ldd + c] = src(r, c) (rounded to Op) for r < rows, c < cols, where
/// src(r, c) = src[r * rs + c * cs].
/// A 32 x 32 tile per block of 32 x 8 threads, transposed through shared memory when the
/// source is contiguous along rows (cs != 1), so both sides are read and written coalesced.
template <class Dst, class Op, class Src>
__global__ void __launch_bounds__(256) pack_kernel(const Src* src, index_t rs, index_t cs, index_t rows, index_t cols,
                                                   Dst* dst, index_t ldd) {
  // raw words: Eigen's half and bfloat16 have constructors, which __shared__ arrays may not
  using Word = std::conditional_t<std::is_same_v<Dst, float> || std::is_same_v<Dst, double>, Dst, bits_of_t<Dst>>;
  __shared__ Word tile[32][33];
  const index_t r0 = static_cast<index_t>(blockIdx.y) * 32, c0 = static_cast<index_t>(blockIdx.x) * 32;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  if (cs == 1 || rs != 1) {
    for (int y = ty; y < 32; y += 8) {
      const index_t r = r0 + y, c = c0 + tx;
      if (r < rows && c < cols) convert_one<Dst, Op>(src + r * rs + c * cs, dst + r * ldd + c);
    }
    return;
  }
  // column-major source: read down the columns, write along the rows
  for (int y = ty; y < 32; y += 8) {
    const index_t r = r0 + tx, c = c0 + y;
    if (r < rows && c < cols) convert_one<Dst, Op>(src + r + c * cs, reinterpret_cast<Dst*>(&tile[tx][y]));
  }
  __syncthreads();
  for (int y = ty; y < 32; y += 8) {
    const index_t r = r0 + y, c = c0 + tx;
    if (r < rows && c < cols) *reinterpret_cast<Word*>(dst + r * ldd + c) = tile[y][tx];
  }
}

}  // namespace precis::cuda::detail
