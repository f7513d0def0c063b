#pragma once

namespace eigen_baseline {

/// C = A B with Eigen's product of T (row-major, dense), on `threads` threads.
template <class T>
void product(const T* a, const T* b, T* c, long m, long k, long n, int threads);

}  // namespace eigen_baseline
