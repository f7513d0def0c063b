// precis::analysis (Boost.Multiprecision references), precis::data (zlib) and precis::openmp.
#include <cstdio>
#include <fstream>
#include <string>

#include <precis/analysis/all.hpp>
#include <precis/data/idx.hpp>
#include <precis/precis.hpp>

#if !defined(_OPENMP)
#error "precis::openmp must compile the consumer with OpenMP"
#endif

int main(int argc, char** argv) {
  // analysis: the exact sum of 0.1f ten times
  precis::Tensor<float> x(precis::Shape{10});
  for (float& v : x) v = 0.1f;
  const auto [sum, abs_sum] = precis::analysis::reference_sum(x);
  const bool analysis_ok = sum == precis::analysis::exact_t(0.1f) * 10 && abs_sum == sum;
  // data: a 1-D IDX file of three unsigned bytes, written and read back
  const std::string path = std::string(argc > 1 ? argv[1] : ".") + "/consumer.idx";
  {
    std::ofstream f(path, std::ios::binary);
    const unsigned char bytes[] = {0, 0, 0x08, 1, 0, 0, 0, 3, 7, 8, 9};
    f.write(reinterpret_cast<const char*>(bytes), sizeof bytes);
  }
  const auto a = precis::data::read_idx(path, 1);
  const bool data_ok = a.dims.size() == 1 && a.dims[0] == 3 && a.bytes.size() == 3 && a.bytes[2] == 9;
  std::printf("analysis %s, data %s, openmp %d\n", analysis_ok ? "ok" : "WRONG", data_ok ? "ok" : "WRONG", _OPENMP);
  return analysis_ok && data_ok ? 0 : 1;
}
