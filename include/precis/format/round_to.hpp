// precis::round_to<To>(x, mode[, overflow][, random source]): one value, rounded once from
// the source bits into any format precis knows.
#pragma once

#include <concepts>
#include <random>
#include <string>
#include <type_traits>

#include "precis/error.hpp"
#include "precis/format/detail/core.hpp"
#include "precis/format/format_traits.hpp"
#include "precis/format/random.hpp"
#include "precis/format/rounding.hpp"

namespace precis {
namespace detail {

template <class T>
split split_any(const T& x) {
  if constexpr (is_bit_format_v<T>) {
    return split_bits<bit_format<T>::lay>(bit_format<T>::to_bits(x));
  } else {
    return split_generic(x);
  }
}

/// Every value of From is a value of To (so conversion is exact in any mode).
template <class From, class To>
constexpr bool converts_exactly() {
  using F = format_traits<From>;
  using T = format_traits<To>;
  const int f_low = F::emin - (F::has_subnormals ? F::digits - 1 : 0);
  const int t_low = T::emin - (T::has_subnormals ? T::digits - 1 : 0);
  return F::digits <= T::digits && F::emax <= T::emax && f_low >= t_low &&
         (!F::has_infinity || T::has_infinity);
}

/// The conversion itself, arguments already validated. `random` is read only for stochastic.
template <class To, class From>
To round_unchecked(const From& x, rounding mode, overflow ov, std::uint64_t random) {
  if constexpr (is_bit_format_v<To>) {
    using bf = bit_format<To>;
    return bf::from_bits(static_cast<typename bf::bits_type>(
        encode_bits<bf::lay>(split_any(x), mode, ov, random)));
  } else if constexpr (converts_exactly<From, To>()) {
    if constexpr (is_bit_format_v<From>) {
      return To(decode_to_double<bit_format<From>::lay>(bit_format<From>::to_bits(x)));
    } else {
      return To(x);
    }
  } else {
    using T = format_traits<To>;
    if constexpr (T::digits <= 63) {
      return compose_generic<To>(split_any(x), T::digits, T::emin, T::emax, T::has_subnormals,
                                 mode, ov, random);
    } else {
      // A narrowing conversion onto more than 63 bits (e.g. cpp_bin_float_50 -> long double):
      // beyond the 64-bit rounding core; the type's own conversion rounds to nearest.
      if (mode != rounding::nearest_even) {
        throw invalid_argument(std::string("precis::round_to<") + std::string(T::name) + ">: from " +
                               std::string(format_traits<From>::name) +
                               " only rounding::nearest_even is supported (target has " +
                               std::to_string(T::digits) + " digits, more than 63)");
      }
      return static_cast<To>(x);
    }
  }
}

template <class To>
void check_overflow_mode(overflow ov, const char* op) {
  if (ov == overflow::infinity && !format_traits<To>::has_infinity) {
    throw invalid_argument(std::string(op) + "<" + std::string(format_traits<To>::name) +
                           ">: overflow::infinity requested, but " +
                           std::string(format_traits<To>::name) +
                           " has no infinity; expected overflow::saturate or overflow::nan");
  }
}

inline void check_not_stochastic(rounding mode, const char* op) {
  if (mode == rounding::stochastic) {
    throw invalid_argument(std::string(op) +
                           ": rounding::stochastic needs a random source; pass a uniform "
                           "random bit generator (e.g. precis::xoshiro256pp) as the last argument");
  }
}

template <class To>
constexpr void require_infinity_or_explicit_overflow() {
  static_assert(format_traits<To>::has_infinity,
                "precis: this target format has no infinity, so overflow behaviour must be "
                "chosen explicitly: pass precis::overflow::saturate or precis::overflow::nan");
}

}  // namespace detail

/// Rounds x once into To. Overflow follows IEEE 754 (To must have infinities; for formats
/// without them use the overload taking precis::overflow).
template <floating To, floating From>
To round_to(const From& x, rounding mode = rounding::nearest_even) {
  detail::require_infinity_or_explicit_overflow<To>();
  detail::check_not_stochastic(mode, "precis::round_to");
  return detail::round_unchecked<To>(x, mode, overflow::infinity, 0);
}

/// Rounds x once into To with an explicit overflow behaviour.
template <floating To, floating From>
To round_to(const From& x, rounding mode, overflow ov) {
  detail::check_overflow_mode<To>(ov, "precis::round_to");
  detail::check_not_stochastic(mode, "precis::round_to");
  return detail::round_unchecked<To>(x, mode, ov, 0);
}

/// Rounds x once into To, drawing from `gen` when mode is rounding::stochastic (64 bits per
/// value; the probability of rounding up is exact to 2^-64).
template <floating To, floating From, std::uniform_random_bit_generator Gen>
To round_to(const From& x, rounding mode, Gen& gen) {
  detail::require_infinity_or_explicit_overflow<To>();
  const std::uint64_t r = mode == rounding::stochastic ? detail::random_bits64(gen) : 0;
  return detail::round_unchecked<To>(x, mode, overflow::infinity, r);
}

template <floating To, floating From, std::uniform_random_bit_generator Gen>
To round_to(const From& x, rounding mode, overflow ov, Gen& gen) {
  detail::check_overflow_mode<To>(ov, "precis::round_to");
  const std::uint64_t r = mode == rounding::stochastic ? detail::random_bits64(gen) : 0;
  return detail::round_unchecked<To>(x, mode, ov, r);
}

}  // namespace precis
