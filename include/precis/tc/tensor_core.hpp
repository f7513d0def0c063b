// Tensor cores modelled bit for bit on the CPU: what one generation's matrix-multiply-accumulate
// instruction computes for an inner product c + sum_k a_k b_k with an fp32 accumulator.
//
//   float d = precis::tc::inner_product<precis::tc::sm90, precis::half>(c, a, b);
//
// Tensor cores do not compute an IEEE fp32 sum. Each step of the instruction ("block FMA")
// takes a block of products and the running result c and
//   1. forms every product exactly;
//   2. gives each term an alignment exponent: for a product, the sum of its two inputs'
//      exponents, and for c its own exponent (a subnormal counts with its format's emin and
//      significand 0.m), so a product's significand lies in [0, 4); emax is the largest of the
//      step's nonzero terms, raised to align_floor if it is below;
//   3. truncates every term, c included, toward zero (on its magnitude) to a multiple of
//      2^(emax - align_bits);
//   4. adds the truncated terms exactly and truncates the sum toward zero to sum_bits
//      significant bits in fp32's exponent range (24: an fp32 value), a zero result being +0
//      and a sum past fp32's range an infinity;
// and feeds that result into the next step as its c. Which block sizes and widths a generation
// uses is a named constant below, with where it comes from.
//
// Special values (infinities, NaNs in the inputs or in c) follow IEEE rules here: any NaN, an
// infinite product of a zero, or infinities of both signs give a NaN; otherwise an infinite
// term gives that infinity. Neither they nor overflow occur in the recorded hardware data this
// model was checked against.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "precis/error.hpp"
#include "precis/format/all.hpp"

namespace precis::tc {

/// Volta (V100): the first-generation tensor cores.
struct sm70 {
  static constexpr std::string_view name = "sm70";
};
/// Ampere (A100): the third-generation tensor cores.
struct sm80 {
  static constexpr std::string_view name = "sm80";
};
/// Hopper (H100): the fourth-generation tensor cores.
struct sm90 {
  static constexpr std::string_view name = "sm90";
};

/// Hopper through the WMMA API (nvcuda::wmma). nvcc lowers WMMA's tf32 m16n16k8 to k4
/// instructions, each a step of 4 products (precis's WMMA recordings on an H100: 0 mismatches
/// in 76,800 outputs, against 13,629 for one step of 8); fp16 and bf16 are as sm90.
struct sm90_wmma {
  static constexpr std::string_view name = "sm90_wmma";
};

/// The parameters of one block FMA: K, the shortest inner product one instruction computes (a
/// length must be a multiple of it); Block, the products summed per step with the running
/// result; AlignBits, how far below the largest alignment exponent terms are truncated;
/// SumBits, the significant bits a step's result keeps; AlignFloor, the lowest alignment
/// exponent a step uses (tiny terms are truncated as if a term of 2^AlignFloor were present).
template <int K, int Block, int AlignBits, int SumBits = 24, int AlignFloor = -1024>
struct block_fma_shape {
  static_assert(K % Block == 0 && Block >= 1 && Block <= 64, "precis::tc::block_fma_shape: K must be a multiple of Block, at most 64 products a step");
  static_assert(SumBits >= 2 && SumBits <= 24 && AlignBits >= 1 && AlignBits <= 40, "precis::tc::block_fma_shape: widths out of range");
  static constexpr int k = K;
  static constexpr int block = Block;
  static constexpr int align_bits = AlignBits;
  static constexpr int sum_bits = SumBits;
  static constexpr int align_floor = AlignFloor;
};

/// One architecture's block FMA for input format In (a block_fma_shape). Not defined where the
/// architecture's tensor cores do not take In.
template <class Arch, class In>
struct block_fma;

// Where the numbers come from. Khattak & Mikaitis, "Accurate models of NVIDIA tensor cores"
// (ACM TACO, 2025; arXiv 2512.07004) publish, for each GPU and format, the products per step,
// the extra alignment bits beyond fp32's 23 fraction bits, the final truncation and the lowest
// alignment exponent, and validate them on 10^5 random inner products per format recorded on
// the hardware. Their parameters are used below; where precis has its own recordings (300
// H100 WMMA tiles per format, tests/data/tensor-core) the parameters were fitted to those and
// tested against every output. docs/tensor_cores.md lists both checks.

// sm70 fp16 (mma.m8n8k4; WMMA m16n16k16 is four of them in k order): steps of 4 products, no
// extra alignment bit (23), no floor. The only input format of Volta's tensor cores.
template <>
struct block_fma<sm70, half> : block_fma_shape<4, 4, 23> {};

// sm80 fp16 and bf16 (mma.m16n8k8; k16 is two in order): steps of 8 products, one extra
// alignment bit (24), floor 2^-132. tf32 (mma.m16n8k4): steps of 4.
template <>
struct block_fma<sm80, half> : block_fma_shape<8, 8, 24, 24, -132> {};
template <>
struct block_fma<sm80, bfloat16> : block_fma_shape<8, 8, 24, 24, -132> {};
template <>
struct block_fma<sm80, tf32> : block_fma_shape<4, 4, 24, 24, -132> {};

// sm90 fp16 and bf16 (WMMA m16n16k16, mma.m16n8k16, wgmma k16): one step of all 16 products
// and c, two extra alignment bits (25), floor 2^-133: fitted to precis's H100 recordings, 0
// mismatches, and the published model's parameters. tf32 (mma.m16n8k8): one step of 8
// products, the published model's choice; precis's recordings of mma.sync on an H100 (25,600
// outputs) match it and no other block size. fp8 e4m3 and e5m2 (wgmma k32): one step of 32
// products aligned 13 bits below emax, the result truncated to 14 significant bits: the
// published model, and the "about 14 bits" that DeepSeek-V3's report (2024, section 3.3)
// measured for fp8 accumulation on Hopper; precis's wgmma recordings on an H100 match it.
template <>
struct block_fma<sm90, half> : block_fma_shape<16, 16, 25, 24, -133> {};
template <>
struct block_fma<sm90, bfloat16> : block_fma_shape<16, 16, 25, 24, -133> {};
template <>
struct block_fma<sm90, tf32> : block_fma_shape<8, 8, 25, 24, -133> {};
template <>
struct block_fma<sm90_wmma, half> : block_fma<sm90, half> {};
template <>
struct block_fma<sm90_wmma, bfloat16> : block_fma<sm90, bfloat16> {};
template <>
struct block_fma<sm90_wmma, tf32> : block_fma_shape<8, 4, 25, 24, -133> {};
template <>
struct block_fma<sm90, float8_e4m3> : block_fma_shape<32, 32, 13, 14, -133> {};
template <>
struct block_fma<sm90, float8_e5m2> : block_fma_shape<32, 32, 13, 14, -133> {};

/// Whether Arch's tensor cores take input format In.
template <class Arch, class In>
inline constexpr bool supports = requires { block_fma<Arch, In>::k; };

namespace detail {

/// A finite value as (-1)^neg * m * 2^lsb, with the exponent it is aligned by.
struct term {
  bool neg = false;
  std::uint64_t m = 0;
  int lsb = 0;
  int align = 0;
};

enum class kind { finite, inf, nan };

/// The fields of a value of a binary format: kind, sign, integer significand (the hidden bit
/// included for normal numbers), the exponent of its last bit, and its exponent (emin for a
/// subnormal, whose significand is 0.m).
template <class T>
kind decode(const T& x, bool& neg, std::uint64_t& m, int& lsb, int& e) {
  using bf = precis::detail::bit_format<T>;
  constexpr auto L = bf::lay;
  const std::uint64_t bits = static_cast<std::uint64_t>(bf::to_bits(x));
  neg = (bits & L.sign_bit()) != 0;
  const std::uint64_t ef = (bits >> L.mant_bits) & L.exp_all_ones();
  const std::uint64_t mf = bits & L.mant_mask();
  if (L.enc == encoding::ieee && ef == L.exp_all_ones()) return mf == 0 ? kind::inf : kind::nan;
  if (L.enc == encoding::fn && (bits & L.magnitude_mask()) == L.nan_bits()) return kind::nan;
  e = ef == 0 ? L.emin() : static_cast<int>(ef) - L.bias();
  m = ef == 0 ? mf : (mf | (std::uint64_t{1} << L.mant_bits));
  lsb = e - L.mant_bits;
  return kind::finite;
}

inline float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

/// (-1)^neg * s * 2^q truncated toward zero to sum_bits significant bits within fp32's exponent
/// range (below 2^-126, to multiples of 2^(-126 - (sum_bits - 1))); zero is +0, a value past
/// fp32's range an infinity of its sign.
inline float truncate_to_float(std::int64_t s, int q, int sum_bits) {
  if (s == 0) return 0.0f;
  const bool neg = s < 0;
  const std::uint64_t a = neg ? static_cast<std::uint64_t>(-s) : static_cast<std::uint64_t>(s);
  const int e = q + static_cast<int>(std::bit_width(a)) - 1;  // exponent of the leading bit
  const std::uint32_t sign = neg ? 0x80000000u : 0u;
  if (e > 127) return from_bits(sign | 0x7f800000u);
  const int qk = std::max(e, -126) - (sum_bits - 1);  // exponent of the last kept bit
  std::uint64_t m = qk <= q ? a << (q - qk) : (qk - q >= 64 ? 0 : a >> (qk - q));
  if (m == 0) return 0.0f;
  m <<= 24 - sum_bits;  // as an fp32 significand: last bit 2^(qk - (24 - sum_bits)) >= 2^-149
  if (m < (std::uint64_t{1} << 23)) return from_bits(sign | static_cast<std::uint32_t>(m));
  const int qt = qk - (24 - sum_bits);
  return from_bits(sign | (static_cast<std::uint32_t>(qt + 23 + 127) << 23) | static_cast<std::uint32_t>(m & 0x7fffffu));
}

/// An input decoded once: kind, sign, integer significand, exponent of its last bit, and its
/// exponent (emin for a subnormal).
struct operand {
  kind k = kind::finite;
  bool neg = false;
  std::uint64_t m = 0;
  int lsb = 0;
  int e = 0;
};

template <class In>
operand decode_operand(const In& x) {
  operand o;
  o.k = decode(x, o.neg, o.m, o.lsb, o.e);
  return o;
}

/// The widths of one step, as numbers.
struct step_shape {
  int align_bits = 0;
  int sum_bits = 24;
  int align_floor = -1024;
};

template <class F>
constexpr step_shape shape_of() {
  return {F::align_bits, F::sum_bits, F::align_floor};
}

/// One block FMA: c + sum_k a[k] b[k] over n decoded products, as described at the top of
/// this file.
inline float step(float c, const operand* a, const operand* b, std::size_t n, step_shape sh) {
  term t[65];
  int count = 0;
  bool nan = false, pos_inf = false, neg_inf = false;
  {
    bool neg = false;
    std::uint64_t m = 0;
    int lsb = 0, e = 0;
    const kind kc = decode(c, neg, m, lsb, e);
    if (kc == kind::nan) nan = true;
    if (kc == kind::inf) (neg ? neg_inf : pos_inf) = true;
    if (kc == kind::finite && m != 0) t[count++] = {neg, m, lsb, e};
  }
  for (std::size_t i = 0; i < n; ++i) {
    const operand& x = a[i];
    const operand& y = b[i];
    if (x.k == kind::finite && y.k == kind::finite) {
      if (x.m != 0 && y.m != 0) t[count++] = {x.neg != y.neg, x.m * y.m, x.lsb + y.lsb, x.e + y.e};
    } else if (x.k == kind::nan || y.k == kind::nan || (x.k == kind::finite && x.m == 0) ||
               (y.k == kind::finite && y.m == 0)) {
      nan = true;  // a NaN, or infinity times zero
    } else {
      ((x.neg != y.neg) ? neg_inf : pos_inf) = true;
    }
  }
  if (nan || (pos_inf && neg_inf)) return std::numeric_limits<float>::quiet_NaN();
  if (pos_inf || neg_inf) return pos_inf ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  if (count == 0) return 0.0f;
  int emax = sh.align_floor;
  for (int i = 0; i < count; ++i) emax = std::max(emax, t[i].align);
  const int q = emax - sh.align_bits;  // every term truncated to a multiple of 2^q
  std::int64_t s = 0;
  for (int i = 0; i < count; ++i) {
    const int sh_i = t[i].lsb - q;
    const std::uint64_t v = sh_i >= 0 ? t[i].m << sh_i : (-sh_i >= 64 ? 0 : t[i].m >> -sh_i);
    s += t[i].neg ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
  }
  return truncate_to_float(s, q, sh.sum_bits);
}

/// c + the products of n decoded pairs, one step per `block` of them, in order.
template <class F>
float run_steps(float c, const operand* a, const operand* b, std::size_t n) {
  constexpr auto block = static_cast<std::size_t>(F::block);
  for (std::size_t i = 0; i < n; i += block) c = step(c, a + i, b + i, block, shape_of<F>());
  return c;
}

template <class Arch, class In>
std::string what(std::size_t na, std::size_t nb) {
  return "precis::tc::inner_product<" + std::string(Arch::name) + ", " + std::string(format_traits<In>::name) +
         ">: a has " + std::to_string(na) + " elements and b " + std::to_string(nb) +
         "; expected equal lengths that are a multiple of the instruction's K = " +
         std::to_string(block_fma<Arch, In>::k);
}

}  // namespace detail

/// c + sum_k a_k b_k as Arch's tensor cores compute it for input format In: one block FMA per
/// block of block_fma<Arch, In>::block products, in order, each fed the previous one's fp32
/// result. The length must be a multiple of the instruction's K (invalid_argument otherwise).
template <class Arch, class In>
float inner_product(float c, std::span<const In> a, std::span<const In> b) {
  static_assert(supports<Arch, In>,
                "precis::tc::inner_product: this architecture's tensor cores do not take this input format "
                "(precis::tc::block_fma<Arch, In> is not defined)");
  using F = block_fma<Arch, In>;
  if (a.size() != b.size() || a.size() % static_cast<std::size_t>(F::k) != 0) throw invalid_argument(detail::what<Arch, In>(a.size(), b.size()));
  constexpr auto block = static_cast<std::size_t>(F::block);
  float acc = c;
  detail::operand x[block], y[block];
  for (std::size_t i = 0; i < a.size(); i += block) {
    for (std::size_t j = 0; j < block; ++j) {
      x[j] = detail::decode_operand(a[i + j]);
      y[j] = detail::decode_operand(b[i + j]);
    }
    acc = detail::step(acc, x, y, block, detail::shape_of<F>());
  }
  return acc;
}

/// Spans of static extent: a length that is not a multiple of K is a compile-time error.
template <class Arch, class In, std::size_t N, std::size_t M>
  requires(N != std::dynamic_extent && M != std::dynamic_extent)
float inner_product(float c, std::span<const In, N> a, std::span<const In, M> b) {
  static_assert(supports<Arch, In>,
                "precis::tc::inner_product: this architecture's tensor cores do not take this input format "
                "(precis::tc::block_fma<Arch, In> is not defined)");
  static_assert(N == M && N % block_fma<Arch, In>::k == 0,
                "precis::tc::inner_product: a and b must have the same length, a multiple of the instruction's K "
                "(precis::tc::block_fma<Arch, In>::k)");
  return inner_product<Arch, In>(c, std::span<const In>(a), std::span<const In>(b));
}

}  // namespace precis::tc
