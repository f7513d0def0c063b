// Bulk conversion throughput: precis::convert against, in the same run, the scalar path
// (precis's portable per-element loop), Eigen's element-wise cast, and a plain memcpy of the
// source bytes. bytes_per_second counts source + destination bytes.
// bench/ratios.py turns the JSON output into the ratio table quoted in docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstring>
#include <precis/precis.hpp>
#include <vector>

namespace {

template <class T>
std::vector<T> source(std::size_t n) {
  precis::xoshiro256pp gen(1);
  std::vector<float> f(n);
  // Normal-range values with random significands, both signs (what activations look like).
  for (auto& x : f) {
    x = std::ldexp(1.0f + static_cast<float>(gen() >> 40) * 0x1p-24f, static_cast<int>(gen() % 16) - 8) *
        ((gen() & 1) ? -1.0f : 1.0f);
  }
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else {
    std::vector<T> out(n);
    precis::convert(f, out, precis::rounding::nearest_even, precis::overflow::saturate);
    return out;
  }
}

template <class From, class To>
void set_bytes(benchmark::State& state, std::size_t n) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n * (sizeof(From) + sizeof(To))));
}

constexpr precis::overflow overflow_for(bool has_inf) {
  return has_inf ? precis::overflow::infinity : precis::overflow::saturate;
}

/// Times `body(src, dst)` converting n = range(0) elements From -> To.
template <class From, class To, class Body>
void time_conversion(benchmark::State& state, Body body) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto src = source<From>(n);
  std::vector<To> dst(n);
  for (auto _ : state) {
    body(src, dst);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes<From, To>(state, n);
}

template <class From, class To>
void BM_precis_convert(benchmark::State& state) {
  constexpr auto ov = overflow_for(precis::format_traits<To>::has_infinity);
  time_conversion<From, To>(state, [](const std::vector<From>& src, std::vector<To>& dst) {
    precis::convert(src, dst, precis::rounding::nearest_even, ov);
  });
}

template <class From, class To>
void BM_scalar_loop(benchmark::State& state) {
  constexpr auto ov = overflow_for(precis::format_traits<To>::has_infinity);
  time_conversion<From, To>(state, [](const std::vector<From>& src, std::vector<To>& dst) {
    precis::detail::convert_scalar(src.data(), dst.data(), src.size(), precis::rounding::nearest_even, ov);
  });
}

template <class From, class To>
void BM_eigen_cast(benchmark::State& state) {
  time_conversion<From, To>(state, [](const std::vector<From>& src, std::vector<To>& dst) {
    const auto len = static_cast<Eigen::Index>(src.size());
    Eigen::Map<Eigen::Array<To, Eigen::Dynamic, 1>>(dst.data(), len) =
        Eigen::Map<const Eigen::Array<From, Eigen::Dynamic, 1>>(src.data(), len).template cast<To>();
  });
}

template <class From, class To>
void BM_memcpy(benchmark::State& state) {
  // Copies the larger of the two buffers' bytes: the traffic a conversion cannot avoid.
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = n * std::max(sizeof(From), sizeof(To));
  std::vector<unsigned char> a(bytes, 1), b(bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  set_bytes<From, To>(state, n);
}

using precis::bfloat16;
using precis::float8_e4m3;
using precis::float8_e5m2;
using precis::half;

#define PRECIS_CONVERT_BENCH(From, To)                                                       \
  BENCHMARK(BM_precis_convert<From, To>)->Arg(1 << 14)->Arg(1 << 22);                        \
  BENCHMARK(BM_scalar_loop<From, To>)->Arg(1 << 14)->Arg(1 << 22);                           \
  BENCHMARK(BM_memcpy<From, To>)->Arg(1 << 14)->Arg(1 << 22);

PRECIS_CONVERT_BENCH(float, bfloat16)
PRECIS_CONVERT_BENCH(float, half)
PRECIS_CONVERT_BENCH(float, float8_e4m3)
PRECIS_CONVERT_BENCH(float, float8_e5m2)
PRECIS_CONVERT_BENCH(bfloat16, float)
PRECIS_CONVERT_BENCH(half, float)
PRECIS_CONVERT_BENCH(float8_e4m3, float)
PRECIS_CONVERT_BENCH(float8_e5m2, float)
// Eigen casts exist for its own 16-bit types.
BENCHMARK(BM_eigen_cast<float, bfloat16>)->Arg(1 << 14)->Arg(1 << 22);
BENCHMARK(BM_eigen_cast<float, half>)->Arg(1 << 14)->Arg(1 << 22);
BENCHMARK(BM_eigen_cast<bfloat16, float>)->Arg(1 << 14)->Arg(1 << 22);
BENCHMARK(BM_eigen_cast<half, float>)->Arg(1 << 14)->Arg(1 << 22);

}  // namespace

BENCHMARK_MAIN();
