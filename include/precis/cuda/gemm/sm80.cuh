// Tensor-core GEMM for sm_80 and later: mma.sync on fragments loaded with ldmatrix from a
// multi-stage cp.async pipeline (the structure of CUTLASS's sm80 multistage kernels).
//
// Operands are K-major with 16-byte aligned rows (the dispatcher stages any other layout).
// A block of 256 threads computes a 128 x 256 tile of C; its 8 warps each hold a 64 x 64
// tile of fp32 accumulators (4 x 8 instructions of 16 x 8). K advances 128 bytes per stage,
// four stages deep; the fragments of the next 32 bytes of K load while the current ones
// multiply. Shared-memory rows are 128 bytes with the 16-byte chunk index XORed with
// the row's low three bits, so the eight rows an ldmatrix phase reads and the chunks a row
// of cp.async writes fall in distinct banks. Every instruction precis uses consumes 32 bytes
// of K (k16 fp16/bf16, k8 tf32, k32 fp8), so one kernel serves every kind; tf32 operands are
// fp32 words rounded to tf32 in registers. Ragged M, N and K: rows past the edge and bytes
// past K are zero-filled by cp.async; the epilogue writes only inside C.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "precis/cuda/detail/ptx.cuh"
#include "precis/cuda/gemm/epilogue.cuh"
#include "precis/cuda/gemm/tensor_op.cuh"

namespace precis::cuda::detail {

struct sm80_tile {
  static constexpr int bm = 128, bn = 256, bk_bytes = 128, stages = 4, threads = 256;
  static constexpr int a_bytes = bm * bk_bytes, b_bytes = bn * bk_bytes, stage_bytes = a_bytes + b_bytes;
  static constexpr int smem_bytes = stages * stage_bytes;
};

template <tc_kind KA, tc_kind KB>
__device__ __forceinline__ void sm80_mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  if constexpr (KA == tc_kind::f16) {
    ptx::mma_f16(d, a, b);
  } else if constexpr (KA == tc_kind::bf16) {
    ptx::mma_bf16(d, a, b);
  } else if constexpr (KA == tc_kind::tf32) {
    ptx::mma_tf32(d, a, b);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if constexpr (KA == tc_kind::e4m3 && KB == tc_kind::e4m3) ptx::mma_e4m3_e4m3(d, a, b);
    else if constexpr (KA == tc_kind::e4m3) ptx::mma_e4m3_e5m2(d, a, b);
    else if constexpr (KB == tc_kind::e4m3) ptx::mma_e5m2_e4m3(d, a, b);
    else ptx::mma_e5m2_e5m2(d, a, b);
#else
    __trap();  // fp8 tensor cores need sm_89; the dispatcher never launches this
#endif
  }
}

/// C (m x n, through ep) = A B with A given as m rows of k_bytes (row stride lda bytes) and B
/// as n rows of k_bytes (B's transpose, row stride ldb bytes). Grid: (ceil(n / 256),
/// ceil(m / 128), slices): block slice z multiplies the bytes [z kslice_bytes, (z + 1)
/// kslice_bytes) of K (a multiple of 128) and finishes its C at ep.c + z c_slice_bytes (one
/// slice: kslice_bytes = k_bytes, c_slice_bytes = 0); dynamic shared memory
/// sm80_tile::smem_bytes.
template <tc_kind KA, tc_kind KB>
__global__ void __launch_bounds__(sm80_tile::threads, 1)
    sm80_gemm_kernel(const char* a, index_t lda, const char* b, index_t ldb, index_t k_bytes,
                     index_t kslice_bytes, index_t c_slice_bytes, epilogue_desc<float> ep) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using T = sm80_tile;
  {
    const index_t k0 = static_cast<index_t>(blockIdx.z) * kslice_bytes;
    a += k0;
    b += k0;
    k_bytes = k_bytes - k0 < kslice_bytes ? k_bytes - k0 : kslice_bytes;
    ep.c = static_cast<char*>(ep.c) + static_cast<index_t>(blockIdx.z) * c_slice_bytes;
  }
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t s0 = ptx::smem_addr(smem);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int warp_m = warp % 2, warp_n = warp / 2;
  const index_t m0 = static_cast<index_t>(blockIdx.y) * T::bm, n0 = static_cast<index_t>(blockIdx.x) * T::bn;

  // Loads: thread t copies chunk t % 8 of rows t / 8 + 32 i.
  const int lrow = tid / 8, lchunk = tid % 8;
  const std::uint32_t lswz = static_cast<std::uint32_t>(lrow) * T::bk_bytes + (static_cast<std::uint32_t>(lchunk ^ (lrow & 7)) << 4);
  const char* ga = a + (m0 + lrow) * lda + lchunk * 16;
  const char* gb = b + (n0 + lrow) * ldb + lchunk * 16;
  const int kblocks = static_cast<int>((k_bytes + T::bk_bytes - 1) / T::bk_bytes);

  const auto load_stage = [&](int stage, int kb) {
    const std::uint32_t sa = s0 + static_cast<std::uint32_t>(stage) * T::stage_bytes, sb = sa + T::a_bytes;
    const index_t kbyte = static_cast<index_t>(kb) * T::bk_bytes + lchunk * 16;
    const index_t left = k_bytes - kbyte;
    const int kvalid = left <= 0 ? 0 : (left >= 16 ? 16 : static_cast<int>(left));
#pragma unroll
    for (int i = 0; i < T::bm / 32; ++i) {
      const bool in = m0 + lrow + 32 * i < ep.m && kvalid > 0;
      ptx::cp_async_16(sa + lswz + 32u * i * T::bk_bytes, in ? ga + 32 * i * lda + kb * T::bk_bytes : a, in ? kvalid : 0);
    }
#pragma unroll
    for (int i = 0; i < T::bn / 32; ++i) {
      const bool in = n0 + lrow + 32 * i < ep.n && kvalid > 0;
      ptx::cp_async_16(sb + lswz + 32u * i * T::bk_bytes, in ? gb + 32 * i * ldb + kb * T::bk_bytes : b, in ? kvalid : 0);
    }
  };

  float acc[4][8][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < T::stages - 1; ++s) {
    if (s < kblocks) load_stage(s, s);
    ptx::cp_async_commit();
  }

  // ldmatrix row addresses: A rows warp_m*64 + mt*16 + lane%16, chunk half lane/16; B rows
  // warp_n*64 + np*16 + (lane/16)*8 + lane%8, chunk half (lane/8)%2. Every row's low three
  // bits are lane%8.
  const std::uint32_t a_row = static_cast<std::uint32_t>(warp_m * 64 + lane % 16) * T::bk_bytes;
  const std::uint32_t b_row = static_cast<std::uint32_t>(warp_n * 64 + (lane / 16) * 8 + lane % 8) * T::bk_bytes;
  const int a_half = lane / 16, b_half = (lane / 8) % 2, swz = lane % 8;

  for (int kb = 0; kb < kblocks; ++kb) {
    ptx::cp_async_wait<T::stages - 2>();
    __syncthreads();  // stage kb landed for every thread; stage kb-1 is free again
    {
      const int next = kb + T::stages - 1;
      if (next < kblocks) load_stage(next % T::stages, next);
      ptx::cp_async_commit();
    }
    const std::uint32_t sa = s0 + static_cast<std::uint32_t>(kb % T::stages) * T::stage_bytes, sb = sa + T::a_bytes;
    // fragments of 32 bytes of K: A for 4 row tiles, B for 8 column tiles (two per ldmatrix)
    const auto load = [&](int ks, std::uint32_t (&af)[4][4], std::uint32_t (&bf)[8][2]) {
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        ptx::ldmatrix_x4(sa + a_row + static_cast<std::uint32_t>(mt * 16 * T::bk_bytes) +
                             (static_cast<std::uint32_t>((ks * 2 + a_half) ^ swz) << 4),
                         af[mt]);
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        std::uint32_t r[4];
        ptx::ldmatrix_x4(sb + b_row + static_cast<std::uint32_t>(np * 16 * T::bk_bytes) +
                             (static_cast<std::uint32_t>((ks * 2 + b_half) ^ swz) << 4),
                         r);
        bf[2 * np][0] = r[0];
        bf[2 * np][1] = r[1];
        bf[2 * np + 1][0] = r[2];
        bf[2 * np + 1][1] = r[3];
      }
      if constexpr (KA == tc_kind::tf32) {
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) af[mt][e] = round_tf32_device(af[mt][e]);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) bf[nt][e] = round_tf32_device(bf[nt][e]);
      }
    };
    std::uint32_t af[2][4][4], bf[2][8][2];
    load(0, af[0], bf[0]);
#pragma unroll
    for (int ks = 0; ks < T::bk_bytes / 32; ++ks) {
      if (ks + 1 < T::bk_bytes / 32) load(ks + 1, af[(ks + 1) % 2], bf[(ks + 1) % 2]);
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) sm80_mma<KA, KB>(acc[mt][nt], af[ks % 2][mt], bf[ks % 2][nt]);
    }
  }
  ptx::cp_async_wait<0>();

  // Accumulator fragment of a 16 x 8 tile: elements 0,1 at (lane/4, 2*(lane%4) + {0,1}),
  // elements 2,3 eight rows below.
  const index_t i0 = m0 + warp_m * 64 + lane / 4, j0 = n0 + warp_n * 64 + 2 * (lane % 4);
  with_epilogue(ep, [&](auto store) {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        store(i0 + mt * 16, j0 + nt * 8, acc[mt][nt][0], acc[mt][nt][1]);
        store(i0 + mt * 16 + 8, j0 + nt * 8, acc[mt][nt][2], acc[mt][nt][3]);
      }
  });
#endif
}

}  // namespace precis::cuda::detail
