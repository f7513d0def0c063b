// AMX-BF16 tile kernel for the blocked GEMM of bfloat16 inputs into fp32: a 32 x 32 block of C
// held in four 16 x 16 fp32 tile registers, fed by tdpbf16ps, which multiplies a 16 x 32 bf16
// tile of A by a 32 x 16 tile of B (stored as 16 rows of 16 pairs along k) and adds into C.
//
// What tdpbf16ps computes for each C element c, measured bit for bit on an Intel Xeon
// (Emerald Rapids; tests/data/amx, 32,768 outputs, and the GEMM against a scalar model of it in
// tests/tensor/gemm_test.cpp): not one chain of fused multiply-adds, but, per instruction of
// 32 k, two chains from zero, one over the even k and one over the odd k,
//     e = ftz(fma(daz(a[k]), daz(b[k]), e))     k = 0, 2, 4, ... 30
//     o = ftz(fma(daz(a[k]), daz(b[k]), o))     k = 1, 3, 5, ... 31
// (each product exact in fp32 unless it underflows, each step rounded to nearest even), and then
//     c = ftz(c + ftz(e + o)),
// with denormal inputs read as zero (daz) and denormal results flushed (ftz), whatever MXCSR
// says. Every other model tried (one chain in k order as vdpbf16ps computes it, either order
// within a pair, pair sums rounded once, c in either chain, sums aligned and truncated) misses
// between 2% and 98% of the outputs of one recorded set or another. So this kernel's sums differ from the fp32 kernels' (and the
// AVX512-BF16 kernel's) in the last bits; they are no less accurate: per instruction the depth
// is 16 + 2 additions instead of 32, within the fp32 bound gamma_{K+2} |A||B| (tested).
// reproducible<P> policies keep to the fp32 kernels.
//
// The partial sums stay in fp32 from the first k to the last: a block of C keeps its four tiles
// through a K block, and between K blocks the raw sums wait in C itself (beta == 0; the
// dispatcher handles beta != 0 through a workspace), reloaded into the tiles for the next
// block. K blocks are multiples of 32 k but the last, so the instructions cover k = 0..31,
// 32..63, ... whatever the blocking or the thread count: C = alpha * S with S one chain of
// instructions over all of K, a result independent of the blocking. The last instruction's
// odd k is completed with +0 * +0, as in the AVX512-BF16 kernel; the rest of it is padded
// with -0 in A and +0 in B, and each padded product (-0) leaves its chain unchanged, the sign
// of a zero included.
//
// The tiles need the OS's permission (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA), asked
// once per process by cpu_has_amx_bf16) and a tile configuration per thread, loaded by each
// thread when a GEMM starts (amx_bf16_begin): other code in the process (a oneDNN kernel, say)
// may configure or release the tiles between GEMMs, but nothing runs on the thread between
// the tile calls of one GEMM.
#pragma once

#include "precis/config.hpp"

#if PRECIS_X86_SIMD

#include <algorithm>
#include <cpuid.h>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "precis/format/bfloat16.hpp"
#include "precis/tensor/gemm/kernel_avx512_bf16.hpp"

#define PRECIS_TARGET_AMX_BF16 __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,avx2,f16c,fma")))

namespace precis::detail {

/// AMX-BF16 usable: AVX512-BF16 usable (its conversions and epilogue), CPUID.(EAX=7, ECX=0):EDX
/// bits 22 (AMX-BF16) and 24 (AMX-TILE), the OS saving tile state (XCR0 bits 17 and 18), and,
/// on Linux, the permission to use the tile data granted to this process.
inline bool cpu_has_amx_bf16() {
  static const bool ok = [] {
    if (!cpu_has_avx512_bf16()) return false;
#if defined(PRECIS_AVX512_EMULATION)
    return false;  // AMX is not emulated
#endif
    const unsigned d = cpuid(7)[3];
    if (((d >> 22) & 1u) == 0 || ((d >> 24) & 1u) == 0) return false;
    if ((xcr0() & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

/// pack_a_amx for column-major A (a transposed view, rows dense for each k; element (r, k) at
/// a[r + k * cs]), the weight gradients' X^T: for 16 rows at a time, the runs of k and k + 1
/// are read densely, joined into pairs and scattered to the 16 rows, instead of reading every
/// element from another cache line. The same layout as pack_a_amx.
PRECIS_TARGET_AVX512_BF16 inline void pack_a_amx_columns(const std::uint16_t* a, index_t cs, index_t mc, index_t kc,
                                                          index_t mr, std::uint32_t* dst) {
  const index_t kp = (kc + 1) / 2, kp16 = (kp + 15) / 16 * 16, even = kc / 2;
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int>(kp16)));
  for (index_t r0 = 0; r0 < mc; r0 += 16) {
    const index_t n = std::min<index_t>(16, mc - r0);
    const auto m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1u);
    std::uint32_t* base = dst + r0 * kp16;
    const std::uint16_t* x = a + r0;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"  // GCC's -O0 macro passes the mask as a short
#endif
    for (index_t q = 0; q < even; ++q) {
      const __m512i lo = bf16_widen_masked(m, x + 2 * q * cs);
      const __m512i hi = _mm512_maskz_slli_epi32(all16, bf16_widen_masked(m, x + (2 * q + 1) * cs), 16);
      _mm512_mask_i32scatter_epi32(base + q, m, rows, _mm512_or_si512(lo, hi), 4);
    }
    if (kp > even) _mm512_mask_i32scatter_epi32(base + even, m, rows, bf16_widen_masked(m, x + (kc - 1) * cs), 4);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
  }
  // past the last pair, -0 in both halves; rows past mc, +0
  for (index_t r = 0; r < (mc + mr - 1) / mr * mr; ++r) {
    std::uint32_t* row = dst + r * kp16;
    if (r < mc) std::fill(row + kp, row + kp16, 0x80008000u);
    else std::fill(row, row + kp16, 0u);
  }
}

/// Packs rows [0, mc) x cols [0, kc) of bf16 A (row stride rs, column stride cs) into mr-row
/// panels, each row kp16 pair dwords long (kp16: ceil(kc / 2) rounded up to 16) with element k
/// in the low half: row-major bf16 along k, the layout a tile of A loads. An odd kc's last pair
/// is completed with +0, as the AVX512-BF16 kernel's is; the pairs past it hold -0, whose
/// products (-0) leave every partial sum as it is, the sign of a zero included. Rows past mc
/// hold +0.
inline void pack_a_amx(const bfloat16* a_, index_t rs, index_t cs, index_t mc, index_t kc, index_t mr,
                       std::uint32_t* dst) {
  const std::uint16_t* a = bf16_bits(a_);
  const index_t kp16 = ((kc + 1) / 2 + 15) / 16 * 16;
  if (rs == 1 && cs != 1) {
    pack_a_amx_columns(a, cs, mc, kc, mr, dst);
    return;
  }
  for (index_t r = 0; r < (mc + mr - 1) / mr * mr; ++r) {
    std::uint16_t* out = reinterpret_cast<std::uint16_t*>(dst + r * kp16);
    index_t k = 0;
    if (r < mc) {
      const std::uint16_t* x = a + r * rs;
      if (cs == 1) {
        std::memcpy(out, x, static_cast<std::size_t>(kc) * sizeof(std::uint16_t));
        k = kc;
      } else {
        for (; k < kc; ++k) out[k] = x[k * cs];
      }
    }
    if (k % 2 == 1) out[k++] = 0;
    std::fill(out + k, out + 2 * kp16, r < mc ? std::uint16_t{0x8000} : std::uint16_t{0});
  }
}

/// B packed for the tiles: pair rows of ceil(kc / 2) rounded up to 16 (a tile's rows), element k
/// in the low half (pack_b_pairs).
PRECIS_TARGET_AVX512_BF16 inline void pack_b_amx(const bfloat16* b, index_t rs, index_t cs,
                                                 index_t kc, index_t nc, index_t nr,
                                                 std::uint32_t* dst, index_t p0, index_t p1) {
  pack_b_pairs<false>(b, rs, cs, kc, nc, nr, ((kc + 1) / 2 + 15) / 16 * 16, dst, p0, p1);
}

/// The tile configuration: palette 1; tiles 0-3 the 16 x 16 fp32 blocks of C, 4-5 A's two
/// 16-row halves (16 x 64 bytes), 6-7 B's two 16-column halves (16 pair rows x 64 bytes).
struct alignas(64) amx_tile_config {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

/// Loads the tile configuration on the calling thread (before its first amx_bf16_chain_kernel
/// of a GEMM).
PRECIS_TARGET_AMX_BF16 inline void amx_bf16_begin() {
  static const amx_tile_config config{};
  _tile_loadconfig(&config);
}

/// One K block of C[0:mr, 0:nr] = alpha * S: over d pair rows (a multiple of 16) of A_panel
/// (32 rows of d pair dwords) and B_panel (d x 32 pair dwords), both zero-padded to the full
/// tile. first: the sums start from +0, else from the raw sums an earlier block left in C;
/// last: C = alpha * S, else C = S, raw, for the next block.
PRECIS_TARGET_AMX_BF16 inline void amx_bf16_chain_kernel(index_t d, const std::uint32_t* __restrict a,
                                                          const std::uint32_t* __restrict b, float* c, index_t rs_c,
                                                          index_t cs_c, index_t mr, index_t nr, float alpha, bool first,
                                                          bool last) {
  // a whole 32 x 32 block with unit column stride moves between C and the tiles directly;
  // anything else goes through a 32 x 32 buffer
  const bool direct = mr == 32 && nr == 32 && cs_c == 1;
  alignas(64) float buf[32 * 32];
  const auto c_stride = static_cast<long>(rs_c * index_t{sizeof(float)});
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else if (direct) {
    _tile_loadd(0, c, c_stride);
    _tile_loadd(1, c + 16, c_stride);
    _tile_loadd(2, c + 16 * rs_c, c_stride);
    _tile_loadd(3, c + 16 * rs_c + 16, c_stride);
  } else {
    for (index_t i = 0; i < 32; ++i)
      for (index_t j = 0; j < 32; ++j) buf[i * 32 + j] = i < mr && j < nr ? c[i * rs_c + j * cs_c] : 0.0f;
    _tile_loadd(0, buf, 128);
    _tile_loadd(1, buf + 16, 128);
    _tile_loadd(2, buf + 16 * 32, 128);
    _tile_loadd(3, buf + 16 * 32 + 16, 128);
  }
  const auto stride_a = static_cast<long>(d * 4);
  for (index_t s = 0; s < d; s += 16) {
    _tile_loadd(4, a + s, stride_a);
    _tile_loadd(5, a + 16 * d + s, stride_a);
    _tile_loadd(6, b + s * 32, 128);
    _tile_loadd(7, b + s * 32 + 16, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const bool scale = last && alpha != 1.0f;
  if (direct && !scale) {
    _tile_stored(0, c, c_stride);
    _tile_stored(1, c + 16, c_stride);
    _tile_stored(2, c + 16 * rs_c, c_stride);
    _tile_stored(3, c + 16 * rs_c + 16, c_stride);
    return;
  }
  _tile_stored(0, buf, 128);
  _tile_stored(1, buf + 16, 128);
  _tile_stored(2, buf + 16 * 32, 128);
  _tile_stored(3, buf + 16 * 32 + 16, 128);
  for (index_t i = 0; i < mr; ++i)
    for (index_t j = 0; j < nr; ++j) c[i * rs_c + j * cs_c] = scale ? alpha * buf[i * 32 + j] : buf[i * 32 + j];
}

/// C = fma(beta, C, alpha * S) for an m x n C of any strides and S dense (n apart): how the AMX
/// GEMM adds its sums, kept in a workspace, into a C it must not pass them through (beta != 0).
/// Each entry is one fused multiply-add of beta C and the rounded alpha S, in vectors of 16
/// where C's rows are dense (masked forms: see all16 in convert_x86.hpp).
PRECIS_TARGET_AMX_BF16 inline void amx_bf16_add_into(index_t m, index_t n, float alpha, const float* s, float beta,
                                                     float* c, index_t rs_c, index_t cs_c) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (index_t i = 0; i < m; ++i) {
    const float* si = s + i * n;
    float* ci = c + i * rs_c;
    if (cs_c == 1) {
      for (index_t j = 0; j < n; j += 16) {
        const auto k = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
        const __m512 x = _mm512_maskz_mul_ps(k, va, _mm512_maskz_loadu_ps(k, si + j));
        _mm512_mask_storeu_ps(ci + j, k, _mm512_maskz_fmadd_ps(k, vb, _mm512_maskz_loadu_ps(k, ci + j), x));
      }
    } else {
      for (index_t j = 0; j < n; ++j) ci[j * cs_c] = __builtin_fmaf(beta, ci[j * cs_c], alpha * si[j]);
    }
  }
}

}  // namespace precis::detail

#endif  // PRECIS_X86_SIMD
