// GEMM speed: precis::gemm for each input format against, in the same run, Eigen's product of
// the same type (fp8 has none: compare with Eigen's fp32 row; Eigen's 16-bit products
// accumulate in 16 bits and run scalar, so they are timed only up to 512) and the
// machine's practical peaks (a register-only FMA loop, and the register-tile kernel on
// L1-resident panels, which adds the loads every GEMM needs), for the AVX2 and, where the CPU has
// it, the AVX-512 kernels; and oneDNN's sgemm when the benchmark was built with it (Debian
// libdnnl-dev, found at configure time) and its bf16 matmul; OpenBLAS's sgemm and dgemm when
// built with it (Debian libopenblas-openmp-dev: oneDNN has no fp64 GEMM, so this is fp64's
// tuned-BLAS baseline); the vdpbf16ps ceiling and the AVX512-BF16 tile
// kernel alone where the CPU has AVX512-BF16; the fp16 vmulph + vaddph ceiling and the 16-true
// GEMM's tile kernels (the AVX-512 emulation, AVX512-FP16's native lanes) where the CPU has
// AVX512-FP16. precis::gemm runs at the level precis::gemm_isa_in_use()
// reports (PRECIS_GEMM_ISA=avx2 caps it). Counter GFLOP/s = 2mnk / time.
// bench/ratios.py --gemm turns the JSON into the table in docs/benchmarks.md.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <precis/precis.hpp>

#include "gemm_eigen_baseline.hpp"

#if PRECIS_X86_SIMD
#include <immintrin.h>
#endif
#if defined(PRECIS_BENCH_ONEDNN) || defined(PRECIS_BENCH_OPENBLAS)
#include <omp.h>
#endif
#if defined(PRECIS_BENCH_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#endif
#if defined(PRECIS_BENCH_OPENBLAS)
#include <cblas.h>
#endif

namespace {

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops_per_iter * 1e-9 * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

// Shapes: square n, or the demo MLP's forward layers at batch 128 (M x K x N).
struct shape {
  long m, k, n;
};
shape shape_of(const benchmark::State& state) {
  const long id = state.range(0);
  if (id > 0) return {id, id, id};
  static constexpr shape mlp[] = {{128, 784, 256}, {128, 256, 128}, {128, 128, 10}};
  return mlp[-id - 1];
}

/// precis::gemm on row-major A and B or, with Linear, a linear layer's forward: C = X W^T with W
/// stored [n, k] (B a transposed view, dense along k, as nn::Linear passes it).
template <class S, class Acc, bool Linear = false>
void BM_precis_gemm(benchmark::State& state) {
  const auto [m, k, n] = shape_of(state);
  const int threads = static_cast<int>(state.range(1));
  precis::Tensor<S> a({m, k}), b(Linear ? precis::Shape{n, k} : precis::Shape{k, n});
  precis::Tensor<Acc> c({m, n});
  precis::fill_uniform(a, -1, 1, 1);
  precis::fill_uniform(b, -1, 1, 2);
  for (auto _ : state) {
    if constexpr (Linear)
      precis::gemm<Acc>(Acc(1), a, b.transpose(), Acc(0), c, threads);
    else
      precis::gemm<Acc>(Acc(1), a, b, Acc(0), c, threads);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * double(m) * double(k) * double(n));
}

/// BM_precis_gemm with the GEMM's level capped at Cap (precis::limit_gemm_isa) for the run.
template <class S, class Acc, precis::gemm_isa Cap>
void BM_precis_gemm_capped(benchmark::State& state) {
  if (precis::gemm_isa_available() < Cap) {
    state.SkipWithError("the CPU lacks the level this row caps the GEMM at");
    return;
  }
  const precis::gemm_isa before = precis::limit_gemm_isa(Cap);
  BM_precis_gemm<S, Acc>(state);
  precis::limit_gemm_isa(before);
}

/// BM_precis_gemm with the threads splitting the rows and sharing the packed B, as the GEMM did
/// on more than 4 threads before it formed grids (precis::detail::set_gemm_split): beside
/// BM_precis_gemm in the same run, what the grid changes.
template <class S, class Acc>
void BM_precis_gemm_rows(benchmark::State& state) {
  const auto before = precis::detail::set_gemm_split(precis::detail::gemm_split::rows);
  BM_precis_gemm<S, Acc>(state);
  precis::detail::set_gemm_split(before);
}

/// The MLP's layers as nn::Linear computes them (BM_precis_gemm with Linear): the square shapes
/// and the MLP rows of BM_precis_gemm read B row-major.
template <class S, class Acc>
void BM_precis_linear(benchmark::State& state) {
  BM_precis_gemm<S, Acc, true>(state);
}

/// Eigen's product of T.
template <class T>
void BM_eigen_gemm(benchmark::State& state) {
  const auto [m, k, n] = shape_of(state);
  const int threads = static_cast<int>(state.range(1));
  precis::Tensor<T> a({m, k}), b({k, n}), c({m, n});
  precis::fill_uniform(a, -1, 1, 1);
  precis::fill_uniform(b, -1, 1, 2);
  for (auto _ : state) {
    eigen_baseline::product<T>(a.data(), b.data(), c.data(), m, k, n, threads);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * double(m) * double(k) * double(n));
}

#if PRECIS_X86_SIMD
/// 12 independent FMA chains in registers, no memory operands: the FMA pipes' ceiling.
template <class T>
PRECIS_TARGET_AVX2 void BM_peak_fma(benchmark::State& state) {
  using W = precis::detail::avx2_vec<T>;
  using V = typename W::V;
  const V x = W::set1(T(0.999999)), y = W::set1(T(1e-7));
  V c0 = x, c1 = x, c2 = x, c3 = x, c4 = x, c5 = x, c6 = x, c7 = x, c8 = x, c9 = x, c10 = x, c11 = x;
  constexpr long inner = 1 << 16;
  for (auto _ : state) {
    for (long i = 0; i < inner; ++i) {
      c0 = W::fma(c0, x, y); c1 = W::fma(c1, x, y); c2 = W::fma(c2, x, y); c3 = W::fma(c3, x, y);
      c4 = W::fma(c4, x, y); c5 = W::fma(c5, x, y); c6 = W::fma(c6, x, y); c7 = W::fma(c7, x, y);
      c8 = W::fma(c8, x, y); c9 = W::fma(c9, x, y); c10 = W::fma(c10, x, y); c11 = W::fma(c11, x, y);
    }
    benchmark::DoNotOptimize(c0); benchmark::DoNotOptimize(c1); benchmark::DoNotOptimize(c2);
    benchmark::DoNotOptimize(c3); benchmark::DoNotOptimize(c4); benchmark::DoNotOptimize(c5);
    benchmark::DoNotOptimize(c6); benchmark::DoNotOptimize(c7); benchmark::DoNotOptimize(c8);
    benchmark::DoNotOptimize(c9); benchmark::DoNotOptimize(c10); benchmark::DoNotOptimize(c11);
  }
  set_flops(state, 2.0 * 12 * W::lanes * double(inner));
}

/// precis's register-tile kernel alone on L1-resident packed panels (kc = 256): the ceiling
/// once the tile's loads are paid, before any packing or cache misses.
template <class T>
void BM_tile_kernel(benchmark::State& state) {
  using W = precis::detail::avx2_vec<T>;
  constexpr long kc = 256, nr = 2 * W::lanes;
  auto a = precis::detail::allocate_aligned<T>(6 * kc);
  auto b = precis::detail::allocate_aligned<T>(nr * kc);
  for (long i = 0; i < 6 * kc; ++i) a[static_cast<std::size_t>(i)] = T(1e-3);
  for (long i = 0; i < nr * kc; ++i) b[static_cast<std::size_t>(i)] = T(1e-3);
  alignas(64) T c[std::size_t{6} * nr] = {};
  for (auto _ : state) {
    precis::detail::avx2_tile_kernel<T>(kc, a.get(), b.get(), c, nr, 1, 6, nr, T(1), T(1));
    benchmark::DoNotOptimize(c);
  }
  set_flops(state, 2.0 * 6 * double(nr) * kc);
}

BENCHMARK_TEMPLATE(BM_peak_fma, float);
BENCHMARK_TEMPLATE(BM_peak_fma, double);
BENCHMARK_TEMPLATE(BM_tile_kernel, float);
BENCHMARK_TEMPLATE(BM_tile_kernel, double);

/// The AVX-512 FMA ceiling: 12 independent zmm FMA chains in registers.
template <class T>
PRECIS_TARGET_AVX512 void peak_fma_avx512_loop(benchmark::State& state) {
  using W = precis::detail::avx512_vec<T>;
  using V = typename W::V;
  const V x = W::set1(T(0.999999)), y = W::set1(T(1e-7));
  V c0 = x, c1 = x, c2 = x, c3 = x, c4 = x, c5 = x, c6 = x, c7 = x, c8 = x, c9 = x, c10 = x, c11 = x;
  constexpr long inner = 1 << 16;
  for (auto _ : state) {
    for (long i = 0; i < inner; ++i) {
      c0 = W::fma(c0, x, y); c1 = W::fma(c1, x, y); c2 = W::fma(c2, x, y); c3 = W::fma(c3, x, y);
      c4 = W::fma(c4, x, y); c5 = W::fma(c5, x, y); c6 = W::fma(c6, x, y); c7 = W::fma(c7, x, y);
      c8 = W::fma(c8, x, y); c9 = W::fma(c9, x, y); c10 = W::fma(c10, x, y); c11 = W::fma(c11, x, y);
    }
    benchmark::DoNotOptimize(c0); benchmark::DoNotOptimize(c1); benchmark::DoNotOptimize(c2);
    benchmark::DoNotOptimize(c3); benchmark::DoNotOptimize(c4); benchmark::DoNotOptimize(c5);
    benchmark::DoNotOptimize(c6); benchmark::DoNotOptimize(c7); benchmark::DoNotOptimize(c8);
    benchmark::DoNotOptimize(c9); benchmark::DoNotOptimize(c10); benchmark::DoNotOptimize(c11);
  }
  set_flops(state, 2.0 * 12 * W::lanes * double(inner));
}
template <class T>
void BM_peak_fma_avx512(benchmark::State& state) {
  if (!precis::detail::cpu_has_avx512f()) {
    state.SkipWithError("AVX-512F is not available on this CPU");
    return;
  }
  peak_fma_avx512_loop<T>(state);
}

/// precis's AVX-512 tile kernel alone on L1-resident packed panels (kc = 256).
template <class T>
void BM_tile_kernel_avx512(benchmark::State& state) {
  if (!precis::detail::cpu_has_avx512f()) {
    state.SkipWithError("AVX-512F is not available on this CPU");
    return;
  }
  using W = precis::detail::avx512_vec<T>;
  constexpr long kc = 256, nr = 2 * W::lanes, mr = 12;
  auto a = precis::detail::allocate_aligned<T>(mr * kc);
  auto b = precis::detail::allocate_aligned<T>(nr * kc);
  for (long i = 0; i < mr * kc; ++i) a[static_cast<std::size_t>(i)] = T(1e-3);
  for (long i = 0; i < nr * kc; ++i) b[static_cast<std::size_t>(i)] = T(1e-3);
  alignas(64) T c[std::size_t{mr} * nr] = {};
  for (auto _ : state) {
    precis::detail::avx512_tile_kernel<T>(kc, a.get(), b.get(), c, nr, 1, mr, nr, T(1), T(1));
    benchmark::DoNotOptimize(c);
  }
  set_flops(state, 2.0 * mr * double(nr) * kc);
}

BENCHMARK_TEMPLATE(BM_peak_fma_avx512, float);
BENCHMARK_TEMPLATE(BM_peak_fma_avx512, double);

std::vector<long> thread_counts();
/// The fp32 ceiling on every thread count above 1 that the GEMMs are measured at
/// (PRECIS_BENCH_THREADS), all threads at once, wall-clock rate summed over them: what the
/// cores issue together, the ceiling of a multi-threaded GEMM. Virtual CPUs that share a core
/// (SMT siblings, which a guest may not be told about) issue far less than their count's worth.
void peak_threads(benchmark::internal::Benchmark* b) {
  for (long t : thread_counts()) {
    if (t > 1) b->Threads(static_cast<int>(t));
  }
  b->UseRealTime();
}
BENCHMARK_TEMPLATE(BM_peak_fma_avx512, float)->Name("BM_peak_fma_avx512_all<float>")->Apply(peak_threads);
BENCHMARK_TEMPLATE(BM_tile_kernel_avx512, float);
BENCHMARK_TEMPLATE(BM_tile_kernel_avx512, double);

/// The vdpbf16ps ceiling: 24 independent chains in registers (each instruction 32 multiply-adds
/// on bf16 pairs = 64 flops).
PRECIS_TARGET_AVX512_BF16 void peak_dpbf16_loop(benchmark::State& state) {
  const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3F7F3F7F));
  const __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x33D633D6));
  __m512 c[24];
  for (auto& v : c) v = _mm512_set1_ps(1.0f);
  constexpr long inner = 1 << 15;
  for (auto _ : state) {
    for (long i = 0; i < inner; ++i) {
#pragma GCC unroll 24
      for (int r = 0; r < 24; ++r) c[r] = _mm512_dpbf16_ps(c[r], x, y);
    }
    for (auto& v : c) benchmark::DoNotOptimize(v);
  }
  set_flops(state, 64.0 * 24 * double(inner));
}

void BM_peak_dpbf16(benchmark::State& state) {
  if (!precis::detail::cpu_has_avx512_bf16()) {
    state.SkipWithError("AVX512-BF16 is not available on this CPU");
    return;
  }
  peak_dpbf16_loop(state);
}

/// precis's AVX512-BF16 tile kernel alone on L1-resident packed panels (kc = 256, 128 pairs).
void BM_tile_kernel_avx512_bf16(benchmark::State& state) {
  if (!precis::detail::cpu_has_avx512_bf16()) {
    state.SkipWithError("AVX512-BF16 is not available on this CPU");
    return;
  }
  constexpr long kp = 128, nr = 32, mr = 12;
  auto a = precis::detail::allocate_aligned<std::uint32_t>(mr * kp);
  auto b = precis::detail::allocate_aligned<std::uint32_t>(nr * kp);
  for (long i = 0; i < mr * kp; ++i) a[static_cast<std::size_t>(i)] = 0x3A833A83u;  // 1e-3 in both halves
  for (long i = 0; i < nr * kp; ++i) b[static_cast<std::size_t>(i)] = 0x3A833A83u;
  alignas(64) float c[std::size_t{mr} * nr] = {};
  for (auto _ : state) {
    precis::detail::avx512_bf16_tile_kernel(kp, a.get(), b.get(), c, nr, 1, mr, nr, 1.0f, 1.0f);
    benchmark::DoNotOptimize(c);
  }
  set_flops(state, 2.0 * mr * double(nr) * 2 * kp);
}

BENCHMARK(BM_peak_dpbf16);
BENCHMARK(BM_tile_kernel_avx512_bf16);
#endif

#if PRECIS_AVX512_FP16_KERNEL
/// The fp16 ceiling of the 16-true GEMM's step: 12 independent chains of acc = acc + x * y in
/// registers (vmulph then vaddph, rounded apart as the GEMM rounds them: 32 multiply-adds, 64
/// flops, per pair).
PRECIS_TARGET_AVX512_FP16 inline void fp16_step(__m512h& c, __m512h& x, __m512h y) {
  __asm__ volatile("" : "+v"(x));  // opaque: a product per chain and step, not hoisted
  c = precis::detail::fp16_add(c, precis::detail::fp16_mul(x, y));
}
PRECIS_TARGET_AVX512_FP16 void peak_fp16_loop(benchmark::State& state) {
  const __m512h y = _mm512_set1_ph(static_cast<_Float16>(1e-3f)), one = _mm512_set1_ph(static_cast<_Float16>(1.0f));
  __m512h x0 = _mm512_set1_ph(static_cast<_Float16>(0.999f)), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0,
          x8 = x0, x9 = x0, x10 = x0, x11 = x0;
  __m512h c0 = one, c1 = one, c2 = one, c3 = one, c4 = one, c5 = one, c6 = one, c7 = one, c8 = one, c9 = one, c10 = one,
          c11 = one;
  constexpr long inner = 1 << 15;
  for (auto _ : state) {
    for (long i = 0; i < inner; ++i) {
      fp16_step(c0, x0, y); fp16_step(c1, x1, y); fp16_step(c2, x2, y); fp16_step(c3, x3, y);
      fp16_step(c4, x4, y); fp16_step(c5, x5, y); fp16_step(c6, x6, y); fp16_step(c7, x7, y);
      fp16_step(c8, x8, y); fp16_step(c9, x9, y); fp16_step(c10, x10, y); fp16_step(c11, x11, y);
    }
    benchmark::DoNotOptimize(c0); benchmark::DoNotOptimize(c1); benchmark::DoNotOptimize(c2);
    benchmark::DoNotOptimize(c3); benchmark::DoNotOptimize(c4); benchmark::DoNotOptimize(c5);
    benchmark::DoNotOptimize(c6); benchmark::DoNotOptimize(c7); benchmark::DoNotOptimize(c8);
    benchmark::DoNotOptimize(c9); benchmark::DoNotOptimize(c10); benchmark::DoNotOptimize(c11);
  }
  set_flops(state, 64.0 * 12 * double(inner));
}

void BM_peak_fp16(benchmark::State& state) {
  if (!precis::detail::cpu_has_avx512_fp16()) {
    state.SkipWithError("AVX512-FP16 is not available on this CPU");
    return;
  }
  peak_fp16_loop(state);
}

/// The fp16-accumulator tile kernels alone on L1-resident packed panels (6 x 32, kc = 128):
/// the AVX-512 emulation in fp32 lanes (the baseline) and AVX512-FP16's native lanes, the
/// same bits.
template <bool Native>
void BM_tile_kernel_fp16_acc(benchmark::State& state) {
  if (!(Native ? precis::detail::cpu_has_avx512_fp16() : precis::detail::cpu_has_avx512f())) {
    state.SkipWithError(Native ? "AVX512-FP16 is not available on this CPU" : "AVX-512F is not available on this CPU");
    return;
  }
  using precis::half;
  constexpr long kc = 128, nr = 32, mr = 6;
  auto a = precis::detail::allocate_aligned<half>(mr * kc);
  auto b = precis::detail::allocate_aligned<half>(nr * kc);
  for (long i = 0; i < mr * kc; ++i) a[static_cast<std::size_t>(i)] = half(0.03f);
  for (long i = 0; i < nr * kc; ++i) b[static_cast<std::size_t>(i)] = half(0.03f);
  alignas(64) half c[std::size_t{mr} * nr] = {};
  for (auto _ : state) {
    if constexpr (Native) {
      precis::detail::avx512_fp16_tile_kernel(kc, a.get(), b.get(), c, nr, 1, mr, nr, half(1.0f), half(0.0f));
    } else {
      precis::detail::avx512_narrow_tile_kernel<half>(kc, a.get(), b.get(), c, nr, 1, mr, nr, half(1.0f), half(0.0f));
    }
    benchmark::DoNotOptimize(c);
  }
  set_flops(state, 2.0 * mr * double(nr) * kc);
}

BENCHMARK(BM_peak_fp16);
BENCHMARK_TEMPLATE(BM_tile_kernel_fp16_acc, false);
BENCHMARK_TEMPLATE(BM_tile_kernel_fp16_acc, true);
#endif

#if defined(PRECIS_BENCH_ONEDNN)
/// oneDNN's fp32 GEMM (dnnl_sgemm, row-major) on the same shapes and threads; with TransB 'T',
/// the linear layer's forward of BM_precis_linear.
template <char TransB = 'N'>
void BM_onednn_sgemm(benchmark::State& state) {
  const auto [m, k, n] = shape_of(state);
  omp_set_num_threads(static_cast<int>(state.range(1)));
  precis::Tensor<float> a({m, k}), b(TransB == 'T' ? precis::Shape{n, k} : precis::Shape{k, n}),
      c({m, n});
  precis::fill_uniform(a, -1, 1, 1);
  precis::fill_uniform(b, -1, 1, 2);
  const long ldb = TransB == 'T' ? k : n;
  for (auto _ : state) {
    if (dnnl_sgemm('N', TransB, m, n, k, 1.0f, a.data(), k, b.data(), ldb, 0.0f, c.data(), n) !=
        dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      return;
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  omp_set_num_threads(omp_get_num_procs());
  set_flops(state, 2.0 * double(m) * double(k) * double(n));
}

/// oneDNN's matmul primitive on bf16 A and B into fp32 C, row-major, created once. oneDNN has
/// no bf16 matmul for a CPU without AVX-512 (2.6: "could not create a primitive descriptor
/// iterator"): reported as this benchmark's error, and the others run.
void BM_onednn_bf16(benchmark::State& state) {
  const auto [m, k, n] = shape_of(state);
  omp_set_num_threads(static_cast<int>(state.range(1)));
  precis::Tensor<precis::bfloat16> a({m, k}), b({k, n});
  precis::Tensor<float> c({m, n});
  precis::fill_uniform(a, -1, 1, 1);
  precis::fill_uniform(b, -1, 1, 2);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const dnnl::memory::desc a_md({m, k}, dt::bf16, tag::ab), b_md({k, n}, dt::bf16, tag::ab), c_md({m, n}, dt::f32, tag::ab);
  dnnl::matmul prim;
  try {
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng));
  } catch (const dnnl::error& e) {
    omp_set_num_threads(omp_get_num_procs());
    state.SkipWithError((std::string("oneDNN has no bf16 matmul on this CPU: ") + e.what()).c_str());
    return;
  }
  dnnl::memory am(a_md, eng, a.data()), bm(b_md, eng, b.data()), cm(c_md, eng, c.data());
  for (auto _ : state) {
    prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    strm.wait();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  omp_set_num_threads(omp_get_num_procs());
  set_flops(state, 2.0 * double(m) * double(k) * double(n));
}
#endif

#if defined(PRECIS_BENCH_OPENBLAS)
/// OpenBLAS's GEMM (cblas_sgemm / cblas_dgemm, row-major) on the same shapes and threads. The
/// build links OpenBLAS's OpenMP variant, which runs on the same OpenMP runtime as precis and
/// oneDNN: a pthreads build's workers would keep spinning into the next benchmark.
template <class T>
void BM_openblas_gemm(benchmark::State& state) {
  const auto [m, k, n] = shape_of(state);
  const int threads = static_cast<int>(state.range(1));
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  precis::Tensor<T> a({m, k}), b({k, n}), c({m, n});
  precis::fill_uniform(a, -1, 1, 1);
  precis::fill_uniform(b, -1, 1, 2);
  const auto mi = static_cast<blasint>(m), ki = static_cast<blasint>(k),
             ni = static_cast<blasint>(n);
  for (auto _ : state) {
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0f, a.data(), ki,
                  b.data(), ni, 0.0f, c.data(), ni);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0, a.data(), ki,
                  b.data(), ni, 0.0, c.data(), ni);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(omp_get_num_procs());
  omp_set_num_threads(omp_get_num_procs());
  set_flops(state, 2.0 * double(m) * double(k) * double(n));
}
#endif

/// Attention's per-head products at the demo ViT's shapes, one thread: 512 heads (batch 128 x 4
/// heads) of S = Q K^T and O = S V, 16 x 16 x 16 each, through precis's GEMM (its small path),
/// through the blocked path these sizes took before it (gemm_packed with the same kernel,
/// called directly), or through oneDNN's sgemm.
enum class heads_path { gemm, packed, onednn };
template <heads_path Path>
void BM_attention_heads(benchmark::State& state) {
  constexpr long t = 16, d = 16, heads = 512;
  precis::Tensor<float> q({heads * t, d}), k({heads * t, d}), v({heads * t, d}), s({t, t}), o({heads * t, d});
  precis::fill_uniform(q, -1, 1, 1);
  precis::fill_uniform(k, -1, 1, 2);
  precis::fill_uniform(v, -1, 1, 3);
  const auto kern = precis::detail::select_kernel<float>(precis::gemm_isa_in_use());
#if defined(PRECIS_BENCH_ONEDNN)
  omp_set_num_threads(1);
#endif
  for (auto _ : state) {
    for (long h = 0; h < heads; ++h) {
      const float *qh = q.data() + h * t * d, *kh = k.data() + h * t * d, *vh = v.data() + h * t * d;
      float* oh = o.data() + h * t * d;
      if constexpr (Path == heads_path::gemm) {
        precis::detail::gemm_blocked<float>(t, t, d, 1.0f, qh, d, 1, kh, 1, d, 0.0f, s.data(), t, 1, 1);
        precis::detail::gemm_blocked<float>(t, d, t, 1.0f, s.data(), t, 1, vh, d, 1, 0.0f, oh, d, 1, 1);
      } else if constexpr (Path == heads_path::packed) {
        precis::detail::gemm_packed(kern, t, t, d, 1.0f, qh, d, 1, kh, 1, d, 0.0f, s.data(), t, 1, 1);
        precis::detail::gemm_packed(kern, t, d, t, 1.0f, s.data(), t, 1, vh, d, 1, 0.0f, oh, d, 1, 1);
      } else {
#if defined(PRECIS_BENCH_ONEDNN)
        if (dnnl_sgemm('N', 'T', t, t, d, 1.0f, qh, d, kh, d, 0.0f, s.data(), t) != dnnl_success ||
            dnnl_sgemm('N', 'N', t, d, t, 1.0f, s.data(), t, vh, d, 0.0f, oh, d) != dnnl_success) {
          state.SkipWithError("dnnl_sgemm failed");
          return;
        }
#endif
      }
    }
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
#if defined(PRECIS_BENCH_ONEDNN)
  omp_set_num_threads(omp_get_num_procs());
#endif
  set_flops(state, 2.0 * 2.0 * double(heads) * double(t * t * d));
}

/// Thread counts to measure: 1 and 2, or the comma-separated list in PRECIS_BENCH_THREADS
/// (e.g. "1,16" on a 16-core machine).
std::vector<long> thread_counts() {
  std::vector<long> t;
  if (const char* env = std::getenv("PRECIS_BENCH_THREADS")) {
    for (const char* p = env; *p;) {
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      if (end == p || v < 1 || v > 1024) {
        std::fprintf(stderr, "PRECIS_BENCH_THREADS=%s: expected thread counts from 1 to 1024, separated by commas\n", env);
        std::exit(2);
      }
      t.push_back(v);
      p = *end == ',' ? end + 1 : end;
    }
  }
  if (t.empty()) t = {1, 2};
  return t;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (long t : thread_counts()) {
    for (long n : {256, 512, 1024, 2048}) b->Args({n, t});
    for (long id : {-1, -2, -3}) b->Args({id, t});
  }
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// where the threads' split matters: the large squares and the MLP's two larger layers
void split_sizes(benchmark::internal::Benchmark* b) {
  for (long t : thread_counts()) {
    for (long n : {1024, 2048}) b->Args({n, t});
    for (long id : {-1, -2}) b->Args({id, t});
  }
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// the MLP's layers alone (BM_precis_linear)
void mlp_sizes(benchmark::internal::Benchmark* b) {
  for (long t : thread_counts())
    for (long id : {-1, -2, -3}) b->Args({id, t});
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

void small_sizes(benchmark::internal::Benchmark* b) {
  for (long t : thread_counts()) {
    for (long n : {256, 512}) b->Args({n, t});
    for (long id : {-1, -2, -3}) b->Args({id, t});
  }
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_TEMPLATE(BM_precis_gemm, float, float)->Apply(sizes);
#if defined(PRECIS_BENCH_ONEDNN)
BENCHMARK(BM_onednn_sgemm<'N'>)->Name("BM_onednn_sgemm")->Apply(sizes);
#endif
BENCHMARK_TEMPLATE(BM_eigen_gemm, float)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_precis_gemm, double, double)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_eigen_gemm, double)->Apply(sizes);
#if defined(PRECIS_BENCH_OPENBLAS)
BENCHMARK_TEMPLATE(BM_openblas_gemm, float)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_openblas_gemm, double)->Apply(sizes);
#endif
BENCHMARK_TEMPLATE(BM_precis_gemm, precis::bfloat16, float)->Apply(sizes);
#if defined(PRECIS_BENCH_ONEDNN)
BENCHMARK(BM_onednn_bf16)->Apply(sizes);
#endif
BENCHMARK_TEMPLATE(BM_precis_linear, float, float)->Apply(mlp_sizes);
#if defined(PRECIS_BENCH_ONEDNN)
BENCHMARK(BM_onednn_sgemm<'T'>)->Name("BM_onednn_linear")->Apply(mlp_sizes);
#endif
BENCHMARK_TEMPLATE(BM_precis_gemm_rows, float, float)->Apply(split_sizes);
BENCHMARK_TEMPLATE(BM_precis_gemm_rows, precis::bfloat16, float)->Apply(split_sizes);
BENCHMARK_TEMPLATE(BM_eigen_gemm, precis::bfloat16)->Apply(small_sizes);
BENCHMARK_TEMPLATE(BM_precis_gemm, precis::half, float)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_eigen_gemm, precis::half)->Apply(small_sizes);
BENCHMARK_TEMPLATE(BM_precis_gemm, precis::float8_e4m3, float)->Apply(sizes);
// Accumulating in the 16-bit format itself (the "-true" policies): the same arithmetic as
// Eigen's 16-bit products above, every product and sum rounded to the format.
BENCHMARK_TEMPLATE(BM_precis_gemm, precis::bfloat16, precis::bfloat16)->Apply(small_sizes);
BENCHMARK_TEMPLATE(BM_precis_gemm, precis::half, precis::half)->Apply(small_sizes);
BENCHMARK_TEMPLATE(BM_attention_heads, heads_path::gemm)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_attention_heads, heads_path::packed)->UseRealTime()->Unit(benchmark::kMicrosecond);
#if defined(PRECIS_BENCH_ONEDNN)
BENCHMARK_TEMPLATE(BM_attention_heads, heads_path::onednn)->UseRealTime()->Unit(benchmark::kMicrosecond);
#endif
#if PRECIS_AVX512_FP16_KERNEL
// the fp16 accumulator at the avx512 level (the emulation in fp32 lanes), beside the row above,
// which runs in AVX512-FP16's native lanes where the CPU has them: the same bits
BENCHMARK_TEMPLATE(BM_precis_gemm_capped, precis::half, precis::half, precis::gemm_isa::avx512)->Apply(small_sizes);
#endif

}  // namespace

int main(int argc, char** argv) {
  // the level precis's GEMM runs at, in the JSON's context: bench/ratios.py --gemm takes each
  // column's peak from the unit that level's kernel uses
  benchmark::AddCustomContext("precis_gemm_isa", precis::to_string(precis::gemm_isa_in_use()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
