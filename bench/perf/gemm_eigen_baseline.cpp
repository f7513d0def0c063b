// Eigen's own products, compiled with -mavx2 -mfma (see CMakeLists.txt) so the baseline uses
// Eigen's best kernels on this CPU, not its SSE2 default.
#include "gemm_eigen_baseline.hpp"

#include <Eigen/Core>

namespace eigen_baseline {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
void product(const T* a, const T* b, T* c, long m, long k, long n, int threads) {
  Eigen::setNbThreads(threads);
  Eigen::Map<const Mat<T>> A(a, m, k), B(b, k, n);
  Eigen::Map<Mat<T>> C(c, m, n);
  C.noalias() = A * B;
}

template void product<float>(const float*, const float*, float*, long, long, long, int);
template void product<double>(const double*, const double*, double*, long, long, long, int);
template void product<Eigen::half>(const Eigen::half*, const Eigen::half*, Eigen::half*, long, long, long, int);
template void product<Eigen::bfloat16>(const Eigen::bfloat16*, const Eigen::bfloat16*, Eigen::bfloat16*, long, long, long, int);

}  // namespace eigen_baseline
