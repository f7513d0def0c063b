// The device GEMM's epilogue and the value conversions every CUDA kernel of precis shares.
//
// Each accumulated value v of C = A B becomes
//     C_ij = round_Out( act( alpha * v + beta * C_ij + bias_j ) )
// (alpha divided by device-held fp8 scales where the epilogue names them) computed in fp32 (fp64 when the accumulator is double) and rounded once into C's format:
// to nearest even, or stochastically with 64 random bits per element drawn from Philox4x32-10
// keyed by the seed at counter (j / 2, i, offset), so the result depends on the element's
// position alone, never on the kernel, its tiling or the launch. Rounding uses precis's own
// rounding core (format/detail/core.hpp), the code the host's precis::round_to runs, so the
// device and the host give the same bits for the same value and random bits.
//
// C and the bias are fp64, fp32, fp16, bf16, fp8 e4m3 or fp8 e5m2, described at run time so
// that one compiled kernel serves every output format. The plain case (C = alpha A B, plus an
// fp32, fp16 or bf16 bias and relu if asked, into fp32, fp16 or bf16 C, rounded to nearest) is
// inlined into the kernels with paired stores; everything else goes through one out-of-line
// function. Both compute alpha v, then + beta C_ij, then + bias_j, each rounded once in the
// epilogue's arithmetic (never fused into a multiply-add), so they give the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "precis/cuda/device.cuh"
#include "precis/format/float8.hpp"
#include "precis/format/format_traits.hpp"
#include "precis/format/random.hpp"
#include "precis/format/rounding.hpp"
#include "precis/format/tf32.hpp"

namespace precis::cuda {

/// The function applied after alpha, beta and bias (PyTorch's names). gelu is the exact
/// x/2 (1 + erf(x / sqrt 2)); gelu_tanh is the tanh approximation (cuBLASLt's GELU).
enum class activation { none, relu, gelu, gelu_tanh };

/// What the GEMM does to each accumulated value before storing it (see the file comment).
/// `bias` is a device vector of n values (empty: none). Overflow follows `ov`: formats without
/// an infinity (float8_e4m3) need overflow::saturate or overflow::nan, said explicitly.
template <class Bias = float>
struct epilogue {
  activation act = activation::none;
  DeviceView<const Bias> bias{};
  rounding mode = rounding::nearest_even;  // nearest_even or stochastic
  overflow ov = overflow::infinity;
  std::uint64_t seed = 0;    // stochastic rounding: Philox key
  std::uint64_t offset = 0;  // stochastic rounding: a stream number (e.g. the training step)
  /// Device floats alpha is divided by, read by the kernel when it runs (null: 1): the scales
  /// of fp8 operands that the device chose, so a scaled GEMM needs no host synchronization.
  /// alpha / (d0 d1) is formed in double and rounded once to the epilogue's arithmetic.
  const float* divide_by[2] = {nullptr, nullptr};
};

/// The 64 random bits element (i, j) of C is rounded with under stochastic rounding.
PRECIS_HOST_DEVICE constexpr std::uint64_t stochastic_bits(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                                           std::uint64_t j) noexcept {
  const auto r = philox4x32_10(static_cast<std::uint32_t>(j >> 1), static_cast<std::uint32_t>(i),
                               static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32),
                               static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const int w = (j & 1) ? 2 : 0;
  return (static_cast<std::uint64_t>(r.v[w + 1]) << 32) | r.v[w];
}

namespace detail {

/// Formats the device kernels read as operands: fp64, fp32 and every precis bit format
/// (fp16, bf16, tf32, fp8, any minifloat), as raw bits of the host type.
template <class T>
inline constexpr bool device_value_format =
    std::is_same_v<T, float> || std::is_same_v<T, double> || precis::detail::is_bit_format_v<T>;

/// Formats of C and the bias, named at run time.
enum class value_format : std::uint8_t { f64, f32, f16, bf16, e4m3, e5m2 };

template <class T>
constexpr int value_format_of() {
  if constexpr (std::is_same_v<T, double>) return static_cast<int>(value_format::f64);
  else if constexpr (std::is_same_v<T, float>) return static_cast<int>(value_format::f32);
  else if constexpr (std::is_same_v<T, precis::half>) return static_cast<int>(value_format::f16);
  else if constexpr (std::is_same_v<T, precis::bfloat16>) return static_cast<int>(value_format::bf16);
  else if constexpr (std::is_same_v<T, precis::float8_e4m3>) return static_cast<int>(value_format::e4m3);
  else if constexpr (std::is_same_v<T, precis::float8_e5m2>) return static_cast<int>(value_format::e5m2);
  else return -1;
}

template <class T>
using bits_of_t = typename precis::detail::bit_format<T>::bits_type;

template <class T>
__device__ __forceinline__ bits_of_t<T> load_bits(const T* p) {
  return *reinterpret_cast<const bits_of_t<T>*>(p);
}
template <class T>
__device__ __forceinline__ void store_bits(T* p, bits_of_t<T> b) {
  *reinterpret_cast<bits_of_t<T>*>(p) = b;
}

/// The wide type a format decodes into exactly: float when it holds every value, else double.
template <class T>
using decoded_t = std::conditional_t<std::is_same_v<T, double> ||
                                         !precis::detail::fits_float(precis::detail::bit_format<T>::lay),
                                     double, float>;

/// Exact decode of one stored value into W (float or double, at least as wide as decoded_t<T>).
template <class W, class T>
__device__ __forceinline__ W decode(const T* p) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return static_cast<W>(*p);
  } else if constexpr (std::is_same_v<T, precis::half>) {
    return static_cast<W>(__half2float(__ushort_as_half(load_bits(p))));
  } else if constexpr (std::is_same_v<T, precis::bfloat16>) {
    return static_cast<W>(__bfloat162float(__ushort_as_bfloat16(load_bits(p))));
  } else {
    constexpr auto lay = precis::detail::bit_format<T>::lay;
    const auto s = precis::detail::split_bits<lay>(load_bits(p));
    if constexpr (std::is_same_v<decoded_t<T>, float>) {
      return static_cast<W>(__uint_as_float(static_cast<std::uint32_t>(precis::detail::encode_bits<precis::detail::fp32_layout>(
          s, rounding::nearest_even, overflow::infinity, 0))));
    } else {
      return static_cast<W>(__longlong_as_double(static_cast<long long>(precis::detail::encode_bits<precis::detail::fp64_layout>(
          s, rounding::nearest_even, overflow::infinity, 0))));
    }
  }
}

/// The bits of x (float or double) rounded once into Out, through the host's rounding core.
template <class Out, class W>
__device__ __forceinline__ bits_of_t<Out> round_bits(W x, rounding mode, overflow ov, std::uint64_t random) {
  constexpr auto src = std::is_same_v<W, float> ? precis::detail::fp32_layout : precis::detail::fp64_layout;
  std::uint64_t xb;
  if constexpr (std::is_same_v<W, float>) xb = __float_as_uint(x);
  else xb = static_cast<std::uint64_t>(__double_as_longlong(x));
  return static_cast<bits_of_t<Out>>(
      precis::detail::encode_bits<precis::detail::bit_format<Out>::lay>(precis::detail::split_bits<src>(xb), mode, ov, random));
}

/// Stores x (float or double) into *p rounded once into Out.
template <class Out, class W>
__device__ __forceinline__ void round_store(Out* p, W x, rounding mode, overflow ov, std::uint64_t random) {
  if constexpr (std::is_same_v<Out, W>) {
    *p = x;  // already in C's format: nothing to round
  } else if constexpr (std::is_same_v<Out, double>) {
    *p = static_cast<double>(x);  // float -> double is exact
  } else {
    if (mode == rounding::nearest_even && ov == overflow::infinity) {
      // the hardware conversions round to nearest even with IEEE overflow, as the core does
      if constexpr (std::is_same_v<Out, float>) {
        *p = __double2float_rn(x);
        return;
      } else if constexpr (std::is_same_v<Out, precis::half> && std::is_same_v<W, float>) {
        store_bits(p, __half_as_ushort(__float2half_rn(x)));
        return;
      } else if constexpr (std::is_same_v<Out, precis::bfloat16> && std::is_same_v<W, float>) {
        store_bits(p, __bfloat16_as_ushort(__float2bfloat16_rn(x)));
        return;
      }
    }
    store_bits(p, round_bits<Out>(x, mode, ov, random));
  }
}

/// Element idx of a C or bias array of format f, decoded into W.
template <class W>
__device__ __forceinline__ W load_any(value_format f, const void* p, index_t idx) {
  switch (f) {
    case value_format::f64: return decode<W>(static_cast<const double*>(p) + idx);
    case value_format::f32: return decode<W>(static_cast<const float*>(p) + idx);
    case value_format::f16: return decode<W>(static_cast<const precis::half*>(p) + idx);
    case value_format::bf16: return decode<W>(static_cast<const precis::bfloat16*>(p) + idx);
    case value_format::e4m3: return decode<W>(static_cast<const precis::float8_e4m3*>(p) + idx);
    case value_format::e5m2: return decode<W>(static_cast<const precis::float8_e5m2*>(p) + idx);
  }
  return W(0);
}

/// Stores x into element idx of a C array of format f, rounded once.
template <class W>
__device__ __forceinline__ void store_any(value_format f, void* p, index_t idx, W x, rounding mode, overflow ov,
                                          std::uint64_t random) {
  switch (f) {
    case value_format::f64: round_store(static_cast<double*>(p) + idx, x, mode, ov, random); return;
    case value_format::f32: round_store(static_cast<float*>(p) + idx, x, mode, ov, random); return;
    case value_format::f16: round_store(static_cast<precis::half*>(p) + idx, x, mode, ov, random); return;
    case value_format::bf16: round_store(static_cast<precis::bfloat16*>(p) + idx, x, mode, ov, random); return;
    case value_format::e4m3: round_store(static_cast<precis::float8_e4m3*>(p) + idx, x, mode, ov, random); return;
    case value_format::e5m2: round_store(static_cast<precis::float8_e5m2*>(p) + idx, x, mode, ov, random); return;
  }
}

/// a * b and a + b rounded once each, never contracted into a fused multiply-add.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <class W>
__device__ __forceinline__ W activate(activation a, W x) {
  switch (a) {
    case activation::none: return x;
    case activation::relu: return x < W(0) ? W(0) : x;  // NaN passes through
    case activation::gelu:
      if constexpr (std::is_same_v<W, float>) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
      else return 0.5 * x * (1.0 + ::erf(x * 0.70710678118654752440));
    case activation::gelu_tanh:
      if constexpr (std::is_same_v<W, float>) {
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
      } else {
        return 0.5 * x * (1.0 + ::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));  // ::, not precis::tanh
      }
  }
  return x;
}

/// Everything a kernel needs to finish C (passed by value to the kernel). W: the epilogue's
/// arithmetic (float, or double with a double accumulator).
template <class W>
struct epilogue_desc {
  void* c = nullptr;
  index_t rs = 0, cs = 0;  // C's strides in elements
  index_t m = 0, n = 0;
  W alpha = 1, beta = 0;
  const void* bias = nullptr;
  value_format out = value_format::f32, bias_format = value_format::f32;
  activation act = activation::none;
  rounding mode = rounding::nearest_even;
  overflow ov = overflow::infinity;
  /// Inlined path: C = act(alpha A B + bias) in fp32, fp16 or bf16, beta = 0, a bias of fp32,
  /// fp16 or bf16 or none, act none or relu, rounded to nearest (set by the host).
  bool plain = false;
  /// Adjacent columns j, j+1 (j even) may be stored as one word (unit column stride, aligned).
  bool pairs = false;
  std::uint64_t seed = 0, offset = 0;
  /// epilogue::divide_by.
  const float* div0 = nullptr;
  const float* div1 = nullptr;

  /// alpha, divided by the device floats at div0 and div1 when there are any.
  __device__ __forceinline__ W scaled_alpha() const {
    if (div0 == nullptr && div1 == nullptr) return alpha;
    double d = 1.0;
    if (div0 != nullptr) d *= static_cast<double>(*div0);
    if (div1 != nullptr) d *= static_cast<double>(*div1);
    return static_cast<W>(static_cast<double>(alpha) / d);
  }

  /// ((alpha v) + beta C_ij) + bias_j, each operation rounded once, activated.
  __device__ __forceinline__ W value(index_t i, index_t j, W v) const {
    v = mul_rn(scaled_alpha(), v);
    if (beta != W(0)) v = add_rn(v, mul_rn(beta, load_any<W>(out, c, i * rs + j * cs)));  // beta == 0: C is not read
    if (bias != nullptr) v = add_rn(v, load_any<W>(bias_format, bias, j));
    return activate(act, v);
  }
};

/// C_ij and C_i,j+1 (j even) from their accumulated values, any format and rounding; nothing
/// outside [0, m) x [0, n).
template <class W>
__device__ __forceinline__ void finish_pair(const epilogue_desc<W>& e, index_t i, index_t j, W v0,
                                            W v1) {
  if (i >= e.m) return;
#pragma unroll 1
  for (int d = 0; d < 2; ++d) {
    const index_t jj = j + d;
    if (jj >= e.n) return;
    const W x = e.value(i, jj, d == 0 ? v0 : v1);
    const std::uint64_t r = e.mode == rounding::stochastic
                                ? stochastic_bits(e.seed, e.offset, static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(jj))
                                : 0;
    store_any(e.out, e.c, i * e.rs + jj * e.cs, x, e.mode, e.ov, r);
  }
}

/// finish_pair out of line: every accumulator of a GEMM kernel calls the one copy.
template <class W>
__device__ __noinline__ void finish_pair_any(const epilogue_desc<W>& e, index_t i, index_t j, W v0,
                                             W v1) {
  finish_pair(e, i, j, v0, v1);
}

/// C_ij = act(alpha v0 + bias_j) and C_i,j+1 = act(alpha v1 + bias_j+1) (j even) into fp32,
/// fp16 or bf16 C, rounded to nearest: the common case, inlined, with what it reads held in
/// registers. The bias (fp32, fp16 or bf16; null: none) is read through the caches, a column at
/// a time.
template <class Out, class W>
struct plain_store {
  Out* c;
  index_t rs, cs, m, n;
  W alpha;
  bool pairs;
  const void* bias;
  value_format bias_format;
  bool relu;

  __device__ __forceinline__ W finish(index_t j, W v) const {
    v = mul_rn(alpha, v);
    if (bias != nullptr) {
      if (bias_format == value_format::bf16) v = add_rn(v, decode<W>(static_cast<const precis::bfloat16*>(bias) + j));
      else if (bias_format == value_format::f16) v = add_rn(v, decode<W>(static_cast<const precis::half*>(bias) + j));
      else v = add_rn(v, static_cast<W>(static_cast<const float*>(bias)[j]));
    }
    return relu && v < W(0) ? W(0) : v;  // NaN passes through
  }

  __device__ __forceinline__ void operator()(index_t i, index_t j, W v0, W v1) const {
    if (i >= m || j >= n) return;
    Out* row = c + i * rs;
    const float x0 = static_cast<float>(finish(j, v0));
    if (pairs && j + 1 < n) {
      const float x1 = static_cast<float>(finish(j + 1, v1));
      if constexpr (std::is_same_v<Out, float>) *reinterpret_cast<float2*>(row + j) = make_float2(x0, x1);
      else if constexpr (std::is_same_v<Out, precis::bfloat16>) *reinterpret_cast<__nv_bfloat162*>(row + j) = __floats2bfloat162_rn(x0, x1);
      else *reinterpret_cast<__half2*>(row + j) = __floats2half2_rn(x0, x1);
      return;
    }
    round_store(row + j * cs, x0, rounding::nearest_even, overflow::infinity, 0);
    if (j + 1 < n) round_store(row + (j + 1) * cs, static_cast<float>(finish(j + 1, v1)), rounding::nearest_even, overflow::infinity, 0);
  }
};

/// Runs body(store) with the store function for e's case: store(i, j, v0, v1) finishes C_ij
/// and C_i,j+1 (j even). One branch per kernel, outside the loops over accumulators. Inline:
/// the general case inlined too (for a kernel that finishes one pair a thread), else out of
/// line.
template <bool Inline = false, class W, class Body>
__device__ __forceinline__ void with_epilogue(const epilogue_desc<W>& e, Body&& body) {
  const bool relu = e.act == activation::relu;
  if (e.plain && e.out == value_format::bf16) {
    body(plain_store<precis::bfloat16, W>{static_cast<precis::bfloat16*>(e.c), e.rs, e.cs, e.m, e.n, e.scaled_alpha(), e.pairs,
                                          e.bias, e.bias_format, relu});
  } else if (e.plain && e.out == value_format::f16) {
    body(plain_store<precis::half, W>{static_cast<precis::half*>(e.c), e.rs, e.cs, e.m, e.n, e.scaled_alpha(), e.pairs, e.bias,
                                      e.bias_format, relu});
  } else if (e.plain && e.out == value_format::f32) {
    body(plain_store<float, W>{static_cast<float*>(e.c), e.rs, e.cs, e.m, e.n, e.scaled_alpha(), e.pairs, e.bias, e.bias_format,
                               relu});
  } else {
    if constexpr (Inline)
      body([&](index_t i, index_t j, W v0, W v1) { finish_pair(e, i, j, v0, v1); });
    else
      body([&](index_t i, index_t j, W v0, W v1) { finish_pair_any(e, i, j, v0, v1); });
  }
}

}  // namespace detail
}  // namespace precis::cuda
