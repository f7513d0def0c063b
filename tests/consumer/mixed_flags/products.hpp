// The same products, compiled into two translation units with different flags.
#pragma once

#include <vector>

namespace mixed_flags {
std::vector<float> product_f_with_avx2(int m, int k, int n);
std::vector<float> product_f_without_avx2(int m, int k, int n);
std::vector<double> product_d_with_avx2(int m, int k, int n);
std::vector<double> product_d_without_avx2(int m, int k, int n);
}  // namespace mixed_flags

// Deterministic inputs: the same in both translation units. VIEW turns the operands into
// something each TU spells differently (tensors in one, views in the other), so each TU
// instantiates, and runs, its own gemm<T, ...>: were the kernel chosen from a TU's flags, the
// linker could not hide it by keeping one copy of a shared instantiation.
#define MIXED_FLAGS_PRODUCT(T, NAME, VIEW)                                                    \
  std::vector<T> NAME(int m, int k, int n) {                                                  \
    precis::Tensor<T> a(precis::Shape{m, k}), b(precis::Shape{k, n}), c(precis::Shape{m, n}); \
    precis::fill_uniform(a, -1.0, 1.0, 11);                                                   \
    precis::fill_uniform(b, -1.0, 1.0, 12);                                                   \
    precis::gemm<T>(T(1), VIEW(a), VIEW(b), T(0), VIEW(c), 1);                                \
    return std::vector<T>(c.begin(), c.end());                                                \
  }
