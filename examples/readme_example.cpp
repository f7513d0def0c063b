// The README's minimal example, compiled in CI so the README stays true.
#include <precis/precis.hpp>
#include <vector>

int main() {
  using namespace precis;
  half h = round_to<half>(0.1);                                   // 0.0999755859375
  half up = round_to<half>(0.1, rounding::upward);                // 0.10003662109375
  float8_e4m3 f8 = round_to<float8_e4m3>(1000.0f, rounding::nearest_even,
                                         overflow::saturate);     // 448: e4m3 has no inf
  xoshiro256pp rng(42);
  bfloat16 sr = round_to<bfloat16>(1.001f, rounding::stochastic, rng);  // 1 or 1.0078125

  std::vector<float> x(1000, 0.1f);
  std::vector<bfloat16> y(x.size());
  convert(x, y);                                                  // AVX2 where available
  static_assert(format_traits<float8_e4m3>::max_finite() == 448.0);
  const bool ok = static_cast<float>(h) == 0.0999755859375f &&
                  static_cast<float>(up) == 0.10003662109375f && static_cast<float>(f8) == 448.0f &&
                  (static_cast<float>(sr) == 1.0f || static_cast<float>(sr) == 1.0078125f) &&
                  static_cast<float>(y[999]) == static_cast<float>(round_to<bfloat16>(0.1f));
  return ok ? 0 : 1;
}
