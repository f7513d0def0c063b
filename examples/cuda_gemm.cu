// precis::cuda::gemm in a few lines: a bf16 layer y = relu(x W^T + b) on the tensor cores with
// fp32 accumulation, the same product as fp32 data multiplied in tf32, and a check of both
// against precis::gemm on the host. Exits 77 (skipped) without a CUDA device.
#include <cmath>
#include <cstdio>
#include <precis/cuda/gemm.cuh>
#include <precis/precis.hpp>

int main() {
  if (precis::cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to run\n");
    return 77;
  }
  using precis::bfloat16;
  using precis::Shape;
  const precis::index_t batch = 256, in = 784, out = 512;

  // host data: x [batch, in], W [out, in] (PyTorch's Linear layout), b [out]
  precis::Tensor<float> x(Shape{batch, in}), w(Shape{out, in}), b(Shape{out});
  precis::fill_uniform(x, -1, 1, 1);
  precis::fill_uniform(w, -0.05, 0.05, 2);
  precis::fill_uniform(b, -0.1, 0.1, 3);

  // bf16 copies on the device; the bias stays fp32
  auto xd = precis::cuda::DeviceTensor<bfloat16>::from_host(precis::astype<bfloat16>(x));
  auto wd = precis::cuda::DeviceTensor<bfloat16>::from_host(precis::astype<bfloat16>(w));
  auto bd = precis::cuda::DeviceTensor<float>::from_host(b);
  precis::cuda::DeviceTensor<bfloat16> y(Shape{batch, out});

  // y = relu(x W^T + b): W^T is a view, the epilogue adds the bias and applies relu before the
  // single rounding to bf16
  precis::cuda::epilogue<float> ep;
  ep.bias = bd.view();
  ep.act = precis::cuda::activation::relu;
  precis::cuda::gemm<float>(1.0f, xd, wd.transpose(), 0.0f, y, ep);

  // the same product from fp32 data, multiplied as tf32 (rounded to nearest) on the tensor cores
  auto xf = precis::cuda::DeviceTensor<float>::from_host(x);
  auto wf = precis::cuda::DeviceTensor<float>::from_host(w);
  precis::cuda::DeviceTensor<float> z(Shape{batch, out});
  precis::cuda::gemm<float, precis::tf32>(1.0f, xf, wf.transpose(), 0.0f, z);

  // host references: the bf16 product with fp32 accumulation, and the fp32 product
  precis::Tensor<float> ref(Shape{batch, out}), ref32(Shape{batch, out});
  precis::gemm<float>(1.0f, precis::astype<bfloat16>(x), precis::astype<bfloat16>(w).transpose(), 0.0f, ref);
  precis::gemm<float>(1.0f, x, w.transpose(), 0.0f, ref32);
  const auto yh = y.to_host();
  const auto zh = z.to_host();
  double worst_y = 0, worst_z = 0;
  for (precis::index_t i = 0; i < batch; ++i) {
    for (precis::index_t j = 0; j < out; ++j) {
      const double want = std::fmax(0.0, static_cast<double>(ref(i, j)) + b(j));
      worst_y = std::fmax(worst_y, std::fabs(static_cast<double>(static_cast<float>(yh(i, j))) - want));
      worst_z = std::fmax(worst_z, std::fabs(static_cast<double>(zh(i, j)) - ref32(i, j)));
    }
  }
  std::printf("bf16 layer: largest difference from the host %.3g (bf16 output: half an ulp is 2^-9 relative)\n", worst_y);
  std::printf("tf32 product: largest difference from fp32 on the host %.3g\n", worst_z);
  return 0;
}
