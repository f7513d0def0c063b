// Vectorized e^x for float arrays: the kernel behind exp, sigmoid and the softmax family when
// they compute in float.
//
// x = n ln2 + r with n = round(x log2 e) and |r| <= ln2/2 (Cody & Waite: ln2 = C1 + C2 with C1
// short, so x - n C1 is exact under FMA); e^r by its degree-7 Taylor polynomial (truncation
// |r|^8/8! < 2^-28, under 0.1 ulp); then 2^n applied as two exact power-of-two factors so that
// overflow and subnormal results round once. Measured accuracy: tests/tensor/vexp_test.cpp.
// Every element, the tail included, goes through the same kernel, so a value's result never
// depends on its position in the array.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "precis/config.hpp"
#include "precis/tensor/gemm/kernel_avx2.hpp"
#include "precis/tensor/shape.hpp"

#if PRECIS_AARCH64_NEON
#include <arm_neon.h>
#endif

namespace precis::detail {

#if PRECIS_X86_SIMD
PRECIS_TARGET_AVX2 inline __m256 exp8_avx2(__m256 x) {
  // beyond these e^x is +inf (x > 88.73) or rounds to +0 (x < -103.98); clamping keeps n small
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);  // exact
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n = 2^n1 * 2^n2 with n1 = floor(n/2): both factors are normal floats for n in [-150, 129]
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);  // first product exact
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

PRECIS_TARGET_AVX2 inline void exp_avx2(float* out, const float* in, index_t n) {
  index_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8_avx2(_mm256_loadu_ps(in + i)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    std::copy(in + i, in + n, tail);
    _mm256_store_ps(tail, exp8_avx2(_mm256_load_ps(tail)));
    std::copy(tail, tail + (n - i), out + i);
  }
}
#endif

#if PRECIS_AARCH64_NEON
/// exp8_avx2's operations on four lanes of Advanced SIMD, one for one (the same clamps, the
/// rounding of n to nearest even, the fused multiply-adds and the two scalings), so the same
/// bits on aarch64 as on x86-64 with AVX2 (NaNs too: the lane's own NaN).
inline float32x4_t exp4_neon(float32x4_t x) {
  const float32x4_t xc = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(0.693359375f));  // xc - n C1, exact
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t ni = vcvtq_s32_f32(n);  // n is an integer (a NaN lane's 0 is replaced below)
  const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
  const int32x4_t bias = vdupq_n_s32(127);
  const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
  const float32x4_t y = vmulq_f32(vmulq_f32(p, s1), s2);  // first product exact
  return vbslq_f32(vceqq_f32(x, x), y, x);                 // NaN stays NaN
}

inline void exp_neon(float* out, const float* in, index_t n) {
  index_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, exp4_neon(vld1q_f32(in + i)));
  if (i < n) {
    float tail[4] = {};
    std::copy(in + i, in + n, tail);
    vst1q_f32(tail, exp4_neon(vld1q_f32(tail)));
    std::copy(tail, tail + (n - i), out + i);
  }
}
#endif

/// out[i] = e^in[i] for n floats (out may equal in): the AVX2 kernel on x86-64 CPUs with AVX2
/// and FMA, its Advanced SIMD form on aarch64 (the same bits), else the C library's expf.
inline void exp_floats(float* out, const float* in, index_t n) {
#if PRECIS_X86_SIMD
  if (cpu_has_avx2_fma()) {
    exp_avx2(out, in, n);
    return;
  }
#elif PRECIS_AARCH64_NEON
  exp_neon(out, in, n);
  return;
#endif
  for (index_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
}

}  // namespace precis::detail
