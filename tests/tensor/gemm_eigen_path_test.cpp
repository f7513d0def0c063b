// The same GEMM checks in a translation unit compiled with -mavx2 -mfma, where float/double
// products go to Eigen's AVX2 kernels (PRECIS_EIGEN_GEMM): same bounds, same semantics.
#include "support.hpp"

using namespace precis;
using namespace tensor_test;

static_assert(PRECIS_EIGEN_GEMM == 1, "this file must be compiled with -mavx2 -mfma");

template <class T>
void check_eigen_path(index_t m, index_t k, index_t n, bool tb, T alpha, T beta) {
  const auto a = random_tensor<T>({m, k}, -1, 1, 1);
  const auto b_store = random_tensor<T>(tb ? Shape{n, k} : Shape{k, n}, -1, 1, 2);
  const auto b = tb ? b_store.transpose() : b_store.view();
  const auto c0 = random_tensor<T>({m, n}, -1, 1, 3);
  auto c = c0;
  gemm<T>(alpha, a, b, beta, c, 2);
  const exact_t g = gamma<T>(k + 2);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      exact_t dot = 0, mag = 0;
      for (index_t p = 0; p < k; ++p) {
        dot += to_exact(a(i, p)) * to_exact(b(p, j));
        mag += abs(to_exact(a(i, p)) * to_exact(b(p, j)));
      }
      const exact_t cold = beta == T(0) ? exact_t(0) : to_exact(c0(i, j));
      const exact_t want = exact_t(alpha) * dot + exact_t(beta) * cold;
      ASSERT_LE(abs(to_exact(c(i, j)) - want), g * (abs(exact_t(alpha)) * mag + abs(exact_t(beta) * cold)));
    }
}

TEST(GemmEigenPath, FloatAndDoubleWithinBound) {
  check_eigen_path<float>(37, 300, 21, false, 1.0f, 0.0f);
  check_eigen_path<float>(19, 45, 33, true, -0.5f, 2.0f);
  check_eigen_path<double>(23, 77, 9, true, 1.5, -1.0);
}

TEST(GemmEigenPath, BetaZeroIgnoresNaN) {
  const auto a = random_tensor<float>({4, 5}, -1, 1, 1);
  const auto b = random_tensor<float>({5, 3}, -1, 1, 2);
  Tensor<float> c({4, 3});
  for (float& x : c) x = std::nanf("");
  gemm<float>(1.0f, a, b, 0.0f, c);
  for (float x : c) EXPECT_FALSE(std::isnan(x));
}
