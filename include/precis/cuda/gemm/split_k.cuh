// K in slices for products with few tiles of C, and the epilogue in a kernel of its own: each
// slice's partial product goes to a workspace, and one more kernel adds the slices and runs the
// epilogue.
//
// A product whose C is a few tiles leaves most SMs idle while a few blocks walk all of K (a
// linear layer's forward at batch 128 is one 128 x 256 tile of the sm90 kernel: 1 of 132
// SMs). Split, slice z of S computes A[:, Kz] B[Kz, :] over its own range Kz of K, with the
// kernel's own accumulation, and writes it in the epilogue's arithmetic W (fp32; fp64 for a
// double accumulator) to slice z of a workspace; split_k_reduce_kernel then forms
// ((P_0 + P_1) + P_2) + ... in W, in slice order, and finishes C through the call's epilogue
// (alpha, beta, bias, activation, rounding), so C is rounded once as without the split.
//
// The slices depend on the shape and the kernel alone, never on the device's SM count, so a
// kernel gives the same bits for the same call on every GPU. The error bound stays that of
// blockwise summation: each slice's sum has its kernel's bound over its length, and the S
// slice sums add at W's unit roundoff (S <= 32). The partial sums cost S m n words written and
// read again, so S is also held to the operands' bytes over m n words: a product whose C is
// as large as its operands (4096 x 784 @ 784 x 256) keeps K whole.
//
// The same workspace, with one slice, takes the epilogue out of the GEMM kernels where it
// reads memory for each element (C under beta != 0, as a gradient accumulates; a bias in a
// format the plain store does not read) or C has few tiles and the epilogue is not the plain
// store: the kernels' general epilogue is out of line and finishes one element after another,
// each load of C waiting on the last store (in a training step on an H200, 82 us for a weight
// gradient of 8 tiles against 8.7 in the separate kernel, which has a thread for every pair of
// C's elements).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "precis/cuda/gemm/epilogue.cuh"

namespace precis::cuda::detail {

/// Most slices a product is cut into, and the blocks of C a split aims for.
inline constexpr index_t split_k_max = 32, split_k_target_blocks = 128;

/// How many slices a product of `tiles` tiles of C and `units` K blocks of its kernel is cut
/// into, at least `min_units` K blocks a slice and at most `by_traffic` (the operands' bytes
/// over C's in the workspace): 1 when C has tiles enough to fill the device (64 or more) or K
/// is short; `forced` > 0 asks for that many (clipped to one K block a slice). The returned
/// count leaves no slice empty.
inline index_t split_k_slices(index_t tiles, index_t units, index_t min_units, index_t by_traffic,
                              int forced) {
  index_t s = 1;
  if (forced > 0) {
    s = forced;
  } else if (tiles < split_k_target_blocks / 2) {
    s = (split_k_target_blocks + tiles - 1) / tiles;
    if (s > units / min_units) s = units / min_units;
    if (s > by_traffic) s = by_traffic;
    if (s > split_k_max) s = split_k_max;
  }
  if (s > units) s = units;
  if (s <= 1) return 1;
  const index_t per = (units + s - 1) / s;  // K blocks a slice
  return (units + per - 1) / per;
}

/// K blocks per slice for `slices` slices of `units` K blocks.
inline index_t split_k_units_per_slice(index_t units, index_t slices) {
  return (units + slices - 1) / slices;
}

/// Slices the workspace's traffic allows: the operands' bytes (m k elements of `a_bytes`, n k
/// of `b_bytes`) over C's in W (m n words of `w_bytes`).
inline index_t split_k_by_traffic(index_t m, index_t n, index_t k, index_t a_bytes, index_t b_bytes,
                                  index_t w_bytes) {
  return (m * a_bytes + n * b_bytes) * k / (m * n * w_bytes);
}

/// Whether the epilogue runs in split_k_reduce_kernel rather than in the GEMM kernel: after
/// slices of K; where it reads C for each element (beta != 0) or a bias the plain store does
/// not read; or where C has few tiles and the epilogue is more than the plain store. (The plain
/// store adds a bias and applies relu inline, so a linear layer's forward stays one kernel.)
template <class W>
bool split_k_separate_epilogue(index_t slices, index_t tiles, const epilogue_desc<W>& ep) {
  return slices > 1 || ep.beta != W(0) || (ep.bias != nullptr && !ep.plain) ||
         (!ep.plain && tiles < split_k_target_blocks / 2);
}

/// Elements between slices in the workspace: m n rounded up to 64 (so paired stores stay aligned).
inline index_t split_k_stride(index_t m, index_t n) { return (m * n + 63) / 64 * 64; }

/// C (through ep) from `slices` partial products in ws (each m x n, row-major, `stride`
/// elements apart), added in slice order in W. One thread per pair of columns (j, j + 1),
/// the epilogue inlined (ep read where the launch put it, never copied).
template <class W>
__global__ void __launch_bounds__(256)
    split_k_reduce_kernel(const W* ws, index_t stride, int slices,
                          const __grid_constant__ epilogue_desc<W> ep) {
  const index_t per_row = (ep.n + 1) / 2;
  const index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= ep.m * per_row) return;
  const index_t i = t / per_row, j = 2 * (t - i * per_row);
  const W* p = ws + i * ep.n + j;
  W v0, v1;
  if (ep.n % 2 == 0) {  // pairs of W aligned (the workspace and its slices are)
    using W2 = std::conditional_t<std::is_same_v<W, double>, double2, float2>;
    W2 v = *reinterpret_cast<const W2*>(p);
    for (int s = 1; s < slices; ++s) {
      p += stride;
      const W2 u = *reinterpret_cast<const W2*>(p);
      v.x += u.x;
      v.y += u.y;
    }
    v0 = v.x, v1 = v.y;
  } else {
    const bool second = j + 1 < ep.n;
    v0 = p[0], v1 = second ? p[1] : W(0);
    for (int s = 1; s < slices; ++s) {
      p += stride;
      v0 += p[0];
      if (second) v1 += p[1];
    }
  }
  with_epilogue<true>(ep, [&](auto store) { store(i, j, v0, v1); });
}

}  // namespace precis::cuda::detail
