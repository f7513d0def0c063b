// A program outside the precis tree: includes the umbrella header and uses the format layer.
#include <cstdio>
#include <precis/precis.hpp>

int main() {
  const auto h = precis::round_to<precis::half>(0.1);
  const auto f8 = precis::round_to<precis::float8_e4m3>(1000.0, precis::rounding::nearest_even,
                                                        precis::overflow::saturate);
  std::printf("%s %.10g %s %g\n", precis::format_traits<precis::half>::name.data(),
              static_cast<double>(static_cast<float>(h)),
              precis::format_traits<precis::float8_e4m3>::name.data(), static_cast<double>(static_cast<float>(f8)));
  return static_cast<float>(h) == 0.0999755859375f && static_cast<float>(f8) == 448.0f ? 0 : 1;
}
