// The format layer compiled by nvcc. Host checks always run (label `cuda`); with --device it
// compares the GPU's own fp16 and bf16 decoding against precis for every bit pattern (label
// `gpu`; exits 77, reported as skipped, when there is no CUDA device).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstring>
#include <precis/precis.hpp>
#include <vector>

#include "support.cuh"

namespace {

using cuda_test::bits_of;
using cuda_test::check;
using cuda_test::failures;

__global__ void decode_kernel(const unsigned short* h, const unsigned short* b, float* fh, float* fb, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    fh[i] = __half2float(__ushort_as_half(h[i]));
    fb[i] = __bfloat162float(__ushort_as_bfloat16(b[i]));
  }
}

int run_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  constexpr int n = 65536;
  std::vector<unsigned short> pats(n);
  for (int i = 0; i < n; ++i) pats[i] = static_cast<unsigned short>(i);
  unsigned short* d_pats = nullptr;
  float *d_h = nullptr, *d_b = nullptr;
  cudaMalloc(&d_pats, n * sizeof(unsigned short));
  cudaMalloc(&d_h, n * sizeof(float));
  cudaMalloc(&d_b, n * sizeof(float));
  cudaMemcpy(d_pats, pats.data(), n * sizeof(unsigned short), cudaMemcpyHostToDevice);
  decode_kernel<<<n / 256, 256>>>(d_pats, d_pats, d_h, d_b, n);
  std::vector<float> fh(n), fb(n);
  cudaMemcpy(fh.data(), d_h, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(fb.data(), d_b, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d_pats);
  cudaFree(d_h);
  cudaFree(d_b);
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("FAILED: CUDA error\n");
    return 1;
  }
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const auto h = precis::detail::bit_format<precis::half>::from_bits(pats[i]);
    const auto b = precis::detail::bit_format<precis::bfloat16>::from_bits(pats[i]);
    const float ph = precis::round_to<float>(h), pb = precis::round_to<float>(b);
    // NaNs: both NaN (payload conventions may differ between the GPU and IEEE quieting).
    bad += (ph != ph) ? !(fh[i] != fh[i]) : bits_of(ph) != bits_of(fh[i]);
    bad += (pb != pb) ? !(fb[i] != fb[i]) : bits_of(pb) != bits_of(fb[i]);
  }
  std::printf("device decode of every fp16 and bf16 pattern: %d mismatches\n", bad);
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--device") == 0) return run_device();
  check(bits_of(precis::round_to<precis::half>(0.1)) == 0x2e66u, "double -> half");
  check(bits_of(precis::round_to<precis::bfloat16>(0.1f)) == 0x3dcdu, "float -> bf16");
  check(static_cast<float>(precis::round_to<precis::float8_e4m3>(1000.0f, precis::rounding::nearest_even,
                                                                 precis::overflow::saturate)) == 448.0f,
        "float -> e4m3 saturate");
  std::vector<float> src(37, 0.1f);
  std::vector<precis::half> dst(src.size());
  precis::convert(src, dst, precis::rounding::toward_zero);
  check(bits_of(dst[36]) == bits_of(precis::round_to<precis::half>(0.1f, precis::rounding::toward_zero)),
        "bulk = scalar under nvcc");
  std::printf("%d passed, %d failed\n", 4 - failures, failures);
  return failures == 0 ? 0 : 1;
}
