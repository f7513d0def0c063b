// matmul under strict<mixed<float8_e4m3>>: fp8 operands without a per-tensor scale (1000 would
// saturate to 448). fp8 is only accepted as the scaled operands of fp8_mixed's GEMMs.
#include <precis/precis.hpp>

int main() {
  precis::Tensor<float> a({2, 2}), b({2, 2});
  auto c = precis::ops<precis::policy::strict<precis::policy::mixed<precis::float8_e4m3>>>::matmul(a, b);
  return static_cast<int>(c.size());
}
