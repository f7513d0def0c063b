// Numerics case 10: tensor-core features, measured by feature-targeted inner products run
// through each architecture's model (precis::tc) and printed beside what the literature reports.
//
// Each feature is read off the outputs of a few inner products built for it, in the manner of
// Fasi, Higham, Mikaitis & Pranesh (2021) and Li et al. (2024, "FTTN"); later vectors use the
// widths the earlier ones measured. All vectors have length 64 (a multiple of every
// instruction's K); unused entries are zero. Counters:
//   exact_products  1 if (1 + 2^-m)^2, m the input format's fraction bits, comes out exactly;
//   subnormal_in    1 if the smallest subnormal input times 1 comes out exactly;
//   align_bits      t: the largest j for which 1 - 2^-j (products 1*1 and -2^-j) comes out below 1,
//                   i.e. how far below the largest alignment exponent a term keeps bits;
//   sum_bits        p: 1 + the largest j <= t for which 1 + 2^-j comes out above 1, the
//                   significant bits a step's result keeps (readable while t >= p - 1);
//   rounding        of the result: c = +-(1 + 3 * 2^-(p-1)) plus the product +-1 lies between two
//                   p-bit neighbours, off their midpoint: 0 toward zero, 1 to nearest,
//                   2 toward -inf, 3 toward +inf, -1 none of these;
//   c_truncated     1 if c = -2^-(t+1) next to the product 1 is cut (the result is 1): c is
//                   aligned and truncated like the products;
//   block           the products per step: the smallest b for which two products 2^-(t+1) at
//                   positions 0 and 1, with +1 and -1 at b and b + 1, leave 2^-t (they were
//                   summed in a step of their own) rather than 0 (cut in one step with the 1s).
// The pub_ counters hold the published value of each (NaN where none is published); the label
// names the sources.
#include <benchmark/benchmark.h>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <precis/precis.hpp>
#include <precis/tc/tensor_core.hpp>

#include "common.hpp"

namespace {

namespace tc = precis::tc;
constexpr std::size_t n = 64;

template <class In>
struct vectors {
  std::vector<In> a = std::vector<In>(n, In(0.0f)), b = std::vector<In>(n, In(0.0f));
  /// Position i holds the product x * 2^-j, split over a and b so both stay in In's range.
  void product(std::size_t i, double x, int j) {
    const int ja = j / 2;
    a[i] = In(static_cast<float>(std::ldexp(x, -ja)));
    b[i] = In(static_cast<float>(std::ldexp(1.0, -(j - ja))));
  }
};

template <class Arch, class In>
float run(float c, const vectors<In>& v) {
  return tc::inner_product<Arch, In>(c, std::span<const In>(v.a), std::span<const In>(v.b));
}

/// What one reference reports, per feature; NaN where it says nothing.
struct published {
  double exact_products, subnormal_in, align_bits, sum_bits, rounding, c_truncated, block;
  const char* source;
};

template <class Arch, class In>
void BM_tc_features(benchmark::State& state, published pub) {
  constexpr int m = precis::format_traits<In>::digits - 1;
  double exact = 0, subnormal = 0, rounding = -1, c_cut = 0;
  int t = 0, p = 0, block = 0;
  for (auto _ : state) {
    {  // exact products
      vectors<In> v;
      v.product(0, 1.0 + std::ldexp(1.0, -m), 0);
      v.b[0] = v.a[0];
      const double want = (1.0 + std::ldexp(1.0, -m)) * (1.0 + std::ldexp(1.0, -m));
      exact = run<Arch, In>(0.0f, v) == want ? 1 : 0;
    }
    {  // subnormal inputs
      vectors<In> v;
      const auto tiny = static_cast<float>(precis::format_traits<In>::min_subnormal());
      v.a[0] = In(tiny);
      v.b[0] = In(1.0f);
      subnormal = run<Arch, In>(0.0f, v) == tiny ? 1 : 0;
    }
    // the alignment width t; the products -2^-j stay within the input format's range
    const int jmax = 2 * (m - precis::format_traits<In>::emin);
    for (int j = 1; j <= jmax; ++j) {
      vectors<In> v;
      v.product(0, 1.0, 0);
      v.product(1, -1.0, j);
      if (run<Arch, In>(0.0f, v) < 1.0f) t = j;
    }
    for (int j = 1; j <= t; ++j) {  // the result's significant bits p
      vectors<In> v;
      v.product(0, 1.0, 0);
      v.product(1, 1.0, j);
      if (run<Arch, In>(0.0f, v) > 1.0f) p = j + 1;
    }
    {  // rounding of the result: 2 + 3 * 2^-(p-1) between 2 + 2^-(p-2) and 2 + 2^-(p-3)
      const double lo = 2.0 + std::ldexp(1.0, -(p - 2)), hi = 2.0 + std::ldexp(1.0, -(p - 3));
      const auto c = static_cast<float>(1.0 + 3.0 * std::ldexp(1.0, -(p - 1)));
      vectors<In> v;
      v.product(0, 1.0, 0);
      const double up = run<Arch, In>(c, v);
      v.product(0, -1.0, 0);
      const double down = run<Arch, In>(-c, v);
      if (up == lo && down == -lo) rounding = 0;
      else if (up == hi && down == -hi) rounding = 1;
      else if (up == lo && down == -hi) rounding = 2;
      else if (up == hi && down == -lo) rounding = 3;
    }
    {  // c aligned and truncated with the products
      vectors<In> v;
      v.product(0, 1.0, 0);
      c_cut = run<Arch, In>(static_cast<float>(-std::ldexp(1.0, -(t + 1))), v) == 1.0f ? 1 : 0;
    }
    for (std::size_t b = 32; b >= 2; b /= 2) {  // products per step
      vectors<In> v;
      v.product(0, 1.0, t + 1);
      v.product(1, 1.0, t + 1);
      v.product(b, 1.0, 0);
      v.product(b + 1, -1.0, 0);
      if (run<Arch, In>(0.0f, v) != 0.0f) block = static_cast<int>(b);
    }
  }
  state.counters["exact_products"] = exact;
  state.counters["subnormal_in"] = subnormal;
  state.counters["align_bits"] = t;
  state.counters["sum_bits"] = p;
  state.counters["rounding"] = rounding;
  state.counters["c_truncated"] = c_cut;
  state.counters["block"] = block;
  state.counters["pub_exact_products"] = pub.exact_products;
  state.counters["pub_subnormal_in"] = pub.subnormal_in;
  state.counters["pub_align_bits"] = pub.align_bits;
  state.counters["pub_sum_bits"] = pub.sum_bits;
  state.counters["pub_rounding"] = pub.rounding;
  state.counters["pub_c_truncated"] = pub.c_truncated;
  state.counters["pub_block"] = pub.block;
  state.SetLabel(std::string(Arch::name) + " " + std::string(precis::format_traits<In>::name) + " (" + pub.source + ")");
}

// Published values. KM: Khattak & Mikaitis, "Accurate models of NVIDIA tensor cores" (ACM TACO,
// 2025; arXiv 2512.07004), the parameters of their validated models: products per step, extra
// alignment bits beyond fp32's 23 (t = 23 + extra), truncation of the result, c aligned with the
// products, subnormal inputs kept; for fp8 on H100 13 alignment bits and a 14-bit result. FHMP:
// Fasi, Higham, Mikaitis & Pranesh 2021 (V100, T4, A100): exact products, no guard digits,
// round-down for positive and round-up for negative values (toward zero), subnormal inputs
// accepted. DS: DeepSeek-V3 technical report (2024), section 3.3: fp8 accumulation on Hopper
// keeps about 14 bits. precis: 300 WMMA tiles per format recorded on an H100, and 100 tiles per
// instruction from precis's device GEMM (wgmma, mma.sync) on an H100 (tests/data).
void register_all() {
  namespace nb = precis::numerics_bench;
  nb::add("tc_features/sm70/fp16", BM_tc_features<tc::sm70, precis::half>,
          published{1, 1, 23, 24, 0, 1, 4, "V100: KM; FHMP"});
  nb::add("tc_features/sm80/fp16", BM_tc_features<tc::sm80, precis::half>,
          published{1, 1, 24, 24, 0, 1, 8, "A100: KM; FHMP"});
  nb::add("tc_features/sm80/bf16", BM_tc_features<tc::sm80, precis::bfloat16>,
          published{1, 1, 24, 24, 0, 1, 8, "A100: KM"});
  nb::add("tc_features/sm80/tf32", BM_tc_features<tc::sm80, precis::tf32>,
          published{1, 1, 24, 24, 0, 1, 4, "A100: KM"});
  nb::add("tc_features/sm90/fp16", BM_tc_features<tc::sm90, precis::half>,
          published{1, 1, 25, 24, 0, 1, 16, "H100: KM; precis recordings"});
  nb::add("tc_features/sm90/bf16", BM_tc_features<tc::sm90, precis::bfloat16>,
          published{1, 1, 25, 24, 0, 1, 16, "H100: KM; precis recordings"});
  nb::add("tc_features/sm90/tf32", BM_tc_features<tc::sm90, precis::tf32>,
          published{1, 1, 25, 24, 0, 1, 8, "H100: KM; precis recordings (mma.sync)"});
  nb::add("tc_features/sm90_wmma/tf32", BM_tc_features<tc::sm90_wmma, precis::tf32>,
          published{1, 1, 25, 24, 0, 1, 8, "H100: KM (block 8); precis recordings (WMMA): block 4"});
  nb::add("tc_features/sm90/fp8_e4m3", BM_tc_features<tc::sm90, precis::float8_e4m3>,
          published{1, 1, 13, 14, 0, 1, 32, "H100: KM; DS (about 14 bits)"});
  nb::add("tc_features/sm90/fp8_e5m2", BM_tc_features<tc::sm90, precis::float8_e5m2>,
          published{1, 1, 13, 14, 0, 1, 32, "H100: KM; DS (about 14 bits)"});
}

}  // namespace

int main(int argc, char** argv) { return precis::numerics_bench::run(argc, argv, register_all); }
