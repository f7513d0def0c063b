// Tensor-core GEMM for sm_90a (H100, H200): warpgroup MMA (wgmma) fed by the tensor memory
// accelerator (TMA), warp-specialized, persistent.
//
// A block of three warpgroups owns a 128 x 256 tile of C at a time (128 x 128 for fp8):
// warpgroup 0 is the producer (one thread issues TMA copies of 128-byte-wide K slices of A
// and B into a ring of shared-memory stages, four for 16-bit operands and six for fp8, each
// guarded by a "full" and an "empty" mbarrier); warpgroups 1 and 2 are consumers, each
// computing 64 rows of the tile with m64n256 (m64n128 for fp8) wgmma instructions straight
// from shared memory, accumulating in fp32 registers.
// Register budgets are moved from the producer to the consumers with setmaxnreg. Blocks stay
// resident and walk the tiles in groups of 8 tile rows (so concurrently computed tiles share
// operand panels in L2); the producer runs ahead into the next tile while the consumers
// finish the last one.
//
// Blocks can form clusters of up to 2 x 2 neighbouring tiles that load each shared operand
// panel once and multicast it (see the kernel), cutting operand traffic from L2.
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

/// The tile of one kind: 128 x 256 for 16-bit operands (4 stages); 128 x 128 for fp8 (6
/// stages), whose consumers keep a 64 x 128 partial sum beside the fp32 accumulators.
template <tc_kind K>
struct sm90_tile {
  static constexpr bool promote = tc_fp8(K);
  static constexpr int bm = 128, bn = promote ? 128 : 256, bk_bytes = 128, threads = 384;
  static constexpr int stages = promote ? 6 : 4;
  static constexpr int a_bytes = bm * bk_bytes, b_bytes = bn * bk_bytes, stage_bytes = a_bytes + b_bytes;
  /// Stages, their barriers, and slack to align the ring to 1024 bytes (128-byte swizzling).
  static constexpr int smem_bytes = stages * stage_bytes + 2 * stages * 8 + 1024;
  /// Accumulator registers per consumer thread (a 64 x bn warpgroup tile).
  static constexpr int acc = bn / 2;
};

/// Tile rows (of clusters) per group in the tile order.
inline constexpr int sm90_group_rows = 8;

template <tc_kind K, int N>
__device__ __forceinline__ void sm90_wgmma(float (&d)[N], std::uint64_t da, std::uint64_t db, int scale_d) {
  if constexpr (K == tc_kind::f16) ptx::wgmma_m64n256_f16(d, da, db, scale_d);
  else if constexpr (K == tc_kind::bf16) ptx::wgmma_m64n256_bf16(d, da, db, scale_d);
  else if constexpr (K == tc_kind::e4m3) ptx::wgmma_m64n128_e4m3(d, da, db, scale_d);
  else ptx::wgmma_m64n128_e5m2(d, da, db, scale_d);
}

/// Tile t of the persistent walk -> (cluster tile row, tile column), in groups of
/// group_rows cluster rows that sweep all tile columns.
__device__ __forceinline__ void sm90_tile_of(int t, int rows, int cols, int& tm, int& tn) {
  const int per_group = sm90_group_rows * cols;
  const int g = t / per_group, first = g * sm90_group_rows;
  const int in_group = rows - first < sm90_group_rows ? rows - first : sm90_group_rows;
  const int r = t - g * per_group;
  tm = first + r % in_group;
  tn = r / in_group;
}

/// C (through ep) = A B, A described by tma_a as (k, m) with boxes of (bk, 128 / ClusterN) and
/// B (given as its transpose, n rows of k) by tma_b with boxes of (bk, min(128, bn /
/// ClusterM)). Grid: a multiple of ClusterM * ClusterN blocks of 384 threads, at most as many
/// clusters as can be resident; dynamic shared memory sm90_tile<K>::smem_bytes.
///
/// K in slices: the walk covers every tile once per slice of kslice_blocks K blocks (all of K
/// when kslice_blocks >= kblocks); slice z's tile finishes its C at ep.c + z c_slice_bytes.
///
/// fp8: Hopper's tensor cores keep only about 14 bits when they accumulate fp8 products
/// (DeepSeek-V3 report, section 3.3; measured here: 6.5% normwise error at K = 4000 on positive
/// data). So, as DeepSeek-V3 does, each 128-element slice of K is accumulated by the tensor
/// cores into a fresh partial sum that is then added to fp32 accumulators in registers.
///
/// Clusters: the ClusterM x ClusterN blocks of a cluster compute neighbouring tiles (rank r is
/// tile row r % ClusterM, tile column r / ClusterM of the cluster's patch). Blocks on the same
/// tile row need the same A panel: each loads 1/ClusterN of it and multicasts it to the others;
/// blocks on the same tile column share B the same way. A stage is free again only when every
/// block that writes into it has seen it consumed, so each consumer warpgroup arrives on the
/// empty barrier of every block on its tile row and tile column.
template <tc_kind K, int ClusterM, int ClusterN>
__global__ void __launch_bounds__(384, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap tma_a,
                     const __grid_constant__ CUtensorMap tma_b, int kblocks, int kslice_blocks,
                     index_t c_slice_bytes, epilogue_desc<float> ep) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = sm90_tile<K>;
  constexpr int cluster_size = ClusterM * ClusterN;
  constexpr int bk = T::bk_bytes / tc_bytes(K);           // K elements per stage
  constexpr int a_rows = T::bm / ClusterN;                 // A rows this block loads per stage
  constexpr int b_rows = T::bn / ClusterM;                 // B rows this block loads per stage
  constexpr int b_box = b_rows < 128 ? b_rows : 128;       // rows per B copy
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t bars = base + T::stages * T::stage_bytes;
  const auto sa = [&](int s) { return base + static_cast<std::uint32_t>(s) * T::a_bytes; };
  const auto sb = [&](int s) { return base + T::stages * T::a_bytes + static_cast<std::uint32_t>(s) * T::b_bytes; };
  const auto full = [&](int s) { return bars + static_cast<std::uint32_t>(s) * 8; };
  const auto empty = [&](int s) { return bars + static_cast<std::uint32_t>(T::stages + s) * 8; };

  const int wg = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
  const int rank = cluster_size > 1 ? static_cast<int>(ptx::cluster_ctarank()) : 0;
  const int rm = rank % ClusterM, rn = rank / ClusterM;
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::stages; ++s) {
      ptx::mbar_init(full(s), 1);
      // one arrival per consumer warpgroup of every block on this tile row and tile column
      ptx::mbar_init(empty(s), 2 * (ClusterM + ClusterN - 1));
    }
    ptx::fence_mbarrier_init();
  }
  if constexpr (cluster_size > 1) ptx::cluster_sync();
  else __syncthreads();

  const int tiles_m = static_cast<int>((ep.m + T::bm - 1) / T::bm), tiles_n = static_cast<int>((ep.n + T::bn - 1) / T::bn);
  const int rows = (tiles_m + ClusterM - 1) / ClusterM, cols = (tiles_n + ClusterN - 1) / ClusterN;
  const int slices = (kblocks + kslice_blocks - 1) / kslice_blocks;
  const int total = rows * cols * slices;
  const int cluster = static_cast<int>(blockIdx.x) / cluster_size, clusters = static_cast<int>(gridDim.x) / cluster_size;

  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (tid == 0) {
      ptx::tma_prefetch_descriptor(&tma_a);
      ptx::tma_prefetch_descriptor(&tma_b);
      // blocks on a tile row (same rm) share A; blocks on a tile column (same rn) share B
      std::uint16_t mask_a = 0, mask_b = 0;
      for (int j = 0; j < ClusterN; ++j) mask_a = static_cast<std::uint16_t>(mask_a | (1u << (rm + ClusterM * j)));
      for (int i = 0; i < ClusterM; ++i) mask_b = static_cast<std::uint16_t>(mask_b | (1u << (i + ClusterM * rn)));
      int stage = 0;
      std::uint32_t phase = 0;
      for (int t = cluster; t < total; t += clusters) {
        const int z = t / (rows * cols);
        int tm, tn;
        sm90_tile_of(t - z * rows * cols, rows, cols, tm, tn);
        const int kb0 = z * kslice_blocks,
                  kb1 = kb0 + kslice_blocks < kblocks ? kb0 + kslice_blocks : kblocks;
        // a block past the last tile row or column (an odd count in a cluster) loads the last
        // tile's panels again, for its partners, and writes nothing
        const int tile_m = tm * ClusterM + rm < tiles_m ? tm * ClusterM + rm : tiles_m - 1;
        const int tile_n = tn * ClusterN + rn < tiles_n ? tn * ClusterN + rn : tiles_n - 1;
        for (int kb = kb0; kb < kb1; ++kb) {
          ptx::mbar_wait(empty(stage), phase ^ 1);
          ptx::mbar_arrive_expect_tx(full(stage), T::stage_bytes);
          const std::uint32_t da = sa(stage) + static_cast<std::uint32_t>(rn * a_rows * T::bk_bytes);
          if constexpr (ClusterN == 1) ptx::tma_load_2d(da, &tma_a, full(stage), kb * bk, tile_m * T::bm);
          else ptx::tma_load_2d_multicast(da, &tma_a, full(stage), kb * bk, tile_m * T::bm + rn * a_rows, mask_a);
#pragma unroll
          for (int q = 0; q < b_rows / b_box; ++q) {
            const int row = rm * b_rows + q * b_box;
            const std::uint32_t db = sb(stage) + static_cast<std::uint32_t>(row * T::bk_bytes);
            if constexpr (ClusterM == 1) ptx::tma_load_2d(db, &tma_b, full(stage), kb * bk, tile_n * T::bn + row);
            else ptx::tma_load_2d_multicast(db, &tma_b, full(stage), kb * bk, tile_n * T::bn + row, mask_b);
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
        if constexpr (cluster_size == 1) {
          ptx::mbar_arrive(empty(s));
        } else {
#pragma unroll
          for (int j = 0; j < ClusterN; ++j) ptx::mbar_arrive_cluster(empty(s), static_cast<std::uint32_t>(rm + ClusterM * j));
#pragma unroll
          for (int i = 0; i < ClusterM; ++i) {
            if (i != rm) ptx::mbar_arrive_cluster(empty(s), static_cast<std::uint32_t>(i + ClusterM * rn));
          }
        }
      }
    };
    const int warp = tid / 32, lane = tid % 32;
    float acc[T::acc];
#pragma unroll
    for (int i = 0; i < T::acc; ++i) acc[i] = 0.0f;
    [[maybe_unused]] float part[T::promote ? T::acc : 1];
    int stage = 0;
    std::uint32_t phase = 0;
    // the four MMAs of one stage (32 bytes of K each: 2 in the descriptor's 16-byte units)
    const auto mma_stage = [&](float (&d)[T::acc], int s, bool accumulate) {
      const std::uint64_t da = ptx::wgmma_desc_k_sw128(sa(s) + static_cast<std::uint32_t>(c) * 64 * T::bk_bytes);
      const std::uint64_t db = ptx::wgmma_desc_k_sw128(sb(s));
      ptx::fence_operands(d);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < T::bk_bytes / 32; ++kk) sm90_wgmma<K>(d, da + 2 * kk, db + 2 * kk, (accumulate || kk > 0) ? 1 : 0);
      ptx::wgmma_commit();
      ptx::fence_operands(d);
    };
    const auto advance = [&] {
      if (++stage == T::stages) {
        stage = 0;
        phase ^= 1;
      }
    };
    for (int t = cluster; t < total; t += clusters) {
      const int z = t / (rows * cols);
      int tm, tn;
      sm90_tile_of(t - z * rows * cols, rows, cols, tm, tn);
      const int kb0 = z * kslice_blocks,
                kb1 = kb0 + kslice_blocks < kblocks ? kb0 + kslice_blocks : kblocks;
      const int tile_m = tm * ClusterM + rm, tile_n = tn * ClusterN + rn;
      int prev = 0;
      if constexpr (!T::promote) {
        for (int kb = kb0; kb < kb1; ++kb) {
          ptx::mbar_wait(full(stage), phase);
          mma_stage(acc, stage, kb > kb0);
          ptx::wgmma_wait<1>();  // the previous stage's MMAs are done: release it
          ptx::fence_operands(acc);
          if (kb > kb0) release(prev);
          prev = stage;
          advance();
        }
        ptx::wgmma_wait<0>();
        ptx::fence_operands(acc);
      } else {
        // each slice accumulates into a fresh partial sum, which joins acc once its MMAs are
        // done (reading it earlier would serialize the MMAs); the other consumer warpgroup's
        // MMAs keep the tensor cores busy meanwhile
        for (int kb = kb0; kb < kb1; ++kb) {
          ptx::mbar_wait(full(stage), phase);
          mma_stage(part, stage, false);
          ptx::wgmma_wait<0>();
          ptx::fence_operands(part);
#pragma unroll
          for (int i = 0; i < T::acc; ++i) acc[i] += part[i];
          if (kb + 1 < kb1) release(stage);
          prev = stage;
          advance();
        }
      }
      release(prev);
      if (tile_m < tiles_m && tile_n < tiles_n) {
        // accumulator fragment: warp w holds rows 16w..16w+15; register 4i+{0,1} is at
        // (lane/4, 8i + 2(lane%4) + {0,1}), register 4i+{2,3} eight rows below
        const index_t i0 = static_cast<index_t>(tile_m) * T::bm + c * 64 + warp * 16 + lane / 4;
        const index_t j0 = static_cast<index_t>(tile_n) * T::bn + 2 * (lane % 4);
        epilogue_desc<float> ez = ep;
        ez.c = static_cast<char*>(ep.c) + z * c_slice_bytes;
        with_epilogue(ez, [&](auto store) {
#pragma unroll
          for (int i = 0; i < T::acc / 4; ++i) {
            store(i0, j0 + 8 * i, acc[4 * i], acc[4 * i + 1]);
            store(i0 + 8, j0 + 8 * i, acc[4 * i + 2], acc[4 * i + 3]);
          }
        });
      }
      if constexpr (T::promote) {
#pragma unroll
        for (int i = 0; i < T::acc; ++i) acc[i] = 0.0f;
      }
    }
  }
  // No block may leave while another in its cluster can still write into its shared memory
  // or arrive on its barriers.
  if constexpr (cluster_size > 1) ptx::cluster_sync();
#endif
}

}  // namespace precis::cuda::detail
