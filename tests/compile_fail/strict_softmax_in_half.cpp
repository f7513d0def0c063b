// softmax under strict<true_<half>>: needs wide, would compute in fp16.
#include <precis/precis.hpp>

int main() {
  precis::Tensor<precis::half> x({2, 3});
  auto p = precis::ops<precis::policy::strict<precis::policy::true_<precis::half>>>::softmax(x, 1);
  return static_cast<int>(p.size());
}
