// sum under strict<named<"bf16-true">>: needs wide, would accumulate in bf16 (stagnates at 256).
#include <precis/precis.hpp>

int main() {
  precis::Tensor<precis::bfloat16> x({300});
  auto s = precis::ops<precis::policy::strict<precis::policy::named<"bf16-true">>>::sum(x);
  return static_cast<int>(s.size());
}
