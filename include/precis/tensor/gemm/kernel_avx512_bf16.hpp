// AVX512-BF16 register-tile kernel for the blocked GEMM of bfloat16 inputs into fp32: a 12 x 32
// tile of fp32 accumulators fed by vdpbf16ps, which multiplies 16 pairs of bf16 values and adds
// both products into each fp32 lane: twice the multiply-adds of an fp32 FMA per instruction.
//
// What vdpbf16ps computes (Intel SDM, VDPBF16PS; checked bit for bit against a scalar model on
// 2 million random lanes, subnormals, infinities and NaNs included, on the machines in
// docs/benchmarks.md), for the lane's accumulator c and the pairs (a0, a1), (b0, b1) of a dword:
//     c = ftz(fma(daz(a1), daz(b1), daz(c)))     the high (odd) halves first,
//     c = ftz(fma(daz(a0), daz(b0), c))          then the low (even) halves,
// each an fp32 fused multiply-add rounded to nearest even (the product of two bf16 values is
// exact in fp32 unless it underflows), with denormal inputs read as zero (daz) and denormal
// results flushed to zero (ftz), whatever MXCSR says.
//
// The packing puts element k of each pair in the high half and k + 1 in the low half, so every
// lane is the same chain of fused multiply-adds, in the same k order, as the fp32 kernels'
// (kernel_avx2.hpp, kernel_avx512.hpp) on the same bf16 values widened to fp32, and the driver
// cuts K into the same blocks. The results are therefore bit-identical to the fp32 kernels'
// whenever no input, product or partial sum is an fp32 denormal (|x| < 2^-126); where one is,
// this kernel reads or writes zero where the fp32 kernels keep gradual underflow. Each such
// flush moves an entry by less than 2^-126 (an input read as zero: by |a b| < 2^-126 |b|), so
// the error bound is the fp32 kernels' gamma_K |A||B| plus K * 2^-126 * (1 + max |b|) at most.
// A policy with reproducible_gemm (or PRECIS_GEMM_ISA=avx512) uses the fp32 kernels instead.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <algorithm>
#include <cpuid.h>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#include "precis/format/bfloat16.hpp"
#include "precis/tensor/gemm/kernel_avx512.hpp"
#include "precis/tensor/gemm/spread.hpp"

namespace precis::detail {

/// The dword of a pair: `first` (element k) in the high half, `second` (k + 1) in the low one,
/// so vdpbf16ps adds first's product before second's.
inline std::uint32_t bf16_pair(std::uint16_t first, std::uint16_t second) noexcept {
  return (std::uint32_t{first} << 16) | second;
}

/// The bits of n bf16 values (bfloat16 is a standard-layout wrapper of its 16 bits).
inline const std::uint16_t* bf16_bits(const bfloat16* p) noexcept { return reinterpret_cast<const std::uint16_t*>(p); }

/// Two bf16 values adjacent in memory, x[0] (element k) and x[1] (k + 1), as a pair dword:
/// one 32-bit load with its halves swapped.
inline std::uint32_t bf16_adjacent_pair(const std::uint16_t* x) noexcept {
  std::uint32_t v;
  std::memcpy(&v, x, sizeof v);
  return (v << 16) | (v >> 16);
}

/// The first lanes of m of c, zero-extended to dwords; nothing read past them.
PRECIS_TARGET_AVX512_BF16 inline __m512i bf16_widen_masked(__mmask16 m, const std::uint16_t* c) {
  return _mm512_maskz_cvtepu16_epi32(all16, _mm256_maskz_loadu_epi16(m, c));
}

/// Packs rows [0, mc) x cols [0, kc) of bf16 A (row stride rs, column stride cs) into mr-row
/// panels of ceil(kc / 2) pair dwords per row, interleaved by pair; rows and an odd k are padded
/// with zeros.
PRECIS_TARGET_AVX512_BF16 inline void pack_a_bf16_pairs(const bfloat16* a_, index_t rs, index_t cs, index_t mc,
                                                         index_t kc, index_t mr, std::uint32_t* dst) {
  const std::uint16_t* a = bf16_bits(a_);
  const index_t kp = (kc + 1) / 2, even = kc / 2;
  for (index_t i0 = 0; i0 < mc; i0 += mr) {
    std::uint32_t* panel = dst + i0 * kp;
    const index_t rows = std::min(mr, mc - i0);
    if (rs == 1 && cs != 1 && rows == mr && mr <= 16) {
      // column-major A (a transposed view): the panel's rows are adjacent in each column, so a
      // pair of columns is two masked loads, widened to dwords, the first shifted high
      const auto m = static_cast<__mmask16>((1u << mr) - 1u);
      const std::uint16_t* x = a + i0;
      for (index_t q = 0; q < even; ++q) {
        const __m512i hi = _mm512_maskz_slli_epi32(all16, bf16_widen_masked(m, x + 2 * q * cs), 16);
        _mm512_mask_storeu_epi32(panel + q * mr, m, _mm512_or_si512(hi, bf16_widen_masked(m, x + (2 * q + 1) * cs)));
      }
      if (kp != even) {
        _mm512_mask_storeu_epi32(panel + even * mr, m, _mm512_maskz_slli_epi32(all16, bf16_widen_masked(m, x + (kc - 1) * cs), 16));
      }
      continue;
    }
    if (rs == 1 && cs != 1 && rows == mr) {
      // column-major A, a tile taller than one vector
      const std::uint16_t* x = a + i0;
      for (index_t q = 0; q < even; ++q) {
        const std::uint16_t* c0 = x + 2 * q * cs;
        const std::uint16_t* c1 = c0 + cs;
        for (index_t r = 0; r < mr; ++r) panel[q * mr + r] = bf16_pair(c0[r], c1[r]);
      }
      if (kp != even) {
        for (index_t r = 0; r < mr; ++r) panel[even * mr + r] = bf16_pair(x[(kc - 1) * cs + r], 0);
      }
      continue;
    }
    if (cs == 1 && rs % 2 == 0 && rows == mr) {
      // row-major A, rows an even number of elements apart: each row's pairs are adjacent
      // dwords, interleaved by 4 x 4 register transposes, then their halves swapped so that
      // element k sits high (data movement only)
      spread_rows_32(a + i0 * rs, rs / 2, mr, even, panel, mr);
      index_t t = 0;
      for (; t + 16 <= even * mr; t += 16) {
        const __m512i v = _mm512_loadu_si512(panel + t);
        _mm512_storeu_si512(panel + t, _mm512_maskz_rol_epi32(all16, v, 16));
      }
      for (; t < even * mr; ++t) panel[t] = (panel[t] << 16) | (panel[t] >> 16);
      if (kp != even) {
        for (index_t r = 0; r < mr; ++r) panel[even * mr + r] = bf16_pair(a[(i0 + r) * rs + kc - 1], 0);
      }
      continue;
    }
    for (index_t r = 0; r < mr; ++r) {
      if (r >= rows) {
        for (index_t q = 0; q < kp; ++q) panel[q * mr + r] = 0;
        continue;
      }
      const std::uint16_t* x = a + (i0 + r) * rs;
      if (cs == 1) {
        for (index_t q = 0; q < even; ++q) panel[q * mr + r] = bf16_adjacent_pair(x + 2 * q);
      } else {
        for (index_t q = 0; q < even; ++q) panel[q * mr + r] = bf16_pair(x[2 * q * cs], x[(2 * q + 1) * cs]);
      }
      if (kp != even) panel[even * mr + r] = bf16_pair(x[(kc - 1) * cs], 0);
    }
  }
}

/// Packs rows [0, kc) x cols [0, nc) of bf16 B into nr-column panels of `depth` x nr pair dwords
/// (row-major by pair; depth >= ceil(kc / 2), the pair rows past ceil(kc / 2) zero), element k
/// in the high half of its pair when KHigh (vdpbf16ps), in the low half otherwise (AMX); an odd
/// kc's last pair completed with +0; panels [p0, p1) only, so that threads can share the work.
/// Dense rows are read in order, 32 rows at a time across all the panels (panel by panel, each
/// 64-byte piece of a row came from another cache line, a stride the hardware prefetchers do not
/// follow: on an AMX core packing took twice as long as the products of a 64-row share of
/// 1024^3, docs/benchmarks.md), and each panel gets 16 consecutive pair rows at once (pair row
/// by pair row, the same row of every panel lies a multiple of 4 KiB from the last, in the same
/// L1 sets). Dense columns (a transposed view: a linear layer's forward product) whose starts lie
/// a whole number of dwords apart already hold each pair as one dword, k low: they are spread
/// into the panels by register transposes (and their halves swapped for KHigh). Anything else
/// goes element by element. Data movement only.
template <bool KHigh>
PRECIS_TARGET_AVX512_BF16 void pack_b_pairs(const bfloat16* b_, index_t rs, index_t cs, index_t kc,
                                            index_t nc, index_t nr, index_t depth,
                                            std::uint32_t* dst, index_t p0, index_t p1) {
  const std::uint16_t* b = bf16_bits(b_);
  const index_t kp = (kc + 1) / 2, even = kc / 2;
  const auto columns = [&](index_t pj) { return std::min(nr, nc - pj * nr); };
  // the pair of element k (x) and k + 1 (y)
  const auto pair_of = [](std::uint16_t x, std::uint16_t y) {
    return KHigh ? bf16_pair(x, y) : bf16_pair(y, x);
  };
  if (rs == 1 && cs != 1 && cs % 2 == 0) {
    for (index_t pj = p0; pj < p1; ++pj) {
      const index_t j0 = pj * nr, cols = columns(pj);
      std::uint32_t* panel = dst + j0 * depth;
      spread_rows_32(b + j0 * cs, cs / 2, cols, even, panel, nr);
      if constexpr (KHigh) {
        index_t t = 0;
        for (; t + 16 <= even * nr; t += 16) {
          const __m512i v = _mm512_loadu_si512(panel + t);
          _mm512_storeu_si512(panel + t, _mm512_maskz_rol_epi32(all16, v, 16));
        }
        for (; t < even * nr; ++t) panel[t] = (panel[t] << 16) | (panel[t] >> 16);
      }
      if (kp > even) {
        for (index_t c = 0; c < nr; ++c)
          panel[even * nr + c] = c < cols ? pair_of(b[(j0 + c) * cs + kc - 1], 0) : 0u;
      }
      std::fill(panel + kp * nr, panel + depth * nr, 0u);
    }
    return;
  }
  constexpr index_t block = 16;
  for (index_t q0 = 0; q0 < depth; q0 += block) {
    const index_t q1 = std::min(depth, q0 + block);
    for (index_t pj = p0; pj < p1; ++pj) {
      const index_t j0 = pj * nr, cols = columns(pj);
      for (index_t q = q0; q < q1; ++q) {
        std::uint32_t* out = dst + j0 * depth + q * nr;
        index_t c = 0;
        if (q < kp) {
          const bool pair = q < even;
          const std::uint16_t* r0 = b + 2 * q * rs + j0 * cs;
          const std::uint16_t* r1 = pair ? r0 + rs : r0;
          if (cs == 1) {
            // 16 columns at a time: both rows widened to dwords, element k's shifted high or
            // element k + 1's (masked forms: see all16 in convert_x86.hpp)
            for (; c + 16 <= cols; c += 16) {
              const __m512i x = _mm512_maskz_cvtepu16_epi32(
                  all16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + c)));
              const __m512i y =
                  pair ? _mm512_maskz_cvtepu16_epi32(
                             all16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + c)))
                       : _mm512_setzero_si512();
              const __m512i v = KHigh ? _mm512_or_si512(_mm512_maskz_slli_epi32(all16, x, 16), y)
                                      : _mm512_or_si512(x, _mm512_maskz_slli_epi32(all16, y, 16));
              _mm512_storeu_si512(out + c, v);
            }
          }
          for (; c < cols; ++c) out[c] = pair_of(r0[c * cs], pair ? r1[c * cs] : std::uint16_t{0});
        }
        for (; c < nr; ++c) out[c] = 0;
      }
    }
  }
}

/// B packed for the 12 x 32 tile: pair rows of ceil(kc / 2), element k high.
PRECIS_TARGET_AVX512_BF16 inline void pack_b_bf16_pairs(const bfloat16* b, index_t rs, index_t cs,
                                                        index_t kc, index_t nc, index_t nr,
                                                        std::uint32_t* dst, index_t p0,
                                                        index_t p1) {
  pack_b_pairs<true>(b, rs, cs, kc, nc, nr, (kc + 1) / 2, dst, p0, p1);
}

/// One pair step of the 12 x 32 tile: a row of B's pairs (two vectors) times each of A's 12
/// pairs, added into the accumulators; a and b move on to the next pair.
PRECIS_TARGET_AVX512_BF16 __attribute__((always_inline)) inline void avx512_bf16_tile_step(
    __m512 (&acc)[12][2], const std::uint32_t* __restrict& a, const std::uint32_t* __restrict& b) {
  const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(b));
  const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 16));
  PRECIS_UNROLL(12)
  for (int i = 0; i < 12; ++i) {
    const __m512bh ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[i])));
    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], b0, ar);
    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], b1, ar);
  }
  a += 12;
  b += 32;
}

/// C[0:mr, 0:nr] = alpha * A_panel * B_panel (+ beta * C) over kp pairs of k; A_panel is
/// 12 x kp pair dwords (interleaved by pair), B_panel kp x 32 pair dwords, both zero-padded to
/// the full tile, B's panel 64-byte aligned. beta == 0 does not read C. The tile's C lines are
/// prefetched into L1 one every few steps, as the fp32 tile does (avx512_tile_core).
PRECIS_TARGET_AVX512_BF16 inline void avx512_bf16_tile_kernel(index_t kp, const std::uint32_t* __restrict a,
                                                              const std::uint32_t* __restrict b, float* c, index_t rs_c,
                                                              index_t cs_c, index_t mr, index_t nr, float alpha,
                                                              float beta) {
  __m512 acc[12][2];
  PRECIS_UNROLL(12)
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  index_t q = 0;
  if (cs_c == 1) {
    const index_t c_lines = 2 * mr, gap = c_prefetch_gap(kp, c_lines);
    for (index_t l = 0; l < c_lines && q + gap <= kp; ++l) {
      _mm_prefetch(c_tile_line(c, rs_c, l), _MM_HINT_T0);
      for (index_t r = 0; r < gap; ++r) avx512_bf16_tile_step(acc, a, b);
      q += gap;
    }
  }
  for (; q < kp; ++q) avx512_bf16_tile_step(acc, a, b);
  avx512_store_tile<float>(acc, c, rs_c, cs_c, mr, nr, alpha, beta);
}

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
