// precis::cuda::gemm (include/precis/cuda/gemm.cuh).
//
// Without --device (label `cuda`, runs in CI without a GPU): the tf32 register rounding equals
// precis::round_to<tf32>; Philox4x32-10 reproduces Random123's known answers; bad calls are
// named errors thrown before the device is touched; with no device, a call is a cuda_error.
//
// With --device (label `gpu`; exit 77, skipped, without a device), for every kernel the device
// and this program have (sm90, sm80, simt, cublaslt) and every operand format it takes:
//   exact:   integer operands whose products and sums are exact in the accumulator: C equals
//            the exact product bit for bit, for random shapes with ragged edges and every
//            transpose of A and B (any indexing or pipeline error shows as a wrong integer);
//   bounded: random operands; every element within the accumulation bound
//            gamma_K(u_acc) |A||B| (Higham eq. 3.5, with u_acc the accumulator's unit
//            roundoff; doubled for tensor cores, which truncate when aligning addends (Fasi,
//            Higham, Mikaitis & Pranesh 2021); fp8 tensor cores keep about 14 bits (DeepSeek-V3
//            report, section 3.3), so u_acc = 2^-13 there), plus the fp32 epilogue's roundings,
//            the activation's Lipschitz constant and evaluation error, and C's rounding;
//   split:   products of few tiles and a long K cut into slices of K (gemm_options::split_k
//            forced, and the automatic rule) beside whole K: the same exact and bounded checks,
//            the epilogue applied once after the slices are added;
//   rounded: C in fp16/bf16/fp8, to nearest or stochastically, equals the host's
//            precis::round_to of the same kernel's fp32 result, bit for bit, with the random
//            bits precis::cuda::stochastic_bits names for each element;
//   model:   (`--device model`) operands drawn over each format's range, K a few instructions
//            long: every fp32 output of the sm90 (wgmma) and sm80 (mma.sync) kernels equals
//            precis::tc::inner_product<tc::sm90, In> bit for bit (the tensor cores' own
//            arithmetic, modelled on the CPU). `--record DIR` also writes 16 x 16 tiles of
//            these products, in the layout of tests/data/tensor-core, for the CPU model's tests.
// The reference is the product of the exact operand values in double on the host.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <precis/cuda/gemm.cuh>
#include <precis/precis.hpp>
#include <precis/tc/tensor_core.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support.cuh"

namespace {

using cuda_test::bits_of;
using cuda_test::check;
using cuda_test::failures;
using precis::index_t;
using precis::Shape;
using precis::cuda::activation;
using precis::cuda::gemm_backend;

// --- host checks ---------------------------------------------------------------------------

/// 64 fixed bits as a UniformRandomBitGenerator, to ask the host's rounding for a given draw.
struct fixed_bits {
  using result_type = std::uint64_t;
  std::uint64_t v;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~std::uint64_t{0}; }
  result_type operator()() { return v; }
};

void host_tf32_rounding() {
  int bad = 0, n = 0;
  const auto one = [&](std::uint32_t x) {
    float f;
    std::memcpy(&f, &x, 4);
    const float want = static_cast<float>(precis::round_to<precis::tf32>(f));
    const std::uint32_t got = precis::cuda::detail::round_tf32_bits(x);
    float g;
    std::memcpy(&g, &got, 4);
    ++n;
    if (std::isnan(want) ? !std::isnan(g) : bits_of(want) != got) {
      if (bad++ < 5) std::printf("  tf32 rounding of 0x%08x: got 0x%08x, want 0x%08x\n", x, got, bits_of(want));
    }
  };
  // every exponent, both signs, mantissas around the rounding boundary and a stride through all
  for (std::uint32_t se = 0; se < 512; ++se) {
    for (std::uint32_t low : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x2fffu, 0x3000u, 0x3001u, 0x1ffu})
      for (std::uint32_t high : {0x000000u, 0x7fc000u, 0x7fe000u, 0x002000u, 0x400000u})
        one((se << 23) | high | low);
  }
  for (std::uint64_t x = 0; x < (std::uint64_t{1} << 32); x += 4093) one(static_cast<std::uint32_t>(x));
  check(bad == 0, "tf32 register rounding equals precis::round_to<tf32> (" + std::to_string(bad) + " of " +
                      std::to_string(n) + " differ)");
}

void host_philox() {
  // Random123's known-answer vectors for Philox4x32-10 (kat_vectors: zeros, ones, pi digits)
  const auto z = precis::philox4x32_10(0, 0, 0, 0, 0, 0);
  const auto f = precis::philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  const auto p = precis::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  check(z.v[0] == 0x6627e8d5u && z.v[1] == 0xe169c58du && z.v[2] == 0xbc57ac4cu && z.v[3] == 0x9b00dbd8u, "Philox KAT zeros");
  check(f.v[0] == 0x408f276du && f.v[1] == 0x41c83b0eu && f.v[2] == 0xa20bc7c6u && f.v[3] == 0x6d5451fdu, "Philox KAT ones");
  check(p.v[0] == 0xd16cfe09u && p.v[1] == 0x94fdccebu && p.v[2] == 0x5001e420u && p.v[3] == 0x24126ea1u, "Philox KAT pi");
  // element (i, j) draws words 2(j%2), 2(j%2)+1 of counter (j/2, i, offset)
  const auto r = precis::philox4x32_10(3, 7, 5, 0, 9, 0);
  check(precis::cuda::stochastic_bits(9, 5, 7, 7) == ((std::uint64_t{r.v[3]} << 32) | r.v[2]) &&
            precis::cuda::stochastic_bits(9, 5, 7, 6) == ((std::uint64_t{r.v[1]} << 32) | r.v[0]),
        "stochastic_bits draws its element's words");
}

template <class T>
precis::cuda::DeviceView<const T> fake(index_t r, index_t c) {
  return precis::cuda::DeviceView<const T>(reinterpret_cast<const T*>(std::uintptr_t{0x10000}), Shape{r, c});
}

template <class E, class F>
void expect_error(const char* what, const std::string& needle, F&& f) {
  try {
    f();
    check(false, std::string(what) + ": no exception");
  } catch (const E& e) {
    check(std::string(e.what()).find(needle) != std::string::npos, std::string(what) + ": message \"" + e.what() + "\"");
  } catch (const std::exception& e) {
    check(false, std::string(what) + ": wrong exception \"" + e.what() + "\"");
  }
}

void host_errors() {
  using precis::bfloat16;
  using precis::cuda::DeviceView;
  auto c = DeviceView<float>(reinterpret_cast<float*>(std::uintptr_t{0x900000}), Shape{4, 5});
  expect_error<precis::shape_error>("k mismatch", "A [4, 3] times B [2, 5] into C [4, 5]",
                                    [&] { precis::cuda::gemm<float>(1.0f, fake<bfloat16>(4, 3), fake<bfloat16>(2, 5), 0.0f, c); });
  expect_error<precis::shape_error>("C shape", "into C [4, 5]",
                                    [&] { precis::cuda::gemm<float>(1.0f, fake<bfloat16>(3, 3), fake<bfloat16>(3, 5), 0.0f, c); });
  auto alias = DeviceView<float>(reinterpret_cast<float*>(std::uintptr_t{0x10000}), Shape{4, 5});
  expect_error<precis::aliasing_error>("C aliases A", "shares memory",
                                       [&] { precis::cuda::gemm<float>(1.0f, fake<float>(4, 3), fake<float>(3, 5), 0.0f, alias); });
  precis::cuda::epilogue<float> ep;
  ep.bias = DeviceView<const float>(reinterpret_cast<const float*>(std::uintptr_t{0x800000}), Shape{4});
  expect_error<precis::shape_error>("bias length", "n = 5",
                                    [&] { precis::cuda::gemm<float>(1.0f, fake<bfloat16>(4, 3), fake<bfloat16>(3, 5), 0.0f, c, ep); });
  precis::cuda::epilogue<float> tz;
  tz.mode = precis::rounding::toward_zero;
  expect_error<precis::invalid_argument>("rounding mode", "nearest_even or stochastic",
                                         [&] { precis::cuda::gemm<float>(1.0f, fake<bfloat16>(4, 3), fake<bfloat16>(3, 5), 0.0f, c, tz); });
  precis::cuda::gemm_options neg;
  neg.split_k = -1;
  expect_error<precis::invalid_argument>("negative split_k", "split_k -1", [&] {
    precis::cuda::gemm<float>(1.0f, fake<bfloat16>(4, 3), fake<bfloat16>(3, 5), 0.0f, c, {}, neg);
  });
  auto c8 = DeviceView<precis::float8_e4m3>(reinterpret_cast<precis::float8_e4m3*>(std::uintptr_t{0x900000}), Shape{4, 5});
  expect_error<precis::invalid_argument>("e4m3 C without overflow mode", "overflow::saturate",
                                         [&] { precis::cuda::gemm<float>(1.0f, fake<bfloat16>(4, 3), fake<bfloat16>(3, 5), 0.0f, c8); });
}

void host_no_device() {
  if (precis::cuda::device_count() > 0) return;
  auto c = precis::cuda::DeviceView<float>(reinterpret_cast<float*>(std::uintptr_t{0x900000}), Shape{4, 5});
  expect_error<precis::cuda::cuda_error>("no device", "failed",
                                         [&] { precis::cuda::gemm<float>(1.0f, fake<float>(4, 3), fake<float>(3, 5), 0.0f, c); });
}

int run_host() {
  host_tf32_rounding();
  host_philox();
  host_errors();
  host_no_device();
  std::printf("%s\n", failures == 0 ? "host checks passed" : "host checks FAILED");
  return failures == 0 ? 0 : 1;
}

// --- device checks -------------------------------------------------------------------------

template <class T>
double to_double(const T& x) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return static_cast<double>(x);
  else if constexpr (std::is_same_v<T, precis::half> || std::is_same_v<T, precis::bfloat16>) return static_cast<double>(static_cast<float>(x));
  else return static_cast<double>(x);
}

template <class T>
T from_double(double x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else if constexpr (precis::format_traits<T>::has_infinity) return precis::round_to<T>(x);
  else return precis::round_to<T>(x, precis::rounding::nearest_even, precis::overflow::saturate);
}

/// Unit roundoff of a format, as double.
template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -precis::format_traits<T>::digits);
}

double gamma(double k, double u) { return k * u < 1 ? k * u / (1 - k * u) : INFINITY; }

/// How a kernel accumulates K products, as a bound |C - AB| <= coefficient(K) |A||B|: with unit
/// roundoff u throughout (Higham eq. 3.5), or in blocks of `block` products at u whose sums
/// are added at u_outer (the blockwise analysis of Blanchard, Higham, Lopez, Mary & Pranesh
/// 2020).
struct accumulation {
  double u = 0x1p-24;
  int block = 0;
  double u_outer = 0x1p-24;
  accumulation(double unit) : u(unit) {}  // NOLINT: a plain unit roundoff converts
  accumulation(double unit, int b, double outer) : u(unit), block(b), u_outer(outer) {}
  double coefficient(index_t k) const {
    if (block == 0 || k <= block) return gamma(static_cast<double>(k), u);
    return gamma(block, u) + gamma(std::ceil(static_cast<double>(k) / block), u_outer);
  }
};

enum class data { exact, signed_uniform, positive_uniform };

struct spec {
  gemm_backend backend = gemm_backend::automatic;
  index_t m = 1, n = 1, k = 1;
  bool at = false, bt = false;  // pass A (B) as the transpose view of a stored A^T (B^T)
  data values = data::signed_uniform;
  double alpha = 1, beta = 0;
  bool bias = false;
  bool bias_bf16 = false;  // the bias in bf16 (its values rounded to bf16 first), not fp32
  activation act = activation::none;
  precis::rounding mode = precis::rounding::nearest_even;
  precis::overflow ov = precis::overflow::infinity;
  int cluster_m = 0, cluster_n = 0;
  int split_k = 0;  // gemm_options::split_k
  std::uint64_t seed = 1;
};

std::string describe(const spec& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s m=%td n=%td k=%td%s%s", precis::cuda::to_string(s.backend), s.m, s.n, s.k, s.at ? " A^T" : "",
                s.bt ? " B^T" : "");
  std::string d = buf;
  if (s.cluster_m) d += " cluster " + std::to_string(s.cluster_m) + "x" + std::to_string(s.cluster_n);
  if (s.split_k) d += " split_k=" + std::to_string(s.split_k);
  if (s.alpha != 1 || s.beta != 0) d += " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta);
  if (s.bias) d += s.bias_bf16 ? " +bf16 bias" : " +bias";
  if (s.act == activation::relu) d += " relu";
  if (s.act == activation::gelu) d += " gelu";
  if (s.act == activation::gelu_tanh) d += " gelu_tanh";
  if (s.mode == precis::rounding::stochastic) d += " SR";
  return d;
}

/// Host matrices of exact values in the stored format, and what the kernel multiplies (after
/// rounding to the operand format).
template <class S, class Op>
struct operand {
  std::vector<S> stored;   // logical row-major rows x cols
  std::vector<double> x;   // the values multiplied
};

template <class S, class Op>
operand<S, Op> make_operand(index_t rows, index_t cols, data d, std::uint64_t seed, bool op_exact) {
  operand<S, Op> o;
  o.stored.resize(static_cast<std::size_t>(rows * cols));
  o.x.resize(o.stored.size());
  precis::xoshiro256pp g(seed);
  // fp8 e5m2 and the exact test keep every product and partial sum an integer the accumulator holds
  constexpr bool fp8 = std::is_same_v<S, precis::float8_e4m3> || std::is_same_v<S, precis::float8_e5m2>;
  for (std::size_t i = 0; i < o.stored.size(); ++i) {
    const double u = static_cast<double>(g() >> 11) * 0x1p-53;
    double v;
    if (d == data::exact) v = fp8 ? std::floor(u * 3.0) - 1.0 : std::floor(u * 5.0) - 2.0;
    else if (d == data::signed_uniform) v = 2.0 * u - 1.0;
    else v = u;
    // cuBLASLt converts fp32 to tf32 its own way: give it values that are tf32 already
    if constexpr (std::is_same_v<Op, precis::tf32>) {
      if (op_exact) v = to_double(precis::round_to<precis::tf32>(v));
    }
    o.stored[i] = from_double<S>(v);
    const double s = to_double(o.stored[i]);
    if constexpr (std::is_void_v<Op>) o.x[i] = s;
    else o.x[i] = to_double(precis::round_to<Op>(s));
  }
  return o;
}

/// ref = A B and mag = |A||B| in double (threads over rows).
void reference(const std::vector<double>& a, const std::vector<double>& b, index_t m, index_t n, index_t k, std::vector<double>& ref,
               std::vector<double>& mag) {
  ref.assign(static_cast<std::size_t>(m * n), 0.0);
  mag.assign(ref.size(), 0.0);
  const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nt; ++t) {
    pool.emplace_back([&, t] {
      for (index_t i = t; i < m; i += nt) {
        double* r = &ref[static_cast<std::size_t>(i * n)];
        double* g = &mag[static_cast<std::size_t>(i * n)];
        for (index_t p = 0; p < k; ++p) {
          const double av = a[static_cast<std::size_t>(i * k + p)];
          const double* bp = &b[static_cast<std::size_t>(p * n)];
          for (index_t j = 0; j < n; ++j) {
            r[j] += av * bp[j];
            g[j] += std::fabs(av) * std::fabs(bp[j]);
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
}

/// A device copy of a logical row-major rows x cols matrix, stored transposed when `t`; the
/// returned view is the logical matrix either way.
template <class S>
struct device_matrix {
  precis::cuda::DeviceTensor<S> storage;
  precis::cuda::DeviceView<const S> view;
  device_matrix(const std::vector<S>& v, index_t rows, index_t cols, bool t)
      : storage(t ? Shape{cols, rows} : Shape{rows, cols}) {
    precis::Tensor<S> h(t ? Shape{cols, rows} : Shape{rows, cols});
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j) h.data()[t ? j * rows + i : i * cols + j] = v[static_cast<std::size_t>(i * cols + j)];
    storage.copy_from(h);
    view = t ? storage.view().transpose() : storage.view();
  }
};

/// Everything one call produced.
template <class Out>
struct outcome {
  std::vector<Out> c;
  std::vector<double> ref, mag, cold, bias;
};

template <class Acc, class Op, class SA, class SB, class Out>
outcome<Out> run_gemm(const spec& s) {
  const bool op_exact = s.backend == gemm_backend::cublaslt;
  const auto a = make_operand<SA, Op>(s.m, s.k, s.values, s.seed * 3 + 1, op_exact);
  const auto b = make_operand<SB, Op>(s.k, s.n, s.values, s.seed * 3 + 2, op_exact);
  outcome<Out> r;
  reference(a.x, b.x, s.m, s.n, s.k, r.ref, r.mag);
  device_matrix<SA> da(a.stored, s.m, s.k, s.at);
  device_matrix<SB> db(b.stored, s.k, s.n, s.bt);
  // C: random old values when beta != 0, else poison (NaN, or the largest value for fp8 e4m3)
  precis::Tensor<Out> hc(Shape{s.m, s.n});
  precis::xoshiro256pp g(s.seed * 3 + 3);
  r.cold.resize(static_cast<std::size_t>(s.m * s.n));
  for (std::size_t i = 0; i < r.cold.size(); ++i) {
    const double v = s.beta != 0 ? static_cast<double>(g() >> 11) * 0x1p-52 - 1.0 : NAN;
    hc.data()[i] = from_double<Out>(v);
    r.cold[i] = to_double(hc.data()[i]);
  }
  auto dc = precis::cuda::DeviceTensor<Out>::from_host(hc);
  precis::cuda::DeviceTensor<float> dbias(Shape{s.n});
  precis::cuda::DeviceTensor<precis::bfloat16> dbias16(Shape{s.n});
  precis::cuda::epilogue<float> ep;
  precis::cuda::epilogue<precis::bfloat16> ep16;
  if (s.bias) {
    precis::Tensor<float> hb(Shape{s.n});
    precis::Tensor<precis::bfloat16> hb16(Shape{s.n});
    r.bias.resize(static_cast<std::size_t>(s.n));
    for (index_t j = 0; j < s.n; ++j) {
      hb.data()[j] = static_cast<float>(static_cast<double>(g() >> 11) * 0x1p-52 - 1.0);
      hb16.data()[j] = from_double<precis::bfloat16>(hb.data()[j]);
      r.bias[static_cast<std::size_t>(j)] = s.bias_bf16 ? to_double(hb16.data()[j]) : hb.data()[j];
    }
    dbias.copy_from(hb);
    dbias16.copy_from(hb16);
    ep.bias = dbias.view();
    ep16.bias = dbias16.view();
  }
  ep.act = ep16.act = s.act;
  ep.mode = ep16.mode = s.mode;
  ep.ov = ep16.ov = s.ov;
  ep.seed = ep16.seed = 0x1234567890abcdefULL ^ s.seed;
  ep.offset = ep16.offset = s.seed;
  precis::cuda::gemm_options opt;
  opt.backend = s.backend;
  opt.cluster_m = s.cluster_m;
  opt.cluster_n = s.cluster_n;
  opt.split_k = s.split_k;
  if (s.bias_bf16) precis::cuda::gemm<Acc, Op>(static_cast<Acc>(s.alpha), da.view, db.view, static_cast<Acc>(s.beta), dc, ep16, opt);
  else precis::cuda::gemm<Acc, Op>(static_cast<Acc>(s.alpha), da.view, db.view, static_cast<Acc>(s.beta), dc, ep, opt);
  precis::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after gemm");
  const auto back = dc.to_host();
  r.c.assign(back.data(), back.data() + back.size());
  return r;
}

double activation_value(activation a, double x) {
  switch (a) {
    case activation::none: return x;
    case activation::relu: return x < 0 ? 0 : x;
    case activation::gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case activation::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

/// Checks C element by element against the exact result (data::exact: bit for bit) or the
/// bound (see the file comment). u_acc: the accumulator's unit roundoff for this kernel.
/// Runs one case; an exception is a failed case, reported, not the end of the run.
template <class F>
void guarded(const std::string& name, const spec& s, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::printf("  %-6s %-52s ERROR %s\n", name.c_str(), describe(s).c_str(), e.what());
    check(false, name + " " + describe(s) + ": " + e.what());
  }
}

template <class Acc, class Op, class SA, class SB, class Out>
void check_values_unguarded(const std::string& name, const spec& s, const accumulation& u_acc) {
  const auto r = run_gemm<Acc, Op, SA, SB, Out>(s);
  const double uw = std::is_same_v<Acc, double> ? 0x1p-53 : 0x1p-24;  // the epilogue's arithmetic
  const double uo = unit_roundoff<Out>() * (s.mode == precis::rounding::stochastic ? 2 : 1);
  const double tiny = precis::format_traits<Out>::min_subnormal() * 1.0;
  const double lip = s.act == activation::gelu || s.act == activation::gelu_tanh ? 1.13 : 1.0;
  double worst = 0, err2 = 0, ref2 = 0;
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t e = 0; e < r.c.size(); ++e) {
    const std::size_t j = e % static_cast<std::size_t>(s.n);
    const double cold = s.beta != 0 ? r.cold[e] : 0.0, bias = s.bias ? r.bias[j] : 0.0;
    const double v = s.alpha * r.ref[e] + s.beta * cold + bias;
    const double want = activation_value(s.act, v);
    const double got = to_double(r.c[e]);
    double bound;
    if (s.values == data::exact) {
      bound = 0;  // integers: every product and partial sum is exact
    } else {
      const double t = std::fabs(s.alpha) * r.mag[e] + std::fabs(s.beta * cold) + std::fabs(bias);
      const double pre = std::fabs(s.alpha) * u_acc.coefficient(s.k) * r.mag[e] + gamma(4, uw) * t;
      const double post = lip * pre + (s.act == activation::gelu || s.act == activation::gelu_tanh ? 8 * uw * (t + std::fabs(want)) : 0);
      bound = post + uo * (std::fabs(want) + post) + tiny;
    }
    const double err = std::fabs(got - want);
    err2 += err * err;
    ref2 += want * want;
    if (!(err <= bound)) {
      if (bad++ == 0) first_bad = e;
    } else if (bound > 0) {
      worst = std::max(worst, err / bound);
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  std::printf("  %-6s %-52s %s  normwise %.2e  max err/bound %.3f\n", name.c_str(), describe(s).c_str(),
              bad ? "FAIL" : "ok  ", rel, worst);
  if (bad) {
    const std::size_t e = first_bad;
    std::printf("         %zu of %zu outside; first (%zu, %zu): got %.9g, want %.9g (|A||B| = %.6g)\n", bad, r.c.size(),
                e / static_cast<std::size_t>(s.n), e % static_cast<std::size_t>(s.n), to_double(r.c[e]),
                activation_value(s.act, s.alpha * r.ref[e] + s.beta * (s.beta != 0 ? r.cold[e] : 0.0) +
                                            (s.bias ? r.bias[e % static_cast<std::size_t>(s.n)] : 0.0)),
                r.mag[e]);
  }
  check(bad == 0, name + " " + describe(s));
}

template <class Acc, class Op, class SA, class SB, class Out>
void check_values(const std::string& name, const spec& s, const accumulation& u_acc) {
  guarded(name, s, [&] { check_values_unguarded<Acc, Op, SA, SB, Out>(name, s, u_acc); });
}

/// C rounded into Out (nearest or stochastic) equals the host's rounding of the same kernel's
/// fp32 result, element for element.
template <class Acc, class Op, class SA, class SB, class Out>
void check_rounding_unguarded(const std::string& name, spec s) {
  s.alpha = 1;
  s.beta = 0;
  s.bias = false;
  s.act = activation::none;
  const auto wide = run_gemm<Acc, Op, SA, SB, float>(s);
  const auto narrow = run_gemm<Acc, Op, SA, SB, Out>(s);
  const std::uint64_t seed = 0x1234567890abcdefULL ^ s.seed;
  std::size_t bad = 0, ups = 0, inexact = 0;
  for (std::size_t e = 0; e < wide.c.size(); ++e) {
    const auto i = static_cast<std::uint64_t>(e / static_cast<std::size_t>(s.n)), j = static_cast<std::uint64_t>(e % static_cast<std::size_t>(s.n));
    fixed_bits bitsrc{precis::cuda::stochastic_bits(seed, s.seed, i, j)};
    const float v = wide.c[e];
    const Out want = precis::round_to<Out>(v, s.mode, s.ov, bitsrc);
    const bool same = std::isnan(to_double(want)) ? std::isnan(to_double(narrow.c[e])) : bits_of(want) == bits_of(narrow.c[e]);
    bad += !same;
    const double nv = to_double(narrow.c[e]);
    if (nv != static_cast<double>(v)) {
      ++inexact;
      ups += std::fabs(nv) > std::fabs(static_cast<double>(v));
    }
  }
  std::printf("  %-6s %-52s %s  %zu of %zu rounded, %.1f%% away from zero\n", name.c_str(),
              (describe(s) + " -> " + std::string(precis::format_traits<Out>::name)).c_str(), bad ? "FAIL" : "ok  ", inexact,
              wide.c.size(), inexact ? 100.0 * static_cast<double>(ups) / static_cast<double>(inexact) : 0.0);
  check(bad == 0, name + " rounding " + describe(s));
}

template <class Acc, class Op, class SA, class SB, class Out>
void check_rounding(const std::string& name, const spec& s) {
  guarded(name, s, [&] { check_rounding_unguarded<Acc, Op, SA, SB, Out>(name, s); });
}

/// Shapes: edges of every tile size, and random ones.
std::vector<spec> shapes(gemm_backend be, data d, std::uint64_t seed) {
  std::vector<spec> v;
  const index_t fixed[][3] = {{1, 1, 1},     {7, 13, 5},     {128, 256, 64},   {129, 257, 65},
                              {64, 64, 2000}, {300, 520, 130}, {1000, 300, 197}, {256, 512, 1024}};
  for (const auto& f : fixed) {
    spec s;
    s.backend = be;
    s.m = f[0], s.n = f[1], s.k = f[2];
    s.values = d;
    v.push_back(s);
  }
  precis::xoshiro256pp g(seed);
  for (int i = 0; i < 6; ++i) {
    spec s;
    s.backend = be;
    s.m = static_cast<index_t>(1 + g() % 700), s.n = static_cast<index_t>(1 + g() % 700), s.k = static_cast<index_t>(1 + g() % 700);
    s.values = d;
    v.push_back(s);
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i].at = (i % 4) >= 2;
    v[i].bt = (i % 2) == 1;
    v[i].seed = seed * 100 + i;
    // most of these products have few tiles and are cut into slices of K by default: every
    // third one runs whole
    if (i % 3 == 2) v[i].split_k = 1;
  }
  return v;
}

/// cuBLASLt's fp8 kernels take only K-major operands ("TN") with 16-byte aligned rows.
template <class S>
spec fit_backend(spec s) {
  if (s.backend == gemm_backend::cublaslt && sizeof(S) == 1) {
    s.at = false, s.bt = true;
    s.k = (s.k + 15) / 16 * 16;
    s.n = (s.n + 7) / 8 * 8;
  }
  return s;
}

/// The exact and bounded tests of one operand format on one backend.
template <class Acc, class Op, class S, class Out>
void format_suite(const std::string& name, gemm_backend be, const accumulation& u_acc) {
  for (auto s : shapes(be, data::exact, 11)) check_values<Acc, Op, S, S, float>(name, fit_backend<S>(s), u_acc);
  for (auto s : shapes(be, data::signed_uniform, 12)) check_values<Acc, Op, S, S, Out>(name, fit_backend<S>(s), u_acc);
  spec s;
  s.backend = be;
  s.m = 333, s.n = 517, s.k = 1200;
  s.values = data::positive_uniform;
  check_values<Acc, Op, S, S, Out>(name, fit_backend<S>(s), u_acc);
  // fp32 C: the accumulation's own error, not hidden under C's rounding
  s.k = 4000;
  check_values<Acc, Op, S, S, float>(name, fit_backend<S>(s), u_acc);
  s.values = data::signed_uniform;
  check_values<Acc, Op, S, S, float>(name, fit_backend<S>(s), u_acc);
}

/// Epilogue variants on one backend (bf16 operands, bf16 or fp32 C).
void epilogue_suite(gemm_backend be, const accumulation& u_acc) {
  using precis::bfloat16;
  spec s;
  s.backend = be;
  s.m = 200, s.n = 300, s.k = 260;
  s.alpha = 0.75, s.beta = -0.5, s.bias = true;
  for (activation a : {activation::none, activation::relu, activation::gelu, activation::gelu_tanh}) {
    if (be == gemm_backend::cublaslt && a == activation::gelu) continue;
    s.act = a;
    check_values<float, void, bfloat16, bfloat16, float>("bf16", s, u_acc);
    // cuBLASLt wants a bf16 bias for bf16 C, and its bf16 GELU is off by a bf16 ulp in about
    // 1% of elements beyond an fp32 evaluation (measured on an H100): its own business
    if (be == gemm_backend::cublaslt && a == activation::gelu_tanh) continue;
    s.bias = be != gemm_backend::cublaslt;
    check_values<float, void, bfloat16, bfloat16, bfloat16>("bf16", s, u_acc);
    s.bias = true;
  }
  if (be == gemm_backend::cublaslt) return;  // cuBLASLt rounds to nearest only
  // C of 64 or more tiles and an epilogue that reads no C: finished inside the GEMM kernel
  // (fewer tiles, or beta != 0, go to the separate epilogue kernel above)
  spec big;
  big.backend = be;
  big.m = 1100, big.n = 2100, big.k = 100;
  big.act = activation::gelu_tanh;
  check_values<float, void, bfloat16, bfloat16, bfloat16>("bf16", big, u_acc);
  // alpha, a bias (fp32 or bf16) and relu with beta = 0: the plain store, inline as well
  big.act = activation::relu;
  big.alpha = 0.75;
  big.bias = true;
  for (const bool b16 : {false, true}) {
    big.bias_bf16 = b16;
    check_values<float, void, bfloat16, bfloat16, bfloat16>("bf16", big, u_acc);
    check_values<float, void, bfloat16, bfloat16, float>("bf16", big, u_acc);
  }
  big.alpha = 1;
  big.bias = big.bias_bf16 = false;
  big.act = activation::none;
  big.mode = precis::rounding::stochastic;
  check_rounding<float, void, bfloat16, bfloat16, bfloat16>("bf16", big);
  spec r;
  r.backend = be;
  r.m = 150, r.n = 270, r.k = 333;
  r.at = true;
  check_rounding<float, void, bfloat16, bfloat16, bfloat16>("bf16", r);
  check_rounding<float, void, bfloat16, bfloat16, precis::half>("bf16", r);
  r.mode = precis::rounding::stochastic;
  check_rounding<float, void, bfloat16, bfloat16, bfloat16>("bf16", r);
  check_rounding<float, void, bfloat16, bfloat16, precis::half>("bf16", r);
  r.ov = precis::overflow::saturate;
  check_rounding<float, void, bfloat16, bfloat16, precis::float8_e4m3>("bf16", r);
  r.mode = precis::rounding::nearest_even;
  check_rounding<float, void, bfloat16, bfloat16, precis::float8_e4m3>("bf16", r);
  r.ov = precis::overflow::infinity;
  check_rounding<float, void, bfloat16, bfloat16, precis::float8_e5m2>("bf16", r);
}

/// K in slices (gemm/split_k.cuh) on one backend, operands S accumulated in Acc: forced counts
/// (clipped to one K block a slice) and the automatic rule beside whole K, on a product of few
/// tiles and a long K; integers bit for bit, random data within the bound; the epilogue
/// (alpha, beta, bias, activation, C's rounding, stochastic too) applied once, after the
/// slices are added.
template <class Acc, class S>
void split_suite(const std::string& name, gemm_backend be, const accumulation& u_acc) {
  spec s;
  s.backend = be;
  s.m = 100, s.n = 70, s.k = 3001;
  for (int sk : {0, 1, 2, 3, 7, 32, 1000}) {
    s.split_k = sk;
    s.values = data::exact;
    s.bt = sk % 2 == 1;
    check_values<Acc, void, S, S, Acc>(name, s, u_acc);
    s.values = data::signed_uniform;
    check_values<Acc, void, S, S, Acc>(name, s, u_acc);
  }
  // a weight gradient's shape: C small, K the batch
  s.m = 64, s.n = 96, s.k = 20000, s.split_k = 0, s.at = true, s.bt = false;
  check_values<Acc, void, S, S, Acc>(name, s, u_acc);
  s.m = 130, s.n = 250, s.k = 999, s.at = false;
  s.alpha = 0.75, s.beta = -0.5, s.bias = true, s.act = activation::relu;
  for (int sk : {0, 5}) {
    s.split_k = sk;
    check_values<Acc, void, S, S, Acc>(name, s, u_acc);
    if constexpr (std::is_same_v<Acc, float>)
      check_values<Acc, void, S, S, precis::bfloat16>(name, s, u_acc);
  }
  if constexpr (std::is_same_v<Acc, float>) {
    spec r;
    r.backend = be;
    r.m = 150, r.n = 270, r.k = 1333;
    r.split_k = 5;
    check_rounding<float, void, S, S, precis::bfloat16>(name, r);
    r.mode = precis::rounding::stochastic;
    check_rounding<float, void, S, S, precis::half>(name, r);
  }
}

__global__ void round_tf32_kernel(const std::uint32_t* in, std::uint32_t* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = precis::cuda::detail::round_tf32_device(in[i]);
}

/// The kernels' tf32 rounding on this device equals precis::round_to<tf32> (NaNs: NaN).
void device_tf32_rounding() {
  std::vector<std::uint32_t> x;
  for (std::uint32_t se = 0; se < 512; ++se)
    for (std::uint32_t low : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x2fffu, 0x3000u, 0x3001u})
      for (std::uint32_t high : {0x000000u, 0x7fc000u, 0x7fe000u, 0x002000u, 0x400000u}) x.push_back((se << 23) | high | low);
  for (std::uint64_t v = 0; v < (std::uint64_t{1} << 32); v += 1021) x.push_back(static_cast<std::uint32_t>(v));
  const int n = static_cast<int>(x.size());
  precis::cuda::device_buffer<std::uint32_t> din(x.size()), dout(x.size());
  precis::cuda::check(cudaMemcpy(din.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "copy");
  round_tf32_kernel<<<(n + 255) / 256, 256>>>(din.data(), dout.data(), n);
  std::vector<std::uint32_t> y(x.size());
  precis::cuda::check(cudaMemcpy(y.data(), dout.data(), y.size() * 4, cudaMemcpyDeviceToHost), "copy back");
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    float f, g;
    std::memcpy(&f, &x[static_cast<std::size_t>(i)], 4);
    std::memcpy(&g, &y[static_cast<std::size_t>(i)], 4);
    const float want = static_cast<float>(precis::round_to<precis::tf32>(f));
    if (std::isnan(want) ? !std::isnan(g) : bits_of(want) != y[static_cast<std::size_t>(i)]) {
      if (bad++ < 5) std::printf("  device tf32 rounding of 0x%08x: got 0x%08x, want 0x%08x\n", x[static_cast<std::size_t>(i)],
                                 y[static_cast<std::size_t>(i)], bits_of(want));
    }
  }
  std::printf("device tf32 operand rounding: %d of %d differ from precis::round_to<tf32>\n", bad, n);
  check(bad == 0, "device tf32 operand rounding");
}


// --- bit-exact against the CPU tensor-core model ------------------------------------------

/// Operand values for the model comparison: +-2^e (1 + f), e uniform in [lo, hi], f uniform,
/// rounded to In. Regimes: 0 narrow (e in [-2, 2]); 1 wide (the format's range, products kept
/// inside fp32's); 2 tiny (the format's subnormals and smallest normals); 3 pairs (narrow, with
/// A's elements repeated in pairs along k and every even column of B negating the second of
/// each pair, so those products cancel exactly).
constexpr int model_regimes = 4;
const char* const model_regime_names[model_regimes] = {"narrow", "wide", "tiny", "pairs"};

template <class In>
void model_exponents(int regime, int& lo, int& hi) {
  constexpr int digits = precis::format_traits<In>::digits, emin = precis::format_traits<In>::emin,
                emax = precis::format_traits<In>::emax;
  lo = -2, hi = 2;
  if (regime == 1) lo = std::max(emin - digits + 1, -60), hi = std::min(emax - 1, 60);
  if (regime == 2) lo = emin - digits + 1, hi = emin + 2;
}

/// m x k values of In (row-major), drawn in `regime`; `b` marks the right operand (k x n).
template <class In>
std::vector<In> model_operand(index_t rows, index_t cols, int regime, bool b, std::uint64_t seed) {
  std::vector<In> v(static_cast<std::size_t>(rows * cols));
  precis::xoshiro256pp g(seed);
  int lo, hi;
  model_exponents<In>(regime, lo, hi);
  for (auto& x : v) {
    const int e = lo + static_cast<int>(g() % static_cast<std::uint64_t>(hi - lo + 1));
    const double f = static_cast<double>(g() >> 11) * 0x1p-53;
    const double s = (g() & 1) ? -1.0 : 1.0;
    x = from_double<In>(s * std::ldexp(1.0 + f, e));
  }
  if (regime == 3) {
    const index_t kdim = b ? rows : cols;
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) {
        const index_t p = b ? r : c;  // position along k
        if (p % 2 == 0 || p + 1 > kdim) continue;
        auto& x = v[static_cast<std::size_t>(r * cols + c)];
        if (!b) x = v[static_cast<std::size_t>(r * cols + c - 1)];
        else if (c % 2 == 0) x = from_double<In>(-to_double(v[static_cast<std::size_t>((r - 1) * cols + c)]));
      }
  }
  return v;
}

/// Tiles written by --record: one TCPROBE1 file per kernel and format (C = 0: the GEMM's
/// tensor cores start from zero).
struct tile_recorder {
  std::string dir;
  struct file {
    int k = 0, bytes = 0, tiles = 0;
    std::vector<char> body;
  };
  std::vector<std::pair<std::string, file>> files;
  file& get(const std::string& name) {
    for (auto& f : files)
      if (f.first == name) return f.second;
    files.emplace_back(name, file{});
    return files.back().second;
  }
  template <class T>
  static void put(std::vector<char>& body, T x) {
    const char* p = reinterpret_cast<const char*>(&x);
    body.insert(body.end(), p, p + sizeof x);
  }
  void write() const {
    for (const auto& [name, f] : files) {
      std::ofstream o(dir + "/" + name, std::ios::binary);
      o.write("TCPROBE1", 8);
      const std::int32_t head[3] = {f.tiles, f.k, f.bytes};
      o.write(reinterpret_cast<const char*>(head), sizeof head);
      o.write(f.body.data(), static_cast<std::streamsize>(f.body.size()));
      if (!o) throw std::runtime_error("cannot write " + dir + "/" + name);
      std::printf("recorded %d tiles (K = %d) in %s/%s\n", f.tiles, f.k, dir.c_str(), name.c_str());
    }
  }
};
tile_recorder* recorder = nullptr;

/// The input bit pattern of a model operand as the recorded files store it (tf32: the fp32
/// pattern, low 13 bits zero).
template <class In>
std::uint32_t recorded_bits(const In& x) {
  if constexpr (std::is_same_v<In, precis::tf32>) return bits_of(static_cast<float>(x));
  else return static_cast<std::uint32_t>(precis::detail::bit_format<In>::to_bits(x));
}

/// One GEMM C = A B (fp32 C, alpha 1, beta 0) on backend `be`, operands of In stored as S
/// (tf32: fp32 words holding tf32 values, rounded again by the kernel), compared element by
/// element with the CPU model of sm_90's tensor cores. Prints and returns the mismatches;
/// records tiles when asked.
template <class In, class S, class Op>
long model_case(const std::string& name, gemm_backend be, index_t m, index_t n, index_t k, int regime, std::uint64_t seed,
                const std::string& record, index_t slice) {
  const auto a = model_operand<In>(m, k, regime, false, seed * 2 + 1);
  const auto b = model_operand<In>(k, n, regime, true, seed * 2 + 2);
  const auto stored = [](const std::vector<In>& v) {
    std::vector<S> s(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) s[i] = static_cast<S>(static_cast<float>(v[i]));
    return s;
  };
  device_matrix<S> da(stored(a), m, k, false);
  device_matrix<S> db(stored(b), k, n, true);
  precis::Tensor<float> hc(Shape{m, n});
  for (index_t e = 0; e < m * n; ++e) hc.data()[e] = NAN;
  auto dc = precis::cuda::DeviceTensor<float>::from_host(hc);
  precis::cuda::gemm_options opt;
  opt.backend = be;
  opt.split_k = 1;  // the model is the tensor cores' chain over all of K
  precis::cuda::gemm<float, Op>(1.0f, da.view, db.view, 0.0f, dc, {}, opt);
  precis::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after gemm");
  const auto c = dc.to_host();
  // the model over rows, on the host's threads
  std::vector<long> bad_rows(static_cast<std::size_t>(m)), non_ieee_rows(static_cast<std::size_t>(m));
  std::vector<std::string> first(static_cast<std::size_t>(m));
  const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nt; ++t) {
    pool.emplace_back([&, t] {
      std::vector<In> row(static_cast<std::size_t>(k)), col(static_cast<std::size_t>(k));
      for (index_t i = t; i < m; i += nt) {
        for (index_t p = 0; p < k; ++p)
          row[static_cast<std::size_t>(p)] = a[static_cast<std::size_t>(i * k + p)];
        for (index_t j = 0; j < n; ++j) {
          double exact = 0;  // the sum in double: only for the printed share of non-IEEE outputs
          for (index_t p = 0; p < k; ++p) {
            col[static_cast<std::size_t>(p)] = b[static_cast<std::size_t>(p * n + j)];
            exact += to_double(a[static_cast<std::size_t>(i * k + p)]) * to_double(b[static_cast<std::size_t>(p * n + j)]);
          }
          // slices: the kernel adds each slice's tensor-core sum to an fp32 accumulator
          float want = 0.0f;
          for (index_t s0 = 0; s0 < k; s0 += slice) {
            const auto len = static_cast<std::size_t>(std::min(slice, k - s0));
            want += precis::tc::inner_product<precis::tc::sm90, In>(0.0f, std::span<const In>(row).subspan(static_cast<std::size_t>(s0), len),
                                                                        std::span<const In>(col).subspan(static_cast<std::size_t>(s0), len));
          }
          const float got = c.data()[i * n + j];
          const auto r = static_cast<std::size_t>(i);
          non_ieee_rows[r] += got != static_cast<float>(exact);
          if (bits_of(got) != bits_of(want) && bad_rows[r]++ == 0) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "    (%td, %td): kernel %a (0x%08x), model %a (0x%08x)\n", i, j, static_cast<double>(got),
                          bits_of(got), static_cast<double>(want), bits_of(want));
            first[r] = buf;
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  long bad = 0, non_ieee = 0, shown = 0;
  for (std::size_t r = 0; r < first.size(); ++r) {
    bad += bad_rows[r];
    non_ieee += non_ieee_rows[r];
    if (!first[r].empty() && shown++ < 3) std::printf("%s", first[r].c_str());
  }
  std::printf("  %-6s %-8s k=%-4td %-7s %s  %ld of %td outputs differ from the model; %.0f%% not the correctly rounded sum\n",
              name.c_str(), precis::cuda::to_string(be), k, model_regime_names[regime], bad ? "FAIL" : "ok  ", bad, m * n,
              100.0 * static_cast<double>(non_ieee) / static_cast<double>(m * n));
  if (recorder && !record.empty()) {
    auto& f = recorder->get(record);
    f.k = static_cast<int>(k);
    f.bytes = std::is_same_v<In, precis::tf32> ? 4 : static_cast<int>(sizeof(In));
    const auto put_bits = [&](std::uint32_t v) {
      const char* q = reinterpret_cast<const char*>(&v);
      f.body.insert(f.body.end(), q, q + f.bytes);  // little-endian: the low bytes
    };
    // tiles along the diagonal band: rows 16t.., columns 16(t + 3 regime)..
    for (index_t t = 0; t < 25 && 16 * t + 16 <= m; ++t) {
      const index_t i0 = 16 * t, j0 = 16 * ((t + 3 * regime) % (n / 16));
      for (index_t i = 0; i < 16; ++i)
        for (index_t p = 0; p < k; ++p) put_bits(recorded_bits(a[static_cast<std::size_t>((i0 + i) * k + p)]));
      for (index_t p = 0; p < k; ++p)
        for (index_t j = 0; j < 16; ++j) put_bits(recorded_bits(b[static_cast<std::size_t>(p * n + j0 + j)]));
      for (int e = 0; e < 256; ++e) tile_recorder::put(f.body, 0.0f);
      for (index_t i = 0; i < 16; ++i)
        for (index_t j = 0; j < 16; ++j) tile_recorder::put(f.body, c.data()[(i0 + i) * n + j0 + j]);
      ++f.tiles;
    }
  }
  return bad;
}

/// Every regime at K = 1, 2, 5 and 37 instructions (past a stage of the kernels, and ragged
/// against it); the record is taken at K = 2 instructions. `slice`: the K after which the
/// kernel adds the tensor cores' sum into fp32 accumulators (the sm90 kernel's fp8 promotion).
template <class In, class S, class Op>
void model_format(const std::string& name, gemm_backend be, int instruction_k, const std::string& record, index_t slice = 0) {
  const index_t m = 400, n = 264;  // ragged against both kernels' tiles
  for (int regime = 0; regime < model_regimes; ++regime)
    for (const index_t k : {1, 2, 5, 37}) {
      const index_t kk = k * instruction_k;
      const std::uint64_t seed = 7000 + static_cast<std::uint64_t>(regime * 100 + kk);
      long bad = -1;
      try {
        bad = model_case<In, S, Op>(name, be, m, n, kk, regime, seed, k == 2 ? record : std::string(), slice ? slice : kk);
      } catch (const std::exception& e) {
        std::printf("  %-6s %s k=%td ERROR %s\n", name.c_str(), precis::cuda::to_string(be), kk, e.what());
      }
      check(bad == 0, name + " " + precis::cuda::to_string(be) + " k=" + std::to_string(kk) + " " + model_regime_names[regime] +
                          ": bit-identical to precis::tc::inner_product<sm90>");
    }
}

/// The model suite: wgmma (sm90 kernel) and mma.sync (sm80 kernel) on this device against
/// precis::tc's sm90 model. Not here: mma.sync with fp8 operands, which sm_90 does not run on
/// its fp8 tensor cores (see docs/cuda.md).
void model_suite(bool sm90a, int cc) {
  using precis::bfloat16;
  using precis::half;
  using precis::float8_e4m3;
  using precis::float8_e5m2;
  std::printf("model (precis::tc::inner_product<sm90, In>, bit for bit):\n");
  if (cc != 90) {
    std::printf("  the model is of sm_90's tensor cores; this device is sm_%d: skipped\n", cc);
    return;
  }
  if (sm90a) {
    model_format<half, half, void>("fp16", gemm_backend::sm90, 16, "h100_wgmma_fp16_16x16x32.bin");
    model_format<bfloat16, bfloat16, void>("bf16", gemm_backend::sm90, 16, "h100_wgmma_bf16_16x16x32.bin");
    const index_t promote = 128;  // sm90_tile: fp8 partial sums join fp32 every 128 elements
    model_format<float8_e4m3, float8_e4m3, void>("e4m3", gemm_backend::sm90, 32, "h100_wgmma_e4m3_16x16x64.bin", promote);
    model_format<float8_e5m2, float8_e5m2, void>("e5m2", gemm_backend::sm90, 32, "h100_wgmma_e5m2_16x16x64.bin", promote);
  }
  model_format<half, half, void>("fp16", gemm_backend::sm80, 16, "h100_mma_fp16_16x16x32.bin");
  model_format<bfloat16, bfloat16, void>("bf16", gemm_backend::sm80, 16, "h100_mma_bf16_16x16x32.bin");
  model_format<precis::tf32, float, precis::tf32>("tf32", gemm_backend::sm80, 8, "h100_mma_tf32_16x16x16.bin");
}

/// Runs the checks of the named parts ("sm90 sm80 cublaslt simt model"; none: all), and with
/// "--record DIR" writes the model suite's tiles into DIR.
int run_device(std::vector<std::string> only) {
  tile_recorder rec;
  if (const auto r = std::find(only.begin(), only.end(), "--record"); r != only.end()) {
    if (r + 1 == only.end()) throw std::invalid_argument("--record needs a directory");
    rec.dir = *(r + 1);
    recorder = &rec;
    only.erase(r, r + 2);
  }
  const auto wanted = [&](gemm_backend be) {
    return only.empty() || std::find(only.begin(), only.end(), precis::cuda::to_string(be)) != only.end();
  };
  if (precis::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  using precis::bfloat16;
  using precis::half;
  const auto dev = precis::cuda::detail::current_device_info();
  const int cc = dev.major * 10 + dev.minor;
  std::printf("device: sm_%d, %d SMs, sm_90a code %s\n", cc, dev.sms, dev.sm90a ? "present" : "absent");
  device_tf32_rounding();
  const double u32 = 0x1p-24;
  const double tc = 2 * u32;     // tensor cores: truncation when aligning addends
  const double tc_fp8 = 0x1p-13;  // fp8 tensor cores on Hopper: about 14 bits kept, truncated

  std::vector<gemm_backend> tensor_backends;
  if (dev.sm90a && wanted(gemm_backend::sm90)) tensor_backends.push_back(gemm_backend::sm90);
  if (cc >= 80 && wanted(gemm_backend::sm80)) tensor_backends.push_back(gemm_backend::sm80);
  if (wanted(gemm_backend::cublaslt)) tensor_backends.push_back(gemm_backend::cublaslt);
  for (gemm_backend be : tensor_backends) {
    std::printf("%s:\n", precis::cuda::to_string(be));
    format_suite<float, void, bfloat16, bfloat16>("bf16", be, tc);
    format_suite<float, void, half, half>("fp16", be, tc);
    if (be != gemm_backend::sm90) format_suite<float, precis::tf32, float, float>("tf32", be, tc);
    if (cc >= 89) {
      // the sm90 kernel promotes each 128-element slice to fp32; elsewhere assume the
      // tensor cores' own fp8 accumulation throughout
      const accumulation u = be == gemm_backend::sm90 ? accumulation(tc_fp8, 128, u32) : accumulation(tc_fp8);
      format_suite<float, void, precis::float8_e4m3, bfloat16>("e4m3", be, u);
      if (be != gemm_backend::cublaslt) format_suite<float, void, precis::float8_e5m2, bfloat16>("e5m2", be, u);
    }
    epilogue_suite(be, tc);
    if (be != gemm_backend::cublaslt) split_suite<float, bfloat16>("bf16", be, tc);
    if (be == gemm_backend::sm90) {
      // every cluster shape, on 3 x 3 tiles: a cluster past the last tile row and column
      for (int cm : {1, 2})
        for (int cn : {1, 2}) {
          spec s;
          s.backend = be;
          s.cluster_m = cm, s.cluster_n = cn;
          s.m = 2 * 128 + 5, s.n = 2 * 256 + 3, s.k = 777, s.values = data::exact;
          check_values<float, void, bfloat16, bfloat16, float>("bf16", s, tc);
          s.m = 4 * 128, s.n = 4 * 256, s.bt = true;
          check_values<float, void, bfloat16, bfloat16, float>("bf16", s, tc);
          s.values = data::signed_uniform;
          check_values<float, void, half, half, half>("fp16", s, tc);
          s.values = data::exact;
          check_values<float, void, precis::float8_e4m3, precis::float8_e4m3, float>("e4m3", s, tc);
        }
    }
  }
  if (wanted(gemm_backend::simt)) {
  std::printf("simt:\n");
  for (auto s : shapes(gemm_backend::simt, data::exact, 21)) check_values<float, void, float, float, float>("fp32", s, u32);
  for (auto s : shapes(gemm_backend::simt, data::signed_uniform, 22)) check_values<float, void, float, float, float>("fp32", s, u32);
  for (auto s : shapes(gemm_backend::simt, data::signed_uniform, 23)) check_values<double, void, double, double, double>("fp64", s, 0x1p-53);
  for (auto s : shapes(gemm_backend::simt, data::signed_uniform, 24)) check_values<half, void, half, half, half>("fp16acc", s, 0x1p-11);
  for (auto s : shapes(gemm_backend::simt, data::signed_uniform, 25)) check_values<float, void, bfloat16, precis::float8_e4m3, float>("mixed", s, u32);
  for (auto s : shapes(gemm_backend::simt, data::signed_uniform, 26)) check_values<float, precis::tf32, float, float, float>("tf32", s, u32);
  epilogue_suite(gemm_backend::simt, u32);
  split_suite<float, float>("fp32", gemm_backend::simt, u32);
  split_suite<double, double>("fp64", gemm_backend::simt, 0x1p-53);
  {
    precis::cuda::DeviceTensor<half> a(Shape{8, 300}), b(Shape{300, 8}), c(Shape{8, 8});
    precis::cuda::gemm_options o;
    o.split_k = 2;
    expect_error<precis::invalid_argument>(
        "split_k with a 16-bit accumulator", "16-bit sums are not split",
        [&] { precis::cuda::gemm<half>(half(1), a, b, half(0), c, {}, o); });
  }
  }

  if (only.empty() || std::find(only.begin(), only.end(), "model") != only.end()) model_suite(dev.sm90a, cc);
  if (recorder) recorder->write();

  // bad calls on the device
  {
    precis::cuda::DeviceTensor<float> a(Shape{8, 8}), b(Shape{8, 8}), c(Shape{8, 8});
    precis::cuda::gemm_options o;
    o.backend = gemm_backend::sm90;
    expect_error<precis::invalid_argument>("sm90 with fp32 operands", "backend sm90 cannot run this call",
                                           [&] { precis::cuda::gemm<float>(1.0f, a, b, 0.0f, c, {}, o); });
    o.backend = gemm_backend::cublaslt;
    precis::cuda::epilogue<float> sr;
    sr.mode = precis::rounding::stochastic;
    expect_error<precis::invalid_argument>("cublaslt with stochastic rounding", "nearest only",
                                           [&] { precis::cuda::gemm<float>(1.0f, a, b, 0.0f, c, sr, o); });
  }
  std::printf("%s (%d failed)\n", failures == 0 ? "device GEMM checks passed" : "device GEMM checks FAILED", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--device") == 0) return run_device(std::vector<std::string>(argv + 2, argv + argc));
    return run_host();
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
