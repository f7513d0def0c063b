// What the tensor-core kernels share: the operand kinds they read, and the rounding of fp32
// operands to tf32.
//
// Every tensor-core instruction precis uses consumes 32 bytes of K per row per step (k16 of
// fp16/bf16, k8 of tf32, k32 of fp8), so the kernels are written in bytes of K and the kind
// only picks the instruction.
#pragma once

#include <cstdint>
#include <type_traits>

#include "precis/config.hpp"
#include "precis/format/bfloat16.hpp"
#include "precis/format/float8.hpp"
#include "precis/format/half.hpp"

namespace precis::cuda::detail {

/// An operand format the tensor cores multiply. tf32 operands are fp32 words rounded to tf32
/// (nearest even) in registers before each product.
enum class tc_kind { f16, bf16, tf32, e4m3, e5m2 };

PRECIS_HOST_DEVICE constexpr int tc_bytes(tc_kind k) {
  return k == tc_kind::tf32 ? 4 : (k == tc_kind::e4m3 || k == tc_kind::e5m2) ? 1 : 2;
}
PRECIS_HOST_DEVICE constexpr bool tc_fp8(tc_kind k) { return k == tc_kind::e4m3 || k == tc_kind::e5m2; }

/// The bits of fp32 x rounded to tf32 (10 stored mantissa bits, fp32's exponent range),
/// nearest even, as an fp32 word: the same value precis::round_to<tf32>(x) gives. Overflow
/// goes to infinity; NaNs stay NaN (quiet, leading payload bits kept).
PRECIS_HOST_DEVICE constexpr std::uint32_t round_tf32_bits(std::uint32_t x) {
  if ((x & 0x7f800000u) == 0x7f800000u) {
    return (x & 0x007fffffu) != 0 ? ((x | 0x00400000u) & 0xffffe000u) : x;
  }
  return (x + 0x00000fffu + ((x >> 13) & 1u)) & 0xffffe000u;
}

#if defined(__CUDACC__)
/// round_tf32_bits in the kernels: one conversion instruction on sm_90 (cvt.rn.tf32.f32, round
/// to nearest even; NaNs stay NaN, their payload may change), the integer sequence before.
__device__ __forceinline__ std::uint32_t round_tf32_device(std::uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
#else
  return round_tf32_bits(x);
#endif
}
#endif

}  // namespace precis::cuda::detail
