// matmul under strict<named<"16-true">>: low-precision safe only with a wide accumulator.
#include <precis/precis.hpp>

int main() {
  precis::Tensor<precis::half> a({2, 3}), b({3, 2});
  auto c = precis::ops<precis::policy::strict<precis::policy::named<"16-true">>>::matmul(a, b);
  return static_cast<int>(c.size());
}
