// Inline PTX used by precis's CUDA kernels, one wrapper per instruction (PTX ISA 8.x, the
// sections named beside each group): asynchronous copies (cp.async, the tensor memory
// accelerator), mbarriers and cluster barriers, ldmatrix, mma.sync and the warpgroup MMA
// (wgmma). Wrappers compile on every target; only kernels guarded for the right architecture
// call the sm_89/sm_90 ones.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace precis::cuda::detail::ptx {

__device__ inline std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// --- cp.async (9.7.9.25, sm_80): 16 bytes global -> shared, bytes past src_bytes zero-filled.
__device__ inline void cp_async_16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// --- ldmatrix (9.7.14.5.15): four 8x8 matrices of 16-bit elements (any 32-bit data moves the
// same way: lane l receives word l % 4 of row l / 4 of each matrix).
__device__ inline void ldmatrix_x4(std::uint32_t addr, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// --- mma.sync (9.7.14.5.14): D = A B + D on a 16x8 tile, fp32 accumulators. The operand
// registers hold 32 bytes of K per row: k16 for 16-bit inputs, k8 for tf32, k32 for fp8.
// Registers in, registers out: not volatile, so the compiler may interleave them with loads.
#define PRECIS_PTX_MMA(name, shape_types)                                                              \
  __device__ inline void name(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) { \
    asm("mma.sync.aligned." shape_types " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "                \
                 "{%0, %1, %2, %3};\n"                                                                 \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                     \
  }
PRECIS_PTX_MMA(mma_f16, "m16n8k16.row.col.f32.f16.f16.f32")
PRECIS_PTX_MMA(mma_bf16, "m16n8k16.row.col.f32.bf16.bf16.f32")
PRECIS_PTX_MMA(mma_tf32, "m16n8k8.row.col.f32.tf32.tf32.f32")
// fp8 operands need sm_89 or later.
PRECIS_PTX_MMA(mma_e4m3_e4m3, "m16n8k32.row.col.f32.e4m3.e4m3.f32")
PRECIS_PTX_MMA(mma_e4m3_e5m2, "m16n8k32.row.col.f32.e4m3.e5m2.f32")
PRECIS_PTX_MMA(mma_e5m2_e4m3, "m16n8k32.row.col.f32.e5m2.e4m3.f32")
PRECIS_PTX_MMA(mma_e5m2_e5m2, "m16n8k32.row.col.f32.e5m2.e5m2.f32")
#undef PRECIS_PTX_MMA

// --- mbarrier (9.7.13.15, sm_90 for expect_tx and the cluster forms).
__device__ inline void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/// Makes barrier initialization visible to the async proxy and to the other CTAs of a cluster.
__device__ inline void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ inline void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ inline void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Arrives on the barrier at the same shared-memory offset in CTA `cta` of this cluster (this
/// CTA included).
__device__ inline void mbar_arrive_cluster(std::uint32_t bar, std::uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
/// Waits until the phase with the given parity has completed. Each try suspends the thread
/// until the phase completes or a time limit passes (the hint, in ns, is CUTLASS's), so
/// waiting warps do not spin.
__device__ inline void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_loop:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
      "@!done bra wait_loop;\n"
      "}\n" ::"r"(bar),
      "r"(parity), "r"(0x989680)
      : "memory");
}

// --- clusters (9.7.13.4, 10.x special registers).
__device__ inline std::uint32_t cluster_ctarank() {
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/// Every thread of every CTA in the cluster arrives, then waits for all the others.
__device__ inline void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// --- the tensor memory accelerator (9.7.9.27, sm_90): a 2-D box global -> shared, completing
// `bytes` on the barrier; the multicast form writes the same box (and completes the barrier at
// the same offset) in every CTA of `mask`.
__device__ inline void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}
__device__ inline void tma_load_2d(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ inline void tma_load_2d_multicast(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0, int c1,
                                             std::uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%4, %5}], [%2], %3;\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "h"(mask), "r"(c0), "r"(c1)
      : "memory");
}

// --- register budgets per warpgroup (9.7.17.1, sm_90a).
template <int N>
__device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// --- warpgroup MMA (9.7.15, sm_90a). Shared-memory matrix descriptor (9.7.15.5.1): start
// address, leading and stride byte offsets (16-byte units), swizzle mode in bits 62-63.
/// Descriptor of a K-major tile whose rows are 128 bytes, stored as the tensor memory
/// accelerator writes them with 128-byte swizzling: 8-row groups 1024 bytes apart. The tile
/// must start on a 1024-byte boundary.
__device__ inline std::uint64_t wgmma_desc_k_sw128(std::uint32_t smem) {
  return static_cast<std::uint64_t>((smem & 0x3FFFF) >> 4) | (std::uint64_t{1} << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving accesses to the accumulators across the asynchronous MMA.
__device__ inline void fence_operands(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Operand lists of the warpgroup MMAs: accumulator registers 0-63 and 64-127.
#define PRECIS_PTX_WGMMA_D_LO \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "\
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "\
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "\
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define PRECIS_PTX_WGMMA_D_HI \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "\
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "\
  "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "\
  "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PRECIS_PTX_WGMMA_OUT_LO \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
  "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
  "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
  "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
  "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
  "+f"(d[63])
#define PRECIS_PTX_WGMMA_OUT_HI \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), \
  "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
  "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
  "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
  "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), \
  "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), \
  "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), \
  "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), \
  "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), \
  "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/// d (64 x 256 fp32 per warpgroup) += A (64 x 16) B (16 x 256) for 16-bit operands, both
/// K-major in shared memory; scale_d == 0 ignores d's old value.
#define PRECIS_PTX_WGMMA_256(name, shape_types, tail)                                                    \
  __device__ inline void name(float (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\nwgmma.mma_async.sync.aligned." shape_types " {" \
                 PRECIS_PTX_WGMMA_D_LO ", " PRECIS_PTX_WGMMA_D_HI "}, %128, %129, p, 1, 1" tail ";\n}\n"       \
                 : PRECIS_PTX_WGMMA_OUT_LO, PRECIS_PTX_WGMMA_OUT_HI                                        \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                \
  }
PRECIS_PTX_WGMMA_256(wgmma_m64n256_f16, "m64n256k16.f32.f16.f16", ", 0, 0")
PRECIS_PTX_WGMMA_256(wgmma_m64n256_bf16, "m64n256k16.f32.bf16.bf16", ", 0, 0")
#undef PRECIS_PTX_WGMMA_256

/// d (64 x 128 fp32 per warpgroup) += A (64 x 32) B (32 x 128) for fp8 operands, both K-major
/// in shared memory; scale_d == 0 ignores d's old value.
#define PRECIS_PTX_WGMMA_128(name, shape_types)                                                         \
  __device__ inline void name(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned." shape_types " {"  \
                 PRECIS_PTX_WGMMA_D_LO "}, %64, %65, p, 1, 1;\n}\n"                                           \
                 : PRECIS_PTX_WGMMA_OUT_LO                                                                 \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                \
  }
PRECIS_PTX_WGMMA_128(wgmma_m64n128_e4m3, "m64n128k32.f32.e4m3.e4m3")
PRECIS_PTX_WGMMA_128(wgmma_m64n128_e5m2, "m64n128k32.f32.e5m2.e5m2")
#undef PRECIS_PTX_WGMMA_128
#undef PRECIS_PTX_WGMMA_D_LO
#undef PRECIS_PTX_WGMMA_D_HI
#undef PRECIS_PTX_WGMMA_OUT_LO
#undef PRECIS_PTX_WGMMA_OUT_HI

/// Keeps the compiler from moving accesses to the accumulators across the asynchronous MMA.
__device__ inline void fence_operands(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace precis::cuda::detail::ptx
