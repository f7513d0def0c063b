// Prints the parameters of every format precis knows, read from precis::format_traits, and
// shows one value rounded into each of them.
#include <cstdio>
#include <iostream>
#include <precis/precis.hpp>

int main() {
  std::cout << "precis format table (t counts the hidden bit; u = 2^-t)\n\n";
  precis::write_format_table(std::cout);

  const double x = 0.1;
  std::cout << "\n0.1 rounded to nearest (and toward zero) in each format:\n";
  const auto show = [&](const char* name, double nearest, double toward_zero) {
    std::printf("  %-9s %.17g  (%.17g)\n", name, nearest, toward_zero);
  };
  using precis::rounding;
  show("fp8_e4m3",
       static_cast<double>(precis::round_to<precis::float8_e4m3>(x, rounding::nearest_even, precis::overflow::saturate)),
       static_cast<double>(precis::round_to<precis::float8_e4m3>(x, rounding::toward_zero, precis::overflow::saturate)));
  show("fp8_e5m2", static_cast<double>(precis::round_to<precis::float8_e5m2>(x)),
       static_cast<double>(precis::round_to<precis::float8_e5m2>(x, rounding::toward_zero)));
  show("bf16", static_cast<double>(precis::round_to<precis::bfloat16>(x)),
       static_cast<double>(precis::round_to<precis::bfloat16>(x, rounding::toward_zero)));
  show("fp16", static_cast<double>(precis::round_to<precis::half>(x)),
       static_cast<double>(precis::round_to<precis::half>(x, rounding::toward_zero)));
  show("tf32", static_cast<double>(precis::round_to<precis::tf32>(x)),
       static_cast<double>(precis::round_to<precis::tf32>(x, rounding::toward_zero)));
  show("fp32", static_cast<double>(precis::round_to<float>(x)),
       static_cast<double>(precis::round_to<float>(x, rounding::toward_zero)));
  return 0;
}
