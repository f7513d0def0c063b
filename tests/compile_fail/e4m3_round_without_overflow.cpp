// E4M3 has no infinity: the overflow behaviour must be named.
#include <precis/precis.hpp>
int main() { return static_cast<int>(static_cast<float>(precis::round_to<precis::float8_e4m3>(1.0f))); }
