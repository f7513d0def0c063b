// precis's aarch64 paths against the scalar ones, run under QEMU on an x86-64 machine (or on an
// aarch64 machine itself): fp16 widened and rounded by Advanced SIMD's conversions (fcvtl,
// fcvtn), the portable fp16 GEMM tile that rounds with them, and the tile in native fp16 lanes
// where the CPU has FEAT_FP16 (QEMU's default CPU has). Exits 1 after any difference.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "precis/precis.hpp"

namespace {

using precis::half;
using precis::index_t;

int failures = 0;

void fail(const char* what, unsigned long long in, unsigned got, unsigned want) {
  if (++failures <= 8) std::printf("%s: input 0x%llx gives 0x%x, want 0x%x\n", what, in, got, want);
}

/// fp16 bits -> float bits from the fields, a NaN made quiet: the reference for the widening.
std::uint32_t decode(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 31) return sign | 0x7f800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u);
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                           : std::ldexp(static_cast<float>(m | 0x400u), static_cast<int>(e) - 25);
  return sign | std::bit_cast<std::uint32_t>(mag);
}

void widening() {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (std::size_t run : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{7},
                          std::size_t{64}, all.size()}) {
    std::vector<float> out(all.size());
    for (std::size_t f = 0; f < all.size(); f += run)
      precis::detail::half_to_float_portable(all.data() + f, out.data() + f,
                                             std::min(run, all.size() - f));
    for (std::size_t i = 0; i < all.size(); ++i) {
      const std::uint32_t got = std::bit_cast<std::uint32_t>(out[i]), want = decode(all[i]);
      if (got != want) fail("fp16 -> float", i, got, want);
    }
  }
}

/// Every float whose sign, exponent and 13 leading fraction bits (fp16's 10, a guard and two
/// more, the most a subnormal result's rounding needs below them are all sticky) are any, with
/// four patterns of the 10 bits below: every way the bits decide the rounding, NaN payloads
/// included, in runs of 4093 (so the last 1-3 values go through the tail path).
void rounding() {
  std::vector<float> src;
  for (std::uint32_t sign : {0u, 1u})
    for (std::uint32_t e = 0; e < 256; ++e)
      for (std::uint32_t lead = 0; lead < (1u << 13); ++lead)
        for (std::uint32_t low : {0u, 1u, 0x200u, 0x3ffu})
          src.push_back(std::bit_cast<float>(sign << 31 | e << 23 | lead << 10 | low));
  std::vector<std::uint16_t> got(src.size());
  constexpr std::size_t run = 4093;
  for (std::size_t f = 0; f < src.size(); f += run)
    precis::detail::float_to_half_nearest_portable(src.data() + f, got.data() + f,
                                                   std::min(run, src.size() - f));
  for (std::size_t i = 0; i < src.size(); ++i) {
    const auto want = std::bit_cast<std::uint16_t>(precis::round_to<half>(src[i]));
    if (got[i] != want) fail("float -> fp16", std::bit_cast<std::uint32_t>(src[i]), got[i], want);
  }
}

/// Random fp16 values with exponent fields in [lo, hi] (31: infinities and NaNs).
half random_half(std::mt19937_64& g, unsigned lo, unsigned hi) {
  const auto e = static_cast<std::uint16_t>(lo + g() % (hi - lo + 1));
  return std::bit_cast<half>(
      static_cast<std::uint16_t>((g() & 1u) << 15 | e << 10 | (g() & 0x3ffu)));
}

/// An fp16 tile of R x N (the portable one, or the native one of FEAT_FP16) against the scalar
/// tile in fp16's own arithmetic on the same panels: full and ragged tiles, alpha and beta, sums
/// that overflow; NaNs compared as NaNs.
template <index_t R, index_t N>
void tile(const char* name, void (*kernel)(index_t, const half*, const half*, half*, index_t, index_t, index_t, index_t,
                                           half, half)) {
  std::mt19937_64 g(7);
  struct range {
    unsigned lo, hi;
  };
  for (const range r : {range{10, 17}, range{1, 8}, range{14, 21}, range{15, 26}, range{0, 31}}) {
    for (index_t kc : {1, 5, 128}) {
      for (index_t mr : {R, R - 3}) {
        for (index_t nr : {N, N - 1}) {
          std::vector<half> a(static_cast<std::size_t>(kc * R)), b(static_cast<std::size_t>(kc * N));
          for (auto& x : a) x = random_half(g, r.lo, r.hi);
          for (auto& x : b) x = random_half(g, r.lo, r.hi);
          std::vector<half> c0(static_cast<std::size_t>(R * (N + 3)));
          for (auto& x : c0) x = random_half(g, 12, 17);
          for (const half beta : {half(0), half(0.3f)}) {
            auto vec = c0, ref = c0;
            kernel(kc, a.data(), b.data(), vec.data(), N + 3, 1, mr, nr, half(-0.75f), beta);
            precis::detail::generic_tile_kernel<half, R, N>(kc, a.data(), b.data(), ref.data(), N + 3, 1, mr, nr,
                                                            half(-0.75f), beta);
            for (std::size_t i = 0; i < c0.size(); ++i) {
              const auto v = std::bit_cast<std::uint16_t>(vec[i]), w = std::bit_cast<std::uint16_t>(ref[i]);
              const bool nans = std::isnan(static_cast<float>(vec[i])) && std::isnan(static_cast<float>(ref[i]));
              if (v != w && !nans) fail(name, static_cast<unsigned long long>(kc * 1000 + static_cast<index_t>(i)), v, w);
            }
          }
        }
      }
    }
  }
}

}  // namespace

int main() {
#if !defined(__aarch64__)
  std::printf("not an aarch64 build\n");
  return 1;
#else
  widening();
  rounding();
  using S = precis::detail::narrow_tile_shape;
  tile<static_cast<index_t>(S::rows), static_cast<index_t>(S::cols)>("portable fp16 tile",
                                                                   &precis::detail::vector_narrow_tile_kernel<half>);
  bool native = false;
#if PRECIS_NEON_FP16_KERNEL
  if (precis::detail::cpu_has_neon_fp16()) {
    using F = precis::detail::neon_fp16_tile_shape;
    tile<F::rows, F::cols>("native fp16 tile", &precis::detail::neon_fp16_tile_kernel);
    native = true;
  }
#endif
  std::printf("%s: fp16 conversions (%s), the portable fp16 tile%s, %d differences\n",
              failures == 0 ? "passed" : "FAILED", PRECIS_AARCH64_NEON ? "fcvtl, fcvtn" : "integer lanes",
              native ? " and the native one (FEAT_FP16)" : " (no FEAT_FP16 here)", failures);
  return failures == 0 ? 0 : 1;
#endif
}
