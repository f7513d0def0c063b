#include <precis/precis.hpp>
int main() {
  auto x = precis::round_to<precis::float8_e4m3>(1.0f, precis::rounding::nearest_even,
                                                 precis::overflow::saturate);
  return static_cast<float>(x) == 1.0f ? 0 : 1;
}
