// GEMM on the GPU: C = epilogue(alpha * A B + beta * C) for device tensors or views, with the
// accumulator named in the call as on the host:
//
//   precis::cuda::gemm<float>(1.0f, A, B, 0.0f, C);            // bf16 A, B: tensor cores, fp32
//   sums precis::cuda::gemm<float, precis::tf32>(1.0f, X, W, 0.0f, Y); // fp32 data multiplied as
//   tf32 precis::cuda::gemm<precis::half>(1, A, B, 0, C);            // fp16 accumulation (CUDA
//   cores) precis::cuda::gemm<float>(1.0f, A, B.transpose(), 0.0f, C, {.act = activation::relu,
//   .bias = b.view()});
//
// Template arguments: Acc, the accumulator (float, double, half, bfloat16); Operand, the format
// the operands are rounded to (nearest even, once) before they are multiplied, when it is not
// their storage format (void: as stored). A, B and C are DeviceTensor or DeviceView of any
// format precis has (fp64, fp32, fp16, bf16, tf32, fp8, any minifloat) and any strides;
// transposes are views.
//
// Kernels (chosen per call; gemm_options::backend forces one):
//   sm90  wgmma + TMA, warp-specialized and persistent (gemm/sm90.cuh): fp16 x fp16,
//         bf16 x bf16, e4m3 x e4m3 and e5m2 x e5m2 with fp32 accumulation on sm_90a (H100,
//         H200); fp8 partial sums are promoted to fp32 every 128 elements of K;
//   sm80  mma.sync + ldmatrix + cp.async (gemm/sm80.cuh): fp16, bf16, tf32 and, on sm_89 and
//         later, fp8 e4m3/e5m2 (either pairing), fp32 accumulation;
//   simt  CUDA cores (gemm/simt.cuh): every other combination, including minifloats, mixed
//         formats and fp16/bf16/fp64 accumulation;
//   cublaslt  NVIDIA's kernels behind the same call (gemm/cublaslt.cuh), when the program
//         defines PRECIS_CUDA_CUBLASLT and links cublasLt.
// The tensor-core kernels read operands K-major with 16-byte aligned rows; any other operand is
// first copied once into such a buffer (stream-ordered allocation), converted on the way.
//
// K in slices (gemm/split_k.cuh): a product whose C has fewer than 64 tiles of its kernel and a
// long K is cut along K into up to 32 slices, computed side by side into a workspace and added
// in slice order before the epilogue; the slices follow from the shape and the kernel, not the
// device. gemm_options::split_k (or PRECIS_CUDA_GEMM_SPLIT_K) forces a count, 1 for none.
// 16-bit accumulators are never split (their sums stay in their own format), nor is cublaslt.
//
// Errors: shapes that do not multiply, C sharing memory with A or B, a bias that is not [n],
// an overflow mode C's format cannot represent, or a backend that cannot run the call on this
// device are precis::error exceptions naming the call and what was expected; CUDA failures are
// cuda_error. Calls are asynchronous on gemm_options::stream.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "precis/cuda/device.cuh"
#include "precis/cuda/gemm/epilogue.cuh"
#include "precis/cuda/gemm/pack.cuh"
#include "precis/cuda/gemm/simt.cuh"
#include "precis/cuda/gemm/sm80.cuh"
#include "precis/cuda/gemm/sm90.cuh"
#include "precis/cuda/gemm/split_k.cuh"
#include "precis/cuda/gemm/tensor_op.cuh"
#include "precis/tensor/elementwise.hpp"

namespace precis::cuda {

enum class gemm_backend { automatic, simt, sm80, sm90, cublaslt };

constexpr const char* to_string(gemm_backend b) noexcept {
  switch (b) {
    case gemm_backend::automatic: return "automatic";
    case gemm_backend::simt: return "simt";
    case gemm_backend::sm80: return "sm80";
    case gemm_backend::sm90: return "sm90";
    case gemm_backend::cublaslt: return "cublaslt";
  }
  return "?";
}

struct gemm_options {
  gemm_backend backend = gemm_backend::automatic;
  cudaStream_t stream = nullptr;
  /// sm90 only: a cluster of cluster_m x cluster_n blocks on neighbouring tiles loads each
  /// shared operand panel once and multicasts it (1 or 2 each; 0 chooses).
  int cluster_m = 0, cluster_n = 0;
  /// Slices of K computed side by side (gemm/split_k.cuh): 0 chooses by the shape (or takes
  /// PRECIS_CUDA_GEMM_SPLIT_K), 1 never splits, s > 1 asks for s (at most one K block of the
  /// kernel a slice). Float and double accumulators only.
  int split_k = 0;
};

namespace detail {

/// What the dispatcher needs to know about the current device (cached per device).
struct device_info {
  int major = 0, minor = 0, sms = 0;
  bool sm90a = false;  // this program carries sm_90a code and the device runs it
};

/// A template (of nothing) so that every translation unit that includes this header may
/// define it: a plain __global__ function here is a multiple definition at link time.
template <int = 0>
__global__ void sm90a_probe_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

inline device_info current_device_info() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  static std::mutex mu;
  static std::array<std::optional<device_info>, 64> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[static_cast<std::size_t>(dev) % cache.size()];
  if (!slot) {
    device_info d;
    check(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    if (d.major == 9 && d.minor == 0) {
      device_buffer<int> flag(1);
      sm90a_probe_kernel<><<<1, 1>>>(flag.data());
      check(cudaGetLastError(), "precis::cuda::gemm: sm_90a probe launch");
      int v = 0;
      check(cudaMemcpy(&v, flag.data(), sizeof v, cudaMemcpyDeviceToHost), "precis::cuda::gemm: sm_90a probe");
      d.sm90a = v == 1;
    }
    slot = d;
  }
  return *slot;
}

// --- tensor-core kinds -------------------------------------------------------------------

/// The tensor-core kind of an operand stored as S and multiplied as Op (void: as stored), or
/// none (-1).
template <class S, class Op>
constexpr int tc_kind_of() {
  using M = std::conditional_t<std::is_void_v<Op>, S, Op>;
  if constexpr (std::is_same_v<M, precis::half>) return static_cast<int>(tc_kind::f16);
  else if constexpr (std::is_same_v<M, precis::bfloat16>) return static_cast<int>(tc_kind::bf16);
  else if constexpr (std::is_same_v<M, precis::tf32>) return static_cast<int>(tc_kind::tf32);
  else if constexpr (std::is_same_v<M, precis::float8_e4m3>) return static_cast<int>(tc_kind::e4m3);
  else if constexpr (std::is_same_v<M, precis::float8_e5m2>) return static_cast<int>(tc_kind::e5m2);
  else return -1;
}

/// The element type the tensor-core kernels read for a kind (tf32: fp32 words).
template <tc_kind K>
using tc_storage_t = std::conditional_t<
    K == tc_kind::f16, precis::half,
    std::conditional_t<K == tc_kind::bf16, precis::bfloat16,
                       std::conditional_t<K == tc_kind::tf32, float,
                                          std::conditional_t<K == tc_kind::e4m3, precis::float8_e4m3, precis::float8_e5m2>>>>;

/// Whether kinds ka and kb can be multiplied by one tensor-core instruction.
constexpr bool tc_pair(int ka, int kb) {
  if (ka < 0 || kb < 0) return false;
  const auto a = static_cast<tc_kind>(ka), b = static_cast<tc_kind>(kb);
  return a == b || (tc_fp8(a) && tc_fp8(b));
}

/// A K-major operand as the tensor-core kernels read it: rows of K elements, row stride in bytes.
struct kmajor_operand {
  const char* data = nullptr;
  index_t ld_bytes = 0;
};

/// v (rows x k, element (r, c) at r * rs + c * cs) as a K-major operand of TS (rounded to Op):
/// v itself when it already is one, else a staged copy held in `scratch`.
template <class TS, class Op, class S>
kmajor_operand k_major(const DeviceView<const S>& v, index_t rs, index_t cs, index_t rows, index_t k, cudaStream_t stream,
                       std::optional<stream_scratch>& scratch) {
  constexpr index_t es = static_cast<index_t>(sizeof(TS));
  if constexpr (std::is_same_v<S, TS> && (std::is_void_v<Op> || std::is_same_v<Op, S> || std::is_same_v<Op, precis::tf32>)) {
    const auto addr = reinterpret_cast<std::uintptr_t>(v.data());
    if (cs == 1 && rs >= k && (rs * es) % 16 == 0 && addr % 16 == 0) return {reinterpret_cast<const char*>(v.data()), rs * es};
  }
  const index_t ldd = (k + 16 / es - 1) / (16 / es) * (16 / es);
  scratch.emplace(static_cast<std::size_t>(rows * ldd * es), stream);
  auto* dst = static_cast<TS*>(scratch->get());
  // fp32 operands of tf32 products stay fp32 words (the kernel rounds them in registers);
  // anything else is rounded to the operand format here, once
  using PackOp = std::conditional_t<std::is_same_v<Op, precis::tf32> && std::is_same_v<S, float>, void, Op>;
  const dim3 block(32, 8), grid(static_cast<unsigned>((k + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  pack_kernel<TS, PackOp, S><<<grid, block, 0, stream>>>(v.data(), rs, cs, rows, k, dst, ldd);
  check(cudaGetLastError(), "precis::cuda::gemm: staging copy launch (" + std::to_string(rows) + " x " + std::to_string(k) + ")");
  return {reinterpret_cast<const char*>(dst), ldd * es};
}

/// Raises a kernel's dynamic shared-memory limit once per kernel and device.
template <auto Kernel>
void allow_smem(int bytes) {
  static std::array<std::atomic<bool>, 64> done{};
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  auto& flag = done[static_cast<std::size_t>(dev) % done.size()];
  if (!flag.load(std::memory_order_acquire)) {
    check(cudaFuncSetAttribute(reinterpret_cast<const void*>(Kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(bytes) + ")");
    flag.store(true, std::memory_order_release);
  }
}

inline std::string mnk(index_t m, index_t n, index_t k) {
  return "m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k);
}

// --- launches ------------------------------------------------------------------------------

/// PRECIS_CUDA_GEMM_SPLIT_K: unset or "auto" (0), or a slice count (1: never split).
inline int split_k_from_env() {
  static const int v = [] {
    const char* e = std::getenv("PRECIS_CUDA_GEMM_SPLIT_K");
    if (e == nullptr || std::string(e) == "auto") return 0;
    char* end = nullptr;
    const long n = std::strtol(e, &end, 10);
    if (end == e || *end != '\0' || n < 1 || n > 1024) {
      throw invalid_argument("precis::cuda::gemm: PRECIS_CUDA_GEMM_SPLIT_K=\"" + std::string(e) +
                             "\"; expected auto or a slice count from 1 to 1024");
    }
    return static_cast<int>(n);
  }();
  return v;
}

/// Runs launch(ep, c_slice_bytes) for a product of `tiles` tiles of C cut into `slices` slices
/// of K: straight into C through `final`, or (split_k_separate_epilogue) into a stream-ordered
/// workspace of W, then adds the slices and finishes C through `final` in
/// split_k_reduce_kernel.
template <class W, class Launch>
void with_k_slices(index_t slices, index_t tiles, const epilogue_desc<W>& final,
                   cudaStream_t stream, Launch&& launch) {
  if (!split_k_separate_epilogue(slices, tiles, final)) {
    launch(final, index_t{0});
    return;
  }
  const index_t m = final.m, n = final.n, stride = split_k_stride(m, n);
  stream_scratch ws(static_cast<std::size_t>(slices * stride) * sizeof(W), stream);
  epilogue_desc<W> part;  // plain stores of the partial products, in W
  part.c = ws.get();
  part.rs = n;
  part.cs = 1;
  part.m = m;
  part.n = n;
  part.out = std::is_same_v<W, double> ? value_format::f64 : value_format::f32;
  part.plain = std::is_same_v<W, float>;
  part.pairs = n % 2 == 0;
  launch(part, stride * static_cast<index_t>(sizeof(W)));
  const index_t threads = m * ((n + 1) / 2);
  split_k_reduce_kernel<W><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
      static_cast<const W*>(ws.get()), stride, static_cast<int>(slices), final);
  check(cudaGetLastError(), "precis::cuda::gemm: epilogue kernel launch (m=" + std::to_string(m) +
                                ", n=" + std::to_string(n) + ", " + std::to_string(slices) +
                                " slices)");
}

template <class Acc, class Op, class SA, class SB, class W>
void launch_simt(const DeviceView<const SA>& a, const DeviceView<const SB>& b, index_t k,
                 const epilogue_desc<W>& ep, cudaStream_t stream, int forced_slices) {
  const dim3 grid(static_cast<unsigned>((ep.n + simt_bn - 1) / simt_bn), static_cast<unsigned>((ep.m + simt_bm - 1) / simt_bm));
  if (grid.y > 65535u) throw invalid_argument("precis::cuda::gemm (simt): m=" + std::to_string(ep.m) + "; expected m <= 4194240");
  index_t slices = 1;
  constexpr bool splits = std::is_same_v<Acc, float> || std::is_same_v<Acc, double>;
  if constexpr (splits) {
    if (k > 0) {
      slices = split_k_slices(
          index_t{grid.x} * grid.y, (k + simt_bk - 1) / simt_bk, 8,
          split_k_by_traffic(ep.m, ep.n, k, static_cast<index_t>(sizeof(SA)),
                             static_cast<index_t>(sizeof(SB)), static_cast<index_t>(sizeof(W))),
          forced_slices);
    }
  } else if (forced_slices > 1) {
    throw invalid_argument(
        "precis::cuda::gemm (simt): split_k " + std::to_string(forced_slices) +
        " with a 16-bit accumulator; expected 0 or 1 (16-bit sums are not split)");
  }
  const index_t kslice =
      slices > 1 ? split_k_units_per_slice((k + simt_bk - 1) / simt_bk, slices) * simt_bk : k;
  with_k_slices(slices, index_t{grid.x} * grid.y, ep, stream,
                [&](const epilogue_desc<W>& e, index_t c_slice_bytes) {
                  const dim3 g(grid.x, grid.y, static_cast<unsigned>(slices));
                  simt_gemm_kernel<Acc, Op><<<g, simt_threads, 0, stream>>>(
                      a.data(), a.strides()[0], a.strides()[1], b.data(), b.strides()[0],
                      b.strides()[1], k, kslice, c_slice_bytes, e);
                  check(cudaGetLastError(), "precis::cuda::gemm: simt kernel launch (" +
                                                mnk(ep.m, ep.n, k) + ", " + std::to_string(slices) +
                                                " slices of K)");
                });
}

template <tc_kind KA, tc_kind KB>
void launch_sm80(const kmajor_operand& a, const kmajor_operand& b, index_t k,
                 const epilogue_desc<float>& ep, cudaStream_t stream, int forced_slices) {
  using T = sm80_tile;
  constexpr auto kernel = &sm80_gemm_kernel<KA, KB>;
  allow_smem<kernel>(T::smem_bytes);
  const dim3 grid(static_cast<unsigned>((ep.n + T::bn - 1) / T::bn), static_cast<unsigned>((ep.m + T::bm - 1) / T::bm));
  if (grid.y > 65535u) throw invalid_argument("precis::cuda::gemm (sm80): m=" + std::to_string(ep.m) + "; expected m <= 8388480");
  const index_t k_bytes = k * tc_bytes(KA), units = (k_bytes + T::bk_bytes - 1) / T::bk_bytes;
  const index_t slices = split_k_slices(
      index_t{grid.x} * grid.y, units, T::stages,
      split_k_by_traffic(ep.m, ep.n, k, tc_bytes(KA), tc_bytes(KB), 4), forced_slices);
  const index_t kslice_bytes = split_k_units_per_slice(units, slices) * T::bk_bytes;
  with_k_slices(
      slices, index_t{grid.x} * grid.y, ep, stream,
      [&](const epilogue_desc<float>& e, index_t c_slice_bytes) {
        const dim3 g(grid.x, grid.y, static_cast<unsigned>(slices));
        kernel<<<g, T::threads, T::smem_bytes, stream>>>(a.data, a.ld_bytes, b.data, b.ld_bytes,
                                                         k_bytes, kslice_bytes, c_slice_bytes, e);
        check(cudaGetLastError(), "precis::cuda::gemm: sm80 kernel launch (" + mnk(ep.m, ep.n, k) +
                                      ", " + std::to_string(slices) + " slices of K)");
      });
}

/// cuTensorMapEncodeTiled from the driver, without linking libcuda.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q),
          "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (q != cudaDriverEntryPointSuccess || p == nullptr) {
      throw cuda_error("precis::cuda::gemm: the driver has no cuTensorMapEncodeTiled; expected a CUDA 12+ driver");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

/// A 2-D tensor map over rows x k (K contiguous, row stride ld bytes) with boxes of
/// 128 bytes of K by box_rows rows, 128-byte swizzled, zero fill past the edges.
inline CUtensorMap make_tensor_map(const kmajor_operand& op, CUtensorMapDataType type, int elem_bytes, index_t rows, index_t k,
                                   unsigned box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(op.ld_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem_bytes), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, type, 2, const_cast<char*>(op.data), dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw cuda_error("precis::cuda::gemm: cuTensorMapEncodeTiled failed (error " + std::to_string(static_cast<int>(r)) + ") for " +
                     std::to_string(rows) + " rows of " + std::to_string(k) + " elements, row stride " +
                     std::to_string(op.ld_bytes) + " bytes");
  }
  return map;
}

template <tc_kind K, int ClusterM, int ClusterN>
void launch_sm90_cluster(const kmajor_operand& a, const kmajor_operand& b, index_t k,
                         const epilogue_desc<float>& ep, cudaStream_t stream, int sms,
                         int forced_slices) {
  using T = sm90_tile<K>;
  constexpr auto kernel = &sm90_gemm_kernel<K, ClusterM, ClusterN>;
  allow_smem<kernel>(T::smem_bytes);
  const CUtensorMapDataType type = K == tc_kind::f16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : K == tc_kind::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                        : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const CUtensorMap ta = make_tensor_map(a, type, tc_bytes(K), ep.m, k, T::bm / ClusterN);
  const CUtensorMap tb = make_tensor_map(b, type, tc_bytes(K), ep.n, k, std::min(128, T::bn / ClusterM));
  const index_t tiles_m = (ep.m + T::bm - 1) / T::bm, tiles_n = (ep.n + T::bn - 1) / T::bn;
  const int kblocks = static_cast<int>((k * tc_bytes(K) + T::bk_bytes - 1) / T::bk_bytes);
  // 2 K blocks (two stages) at least a slice
  const index_t slices =
      split_k_slices(tiles_m * tiles_n, kblocks, 2,
                     split_k_by_traffic(ep.m, ep.n, k, tc_bytes(K), tc_bytes(K), 4), forced_slices);
  const int kslice_blocks = static_cast<int>(split_k_units_per_slice(kblocks, slices));
  const index_t tiles =
      (tiles_m + ClusterM - 1) / ClusterM * ((tiles_n + ClusterN - 1) / ClusterN) * slices;

  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = ClusterM * ClusterN;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(T::threads);
  cfg.dynamicSmemBytes = T::smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // resident clusters (cached per device): the persistent grid never exceeds them
  static std::array<std::atomic<int>, 64> resident{};
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  auto& slot = resident[static_cast<std::size_t>(dev) % resident.size()];
  int clusters = slot.load(std::memory_order_relaxed);
  if (clusters == 0) {
    cfg.gridDim = dim3(static_cast<unsigned>(ClusterM * ClusterN * sms));
    check(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg), "cudaOccupancyMaxActiveClusters (sm90 GEMM)");
    if (clusters <= 0) throw cuda_error("precis::cuda::gemm: no cluster of the sm90 kernel fits on this device");
    slot.store(clusters, std::memory_order_relaxed);
  }
  const index_t grid = std::min<index_t>(tiles, clusters) * ClusterM * ClusterN;
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  with_k_slices(
      slices, tiles_m * tiles_n, ep, stream,
      [&](const epilogue_desc<float>& e, index_t c_slice_bytes) {
        check(cudaLaunchKernelEx(&cfg, kernel, ta, tb, kblocks, kslice_blocks, c_slice_bytes, e),
              "precis::cuda::gemm: sm90 kernel launch (" + mnk(ep.m, ep.n, k) + ", cluster " +
                  std::to_string(ClusterM) + " x " + std::to_string(ClusterN) + ", " +
                  std::to_string(slices) + " slices of K)");
      });
}

template <tc_kind K>
void launch_sm90(const kmajor_operand& a, const kmajor_operand& b, index_t k,
                 const epilogue_desc<float>& ep, cudaStream_t stream, int cluster_m, int cluster_n,
                 int sms, int forced_slices) {
  if (ep.m >= (index_t{1} << 31) || ep.n >= (index_t{1} << 31) || k >= (index_t{1} << 31)) {
    throw invalid_argument("precis::cuda::gemm (sm90): " + mnk(ep.m, ep.n, k) + "; expected each below 2^31");
  }
  // measured fastest at 4096^3 and 8192^3 (docs/benchmarks.md): 2 x 1 for 16-bit operands
  // (B shared), 1 x 2 for fp8 (A shared); a cluster needs two tiles along its direction
  if (cluster_m == 0 && cluster_n == 0) {
    if constexpr (tc_fp8(K)) {
      cluster_m = 1;
      cluster_n = ep.n > sm90_tile<K>::bn ? 2 : 1;
    } else {
      cluster_m = ep.m > sm90_tile<K>::bm ? 2 : 1;
      cluster_n = 1;
    }
  }
  if (cluster_m == 0) cluster_m = 1;
  if (cluster_n == 0) cluster_n = 1;
  if (cluster_m == 1 && cluster_n == 1)
    launch_sm90_cluster<K, 1, 1>(a, b, k, ep, stream, sms, forced_slices);
  else if (cluster_m == 2 && cluster_n == 1)
    launch_sm90_cluster<K, 2, 1>(a, b, k, ep, stream, sms, forced_slices);
  else if (cluster_m == 1 && cluster_n == 2)
    launch_sm90_cluster<K, 1, 2>(a, b, k, ep, stream, sms, forced_slices);
  else if (cluster_m == 2 && cluster_n == 2)
    launch_sm90_cluster<K, 2, 2>(a, b, k, ep, stream, sms, forced_slices);
  else {
    throw invalid_argument("precis::cuda::gemm: gemm_options cluster " + std::to_string(cluster_m) + " x " +
                           std::to_string(cluster_n) + "; expected 0 (choose), 1 or 2 each");
  }
}

/// The kernels' description of C and the epilogue.
template <class W, class Acc, class Out, class Bias>
epilogue_desc<W> make_epilogue_desc(const Acc& alpha, const Acc& beta, const DeviceView<Out>& c, const epilogue<Bias>& ep) {
  epilogue_desc<W> p;
  p.c = c.data();
  p.rs = c.strides()[0];
  p.cs = c.strides()[1];
  p.m = c.shape()[0];
  p.n = c.shape()[1];
  p.alpha = static_cast<W>(static_cast<double>(alpha));
  p.beta = static_cast<W>(static_cast<double>(beta));
  p.bias = ep.bias.data();
  p.out = static_cast<value_format>(value_format_of<Out>());
  p.bias_format = static_cast<value_format>(value_format_of<Bias>());
  p.act = ep.act;
  p.mode = ep.mode;
  p.ov = ep.ov;
  p.seed = ep.seed;
  p.offset = ep.offset;
  p.div0 = ep.divide_by[0];
  p.div1 = ep.divide_by[1];
  // a double epilogue rounds into 16-bit C only through the general path (once, from double)
  const bool plain_out = p.out == value_format::f32 ||
                         (std::is_same_v<W, float> && (p.out == value_format::f16 || p.out == value_format::bf16));
  const bool plain_bias = p.bias == nullptr || p.bias_format == value_format::f32 || p.bias_format == value_format::f16 ||
                          p.bias_format == value_format::bf16;
  p.plain = ep.mode == rounding::nearest_even && ep.ov == overflow::infinity && p.beta == W(0) && plain_bias &&
            (ep.act == activation::none || ep.act == activation::relu) && plain_out;
  p.pairs = p.cs == 1 && p.rs % 2 == 0 && reinterpret_cast<std::uintptr_t>(p.c) % (2 * sizeof(Out)) == 0;
  return p;
}

/// Whether Op can name the format operands are rounded to before the product.
template <class Op>
constexpr bool operand_format() {
  if constexpr (std::is_void_v<Op>) return true;
  else if constexpr (device_value_format<Op>) return format_traits<Op>::has_infinity;
  else return false;
}

template <class T>
DeviceView<const T> const_view(const DeviceTensor<T>& t) {
  return t.view();
}
template <class T>
DeviceView<const precis::detail::remove_const_t<T>> const_view(const DeviceView<T>& v) {
  return v;
}
template <class T>
DeviceView<T> mutable_view(DeviceTensor<T>& t) {
  return t.view();
}
template <class T>
DeviceView<T> mutable_view(const DeviceView<T>& v) {
  static_assert(!std::is_const_v<T>, "precis::cuda::gemm: C must be writable (a DeviceView of non-const elements)");
  return v;
}

}  // namespace detail

#if defined(PRECIS_CUDA_CUBLASLT)
namespace detail {
template <class Acc, class Op, class SA, class SB, class Out, class Bias>
void cublaslt_gemm(Acc alpha, const DeviceView<const SA>& a, const DeviceView<const SB>& b, Acc beta, const DeviceView<Out>& c,
                   const epilogue<Bias>& ep, cudaStream_t stream);
}  // namespace detail
#endif

/// C = epilogue(alpha * A B + beta * C) on the device, accumulating in Acc (see the file comment).
template <class Acc, class Operand = void, class A, class B, class C, class Bias = float>
void gemm(const Acc& alpha, const A& a_, const B& b_, const Acc& beta, C&& c_, const epilogue<Bias>& ep = {},
          const gemm_options& opt = {}) {
  const auto a = detail::const_view(a_);
  const auto b = detail::const_view(b_);
  const auto c = detail::mutable_view(c_);
  using SA = typename decltype(a)::storage_type;
  using SB = typename decltype(b)::storage_type;
  using Out = typename decltype(c)::storage_type;
  static_assert(detail::simt_accumulator<Acc>,
                "precis::cuda::gemm: the accumulator must be float, double, precis::half or precis::bfloat16");
  static_assert(detail::device_value_format<SA> && detail::device_value_format<SB>,
                "precis::cuda::gemm: A and B must be fp64, fp32 or a precis format (fp16, bf16, tf32, fp8, minifloat)");
  static_assert(detail::value_format_of<Out>() >= 0 && detail::value_format_of<Bias>() >= 0,
                "precis::cuda::gemm: C and the bias must be fp64, fp32, fp16, bf16, fp8 e4m3 or fp8 e5m2");
  static_assert(detail::operand_format<Operand>(),
                "precis::cuda::gemm: Operand must be void or a format with infinities (fp8 e4m3 operands are converted "
                "by the caller, who chooses the overflow behaviour)");

  const char* op = "precis::cuda::gemm";
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2 || a.shape()[1] != b.shape()[0] || c.shape()[0] != a.shape()[0] ||
      c.shape()[1] != b.shape()[1]) {
    throw shape_error(std::string(op) + ": A " + a.shape().str() + " times B " + b.shape().str() + " into C " + c.shape().str() +
                      "; expected A [m, k], B [k, n] and C [m, n]");
  }
  if (may_overlap(c, a) || may_overlap(c, b)) {
    throw aliasing_error(std::string(op) + ": C " + c.shape().str() + " shares memory with A or B; expected C disjoint from both");
  }
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (ep.bias.data() != nullptr && (ep.bias.rank() != 1 || ep.bias.shape()[0] != n || ep.bias.strides()[0] != 1)) {
    throw shape_error(std::string(op) + ": bias " + ep.bias.shape().str() + " for C " + c.shape().str() +
                      "; expected a contiguous vector of n = " + std::to_string(n) + " values");
  }
  if (ep.mode != rounding::nearest_even && ep.mode != rounding::stochastic) {
    throw invalid_argument(std::string(op) + ": epilogue rounding " + std::string(to_string(ep.mode)) +
                           "; expected nearest_even or stochastic");
  }
  if (ep.ov == overflow::infinity && !format_traits<Out>::has_infinity) {
    throw invalid_argument(std::string(op) + ": C is " + std::string(format_traits<Out>::name) +
                           ", which has no infinity; set the epilogue's ov to overflow::saturate or overflow::nan");
  }
  if (opt.split_k < 0) {
    throw invalid_argument(std::string(op) + ": gemm_options split_k " +
                           std::to_string(opt.split_k) +
                           "; expected 0 (choose), 1 (none) or a slice count");
  }
  if (m == 0 || n == 0) return;
  const cudaStream_t stream = opt.stream;
  const int forced_slices = opt.split_k != 0 ? opt.split_k : detail::split_k_from_env();

  if (opt.backend == gemm_backend::cublaslt) {
#if defined(PRECIS_CUDA_CUBLASLT)
    detail::cublaslt_gemm<Acc, Operand>(alpha, a, b, beta, c, ep, stream);
    return;
#else
    throw invalid_argument(std::string(op) + ": the cublaslt backend was requested, but this program was compiled "
                           "without it; define PRECIS_CUDA_CUBLASLT and link cublasLt");
#endif
  }

  constexpr int ka = detail::tc_kind_of<SA, Operand>(), kb = detail::tc_kind_of<SB, Operand>();
  constexpr bool tensor_cores = std::is_same_v<Acc, float> && detail::tc_pair(ka, kb);
  const auto dev = detail::current_device_info();
  const int cc = dev.major * 10 + dev.minor;

  // which kernel: the fastest that takes the call, or the one asked for (with the reason it
  // cannot run, if it cannot)
  std::string why_not_sm90, why_not_sm80;
  if constexpr (!tensor_cores) {
    why_not_sm90 = why_not_sm80 = "the tensor cores take fp16 x fp16, bf16 x bf16, tf32 x tf32 and fp8 x fp8 with a float accumulator";
  } else {
    constexpr auto kind_a = static_cast<detail::tc_kind>(ka);
    if (cc < 80) why_not_sm80 = "the device is sm_" + std::to_string(cc) + "; mma.sync needs sm_80";
    else if (detail::tc_fp8(kind_a) && cc < 89) why_not_sm80 = "fp8 tensor cores need sm_89 (the device is sm_" + std::to_string(cc) + ")";
    if (!dev.sm90a) why_not_sm90 = "the device is not sm_90 or this program has no sm_90a code";
    else if (ka != kb || kind_a == detail::tc_kind::tf32) why_not_sm90 = "the sm90 kernel takes fp16 x fp16, bf16 x bf16, e4m3 x e4m3 and e5m2 x e5m2";
  }
  gemm_backend use = opt.backend;
  if (use == gemm_backend::automatic) {
    constexpr bool sm90_default = ka == kb && ka != static_cast<int>(detail::tc_kind::tf32);
    use = (tensor_cores && sm90_default && why_not_sm90.empty()) ? gemm_backend::sm90
          : (tensor_cores && why_not_sm80.empty())               ? gemm_backend::sm80
                                                                  : gemm_backend::simt;
  } else if (use == gemm_backend::sm90 && !why_not_sm90.empty()) {
    throw invalid_argument(std::string(op) + ": backend sm90 cannot run this call: " + why_not_sm90);
  } else if (use == gemm_backend::sm80 && !why_not_sm80.empty()) {
    throw invalid_argument(std::string(op) + ": backend sm80 cannot run this call: " + why_not_sm80);
  }
  if (k == 0) use = gemm_backend::simt;  // nothing to multiply: the epilogue alone

  if (use == gemm_backend::simt) {
    using W = std::conditional_t<std::is_same_v<Acc, double>, double, float>;
    detail::launch_simt<Acc, Operand>(a, b, k, detail::make_epilogue_desc<W>(alpha, beta, c, ep),
                                      stream, forced_slices);
    return;
  }
  if constexpr (tensor_cores) {
    constexpr auto KA = static_cast<detail::tc_kind>(ka), KB = static_cast<detail::tc_kind>(kb);
    using TA = detail::tc_storage_t<KA>;
    using TB = detail::tc_storage_t<KB>;
    const auto p = detail::make_epilogue_desc<float>(alpha, beta, c, ep);
    std::optional<detail::stream_scratch> sa, sb;
    // B's transpose is n rows of k
    const auto ao = detail::k_major<TA, Operand>(a, a.strides()[0], a.strides()[1], m, k, stream, sa);
    const auto bo = detail::k_major<TB, Operand>(b, b.strides()[1], b.strides()[0], n, k, stream, sb);
    if (use == gemm_backend::sm90) {
      if constexpr (KA == KB && KA != detail::tc_kind::tf32) {
        detail::launch_sm90<KA>(ao, bo, k, p, stream, opt.cluster_m, opt.cluster_n, dev.sms,
                                forced_slices);
      }
    } else {
      detail::launch_sm80<KA, KB>(ao, bo, k, p, stream, forced_slices);
    }
  }
}

}  // namespace precis::cuda

#if defined(PRECIS_CUDA_CUBLASLT)
#include "precis/cuda/gemm/cublaslt.cuh"
#endif
