// The device kernels' accumulators: a kernel templated on an accumulation format Acc (fp64,
// fp32, or the 16-bit formats the "-true" policies accumulate in: fp16, bf16) holds its running
// values in acc_t<Acc>: double and float as themselves, fp16 and bf16 as narrow<F>, an fp32
// register that always holds a value of F and rounds every operation's result to nearest even
// into F. Include only from .cu translation units.
//
//   using V = precis::cuda::acc_t<Acc>;       // float, double or narrow<half / bfloat16>
//   V s = 0;
//   for (...) s += ew_detail::load<V>(p + k);  // each partial sum rounded into Acc
//   s = precis::cuda::acc_math::exp(s);        // exp computed in fp32, rounded into Acc
//
// Why this is the host's arithmetic: the host's fp16 and bf16 types (precis::half,
// precis::bfloat16) compute + - * / and sqrt in fp32 and round once into the format, and exp
// and log as the fp32 function rounded once. fp32 has at least 2t + 2 significand bits for both
// formats (t = 11 and 8), so an fp32 sum, difference, product, quotient or square root of two
// F values rounded to F is the correctly rounded F result (Figueroa 1995; Higham 2002, 2.7):
// narrow<F>'s + - * / sqrt give the host's bits, its exp and log the host's algorithm, and a
// sum over a fiber accumulates in F as the host's does (in the device's order, not the host's).
//
// Values from fp64 round once from the double (not through fp32). On the device the fp32 -> F
// rounding is the hardware's (__float2half_rn, __float2bfloat16_rn), elsewhere precis's
// rounding core, so the class also runs (and is tested) on the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "precis/config.hpp"
#include "precis/format/bfloat16.hpp"
#include "precis/format/detail/core.hpp"
#include "precis/format/half.hpp"

namespace precis::cuda {

namespace acc_detail {

template <class F>
inline constexpr bool narrow_format = std::is_same_v<F, precis::half> || std::is_same_v<F, precis::bfloat16>;

template <class F>
inline constexpr precis::detail::layout layout_of = precis::detail::bit_format<F>::lay;

PRECIS_HOST_DEVICE inline std::uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}
PRECIS_HOST_DEVICE inline float bits_float(std::uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}
PRECIS_HOST_DEVICE inline std::uint64_t double_bits(double x) {
#ifdef __CUDA_ARCH__
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<std::uint64_t>(x);
#endif
}

/// F's bits b as an fp32 value (exact: fp32 holds every fp16 and bf16 value).
template <class F>
PRECIS_HOST_DEVICE float widen(std::uint64_t b) {
  namespace pd = precis::detail;
  return bits_float(static_cast<std::uint32_t>(
      pd::encode_bits<pd::fp32_layout>(pd::split_bits<layout_of<F>>(b), rounding::nearest_even, overflow::infinity, 0)));
}

/// x rounded to nearest even into F (IEEE overflow to infinity), as an fp32 value.
template <class F>
PRECIS_HOST_DEVICE float round_to(float x) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<F, precis::half>) return __half2float(__float2half_rn(x));
  else return __bfloat162float(__float2bfloat16_rn(x));
#else
  namespace pd = precis::detail;
  return widen<F>(pd::encode_bits<layout_of<F>>(pd::split_bits<pd::fp32_layout>(float_bits(x)), rounding::nearest_even,
                                                overflow::infinity, 0));
#endif
}
/// x rounded once to nearest even into F, from the double (no double rounding through fp32).
template <class F>
PRECIS_HOST_DEVICE float round_to(double x) {
  namespace pd = precis::detail;
  return widen<F>(pd::encode_bits<layout_of<F>>(pd::split_bits<pd::fp64_layout>(double_bits(x)), rounding::nearest_even,
                                                overflow::infinity, 0));
}

/// fp32 operations rounded to nearest, never contracted into a fused multiply-add.
PRECIS_HOST_DEVICE inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PRECIS_HOST_DEVICE inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
PRECIS_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PRECIS_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// The fp32 library functions, on the device (CUDA's) and on the host (the C++ library's).
PRECIS_HOST_DEVICE inline float f_exp(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
PRECIS_HOST_DEVICE inline float f_log(float x) {
#ifdef __CUDA_ARCH__
  return ::logf(x);
#else
  return std::log(x);
#endif
}
PRECIS_HOST_DEVICE inline float f_sqrt(float x) {
#ifdef __CUDA_ARCH__
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
PRECIS_HOST_DEVICE inline float f_tanh(float x) {
#ifdef __CUDA_ARCH__
  return ::tanhf(x);
#else
  return std::tanh(x);
#endif
}
PRECIS_HOST_DEVICE inline float f_erf(float x) {
#ifdef __CUDA_ARCH__
  return ::erff(x);
#else
  return std::erf(x);
#endif
}
PRECIS_HOST_DEVICE inline float f_acos(float x) {
#ifdef __CUDA_ARCH__
  return ::acosf(x);
#else
  return std::acos(x);
#endif
}
PRECIS_HOST_DEVICE inline float f_pow(float x, float y) {
#ifdef __CUDA_ARCH__
  return ::powf(x, y);
#else
  return std::pow(x, y);
#endif
}

}  // namespace acc_detail

/// An accumulator of the 16-bit format F (precis::half or precis::bfloat16) in an fp32 register:
/// every value it holds is a value of F, and every operation on it is F's correctly rounded
/// operation (see the file comment). Comparisons are fp32's, so NaN compares unequal to itself.
template <class F>
class narrow {
  static_assert(acc_detail::narrow_format<F>, "precis::cuda::narrow: F is precis::half or precis::bfloat16");

 public:
  using format = F;

  narrow() = default;
  PRECIS_HOST_DEVICE narrow(float x) : v_(acc_detail::round_to<F>(x)) {}
  PRECIS_HOST_DEVICE narrow(double x) : v_(acc_detail::round_to<F>(x)) {}
  template <std::integral I>
  PRECIS_HOST_DEVICE narrow(I x) : narrow(static_cast<double>(x)) {}

  /// The value (exact in either type).
  PRECIS_HOST_DEVICE explicit operator float() const { return v_; }
  PRECIS_HOST_DEVICE explicit operator double() const { return v_; }
  PRECIS_HOST_DEVICE float value() const { return v_; }

  PRECIS_HOST_DEVICE friend narrow operator+(narrow a, narrow b) { return narrow(acc_detail::add_rn(a.v_, b.v_)); }
  PRECIS_HOST_DEVICE friend narrow operator-(narrow a, narrow b) { return narrow(acc_detail::sub_rn(a.v_, b.v_)); }
  PRECIS_HOST_DEVICE friend narrow operator*(narrow a, narrow b) { return narrow(acc_detail::mul_rn(a.v_, b.v_)); }
  PRECIS_HOST_DEVICE friend narrow operator/(narrow a, narrow b) { return narrow(acc_detail::div_rn(a.v_, b.v_)); }
  PRECIS_HOST_DEVICE friend narrow operator-(narrow a) { return exact(-a.v_); }
  PRECIS_HOST_DEVICE narrow& operator+=(narrow b) { return *this = *this + b; }
  PRECIS_HOST_DEVICE narrow& operator-=(narrow b) { return *this = *this - b; }
  PRECIS_HOST_DEVICE narrow& operator*=(narrow b) { return *this = *this * b; }
  PRECIS_HOST_DEVICE narrow& operator/=(narrow b) { return *this = *this / b; }

  PRECIS_HOST_DEVICE friend bool operator==(narrow a, narrow b) { return a.v_ == b.v_; }
  PRECIS_HOST_DEVICE friend bool operator!=(narrow a, narrow b) { return a.v_ != b.v_; }
  PRECIS_HOST_DEVICE friend bool operator<(narrow a, narrow b) { return a.v_ < b.v_; }
  PRECIS_HOST_DEVICE friend bool operator>(narrow a, narrow b) { return a.v_ > b.v_; }
  PRECIS_HOST_DEVICE friend bool operator<=(narrow a, narrow b) { return a.v_ <= b.v_; }
  PRECIS_HOST_DEVICE friend bool operator>=(narrow a, narrow b) { return a.v_ >= b.v_; }

  /// The library functions as the host's 16-bit types compute them: the fp32 function of the
  /// value, rounded once into F (found by argument-dependent lookup, so a functor written
  /// `using std::exp; exp(x)` runs on narrow values).
  PRECIS_HOST_DEVICE friend narrow exp(narrow x) { return narrow(acc_detail::f_exp(x.v_)); }
  PRECIS_HOST_DEVICE friend narrow log(narrow x) { return narrow(acc_detail::f_log(x.v_)); }
  PRECIS_HOST_DEVICE friend narrow sqrt(narrow x) { return narrow(acc_detail::f_sqrt(x.v_)); }
  PRECIS_HOST_DEVICE friend narrow tanh(narrow x) { return narrow(acc_detail::f_tanh(x.v_)); }
  PRECIS_HOST_DEVICE friend narrow erf(narrow x) { return narrow(acc_detail::f_erf(x.v_)); }
  PRECIS_HOST_DEVICE friend narrow acos(narrow x) { return narrow(acc_detail::f_acos(x.v_)); }
  PRECIS_HOST_DEVICE friend narrow pow(narrow x, narrow y) { return narrow(acc_detail::f_pow(x.v_, y.v_)); }
  PRECIS_HOST_DEVICE friend narrow abs(narrow x) { return exact(x.v_ < 0 ? -x.v_ : x.v_); }
  PRECIS_HOST_DEVICE friend narrow fabs(narrow x) { return abs(x); }

  /// x, which must already be a value of F (a shuffled or negated one), without rounding.
  PRECIS_HOST_DEVICE static narrow exact(float x) {
    narrow r;
    r.v_ = x;
    return r;
  }

 private:
  float v_;
};

/// The register type of a kernel accumulating in Acc.
template <class Acc>
using acc_t = std::conditional_t<acc_detail::narrow_format<Acc>, narrow<Acc>, Acc>;

/// The accumulation formats device kernels take.
template <class Acc>
inline constexpr bool acc_format = std::is_same_v<Acc, float> || std::is_same_v<Acc, double> || acc_detail::narrow_format<Acc>;

/// Math on accumulator values: fp32 and fp64 as CUDA's functions (CUDA C++ Programming Guide,
/// "Mathematical Functions": expf 2 ulp, logf 1, sqrtf correctly rounded), narrow<F> as the fp32
/// function of the value rounded once into F (the host's fp16 and bf16 functions); shuffles
/// across a warp; and the operations a host loop rounds one at a time, never fused.
namespace acc_math {

__device__ inline float exp(float x) { return ::expf(x); }
__device__ inline double exp(double x) { return ::exp(x); }
template <class F>
__device__ narrow<F> exp(narrow<F> x) {
  return narrow<F>(::expf(x.value()));
}
__device__ inline float log(float x) { return ::logf(x); }
__device__ inline double log(double x) { return ::log(x); }
template <class F>
__device__ narrow<F> log(narrow<F> x) {
  return narrow<F>(::logf(x.value()));
}
__device__ inline float sqrt(float x) { return ::sqrtf(x); }
__device__ inline double sqrt(double x) { return ::sqrt(x); }
template <class F>
__device__ narrow<F> sqrt(narrow<F> x) {
  return narrow<F>(::sqrtf(x.value()));
}
__device__ inline float fabs(float x) { return ::fabsf(x); }
__device__ inline double fabs(double x) { return ::fabs(x); }
template <class F>
__device__ narrow<F> fabs(narrow<F> x) {
  return narrow<F>::exact(::fabsf(x.value()));
}

/// The value of lane (lane ^ w) / (lane + w) of the full warp.
template <class V>
__device__ V shfl_xor(V v, int w) {
  if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) return __shfl_xor_sync(0xffffffffu, v, w);
  else return V::exact(__shfl_xor_sync(0xffffffffu, v.value(), w));
}
template <class V>
__device__ V shfl_down(V v, int w) {
  if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) return __shfl_down_sync(0xffffffffu, v, w);
  else return V::exact(__shfl_down_sync(0xffffffffu, v.value(), w));
}

/// a * b, a + b, a - b rounded once each (narrow<F>'s operations already are).
template <class V>
__device__ V mul_rn(V a, V b) {
  if constexpr (std::is_same_v<V, float>) return __fmul_rn(a, b);
  else if constexpr (std::is_same_v<V, double>) return __dmul_rn(a, b);
  else return a * b;
}
template <class V>
__device__ V add_rn(V a, V b) {
  if constexpr (std::is_same_v<V, float>) return __fadd_rn(a, b);
  else if constexpr (std::is_same_v<V, double>) return __dadd_rn(a, b);
  else return a + b;
}
template <class V>
__device__ V sub_rn(V a, V b) {
  if constexpr (std::is_same_v<V, float>) return __fsub_rn(a, b);
  else if constexpr (std::is_same_v<V, double>) return __dsub_rn(a, b);
  else return a - b;
}

}  // namespace acc_math

}  // namespace precis::cuda
