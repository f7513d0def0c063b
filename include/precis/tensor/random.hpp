// Random fills from a seeded, counter-based generator: element i (row-major position in the
// view) is a function of (seed, i) only, so results are the same across runs, thread counts and
// chunkings. Values are drawn in double and rounded once into the storage format.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "precis/error.hpp"
#include "precis/tensor/elementwise.hpp"

namespace precis {
namespace detail {

/// SplitMix64's output function (Steele, Lea & Flood 2014) applied to the counter: a stateless
/// stream whose element i is mix(seed' + i * golden).
inline std::uint64_t counter_bits(std::uint64_t seed, std::uint64_t i) noexcept {
  std::uint64_t z = seed * 0xD1B54A32D192ED03ull + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Uniform double in [0, 1) with 53 random bits.
inline double counter_uniform(std::uint64_t seed, std::uint64_t i) noexcept {
  return static_cast<double>(counter_bits(seed, i) >> 11) * 0x1p-53;
}

/// Writes gen(i) for every element, i its row-major position; gen returns double.
template <class S, class C, class Gen>
void fill_indexed(const TensorView<S, C>& out, Gen gen) {
  strided_loop<1> loop;
  loop.shape = out.shape();
  loop.strides[0] = out.strides();
  loop.coalesce();
  const index_t total = out.size();
  parallel_ranges(total, threads_for(total, index_t{1} << 14), [&](index_t b, index_t e) {
    index_t pos = b;
    loop.run(b, e, [&](const std::array<index_t, 1>& off, index_t count,
                       const std::array<index_t, 1>& st) {
      for (index_t j = 0; j < count; ++j, ++pos)
        out.data()[off[0] + j * st[0]] = store<S>(gen(static_cast<std::uint64_t>(pos)));
    });
  });
}

inline void check_finite_param(const char* op, const char* name, double v) {
  if (!std::isfinite(v)) {
    throw invalid_argument(std::string(op) + ": " + name + " = " + std::to_string(v) +
                           "; expected a finite value");
  }
}

}  // namespace detail

/// Uniform on [lo, hi).
template <tensor_like T>
void fill_uniform(T&& t, double lo, double hi, std::uint64_t seed) {
  detail::check_finite_param("precis::fill_uniform", "lo", lo);
  detail::check_finite_param("precis::fill_uniform", "hi", hi);
  if (!(lo <= hi)) {
    throw invalid_argument("precis::fill_uniform: lo = " + std::to_string(lo) + " > hi = " +
                           std::to_string(hi) + "; expected lo <= hi");
  }
  detail::fill_indexed(as_mutable_view(t), [=](std::uint64_t i) {
    return lo + (hi - lo) * detail::counter_uniform(seed, i);
  });
}

/// Normal with the given mean and standard deviation (Box-Muller on two draws per element).
template <tensor_like T>
void fill_normal(T&& t, double mean, double stddev, std::uint64_t seed) {
  detail::check_finite_param("precis::fill_normal", "mean", mean);
  detail::check_finite_param("precis::fill_normal", "stddev", stddev);
  if (stddev < 0) {
    throw invalid_argument("precis::fill_normal: stddev = " + std::to_string(stddev) +
                           "; expected stddev >= 0");
  }
  detail::fill_indexed(as_mutable_view(t), [=](std::uint64_t i) {
    const double u1 = 1.0 - detail::counter_uniform(seed, 2 * i);  // (0, 1]: log is finite
    const double u2 = detail::counter_uniform(seed, 2 * i + 1);
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  });
}

/// Magnitudes 2^e with e uniform on [lo_exp, hi_exp) (so every binade in the range is equally
/// likely), with a random sign when `signed_values`. The workhorse of underflow studies.
template <tensor_like T>
void fill_log_uniform(T&& t, double lo_exp, double hi_exp, std::uint64_t seed,
                      bool signed_values = false) {
  detail::check_finite_param("precis::fill_log_uniform", "lo_exp", lo_exp);
  detail::check_finite_param("precis::fill_log_uniform", "hi_exp", hi_exp);
  if (!(lo_exp <= hi_exp)) {
    throw invalid_argument("precis::fill_log_uniform: lo_exp = " + std::to_string(lo_exp) +
                           " > hi_exp = " + std::to_string(hi_exp) + "; expected lo_exp <= hi_exp");
  }
  detail::fill_indexed(as_mutable_view(t), [=](std::uint64_t i) {
    const std::uint64_t bits = detail::counter_bits(seed, i);
    const double e = lo_exp + (hi_exp - lo_exp) * static_cast<double>(bits >> 11) * 0x1p-53;
    const double v = std::exp2(e);
    return signed_values && (bits & 1) ? -v : v;
  });
}

}  // namespace precis
