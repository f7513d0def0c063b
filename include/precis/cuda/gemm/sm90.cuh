// Tensor-core GEMM for sm_90a (H100, H200): warpgroup MMA (wgmma) fed by the tensor memory
// accelerator (TMA), warp-specialized, persistent.
//
// A block of three warpgroups owns a 128 x 256 tile of C at a time: warpgroup 0 is the
// producer (one thread issues TMA copies of 128-byte-wide K slices of A and B into a
// four-stage ring of shared memory, each stage guarded by a "full" and an "empty" mbarrier);
// warpgroups 1 and 2 are consumers, each computing 64 x 256 of the tile with m64n256 wgmma
// instructions straight from shared memory (accumulators: 128 fp32 registers per thread).
// Register budgets are moved from the producer to the consumers with setmaxnreg. Blocks stay
// resident and walk the tiles in groups of 8 tile rows (so concurrently computed tiles share
// operand panels in L2); the producer runs ahead into the next tile while the consumers
// finish the last one.
//
// With ClusterM = 2 two blocks on neighbouring tile rows form a cluster that shares the B
// panel: each loads half of it and multicasts it into both blocks' shared memory, halving B's
// traffic from L2. A stage is free only when the consumers of both blocks have released it,
// so each consumer warpgroup arrives on the empty barrier of every block in the cluster.
//
// Operands are K-major with 16-byte aligned rows (the dispatcher stages any other layout);
// TMA zero-fills rows and K past the edges, and the epilogue writes only inside C.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "precis/cuda/detail/ptx.cuh"
#include "precis/cuda/gemm/epilogue.cuh"
#include "precis/cuda/gemm/tensor_op.cuh"

namespace precis::cuda::detail {

struct sm90_tile {
  static constexpr int bm = 128, bn = 256, bk_bytes = 128, stages = 4, threads = 384;
  static constexpr int a_bytes = bm * bk_bytes, b_bytes = bn * bk_bytes, stage_bytes = a_bytes + b_bytes;
  /// Stages, their barriers, and slack to align the ring to 1024 bytes (128-byte swizzling).
  static constexpr int smem_bytes = stages * stage_bytes + 2 * stages * 8 + 1024;
  /// Tile rows (of clusters) per group in the tile order.
  static constexpr int group_rows = 8;
};

template <tc_kind K>
__device__ __forceinline__ void sm90_wgmma(float (&d)[128], std::uint64_t da, std::uint64_t db, int scale_d) {
  if constexpr (K == tc_kind::f16) ptx::wgmma_m64n256_f16(d, da, db, scale_d);
  else if constexpr (K == tc_kind::bf16) ptx::wgmma_m64n256_bf16(d, da, db, scale_d);
  else if constexpr (K == tc_kind::e4m3) ptx::wgmma_m64n256_e4m3(d, da, db, scale_d);
  else ptx::wgmma_m64n256_e5m2(d, da, db, scale_d);
}

/// Tile t of the persistent walk -> (cluster tile row, tile column), in groups of
/// group_rows cluster rows that sweep all tile columns.
__device__ __forceinline__ void sm90_tile_of(int t, int rows, int cols, int& tm, int& tn) {
  const int per_group = sm90_tile::group_rows * cols;
  const int g = t / per_group, first = g * sm90_tile::group_rows;
  const int in_group = rows - first < sm90_tile::group_rows ? rows - first : sm90_tile::group_rows;
  const int r = t - g * per_group;
  tm = first + r % in_group;
  tn = r / in_group;
}

/// C (through ep) = A B, A described by tma_a as (k, m) with box (bk, 128) and B (given as its
/// transpose, n rows of k) by tma_b with box (bk, 128). Grid: a multiple of ClusterM blocks of
/// 384 threads, at most the number that can be resident; dynamic shared memory
/// sm90_tile::smem_bytes.
template <tc_kind K, int ClusterM>
__global__ void __launch_bounds__(sm90_tile::threads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b, int kblocks,
                     epilogue_desc<float> ep) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = sm90_tile;
  constexpr int bk = T::bk_bytes / tc_bytes(K);  // K elements per stage
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t bars = base + T::stages * T::stage_bytes;
  const auto sa = [&](int s) { return base + static_cast<std::uint32_t>(s) * T::a_bytes; };
  const auto sb = [&](int s) { return base + T::stages * T::a_bytes + static_cast<std::uint32_t>(s) * T::b_bytes; };
  const auto full = [&](int s) { return bars + static_cast<std::uint32_t>(s) * 8; };
  const auto empty = [&](int s) { return bars + static_cast<std::uint32_t>(T::stages + s) * 8; };

  const int wg = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
  const int rank = ClusterM > 1 ? static_cast<int>(ptx::cluster_ctarank()) : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::stages; ++s) {
      ptx::mbar_init(full(s), 1);
      ptx::mbar_init(empty(s), 2 * ClusterM);  // one arrival per consumer warpgroup per block
    }
    ptx::fence_mbarrier_init();
  }
  if constexpr (ClusterM > 1) ptx::cluster_sync();
  else __syncthreads();

  const int tiles_m = static_cast<int>((ep.m + T::bm - 1) / T::bm), tiles_n = static_cast<int>((ep.n + T::bn - 1) / T::bn);
  const int rows = (tiles_m + ClusterM - 1) / ClusterM;
  const int total = rows * tiles_n;
  const int cluster = static_cast<int>(blockIdx.x) / ClusterM, clusters = static_cast<int>(gridDim.x) / ClusterM;

  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (tid == 0) {
      ptx::tma_prefetch_descriptor(&tma_a);
      ptx::tma_prefetch_descriptor(&tma_b);
      int stage = 0;
      std::uint32_t phase = 0;
      for (int t = cluster; t < total; t += clusters) {
        int tm, tn;
        sm90_tile_of(t, rows, tiles_n, tm, tn);
        // a block past the last tile row (odd tile rows in a pair) loads the last row again
        // and writes nothing
        const int tile_m = tm * ClusterM + rank < tiles_m ? tm * ClusterM + rank : tiles_m - 1;
        for (int kb = 0; kb < kblocks; ++kb) {
          ptx::mbar_wait(empty(stage), phase ^ 1);
          ptx::mbar_arrive_expect_tx(full(stage), T::stage_bytes);
          ptx::tma_load_2d(sa(stage), &tma_a, full(stage), kb * bk, tile_m * T::bm);
          if constexpr (ClusterM == 1) {
            ptx::tma_load_2d(sb(stage), &tma_b, full(stage), kb * bk, tn * T::bn);
            ptx::tma_load_2d(sb(stage) + T::b_bytes / 2, &tma_b, full(stage), kb * bk, tn * T::bn + T::bn / 2);
          } else {
            ptx::tma_load_2d_multicast(sb(stage) + static_cast<std::uint32_t>(rank) * (T::b_bytes / 2), &tma_b, full(stage),
                                       kb * bk, tn * T::bn + rank * (T::bn / 2), static_cast<std::uint16_t>(0x3));
          }
          if (++stage == T::stages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const int c = wg - 1;  // rows c*64 .. c*64+63 of the tile
    const auto release = [&](int s) {
      if (tid == 0) {
        if constexpr (ClusterM == 1) {
          ptx::mbar_arrive(empty(s));
        } else {
#pragma unroll
          for (int r = 0; r < ClusterM; ++r) ptx::mbar_arrive_cluster(empty(s), static_cast<std::uint32_t>(r));
        }
      }
    };
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    int stage = 0;
    std::uint32_t phase = 0;
    for (int t = cluster; t < total; t += clusters) {
      int tm, tn;
      sm90_tile_of(t, rows, tiles_n, tm, tn);
      const int tile_m = tm * ClusterM + rank;
      int prev = 0;
      for (int kb = 0; kb < kblocks; ++kb) {
        ptx::mbar_wait(full(stage), phase);
        const std::uint64_t da = ptx::wgmma_desc_k_sw128(sa(stage) + static_cast<std::uint32_t>(c) * 64 * T::bk_bytes);
        const std::uint64_t db = ptx::wgmma_desc_k_sw128(sb(stage));
        ptx::fence_operands(acc);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < T::bk_bytes / 32; ++kk) {
          // each step is 32 bytes of K: 2 in the descriptor's 16-byte address units
          sm90_wgmma<K>(acc, da + 2 * kk, db + 2 * kk, (kb > 0 || kk > 0) ? 1 : 0);
        }
        ptx::wgmma_commit();
        ptx::fence_operands(acc);
        ptx::wgmma_wait<1>();  // the previous stage's MMAs are done: release it
        ptx::fence_operands(acc);
        if (kb > 0) release(prev);
        prev = stage;
        if (++stage == T::stages) {
          stage = 0;
          phase ^= 1;
        }
      }
      ptx::wgmma_wait<0>();
      ptx::fence_operands(acc);
      release(prev);
      if (tile_m < tiles_m) {
        // accumulator fragment: warp w holds rows 16w..16w+15; register 4i+{0,1} is at
        // (lane/4, 8i + 2(lane%4) + {0,1}), register 4i+{2,3} eight rows below
        const int warp = tid / 32, lane = tid % 32;
        const index_t i0 = static_cast<index_t>(tile_m) * T::bm + c * 64 + warp * 16 + lane / 4;
        const index_t j0 = static_cast<index_t>(tn) * T::bn + 2 * (lane % 4);
        with_epilogue(ep, [&](auto store) {
#pragma unroll
          for (int i = 0; i < 32; ++i) {
            store(i0, j0 + 8 * i, acc[4 * i], acc[4 * i + 1]);
            store(i0 + 8, j0 + 8 * i, acc[4 * i + 2], acc[4 * i + 3]);
          }
        });
      }
    }
  }
  // No block may leave while another in its cluster can still write into its shared memory
  // or arrive on its barriers.
  if constexpr (ClusterM > 1) ptx::cluster_sync();
#endif
}

}  // namespace precis::cuda::detail
