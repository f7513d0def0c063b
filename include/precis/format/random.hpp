// A small, fast, seedable random bit generator for stochastic rounding and random fills.
// xoshiro256++ (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021),
// seeded through splitmix64 as its authors recommend. Unlike std::mt19937 + distributions its
// output is specified bit for bit, so results are reproducible across compilers.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include "precis/config.hpp"

namespace precis {

/// splitmix64 step: used to expand one 64-bit seed into a generator state.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// xoshiro256++: a UniformRandomBitGenerator with 64-bit output.
class xoshiro256pp {
 public:
  using result_type = std::uint64_t;

  constexpr explicit xoshiro256pp(std::uint64_t seed = 0x853c49e6748fea9bULL) noexcept {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  constexpr result_type operator()() noexcept {
    const std::uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// The 256-bit state, for checkpoints; set_state(state()) resumes the same stream.
  constexpr std::array<std::uint64_t, 4> state() const noexcept { return {s_[0], s_[1], s_[2], s_[3]}; }
  constexpr void set_state(const std::array<std::uint64_t, 4>& s) noexcept {
    for (std::size_t i = 0; i < 4; ++i) s_[i] = s[i];
  }

  /// Advances the state by 2^128 draws: gives non-overlapping streams for parallel work.
  constexpr void jump() noexcept {
    constexpr std::uint64_t kJump[] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL,
                                       0xa9582618e03fc9aaULL, 0x39abdc4529b1661cULL};
    std::uint64_t t[4] = {0, 0, 0, 0};
    for (std::uint64_t j : kJump) {
      for (int b = 0; b < 64; ++b) {
        if (j & (std::uint64_t{1} << b)) {
          for (int i = 0; i < 4; ++i) t[i] ^= s_[i];
        }
        (*this)();
      }
    }
    for (int i = 0; i < 4; ++i) s_[i] = t[i];
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t s_[4];
};

/// Philox4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3",
/// SC 2011): a counter-based generator. Four 32-bit outputs are a pure function of a 128-bit
/// counter and a 64-bit key, so any element of a parallel computation can draw its own random
/// bits from its coordinates, on the host or on a GPU, with identical results. The constants
/// and the 10 rounds are Random123's (and cuRAND's) Philox4x32-10.
struct philox4x32_output {
  std::uint32_t v[4];
};

PRECIS_HOST_DEVICE constexpr philox4x32_output philox4x32_10(std::uint32_t c0, std::uint32_t c1,
                                                            std::uint32_t c2, std::uint32_t c3,
                                                            std::uint32_t k0, std::uint32_t k1) noexcept {
  constexpr std::uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = m0 * c0, p1 = m1 * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += w0;
    k1 += w1;
  }
  return {{c0, c1, c2, c3}};
}

namespace detail {
/// 64 uniformly random bits from any UniformRandomBitGenerator whose range is 2^32 or 2^64
/// values (the reproducible generators: mt19937, mt19937_64, xoshiro256pp, pcg...).
template <class Urbg>
std::uint64_t random_bits64(Urbg& gen) {
  using R = typename Urbg::result_type;
  constexpr auto lo = Urbg::min();
  constexpr auto hi = Urbg::max();
  static_assert(lo == 0, "precis: the random source must produce values starting at 0");
  if constexpr (std::numeric_limits<R>::digits >= 64 &&
                static_cast<std::uint64_t>(hi) == ~std::uint64_t{0}) {
    return static_cast<std::uint64_t>(gen());
  } else {
    static_assert(static_cast<std::uint64_t>(hi) == 0xffffffffULL,
                  "precis: the random source must produce 32 or 64 uniformly random bits");
    const std::uint64_t a = static_cast<std::uint64_t>(gen());
    const std::uint64_t b = static_cast<std::uint64_t>(gen());
    return (a << 32) | b;
  }
}
}  // namespace detail

}  // namespace precis
