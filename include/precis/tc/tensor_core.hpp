// Tensor cores modelled bit for bit on the CPU: what one generation's matrix-multiply-accumulate
// instruction computes for an inner product c + sum_k a_k b_k with an fp32 accumulator.
//
//   float d = precis::tc::inner_product<precis::tc::sm90, precis::half>(c, a, b);
//
// Tensor cores do not compute an IEEE fp32 sum. Each step of the instruction ("block FMA")
// takes a block of products and the running result and
//   1. forms every product exactly;
//   2. gives each term an alignment exponent: for a product, the sum of its two inputs'
//      exponents (a subnormal input counts with the format's emin and significand 0.m), so a
//      product's significand lies in [0, 4); for the running result, its own exponent;
//   3. truncates every term, the running result included, toward zero (on its magnitude) to a
//      multiple of 2^(emax - align_bits), emax the largest alignment exponent of the step's
//      nonzero terms;
//   4. adds the truncated terms exactly and truncates the sum to fp32 (round toward zero), a
//      zero result being +0;
// and feeds that fp32 result into the next step as its running result. Which block sizes and
// widths a generation uses is a named constant below, with where it comes from.
//
// Special values (infinities, NaNs in the inputs or in c) follow IEEE rules here: any NaN, an
// infinite product of a zero, or infinities of both signs give a NaN; otherwise an infinite
// term gives that infinity. The recorded hardware data holds no special values, so this part
// and the overflow of a finite sum (truncation gives the largest finite fp32) are not
// validated against hardware.
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
#include "precis/format/format.hpp"

namespace precis::tc {

/// Hopper (H100): the fifth-generation tensor cores.
struct sm90 {
  static constexpr std::string_view name = "sm90";
};

/// One architecture's block FMA for input format In: the instruction's K (an inner product's
/// length must be a multiple of it), the products summed per step (with the running result),
/// and the alignment width. Not defined where the architecture's tensor cores do not take In.
template <class Arch, class In>
struct block_fma;

// sm90 fp16 and bf16 (WMMA m16n16k16, fp32 accumulator): one step of all 16 products and c,
// 25 bits below the largest alignment exponent. tf32 (m16n16k8): two steps of 4 products, the
// first with c, the second with the first's fp32 result. Fitted to 300 tiles per format
// recorded on an H100 (76,800 outputs each, tests/data/tensor-core): 0 mismatches for all
// three; the neighbouring models (24 or 26 bits, steps of 8 products, c not truncated, the
// product's true leading bit as its exponent, rounding to nearest instead of truncation)
// give 1,700 to 37,000 mismatches per format. Consistent with the qualitative findings of
// Fasi, Higham, Mikaitis & Pranesh (2021), Li et al. (2024, "FTTN": more alignment bits on H100
// than on A100) and Khattak & Mikaitis (2025, "Accurate models of NVIDIA tensor cores").
template <>
struct block_fma<sm90, half> {
  static constexpr int k = 16;
  static constexpr int block = 16;
  static constexpr int align_bits = 25;
};
template <>
struct block_fma<sm90, bfloat16> {
  static constexpr int k = 16;
  static constexpr int block = 16;
  static constexpr int align_bits = 25;
};
template <>
struct block_fma<sm90, tf32> {
  static constexpr int k = 8;
  static constexpr int block = 4;
  static constexpr int align_bits = 25;
};

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

/// The fields of a value of a binary format with layout L: kind, sign, integer significand
/// (the hidden bit included for normal numbers) and the exponent of its last bit; a subnormal
/// has exponent emin and significand 0.m.
template <class T>
kind decode(const T& x, bool& neg, std::uint64_t& m, int& lsb, int& e) {
  using bf = precis::detail::bit_format<T>;
  constexpr auto L = bf::lay;
  const std::uint64_t bits = static_cast<std::uint64_t>(bf::to_bits(x));
  neg = (bits & L.sign_bit()) != 0;
  const std::uint64_t ef = (bits >> L.mant_bits) & L.exp_all_ones();
  const std::uint64_t mf = bits & L.mant_mask();
  if (L.enc == encoding::ieee && ef == L.exp_all_ones()) return mf == 0 ? kind::inf : kind::nan;
  e = ef == 0 ? L.emin() : static_cast<int>(ef) - L.bias();
  m = ef == 0 ? mf : (mf | (std::uint64_t{1} << L.mant_bits));
  lsb = e - L.mant_bits;
  return kind::finite;
}

inline float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

/// (-1)^neg * s * 2^q truncated to fp32 (toward zero); zero is +0, a finite overflow the
/// largest finite value.
inline float truncate_to_float(std::int64_t s, int q) {
  if (s == 0) return 0.0f;
  const bool neg = s < 0;
  const std::uint64_t a = neg ? static_cast<std::uint64_t>(-s) : static_cast<std::uint64_t>(s);
  const int e = q + static_cast<int>(std::bit_width(a)) - 1;  // exponent of the leading bit
  const std::uint32_t sign = neg ? 0x80000000u : 0u;
  if (e > 127) return from_bits(sign | 0x7f7fffffu);
  const int qt = std::max(e - 23, -149);  // exponent of the last kept bit (fp32 subnormals: -149)
  const std::uint64_t m = qt <= q ? a << (q - qt) : (qt - q >= 64 ? 0 : a >> (qt - q));
  if (m == 0) return 0.0f;
  if (m < (std::uint64_t{1} << 23)) return from_bits(sign | static_cast<std::uint32_t>(m));
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

/// One block FMA: c + sum_k a[k] b[k] over n decoded products, as described at the top of
/// this file.
inline float step(float c, const operand* a, const operand* b, std::size_t n, int align_bits) {
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
    if (kc == kind::finite && m != 0) t[count++] = {neg, m, lsb, lsb + static_cast<int>(std::bit_width(m)) - 1};
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
  int emax = t[0].align;
  for (int i = 1; i < count; ++i) emax = std::max(emax, t[i].align);
  const int q = emax - align_bits;  // every term truncated to a multiple of 2^q
  std::int64_t s = 0;
  for (int i = 0; i < count; ++i) {
    const int sh = t[i].lsb - q;
    const std::uint64_t v = sh >= 0 ? t[i].m << sh : (-sh >= 64 ? 0 : t[i].m >> -sh);
    s += t[i].neg ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
  }
  return truncate_to_float(s, q);
}

/// c + the products of n decoded pairs, one step per `block` of them, in order.
template <class F>
float run_steps(float c, const operand* a, const operand* b, std::size_t n) {
  constexpr auto block = static_cast<std::size_t>(F::block);
  for (std::size_t i = 0; i < n; i += block) c = step(c, a + i, b + i, block, F::align_bits);
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
  static_assert(F::block <= 64, "precis::tc::block_fma: at most 64 products per step");
  if (a.size() != b.size() || a.size() % static_cast<std::size_t>(F::k) != 0) throw invalid_argument(detail::what<Arch, In>(a.size(), b.size()));
  constexpr auto block = static_cast<std::size_t>(F::block);
  float acc = c;
  detail::operand x[block], y[block];
  for (std::size_t i = 0; i < a.size(); i += block) {
    for (std::size_t j = 0; j < block; ++j) {
      x[j] = detail::decode_operand(a[i + j]);
      y[j] = detail::decode_operand(b[i + j]);
    }
    acc = detail::step(acc, x, y, block, F::align_bits);
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
