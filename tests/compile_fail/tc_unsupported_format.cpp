// fp8 inputs on sm80: Ampere's tensor cores take fp16, bf16 and tf32, not fp8 (Hopper's do).
#include <span>
#include <vector>

#include <precis/tc/tensor_core.hpp>

int main() {
  const std::vector<precis::float8_e4m3> a(32, precis::float8_e4m3(1.0f)), b(32, precis::float8_e4m3(1.0f));
  const float d = precis::tc::inner_product<precis::tc::sm80, precis::float8_e4m3>(
      0.0f, std::span<const precis::float8_e4m3>(a), std::span<const precis::float8_e4m3>(b));
  return static_cast<int>(d);
}
