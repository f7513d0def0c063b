// A tensor-core inner product whose static length (12) is not a multiple of the instruction's K
// (16 for sm90 fp16).
#include <array>
#include <span>

#include <precis/tc/tensor_core.hpp>

int main() {
  const std::array<precis::half, 12> a{}, b{};
  const float d = precis::tc::inner_product<precis::tc::sm90, precis::half>(0.0f, std::span<const precis::half, 12>(a),
                                                                            std::span<const precis::half, 12>(b));
  return static_cast<int>(d);
}
