// Numerics case 1 (docs/numerics.md): the constants of each format, measured by rounding
// experiments (nothing read from precis::format_traits), beside the values in the formats'
// specifications: IEEE 754-2019 (binary16, binary32, binary64), Google's bfloat16, NVIDIA's
// TensorFloat-32, and the OCP 8-bit Floating Point Specification v1.0 (E4M3, E5M2). Every
// experiment rounds a 1000-bit value (analysis::exact_t) once into the format, so no other rounding
// interferes.
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>

#include "common.hpp"

namespace {

namespace an = precis::analysis;
namespace nb = precis::numerics_bench;
using precis::rounding;

struct spec {
  int digits;
  double max, min_normal, min_subnormal;
};

/// 2^e exactly.
an::exact_t pow2(int e) { return ldexp(an::exact_t(1), e); }

/// x rounded into F in `mode` (saturating), then widened back exactly.
template <class F>
an::exact_t through(const an::exact_t& x, rounding mode = rounding::nearest_even) {
  return precis::detail::load<an::exact_t>(precis::round_to<F>(x, mode, precis::overflow::saturate));
}

template <class F>
void BM_format_constants(benchmark::State& state, spec s) {
  int digits = 0, sub_exp = 0, normal_exp = 0;
  an::exact_t max = 0;
  for (auto _ : state) {
    // t: 1 + 2^-k is representable exactly for k <= t - 1 (2^{1-t} is ulp(1))
    int k = 1;
    while (through<F>(1 + pow2(-k)) == 1 + pow2(-k)) ++k;
    digits = k;
    // smallest subnormal: the last power of two that survives truncation
    int e = 0;
    while (through<F>(pow2(e - 1), rounding::toward_zero) != 0) --e;
    sub_exp = e;
    // smallest normal: the last power of two p for which p (1 + 2^{1-t}) keeps its t digits
    e = 0;
    while (through<F>(pow2(e - 1) * (1 + pow2(1 - digits))) == pow2(e - 1) * (1 + pow2(1 - digits))) --e;
    normal_exp = e;
    // largest finite: a huge value truncated with saturation
    max = through<F>(pow2(4096), rounding::toward_zero);
  }
  state.counters["digits"] = digits;
  state.counters["digits_spec"] = s.digits;
  state.counters["max"] = static_cast<double>(max);
  state.counters["max_spec"] = s.max;
  state.counters["min_normal"] = std::ldexp(1.0, normal_exp);
  state.counters["min_normal_spec"] = s.min_normal;
  state.counters["min_subnormal"] = std::ldexp(1.0, sub_exp);
  state.counters["min_subnormal_spec"] = s.min_subnormal;
  state.counters["u"] = std::ldexp(1.0, -digits);
  state.counters["u_spec"] = std::ldexp(1.0, -s.digits);
  state.SetLabel(nb::name_of<F>());
}

void register_all() {
  nb::add("format_constants/fp16", BM_format_constants<precis::half>, spec{11, 65504.0, 0x1p-14, 0x1p-24});
  nb::add("format_constants/bf16", BM_format_constants<precis::bfloat16>, spec{8, 0x1.FEp127, 0x1p-126, 0x1p-133});
  nb::add("format_constants/tf32", BM_format_constants<precis::tf32>, spec{11, 0x1.FFCp127, 0x1p-126, 0x1p-136});
  nb::add("format_constants/e4m3", BM_format_constants<precis::float8_e4m3>, spec{4, 448.0, 0x1p-6, 0x1p-9});
  nb::add("format_constants/e5m2", BM_format_constants<precis::float8_e5m2>, spec{3, 57344.0, 0x1p-14, 0x1p-16});
  nb::add("format_constants/fp32", BM_format_constants<float>, spec{24, 0x1.FFFFFEp127, 0x1p-126, 0x1p-149});
  nb::add("format_constants/fp64", BM_format_constants<double>,
          spec{53, 0x1.FFFFFFFFFFFFFp1023, 0x1p-1022, 0x1p-1074});
}

}  // namespace

int main(int argc, char** argv) { return nb::run(argc, argv, register_all); }
