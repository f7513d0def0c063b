// The cuBLASLt backend of precis::cuda::gemm (gemm_backend::cublaslt): NVIDIA's kernels behind
// precis's call, for comparison and for users who want the vendor's GEMM. Compiled only when
// the program defines PRECIS_CUDA_CUBLASLT and links cublasLt (CMake: CUDA::cublasLt); included
// by precis/cuda/gemm.cuh.
//
// What it takes (anything else is an invalid_argument naming the reason):
//   Acc float with fp16, bf16, fp32 (Operand void: fp32 products; Operand tf32: TF32 tensor
//   cores) or fp8 operands; Acc double with fp64; Acc half with fp16. Operands with a unit
//   stride along a row or a column (plain or transposed), C with unit column stride, C of
//   fp16, bf16, fp32 or fp64. Epilogues: alpha, beta, a bias in C's format, relu and
//   gelu_tanh, rounding to nearest. cuBLASLt's own limits (fp8 needs both operands K-major, alignment ...) surface as
//   a cuda_error when it offers no algorithm.
// Row-major C = A B is computed as column-major C^T = B^T A^T. One handle and a 32 MiB
// workspace per device live for the process; the algorithm chosen by cuBLASLt's heuristic is
// cached per problem signature.
#pragma once

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "precis/cuda/device.cuh"
#include "precis/cuda/gemm/epilogue.cuh"

namespace precis::cuda::detail {

inline void check_cublaslt(cublasStatus_t st, const std::string& what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw cuda_error("precis::cuda::gemm (cublaslt): " + what + " failed: " + cublasLtGetStatusName(st) + " (" +
                   cublasLtGetStatusString(st) + ")");
}

template <class T>
constexpr int cublas_type() {
  if constexpr (std::is_same_v<T, precis::half>) return CUDA_R_16F;
  else if constexpr (std::is_same_v<T, precis::bfloat16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, precis::float8_e4m3>) return CUDA_R_8F_E4M3;
  else if constexpr (std::is_same_v<T, precis::float8_e5m2>) return CUDA_R_8F_E5M2;
  else return -1;
}

/// The process-lifetime handle and workspace of the current device (never freed: the CUDA
/// context may already be gone when static destructors run).
struct cublaslt_device {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  static constexpr std::size_t workspace_bytes = std::size_t{32} << 20;
};

inline cublaslt_device& cublaslt_for_current_device() {
  static std::mutex mu;
  static std::map<int, cublaslt_device> devices;
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  auto& d = devices[dev];
  if (d.handle == nullptr) {
    check_cublaslt(cublasLtCreate(&d.handle), "cublasLtCreate");
    check(cudaMalloc(&d.workspace, cublaslt_device::workspace_bytes), "cudaMalloc of the cuBLASLt workspace (32 MiB)");
  }
  return d;
}

/// Owns the descriptors of one call.
struct cublaslt_call {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublaslt_call() = default;
  cublaslt_call(const cublaslt_call&) = delete;
  cublaslt_call& operator=(const cublaslt_call&) = delete;
  ~cublaslt_call() {
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

template <class Acc, class Op, class SA, class SB, class Out, class Bias>
void cublaslt_gemm(Acc alpha, const DeviceView<const SA>& a, const DeviceView<const SB>& b, Acc beta, const DeviceView<Out>& c,
                   const epilogue<Bias>& ep, cudaStream_t stream) {
  const std::string op = "precis::cuda::gemm (cublaslt)";
  constexpr int ta = cublas_type<SA>(), tb = cublas_type<SB>(), tc = cublas_type<Out>(), tbias = cublas_type<Bias>();
  constexpr bool fp8 = (ta == CUDA_R_8F_E4M3 || ta == CUDA_R_8F_E5M2) && (tb == CUDA_R_8F_E4M3 || tb == CUDA_R_8F_E5M2);
  constexpr bool tf32 = std::is_same_v<Op, precis::tf32> && ta == CUDA_R_32F && tb == CUDA_R_32F;
  cublasComputeType_t compute{};
  cudaDataType_t scale{};
  if constexpr (std::is_same_v<Acc, float> && (std::is_void_v<Op> || tf32) &&
                ((ta == tb && (ta == CUDA_R_16F || ta == CUDA_R_16BF || ta == CUDA_R_32F)) || fp8)) {
    compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    scale = CUDA_R_32F;
  } else if constexpr (std::is_same_v<Acc, double> && std::is_void_v<Op> && ta == CUDA_R_64F && tb == CUDA_R_64F) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  } else if constexpr (std::is_same_v<Acc, precis::half> && std::is_void_v<Op> && ta == CUDA_R_16F && tb == CUDA_R_16F) {
    compute = CUBLAS_COMPUTE_16F;
    scale = CUDA_R_16F;
  } else {
    throw invalid_argument(op + ": these operand formats and accumulator have no cuBLASLt equivalent; expected fp16, bf16, "
                                "fp32 (or tf32) or fp8 with float accumulation, fp64 with double, fp16 with half");
  }
  if constexpr (tc != CUDA_R_16F && tc != CUDA_R_16BF && tc != CUDA_R_32F && tc != CUDA_R_64F) {
    throw invalid_argument(op + ": C must be fp16, bf16, fp32 or fp64");
  }
  if (ep.mode != rounding::nearest_even) throw invalid_argument(op + ": cuBLASLt rounds to nearest only");
  if (ep.divide_by[0] != nullptr || ep.divide_by[1] != nullptr) {
    throw invalid_argument(op + ": an alpha divided by device-held scales (epilogue::divide_by) is precis's kernels' epilogue; "
                                "cuBLASLt multiplies by its scales instead, which rounds differently");
  }
  if (ep.act == activation::gelu) throw invalid_argument(op + ": cuBLASLt's GELU is the tanh form; use activation::gelu_tanh");
  if (ep.bias.data() != nullptr && tbias != tc && !(tc == CUDA_R_32F && tbias == CUDA_R_32F)) {
    throw invalid_argument(op + ": cuBLASLt takes the bias in C's format; convert it first");
  }

  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  // A' = B^T: from B K-major (transposed view of n x k rows) or N-major (row-major k x n)
  cublasOperation_t op_a, op_b;
  index_t rows_a, cols_a, ld_a, rows_b, cols_b, ld_b;
  if (b.strides()[0] == 1 && b.strides()[1] >= k) {
    op_a = CUBLAS_OP_T, rows_a = k, cols_a = n, ld_a = b.strides()[1];
  } else if (b.strides()[1] == 1 && b.strides()[0] >= n) {
    op_a = CUBLAS_OP_N, rows_a = n, cols_a = k, ld_a = b.strides()[0];
  } else {
    throw invalid_argument(op + ": B with strides " + b.strides().str() + "; expected a unit stride along a row or a column");
  }
  // B' = A^T: from A K-major (row-major m x k) or M-major (a transposed view)
  if (a.strides()[1] == 1 && a.strides()[0] >= k) {
    op_b = CUBLAS_OP_N, rows_b = k, cols_b = m, ld_b = a.strides()[0];
  } else if (a.strides()[0] == 1 && a.strides()[1] >= m) {
    op_b = CUBLAS_OP_T, rows_b = m, cols_b = k, ld_b = a.strides()[1];
  } else {
    throw invalid_argument(op + ": A with strides " + a.strides().str() + "; expected a unit stride along a row or a column");
  }
  if (c.strides()[1] != 1 || c.strides()[0] < n) {
    throw invalid_argument(op + ": C with strides " + c.strides().str() + "; expected row-major rows (unit column stride)");
  }
  const index_t ld_c = c.strides()[0];
  const auto fix_ld = [](index_t ld, index_t rows) { return ld < 1 ? index_t{1} : (ld < rows ? rows : ld); };

  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const bool bias = ep.bias.data() != nullptr;
  switch (ep.act) {
    case activation::none: epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; break;
    case activation::relu: epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; break;
    case activation::gelu_tanh: epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; break;
    case activation::gelu: break;
  }

  auto& dev = cublaslt_for_current_device();
  cublaslt_call call;
  check_cublaslt(cublasLtMatmulDescCreate(&call.desc, compute, scale), "cublasLtMatmulDescCreate");
  check_cublaslt(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "set TRANSA");
  check_cublaslt(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "set TRANSB");
  check_cublaslt(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "set EPILOGUE");
  if (bias) {
    const void* bp = ep.bias.data();
    const auto bt = static_cast<cudaDataType_t>(tbias);
    check_cublaslt(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp), "set BIAS_POINTER");
    check_cublaslt(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                   "set BIAS_DATA_TYPE");
  }
  const auto layout = [](cublasLtMatrixLayout_t* l, int type, index_t rows, index_t cols, index_t ld) {
    check_cublaslt(cublasLtMatrixLayoutCreate(l, static_cast<cudaDataType_t>(type), static_cast<std::uint64_t>(rows),
                                              static_cast<std::uint64_t>(cols), static_cast<std::int64_t>(ld)),
                   "cublasLtMatrixLayoutCreate");
  };
  layout(&call.la, tb, rows_a, cols_a, fix_ld(ld_a, rows_a));
  layout(&call.lb, ta, rows_b, cols_b, fix_ld(ld_b, rows_b));
  layout(&call.lc, tc, n, m, fix_ld(ld_c, n));

  // the algorithm cuBLASLt's heuristic picks, once per problem signature
  using key_t = std::tuple<int, int, int, int, int, int, int, int, index_t, index_t, index_t, index_t, index_t, index_t, int, int>;
  static std::mutex mu;
  static std::map<key_t, cublasLtMatmulAlgo_t> algos;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const key_t key{device, ta, tb, tc, static_cast<int>(compute), static_cast<int>(op_a), static_cast<int>(op_b),
                  static_cast<int>(epi), m, n, k, ld_a, ld_b, ld_c, bias ? tbias : -1,
                  static_cast<int>((reinterpret_cast<std::uintptr_t>(a.data()) | reinterpret_cast<std::uintptr_t>(b.data()) |
                                    reinterpret_cast<std::uintptr_t>(c.data())) %
                                   16)};
  cublasLtMatmulAlgo_t algo{};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = algos.find(key);
    if (it == algos.end()) {
      cublasLtMatmulPreference_t pref = nullptr;
      check_cublaslt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
      std::size_t ws = cublaslt_device::workspace_bytes;
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      cublasStatus_t st =
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulAlgoGetHeuristic(dev.handle, call.desc, call.la, call.lb, call.lc, call.lc, pref, 1, &result, &found);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        throw cuda_error(op + ": cuBLASLt offers no algorithm for A " + a.shape().str() + " strides " + a.strides().str() + ", B " +
                         b.shape().str() + " strides " + b.strides().str() + " with these formats and epilogue" +
                         (st != CUBLAS_STATUS_SUCCESS ? std::string(" (") + cublasLtGetStatusName(st) + ")" : std::string()));
      }
      it = algos.emplace(key, result.algo).first;
    }
    algo = it->second;
  }
  using S = std::conditional_t<std::is_same_v<Acc, double>, double, std::conditional_t<std::is_same_v<Acc, precis::half>, __half, float>>;
  S al, be;
  if constexpr (std::is_same_v<S, __half>) {
    al = __float2half_rn(static_cast<float>(alpha));
    be = __float2half_rn(static_cast<float>(beta));
  } else {
    al = static_cast<S>(alpha);
    be = static_cast<S>(beta);
  }
  check_cublaslt(cublasLtMatmul(dev.handle, call.desc, &al, b.data(), call.la, a.data(), call.lb, &be, c.data(), call.lc, c.data(),
                                call.lc, &algo, dev.workspace, cublaslt_device::workspace_bytes, stream),
                 "cublasLtMatmul (m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ")");
}

}  // namespace precis::cuda::detail
