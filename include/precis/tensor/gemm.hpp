// GEMM: C = alpha * A B + beta * C on 2-D tensors or views, accumulating in a named type:
//   precis::gemm<float>(1.0f, A, B.transpose(), 0.0f, C);   // op(B) as a view
//   auto C = precis::matmul<float>(A, B);
//
// BLIS-style: B is packed into kc x nc panels, A into mc x kc blocks (converted to the
// accumulator type while packing, so the inner loop is pure FMA on any input format), and a
// register-tile kernel walks the packed panels. Threads split the columns (wide products) or the rows
// (tall-skinny ones) in whole panels.
//   (precis::tc::accumulator<Arch, In>: the tensor-core model of tc/gemm.hpp, not these kernels.)
//   Acc = float  : AVX-512F 12 x 32 tile, or AVX2+FMA 6 x 16 (bit-identical results); inputs
//                  float, half, bfloat16, fp8, tf32, minifloat. bfloat16 x bfloat16 with
//                  AVX512-BF16: a 12 x 32 vdpbf16ps tile on bf16 pairs, bit-identical to those
//                  except that fp32 denormals are flushed to zero.
//   Acc = double : AVX-512F 12 x 16 tile, or AVX2+FMA 6 x 8 (bit-identical results).
//   Acc = float or double, products of at most 2^15 multiply-adds with K <= 256 (attention's
//                  per-head products): no packing, 4-row register blocks over B's rows
//                  (gemm/kernel_small.hpp), bit-identical to the tiles; bfloat16 x bfloat16
//                  products that small take it too, with the fp32 tiles' bits.
//   Acc = half, bfloat16 : 6 x 16 tile in fp32 lanes rounded to the format after every
//                  multiply and add; bit-identical to the portable tile (kernel_avx2.hpp).
//   Acc = float or double without AVX2 + FMA (aarch64, other CPUs, PRECIS_NO_SIMD, the portable
//                  cap): the portable vector tile (gemm/kernel_vector.hpp), multiplies and adds
//                  in K blocks of 128, as the scalar tile below.
//   Acc = half, bfloat16 without AVX2: the portable vector tile in fp32 lanes rounded to the
//                  format after every multiply and add (gemm/kernel_vector.hpp), the scalar
//                  tile's bits.
//   other Acc    : portable 4 x 4 tile in Acc's own arithmetic (multiprecision, fp8, ...;
//                  gemm/kernel_vector.hpp).
// Which kernel runs depends only on the CPU and the cap below, never on the flags a translation
// unit was compiled with: every translation unit of a program gets the same gemm<Acc>.
// Error: every entry satisfies |C - fl(C)| <= gamma_K |A||B| in the accumulator's u (Higham,
// eq. 3.12), plus one rounding into C's storage when that differs from Acc.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "precis/tensor/elementwise.hpp"
#include "precis/tensor/gemm/kernel_avx2.hpp"
#include "precis/tensor/gemm/spread.hpp"
#include "precis/tensor/gemm/kernel_avx512.hpp"
#include "precis/tensor/gemm/kernel_avx512_bf16.hpp"
#include "precis/tensor/gemm/kernel_avx512_fp16.hpp"
#include "precis/tensor/gemm/kernel_neon_fp16.hpp"
#include "precis/tensor/gemm/kernel_amx_bf16.hpp"
#include "precis/tensor/gemm/kernel_small.hpp"
#include "precis/tensor/gemm/kernel_vector.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace precis {

/// The instruction-set levels of the CPU GEMM's kernels, lowest first. The GEMM uses the
/// highest level the CPU and the OS support, up to a cap: the environment variable
/// PRECIS_GEMM_ISA (portable, avx2, avx512, avx512_bf16 or amx_bf16) sets it at the first GEMM,
/// limit_gemm_isa() changes it. Without the variable the cap is amx_bf16 where the CPU has AMX,
/// avx512_bf16 on AMD CPUs and avx512 elsewhere, where the AVX512-BF16 kernel was measured
/// slower than the AVX-512 one on widened inputs (detail::gemm_isa_default_cap). The fp32 and
/// fp64 kernels of every level give bit-identical results; avx512_bf16 adds a kernel for
/// bfloat16 x bfloat16 into fp32 (vdpbf16ps) that is bit-identical to them except that it
/// flushes fp32 denormals to zero (tensor/gemm/kernel_avx512_bf16.hpp); amx_bf16 runs that product on the AMX tiles, whose sums
/// differ from the fp32 kernels' in the last bits (two chains per 32 k; within the same bound;
/// tensor/gemm/kernel_amx_bf16.hpp). At both levels a product small enough for the unpacked
/// path (small_gemm_limit) takes it instead, with the fp32 kernels' bits. At avx512_bf16 and above, where the CPU also has
/// AVX512-FP16, the fp16-accumulator GEMM (the 16-true policy's) runs in native fp16 lanes with
/// the AVX-512 emulation's bits (tensor/gemm/kernel_avx512_fp16.hpp).
enum class gemm_isa { portable, avx2, avx512, avx512_bf16, amx_bf16 };

inline const char* to_string(gemm_isa i) noexcept {
  switch (i) {
    case gemm_isa::portable: return "portable";
    case gemm_isa::avx2: return "avx2";
    case gemm_isa::avx512: return "avx512";
    case gemm_isa::avx512_bf16: return "avx512_bf16";
    case gemm_isa::amx_bf16: return "amx_bf16";
  }
  return "?";
}

namespace detail {

/// Whether the CPU is AMD's (CPUID leaf 0 vendor string "AuthenticAMD").
inline bool cpu_is_amd() noexcept {
#if PRECIS_X86_SIMD
  static const bool amd = [] {
    const auto v = cpuid(0);
    return v[1] == 0x68747541u && v[3] == 0x69746e65u && v[2] == 0x444d4163u;  // "Auth" "enti" "cAMD"
  }();
  return amd;
#else
  return false;
#endif
}

/// The cap when PRECIS_GEMM_ISA is not set: every level, except that the AVX512-BF16 kernel is
/// used by default only where it was measured faster than widening bf16 to fp32 for the
/// AVX-512 kernel. On AMD Zen 5 it is (docs/benchmarks.md); on an Intel Xeon with AMX
/// (family 6 model 207, Emerald Rapids) vdpbf16ps ran at half the fp32 FMA rate (86 against 175
/// GFLOP/s on one core) and the bf16 GEMM at 81 against 150 GFLOP/s for the widening path, so
/// other CPUs widen. PRECIS_GEMM_ISA=avx512_bf16 or limit_gemm_isa(gemm_isa::avx512_bf16)
/// selects the kernel anyway.
inline gemm_isa gemm_isa_default_cap() {
#if PRECIS_X86_SIMD
  if (cpu_has_amx_bf16()) return gemm_isa::amx_bf16;
#endif
  return cpu_is_amd() ? gemm_isa::avx512_bf16 : gemm_isa::avx512;
}

inline gemm_isa gemm_isa_from_env() {
  const char* e = std::getenv("PRECIS_GEMM_ISA");
  if (e == nullptr) return gemm_isa_default_cap();
  const std::string v(e);
  for (auto i : {gemm_isa::portable, gemm_isa::avx2, gemm_isa::avx512, gemm_isa::avx512_bf16, gemm_isa::amx_bf16}) {
    if (v == to_string(i)) return i;
  }
  throw invalid_argument("precis::gemm: PRECIS_GEMM_ISA=\"" + v +
                         "\"; expected portable, avx2, avx512, avx512_bf16 or amx_bf16");
}

inline std::atomic<int>& gemm_isa_cap() {
  static std::atomic<int> cap{static_cast<int>(gemm_isa_from_env())};
  return cap;
}

}  // namespace detail

/// The highest level this CPU (and its OS) supports.
inline gemm_isa gemm_isa_available() {
#if PRECIS_X86_SIMD
  if (detail::cpu_has_amx_bf16()) return gemm_isa::amx_bf16;
  if (detail::cpu_has_avx512_bf16()) return gemm_isa::avx512_bf16;
  if (detail::cpu_has_avx512f()) return gemm_isa::avx512;
  if (detail::cpu_has_avx2_fma()) return gemm_isa::avx2;
#endif
  return gemm_isa::portable;
}

/// The level the GEMM uses now: the available one, capped.
inline gemm_isa gemm_isa_in_use() {
  return std::min(gemm_isa_available(), static_cast<gemm_isa>(detail::gemm_isa_cap().load(std::memory_order_relaxed)));
}

/// Caps the level the GEMM uses (for tests and comparisons); returns the previous cap.
inline gemm_isa limit_gemm_isa(gemm_isa cap) {
  return static_cast<gemm_isa>(detail::gemm_isa_cap().exchange(static_cast<int>(cap)));
}

namespace detail {

/// Register tile and cache blocks for one kernel. kc x nr of B stays in L1, mc x kc of A in L2,
/// kc x nc of B in L3.
struct gemm_blocking {
  index_t mr, nr, mc, kc, nc;
};

/// The AVX-512 tiles: kc as the AVX2 ones (the same K blocks, so the same sums), mc a multiple
/// of mr.
template <class Acc>
constexpr gemm_blocking blocking_avx512() {
  if (std::is_same_v<Acc, float>) return {12, 32, 120, 256, 3072};
  if (std::is_same_v<Acc, half> || std::is_same_v<Acc, bfloat16>) return {6, 32, 120, 128, 3072};
  return {12, 16, 72, 256, 1536};
}

template <class Acc>
constexpr gemm_blocking blocking_for(bool simd) {
  if (simd && std::is_same_v<Acc, float>) return {6, 16, 120, 256, 3072};
  if (simd && std::is_same_v<Acc, double>) return {6, 8, 72, 256, 1536};
  // The 16-bit kernel keeps the portable kc: K is cut into the same blocks, each added into C
  // in the same order, so the two give bit-identical results.
  if (simd && (std::is_same_v<Acc, half> || std::is_same_v<Acc, bfloat16>)) return {6, 16, 120, 128, 3072};
  return {4, 4, 64, 128, 512};
}

/// Per-thread scratch that grows and is reused across calls (no allocation in steady state).
template <class T, int Slot>
T* scratch(std::size_t n) {
  thread_local aligned_buffer<T> buf;
  thread_local std::size_t cap = 0;
  if (cap < n) {
    buf = allocate_aligned<T>(n);
    cap = n;
  }
  return buf.get();
}

/// `lines` runs of kc elements of S, dense and `stride` apart from `x`, interleaved by k into a
/// float panel `width` wide (zeros past `lines`): directly when S is float, else widened into
/// `row` (lines * kc elements) first. Both packers' path for operands dense along k.
template <class S>
void spread_runs(const S* x, index_t stride, index_t lines, index_t kc, float* panel, index_t width, float* row) {
  if constexpr (std::is_same_v<S, float>) {
    spread_rows_32(x, stride, lines, kc, panel, width);
  } else if (stride == kc) {  // the runs are one dense block (a whole K, as in a linear layer's):
    const float* v = load_run<float>(x, lines * kc, 1, row);  // one conversion for them all
    spread_rows_32(v, kc, lines, kc, panel, width);
  } else if (kc <= inline_widen_max) {
    // short runs (an attention head's columns within wider rows): gathered into one dense block
    // first and converted in one call, which costs less than a conversion per run
    S* dense = scratch<S, 6>(static_cast<std::size_t>(lines * kc));
    for (index_t r = 0; r < lines; ++r) copy_short(x + r * stride, kc, dense + r * kc);
    const float* v = load_run<float>(dense, lines * kc, 1, row);
    spread_rows_32(v, kc, lines, kc, panel, width);
  } else {
    for (index_t r = 0; r < lines; ++r) {
      const float* v = load_run<float>(x + r * stride, kc, 1, row + r * kc);
      if (v != row + r * kc) std::copy_n(v, kc, row + r * kc);
    }
    spread_rows_32(row, kc, lines, kc, panel, width);
  }
}

/// f(std::integral_constant<index_t, R>{}) with R = n when n is one of the tiles' heights or
/// widths (4, 6, 8, 12, 16, 32) and T is trivially copyable, so that f can copy runs of n values
/// with a size the compiler knows (a few vector moves rather than a loop: element by element, a
/// column-major A took 3 cycles a value to pack on a Zen 3 core); false otherwise
/// (Boost.Multiprecision types, other lengths), and f is not called.
template <class T, class F>
bool with_fixed_length(index_t n, F&& f) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    switch (n) {
      case 4: f(std::integral_constant<index_t, 4>{}); return true;
      case 6: f(std::integral_constant<index_t, 6>{}); return true;
      case 8: f(std::integral_constant<index_t, 8>{}); return true;
      case 12: f(std::integral_constant<index_t, 12>{}); return true;
      case 16: f(std::integral_constant<index_t, 16>{}); return true;
      case 32: f(std::integral_constant<index_t, 32>{}); return true;
      default: return false;
    }
  } else {
    (void)n, (void)f;
    return false;
  }
}

/// Copies R values of T from x to dst (with_fixed_length's R).
template <class T, index_t R>
void copy_fixed(const T* x, T* dst, std::integral_constant<index_t, R>) {
  std::memcpy(static_cast<void*>(dst), static_cast<const void*>(x), static_cast<std::size_t>(R) * sizeof(T));
}

/// Packs rows [0, mc) x cols [0, kc) of A (row stride rs, column stride cs) into mr-row
/// panels interleaved by k, converted to Acc and zero-padded to a multiple of mr rows. `row`
/// holds at least max(kc, mc + mr) and mr * kc elements.
template <class Acc, class S>
void pack_a(const S* a, index_t rs, index_t cs, index_t mc, index_t kc, index_t mr, Acc* dst,
            Acc* row) {
  for (index_t i0 = 0; i0 < mc; i0 += mr) {
    Acc* panel = dst + i0 * kc;
    const index_t rows = std::min(mr, mc - i0);
    if constexpr (std::is_same_v<Acc, float>) {
      if (cs == 1) {  // rows dense along k, interleaved by register transposes
        spread_runs(a + i0 * rs, rs, rows, kc, panel, mr, row);
        continue;
      }
    } else if constexpr (std::is_same_v<Acc, double> && std::is_same_v<remove_cv_t<S>, double>) {
      if (cs == 1) {
        spread_rows_64(a + i0 * rs, rs, rows, kc, panel, mr);
        continue;
      }
    }
    if (cs == 1 || rs != 1) {
      // one row at a time (dense along k when A is row-major), spread into the panel
      for (index_t r = 0; r < mr; ++r) {
        if (r < rows) {
          const Acc* x = load_run<Acc>(a + (i0 + r) * rs, kc, cs, row);
          for (index_t p = 0; p < kc; ++p) panel[p * mr + r] = x[p];
        } else {
          for (index_t p = 0; p < kc; ++p) panel[p * mr + r] = Acc(0);
        }
      }
    } else if constexpr (std::is_same_v<S, Acc>) {
      // column-major A (a transposed view): each k gives mr adjacent values, a whole panel's
      // as one copy of a fixed size
      if (rows == mr && with_fixed_length<Acc>(mr, [&](auto height) {
            for (index_t p = 0; p < kc; ++p) copy_fixed(a + i0 + p * cs, panel + p * mr, height);
          })) {
        continue;
      }
      for (index_t p = 0; p < kc; ++p) {
        const Acc* x = load_run<Acc>(a + i0 + p * cs, rows, 1, row);
        for (index_t r = 0; r < mr; ++r) panel[p * mr + r] = r < rows ? x[r] : Acc(0);
      }
    } else {
      // column-major A of another format: convert each k's whole run of mc values at once
      // (one vectorized conversion instead of one per panel), then spread it over the panels
      // (whole panels by fixed-size copies where mr allows)
      const index_t whole = mc / mr * mr;
      for (index_t p = 0; p < kc; ++p) {
        const Acc* x = load_run<Acc>(a + p * cs, mc, 1, row);
        index_t j0 = 0;
        with_fixed_length<Acc>(mr, [&](auto height) {
          for (; j0 < whole; j0 += mr) copy_fixed(x + j0, dst + j0 * kc + p * mr, height);
        });
        for (; j0 < mc; j0 += mr) {
          const index_t n = std::min(mr, mc - j0);
          Acc* d = dst + j0 * kc + p * mr;
          for (index_t r = 0; r < n; ++r) d[r] = x[j0 + r];
          for (index_t r = n; r < mr; ++r) d[r] = Acc(0);
        }
      }
      return;
    }
  }
}

/// Packs rows [0, kc) x cols [0, nc) of B into nr-column panels (kc x nr each, row-major),
/// converted to Acc and zero-padded; panels [p0, p1) only, so threads can share the work. `row`
/// holds at least max(kc, nc) and nr * kc elements.
template <class Acc, class S>
void pack_b(const S* b, index_t rs, index_t cs, index_t kc, index_t nc, index_t nr, Acc* dst,
            index_t p0, index_t p1, Acc* row) {
  if (p0 >= p1) return;
  if (cs == 1 || rs != 1) {
    // one conversion per row of B over all of this thread's panels, then spread into them
    // (whole panels by fixed-size copies where nr allows)
    const index_t j_begin = p0 * nr, j_end = std::min(p1 * nr, nc), whole_end = std::min(p1, nc / nr);
    for (index_t p = 0; p < kc; ++p) {
      const Acc* x = load_run<Acc>(b + p * rs + j_begin * cs, j_end - j_begin, cs, row);
      index_t pj = p0;
      with_fixed_length<Acc>(nr, [&](auto width) {
        for (; pj < whole_end; ++pj) copy_fixed(x + (pj * nr - j_begin), dst + pj * nr * kc + p * nr, width);
      });
      for (; pj < p1; ++pj) {
        const index_t j0 = pj * nr;
        const index_t cols = std::min(nr, nc - j0);
        Acc* dst_row = dst + j0 * kc + p * nr;
        const Acc* src = x + (j0 - j_begin);
        for (index_t c = 0; c < cols; ++c) dst_row[c] = src[c];
        for (index_t c = cols; c < nr; ++c) dst_row[c] = Acc(0);
      }
    }
    return;
  }
  for (index_t pj = p0; pj < p1; ++pj) {
    const index_t j0 = pj * nr;
    const index_t cols = std::min(nr, nc - j0);
    Acc* panel = dst + j0 * kc;
    // column-major B (a transposed view): each column is dense along k
    if constexpr (std::is_same_v<Acc, float>) {
      spread_runs(b + j0 * cs, cs, cols, kc, panel, nr, row);  // register transposes
    } else if constexpr (std::is_same_v<Acc, double> && std::is_same_v<remove_cv_t<S>, double>) {
      spread_rows_64(b + j0 * cs, cs, cols, kc, panel, nr);
    } else {
      for (index_t c = 0; c < nr; ++c) {
        if (c < cols) {
          const Acc* x = load_run<Acc>(b + (j0 + c) * cs, kc, 1, row);
          for (index_t p = 0; p < kc; ++p) panel[p * nr + c] = x[p];
        } else {
          for (index_t p = 0; p < kc; ++p) panel[p * nr + c] = Acc(0);
        }
      }
    }
  }
}

/// A register-tile kernel over packed panels whose elements are P (Acc itself, or for the
/// AVX512-BF16 and AMX kernels dwords holding a pair of bf16 values along k), and its blocking.
/// The AMX kernel comes as `chain` instead of `tile`: its panels are padded to whole tiles of 16
/// pairs, its K blocks are multiples of 32 k (but the last), its partial sums pass from block to
/// block through C (so beta must be 0), and `begin` configures each thread's tiles.
/// `direct`, where a kernel has it, is its tile reading B's kc rows ldb apart: B itself where
/// its rows hold the tile's nr columns densely, instead of a packed panel (gemm_packed).
/// `next`, where a kernel has it, is its tile that also prefetches a given number of 64-byte
/// lines from a given address into L2, spread over its first k steps: gemm_packed hands each
/// tile its share of the next packed B panel.
template <class Acc, class P>
struct gemm_kernel {
  void (*tile)(index_t, const P*, const P*, Acc*, index_t, index_t, index_t, index_t, Acc, Acc);
  gemm_blocking bl;
  void (*chain)(index_t, const P*, const P*, Acc*, index_t, index_t, index_t, index_t, Acc, bool, bool) = nullptr;
  void (*begin)() = nullptr;
  void (*direct)(index_t, const P*, const P*, index_t, Acc*, index_t, index_t, index_t, index_t, Acc, Acc) = nullptr;
  void (*next)(index_t, const P*, const P*, Acc*, index_t, index_t, index_t, index_t, Acc, Acc, const P*, index_t) =
      nullptr;
};

/// How the threads of one GEMM share the work: the automatic rule in gemm_packed, or, for
/// measuring, always by rows (B packed once and shared), by columns (each thread packs all of
/// A and its own B panels) or as a grid (each thread packs its own rows of A and its own B
/// panels). PRECIS_GEMM_SPLIT=auto|rows|columns|grid sets it at the first GEMM.
enum class gemm_split { automatic, rows, columns, grid };

inline gemm_split gemm_split_from_env() {
  const char* e = std::getenv("PRECIS_GEMM_SPLIT");
  if (e == nullptr || std::string(e) == "auto") return gemm_split::automatic;
  if (std::string(e) == "rows") return gemm_split::rows;
  if (std::string(e) == "columns") return gemm_split::columns;
  if (std::string(e) == "grid") return gemm_split::grid;
  throw invalid_argument("precis::gemm: PRECIS_GEMM_SPLIT=\"" + std::string(e) + "\"; expected auto, rows, columns or grid");
}

/// The grid of threads (rows x cols = threads) for m_panels x n_panels panels of mr x nr: the one
/// whose busiest thread has the least to do, counting its block of C (mr x nr entries a panel
/// pair) and, at `pack` entries a row or column, the rows of A and the columns of B it packs
/// and reads (a packed value costs several multiply-adds: it is loaded, converted, stored and
/// loaded again from memory or a far cache). Ties go to more row groups.
struct thread_grid {
  index_t rows = 1, cols = 1;
};
inline thread_grid choose_thread_grid(index_t threads, index_t m_panels, index_t n_panels, index_t mr, index_t nr,
                                      index_t pack) {
  thread_grid best{threads, 1};
  index_t best_cost = -1;
  for (index_t tc = 1; tc <= threads; ++tc) {
    if (threads % tc != 0) continue;
    const index_t tr = threads / tc;
    const index_t rows = (m_panels + tr - 1) / tr * mr, cols = (n_panels + tc - 1) / tc * nr;
    const index_t cost = rows * cols + pack * (rows + cols);
    if (best_cost < 0 || cost < best_cost) {
      best = {tr, tc};
      best_cost = cost;
    }
  }
  return best;
}

inline std::atomic<int>& gemm_split_rule() {
  static std::atomic<int> rule{static_cast<int>(gemm_split_from_env())};
  return rule;
}

inline gemm_split gemm_split_in_use() { return static_cast<gemm_split>(gemm_split_rule().load(std::memory_order_relaxed)); }

/// Sets the rule the GEMMs that start after it use (for measuring one against another in one
/// process); returns the previous one.
inline gemm_split set_gemm_split(gemm_split rule) {
  return static_cast<gemm_split>(gemm_split_rule().exchange(static_cast<int>(rule)));
}

template <class Acc>
void generic_tile_kernel_by_value(index_t kc, const Acc* a, const Acc* b, Acc* c, index_t rs_c,
                                  index_t cs_c, index_t mr, index_t nr, Acc alpha, Acc beta) {
  generic_tile_kernel(kc, a, b, c, rs_c, cs_c, mr, nr, alpha, beta);
}

/// Which kernel runs for Acc at instruction-set level isa, and its blocking.
template <class Acc>
gemm_kernel<Acc, Acc> select_kernel(gemm_isa isa) {
#if PRECIS_X86_SIMD
  if constexpr (std::is_same_v<Acc, float> || std::is_same_v<Acc, double>) {
    if (isa >= gemm_isa::avx512)
      return {&avx512_tile_kernel<Acc>, blocking_avx512<Acc>(), nullptr, nullptr, &avx512_tile_kernel_ldb<Acc>,
              &avx512_tile_kernel_next<Acc>};
    if (isa >= gemm_isa::avx2)
      return {&avx2_tile_kernel<Acc>, blocking_for<Acc>(true), nullptr, nullptr, &avx2_tile_kernel_ldb<Acc>};
  }
#if PRECIS_AVX512_FP16_KERNEL
  if constexpr (std::is_same_v<Acc, half>) {  // the emulation's bits in native fp16 lanes
    if (isa >= gemm_isa::avx512_bf16 && cpu_has_avx512_fp16()) return {&avx512_fp16_tile_kernel, blocking_avx512<Acc>()};
  }
#endif
  if constexpr (std::is_same_v<Acc, half> || std::is_same_v<Acc, bfloat16>) {
    if (isa >= gemm_isa::avx512) return {&avx512_narrow_tile_kernel<Acc>, blocking_avx512<Acc>()};
    if (isa >= gemm_isa::avx2) return {&avx2_narrow_tile_kernel<Acc>, blocking_for<Acc>(true)};
  }
#else
  (void)isa;
#endif
#if PRECIS_VECTOR_EXT
  if constexpr (std::is_same_v<Acc, float> || std::is_same_v<Acc, double>) {
    // the scalar tile's K blocks (kc 128), so the same sums; A and B blocks of whole tiles
    constexpr auto mr = static_cast<index_t>(vector_tile_shape<Acc>::rows), nr = static_cast<index_t>(vector_tile_shape<Acc>::cols);
    return {&vector_tile_kernel<Acc>, {mr, nr, 20 * mr, 128, 64 * nr}};
  }
#if PRECIS_NEON_FP16_KERNEL
  if constexpr (std::is_same_v<Acc, half>) {  // native fp16 lanes: the portable tile's bits
    constexpr index_t mr = neon_fp16_tile_shape::rows, nr = neon_fp16_tile_shape::cols;
    if (cpu_has_neon_fp16()) return {&neon_fp16_tile_kernel, {mr, nr, 16 * mr, 128, 64 * nr}};
  }
#endif
  if constexpr (std::is_same_v<Acc, half> || std::is_same_v<Acc, bfloat16>) {
    // kc 128 as the scalar tile's: the same K blocks, so the same bits
    constexpr auto mr = static_cast<index_t>(narrow_tile_shape::rows), nr = static_cast<index_t>(narrow_tile_shape::cols);
    return {&vector_narrow_tile_kernel<Acc>, {mr, nr, 16 * mr, 128, 64 * nr}};
  }
#endif
  return {&generic_tile_kernel_by_value<Acc>, blocking_for<Acc>(false)};
}

/// The blocked loops: C (Acc, any strides) = alpha * A B + beta * C for m x k A and k x n B,
/// packed into panels of kern's element type and walked by its tile; k > 0.
template <class Acc, class P, class SA, class SB>
void gemm_packed(const gemm_kernel<Acc, P>& kern, index_t m, index_t n, index_t k, Acc alpha, const SA* a,
                 index_t rsa, index_t csa, const SB* b, index_t rsb, index_t csb, Acc beta, Acc* c, index_t rsc,
                 index_t csc, int threads) {
  constexpr bool pairs = !std::is_same_v<Acc, P>;  // bf16 pairs: one kernel step per two k
  const bool amx = kern.chain != nullptr;           // pairs padded to whole tiles of 16
  const auto depth = [amx](index_t kc) { return pairs ? (amx ? ((kc + 1) / 2 + 15) / 16 * 16 : (kc + 1) / 2) : kc; };
  const gemm_blocking bl = kern.bl;
  // A product much narrower than the tile and taller than it (a classifier's 10 outputs over a
  // batch: 128 x 10 pads to 132 x 32 in a 12 x 32 tile, 31% of it used) runs as C^T = B^T A^T
  // when that at least halves the padded tile area (12 x 128: 83%), or, while A is at most two
  // A blocks, cuts it by a fifth (fp64's 128 x 10 in 12 x 16 tiles, fp32's 128 x 48: 1.375x;
  // on a 2-core Xeon 1.2-1.6x faster on one thread at 128 rows, 1.7-2.0x on two; at 512-2048
  // rows the same or slower, docs/benchmarks.md). Each C entry is the same chain either way:
  // every product a_ik b_kj is the same number, and K is cut and walked in the same order, so
  // the bits do not change. (Only for operands of one storage type, so that no second
  // instantiation is compiled.) The transposed product never turns back: its area ratio is
  // the inverse.
  if constexpr (std::is_same_v<SA, SB>) {
    const auto padded = [](index_t x, index_t t) { return (x + t - 1) / t * t; };
    const index_t quarters = m <= 2 * bl.mc ? 5 : 8;  // the ratio asked for, in quarters
    if (4 * padded(m, bl.mr) * padded(n, bl.nr) >= quarters * padded(n, bl.mr) * padded(m, bl.nr)) {
      gemm_packed(kern, n, m, k, alpha, b, csb, rsb, a, csa, rsa, beta, c, csc, rsc, threads);
      return;
    }
  }
  // Splitting the rows, each thread owns a contiguous range of whole mr-row panels (balanced to
  // one panel), cut into blocks of at most bl.mc rows: no thread idles on a leftover block.
  const index_t m_panels = (m + bl.mr - 1) / bl.mr;
  // K in equal blocks of at most bl.kc (784 = 4 x 196, not 3 x 256 + 16: no short last block
  // whose fixed per-tile cost is paid for a few k steps)
  // (AMX: rounded up to whole instructions of 32 k, so that block boundaries fall between them)
  const index_t k_blocks = (k + bl.kc - 1) / bl.kc;
  const index_t kc_max = amx ? ((k + k_blocks - 1) / k_blocks + 31) / 32 * 32 : (k + k_blocks - 1) / k_blocks;
  // The AMX kernel's threads each get at least 2^18 multiply-adds. Timed alone on a 2-core
  // Xeon, a second thread lost below about 2^21 (0.47x one thread's speed at 0.2M multiply-adds,
  // 1.0-1.1x at 2M), but inside the CNN's bf16-mixed training step, whose operands come from
  // ops that ran on both cores, a limit of 2^21 made the epoch 8% slower and 2^18 cost nothing
  // (docs/benchmarks.md). The fp32 kernel's gained from a second thread at 0.2M already.
  if (amx) {
    const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    threads = static_cast<int>(std::clamp(work / 0x1p18, 1.0, static_cast<double>(threads)));
  }
  // B read where it lies (kern.direct) when its rows hold whole panels densely, in P itself,
  // lie close (at most 2 KiB apart; further apart, each k's row is on another page, which the
  // hardware prefetchers do not cross, and packing pays) and A has at most two blocks of rows:
  // a panel's kc rows so spaced fall into a few of L1's sets and do not stay there between
  // the tiles that read it, so where more tiles read it, packing it once pays (docs/benchmarks.md).
  // Only a ragged last panel is packed then, and with no panel to share the threads need not
  // wait for each other. (A's rows read in place, 12 streams, measured no gain on small
  // products and a loss on large ones; A is always packed.)
  const P* b_direct = nullptr;
  if constexpr (std::is_same_v<remove_cv_t<SB>, P>) {
    if (kern.direct != nullptr && csb == 1 && rsb * index_t{sizeof(P)} <= 2048 && m <= 2 * bl.mc)
      b_direct = b;
  }
  // Threads split the columns when each gets at least 4 nr-column panels whose packed K block
  // stays within 512 KiB (in its own L2 next to the A block, on the AVX-512 machines measured
  // in docs/benchmarks.md): each packs its own B panels into its own buffer (no barrier) and
  // packs all of A (cheap next to the products on a few threads; not on many, nor next to
  // the AMX kernel's products when A is more than two A blocks, so then the columns are split
  // only when the rows cannot be: then even 2 panels a thread will do, as for conv2d's products
  // of a few output channels, and for the AMX kernel, whose 32-column panels are fed fast
  // enough). 2 panels a thread will also do where B is packed and A is at most two A blocks (a
  // linear layer's forward, X W^T, at a small batch): there packing all of A on each thread
  // costs less than the barrier and reading the other threads' B panels (on a 2-core Xeon,
  // 1.1-1.4x at 128-240 rows; with more rows, or B read in place, the rows stay split:
  // docs/benchmarks.md). Otherwise (tall-skinny products such as im2col's, or wide ones whose B
  // share would spill) they split the rows and share the packed B. Either way each C entry is
  // the same chain of operations.
  const index_t n_panels = (std::min(bl.nc, n) + bl.nr - 1) / bl.nr;
  const index_t share_bytes = (n_panels + threads - 1) / threads * bl.nr * depth(kc_max) * index_t{sizeof(P)};
  const bool rows_suffice = m_panels >= index_t{threads} && (threads > 4 || (amx && m > 2 * bl.mc));
  const bool short_packed = b_direct == nullptr && m <= 2 * bl.mc;
  const index_t min_panels =
      (m_panels < index_t{threads} || amx || short_packed ? 2 : 4) * index_t{threads};
  const gemm_split rule = gemm_split_in_use();
  // Where the rows would be split on more than 4 threads, a grid instead, when
  // choose_thread_grid finds one with more than one row and column group: each thread packs
  // its own rows of A and its own B panels (no barrier) and multiplies them. A share of a few
  // rows reads every B panel, packed by the other threads, from far caches, for a few tiles
  // each: on a 2-core Xeon the 1/16 shares of 1024^3 ran 1.7x (bf16, AMX) and 1.15x (fp32)
  // faster as 256 x 256 blocks than as 64 rows x 1024 with B shared (docs/benchmarks.md).
  constexpr index_t pack_cost = 32;
  const auto grid_for = [&](int t) { return choose_thread_grid(t, m_panels, n_panels, bl.mr, bl.nr, pack_cost); };
  const thread_grid auto_grid = grid_for(threads);
  const bool grid = threads > 1 && (rule == gemm_split::grid || (rule == gemm_split::automatic && threads > 4 && rows_suffice &&
                                                                 auto_grid.cols > 1 && auto_grid.rows > 1));
  const bool split_n = !grid && threads > 1 && n_panels >= min_panels &&
                       (rule == gemm_split::columns ||
                        (rule == gemm_split::automatic && share_bytes <= (index_t{512} << 10) && !rows_suffice));
  const bool private_b = grid || split_n;  // each thread packs its own B panels
  if (!grid) threads = static_cast<int>(std::min<index_t>(threads, split_n ? n_panels : m_panels));
  const index_t nc_max = std::min(bl.nc, (n + bl.nr - 1) / bl.nr * bl.nr);
  P* const bp_shared =
      private_b ? nullptr : scratch<P, 0>(static_cast<std::size_t>(depth(kc_max) * nc_max));

  auto body = [&](int tid, int nthreads) {
    if (kern.begin != nullptr) kern.begin();
    P* const bp = private_b ? scratch<P, 0>(static_cast<std::size_t>(depth(kc_max) * nc_max)) : bp_shared;
    P* ap = scratch<P, 1>(static_cast<std::size_t>((bl.mc + bl.mr) * depth(kc_max)));
    Acc* row = pairs ? nullptr
                     : scratch<Acc, 2>(static_cast<std::size_t>(std::max({kc_max, nc_max, bl.mc + bl.mr, std::max(bl.mr, bl.nr) * kc_max})));
    // this thread's place: row group ti of tr, column group tj of tc (for the grid of the
    // threads OpenMP gave, which may be fewer than asked for)
    const thread_grid g = grid ? grid_for(nthreads) : split_n ? thread_grid{1, nthreads} : thread_grid{nthreads, 1};
    const index_t ti = tid / g.cols, tj = tid % g.cols;
    const index_t r0 = std::min(m, m_panels * ti / g.rows * bl.mr);
    const index_t r1 = std::min(m, m_panels * (ti + 1) / g.rows * bl.mr);
    // this thread's rows in equal blocks of whole panels, at most ~bl.mc rows each
    const index_t my_panels = (r1 - r0 + bl.mr - 1) / bl.mr;
    const index_t m_blocks = std::max<index_t>(1, (my_panels * bl.mr + bl.mc - 1) / bl.mc);
    const index_t mc = (my_panels + m_blocks - 1) / m_blocks * bl.mr;
    for (index_t jc = 0; jc < n; jc += bl.nc) {
      const index_t nc = std::min(bl.nc, n - jc);
      const index_t panels = (nc + bl.nr - 1) / bl.nr;
      for (index_t pc = 0; pc < k; pc += kc_max) {
        const index_t kc = std::min(kc_max, k - pc);
        const index_t d = depth(kc);
        const Acc beta_k = pc == 0 ? beta : Acc(1);
        // each thread packs its share of the B panels: its column group's into its own buffer,
        // or a 1/nthreads share into the shared one, and then they wait for each other
        const index_t p0 = private_b ? panels * tj / g.cols : panels * tid / nthreads;
        const index_t p1 = private_b ? panels * (tj + 1) / g.cols : panels * (tid + 1) / nthreads;
        const index_t j_begin = private_b ? p0 * bl.nr : 0, j_end = private_b ? std::min(nc, p1 * bl.nr) : nc;
        const index_t pb0 = private_b ? 0 : p0, pb1 = private_b ? p1 - p0 : p1;
        // B's whole panels read in place are not packed (panel indices relative to j_begin)
        const index_t full_b = b_direct != nullptr ? nc / bl.nr : 0;
        const index_t pb_first = std::max(pb0, full_b - (private_b ? p0 : 0));
        [[maybe_unused]] const bool share = !private_b && full_b < panels;  // a shared panel is packed
        if constexpr (pairs) {
#if PRECIS_X86_SIMD
          if (amx) pack_b_amx(b + pc * rsb + (jc + j_begin) * csb, rsb, csb, kc, j_end - j_begin, bl.nr, bp, pb0, pb1);
          else pack_b_bf16_pairs(b + pc * rsb + (jc + j_begin) * csb, rsb, csb, kc, j_end - j_begin, bl.nr, bp, pb0, pb1);
#endif
        } else {
          pack_b<Acc>(b + pc * rsb + (jc + j_begin) * csb, rsb, csb, kc, j_end - j_begin, bl.nr, bp, pb_first, pb1, row);
        }
#if defined(_OPENMP)
        if (share) {
#pragma omp barrier
        }
#endif
        for (index_t ic = r0; ic < r1; ic += mc) {
          const index_t mcb = std::min(mc, r1 - ic);
          if constexpr (pairs) {
#if PRECIS_X86_SIMD
            if (amx) pack_a_amx(a + ic * rsa + pc * csa, rsa, csa, mcb, kc, bl.mr, ap);
            else pack_a_bf16_pairs(a + ic * rsa + pc * csa, rsa, csa, mcb, kc, bl.mr, ap);
#endif
          } else {
            pack_a<Acc>(a + ic * rsa + pc * csa, rsa, csa, mcb, kc, bl.mr, ap, row);
          }
          // the tiles of one B panel fetch the next panel (or, after the last, the first one, which
          // the next block of A's rows reads first) into L2, each a share of its lines
          const index_t tiles = (mcb + bl.mr - 1) / bl.mr;
          const index_t panel_lines = d * bl.nr * index_t{sizeof(P)} / 64;
          for (index_t jr = j_begin; jr < j_end; jr += bl.nr) {
            const index_t nr = std::min(bl.nr, nc - jr);
            const P* const next_panel = bp + (jr + bl.nr < j_end ? jr + bl.nr - j_begin : 0) * d;
            for (index_t ir = 0; ir < mcb; ir += bl.mr) {
              const index_t mr = std::min(bl.mr, mcb - ir);
              const index_t t = ir / bl.mr;
              if (kern.next != nullptr && b_direct == nullptr) {
                const index_t l0 = panel_lines * t / tiles, l1 = panel_lines * (t + 1) / tiles;
                kern.next(d, ap + ir * d, bp + (jr - j_begin) * d, c + (ic + ir) * rsc + (jc + jr) * csc, rsc, csc, mr,
                          nr, alpha, beta_k, next_panel + l0 * 64 / index_t{sizeof(P)}, l1 - l0);
              } else if (amx) {
                kern.chain(d, ap + ir * d, bp + (jr - j_begin) * d, c + (ic + ir) * rsc + (jc + jr) * csc, rsc, csc,
                           mr, nr, alpha, pc == 0, pc + kc >= k);
              } else if (b_direct != nullptr && nr == bl.nr) {
                kern.direct(d, ap + ir * d, b_direct + pc * rsb + jc + jr, rsb, c + (ic + ir) * rsc + (jc + jr) * csc,
                            rsc, csc, mr, nr, alpha, beta_k);
              } else {
                kern.tile(d, ap + ir * d, bp + (jr - j_begin) * d, c + (ic + ir) * rsc + (jc + jr) * csc, rsc, csc, mr,
                          nr, alpha, beta_k);
              }
            }
          }
        }
#if defined(_OPENMP)
        if (share) {
#pragma omp barrier
        }
#endif
      }
    }
  };
#if defined(_OPENMP)
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    body(omp_get_thread_num(), omp_get_num_threads());
    return;
  }
#endif
  body(0, 1);
}

/// Products of at most this many multiply-adds, with K within one K block, run as
/// avx2_small_gemm (tensor/gemm/kernel_small.hpp) when the GEMM's kernels are the fp32 / fp64
/// FMA chains: same bits, without the packing and the set-up that cost several times their
/// arithmetic (docs/benchmarks.md).
inline constexpr index_t small_gemm_limit = index_t{1} << 15;

#if PRECIS_X86_SIMD
/// spread_runs of B's columns (a transposed view, columns dense along k) into the small path's
/// panel (PRECIS_OPAQUE: see config.hpp).
template <class S>
PRECIS_OPAQUE void spread_columns(const S* b, index_t cs, index_t n, index_t k, float* panel, index_t width, float* row) {
  spread_runs(b, cs, n, k, panel, width, row);
}

/// The small path: A and B converted to Acc where they are another format (exactly: every
/// input format widens to float or double without rounding), B's rows copied into a padded
/// panel unless they are Acc, dense and whole vectors wide.
template <class Acc, class SA, class SB>
void gemm_small(index_t m, index_t n, index_t k, Acc alpha, const SA* a, index_t rsa, index_t csa, const SB* b,
                index_t rsb, index_t csb, Acc beta, Acc* c, index_t rsc, index_t csc) {
  constexpr index_t L = avx2_vec<Acc>::lanes;
  const Acc* ap = nullptr;
  if constexpr (std::is_same_v<remove_cv_t<SA>, Acc>) {
    ap = a;
  } else {
    Acc* w = scratch<Acc, 4>(static_cast<std::size_t>(m * k + m));
    if (rsa == 1 && csa != 1) {
      // A column-major (a transposed view): each column is a dense run, converted in one call
      // and spread into w's rows (element by element, each value would convert on its own)
      Acc* col = w + m * k;
      for (index_t p = 0; p < k; ++p) {
        const Acc* x = load_run<Acc>(a + p * csa, m, 1, col);
        for (index_t i = 0; i < m; ++i) w[i * k + p] = x[i];
      }
    } else {
      for (index_t i = 0; i < m; ++i) {
        const Acc* x = load_run<Acc>(a + i * rsa, k, csa, w + i * k);
        if (x != w + i * k) std::copy_n(x, k, w + i * k);
      }
    }
    ap = w;
    rsa = k;
    csa = 1;
  }
  const Acc* bp = nullptr;
  index_t ldb = rsb;
  if constexpr (std::is_same_v<remove_cv_t<SB>, Acc>) {
    if (csb == 1 && n % L == 0) bp = b;
  }
  if (bp == nullptr) {
    const index_t width = (n + L - 1) / L * L;
    Acc* w = scratch<Acc, 5>(static_cast<std::size_t>(k * width + n * k));
    Acc* row = w + k * width;
    bool spread = false;
    if constexpr (std::is_same_v<Acc, float>) {
      if (rsb == 1 && csb != 1) {  // columns dense along k (a transposed view): register transposes
        spread_columns(b, csb, n, k, w, width, row);
        spread = true;
      }
    }
    for (index_t p = 0; !spread && p < k; ++p) {
      const Acc* x = load_run<Acc>(b + p * rsb, n, csb, row);
      std::copy_n(x, n, w + p * width);
      std::fill(w + p * width + n, w + (p + 1) * width, Acc(0));
    }
    bp = w;
    ldb = width;
  }
  avx2_small_gemm<Acc>(m, n, k, alpha, ap, rsa, csa, bp, ldb, beta, c, rsc, csc);
}
#endif

/// C (Acc, any strides) = alpha * A B + beta * C for m x k A and k x n B of any storage, with
/// the best kernel at or below instruction-set level max_isa (and the process's cap).
template <class Acc, class SA, class SB>
void gemm_blocked(index_t m, index_t n, index_t k, Acc alpha, const SA* a, index_t rsa,
                  index_t csa, const SB* b, index_t rsb, index_t csb, Acc beta, Acc* c,
                  index_t rsc, index_t csc, int threads, gemm_isa max_isa = gemm_isa::amx_bf16) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta * C, with beta == 0 writing zeros over whatever C held
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        Acc& x = c[i * rsc + j * csc];
        x = beta == Acc(0) ? Acc(0) : beta * x;
      }
    return;
  }
  const gemm_isa isa = std::min(gemm_isa_in_use(), max_isa);
#if PRECIS_X86_SIMD
  // products small enough for the small path (below) take it at every level: the AMX and
  // vdpbf16ps kernels' packing and set-up cost several times the arithmetic of an attention
  // head's 16 x 16 x 16 product (docs/benchmarks.md)
  const bool small = isa >= gemm_isa::avx2 && k <= blocking_for<Acc>(true).kc && m * n * k <= small_gemm_limit;
  if constexpr (std::is_same_v<Acc, float> && std::is_same_v<remove_cv_t<SA>, bfloat16> &&
                std::is_same_v<remove_cv_t<SB>, bfloat16>) {
    if (isa >= gemm_isa::amx_bf16 && !small) {
      // 32 x 32 blocks of C; K blocks of up to 1024 and B blocks of 1024 x 1024 (2 MiB, an L2).
      // Between K blocks every C block's raw sums go out to C and come back (from L3 once C
      // outgrows L2), so fewer, longer K blocks pay: on an Emerald Rapids core 1024 x 1024 ran
      // 1.1-1.2x faster than 512 x 1536 at 1024^3 and 2048^3 (docs/benchmarks.md); the sums do
      // not depend on the blocking.
      const gemm_kernel<float, std::uint32_t> kern{nullptr, {32, 32, 256, 1024, 1024}, &amx_bf16_chain_kernel, &amx_bf16_begin};
      if (beta == 0.0f) {
        gemm_packed(kern, m, n, k, alpha, a, rsa, csa, b, rsb, csb, 0.0f, c, rsc, csc, threads);
        return;
      }
      // the partial sums pass through C between K blocks, so C's old values wait in a
      // workspace: S first, then C = beta C + alpha S, one rounding (as the kernels' epilogue)
      auto* w = scratch<float, 3>(static_cast<std::size_t>(m * n));
      gemm_packed(kern, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, 0.0f, w, n, index_t{1}, threads);
      amx_bf16_add_into(m, n, alpha, w, beta, c, rsc, csc);
      return;
    }
    if (isa >= gemm_isa::avx512_bf16 && !small) {
      const gemm_kernel<float, std::uint32_t> kern{&avx512_bf16_tile_kernel, blocking_avx512<float>()};
      gemm_packed(kern, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc, threads);
      return;
    }
  }
  if constexpr (std::is_same_v<Acc, float> || std::is_same_v<Acc, double>) {
    if (small) {
      gemm_small(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
      return;
    }
  }
#endif
  gemm_packed(select_kernel<Acc>(isa), m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc, threads);
}

/// An accumulator whose GEMM is not the blocked one (the tensor-core models of precis::tc):
/// specialized with a static run(alpha, A, B, beta, C, threads) taking checked 2-D views.
template <class Acc>
struct gemm_override : std::false_type {};

inline int default_gemm_threads(index_t m, index_t n, index_t k) {
  // below ~1 MFLOP a second thread costs more than it saves
  return threads_for(m * n * k, index_t{1} << 19);
}

template <class A, class B, class C>
void check_gemm(const char* op, const A& a, const B& b, const C& c) {
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2 || a.shape()[1] != b.shape()[0] ||
      c.shape()[0] != a.shape()[0] || c.shape()[1] != b.shape()[1]) {
    throw shape_error(std::string(op) + ": A " + a.shape().str() + " times B " + b.shape().str() +
                      " into C " + c.shape().str() +
                      "; expected A [m, k], B [k, n] and C [m, n]");
  }
  if (may_overlap(c, a) || may_overlap(c, b)) {
    throw aliasing_error(std::string(op) + ": C " + c.shape().str() +
                         " shares memory with A or B; expected C disjoint from both");
  }
}

}  // namespace detail

/// C = alpha * A B + beta * C, products accumulated in Acc. A, B, C: 2-D tensors or views of
/// any storage and strides (transpose with .transpose()); beta == 0 ignores C's old contents.
/// `threads` <= 0 picks a count from the problem size (1 without OpenMP).
template <class Acc, tensor_like A, tensor_like B, tensor_like Cm>
void gemm(const Acc& alpha, const A& a_, const B& b_, const Acc& beta, Cm&& c_, int threads = 0) {
  const auto a = as_view(a_);
  const auto b = as_view(b_);
  const auto c = as_mutable_view(c_);
  detail::check_gemm("precis::gemm", a, b, c);
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (threads <= 0) threads = detail::default_gemm_threads(m, n, k);
  if constexpr (detail::gemm_override<Acc>::value) {
    detail::gemm_override<Acc>::run(alpha, a, b, beta, c, threads);
  } else {
    using SC = storage_of<Cm>;
    if constexpr (std::is_same_v<SC, Acc>) {
      detail::gemm_blocked<Acc>(m, n, k, alpha, a.data(), a.strides()[0], a.strides()[1], b.data(),
                                b.strides()[0], b.strides()[1], beta, c.data(), c.strides()[0],
                                c.strides()[1], threads);
    } else {
      // accumulate in an Acc workspace, then round once into C's storage
      auto w = Tensor<Acc, Acc>::uninitialized(Shape{m, n});
      detail::gemm_blocked<Acc>(m, n, k, alpha, a.data(), a.strides()[0], a.strides()[1], b.data(),
                                b.strides()[0], b.strides()[1], Acc(0), w.data(), n, index_t{1},
                                threads);
      for (index_t i = 0; i < m; ++i) {
        for (index_t j = 0; j < n; ++j) {
          SC& cij = c(i, j);
          cij = beta == Acc(0) ? detail::store<SC>(w(i, j))
                               : detail::store<SC>(w(i, j) + beta * detail::load<Acc>(cij));
        }
      }
    }
  }
}

/// A new tensor A B (storage: the promotion of A's and B's), accumulated in Acc.
template <class Acc, tensor_like A, tensor_like B>
auto matmul(const A& a, const B& b, int threads = 0) {
  using R = detail::binary_result_t<A, B>;
  const auto av = as_view(a);
  const auto bv = as_view(b);
  if (av.rank() != 2 || bv.rank() != 2) {
    throw shape_error("precis::matmul: A " + av.shape().str() + " times B " + bv.shape().str() +
                      "; expected 2-D tensors [m, k] and [k, n]");
  }
  auto c = R::uninitialized(Shape{av.shape()[0], bv.shape()[1]});
  gemm<Acc>(Acc(1), av, bv, Acc(0), c, threads);
  return c;
}

}  // namespace precis
