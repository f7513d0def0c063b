// A small, fast, seedable random bit generator for stochastic rounding and random fills.
// xoshiro256++ (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021),
// seeded through splitmix64 as its authors recommend. Unlike std::mt19937 + distributions its
// output is specified bit for bit, so results are reproducible across compilers.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

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
