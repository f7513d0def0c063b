// Runs the products of both translation units at every GEMM instruction-set level this CPU has
// and checks that they agree bit for bit (exit 1 naming the first difference otherwise).
#include <cstdio>
#include <cstring>
#include <vector>

#include <precis/tensor/all.hpp>

#include "products.hpp"

namespace {

template <class T>
bool same(const char* what, precis::gemm_isa isa, int m, int k, int n, const std::vector<T>& x, const std::vector<T>& y) {
  if (x.size() != y.size()) {
    std::printf("%s, %s, %dx%dx%d: %zu and %zu entries\n", what, precis::to_string(isa), m, k, n, x.size(), y.size());
    return false;
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(T)) != 0) {
      std::printf("%s, %s, %dx%dx%d: entry %zu is %.17g with -mavx2 and %.17g without\n", what, precis::to_string(isa), m, k, n, i,
                  static_cast<double>(x[i]), static_cast<double>(y[i]));
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  using namespace mixed_flags;
  const int shapes[][3] = {{37, 300, 21}, {128, 784, 256}, {5, 3, 7}};
  bool ok = true;
  int levels = 0;
  for (auto isa : {precis::gemm_isa::portable, precis::gemm_isa::avx2, precis::gemm_isa::avx512, precis::gemm_isa::avx512_bf16,
                   precis::gemm_isa::amx_bf16}) {
    if (isa > precis::gemm_isa_available()) break;
    precis::limit_gemm_isa(isa);
    ++levels;
    for (const auto& s : shapes) {
      ok = same("float", isa, s[0], s[1], s[2], product_f_with_avx2(s[0], s[1], s[2]), product_f_without_avx2(s[0], s[1], s[2])) && ok;
      ok = same("double", isa, s[0], s[1], s[2], product_d_with_avx2(s[0], s[1], s[2]), product_d_without_avx2(s[0], s[1], s[2])) && ok;
    }
  }
  std::printf("%s: float and double products of both translation units at %d instruction-set levels\n",
              ok ? "identical" : "DIFFERENT", levels);
  return ok ? 0 : 1;
}
