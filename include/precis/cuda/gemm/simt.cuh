// The device GEMM's general kernel: any input formats, any strides, accumulation in float,
// double, half or bfloat16 on the CUDA cores (no tensor cores). It is the fallback for every
// combination the tensor-core kernels do not take (minifloats, mixed formats, 16-bit or fp64
// accumulation) and the reference the others are tested beside.
//
// Each operand is decoded exactly, rounded to the operand format when one is named (tf32 ...),
// then converted to the accumulator. The accumulator's arithmetic is Acc's own: fused
// multiply-add for float and double; for half and bfloat16 the product and the sum are each
// rounded to Acc (computed in fp32 and rounded once, which is exact emulation of the format's
// correctly rounded operations since fp32 has at least 2t+2 bits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/gemm/epilogue.cuh"

namespace precis::cuda::detail {

template <class Acc>
inline constexpr bool simt_accumulator = std::is_same_v<Acc, float> || std::is_same_v<Acc, double> ||
                                         std::is_same_v<Acc, precis::half> || std::is_same_v<Acc, precis::bfloat16>;

/// How the kernel holds an Acc value: in the fp32 or fp64 register it is exact in.
template <class Acc>
using acc_reg_t = std::conditional_t<std::is_same_v<Acc, double>, double, float>;

/// x rounded to the accumulator's format (identity for float and double).
template <class Acc, class W>
__device__ __forceinline__ acc_reg_t<Acc> to_acc(W x) {
  if constexpr (std::is_same_v<Acc, double>) {
    return static_cast<double>(x);
  } else if constexpr (std::is_same_v<Acc, float>) {
    return static_cast<float>(x);  // from float: exact; from double: round to nearest even
  } else {
    return acc_detail::round_to<Acc>(x);  // once, from the float or the double (accumulator.cuh)
  }
}

/// acc + a * b in Acc's arithmetic.
template <class Acc>
__device__ __forceinline__ acc_reg_t<Acc> multiply_add(acc_reg_t<Acc> acc, acc_reg_t<Acc> a, acc_reg_t<Acc> b) {
  if constexpr (std::is_same_v<Acc, float>) return __fmaf_rn(a, b, acc);
  else if constexpr (std::is_same_v<Acc, double>) return __fma_rn(a, b, acc);
  else return to_acc<Acc>(__fadd_rn(acc, to_acc<Acc>(__fmul_rn(a, b))));
}

/// One stored operand value as the kernel multiplies it: decoded, rounded to the operand
/// format Op (void: none), then to Acc.
template <class Acc, class Op, class S>
__device__ __forceinline__ acc_reg_t<Acc> load_operand(const S* p) {
  using W = std::conditional_t<std::is_same_v<Acc, double> || std::is_same_v<decoded_t<S>, double>, double, float>;
  const W x = decode<W>(p);
  if constexpr (std::is_void_v<Op> || std::is_same_v<Op, S>) {
    return to_acc<Acc>(x);
  } else {
    using WO = std::conditional_t<std::is_same_v<Acc, double> || std::is_same_v<decoded_t<Op>, double>, double, float>;
    const auto ob = round_bits<Op>(x, rounding::nearest_even, overflow::infinity, 0);
    return to_acc<Acc>(decode<WO>(reinterpret_cast<const Op*>(&ob)));
  }
}

inline constexpr int simt_bm = 64, simt_bn = 64, simt_bk = 16, simt_threads = 256;

/// 64 x 64 tile of C per block of 256 threads, 4 x 4 per thread; operand tiles staged in
/// shared memory as Acc values. Grid: (ceil(n / 64), ceil(m / 64), slices): block slice z
/// multiplies K's range [z kslice, (z + 1) kslice) and finishes its C at ep.c + z c_slice_bytes
/// (one slice: kslice = k, c_slice_bytes = 0).
template <class Acc, class Op, class SA, class SB, class W>
__global__ void __launch_bounds__(simt_threads)
    simt_gemm_kernel(const SA* a, index_t rsa, index_t csa, const SB* b, index_t rsb, index_t csb,
                     index_t k, index_t kslice, index_t c_slice_bytes, epilogue_desc<W> ep) {
  using R = acc_reg_t<Acc>;
  {
    const index_t k0 = static_cast<index_t>(blockIdx.z) * kslice;
    a += k0 * csa;
    b += k0 * rsb;
    k = k - k0 < kslice ? k - k0 : kslice;
    ep.c = static_cast<char*>(ep.c) + static_cast<index_t>(blockIdx.z) * c_slice_bytes;
  }
  __shared__ R as[simt_bk][simt_bm + 1];
  __shared__ R bs[simt_bk][simt_bn + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const index_t i0 = static_cast<index_t>(blockIdx.y) * simt_bm, j0 = static_cast<index_t>(blockIdx.x) * simt_bn;
  R acc[4][4];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = R(0);
  for (index_t k0 = 0; k0 < k; k0 += simt_bk) {
    // consecutive threads walk K for A and N for B: coalesced for row-major operands
    for (int t = tid; t < simt_bm * simt_bk; t += simt_threads) {
      const int r = t / simt_bk, c = t % simt_bk;
      const index_t i = i0 + r, kk = k0 + c;
      as[c][r] = (i < ep.m && kk < k) ? load_operand<Acc, Op>(a + i * rsa + kk * csa) : R(0);
    }
    for (int t = tid; t < simt_bk * simt_bn; t += simt_threads) {
      const int r = t / simt_bn, c = t % simt_bn;
      const index_t kk = k0 + r, j = j0 + c;
      bs[r][c] = (kk < k && j < ep.n) ? load_operand<Acc, Op>(b + kk * rsb + j * csb) : R(0);
    }
    __syncthreads();
    const int kmax = static_cast<int>(k - k0 < simt_bk ? k - k0 : simt_bk);
    for (int kk = 0; kk < kmax; ++kk) {
      R av[4], bv[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) av[r] = as[kk][ty * 4 + r];
#pragma unroll
      for (int c = 0; c < 4; ++c) bv[c] = bs[kk][tx * 4 + c];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = multiply_add<Acc>(acc[r][c], av[r], bv[c]);
    }
    __syncthreads();
  }
  with_epilogue(ep, [&](auto store) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; c += 2) store(i0 + ty * 4 + r, j0 + tx * 4 + c, static_cast<W>(acc[r][c]), static_cast<W>(acc[r][c + 1]));
  });
}

}  // namespace precis::cuda::detail
