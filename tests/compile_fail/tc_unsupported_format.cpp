// fp32 inputs: not an input format of sm90's tensor cores (tf32 is).
#include <span>
#include <vector>

#include <precis/tc/tensor_core.hpp>

int main() {
  const std::vector<float> a(16), b(16);
  const float d = precis::tc::inner_product<precis::tc::sm90, float>(0.0f, std::span<const float>(a),
                                                                     std::span<const float>(b));
  return static_cast<int>(d);
}
