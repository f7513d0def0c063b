// An fp8 input on a strict<fp8_mixed> tape: a value stored in fp8 without a scale.
#include <precis/precis.hpp>

int main() {
  precis::Tape<precis::policy::strict<precis::policy::fp8_mixed>> tape;
  precis::Tensor<precis::float8_e4m3> x({2, 2});
  auto v = tape.input(x);
  return static_cast<int>(v.size());
}
