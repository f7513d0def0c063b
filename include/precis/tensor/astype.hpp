// precis::astype<To>(x, mode[, overflow][, random source]): a tensor converted to another
// storage format, every element rounded once (bulk SIMD converters for dense float sources).
#pragma once

#include <random>
#include <span>

#include "precis/format/convert.hpp"
#include "precis/tensor/elementwise.hpp"

namespace precis {
namespace detail {

template <class To, class ToC, class X, class Conv>
Tensor<To, ToC> astype_impl(const X& x_, Conv conv) {
  const auto x = as_view(x_);
  auto out = Tensor<To, ToC>::uninitialized(x.shape());
  if (x.is_contiguous()) {
    conv(std::span<const storage_of<X>>(x.data(), static_cast<std::size_t>(x.size())),
         std::span<To>(out.data(), static_cast<std::size_t>(out.size())));
  } else {
    const auto dense = to_tensor(x);
    conv(std::span<const storage_of<X>>(dense.data(), static_cast<std::size_t>(dense.size())),
         std::span<To>(out.data(), static_cast<std::size_t>(out.size())));
  }
  return out;
}

}  // namespace detail

/// x rounded into To; To must have infinities (otherwise name an overflow behaviour).
template <floating To, class ToC = default_compute_t<To>, tensor_like X>
Tensor<To, ToC> astype(const X& x, rounding mode = rounding::nearest_even) {
  return detail::astype_impl<To, ToC>(x, [&](auto s, auto d) { convert(s, d, mode); });
}
template <floating To, class ToC = default_compute_t<To>, tensor_like X>
Tensor<To, ToC> astype(const X& x, rounding mode, overflow ov) {
  return detail::astype_impl<To, ToC>(x, [&](auto s, auto d) { convert(s, d, mode, ov); });
}
/// With a random source for rounding::stochastic (one draw per element, row-major order).
template <floating To, class ToC = default_compute_t<To>, tensor_like X,
          std::uniform_random_bit_generator Gen>
Tensor<To, ToC> astype(const X& x, rounding mode, overflow ov, Gen& gen) {
  return detail::astype_impl<To, ToC>(x, [&](auto s, auto d) { convert(s, d, mode, ov, gen); });
}

}  // namespace precis
