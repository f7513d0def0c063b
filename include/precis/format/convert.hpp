// precis::convert(src, dst, mode[, overflow][, random source]): many values at once.
//
// Same results as precis::round_to applied element by element, bit for bit. float <-> fp16,
// bf16, tf32, fp8 and other small formats take AVX2/F16C kernels when the CPU has them
// (checked once at run time; float <-> fp16, and float <-> bf16 to nearest, take AVX-512F ones
// where it exists); everything else, and every CPU without them, takes the portable
// scalar path. Stochastic rounding draws one 64-bit value per element, in order, so results
// depend only on the seed.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>

#include "precis/config.hpp"
#include "precis/error.hpp"
#include "precis/format/convert_portable.hpp"
#include "precis/format/convert_x86.hpp"
#include "precis/format/round_to.hpp"

namespace precis {
namespace detail {

/// The portable path: round_to element by element (also the reference for the SIMD kernels).
template <class From, class To>
void convert_scalar(const From* src, To* dst, std::size_t n, rounding mode, overflow ov) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = round_unchecked<To>(src[i], mode, ov, 0);
}

/// Stochastic rounding, one draw per element in order. float -> bf16 with IEEE overflow (the
/// stochastically rounded updates of bf16 parameters) adds 16 random bits below the kept ones
/// and truncates: round_up's "draw < discarded fraction" compares the draw's top 16 bits with
/// the 16 discarded ones (the draw's other bits cannot change a strict comparison with a
/// fraction whose low 48 bits are zero), the carry moves into the exponent as rounding up does,
/// and the largest finite values carry into infinity, as IEEE overflow does; subnormals keep the
/// same 16 low bits. NaNs and infinities take the general path (they do not round).
template <class From, class To, class Gen>
void convert_stochastic(const From* src, To* dst, std::size_t n, overflow ov, Gen& gen) {
  if constexpr (std::is_same_v<From, float> && is_bit_format_v<To>) {
    using bf = bit_format<To>;
    if constexpr (bf::lay == layout{8, 7, encoding::ieee} && sizeof(To) == 2) {
      if (ov == overflow::infinity) {
        constexpr std::size_t block = 256;
        std::uint32_t draw[block];
        for (std::size_t i0 = 0; i0 < n; i0 += block) {
          const std::size_t len = std::min(block, n - i0);
          for (std::size_t i = 0; i < len; ++i) draw[i] = static_cast<std::uint32_t>(random_bits64(gen) >> 48);
          for (std::size_t i = 0; i < len; ++i) {
            const float x = src[i0 + i];
            std::uint32_t b;
            std::memcpy(&b, &x, 4);
            const std::uint32_t a = b & 0x7fffffffu;
            if (a >= 0x7f800000u) {
              dst[i0 + i] = round_unchecked<To>(x, rounding::stochastic, ov, 0);
              continue;
            }
            const std::uint32_t q = (a + (0xffffu - draw[i])) >> 16;
            dst[i0 + i] = bf::from_bits(static_cast<std::uint16_t>(((b >> 16) & 0x8000u) | q));
          }
        }
        return;
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = round_unchecked<To>(src[i], rounding::stochastic, ov, random_bits64(gen));
  }
}

#if PRECIS_X86_SIMD
template <layout L, rounding Mode, overflow Ov, class Bits>
std::size_t encode_avx2_kernel(const float* src, Bits* dst, std::size_t n) {
  if constexpr (L.exp_bits == 8 && L.enc == encoding::ieee) {
    return encode_e8_from_float_avx2<L, Mode, Ov>(src, dst, n);
  } else {
    return encode_from_float_avx2<L, Mode, Ov>(src, dst, n);
  }
}

template <layout L, rounding Mode, class Bits>
std::size_t encode_avx2_dispatch_ov(const float* src, Bits* dst, std::size_t n, overflow ov) {
  switch (ov) {
    case overflow::infinity:
      if constexpr (L.has_infinity()) {
        if constexpr (L == layout{5, 10, encoding::ieee}) {
          auto* h = reinterpret_cast<std::uint16_t*>(dst);
          const std::size_t wide = n >= 16 && cpu_has_avx512f() ? float_to_half_avx512<Mode>(src, h, n) : 0;
          return wide + float_to_half_f16c<Mode>(src + wide, h + wide, n - wide);
        } else {
          return encode_avx2_kernel<L, Mode, overflow::infinity>(src, dst, n);
        }
      }
      return 0;
    case overflow::saturate: return encode_avx2_kernel<L, Mode, overflow::saturate>(src, dst, n);
    case overflow::nan: return encode_avx2_kernel<L, Mode, overflow::nan>(src, dst, n);
  }
  return 0;
}

template <layout L, class Bits>
std::size_t encode_avx2(const float* src, Bits* dst, std::size_t n, rounding mode, overflow ov) {
  switch (mode) {
    case rounding::nearest_even:
      return encode_avx2_dispatch_ov<L, rounding::nearest_even>(src, dst, n, ov);
    case rounding::toward_zero:
      return encode_avx2_dispatch_ov<L, rounding::toward_zero>(src, dst, n, ov);
    case rounding::upward: return encode_avx2_dispatch_ov<L, rounding::upward>(src, dst, n, ov);
    case rounding::downward: return encode_avx2_dispatch_ov<L, rounding::downward>(src, dst, n, ov);
    case rounding::stochastic: return 0;
  }
  return 0;
}
#endif

/// Converts n elements; the SIMD kernels take what they can and the scalar path the rest.
template <class From, class To>
void convert_dispatch(const From* src, To* dst, std::size_t n, rounding mode, overflow ov) {
  std::size_t done = 0;
#if PRECIS_X86_SIMD
  bool simd = false;  // a vector kernel handled the bulk
  if constexpr (std::is_same_v<From, float> && is_bit_format_v<To> && !std::is_same_v<To, float>) {
    using bf = bit_format<To>;
    if constexpr (avx2_encodable(bf::lay) && sizeof(To) == sizeof(typename bf::bits_type)) {
      if (cpu_has_avx2_f16c()) {
        if constexpr (bf::lay == layout{8, 7, encoding::ieee}) {
          if (mode == rounding::nearest_even && ov == overflow::infinity) {
            auto* h = reinterpret_cast<std::uint16_t*>(dst);
            if (n >= 16 && cpu_has_avx512_bf16()) done = float_to_bf16_nearest_avx512_bf16(src, h, n);
            else if (n >= 16 && cpu_has_avx512f()) done = float_to_bf16_nearest_avx512(src, h, n);
            done += float_to_bf16_nearest_avx2(src + done, h + done, n - done);
          }
        }
        // (each kernel takes whole steps of 8 or 16 lanes: a call that could take none is skipped)
        if (n - done >= 8) done += encode_avx2<bf::lay>(src + done, reinterpret_cast<typename bf::bits_type*>(dst) + done, n - done, mode, ov);
        simd = true;
      }
    }
  } else if constexpr (std::is_same_v<To, float> && is_bit_format_v<From> &&
                       !std::is_same_v<From, float>) {
    using bf = bit_format<From>;
    if constexpr (avx2_decodable(bf::lay) && sizeof(From) == sizeof(typename bf::bits_type)) {
      if (cpu_has_avx2_f16c()) {
        const auto* bits = reinterpret_cast<const typename bf::bits_type*>(src);
        if constexpr (bf::lay == layout{8, 7, encoding::ieee}) {
          if (n >= 16 && cpu_has_avx512f()) done = bf16_to_float_avx512(bits, dst, n);
          done += bf16_to_float_avx2(bits + done, dst + done, n - done);
        } else if constexpr (bf::lay == layout{5, 10, encoding::ieee}) {
          if (n >= 16 && cpu_has_avx512f()) done = half_to_float_avx512(bits, dst, n);
        } else if constexpr (bf::lay.total_bits() <= 8) {
          if (n >= 16 && cpu_has_avx512f()) done = decode8_to_float_avx512<bf::lay>(bits, dst, n);
        }
        if (n - done >= 8) done += decode_to_float_avx2<bf::lay>(bits + done, dst + done, n - done);
        simd = true;
      }
    }
  }
  // a short tail (fewer than 8 elements, or a short run such as a GEMM micro-panel) through the
  // same kernel via a padded buffer: bit-identical to the scalar path, and faster
  if constexpr ((std::is_same_v<From, float> && is_bit_format_v<To>) || (std::is_same_v<To, float> && is_bit_format_v<From>)) {
    if (simd && n > done && n - done < 8) {
      From in[8]{};
      To out[8];
      std::copy_n(src + done, n - done, in);
      convert_dispatch(in, out, 8, mode, ov);
      std::copy_n(out, n - done, dst + done);
      return;
    }
  }
#endif
  // where no x86-64 kernel ran: fp16 and bf16 to and from float in portable vectors
  if constexpr (std::is_same_v<From, float> && is_bit_format_v<To> && sizeof(To) == 2) {
    constexpr layout lay = bit_format<To>::lay;
    if constexpr (lay == layout{5, 10, encoding::ieee} || lay == layout{8, 7, encoding::ieee}) {
      if (mode == rounding::nearest_even && ov == overflow::infinity) {
        auto* h = reinterpret_cast<std::uint16_t*>(dst) + done;
        if constexpr (lay.exp_bits == 5) float_to_half_nearest_portable(src + done, h, n - done);
        else float_to_bf16_nearest_portable(src + done, h, n - done);
        return;
      }
    }
  } else if constexpr (std::is_same_v<To, float> && is_bit_format_v<From> && sizeof(From) == 2) {
    constexpr layout lay = bit_format<From>::lay;
    if constexpr (lay == layout{5, 10, encoding::ieee} || lay == layout{8, 7, encoding::ieee}) {
      const auto* h = reinterpret_cast<const std::uint16_t*>(src) + done;
      if constexpr (lay.exp_bits == 5) half_to_float_portable(h, dst + done, n - done);
      else bf16_to_float_portable(h, dst + done, n - done);
      return;
    }
  } else if constexpr (std::is_same_v<From, float> && is_bit_format_v<To> && sizeof(To) == 1) {
#if PRECIS_VECTOR_EXT
    // fp8 and the other 8-bit layouts, to nearest even (fp8's scaled casts)
    constexpr layout lay = bit_format<To>::lay;
    if constexpr (small_portable(lay)) {
      if (mode == rounding::nearest_even && (ov != overflow::infinity || lay.has_infinity())) {
        const auto pattern = static_cast<std::uint32_t>(ov == overflow::infinity   ? lay.inf_bits()
                                                        : ov == overflow::saturate ? lay.max_bits()
                                                                                   : lay.nan_bits());
        float_to_small_nearest_portable<lay>(src + done, reinterpret_cast<std::uint8_t*>(dst) + done, n - done, pattern);
        return;
      }
    }
#endif
  } else if constexpr (std::is_same_v<To, float> && is_bit_format_v<From> && sizeof(From) == 1) {
    // 8-bit layouts widened exactly: a table of the scalar path's 256 results
    if constexpr (fits_float(bit_format<From>::lay)) {
      static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (unsigned b = 0; b < 256; ++b) {
          t[b] = round_unchecked<float>(bit_format<From>::from_bits(static_cast<std::uint8_t>(b)), rounding::nearest_even,
                                        overflow::infinity, 0);
        }
        return t;
      }();
      const auto* bits = reinterpret_cast<const std::uint8_t*>(src) + done;
      for (std::size_t i = 0; i < n - done; ++i) dst[done + i] = table[bits[i]];
      return;
    }
  }
  convert_scalar(src + done, dst + done, n - done, mode, ov);
}

template <class From, class To>
void check_spans(std::span<const From> src, std::span<To> dst) {
  if (src.size() != dst.size()) {
    throw shape_error("precis::convert: source has " + std::to_string(src.size()) +
                      " elements, destination has " + std::to_string(dst.size()) +
                      "; expected equal lengths");
  }
  const auto* s0 = reinterpret_cast<const unsigned char*>(src.data());
  const auto* s1 = s0 + src.size_bytes();
  const auto* d0 = reinterpret_cast<const unsigned char*>(dst.data());
  const auto* d1 = d0 + dst.size_bytes();
  if (!src.empty() && std::less<>{}(s0, d1) && std::less<>{}(d0, s1)) {
    throw invalid_argument("precis::convert: source and destination overlap; expected "
                           "disjoint buffers");
  }
}

template <class R>
concept contiguous_sized = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

template <class R>
using range_value = detail::remove_cv_t<std::ranges::range_value_t<R>>;

template <class R>
auto as_const_span(R&& r) {
  return std::span<const range_value<R>>(std::ranges::data(r), std::ranges::size(r));
}
template <class R>
auto as_span(R&& r) {
  return std::span<range_value<R>>(std::ranges::data(r), std::ranges::size(r));
}

}  // namespace detail

/// Converts every element of src into dst (equal lengths, disjoint), rounding once each.
/// The target must have infinities; otherwise pass a precis::overflow.
template <detail::contiguous_sized Src, detail::contiguous_sized Dst>
  requires floating<detail::range_value<Src>> && floating<detail::range_value<Dst>>
void convert(Src&& src, Dst&& dst, rounding mode = rounding::nearest_even) {
  using To = detail::range_value<Dst>;
  detail::require_infinity_or_explicit_overflow<To>();
  const auto s = detail::as_const_span(src);
  const auto d = detail::as_span(dst);
  detail::check_spans(s, d);
  detail::check_not_stochastic(mode, "precis::convert");
  detail::convert_dispatch(s.data(), d.data(), s.size(), mode, overflow::infinity);
}

template <detail::contiguous_sized Src, detail::contiguous_sized Dst>
  requires floating<detail::range_value<Src>> && floating<detail::range_value<Dst>>
void convert(Src&& src, Dst&& dst, rounding mode, overflow ov) {
  using To = detail::range_value<Dst>;
  const auto s = detail::as_const_span(src);
  const auto d = detail::as_span(dst);
  detail::check_spans(s, d);
  detail::check_overflow_mode<To>(ov, "precis::convert");
  detail::check_not_stochastic(mode, "precis::convert");
  detail::convert_dispatch(s.data(), d.data(), s.size(), mode, ov);
}

/// With a random source: stochastic rounding draws once per element, in element order.
template <detail::contiguous_sized Src, detail::contiguous_sized Dst,
          std::uniform_random_bit_generator Gen>
  requires floating<detail::range_value<Src>> && floating<detail::range_value<Dst>>
void convert(Src&& src, Dst&& dst, rounding mode, overflow ov, Gen& gen) {
  using To = detail::range_value<Dst>;
  const auto s = detail::as_const_span(src);
  const auto d = detail::as_span(dst);
  detail::check_spans(s, d);
  detail::check_overflow_mode<To>(ov, "precis::convert");
  if (mode == rounding::stochastic) {
    detail::convert_stochastic(s.data(), d.data(), s.size(), ov, gen);
  } else {
    detail::convert_dispatch(s.data(), d.data(), s.size(), mode, ov);
  }
}

template <detail::contiguous_sized Src, detail::contiguous_sized Dst,
          std::uniform_random_bit_generator Gen>
  requires floating<detail::range_value<Src>> && floating<detail::range_value<Dst>>
void convert(Src&& src, Dst&& dst, rounding mode, Gen& gen) {
  using To = detail::range_value<Dst>;
  detail::require_infinity_or_explicit_overflow<To>();
  convert(std::forward<Src>(src), std::forward<Dst>(dst), mode, overflow::infinity, gen);
}

}  // namespace precis
