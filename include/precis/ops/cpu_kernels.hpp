// The CPU backend's kernels for convolution, pooling and batch normalization (op::cpu's
// im2col, col2im, conv_output, conv_output_grads, weight_grad_direct, max_pool, avg_pool,
// batch_norm_forward and their backwards call them): the receptive fields gathered into
// columns and scattered back, conv2d's weight gradient read in place in AVX2 lanes, max
// pooling's 2 x 2 windows in AVX-512 or AVX2 lanes, and batch normalization's sums on eight
// lanes. The op definitions are in conv.hpp and batch_norm.hpp; cpu.hpp includes this file
// after the load helpers (detail::ad::ld) it uses.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "precis/format/convert_x86.hpp"
#include "precis/tensor/all.hpp"
#include "precis/tensor/reduce.hpp"

#if PRECIS_X86_SIMD
#include <immintrin.h>
#endif

namespace precis::op::conv_detail {

using pair = std::array<index_t, 2>;

inline std::string str(const pair& p) { return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ")"; }

/// Output extent of a window sweep, or -1 when the window does not fit.
inline index_t out_extent(index_t in, index_t kernel, index_t stride, index_t pad, index_t dil) {
  const index_t span = dil * (kernel - 1) + 1;
  if (span > in + 2 * pad) return -1;
  return (in + 2 * pad - span) / stride + 1;
}

/// The output position o (of `out`) whose window's tap t (stride s, padding p, dilation d)
/// lands on input position i, or -1 when there is none: col2im's gather, one input element at
/// a time (the device's).
PRECIS_HOST_DEVICE inline index_t tap_source(index_t i, index_t t, index_t s, index_t p, index_t d, index_t out) {
  const index_t at = i + p - t * d;  // o * s
  return at < 0 || at % s != 0 || at / s >= out ? -1 : at / s;
}

/// The output positions [lo, hi] (lo > hi: none) whose windows of k taps (stride s, padding p,
/// dilation 1) cover input position i: pooling's backward, one input element at a time (the
/// device's).
struct span {
  index_t lo, hi;
};
PRECIS_HOST_DEVICE inline span covering(index_t i, index_t k, index_t s, index_t p, index_t out) {
  const index_t first = i + p - k + 1;  // the smallest o s whose window reaches i
  const index_t lo = first <= 0 ? 0 : (first + s - 1) / s;
  const index_t last = (i + p) / s;  // i + p >= 0
  return {lo, last < out ? last : out - 1};
}

/// Geometry of one conv2d or pooling call.
struct geometry {
  index_t n, c, h, w, kh, kw, ho, wo;
  pair stride, pad, dil;
  index_t plane() const { return ho * wo; }
};

/// The output positions [lo, hi) of a sweep of `out` windows whose kernel tap sits at input
/// position o * stride + off: those that land inside [0, in).
inline pair inside(index_t out, index_t in, index_t stride, index_t off) {
  const index_t lo = std::min(out, off >= 0 ? index_t{0} : (-off + stride - 1) / stride);
  const index_t hi = std::max(lo, std::min(out, in - 1 - off < 0 ? index_t{0} : (in - 1 - off) / stride + 1));
  return {lo, hi};
}

/// col [c * kh * kw, count * ho * wo] of images first..first+count of x [N, C, H, W] (channels
/// c0..c0+c): the receptive field of every output position, zero where it covers padding.
template <class L, class S>
void im2col(const geometry& g, const S* x, index_t c0, index_t cs, index_t first, index_t count, L* col) {
  const index_t p = g.plane(), cols = count * p, k = cs * g.kh * g.kw;
  const L zero = detail::store<L>(default_compute_t<L>(0));
  // a unit-stride "same" sweep (wo == w) of a plane already in L: consecutive output rows read
  // consecutive input rows, so a tap's valid rows are one contiguous copy, after which the
  // columns that fell outside the plane (read from a neighbouring row) are zeroed
  const bool contiguous = std::is_same_v<L, S> && g.stride[0] == 1 && g.stride[1] == 1 && g.wo == g.w;
  // rows (c, i, j) are independent: split them over threads
  detail::parallel_ranges(k, detail::threads_for(k * cols, index_t{1} << 15), [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      const index_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
      L* row = col + r * cols;
      // output rows [oa, ob) and columns [lo, hi) read inside the plane
      const auto [oa, ob] = inside(g.ho, g.h, g.stride[0], i * g.dil[0] - g.pad[0]);
      const index_t off = j * g.dil[1] - g.pad[1], s1 = g.stride[1];
      const auto [lo, hi] = inside(g.wo, g.w, s1, off);
      for (index_t b = 0; b < count; ++b) {
        const S* plane = x + ((first + b) * g.c + c0 + c) * g.h * g.w;
        L* out = row + b * p;
        std::fill(out, out + oa * g.wo, zero);
        std::fill(out + ob * g.wo, out + p, zero);
        if (contiguous && hi > lo) {
          const index_t from = oa * g.wo + lo, to = (ob - 1) * g.wo + hi;
          if (ob > oa) std::copy_n(plane + (oa - g.pad[0] + i * g.dil[0]) * g.w + off + lo, to - from, out + from);
          for (index_t oh = oa; oh < ob; ++oh) {
            std::fill(out + oh * g.wo, out + oh * g.wo + lo, zero);
            std::fill(out + oh * g.wo + hi, out + (oh + 1) * g.wo, zero);
          }
          continue;
        }
        for (index_t oh = oa; oh < ob; ++oh) {
          const index_t ih = oh * g.stride[0] - g.pad[0] + i * g.dil[0];
          L* o = out + oh * g.wo;
          std::fill(o, o + lo, zero);
          const S* src = plane + ih * g.w + lo * s1 + off;  // input column of output column lo
          if (s1 == 1) {
            for (index_t t = 0; t < hi - lo; ++t) o[lo + t] = L(src[t]);
          } else {
            for (index_t t = 0; t < hi - lo; ++t) o[lo + t] = L(src[t * s1]);
          }
          std::fill(o + hi, o + g.wo, zero);
        }
      }
    }
  });
}

/// The transpose of im2col: dx [N, C, H, W] (Acc) += the column gradients dcol.
template <class Acc>
void col2im(const geometry& g, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count, Acc* dx) {
  const index_t p = g.plane(), cols = count * p;
  // channels write disjoint planes: split them over threads
  detail::parallel_ranges(cs, detail::threads_for(cs * g.kh * g.kw * cols, index_t{1} << 15), [&](index_t ca, index_t cb) {
  for (index_t c = ca; c < cb; ++c)
    for (index_t i = 0; i < g.kh; ++i)
      for (index_t j = 0; j < g.kw; ++j) {
        const Acc* row = dcol + ((c * g.kh + i) * g.kw + j) * cols;
        // only the output positions whose tap lies inside the plane (the rest covered padding)
        const auto [oa, ob] = inside(g.ho, g.h, g.stride[0], i * g.dil[0] - g.pad[0]);
        const index_t off = j * g.dil[1] - g.pad[1], s1 = g.stride[1];
        const auto [lo, hi] = inside(g.wo, g.w, s1, off);
        for (index_t b = 0; b < count; ++b) {
          Acc* plane = dx + ((first + b) * g.c + c0 + c) * g.h * g.w;
          for (index_t oh = oa; oh < ob; ++oh) {
            const index_t ih = oh * g.stride[0] - g.pad[0] + i * g.dil[0];
            const Acc* in = row + b * p + oh * g.wo + lo;
            Acc* dst = plane + ih * g.w + lo * s1 + off;  // input column of output column lo
            if (s1 == 1) {
              for (index_t t = 0; t < hi - lo; ++t) dst[t] += in[t];
            } else {
              for (index_t t = 0; t < hi - lo; ++t) dst[t * s1] += in[t];
            }
          }
        }
      }
  });
}

/// Formats whose values the weight-gradient kernel below widens to fp32 exactly.
template <class S>
inline constexpr bool widens_to_f32 = std::is_same_v<S, float> || std::is_same_v<S, bfloat16> || std::is_same_v<S, half>;

/// The fp32 partial sums of one entry of the weight gradient, added in a fixed pairwise order.
inline float lane_sum(const float* v) { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); }

/// The AVX-512 tiles' shape (declared on every target: weight_grad_part_size sizes the scratch
/// for them): rows of g and pairs of rows of col per tile. Their 24 accumulators
/// each hold two entries' eight lanes ([g_i col_j | g_i col_j+1]); per eight positions the tile
/// loads g's 8 rows as broadcasts (no shuffle) and col's 3 pairs with one shuffle each, for 24
/// FMAs. (A first version paired two col rows against one g row joined to itself in 8
/// accumulators: 8 loads and 6 shuffles for 8 FMAs, bound by the shuffles.)
inline constexpr index_t wg512_rows = 8, wg512_pairs = 3;

#if PRECIS_X86_SIMD
/// Eight values of S (float, bfloat16 or half) at p, widened to fp32 (exact).
template <class S>
PRECIS_TARGET_AVX2 inline __m256 load8_f32(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<S, bfloat16>) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

/// Where row t of the weight gradient's second operand starts: t crs values in, or roff[t]
/// where the rows are not evenly spaced (the taps of padded planes: weight_grad_taps).
inline index_t wg_row(const index_t* roff, index_t crs, index_t t) { return roff != nullptr ? roff[t] : t * crs; }

/// Tiles [t0, t1) of the weight gradient's partial sums: for rows o < og of g and t < k of col,
/// the eight fp32 lanes of the sum over images b < count and positions q < len (a multiple of 8)
/// of g[b * gs + o * grs + q] * col[wg_row(roff, crs, t) + b * cis + q], lane q % 8, added to
/// part (9 x 8 floats a tile; each image's sums pass through it). Tiles are 3 rows of g x 3 rows
/// of col, col's blocks outermost (a tile's col rows stay in L1 across g's blocks); rows past og
/// or k repeat the last one and their sums are not used.
template <class GQ, class L>
PRECIS_TARGET_AVX2 void weight_grad_tiles(const GQ* g, index_t gs, index_t grs, index_t og, const L* col, index_t crs,
                                          const index_t* roff, index_t cis, index_t k, index_t count, index_t len, float* part,
                                          index_t t0, index_t t1) {
  const index_t ob_n = (og + 2) / 3;
  for (index_t b = 0; b < count; ++b) {
    for (index_t tile = t0; tile < t1; ++tile) {
      const index_t tb = tile / ob_n, ob = tile % ob_n;
      const GQ* g0 = g + b * gs + std::min(3 * ob, og - 1) * grs;
      const GQ* g1 = g + b * gs + std::min(3 * ob + 1, og - 1) * grs;
      const GQ* g2 = g + b * gs + std::min(3 * ob + 2, og - 1) * grs;
      const L* c0 = col + wg_row(roff, crs, std::min(3 * tb, k - 1)) + b * cis;
      const L* c1 = col + wg_row(roff, crs, std::min(3 * tb + 1, k - 1)) + b * cis;
      const L* c2 = col + wg_row(roff, crs, std::min(3 * tb + 2, k - 1)) + b * cis;
      float* pt = part + tile * 72;
      __m256 a00 = _mm256_loadu_ps(pt), a01 = _mm256_loadu_ps(pt + 8), a02 = _mm256_loadu_ps(pt + 16);
      __m256 a10 = _mm256_loadu_ps(pt + 24), a11 = _mm256_loadu_ps(pt + 32), a12 = _mm256_loadu_ps(pt + 40);
      __m256 a20 = _mm256_loadu_ps(pt + 48), a21 = _mm256_loadu_ps(pt + 56), a22 = _mm256_loadu_ps(pt + 64);
      for (index_t q = 0; q < len; q += 8) {
        const __m256 x0 = load8_f32(g0 + q), x1 = load8_f32(g1 + q), x2 = load8_f32(g2 + q);
        __m256 y = load8_f32(c0 + q);
        a00 = _mm256_fmadd_ps(x0, y, a00);
        a10 = _mm256_fmadd_ps(x1, y, a10);
        a20 = _mm256_fmadd_ps(x2, y, a20);
        y = load8_f32(c1 + q);
        a01 = _mm256_fmadd_ps(x0, y, a01);
        a11 = _mm256_fmadd_ps(x1, y, a11);
        a21 = _mm256_fmadd_ps(x2, y, a21);
        y = load8_f32(c2 + q);
        a02 = _mm256_fmadd_ps(x0, y, a02);
        a12 = _mm256_fmadd_ps(x1, y, a12);
        a22 = _mm256_fmadd_ps(x2, y, a22);
      }
      _mm256_storeu_ps(pt, a00), _mm256_storeu_ps(pt + 8, a01), _mm256_storeu_ps(pt + 16, a02);
      _mm256_storeu_ps(pt + 24, a10), _mm256_storeu_ps(pt + 32, a11), _mm256_storeu_ps(pt + 40, a12);
      _mm256_storeu_ps(pt + 48, a20), _mm256_storeu_ps(pt + 56, a21), _mm256_storeu_ps(pt + 64, a22);
    }
  }
}

/// [a | b]: two 8-lane vectors in one 16-lane one. (The zero-masked insert with every lane
/// kept: GCC 12's plain _mm512_insertf64x4, and _mm512_zextps256_ps512 built on it, pass an
/// undefined vector that -O2 then warns "may be used uninitialized"; the instruction is the same.)
PRECIS_TARGET_AVX512 inline __m512 join8(__m256 a, __m256 b) {
  return _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xFF, _mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
}

/// Eight values of S at p in both halves of a 512-bit vector, widened to fp32 (exact): a
/// broadcast load and, for the 16-bit formats, one conversion; no shuffle.
template <class S>
PRECIS_TARGET_AVX512 inline __m512 load8_twice_f32(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm512_castpd_ps(_mm512_maskz_broadcast_f64x4(0xFF, _mm256_castps_pd(_mm256_loadu_ps(p))));
  } else {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return detail::avx512_narrow<S>::widen(v);
  }
}

/// Eight values of S at a and eight at b side by side ([a | b]), widened to fp32 (exact): one
/// shuffle, and for the 16-bit formats one conversion of both.
template <class S>
PRECIS_TARGET_AVX512 inline __m512 load8_pair_f32(const S* a, const S* b) {
  if constexpr (std::is_same_v<S, float>) {
    return join8(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
  } else {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    return detail::avx512_narrow<S>::widen(_mm256_inserti128_si256(_mm256_broadcastsi128_si256(lo), hi, 1));
  }
}


/// weight_grad_tiles with AVX-512: tiles of wg512_rows rows of g x 2 wg512_pairs rows of col (48
/// entries of 8 floats of part a tile, entry (i, j) at (i * 2 wg512_pairs + j) * 8). Every lane
/// adds the same products in the same order as the AVX2 tiles: the same bits.
template <class GQ, class L>
PRECIS_TARGET_AVX512 void weight_grad_tiles_avx512(const GQ* g, index_t gs, index_t grs, index_t og, const L* col, index_t crs,
                                                   const index_t* roff, index_t cis, index_t k, index_t count, index_t len,
                                                   float* part, index_t t0, index_t t1) {
  constexpr index_t R = wg512_rows, T = wg512_pairs;
  const index_t ob_n = (og + R - 1) / R;
  for (index_t b = 0; b < count; ++b) {
    for (index_t tile = t0; tile < t1; ++tile) {
      const index_t tb = tile / ob_n, ob = tile % ob_n;
      const GQ* gr[R];
      const L* cr[2 * T];
      PRECIS_UNROLL(8)
      for (index_t i = 0; i < R; ++i) gr[i] = g + b * gs + std::min(R * ob + i, og - 1) * grs;
      PRECIS_UNROLL(8)
      for (index_t j = 0; j < 2 * T; ++j) cr[j] = col + wg_row(roff, crs, std::min(2 * T * tb + j, k - 1)) + b * cis;
      float* pt = part + tile * (R * 2 * T * 8);
      __m512 acc[R][T];
      PRECIS_UNROLL(8)
      for (index_t i = 0; i < R; ++i) {
        PRECIS_UNROLL(4)
        for (index_t j = 0; j < T; ++j) acc[i][j] = _mm512_loadu_ps(pt + (i * T + j) * 16);
      }
      for (index_t q = 0; q < len; q += 8) {
        __m512 y[T];
        PRECIS_UNROLL(4)
        for (index_t j = 0; j < T; ++j) y[j] = load8_pair_f32(cr[2 * j] + q, cr[2 * j + 1] + q);
        PRECIS_UNROLL(8)
        for (index_t i = 0; i < R; ++i) {
          const __m512 x = load8_twice_f32(gr[i] + q);
          PRECIS_UNROLL(4)
          for (index_t j = 0; j < T; ++j) acc[i][j] = _mm512_fmadd_ps(x, y[j], acc[i][j]);
        }
      }
      PRECIS_UNROLL(8)
      for (index_t i = 0; i < R; ++i) {
        PRECIS_UNROLL(4)
        for (index_t j = 0; j < T; ++j) _mm512_storeu_ps(pt + (i * T + j) * 16, acc[i][j]);
      }
    }
  }
}
#endif

/// Elements of the two scratch buffers weight_grad_direct needs: the tiles' partial sums, and
/// the last p % 8 positions of every image gathered (rows of og + k, padded to whole vectors).
/// (The AVX2 tiles' layout, 3 x 3 entries, or the AVX-512 tiles', 8 x 6: the larger.)
inline index_t weight_grad_part_size(index_t og, index_t k) {
  constexpr index_t r = wg512_rows, c = 2 * wg512_pairs;
  return std::max((og + 2) / 3 * ((k + 2) / 3) * 72, (og + r - 1) / r * ((k + c - 1) / c) * (r * c * 8));
}
inline index_t weight_grad_tail_len(index_t count, index_t p) { return (count * (p % 8) + 7) / 8 * 8; }

/// The weight gradient's tiles over images b < count and their sums added into gw: gw[o * k +
/// t] += alpha * (the eight lanes of weight_grad_tiles' sums, added pairwise, lane_sum), with
/// rows o < og of g (image b's row o at b * gs + o * grs) and t < k of col (wg_row(roff, crs, t)
/// + b * cis), over len positions (a multiple of 8); then, when tail > 0, one more "image" of
/// tail positions from tail_g (rows tail apart) and tail_c. Tiles split over threads; each
/// entry's operations are the same, in the same order, for any thread count.
template <class GQ, class L>
void weight_grad_sums(const GQ* g, index_t gs, index_t grs, index_t og, const L* col, index_t crs, const index_t* roff, index_t cis,
                      index_t k, index_t count, index_t len, const GQ* tail_g, const L* tail_c, index_t tail, float alpha,
                      float* gw, float* part) {
#if PRECIS_X86_SIMD
  // AVX-512 (within PRECIS_GEMM_ISA's cap): tiles of 8 x 6 entries; AVX2: 3 x 3
  const bool wide = gemm_isa_in_use() >= gemm_isa::avx512;
  const index_t rows = wide ? wg512_rows : 3, cols_t = wide ? 2 * wg512_pairs : 3;
  const index_t ob_n = (og + rows - 1) / rows, tiles = ob_n * ((k + cols_t - 1) / cols_t), floats = rows * cols_t * 8;
  // the tiles over one image (or the tails' row): on the operands as they lie where both are
  // fp32; else on fp32 copies of the image's og rows of g and k rows of col, widened once (each
  // value is read by og / 8 or k / 6 tiles, and widening it in every tile, two instructions a
  // vector, cost the 16-bit tiles more than their FMAs: docs/benchmarks.md). Widening is exact
  // and the tiles add the same products in the same order: the same bits either way.
  detail::parallel_ranges(tiles, detail::threads_for(og * k * count * len, index_t{1} << 16), [&](index_t t0, index_t t1) {
    std::fill(part + t0 * floats, part + t1 * floats, 0.0f);
    if constexpr (std::is_same_v<GQ, float> && std::is_same_v<L, float>) {
      if (wide) {
        weight_grad_tiles_avx512(g, gs, grs, og, col, crs, roff, cis, k, count, len, part, t0, t1);
        if (tail > 0) weight_grad_tiles_avx512(tail_g, 0, tail, og, tail_c, tail, nullptr, 0, k, 1, tail, part, t0, t1);
      } else {
        weight_grad_tiles(g, gs, grs, og, col, crs, roff, cis, k, count, len, part, t0, t1);
        if (tail > 0) weight_grad_tiles(tail_g, 0, tail, og, tail_c, tail, nullptr, 0, k, 1, tail, part, t0, t1);
      }
    } else {
      const index_t n = std::max(len, tail);
      // col's rows given by offsets (taps into padded planes) overlap: the span they cover is
      // widened once an image, and the rows found in it at the same offsets less its start
      index_t lo = 0, hi = k * n;
      if (roff != nullptr) {
        lo = *std::min_element(roff, roff + k);
        hi = *std::max_element(roff, roff + k) + len;
      }
      float* const gf = detail::scratch<float, 7>(static_cast<std::size_t>(og * n + std::max(hi - lo, k * n)));
      float* const cf = gf + og * n;
      index_t* const ro = roff != nullptr ? detail::scratch<index_t, 8>(static_cast<std::size_t>(k)) : nullptr;
      for (index_t t = 0; ro != nullptr && t < k; ++t) ro[t] = roff[t] - lo;
      // the tiles over one image's widened rows of n positions (col's at ro, or n apart)
      const auto image = [&](index_t n_pos, const index_t* rows_at, index_t t0_, index_t t1_) {
        if (wide) weight_grad_tiles_avx512(gf, 0, n_pos, og, cf, n_pos, rows_at, 0, k, 1, n_pos, part, t0_, t1_);
        else weight_grad_tiles(gf, 0, n_pos, og, cf, n_pos, rows_at, 0, k, 1, n_pos, part, t0_, t1_);
      };
      // lines runs of m values, stride apart from x (one run where they are adjacent), into dst
      const auto widen = [](const auto* x, index_t stride, index_t lines, index_t m, float* dst) {
        if (stride == m) {  // adjacent runs: one conversion
          m *= lines;
          lines = 1;
        }
        for (index_t r = 0; r < lines; ++r) {
          const float* v = detail::load_run<float>(x + r * stride, m, 1, dst + r * m);
          if (v != dst + r * m) std::copy_n(v, m, dst + r * m);
        }
      };
      for (index_t b = 0; b < count; ++b) {
        widen(g + b * gs, grs, og, len, gf);
        if (roff != nullptr) {
          widen(col + lo + b * cis, hi - lo, 1, hi - lo, cf);
          image(len, ro, t0, t1);
        } else {
          widen(col + b * cis, crs, k, len, cf);
          image(len, nullptr, t0, t1);
        }
      }
      if (tail > 0) {
        widen(tail_g, tail, og, tail, gf);
        widen(tail_c, tail, k, tail, cf);
        image(tail, nullptr, t0, t1);
      }
    }
    for (index_t tile = t0; tile < t1; ++tile) {
      const index_t tb = tile / ob_n, ob = tile % ob_n;
      for (index_t i = 0; i < rows && rows * ob + i < og; ++i)
        for (index_t j = 0; j < cols_t && cols_t * tb + j < k; ++j)
          gw[(rows * ob + i) * k + cols_t * tb + j] += alpha * lane_sum(part + tile * floats + (cols_t * i + j) * 8);
    }
  });
#else
  (void)g, (void)gs, (void)grs, (void)og, (void)col, (void)crs, (void)roff, (void)cis, (void)k, (void)count, (void)len, (void)tail_g,
      (void)tail_c, (void)tail, (void)alpha, (void)gw, (void)part;
#endif
}

/// conv2d's weight gradient without a GEMM: gw[o * k + t] += alpha * sum over images b < count
/// and positions q < p of g[b * gs + o * p + q] * col[t * count * p + b * p + q], where g is the
/// output gradient as it lies ([images, channels, p], image stride gs: no reorganised copy) and
/// col the columns [k, count * p]. The long sums are what a GEMM would pack both operands for
/// (each packed value used og or k times only); here both are read in place, eight fp32 lanes
/// per entry (every product of float, bfloat16 or half values exact), image after image, then
/// every image's last p % 8 positions gathered into one more row (zero-padded), and the lanes
/// added pairwise at the end: the same operations in the same order for any thread count.
/// `part` holds weight_grad_part_size floats, tail_g og and tail_c k rows of
/// weight_grad_tail_len values. Needs weight_grad_direct_available().
template <class GQ, class L>
void weight_grad_direct(const GQ* g, index_t gs, index_t og, const L* col, index_t k, index_t count, index_t p, float alpha,
                        float* gw, float* part, GQ* tail_g, L* tail_c) {
  const index_t cols = count * p, full = p / 8 * 8, rem = p - full;
  const index_t tail = rem > 0 ? weight_grad_tail_len(count, p) : 0;
  if (rem > 0) {  // the tails, image after image, then zeros to a whole vector
    for (index_t o = 0; o < og; ++o) {
      GQ* d = tail_g + o * tail;
      for (index_t b = 0; b < count; ++b) std::copy_n(g + b * gs + o * p + full, rem, d + b * rem);
      std::fill(d + count * rem, d + tail, static_cast<GQ>(0.0f));
    }
    for (index_t t = 0; t < k; ++t) {
      L* d = tail_c + t * tail;
      for (index_t b = 0; b < count; ++b) std::copy_n(col + t * cols + b * p + full, rem, d + b * rem);
      std::fill(d + count * rem, d + tail, static_cast<L>(0.0f));
    }
  }
  weight_grad_sums(g, gs, p, og, col, cols, nullptr, p, k, count, full, tail_g, tail_c, tail, alpha, gw, part);
}

/// Whether this CPU runs weight_grad_direct (AVX2 and FMA, within PRECIS_ISA's cap).
inline bool weight_grad_direct_available() {
#if PRECIS_X86_SIMD
  return detail::cpu_has_avx2_fma();
#else
  return false;
#endif
}

/// Images per im2col batch: the column buffer holds at most 2^19 elements (2 MiB of fp32), so
/// that one batch's columns, their GEMMs' packed copies and the backward's column gradients
/// stay in cache between the loops that write and read them, instead of streaming through
/// memory (the demo CNN's whole batch of 128 images was 14 MiB of columns; its step took 1.2x
/// as long: docs/benchmarks.md). The weight gradient sums over the batches in order (its GEMMs
/// accumulate into it), so the batch size is part of its summation order: it depends on the
/// shapes only, never on the machine or the thread count.
/// A backend's context may choose another budget (op::cuda's is larger: a GPU's GEMMs want many
/// columns, and its caches are not what the batch is sized for).
inline constexpr index_t column_batch_elements = index_t{1} << 19;

inline index_t images_per_batch(index_t n, index_t k, index_t plane, index_t budget = column_batch_elements) {
  const index_t per = std::max<index_t>(1, k * plane);
  return std::max<index_t>(1, std::min<index_t>(n, budget / per));
}

// ---- conv2d's backward on padded planes --------------------------------------------------------
//
// With many taps (k = C / groups * kh * kw: conv2's 144 in the demo CNN) the columns are k times
// the input: the weight gradient's im2col wrote and read 14 MiB a batch of 128 images there, and
// the data gradient's col2im scattered as much back, row by row, each row bounded by the edges.
// For a unit-stride convolution every tap is a plain offset into zero-padded planes instead,
// once the output gradient lies on the padded rows too: tap (i, j) of output position oh row +
// ow reads the padded input `offset(i, j)` further on. So the weight gradient's tiles read the
// padded input planes (c kh kw rows per channel, all pointing into one plane) and the padded
// output gradient in place, and the data gradient's GEMM writes its columns on the padded
// positions, each tap's row added into the padded plane at its offset in one contiguous run.

/// The zero-padded planes of conv2d's padded backward: rows of `row` = W + 2 pad[1] values, the
/// input at row pad[0], column pad[1]; the output gradient on the same rows (zeros at ow >= wo
/// and past the last output row), `len` positions an image (ho row rounded up to whole vectors
/// of 8); each input plane holds `plane` values, so that every tap's run of len values lies in it.
struct padded_layout {
  index_t row, len, plane;
  explicit padded_layout(const geometry& g)
      : row(g.w + 2 * g.pad[1]),
        len((g.ho * row + 7) / 8 * 8),
        plane((len + (g.kh - 1) * g.dil[0] * row + (g.kw - 1) * g.dil[1] + 7) / 8 * 8) {}
  index_t offset(const geometry& g, index_t i, index_t j) const { return i * g.dil[0] * row + j * g.dil[1]; }
};

/// Whether conv2d's backward takes the padded planes: unit strides, and the columns larger than
/// the padded copies of the input and the output gradient (per image and group: k p values
/// against og len + cg plane). conv1 of the demo CNN (one channel, 9 taps) keeps its columns;
/// conv2 (16 channels, 144 taps) pads.
inline bool padded_backward_applies(const geometry& g, index_t groups, index_t oc_all) {
  if (g.stride[0] != 1 || g.stride[1] != 1 || g.ho < 1 || g.wo < 1) return false;
  const padded_layout d(g);
  const index_t cg = g.c / groups, og = oc_all / groups, k = cg * g.kh * g.kw;
  return k * g.plane() > og * d.len + cg * d.plane;
}

/// Images per batch of the padded backward: the data gradient's columns on the padded
/// positions (k len values an image) within 2^17 values (512 KiB of fp32), so that the GEMM's
/// output is still in a core's L2 when col2im_padded adds it back (the demo CNN's conv2: 4
/// images; with the columns' batches of 18 its fwd + bwd took about a tenth longer here:
/// docs/benchmarks.md). The weight gradient's sums follow the same batches: the batch size
/// depends on the shapes only.
inline index_t padded_images_per_batch(const geometry& g, const padded_layout& d, index_t k) {
  return images_per_batch(g.n, k, d.len, index_t{1} << 17);
}

/// xp [count, cs, plane] = channels c0..c0+cs of images first..first+count of x [N, C, H, W], each
/// on its zero-padded plane.
template <class L>
void pad_planes(const geometry& g, const padded_layout& d, const L* x, index_t c0, index_t cs, index_t first, index_t count, L* xp) {
  const L zero = static_cast<L>(0.0f);
  const index_t hw = g.h * g.w;
  detail::parallel_ranges(count * cs, detail::threads_for(count * cs * d.plane, index_t{1} << 15), [&](index_t a, index_t b) {
    for (index_t pl = a; pl < b; ++pl) {  // image pl / cs, channel pl % cs
      L* dst = xp + pl * d.plane;
      const L* src = x + ((first + pl / cs) * g.c + c0 + pl % cs) * hw;
      std::fill(dst, dst + g.pad[0] * d.row, zero);
      for (index_t r = 0; r < g.h; ++r) {
        L* rw = dst + (g.pad[0] + r) * d.row;
        std::fill(rw, rw + g.pad[1], zero);
        std::copy_n(src + r * g.w, g.w, rw + g.pad[1]);
        std::fill(rw + g.pad[1] + g.w, rw + d.row, zero);
      }
      std::fill(dst + (g.pad[0] + g.h) * d.row, dst + d.plane, zero);
    }
  });
}

/// gp [og, count, len] = channels oc0..oc0+og of images first..first+count of the output
/// gradient gq [N, oc_all, Ho, Wo] on the padded rows (zeros past each row's wo outputs and past
/// the last row).
template <class GQ>
void pad_output_grads(const geometry& g, const padded_layout& d, const GQ* gq, index_t oc0, index_t og, index_t oc_all, index_t first,
                      index_t count, GQ* gp) {
  const GQ zero = static_cast<GQ>(0.0f);
  const index_t p = g.plane();
  detail::parallel_ranges(og * count, detail::threads_for(og * count * d.len, index_t{1} << 15), [&](index_t a, index_t b) {
    for (index_t r = a; r < b; ++r) {  // channel r / count, image r % count
      GQ* dst = gp + r * d.len;
      const GQ* src = gq + ((first + r % count) * oc_all + oc0 + r / count) * p;
      for (index_t oh = 0; oh < g.ho; ++oh) {
        std::copy_n(src + oh * g.wo, g.wo, dst + oh * d.row);
        std::fill(dst + oh * d.row + g.wo, dst + (oh + 1) * d.row, zero);
      }
      std::fill(dst + g.ho * d.row, dst + d.len, zero);
    }
  });
}

/// The weight gradient from padded planes: gw [og, cg kh kw] (fp32) += alpha * the sums over
/// count images and len positions of gp [og, count, len] (pad_output_grads) times xp [count, cg,
/// plane] (pad_planes) under each tap, by weight_grad_sums (eight fp32 lanes, images in order,
/// lanes added pairwise). The positions past each output row and past the last (gp's zeros)
/// multiply values of the padded input: where the input holds an infinity or a NaN, its
/// channel's weight gradients are NaN for every tap, not only for the taps whose windows reach
/// it. roff: k offsets of scratch; part: weight_grad_part_size floats. Needs
/// weight_grad_direct_available().
template <class GQ, class L>
void weight_grad_taps(const geometry& g, const padded_layout& d, const GQ* gp, index_t og, const L* xp, index_t cg, index_t count,
                      float alpha, float* gw, float* part, index_t* roff) {
  const index_t k = cg * g.kh * g.kw;
  for (index_t c = 0, t = 0; c < cg; ++c)
    for (index_t i = 0; i < g.kh; ++i)
      for (index_t j = 0; j < g.kw; ++j, ++t) roff[t] = c * d.plane + d.offset(g, i, j);
  weight_grad_sums(gp, d.len, count * d.len, og, xp, 0, roff, cg * d.plane, k, count, d.len, static_cast<const GQ*>(nullptr),
                   static_cast<const L*>(nullptr), 0, alpha, gw, part);
}

/// col2im on padded positions: dx [N, C, H, W] (Acc) += the column gradients dcol [cs kh kw, count
/// len] (rows in (c, i, j) order, each image's len padded positions) of channels c0..c0+cs of
/// images first..first+count. Each plane is summed on its padded plane in dxp (count cs plane
/// values of scratch), tap after tap in (i, j) order, each tap one contiguous run at its offset,
/// and its inside added into dx once: the additions col2im makes, in its order, plus the
/// positions past the rows, whose column gradients are those of zero output gradients (+-0 when
/// the weights are finite; they change no sum).
template <class Acc>
void col2im_padded(const geometry& g, const padded_layout& d, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count,
                   Acc* dxp, Acc* dx) {
  const index_t cols = count * d.len, hw = g.h * g.w;
  detail::parallel_ranges(count * cs, detail::threads_for(count * cs * g.kh * g.kw * d.len, index_t{1} << 15), [&](index_t a, index_t b) {
    for (index_t pl = a; pl < b; ++pl) {  // image pl / cs, channel pl % cs
      const index_t im = pl / cs, c = pl % cs;
      Acc* acc = dxp + pl * d.plane;
      std::fill(acc, acc + d.plane, Acc(0));
      for (index_t i = 0; i < g.kh; ++i)
        for (index_t j = 0; j < g.kw; ++j) {
          const Acc* src = dcol + ((c * g.kh + i) * g.kw + j) * cols + im * d.len;
          Acc* dst = acc + d.offset(g, i, j);
          PRECIS_IVDEP for (index_t q = 0; q < d.len; ++q) dst[q] += src[q];
        }
      Acc* out = dx + ((first + im) * g.c + c0 + c) * hw;
      for (index_t r = 0; r < g.h; ++r) {
        const Acc* in = acc + (g.pad[0] + r) * d.row + g.pad[1];
        PRECIS_IVDEP for (index_t q = 0; q < g.w; ++q) out[r * g.w + q] += in[q];
      }
    }
  });
}

// ---- conv2d's forward without columns ---------------------------------------------------------
//
// With few taps per output (k = C / groups * kh * kw: conv1's 9 in the demo CNN), the GEMM over
// im2col's columns is mostly overhead: the columns are k times the input, the GEMM packs them
// once more, and its [O, N Ho Wo] result is moved into [N, O, Ho, Wo] by one more pass. The
// direct kernel below reads each image's planes (widened to fp32 and zero-padded once, so that
// every tap is a plain vector load) and writes the output in place, with the arithmetic of the
// GEMM path: per output, the chain of fp32 FMAs over the taps in k order from +0 (the GEMM's
// when k fits one K block, so the bits are the same: docs/tensors.md writes the GEMM's chains
// out), times alpha, plus the bias, rounded once.

/// Vector operations of the direct kernel, 8 fp32 lanes (AVX2 + FMA). Vectors pass by pointer
/// only: direct_image, which calls these, is compiled for no instruction set of its own (it is
/// inlined into the target-specific direct_image_avx2 and _avx512).
struct direct_avx2 {
#if PRECIS_X86_SIMD
  using V = __m256;
  static constexpr index_t lanes = 8;
  template <std::size_t... I>
  PRECIS_TARGET_AVX2 static void zero(V* acc, std::index_sequence<I...>) {
    ((acc[I] = _mm256_setzero_ps()), ...);
  }
  template <std::size_t... Q>
  PRECIS_TARGET_AVX2 static void load(V* xv, const float* const* xr, index_t off, std::index_sequence<Q...>) {
    ((xv[Q] = _mm256_loadu_ps(xr[Q] + off)), ...);
  }
  /// acc[o NP + q] = fma(w[o][t], xv[q], acc[o NP + q]) for every o < OB and q < NP.
  template <std::size_t NP, std::size_t... I>
  PRECIS_TARGET_AVX2 static void taps(V* acc, const float* const* wr, index_t t, const V* xv, std::index_sequence<I...>) {
    ((acc[I] = _mm256_fmadd_ps(_mm256_broadcast_ss(wr[I / NP] + t), xv[I % NP], acc[I])), ...);
  }
  /// out[0, n) = alpha v (+ bias), n <= 8.
  PRECIS_TARGET_AVX2 static void store(float* out, V v, float alpha, const float* bias, index_t n) {
    V r = _mm256_mul_ps(_mm256_set1_ps(alpha), v);
    if (bias != nullptr) r = _mm256_add_ps(r, _mm256_broadcast_ss(bias));
    if (n == lanes) {
      _mm256_storeu_ps(out, r);
      return;
    }
    // n < 8 in pieces of 4, 2 and 1 (vmaskmovps stores are slow on AMD's cores, and a copy
    // through a buffer on the stack was a call to memcpy per row of outputs)
    __m128 part = _mm256_castps256_ps128(r);
    if (n >= 4) {
      _mm_storeu_ps(out, part);
      part = _mm256_extractf128_ps(r, 1);
      out += 4;
      n -= 4;
    }
    if (n >= 2) {
      _mm_storel_pi(reinterpret_cast<__m64*>(out), part);
      part = _mm_movehl_ps(part, part);
      out += 2;
      n -= 2;
    }
    if (n == 1) _mm_store_ss(out, part);
  }
  /// store(out[I], acc[I], alpha, bias[I / NP], n[I % NP]) for every I whose out is not null.
  template <std::size_t NP, std::size_t... I>
  PRECIS_TARGET_AVX2 static void store_tile(float* const* out, const V* acc, float alpha, const float* const* bias,
                                            const index_t* n, std::index_sequence<I...>) {
    ((out[I] != nullptr ? store(out[I], acc[I], alpha, bias[I / NP], n[I % NP]) : void()), ...);
  }
#endif
};

/// Vector operations of the direct kernel, 16 fp32 lanes (AVX-512F).
struct direct_avx512 {
#if PRECIS_X86_SIMD
  using V = __m512;
  static constexpr index_t lanes = 16;
  template <std::size_t... I>
  PRECIS_TARGET_AVX512 static void zero(V* acc, std::index_sequence<I...>) {
    ((acc[I] = _mm512_setzero_ps()), ...);
  }
  template <std::size_t... Q>
  PRECIS_TARGET_AVX512 static void load(V* xv, const float* const* xr, index_t off, std::index_sequence<Q...>) {
    ((xv[Q] = _mm512_loadu_ps(xr[Q] + off)), ...);
  }
  template <std::size_t NP, std::size_t... I>
  PRECIS_TARGET_AVX512 static void taps(V* acc, const float* const* wr, index_t t, const V* xv, std::index_sequence<I...>) {
    ((acc[I] = _mm512_fmadd_ps(_mm512_set1_ps(wr[I / NP][t]), xv[I % NP], acc[I])), ...);
  }
  PRECIS_TARGET_AVX512 static void store(float* out, V v, float alpha, const float* bias, index_t n) {
    V r = _mm512_mul_ps(_mm512_set1_ps(alpha), v);
    if (bias != nullptr) r = _mm512_add_ps(r, _mm512_set1_ps(*bias));
    _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u), r);
  }
  template <std::size_t NP, std::size_t... I>
  PRECIS_TARGET_AVX512 static void store_tile(float* const* out, const V* acc, float alpha, const float* const* bias,
                                              const index_t* n, std::index_sequence<I...>) {
    ((out[I] != nullptr ? store(out[I], acc[I], alpha, bias[I / NP], n[I % NP]) : void()), ...);
  }
#endif
};

/// The most taps per output (C / groups * kh * kw) for which conv2d's forward takes the direct
/// kernel: the fp32 GEMM's K block (256), so that the direct kernel's chain is always the one the
/// GEMM would compute (longer K is cut into blocks added one after the other). At the demo CNN's
/// 9 and 144 taps the direct kernel is the faster (docs/benchmarks.md).
inline constexpr index_t direct_max_taps = detail::blocking_for<float>(true).kc;

/// The padded fp32 planes the direct kernel reads: hp rows of wp values per channel, the input's
/// plane at row pad[0], column pad[1], zeros around it; wp leaves room for every tap's whole
/// vector of the last output column block.
struct direct_layout {
  index_t lanes, hp, wp, vecs;
  direct_layout(const geometry& g, index_t lanes_) : lanes(lanes_) {
    vecs = (g.wo + lanes - 1) / lanes;
    hp = g.h + 2 * g.pad[0];
    wp = std::max(g.w + 2 * g.pad[1], vecs * lanes + (g.kw - 1) * g.dil[1]);
  }
  index_t plane() const { return hp * wp; }
};

#if PRECIS_X86_SIMD
/// One image and group of conv2d's output, out [og, ho wo] (rows p apart) = alpha (the chain of
/// fp32 FMAs over the k = cg kh kw taps, in k order, from +0) + bias[o]: xp holds the group's
/// padded planes [cg, hp, wp], wf its weights [og, k] in fp32, bias its og biases or null. OB
/// output channels by NP output vectors at a time (rows past og and vectors past the last repeat
/// the last one and are not stored). Unit stride along the rows (stride[1] == 1).
template <class W, std::size_t OB, std::size_t NP>
[[gnu::always_inline]] inline void direct_image(const geometry& g, const direct_layout& d, const float* xp, const float* wf,
                                                index_t og, index_t cg, float alpha, const float* bias, float* out) {
  using V = typename W::V;
  constexpr auto tile = std::make_index_sequence<OB * NP>{};
  constexpr auto row = std::make_index_sequence<NP>{};
  const index_t k = cg * g.kh * g.kw, npos = g.ho * d.vecs, p = g.plane();
  index_t offsets[direct_max_taps];  // tap t's position in the padded planes, relative to its output's
  for (index_t c = 0, t = 0; c < cg; ++c)
    for (index_t i = 0; i < g.kh; ++i)
      for (index_t j = 0; j < g.kw; ++j, ++t) offsets[t] = c * d.plane() + i * g.dil[0] * d.wp + j * g.dil[1];
  for (index_t o0 = 0; o0 < og; o0 += static_cast<index_t>(OB)) {
    const float* wr[OB];
    for (std::size_t o = 0; o < OB; ++o) wr[o] = wf + std::min(o0 + static_cast<index_t>(o), og - 1) * k;
    for (index_t t0 = 0; t0 < npos; t0 += static_cast<index_t>(NP)) {
      index_t oh[NP], ow[NP];
      const float* xr[NP];
      for (std::size_t q = 0; q < NP; ++q) {
        const index_t t = std::min(t0 + static_cast<index_t>(q), npos - 1);
        oh[q] = t / d.vecs;
        ow[q] = t % d.vecs * d.lanes;
        xr[q] = xp + oh[q] * g.stride[0] * d.wp + ow[q];
      }
      V acc[OB * NP], xv[NP];
      W::zero(acc, tile);
      for (index_t t = 0; t < k; ++t) {
        W::load(xv, xr, offsets[t], row);
        W::template taps<NP>(acc, wr, t, xv, tile);
      }
      float* dst[OB * NP];  // null: past og or past the last vector
      const float* bo[OB];
      index_t len[NP];
      for (std::size_t q = 0; q < NP; ++q) len[q] = std::min(d.lanes, g.wo - ow[q]);
      for (std::size_t o = 0; o < OB; ++o) {
        const index_t oc = o0 + static_cast<index_t>(o);
        bo[o] = bias != nullptr && oc < og ? bias + oc : nullptr;
        for (std::size_t q = 0; q < NP; ++q)
          dst[o * NP + q] = oc < og && t0 + static_cast<index_t>(q) < npos ? out + oc * p + oh[q] * g.wo + ow[q] : nullptr;
      }
      W::template store_tile<NP>(dst, acc, alpha, bo, len, tile);
    }
  }
}

PRECIS_TARGET_AVX2 inline void direct_image_avx2(const geometry& g, const direct_layout& d, const float* xp, const float* wf,
                                                 index_t og, index_t cg, float alpha, const float* bias, float* out) {
  direct_image<direct_avx2, 4, 3>(g, d, xp, wf, og, cg, alpha, bias, out);
}
PRECIS_TARGET_AVX512 inline void direct_image_avx512(const geometry& g, const direct_layout& d, const float* xp, const float* wf,
                                                     index_t og, index_t cg, float alpha, const float* bias, float* out) {
  direct_image<direct_avx512, 8, 3>(g, d, xp, wf, og, cg, alpha, bias, out);
}
#endif

/// The lanes of the direct kernel this CPU runs within the GEMM's instruction-set cap
/// (gemm_isa_in_use, so PRECIS_GEMM_ISA applies to both): 16 (AVX-512), 8 (AVX2 + FMA), or 0
/// (conv2d takes the GEMM path).
inline index_t direct_lanes() {
#if PRECIS_X86_SIMD
  const gemm_isa isa = gemm_isa_in_use();
  if (isa >= gemm_isa::avx512) return 16;
  if (isa >= gemm_isa::avx2) return 8;
#endif
  return 0;
}


/// Whether conv2d's forward takes the direct kernel: unit stride along the rows, few taps.
inline bool direct_applies(const geometry& g, index_t groups, index_t lanes) {
  return lanes > 0 && g.stride[1] == 1 && g.c / groups * g.kh * g.kw <= direct_max_taps;
}

/// Images per batch of the direct forward: their padded planes and, where the output is not
/// fp32, their fp32 outputs within column_batch_elements.
inline index_t direct_images_per_batch(const geometry& g, const direct_layout& d, index_t oc_all, bool staged) {
  return images_per_batch(g.n, 1, g.c * d.plane() + (staged ? oc_all * g.plane() : 0));
}

/// conv2d's forward by the direct kernel: y [N, oc_all, Ho, Wo] = x [N, C, H, W] (*) w
/// [oc_all, C / groups, kh, kw] (+ bias), each output alpha times its chain of FMAs plus its bias,
/// rounded once to O. Scratch: xp (nb images' padded planes), wf (oc_all k + oc_all floats), yb
/// (nb oc_all Ho Wo floats; used only when O is not float).
template <class L, class B, class O>
void direct_forward(const geometry& g, const direct_layout& d, index_t groups, index_t oc_all, const L* x, const L* w,
                    const TensorView<const B>& bias, float alpha, O* y, index_t nb, float* xp, float* wf, float* yb) {
#if PRECIS_X86_SIMD
  const index_t cg = g.c / groups, og = oc_all / groups, k = cg * g.kh * g.kw, p = g.plane(), hw = g.h * g.w;
  const auto widen = [](const L* src, index_t n, float* dst) {
    if constexpr (std::is_same_v<L, float>) {
      std::copy_n(src, n, dst);
    } else {
      detail::load_run<float>(src, n, index_t{1}, dst);  // converts into dst
    }
  };
  widen(w, oc_all * k, wf);
  float* bf = bias.data() != nullptr ? wf + oc_all * k : nullptr;
  for (index_t o = 0; bf != nullptr && o < oc_all; ++o) bf[o] = detail::ad::ld<float>(bias(o));
  for (index_t n0 = 0; n0 < g.n; n0 += nb) {
    const index_t count = std::min(nb, g.n - n0), planes = count * g.c;
    detail::parallel_ranges(planes, detail::threads_for(planes * d.plane(), index_t{1} << 15), [&](index_t a, index_t b) {
      for (index_t pl = a; pl < b; ++pl) {
        float* dst = xp + pl * d.plane();
        const L* src = x + (n0 * g.c + pl) * hw;
        std::fill(dst, dst + g.pad[0] * d.wp, 0.0f);
        for (index_t r = 0; r < g.h; ++r) {
          float* row = dst + (g.pad[0] + r) * d.wp;
          std::fill(row, row + g.pad[1], 0.0f);
          widen(src + r * g.w, g.w, row + g.pad[1]);
          std::fill(row + g.pad[1] + g.w, row + d.wp, 0.0f);
        }
        std::fill(dst + (g.pad[0] + g.h) * d.wp, dst + d.plane(), 0.0f);
      }
    });
    const index_t tasks = count * groups;
    detail::parallel_ranges(tasks, detail::threads_for(count * oc_all * k * p, index_t{1} << 15), [&](index_t a, index_t b) {
      for (index_t task = a; task < b; ++task) {
        const index_t im = task / groups, gi = task % groups;
        float* out;
        if constexpr (std::is_same_v<O, float>) {
          out = y + ((n0 + im) * oc_all + gi * og) * p;
        } else {
          out = yb + (im * oc_all + gi * og) * p;
        }
        const float* planes_g = xp + (im * g.c + gi * cg) * d.plane();
        const float* bias_g = bf != nullptr ? bf + gi * og : nullptr;
        if (d.lanes == 16) {
          direct_image_avx512(g, d, planes_g, wf + gi * og * k, og, cg, alpha, bias_g, out);
        } else {
          direct_image_avx2(g, d, planes_g, wf + gi * og * k, og, cg, alpha, bias_g, out);
        }
      }
    });
    if constexpr (!std::is_same_v<O, float>) {  // rounded once, vectorized
      const index_t total = count * oc_all * p;
      detail::parallel_ranges(total, detail::threads_for(total, index_t{1} << 15), [&](index_t a, index_t b) {
        detail::store_run(yb + a, y + n0 * oc_all * p + a, b - a, index_t{1});
      });
    }
  }
#else
  (void)g, (void)d, (void)groups, (void)oc_all, (void)x, (void)w, (void)bias, (void)alpha, (void)y, (void)nb, (void)xp, (void)wf, (void)yb;
#endif
}



#if PRECIS_X86_SIMD
/// One step of max_pool_2x2's selection in every lane: v wins where it is larger than the best
/// so far or a NaN, and its position is first + offset.
PRECIS_TARGET_AVX512 inline void max_pool_consider_avx512(__m512 v, std::int32_t offset, __m512i first, __m512& bv,
                                                          __m512i& best) {
  const __mmask16 all = 0xFFFF;
  const auto take = static_cast<__mmask16>(_mm512_mask_cmp_ps_mask(all, v, bv, _CMP_GT_OQ) |
                                           _mm512_mask_cmp_ps_mask(all, v, v, _CMP_UNORD_Q));
  bv = _mm512_mask_mov_ps(bv, take, v);
  best = _mm512_mask_add_epi32(best, take, first, _mm512_set1_epi32(offset));
}

/// max_pool_2x2's selection for n <= 16 windows side by side (rows r0 and r1, the first window
/// at position c in the plane, rows w apart), in AVX-512 lanes: each lane takes its window's four
/// elements in the scalar loop's order with the same rule, so values and positions are the
/// same bit for bit. Masked loads and stores: nothing past the 2n inputs or n outputs is touched.
PRECIS_TARGET_AVX512 inline void max_pool_2x2_avx512(const float* r0, const float* r1, index_t n, std::int32_t c,
                                                     std::int32_t w, float* out, std::int32_t* at) {
  const __mmask16 all = 0xFFFF;
  const auto mask = [](index_t bits) {
    return static_cast<__mmask16>(bits >= 16 ? 0xFFFFu : (1u << static_cast<unsigned>(bits)) - 1u);
  };
  const __mmask16 lo = mask(2 * n), hi = mask(2 * n - 16 > 0 ? 2 * n - 16 : 0), outs = mask(n);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_maskz_add_epi32(all, even, _mm512_set1_epi32(1));
  const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0), a1 = _mm512_maskz_loadu_ps(hi, r0 + 16);
  const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1), b1 = _mm512_maskz_loadu_ps(hi, r1 + 16);
  // each window's first element and its position: c + 2 lane
  const __m512i first = _mm512_maskz_add_epi32(all, _mm512_set1_epi32(c), even);
  __m512 bv = _mm512_maskz_permutex2var_ps(all, a0, even, a1);
  __m512i best = first;
  max_pool_consider_avx512(_mm512_maskz_permutex2var_ps(all, a0, odd, a1), 1, first, bv, best);
  max_pool_consider_avx512(_mm512_maskz_permutex2var_ps(all, b0, even, b1), w, first, bv, best);
  max_pool_consider_avx512(_mm512_maskz_permutex2var_ps(all, b0, odd, b1), w + 1, first, bv, best);
  _mm512_mask_storeu_ps(out, outs, bv);
  if (at) _mm512_mask_storeu_epi32(at, outs, best);
}

/// One element of each window's row pair (the low or high half of each 32-bit lane) as fp32,
/// NaNs quieted as the bulk conversions quiet them.
template <class S>
PRECIS_TARGET_AVX512 inline __m512 max_pool_widen_avx512(__m512i dw, bool high) {
  const __mmask16 all = 0xFFFF;
  if constexpr (std::is_same_v<S, bfloat16>) {
    const __m512 v = _mm512_castsi512_ps(high ? _mm512_and_si512(dw, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))
                                              : _mm512_maskz_slli_epi32(all, dw, 16));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(v), nan, _mm512_castps_si512(v), _mm512_set1_epi32(0x00400000)));
  } else {
    const __m512i h = high ? _mm512_maskz_srli_epi32(all, dw, 16) : dw;
    return _mm512_maskz_cvtph_ps(all, _mm512_maskz_cvtepi32_epi16(all, h));
  }
}

/// max_pool_2x2_avx512 for 16-bit inputs and outputs of the same format S (half or bfloat16),
/// read in place: each 32-bit load holds one window's pair of a row, so a row of n <= 16
/// windows is one masked load, widened in the lanes (NaNs quieted, as the bulk conversions do).
/// The winner goes back to S unchanged (quieted if a NaN): the same bits as widening the
/// tensor, selecting in fp32 and rounding the winners to S.
template <class S>
PRECIS_TARGET_AVX512 inline void max_pool_2x2_avx512_16(const S* r0, const S* r1, index_t n, std::int32_t c, std::int32_t w,
                                                        S* out, std::int32_t* at) {
  const __mmask16 all = 0xFFFF;
  const auto m = static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << static_cast<unsigned>(n)) - 1u);
  const __m512i d0 = _mm512_maskz_loadu_epi32(m, r0), d1 = _mm512_maskz_loadu_epi32(m, r1);
  const __m512i first = _mm512_maskz_add_epi32(all, _mm512_set1_epi32(c),
                                               _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0));
  __m512 bv = max_pool_widen_avx512<S>(d0, false);
  __m512i best = first;
  max_pool_consider_avx512(max_pool_widen_avx512<S>(d0, true), 1, first, bv, best);
  max_pool_consider_avx512(max_pool_widen_avx512<S>(d1, false), w, first, bv, best);
  max_pool_consider_avx512(max_pool_widen_avx512<S>(d1, true), w + 1, first, bv, best);
  __m256i y;
  if constexpr (std::is_same_v<S, bfloat16>) {
    y = _mm512_maskz_cvtepi32_epi16(all, _mm512_maskz_srli_epi32(all, _mm512_castps_si512(bv), 16));
  } else {
    y = _mm512_maskz_cvtps_ph(all, bv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  if (n == 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), y);
  } else {
    alignas(32) S tmp[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), y);
    std::memcpy(static_cast<void*>(out), tmp, static_cast<std::size_t>(n) * sizeof(S));
  }
  if (at) _mm512_mask_storeu_epi32(at, m, best);
}

/// max_pool2d's backward for a row of n <= 16 disjoint 2 x 2 windows (the first at position c,
/// rows w apart): each window's four inputs in rows r0 and r1 get 0 + g (the scalar loop's sum
/// into zeros) where `at` names them, else zero; lanes interleaved back into the rows.
PRECIS_TARGET_AVX512 inline void max_pool_2x2_grad_avx512(const float* g, const std::int32_t* at, index_t n, std::int32_t c,
                                                          std::int32_t w, float* r0, float* r1) {
  const __mmask16 all = 0xFFFF;
  const auto mask = [](index_t bits) {
    return static_cast<__mmask16>(bits >= 16 ? 0xFFFFu : (1u << static_cast<unsigned>(bits)) - 1u);
  };
  const __mmask16 m = mask(n), lo = mask(2 * n), hi = mask(2 * n - 16 > 0 ? 2 * n - 16 : 0);
  const __m512 v = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, g));
  const __m512i first = _mm512_maskz_add_epi32(all, _mm512_set1_epi32(c),
                                               _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0));
  const __m512i off = _mm512_maskz_sub_epi32(all, _mm512_maskz_loadu_epi32(m, at), first);
  const __m512i first_half = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second_half = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(off, _mm512_setzero_si512()), v);
  const __m512 o0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(off, _mm512_set1_epi32(1)), v);
  const __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(off, _mm512_set1_epi32(w)), v);
  const __m512 o1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(off, _mm512_set1_epi32(w + 1)), v);
  _mm512_mask_storeu_ps(r0, lo, _mm512_permutex2var_ps(e0, first_half, o0));
  _mm512_mask_storeu_ps(r0 + 16, hi, _mm512_permutex2var_ps(e0, second_half, o0));
  _mm512_mask_storeu_ps(r1, lo, _mm512_permutex2var_ps(e1, first_half, o1));
  _mm512_mask_storeu_ps(r1 + 16, hi, _mm512_permutex2var_ps(e1, second_half, o1));
}

/// The AVX2 forms of the kernels above: 8 windows side by side.
PRECIS_TARGET_AVX2 inline void max_pool_consider_avx2(__m256 v, std::int32_t offset, __m256i first, __m256& bv, __m256i& best) {
  const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, bv, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  bv = _mm256_blendv_ps(bv, v, take);
  const __m256i pos = _mm256_add_epi32(first, _mm256_set1_epi32(offset));
  best = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best), _mm256_castsi256_ps(pos), take));
}

/// The even (odd) elements of x then of y: [x0 x2 x4 x6 y0 y2 y4 y6] ([x1 x3 ... y7]).
PRECIS_TARGET_AVX2 inline __m256 max_pool_even_avx2(__m256 x, __m256 y) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, 0x88)), 0xD8));
}
PRECIS_TARGET_AVX2 inline __m256 max_pool_odd_avx2(__m256 x, __m256 y) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, 0xDD)), 0xD8));
}

/// max_pool_2x2_avx512 in AVX2 lanes, n <= 8 windows. Plain loads and stores of 8 windows;
/// fewer (a row's last windows when the row has fewer than 8) go through copies on the stack,
/// as AVX2's masked loads and stores are microcoded and slow on some CPUs (AMD's before Zen 4).
PRECIS_TARGET_AVX2 inline void max_pool_2x2_avx2(const float* r0, const float* r1, index_t n, std::int32_t c, std::int32_t w,
                                                 float* out, std::int32_t* at) {
  if (n < 8) {
    alignas(32) float a[16] = {}, b[16] = {}, y[8];
    alignas(32) std::int32_t pos[8];
    std::copy_n(r0, 2 * n, a);
    std::copy_n(r1, 2 * n, b);
    max_pool_2x2_avx2(a, b, 8, c, w, y, at ? pos : nullptr);
    std::copy_n(y, n, out);
    if (at) std::copy_n(pos, n, at);
    return;
  }
  const __m256 a0 = _mm256_loadu_ps(r0), a1 = _mm256_loadu_ps(r0 + 8);
  const __m256 b0 = _mm256_loadu_ps(r1), b1 = _mm256_loadu_ps(r1 + 8);
  const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
  __m256 bv = max_pool_even_avx2(a0, a1);
  __m256i best = first;
  max_pool_consider_avx2(max_pool_odd_avx2(a0, a1), 1, first, bv, best);
  max_pool_consider_avx2(max_pool_even_avx2(b0, b1), w, first, bv, best);
  max_pool_consider_avx2(max_pool_odd_avx2(b0, b1), w + 1, first, bv, best);
  _mm256_storeu_ps(out, bv);
  if (at) _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), best);
}

/// x where the lane's offset o is k, else zero.
PRECIS_TARGET_AVX2 inline __m256 max_pool_pick_avx2(__m256 x, __m256i o, std::int32_t k) {
  return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_cmpeq_epi32(o, _mm256_set1_epi32(k))));
}

/// max_pool_2x2_grad_avx512 in AVX2 lanes, n <= 8 windows (fewer through copies on the stack).
PRECIS_TARGET_AVX2 inline void max_pool_2x2_grad_avx2(const float* g, const std::int32_t* at, index_t n, std::int32_t c,
                                                      std::int32_t w, float* r0, float* r1) {
  if (n < 8) {
    alignas(32) float gb[8] = {}, a[16], b[16];
    alignas(32) std::int32_t ab[8] = {};
    std::copy_n(g, n, gb);
    std::copy_n(at, n, ab);
    max_pool_2x2_grad_avx2(gb, ab, 8, c, w, a, b);
    std::copy_n(a, 2 * n, r0);
    std::copy_n(b, 2 * n, r1);
    return;
  }
  const __m256 v = _mm256_add_ps(_mm256_setzero_ps(), _mm256_loadu_ps(g));
  const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
  const __m256i off = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)), first);
  const __m256 e0 = max_pool_pick_avx2(v, off, 0), o0 = max_pool_pick_avx2(v, off, 1);
  const __m256 e1 = max_pool_pick_avx2(v, off, w), o1 = max_pool_pick_avx2(v, off, w + 1);
  // [e0 o0] interleaved: unpack within 128-bit lanes, then the lanes in order
  const __m256 lo0 = _mm256_unpacklo_ps(e0, o0), hi0 = _mm256_unpackhi_ps(e0, o0);
  const __m256 lo1 = _mm256_unpacklo_ps(e1, o1), hi1 = _mm256_unpackhi_ps(e1, o1);
  _mm256_storeu_ps(r0, _mm256_permute2f128_ps(lo0, hi0, 0x20));
  _mm256_storeu_ps(r0 + 8, _mm256_permute2f128_ps(lo0, hi0, 0x31));
  _mm256_storeu_ps(r1, _mm256_permute2f128_ps(lo1, hi1, 0x20));
  _mm256_storeu_ps(r1 + 8, _mm256_permute2f128_ps(lo1, hi1, 0x31));
}

/// max_pool_widen_avx512 in AVX2 lanes.
template <class S>
PRECIS_TARGET_AVX2 inline __m256 max_pool_widen_avx2(__m256i dw, bool high) {
  if constexpr (std::is_same_v<S, bfloat16>) {
    const __m256 v = _mm256_castsi256_ps(high ? _mm256_and_si256(dw, _mm256_set1_epi32(static_cast<int>(0xffff0000u)))
                                              : _mm256_slli_epi32(dw, 16));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_or_ps(v, _mm256_and_ps(nan, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000))));
  } else {
    // the low (high) halves of the dwords as eight fp16 values: packed within each 128-bit
    // lane, then the two lanes' low quarters side by side
    const __m256i h = high ? _mm256_srli_epi32(dw, 16) : _mm256_and_si256(dw, _mm256_set1_epi32(0xffff));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
  }
}

/// max_pool_2x2_avx512_16 in AVX2 lanes, n <= 8 windows (one load of 8 dwords a row; fewer
/// windows through copies on the stack, as in max_pool_2x2_avx2).
template <class S>
PRECIS_TARGET_AVX2 inline void max_pool_2x2_avx2_16(const S* r0, const S* r1, index_t n, std::int32_t c, std::int32_t w, S* out,
                                                     std::int32_t* at) {
  if (n < 8) {
    alignas(32) S a[16] = {}, b[16] = {}, y[8];
    alignas(32) std::int32_t pos[8];
    std::memcpy(static_cast<void*>(a), static_cast<const void*>(r0), static_cast<std::size_t>(2 * n) * sizeof(S));
    std::memcpy(static_cast<void*>(b), static_cast<const void*>(r1), static_cast<std::size_t>(2 * n) * sizeof(S));
    max_pool_2x2_avx2_16<S>(a, b, 8, c, w, y, at ? pos : nullptr);
    std::memcpy(static_cast<void*>(out), static_cast<const void*>(y), static_cast<std::size_t>(n) * sizeof(S));
    if (at) std::copy_n(pos, n, at);
    return;
  }
  const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0));
  const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1));
  const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
  __m256 bv = max_pool_widen_avx2<S>(d0, false);
  __m256i best = first;
  max_pool_consider_avx2(max_pool_widen_avx2<S>(d0, true), 1, first, bv, best);
  max_pool_consider_avx2(max_pool_widen_avx2<S>(d1, false), w, first, bv, best);
  max_pool_consider_avx2(max_pool_widen_avx2<S>(d1, true), w + 1, first, bv, best);
  __m128i y;
  if constexpr (std::is_same_v<S, bfloat16>) {
    const __m256i hi16 = _mm256_srli_epi32(_mm256_castps_si256(bv), 16);
    y = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(hi16, hi16), 0x08));
  } else {
    y = _mm256_cvtps_ph(bv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), y);
  if (at) _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), best);
}
#endif

/// max_pool2d's backward over one row of wo disjoint 2 x 2 windows: the two input rows from
/// r0 (w apart, the row pair's first element at position c in the plane) get each window's
/// gradient 0 + g at the position `at` names and zero elsewhere, in AVX-512 or AVX2 lanes
/// where the CPU has them (float), else in a loop; the same values either way.
template <class R>
void max_pool_2x2_grad_row(const R* g, const std::int32_t* at, index_t wo, std::int32_t c, std::int32_t w, R* r0) {
  R* r1 = r0 + w;
#if PRECIS_X86_SIMD
  if constexpr (std::is_same_v<R, float>) {
    if (detail::cpu_has_avx512f()) {
      for (index_t o0 = 0; o0 < wo; o0 += 16) {
        max_pool_2x2_grad_avx512(g + o0, at + o0, std::min<index_t>(16, wo - o0), c + 2 * static_cast<std::int32_t>(o0), w,
                                 r0 + 2 * o0, r1 + 2 * o0);
      }
      return;
    }
    if (detail::cpu_has_avx2_f16c()) {
      for (index_t o1 = 0; o1 < wo; o1 += 8) {
        const index_t o0 = wo >= 8 ? std::min<index_t>(o1, wo - 8) : o1;  // the last 8 overlap, as in the forward
        max_pool_2x2_grad_avx2(g + o0, at + o0, std::min<index_t>(8, wo - o0), c + 2 * static_cast<std::int32_t>(o0), w,
                               r0 + 2 * o0, r1 + 2 * o0);
      }
      return;
    }
  }
#endif
  for (index_t j = 0; j < wo; ++j) {
    const R v = R(0) + g[j];
    const std::int32_t off = at[j] - (c + 2 * static_cast<std::int32_t>(j));
    r0[2 * j] = off == 0 ? v : R(0);
    r0[2 * j + 1] = off == 1 ? v : R(0);
    r1[2 * j] = off == w ? v : R(0);
    r1[2 * j + 1] = off == w + 1 ? v : R(0);
  }
}

/// Max pooling over unpadded 2 x 2 windows at stride 2 (the CNNs' case) of one h x w plane:
/// the general loop's selection (the first largest element, or a NaN), 16 windows at a time in
/// AVX-512 lanes or 8 in AVX2 lanes where the CPU has them (float inputs), else in a loop; `at` (when Save) gets
/// each winner's position in the plane. A 16-bit output is rounded a run at a time
/// (vectorized conversions).
template <bool Save, class R, class O>
void max_pool_2x2(const R* in, index_t w, index_t ho, index_t wo, O* y, std::int32_t* at) {
  using A = default_compute_t<O>;
  constexpr bool direct = std::is_same_v<O, A>;
  const auto wi = static_cast<std::int32_t>(w);
  std::array<A, direct ? 1 : detail::chunk> buf;
#if PRECIS_X86_SIMD
  if constexpr (std::is_same_v<R, float> && std::is_same_v<A, float>) {
    const bool wide = detail::cpu_has_avx512f();
    if (wide || detail::cpu_has_avx2_f16c()) {
      const index_t lanes = wide ? 16 : 8;
      std::array<float, direct ? 1 : 16> row_buf;
      for (index_t oh = 0; oh < ho; ++oh) {
        const R* r0 = in + 2 * oh * w;
        const auto row = static_cast<std::int32_t>(2 * oh * w);
        for (index_t o1 = 0; o1 < wo; o1 += lanes) {
          // AVX2: a row's last 8 windows overlap the previous 8 rather than being fewer
          const index_t o0 = !wide && wo >= lanes ? std::min(o1, wo - lanes) : o1, len = std::min(lanes, wo - o0);
          float* out = nullptr;
          if constexpr (direct) out = y + oh * wo + o0;
          else out = row_buf.data();
          const std::int32_t c = row + 2 * static_cast<std::int32_t>(o0);
          std::int32_t* a = Save ? at + oh * wo + o0 : nullptr;
          if (wide) max_pool_2x2_avx512(r0 + 2 * o0, r0 + w + 2 * o0, len, c, wi, out, a);
          else max_pool_2x2_avx2(r0 + 2 * o0, r0 + w + 2 * o0, len, c, wi, out, a);
          if constexpr (!direct) detail::store_run(row_buf.data(), y + oh * wo + o0, len, index_t{1});
        }
      }
      return;
    }
  }
#endif
  for (index_t oh = 0; oh < ho; ++oh) {
    const R* r0 = in + 2 * oh * w;
    const R* r1 = r0 + w;
    const auto row = static_cast<std::int32_t>(2 * oh * w);
    for (index_t o0 = 0; o0 < wo; o0 += detail::chunk) {
      const index_t len = std::min(detail::chunk, wo - o0);
      A* out = nullptr;
      if constexpr (direct) out = y + oh * wo + o0;
      else out = buf.data();
      for (index_t j = 0; j < len; ++j) {
        const index_t ow = o0 + j;
        const std::int32_t c = row + 2 * static_cast<std::int32_t>(ow);
        R bv = r0[2 * ow];
        std::int32_t best = c;
        const auto consider = [&](R v, std::int32_t pos) {
          const bool take = v > bv || v != v;
          best = take ? pos : best;
          bv = take ? v : bv;
        };
        consider(r0[2 * ow + 1], c + 1);
        consider(r1[2 * ow], c + wi);
        consider(r1[2 * ow + 1], c + wi + 1);
        out[j] = A(bv);
        if constexpr (Save) at[oh * wo + ow] = best;
      }
      if constexpr (!direct) detail::store_run(buf.data(), y + oh * wo + o0, len, index_t{1});
    }
  }
}

}  // namespace precis::op::conv_detail

namespace precis::detail::bn {

/// Calls f(at, len) for the runs of channel ch's values in x [N, C, S] (S the product of the
/// axes after C), each run contiguous and at most `chunk` long, image after image.
template <class F>
void for_runs(index_t n, index_t c, index_t s, index_t ch, F&& f) {
  for (index_t i = 0; i < n; ++i) {
    for (index_t j = 0; j < s; j += chunk) f((i * c + ch) * s + j, std::min(chunk, s - j));
  }
}

/// len values from p in Acc: p itself when it already holds Acc, else converted into buf.
template <class Acc, class X>
const Acc* load(const X* p, index_t len, Acc* buf) {
  if constexpr (std::is_same_v<X, Acc>) {
    return p;
  } else if constexpr (std::is_same_v<Acc, float> && std::is_same_v<ad::arith_t<X>, float>) {
    return load_run<float>(p, len, 1, buf);  // the vectorized widening (exact, as ld's)
  } else {
    for (index_t k = 0; k < len; ++k) buf[k] = ad::ld<Acc>(p[k]);
    return buf;
  }
}

/// Pairwise summation on eight lanes: value t of the stream goes to lane t % 8, each lane's values
/// are summed pairwise (eight lanes added as one vector), then the lanes pairwise, then the last
/// t % 8 values (summed pairwise) added. Each value takes part in at most ceil(log2 m) + 2
/// additions (m values in all), two more than the scalar tree, in a third of the time.
template <class Acc>
struct lane_sum {
  struct lanes {
    std::array<Acc, 8> v;  // lanes{}, pairwise_sum's starting value, zeroes all eight
    lanes operator+(const lanes& o) const {
      lanes r;
      for (std::size_t k = 0; k < 8; ++k) r.v[k] = v[k] + o.v[k];
      return r;
    }
  };
  pairwise_sum<lanes> rows;
  std::array<Acc, 8> pending{};
  index_t filled = 0;

  void push(const Acc* x, index_t n) {
    index_t i = 0;
    while (filled != 0 && i < n) {
      pending[static_cast<std::size_t>(filled++)] = x[i++];
      if (filled == 8) {
        lanes r;
        r.v = pending;
        rows.push(r);
        filled = 0;
      }
    }
    std::array<lanes, 32> buf;
    while (i + 8 <= n) {
      const index_t rows_now = std::min<index_t>(32, (n - i) / 8);
      for (index_t r = 0; r < rows_now; ++r)
        for (std::size_t k = 0; k < 8; ++k) buf[static_cast<std::size_t>(r)].v[k] = x[i + 8 * r + static_cast<index_t>(k)];
      push_all(rows, buf.data(), rows_now);
      i += 8 * rows_now;
    }
    while (i < n) pending[static_cast<std::size_t>(filled++)] = x[i++];
  }
  Acc result() const {
    const lanes r = rows.result();
    const auto& v = r.v;
    Acc s = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    if (filled != 0) {
      pairwise_sum<Acc> tail;
      push_all(tail, pending.data(), filled);
      s = s + tail.result();
    }
    return s;
  }
};

}  // namespace precis::detail::bn
