// exp under strict<mixed<half, half>>: a mixed policy whose wide type is not wide.
#include <precis/precis.hpp>

int main() {
  precis::Tensor<precis::half> x({4});
  auto y = precis::ops<precis::policy::strict<precis::policy::mixed<precis::half, precis::half>>>::exp(x);
  return static_cast<int>(y.size());
}
