// A double tensor of independent uniform values, shared by the op layer's tests.
#pragma once

#include <precis/precis.hpp>
#include <random>

namespace precis_test {

/// Values uniform in [lo, hi) from a seeded mt19937_64, in storage order.
inline precis::Tensor<double> uniform(precis::Shape s, double lo, double hi, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  precis::Tensor<double> t(s);
  for (auto& v : t) v = u(g);
  return t;
}

}  // namespace precis_test
