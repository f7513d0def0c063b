// A tour of the tensor engine: storage vs compute types, views, broadcasting, reductions with
// a named accumulator and algorithm, a bf16 GEMM accumulating in fp32, and Eigen interop.
#include <cstdio>
#include <precis/precis.hpp>

int main() {
  using precis::bfloat16;
  using precis::half;

  // Activations stored in bf16; element-wise math on them runs in float (the default Compute).
  precis::Tensor<bfloat16> x({128, 784}), w({784, 256});
  precis::fill_normal(x, 0.0, 1.0, /*seed=*/1);
  precis::fill_normal(w, 0.0, 0.05, /*seed=*/2);

  // GEMM: bf16 inputs, products accumulated in fp32 (the accumulator is always named).
  precis::Tensor<float> h({128, 256});
  precis::gemm<float>(1.0f, x, w, 0.0f, h);

  // Bias add broadcasts [256] over [128, 256]; relu; each op rounds once into its output.
  precis::Tensor<float> bias({256});
  precis::fill_uniform(bias, -0.1, 0.1, 3);
  const auto a = precis::relu(h + bias);

  // Views share memory: a transpose and a column slice, no copies.
  const auto at = a.transpose();
  const auto first_cols = a.slice(1, 0, 4);
  std::printf("a: %s, a^T: %s, slice: %s (strides %s)\n", a.shape().str().c_str(),
              at.shape().str().c_str(), first_cols.shape().str().c_str(),
              first_cols.strides().str().c_str());

  // Reductions name the accumulator and the summation algorithm.
  const auto hx = precis::astype<half>(a);  // round once into fp16 storage
  const auto rows_half = precis::sum<half>(hx, 1, precis::summation::recursive);
  const auto rows_float = precis::sum<float, float>(hx, 1, precis::summation::pairwise);
  std::printf("row 0 sum: fp16 recursive %.4f, fp32 pairwise %.4f\n",
              static_cast<float>(rows_half(0)), rows_float(0));

  const auto p = precis::softmax<float>(h, 1);
  std::printf("softmax row 0 sums to %.6f\n", precis::sum<double, double>(p.select(0, 0))());

  // Eigen sees the same memory.
  auto m = precis::as_eigen_matrix(h);
  std::printf("Eigen view of h: %ld x %ld, h(3, 5) = %.5f\n", static_cast<long>(m.rows()),
              static_cast<long>(m.cols()), static_cast<double>(m(3, 5)));
  return 0;
}
