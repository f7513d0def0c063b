// Bulk conversion to E4M3 without an overflow choice.
#include <precis/precis.hpp>
#include <vector>
int main() {
  std::vector<float> src(4, 1.0f);
  std::vector<precis::float8_e4m3> dst(4);
  precis::convert(src, dst);
}
