// GEMM: every input format and accumulator against an exact reference, within
// gamma_K |A||B| in the accumulator's unit roundoff (Higham eq. 3.12), on ragged shapes,
// transposed views, alpha/beta, and across thread counts.
#include <cstdio>
#include <bit>
#include <initializer_list>
#include <limits>
#include <random>
#include <tuple>

#include "precis/config.hpp"
#if PRECIS_X86_SIMD
#include <immintrin.h>
#endif

#include "support.hpp"

using namespace precis;
using namespace tensor_test;

namespace {

/// Checks C = alpha A B + beta C0 entry by entry: |C - exact| <= bound, where the bound is
/// gamma_{K+2} (|alpha| |A||B| + |beta| |C0|) in Acc's u (K products and sums, the alpha and beta
/// terms), plus input rounding when A or B is wider than Acc, plus one rounding into C's storage.
template <class Acc, class VA, class VB, class SC>
void expect_gemm_within_bound(double alpha, const VA& a, const VB& b, double beta,
                              const Tensor<SC>& c0, const Tensor<SC>& c) {
  using SA = storage_of<VA>;
  using SB = storage_of<VB>;
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  exact_t g = gamma<Acc>(k + 2);
  if (!detail::converts_exactly<SA, Acc>() || !detail::converts_exactly<SB, Acc>()) {
    g = g + 2 * exact_t(unit_roundoff<Acc>()) * (1 + g);
  }
  const exact_t uc = std::is_same_v<SC, Acc> ? exact_t(0) : exact_t(unit_roundoff<SC>());
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      exact_t dot = 0, mag = 0;
      for (index_t p = 0; p < k; ++p) {
        const exact_t t = to_exact(a(i, p)) * to_exact(b(p, j));
        dot += t;
        mag += abs(t);
      }
      const exact_t want = exact_t(alpha) * dot + (beta == 0 ? exact_t(0) : exact_t(beta) * to_exact(c0(i, j)));
      const exact_t scale = abs(exact_t(alpha)) * mag + abs(exact_t(beta)) * abs(beta == 0 ? exact_t(0) : to_exact(c0(i, j)));
      const exact_t err = abs(to_exact(c(i, j)) - want);
      ASSERT_LE(err, g * scale * (1 + uc) + uc * abs(want) + exact_t(format_traits<SC>::min_subnormal()))
          << "C(" << i << "," << j << ") of " << m << "x" << k << "x" << n
          << " A=" << format_traits<SA>::name << " Acc=" << format_traits<Acc>::name;
    }
}

template <class S, class Acc, class SC = Acc>
void run_case(index_t m, index_t k, index_t n, bool ta, bool tb, double alpha, double beta, int threads) {
  // stored transposed when ta/tb, so op(A) is a strided view
  const auto a_store = random_tensor<S>(ta ? Shape{k, m} : Shape{m, k}, -1, 1, static_cast<std::uint64_t>(m * 7 + k));
  const auto b_store = random_tensor<S>(tb ? Shape{n, k} : Shape{k, n}, -1, 1, static_cast<std::uint64_t>(n * 11 + k));
  const auto a = ta ? a_store.transpose() : a_store.view();
  const auto b = tb ? b_store.transpose() : b_store.view();
  auto c0 = random_tensor<SC>({m, n}, -1, 1, 99);
  auto c = c0;
  gemm<Acc>(Acc(alpha), a, b, Acc(beta), c, threads);
  expect_gemm_within_bound<Acc>(alpha, a, b, beta, c0, c);
}

template <class S>
class Gemm : public ::testing::Test {};
TYPED_TEST_SUITE(Gemm, StorageFormats);

}  // namespace

TYPED_TEST(Gemm, FloatAccumulatorRaggedAndTransposed) {
  using S = TypeParam;
  if constexpr (std::is_same_v<S, mp50>) {
    GTEST_SKIP() << "multiprecision inputs accumulate in their own type (next test)";
  } else {
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 5, 17}, {13, 260, 9}, {20, 40, 35}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) run_case<S, float>(m, k, n, ta, tb, 1.0, 0.0, 1);
    }
    run_case<S, float>(30, 40, 20, false, false, -0.75, 0.5, 2);
    run_case<S, float, S>(13, 70, 20, false, true, 1.0, 0.25, 1);  // C in the input format
  }
}

TYPED_TEST(Gemm, WideAndGenericAccumulators) {
  using S = TypeParam;
  run_case<S, double>(13, 130, 11, false, true, 1.5, -1.0, 1);
  run_case<S, mp50>(9, 33, 6, true, false, 1.0, 0.0, 1);
  if constexpr (!std::is_same_v<S, mp50> && !std::is_same_v<S, double>) {
    // accumulating in a 16-bit format through the generic kernel
    if constexpr (!std::is_same_v<S, float>) run_case<S, half, float>(6, 10, 5, false, false, 1.0, 0.0, 1);
  }
}

template <class S>
void expect_thread_counts_identical(index_t m, index_t k, index_t n, bool b_transposed = false) {
  const auto a = random_tensor<S>({m, k}, -1, 1, 1);
  const auto b = random_tensor<S>(b_transposed ? Shape{n, k} : Shape{k, n}, -1, 1, 2);
  const auto product = [&](Tensor<float>& c, int threads) {
    if (b_transposed)
      gemm<float>(1.0f, a, b.transpose(), 0.0f, c, threads);
    else
      gemm<float>(1.0f, a, b, 0.0f, c, threads);
  };
  Tensor<float> c1({m, n}), c2({m, n});
  product(c1, 1);
  for (int threads : {2, 6, 16}) {
    product(c2, threads);
    EXPECT_TRUE(std::equal(c1.begin(), c1.end(), c2.begin()))
        << m << "x" << k << "x" << n << (b_transposed ? " (B transposed), " : ", ") << threads
        << " threads";
  }
}

TEST(GemmThreads, BitIdenticalAcrossThreadCounts) {
  // two threads split the columns (n = 259: 9 panels of 32) or, with fewer panels, the rows
  // (n = 40, 301 rows); 6 and 16 threads split the rows or, where each gets at least a panel, form
  // a grid (fp32: 26 row panels of 12; AMX: 10 of 32); K in unequal blocks (517 = 173 + 173 + 171),
  // several N blocks (3100 > nc)
  expect_thread_counts_identical<bfloat16>(301, 517, 259);
  expect_thread_counts_identical<float>(301, 517, 259);
  expect_thread_counts_identical<float>(301, 517, 40);
  // a linear layer's forward at a small batch (B = W^T packed, A at most two blocks of rows):
  // two threads split the 4 panels' columns, 2 each
  expect_thread_counts_identical<float>(128, 300, 128, true);
  expect_thread_counts_identical<bfloat16>(128, 300, 128, true);
  for (int rep = 0; rep < 3; ++rep) {
    expect_thread_counts_identical<half>(150, 700, 3100);
    expect_thread_counts_identical<bfloat16>(150, 700, 3100);
  }
}

TEST(GemmThreads, GridOfThreadsBalancesBlocksAndPacking) {
  // 1024^3 on 16 threads, AMX panels (32 x 32): every grid gives each thread 2^16 entries of C,
  // and 4 x 4 packs the fewest rows and columns (256 + 256)
  auto g = detail::choose_thread_grid(16, 32, 32, 32, 32, 32);
  EXPECT_EQ(g.rows, 4);
  EXPECT_EQ(g.cols, 4);
  // fp32 panels (12 x 32; 86 row panels): 2 x 8 has the smallest blocks (516 x 128), 4 x 4
  // blocks 2% larger (264 x 256) but 124 fewer rows and columns to pack
  g = detail::choose_thread_grid(16, 86, 32, 12, 32, 32);
  EXPECT_EQ(g.rows, 4);
  EXPECT_EQ(g.cols, 4);
  // few columns: all the threads on the rows
  g = detail::choose_thread_grid(8, 200, 1, 12, 32, 32);
  EXPECT_EQ(g.rows, 8);
  EXPECT_EQ(g.cols, 1);
  // a prime thread count has only the two splits: here the same blocks (840 x 320 or 120 x
  // 2240), the columns packing fewer
  g = detail::choose_thread_grid(7, 70, 70, 12, 32, 32);
  EXPECT_EQ(g.rows, 1);
  EXPECT_EQ(g.cols, 7);
}

// One packer against its definition: panel[p * width + r] = x[r * xs + p] for r < rows, zeros
// past them, for each width, rows and kc given, random words (any bit pattern).
template <class Word, class Spread>
void expect_spread_is_the_interleave(Spread spread, std::initializer_list<index_t> widths,
                                     std::initializer_list<index_t> kcs) {
  std::mt19937_64 rng(7);
  for (const index_t width : widths) {
    for (const index_t rows : {width, width - 1, index_t{1}}) {
      if (rows < 1) continue;
      for (const index_t kc : kcs) {
        const index_t xs = kc + 3;
        std::vector<Word> x(static_cast<std::size_t>(rows * xs));
        for (auto& v : x) v = static_cast<Word>(rng());
        std::vector<Word> panel(static_cast<std::size_t>(kc * width),
                                static_cast<Word>(0xDEADBEEFDEADBEEFull));
        spread(x.data(), xs, rows, kc, panel.data(), width);
        for (index_t p = 0; p < kc; ++p)
          for (index_t r = 0; r < width; ++r) {
            const Word want = r < rows ? x[static_cast<std::size_t>(r * xs + p)] : Word{0};
            ASSERT_EQ(panel[static_cast<std::size_t>(p * width + r)], want)
                << sizeof(Word) * 8 << "-bit words, width " << width << ", rows " << rows << ", kc "
                << kc << ", k " << p << ", row " << r;
          }
      }
    }
  }
}

// The packers' interleave, against the loop that defines it: every width the tiles use (whole
// panels take an unrolled path of their own) and odd ones, partial panels (zero padding),
// k not a multiple of 4, rows further apart than k; any bit pattern (NaN payloads too) moves
// unchanged.
TEST(GemmPacking, SpreadRowsIsTheInterleaveBitForBit) {
  expect_spread_is_the_interleave<std::uint32_t>(
      detail::spread_rows_32, {1, 2, 3, 5, 6, 7, 8, 12, 16, 32}, {1, 3, 4, 7, 64, 65});
}

// The same for 64-bit elements (fp64's panels): the fp64 tiles' heights and widths (6, 8, 12,
// 16) and odd ones, partial panels, odd kc (the 2 x 2 transposes' tail).
TEST(GemmPacking, SpreadRows64IsTheInterleaveBitForBit) {
  expect_spread_is_the_interleave<std::uint64_t>(detail::spread_rows_64, {1, 2, 3, 6, 8, 12, 16},
                                                 {1, 2, 3, 64, 65});
}

// pack_a's panels do not depend on how A lies: a column-major A (a transposed view; whole
// panels take fixed-size copies of each k's run, converted first when A is another format than
// Acc) packs into the same panels as the same values row-major, for the tiles' heights and
// others, with a partial last panel.
template <class Acc, class S>
void expect_column_major_packs_as_row_major() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const index_t mr : {4, 5, 6, 12}) {
    for (const index_t mc : {mr, 3 * mr + 1}) {
      const index_t kc = 37, padded = (mc + mr - 1) / mr * mr;
      std::vector<S> rm(static_cast<std::size_t>(mc * kc)), cm(rm.size());
      for (index_t i = 0; i < mc; ++i)
        for (index_t p = 0; p < kc; ++p) {
          const S v = S(u(rng));
          rm[static_cast<std::size_t>(i * kc + p)] = v;
          cm[static_cast<std::size_t>(p * mc + i)] = v;
        }
      std::vector<Acc> from_rm(static_cast<std::size_t>(padded * kc)), from_cm(from_rm.size()),
          row(static_cast<std::size_t>((mc + mr) * kc));
      detail::pack_a<Acc>(rm.data(), kc, index_t{1}, mc, kc, mr, from_rm.data(), row.data());
      detail::pack_a<Acc>(cm.data(), index_t{1}, mc, mc, kc, mr, from_cm.data(), row.data());
      for (std::size_t e = 0; e < from_rm.size(); ++e)
        ASSERT_EQ(from_cm[e], from_rm[e]) << "mr " << mr << ", mc " << mc << ", element " << e;
    }
  }
}

// pack_b's panels likewise: B row-major (whole panels by fixed-size copies of each k's run)
// and column-major pack alike, for the tiles' widths and others, a ragged last panel, and a
// thread's share of the panels (p0 > 0).
template <class Acc, class S>
void expect_row_major_b_packs_as_column_major() {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const index_t nr : {4, 5, 8, 16, 32}) {
    for (const index_t nc : {nr, 3 * nr + 2}) {
      const index_t kc = 23, panels = (nc + nr - 1) / nr;
      std::vector<S> rm(static_cast<std::size_t>(kc * nc)), cm(rm.size());
      for (index_t p = 0; p < kc; ++p)
        for (index_t j = 0; j < nc; ++j) {
          const S v = S(u(rng));
          rm[static_cast<std::size_t>(p * nc + j)] = v;
          cm[static_cast<std::size_t>(j * kc + p)] = v;
        }
      for (const index_t p0 : {index_t{0}, panels - 1}) {
        std::vector<Acc> from_rm(static_cast<std::size_t>(panels * nr * kc), Acc(7)), from_cm(from_rm.size(), Acc(7)),
            row(static_cast<std::size_t>((nc + nr) * kc));
        detail::pack_b<Acc>(rm.data(), nc, index_t{1}, kc, nc, nr, from_rm.data(), p0, panels, row.data());
        detail::pack_b<Acc>(cm.data(), index_t{1}, kc, kc, nc, nr, from_cm.data(), p0, panels, row.data());
        for (std::size_t e = 0; e < from_rm.size(); ++e)
          ASSERT_EQ(from_rm[e], from_cm[e]) << "nr " << nr << ", nc " << nc << ", p0 " << p0 << ", element " << e;
      }
    }
  }
}

TEST(GemmPacking, RowMajorBPacksAsColumnMajor) {
  expect_row_major_b_packs_as_column_major<float, float>();
  expect_row_major_b_packs_as_column_major<double, double>();
  expect_row_major_b_packs_as_column_major<float, bfloat16>();
  expect_row_major_b_packs_as_column_major<float, half>();
}

TEST(GemmPacking, ColumnMajorAPacksAsRowMajor) {
  expect_column_major_packs_as_row_major<float, float>();
  expect_column_major_packs_as_row_major<double, double>();
  expect_column_major_packs_as_row_major<float, bfloat16>();
  expect_column_major_packs_as_row_major<float, half>();
}

TEST(GemmSemantics, BetaZeroIgnoresNaNAndEmptyK) {
  Tensor<float> a({3, 0}), b({0, 4}), c({3, 4});
  for (float& x : c) x = std::nanf("");
  gemm<float>(1.0f, a, b, 0.0f, c);  // K = 0, beta = 0: C = 0
  for (float x : c) EXPECT_EQ(x, 0.0f);
  for (float& x : c) x = 2.0f;
  gemm<float>(1.0f, a, b, 0.5f, c);  // K = 0: C = beta C
  for (float x : c) EXPECT_EQ(x, 1.0f);
  const auto a2 = random_tensor<float>({3, 6}, -1, 1, 3);
  const auto b2 = random_tensor<float>({6, 4}, -1, 1, 4);
  for (float& x : c) x = std::nanf("");
  gemm<float>(1.0f, a2, b2, 0.0f, c);
  for (float x : c) EXPECT_FALSE(std::isnan(x));
  const auto p = matmul<double>(a2, b2);
  static_assert(std::is_same_v<decltype(p), const Tensor<float>>);
  EXPECT_EQ(p.shape(), (Shape{3, 4}));
}

TEST(GemmErrors, ShapesAndAliasing) {
  Tensor<float> a({3, 4}), b({5, 2}), c({3, 2});
  try {
    gemm<float>(1.0f, a, b, 0.0f, c);
    FAIL();
  } catch (const shape_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("precis::gemm"), std::string::npos);
    EXPECT_NE(msg.find("[3, 4]"), std::string::npos);
    EXPECT_NE(msg.find("[5, 2]"), std::string::npos);
  }
  EXPECT_THROW(matmul<float>(Tensor<float>({2, 3, 4}), b), shape_error);
  Tensor<float> sq({4, 4});
  EXPECT_THROW(gemm<float>(1.0f, sq, sq, 0.0f, sq), aliasing_error);
  EXPECT_THROW(gemm<float>(1.0f, sq.slice(0, 0, 2), sq.slice(0, 0, 4), 0.0f, sq.slice(0, 2, 4)), aliasing_error);
}

TEST(GemmLarge, BlockedPathsAgainstDoubleReference) {
  // several K blocks (kc = 256) and N blocks, fp16 inputs: compare with an fp64 GEMM of the
  // same (exactly converted) inputs, within gamma_K in fp32 plus gamma_K in fp64
  const index_t m = 150, k = 700, n = 3100;
  const auto a = random_tensor<half>({m, k}, -1, 1, 5);
  const auto b = random_tensor<half>({k, n}, -1, 1, 6);
  Tensor<float> c({m, n});
  gemm<float>(1.0f, a, b, 0.0f, c);
  const auto ref = matmul<double>(astype<double>(a), astype<double>(b));
  const double g = k * std::ldexp(1.0, -24) / (1 - k * std::ldexp(1.0, -24)) + 1e-12;
  for (index_t i = 0; i < m; i += 7)
    for (index_t j = 0; j < n; j += 13) {
      double mag = 0;
      for (index_t p = 0; p < k; ++p) mag += std::abs(double(static_cast<float>(a(i, p))) * static_cast<float>(b(p, j)));
      ASSERT_LE(std::abs(c(i, j) - ref(i, j)), g * mag) << i << "," << j;
    }
}

namespace {

/// The portable path's result for a 16-bit accumulator T, written out: K is cut into
/// ceil(K / 128) equal blocks; within a block ab = ab + a * b in T's arithmetic (each product and
/// each sum rounded to T); each block is added into C as c = alpha * ab + beta_k * c, with
/// beta_k = beta for the first block (beta == 0: C is not read) and 1 after.
template <class T, class VA, class VB>
Tensor<T> portable_16bit_gemm(T alpha, const VA& a, const VB& b, T beta, const Tensor<T>& c0) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const index_t blocks = (k + 127) / 128, kc = (k + blocks - 1) / blocks;
  Tensor<T> c = c0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        T ab(0);
        for (index_t p = p0; p < std::min(k, p0 + kc); ++p) ab = ab + T(a(i, p)) * T(b(p, j));
        const T beta_k = p0 == 0 ? beta : T(1);
        const T t = alpha * ab;
        c(i, j) = beta_k == T(0) ? t : t + beta_k * c(i, j);
      }
  return c;
}

template <class T>
bool same_bits(T x, T y) {
  const float fx = static_cast<float>(x), fy = static_cast<float>(y);
  if (std::isnan(fx) || std::isnan(fy)) return std::isnan(fx) && std::isnan(fy);
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

template <class T>
void expect_16bit_gemm_matches_portable(index_t m, index_t k, index_t n, bool ta, bool tb, double alpha, double beta, int threads,
                                        double lo_exp = -14, double hi_exp = 4) {
  // magnitudes 2^lo_exp .. 2^hi_exp with random signs: by default fp16 products underflow into
  // the subnormals and to zero and sums cancel; wider ranges overflow to inf and give NaN
  Tensor<T> a_store(ta ? Shape{k, m} : Shape{m, k}), b_store(tb ? Shape{n, k} : Shape{k, n});
  fill_log_uniform(a_store, lo_exp, hi_exp, static_cast<std::uint64_t>(m * 31 + k), true);
  fill_log_uniform(b_store, lo_exp, hi_exp, static_cast<std::uint64_t>(n * 37 + k), true);
  const auto a = ta ? a_store.transpose() : a_store.view();
  const auto b = tb ? b_store.transpose() : b_store.view();
  Tensor<T> c0({m, n});
  fill_uniform(c0, -4, 4, 7);
  Tensor<T> c = c0;
  gemm<T>(T(alpha), a, b, T(beta), c, threads);
  const auto want = portable_16bit_gemm(T(alpha), a, b, T(beta), c0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      ASSERT_TRUE(same_bits(c(i, j), want(i, j)))
          << format_traits<T>::name << " C(" << i << "," << j << ") of " << m << "x" << k << "x" << n << ": "
          << static_cast<float>(c(i, j)) << " vs the portable arithmetic's " << static_cast<float>(want(i, j));
}

void expect_16bit_gemm_cases() {
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 5, 17}, {13, 300, 33}, {37, 129, 70}, {12, 40, 64}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        expect_16bit_gemm_matches_portable<half>(m, k, n, ta, tb, 1.0, 0.0, 1);
        expect_16bit_gemm_matches_portable<bfloat16>(m, k, n, ta, tb, 1.0, 0.0, 1);
      }
  }
  expect_16bit_gemm_matches_portable<half>(50, 260, 40, false, false, -0.75, 0.3, 2);  // beta * c rounds
  expect_16bit_gemm_matches_portable<bfloat16>(50, 260, 40, false, true, 1.3, -0.7, 2);
  // short K and magnitudes near 1: beta * C is as large as A B, so its own rounding shows
  expect_16bit_gemm_matches_portable<half>(24, 3, 32, false, false, 1.0, 0.3, 1, -3, 0);
  expect_16bit_gemm_matches_portable<bfloat16>(24, 3, 32, false, false, 0.7, 0.3, 1, -3, 0);
  // overflow to infinity, inf - inf = NaN
  expect_16bit_gemm_matches_portable<half>(12, 6, 20, false, false, 1.0, 0.0, 1, -14, 10);
  expect_16bit_gemm_matches_portable<bfloat16>(12, 6, 20, false, false, 1.0, 0.0, 1, 60, 66);
  expect_16bit_gemm_matches_portable<bfloat16>(12, 6, 20, false, false, 1.0, 0.0, 1, -75, -60);  // fp32 subnormal products
}

}  // namespace

TEST(Gemm16BitAccumulator, BitIdenticalToThePortableArithmetic) {
  // the "-true" policies' GEMM at every level this CPU has (the portable 4 x 4 tile, AVX2's
  // 6 x 16, AVX-512's 6 x 32, and from avx512_bf16 up fp16 in AVX512-FP16's native lanes where
  // the CPU has them): ragged tiles, transposed views, several K blocks, alpha and beta, two
  // threads
  for (gemm_isa isa : {gemm_isa::portable, gemm_isa::avx2, gemm_isa::avx512, gemm_isa::avx512_bf16}) {
    if (isa > gemm_isa_available()) continue;
    SCOPED_TRACE(to_string(isa));
    const gemm_isa before = limit_gemm_isa(isa);
    expect_16bit_gemm_cases();
    limit_gemm_isa(before);
  }
}

TEST(Gemm16BitAccumulator, Avx512Fp16IsTheEmulationBitForBit) {
  // vmulph and vaddph in 32 fp16 lanes against the AVX-512 emulation in fp32 lanes (and, above,
  // against the portable arithmetic written out): full and ragged tiles, subnormal products,
  // overflow to infinity and NaN, beta * C, two threads
#if !PRECIS_AVX512_FP16_KERNEL
  GTEST_SKIP() << "this compiler does not build the AVX512-FP16 kernel (GCC 12 or later, or -mavx512fp16)";
#else
  if (!detail::cpu_has_avx512_fp16() || gemm_isa_available() < gemm_isa::avx512_bf16) {
    GTEST_SKIP() << "AVX512-FP16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  }
  ASSERT_EQ(detail::select_kernel<half>(gemm_isa::avx512_bf16).tile, &detail::avx512_fp16_tile_kernel);
  ASSERT_NE(detail::select_kernel<half>(gemm_isa::avx512).tile, &detail::avx512_fp16_tile_kernel);
  struct shape_case {
    index_t m, k, n;
    bool ta, tb;
    double alpha, beta, lo, hi;
    int threads;
  };
  for (const shape_case& q : {shape_case{6, 128, 32, false, false, 1.0, 0.0, -14, 4, 1}, {12, 257, 64, true, false, 1.0, 0.5, -14, 4, 1},
                              {37, 300, 70, false, true, -0.75, 0.3, -14, 4, 2}, {7, 5, 17, true, true, 1.0, 0.0, -3, 0, 1},
                              {12, 6, 20, false, false, 1.0, 0.0, -14, 10, 1}, {130, 600, 97, false, false, 1.0, 0.0, -20, -2, 2}}) {
    Tensor<half> a_store(q.ta ? Shape{q.k, q.m} : Shape{q.m, q.k}), b_store(q.tb ? Shape{q.n, q.k} : Shape{q.k, q.n});
    fill_log_uniform(a_store, q.lo, q.hi, static_cast<std::uint64_t>(q.m * 31 + q.k), true);
    fill_log_uniform(b_store, q.lo, q.hi, static_cast<std::uint64_t>(q.n * 37 + q.k), true);
    const auto a = q.ta ? a_store.transpose() : a_store.view();
    const auto b = q.tb ? b_store.transpose() : b_store.view();
    Tensor<half> c0({q.m, q.n});
    fill_uniform(c0, -4, 4, 7);
    Tensor<half> emulated = c0, native = c0;
    const gemm_isa before = limit_gemm_isa(gemm_isa::avx512);
    gemm<half>(half(q.alpha), a, b, half(q.beta), emulated, q.threads);
    limit_gemm_isa(gemm_isa::avx512_bf16);
    gemm<half>(half(q.alpha), a, b, half(q.beta), native, q.threads);
    limit_gemm_isa(before);
    std::size_t special = 0;
    for (index_t i = 0; i < emulated.size(); ++i) {
      const auto e = std::bit_cast<std::uint16_t>(emulated.data()[i]), v = std::bit_cast<std::uint16_t>(native.data()[i]);
      ASSERT_EQ(e, v) << "C entry " << i << " of " << q.m << "x" << q.k << "x" << q.n << ": the emulation's bits " << e
                      << ", AVX512-FP16's " << v;
      special += (e & 0x7c00u) == 0x7c00u || (e & 0x7c00u) == 0 ? 1u : 0u;  // inf, NaN, zero, subnormal
    }
    if (q.hi >= 10 || q.hi <= -2) {
      EXPECT_GT(special, 0u) << q.m << "x" << q.k << "x" << q.n;  // the data reach those cases
    }
  }
#endif
}

TEST(Gemm16BitAccumulator, Bf16NaNsComeOutAsTheQuietNaN) {
  // NaN inputs with every kind of payload (signalling, all mantissa bits set, either sign) and
  // infinities whose products and sums give x86's default NaN: every NaN of C is 0x7fc0 or
  // 0xffc0, as the portable arithmetic rounds one (the vector kernels skip that check inside
  // their K loop), over full 6 x 32 tiles and ragged ones
  const std::uint16_t odd[] = {0x7f81, 0xff81, 0x7fff, 0xffff, 0x7fc1, 0x7f80, 0xff80};
  for (gemm_isa isa : {gemm_isa::portable, gemm_isa::avx2, gemm_isa::avx512}) {
    if (isa > gemm_isa_available()) continue;
    SCOPED_TRACE(to_string(isa));
    const gemm_isa before = limit_gemm_isa(isa);
    for (auto [m, k, n] : {std::tuple{12, 40, 64}, {7, 130, 33}}) {
      Tensor<bfloat16> a({m, k}), b({k, n}), c({m, n});
      fill_uniform(a, -2, 2, 5);
      fill_uniform(b, -2, 2, 6);
      std::mt19937_64 g(static_cast<std::uint64_t>(m + k + n));
      for (int t = 0; t < 12; ++t) {
        a.data()[g() % static_cast<std::uint64_t>(a.size())] = std::bit_cast<bfloat16>(odd[g() % 7]);
        b.data()[g() % static_cast<std::uint64_t>(b.size())] = std::bit_cast<bfloat16>(odd[g() % 7]);
      }
      gemm<bfloat16>(bfloat16(1.0f), a, b, bfloat16(0.0f), c, 1);
      const auto want = portable_16bit_gemm(bfloat16(1.0f), a.view(), b.view(), bfloat16(0.0f), c);
      int nans = 0;
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
          const auto bits = std::bit_cast<std::uint16_t>(c(i, j));
          ASSERT_TRUE(same_bits(c(i, j), want(i, j))) << "C(" << i << "," << j << ")";
          if (std::isnan(static_cast<float>(c(i, j)))) {
            ++nans;
            ASSERT_EQ(bits & 0x7fffu, 0x7fc0u) << "C(" << i << "," << j << ") of " << m << "x" << k << "x" << n;
          }
        }
      EXPECT_GT(nans, m * n / 8) << "the inputs should spread NaNs over C";
    }
    limit_gemm_isa(before);
  }
}
/// The AVX-512 and AVX2 kernels (and the portable one, for the fp64 accumulator's order) give
/// bit-identical results: every C entry is the same chain of FMAs over the same K blocks.
/// Ragged tiles (m, n not multiples of 12 and 32), transposed views, several K blocks, alpha
/// and beta, 16-bit inputs widened while packing, one and two threads.
template <class S, class Acc>
void expect_isas_identical(index_t m, index_t k, index_t n, bool ta, bool tb, double alpha, double beta, int threads) {
  const auto a_store = random_tensor<S>(ta ? Shape{k, m} : Shape{m, k}, -1, 1, static_cast<std::uint64_t>(m * 5 + k));
  const auto b_store = random_tensor<S>(tb ? Shape{n, k} : Shape{k, n}, -1, 1, static_cast<std::uint64_t>(n * 3 + k));
  const auto a = ta ? a_store.transpose() : a_store.view();
  const auto b = tb ? b_store.transpose() : b_store.view();
  const auto c0 = random_tensor<Acc>({m, n}, -1, 1, 77);
  auto c2 = c0, c5 = c0;
  const gemm_isa before = limit_gemm_isa(gemm_isa::avx2);
  gemm<Acc>(Acc(alpha), a, b, Acc(beta), c2, threads);
  limit_gemm_isa(gemm_isa::avx512);
  ASSERT_EQ(gemm_isa_in_use(), gemm_isa::avx512);
  gemm<Acc>(Acc(alpha), a, b, Acc(beta), c5, threads);
  limit_gemm_isa(before);
  for (index_t i = 0; i < c2.size(); ++i) {
    ASSERT_EQ(std::memcmp(c2.data() + i, c5.data() + i, sizeof(Acc)), 0)
        << "entry " << i << " of " << m << "x" << k << "x" << n << " Acc=" << format_traits<Acc>::name;
  }
}

TEST(GemmKernels, Avx512BitIdenticalToAvx2) {
  if (gemm_isa_available() < gemm_isa::avx512) GTEST_SKIP() << "AVX-512F is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 5, 17}, {13, 300, 33}, {37, 129, 70}, {130, 600, 97}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        expect_isas_identical<float, float>(m, k, n, ta, tb, 1.0, 0.0, 1);
        expect_isas_identical<double, double>(m, k, n, ta, tb, 1.0, 0.0, 1);
      }
  }
  expect_isas_identical<bfloat16, float>(150, 784, 260, false, true, 1.0, 0.0, 2);
  expect_isas_identical<half, float>(61, 513, 45, true, false, -0.75, 0.3, 2);
  expect_isas_identical<float, float>(200, 300, 130, false, false, 1.3, -0.7, 2);
  // and within the block-FMA bound of the exact result (the bound test's other formats ran at
  // the default level, AVX-512 here)
  run_case<float, float>(37, 300, 70, true, false, 1.0, 0.5, 2);
}

/// Sets the GEMM's cap to a level for a test's scope (the default cap leaves the AVX512-BF16
/// kernel out on CPUs where it is slower than the AVX-512 kernel on widened inputs, and an AMX
/// CPU would use its tiles instead).
struct isa_cap {
  gemm_isa before;
  explicit isa_cap(gemm_isa level) : before(limit_gemm_isa(level)) {}
  isa_cap(const isa_cap&) = delete;
  isa_cap& operator=(const isa_cap&) = delete;
  ~isa_cap() { limit_gemm_isa(before); }
};

namespace {

/// What the AVX2 and AVX-512 fp32 / fp64 kernels compute, written out (docs/tensors.md): K cut
/// into ceil(K / 256) equal blocks; within a block each C entry is one chain of fused
/// multiply-adds from zero in k order; each block is added into C as c = alpha * ab on the
/// first block when beta == 0 (C is not read), else c = fma(beta_k, c, alpha * ab), beta_k =
/// beta for the first block and 1 after.
template <class T, class VA, class VB>
Tensor<T> fma_chain_gemm_model(T alpha, const VA& a, const VB& b, T beta, const Tensor<T>& c0) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const index_t blocks = (k + 255) / 256, kc = (k + blocks - 1) / blocks;
  Tensor<T> c = c0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        T ab = 0;
        for (index_t p = p0; p < std::min(k, p0 + kc); ++p)
          ab = std::fma(static_cast<T>(a(i, p)), static_cast<T>(b(p, j)), ab);
        const T beta_k = p0 == 0 ? beta : T(1);
        c(i, j) = beta_k == T(0) ? alpha * ab : std::fma(beta_k, c(i, j), alpha * ab);
      }
  return c;
}

template <class T, class S = T>
void expect_fma_chain_model(index_t m, index_t k, index_t n, bool ta, bool tb, T alpha, T beta, int threads) {
  const auto a_store = random_tensor<S>(ta ? Shape{k, m} : Shape{m, k}, -1, 1, static_cast<std::uint64_t>(m * 13 + k));
  const auto b_store = random_tensor<S>(tb ? Shape{n, k} : Shape{k, n}, -1, 1, static_cast<std::uint64_t>(n * 17 + k));
  const auto a = ta ? a_store.transpose() : a_store.view();
  const auto b = tb ? b_store.transpose() : b_store.view();
  const auto c0 = random_tensor<T>({m, n}, -1, 1, 31);
  auto c = c0;
  gemm<T>(alpha, a, b, beta, c, threads);
  const auto want = fma_chain_gemm_model(alpha, a, b, beta, c0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      ASSERT_TRUE(same_bits(c(i, j), want(i, j)))
          << "C(" << i << "," << j << ") of " << m << "x" << k << "x" << n << (ta ? " A^T" : "") << (tb ? " B^T" : "")
          << " threads " << threads << ": " << c(i, j) << " vs the model's " << want(i, j);
}

}  // namespace

/// The fp32 and fp64 kernels at every vector level against the written-out chains, bit for bit:
/// ragged tiles, several K blocks, transposed views, alpha and beta, one and two threads;
/// products narrow enough (n of 1 to 10 against m of 40 to 300) that the GEMM runs them as
/// C^T = B^T A^T; and row-major B whose rows lie close enough to be read in place (the AVX-512
/// tile), with a ragged last panel packed (n = 70) or none (n = 64, two threads that then share
/// no packed panel); and small products (at most 2^15 multiply-adds, K within one block: the
/// unpacked small path), among them attention's 16 x 16 x 16 and K = 256, with fp16 and bf16
/// inputs widened.
TEST(GemmKernels, Fp32AndFp64AreTheBlockedFmaChainsBitForBit) {
  if (gemm_isa_available() < gemm_isa::avx2) GTEST_SKIP() << "AVX2 + FMA is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512}) {
    if (isa > gemm_isa_available()) continue;
    SCOPED_TRACE(to_string(isa));
    const isa_cap cap(isa);
    for (auto [m, k, n] : {std::tuple{7, 5, 17},
                           {37, 300, 70},
                           {128, 130, 10},
                           {128, 300, 40},
                           {300, 520, 3},
                           {40, 9, 1},
                           {13, 260, 33},
                           {100, 600, 64}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          expect_fma_chain_model<float>(m, k, n, ta, tb, 1.0f, 0.0f, 1);
          expect_fma_chain_model<double>(m, k, n, ta, tb, 1.0, 0.0, 1);
        }
      expect_fma_chain_model<float>(m, k, n, false, true, -0.75f, 0.5f, 2);
      expect_fma_chain_model<double>(m, k, n, true, false, 1.25, -1.0, 2);
    }
    for (auto [m, k, n] : {std::tuple{16, 16, 16}, {1, 1, 1}, {5, 33, 9}, {32, 32, 32}, {4, 256, 32}, {9, 20, 24}, {3, 7, 50}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          expect_fma_chain_model<float>(m, k, n, ta, tb, 1.0f, 0.0f, 1);
          expect_fma_chain_model<double>(m, k, n, ta, tb, 1.0, 0.0, 1);
          expect_fma_chain_model<float>(m, k, n, ta, tb, 0.5f, -1.5f, 1);
          expect_fma_chain_model<double>(m, k, n, ta, tb, -2.0, 1.0, 1);
          expect_fma_chain_model<float, half>(m, k, n, ta, tb, 1.0f, 1.0f, 1);
          expect_fma_chain_model<float, bfloat16>(m, k, n, ta, tb, 1.0f, 0.0f, 1);
          expect_fma_chain_model<double, float>(m, k, n, ta, tb, 1.0, 0.0, 1);
        }
    }
  }
}

namespace {

/// What the portable fp32 / fp64 tiles compute (the scalar one for other compilers, the
/// vector-extension one for GCC and Clang), written out: K cut into ceil(K / 128) equal blocks;
/// within a block each C entry is ab = ab + a_ik b_kj from zero in k order, a multiply and an
/// add; each block goes into C as alpha * ab on the first block when beta == 0, else alpha * ab
/// + beta_k * c (beta_k = beta on the first block, 1 after).
template <class T, class VA, class VB>
Tensor<T> mul_add_chain_gemm_model(T alpha, const VA& a, const VB& b, T beta, const Tensor<T>& c0) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const index_t blocks = (k + 127) / 128, kc = (k + blocks - 1) / blocks;
  Tensor<T> c = c0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        T ab = 0;
        for (index_t p = p0; p < std::min(k, p0 + kc); ++p) {
          const T prod = static_cast<T>(a(i, p)) * static_cast<T>(b(p, j));
          ab = ab + prod;
        }
        const T beta_k = p0 == 0 ? beta : T(1);
        const T t = alpha * ab;
        c(i, j) = beta_k == T(0) ? t : t + beta_k * c(i, j);
      }
  return c;
}

template <class T, class S = T>
void expect_mul_add_chain_model(index_t m, index_t k, index_t n, bool ta, bool tb, T alpha, T beta, int threads) {
  const auto a_store = random_tensor<S>(ta ? Shape{k, m} : Shape{m, k}, -1, 1, static_cast<std::uint64_t>(m * 13 + k));
  const auto b_store = random_tensor<S>(tb ? Shape{n, k} : Shape{k, n}, -1, 1, static_cast<std::uint64_t>(n * 17 + k));
  const auto a = ta ? a_store.transpose() : a_store.view();
  const auto b = tb ? b_store.transpose() : b_store.view();
  const auto c0 = random_tensor<T>({m, n}, -1, 1, 31);
  auto c = c0;
  gemm<T>(alpha, a, b, beta, c, threads);
  const auto want = mul_add_chain_gemm_model(alpha, a, b, beta, c0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      ASSERT_TRUE(same_bits(c(i, j), want(i, j)))
          << "C(" << i << "," << j << ") of " << m << "x" << k << "x" << n << (ta ? " A^T" : "") << (tb ? " B^T" : "")
          << " threads " << threads << ": " << c(i, j) << " vs the model's " << want(i, j);
}

}  // namespace

/// The portable fp32 and fp64 tiles (every CPU without AVX2 + FMA runs them) against the
/// written-out chains of multiplies and adds, bit for bit, where the compiler keeps a multiply
/// and an add apart (no FMA in the target's baseline, as on x86-64 without -mfma); where it may
/// fuse them (aarch64, -mfma) within the block-FMA bound instead. Ragged tiles (m, n not
/// multiples of the vector tile's 5 or 8 rows and 4, 6, 8 or 12 columns), several K blocks, transposed views,
/// alpha and beta, 16-bit inputs widened, one and two threads.
TEST(GemmKernels, PortableFp32AndFp64AreTheBlockedMulAddChains) {
  const isa_cap cap(gemm_isa::portable);
  ASSERT_EQ(gemm_isa_in_use(), gemm_isa::portable);
  for (auto [m, k, n] : {std::tuple{7, 5, 17}, {37, 300, 70}, {128, 130, 10}, {1, 1, 1}, {13, 260, 33}, {100, 600, 64}, {25, 129, 26}}) {
#if defined(__FP_FAST_FMA) || defined(__FP_FAST_FMAF)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        run_case<float, float>(m, k, n, ta, tb, 1.0, 0.0, 1);
        run_case<double, double>(m, k, n, ta, tb, -0.75, 0.5, 2);
        run_case<bfloat16, float>(m, k, n, ta, tb, 1.0, 1.0, 1);
      }
#else
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        expect_mul_add_chain_model<float>(m, k, n, ta, tb, 1.0f, 0.0f, 1);
        expect_mul_add_chain_model<double>(m, k, n, ta, tb, 1.0, 0.0, 1);
        expect_mul_add_chain_model<float, bfloat16>(m, k, n, ta, tb, 1.0f, 1.0f, 1);
        expect_mul_add_chain_model<double, float>(m, k, n, ta, tb, 1.0, 0.0, 1);
      }
    expect_mul_add_chain_model<float>(m, k, n, false, true, -0.75f, 0.5f, 2);
    expect_mul_add_chain_model<double>(m, k, n, true, false, 1.25, -1.0, 2);
    expect_mul_add_chain_model<float, half>(m, k, n, true, true, 0.5f, -1.5f, 2);
#endif
  }
}

namespace {

/// A 16-bit value with a random sign, a random exponent field in [lo, hi] (0: zeros and
/// subnormals; the format's largest: infinities and NaNs) and random fraction bits.
template <class T>
T random_16bit(std::mt19937_64& g, unsigned lo, unsigned hi) {
  constexpr unsigned fraction = std::is_same_v<T, half> ? 10 : 7;
  const auto e = lo + static_cast<unsigned>(g() % (hi - lo + 1));
  const auto bits = (g() & 0x8000u) | (std::uint64_t{e} << fraction) | (g() & ((1u << fraction) - 1));
  return std::bit_cast<T>(static_cast<std::uint16_t>(bits));
}

#if PRECIS_VECTOR_EXT
/// A 16-bit tile (the portable one unless `tile` names another, of R x N) and the scalar tile
/// on the same packed panels: every C entry's bits (NaNs as NaNs, and bf16's always the quiet
/// 0x7fc0 with a sign).
template <class T, index_t R = static_cast<index_t>(detail::narrow_tile_shape::rows),
          index_t N = static_cast<index_t>(detail::narrow_tile_shape::cols)>
void expect_narrow_tile_is_scalar_tile(std::mt19937_64& g, index_t kc, index_t mr, index_t nr, bool strided, T alpha,
                                       T beta, unsigned lo, unsigned hi,
                                       void (*tile)(index_t, const T*, const T*, T*, index_t, index_t, index_t, index_t, T,
                                                    T) = &detail::vector_narrow_tile_kernel<T>) {
  std::vector<T> a(static_cast<std::size_t>(kc * R)), b(static_cast<std::size_t>(kc * N));
  for (auto& x : a) x = random_16bit<T>(g, lo, hi);
  for (auto& x : b) x = random_16bit<T>(g, lo, hi);
  const index_t rs = strided ? 1 : N + 3, cs = strided ? R + 2 : 1;  // C column-major, or rows padded
  std::vector<T> c0(static_cast<std::size_t>(R * (N + 3) + N * (R + 2)));
  for (auto& x : c0) x = random_16bit<T>(g, std::is_same_v<T, half> ? 12 : 124, std::is_same_v<T, half> ? 17 : 129);
  auto vec = c0, ref = c0;
  tile(kc, a.data(), b.data(), vec.data(), rs, cs, mr, nr, alpha, beta);
  detail::generic_tile_kernel<T, R, N>(kc, a.data(), b.data(), ref.data(), rs, cs, mr, nr, alpha, beta);
  for (std::size_t i = 0; i < c0.size(); ++i) {
    const auto v = std::bit_cast<std::uint16_t>(vec[i]), r = std::bit_cast<std::uint16_t>(ref[i]);
    const bool nan = std::isnan(static_cast<float>(vec[i])) && std::isnan(static_cast<float>(ref[i]));
    const bool quiet = !std::is_same_v<T, bfloat16> || (v & 0x7fffu) == 0x7fc0u;
    ASSERT_TRUE(v == r || (nan && quiet))
        << format_traits<T>::name << " C entry " << i << " of a " << mr << " x " << nr << " tile, kc " << kc
        << (strided ? ", C column-major" : "") << ", exponent fields " << lo << "-" << hi << ": " << v
        << " against the scalar tile's " << r;
  }
}
#endif

}  // namespace

/// The portable fp16 and bf16 tile (the "-true" policies' GEMM on every CPU without the x86-64
/// kernels) against the scalar tile in the format's own arithmetic, on the same panels: full and
/// ragged tiles, C in rows or columns, alpha and beta, and values whose products and sums are
/// subnormal, reach fp16's fast path's limit of 2^15, overflow to infinity, or are NaN.
TEST(GemmKernels, Portable16BitTileIsTheScalarTile) {
#if !PRECIS_VECTOR_EXT
  GTEST_SKIP() << "this compiler has no vector extensions: the scalar tile runs the 16-bit GEMM";
#else
  using S = detail::narrow_tile_shape;
  constexpr index_t R = S::rows, N = S::cols;
  std::mt19937_64 g(2026);
  struct range {
    unsigned lo, hi, blo, bhi;  // exponent fields of fp16 (bias 15) and of bf16 (bias 127)
  };
  // near 1 with subnormal fp16 products; tiny (products round to zero); up to 2^6 (fp16 sums
  // pass 2^15 only sometimes); up to 2^10 (fp16 products overflow); every field, infinities and
  // NaNs included; bf16 products below float's subnormals, and bf16's largest values
  {
    // 32768 + 32752 = 65520 rounds to infinity in fp16 (the fast path's sum to 65536), and the
    // next product, -32768, would bring it back below 2^15: C is infinity
    std::vector<half> a(static_cast<std::size_t>(3 * R), half(1)), b(static_cast<std::size_t>(3 * N));
    for (index_t j = 0; j < N; ++j) {
      b[static_cast<std::size_t>(j)] = half(32768.0f);
      b[static_cast<std::size_t>(N + j)] = half(32752.0f);
      b[static_cast<std::size_t>(2 * N + j)] = half(-32768.0f);
    }
    std::vector<half> c(static_cast<std::size_t>(R * N));
    detail::vector_narrow_tile_kernel<half>(3, a.data(), b.data(), c.data(), N, 1, R, N, half(1), half(0));
    for (const half x : c) ASSERT_EQ(static_cast<float>(x), std::numeric_limits<float>::infinity());
  }
  for (const range r : {range{10, 17, 122, 129}, range{0, 6, 0, 8}, range{14, 21, 126, 133}, range{16, 25, 190, 254},
                        range{0, 31, 0, 255}, range{2, 9, 50, 70}}) {
    for (index_t kc : {1, 5, 128}) {
      for (auto [mr, nr] : {std::pair{R, N}, {R - 1, N}, {1, 3}, {R, N - 5}}) {
        for (bool strided : {false, true}) {
          expect_narrow_tile_is_scalar_tile<half>(g, kc, mr, nr, strided, half(1), half(0), r.lo, r.hi);
          expect_narrow_tile_is_scalar_tile<half>(g, kc, mr, nr, strided, half(-0.75f), half(0.3f), r.lo, r.hi);
          expect_narrow_tile_is_scalar_tile<bfloat16>(g, kc, mr, nr, strided, bfloat16(1), bfloat16(0), r.blo, r.bhi);
          expect_narrow_tile_is_scalar_tile<bfloat16>(g, kc, mr, nr, strided, bfloat16(1.3f), bfloat16(-0.7f), r.blo,
                                                      r.bhi);
        }
      }
    }
  }
#endif
}

/// The fp16 tile in native fp16 lanes (aarch64 with FEAT_FP16: fmul and fadd on eight lanes)
/// against the scalar tile in fp16's own arithmetic, as the portable tile above; and the GEMM
/// chooses it.
TEST(GemmKernels, NeonFp16TileIsTheScalarTile) {
#if !PRECIS_NEON_FP16_KERNEL
  GTEST_SKIP() << "not built here: the native fp16 tile is aarch64's (GCC, or -march=armv8.2-a+fp16)";
#else
  if (!detail::cpu_has_neon_fp16()) {
    GTEST_SKIP() << "this CPU has no FEAT_FP16 (HWCAP_ASIMDHP), or PRECIS_ISA=portable";
  }
  constexpr index_t R = detail::neon_fp16_tile_shape::rows, N = detail::neon_fp16_tile_shape::cols;
  ASSERT_EQ(detail::select_kernel<half>(gemm_isa_available()).tile, &detail::neon_fp16_tile_kernel);
  std::mt19937_64 g(2027);
  // near 1 with subnormal products; tiny; sums past 2^15; overflowing products; every field
  for (const auto& [lo, hi] : {std::pair{10u, 17u}, {0u, 6u}, {14u, 21u}, {16u, 25u}, {0u, 31u}}) {
    for (index_t kc : {1, 5, 128}) {
      for (auto [mr, nr] : {std::pair{R, N}, {R - 1, N}, {1, 3}, {R, N - 5}}) {
        for (bool strided : {false, true}) {
          expect_narrow_tile_is_scalar_tile<half, R, N>(g, kc, mr, nr, strided, half(1), half(0), lo, hi,
                                                        &detail::neon_fp16_tile_kernel);
          expect_narrow_tile_is_scalar_tile<half, R, N>(g, kc, mr, nr, strided, half(-0.75f), half(0.3f), lo, hi,
                                                        &detail::neon_fp16_tile_kernel);
        }
      }
    }
  }
#endif
}

namespace {

/// vdpbf16ps on one lane as Intel's SDM writes it: the high bf16 halves' product first, then
/// the low halves', each an fp32 fma rounded to nearest, with denormal inputs (the accumulator
/// included) read as zero and denormal results flushed to zero.
float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float dpbf16_lane(float c, bfloat16 lo_a, bfloat16 hi_a, bfloat16 lo_b, bfloat16 hi_b) {
  const auto f = [](bfloat16 x) { return flush_denormal(static_cast<float>(x)); };
  c = flush_denormal(std::fma(f(hi_a), f(hi_b), flush_denormal(c)));
  return flush_denormal(std::fma(f(lo_a), f(lo_b), c));
}

#if PRECIS_X86_SIMD
std::uint32_t pair_bits(bfloat16 lo, bfloat16 hi) {
  return std::uint32_t{std::bit_cast<std::uint16_t>(lo)} | std::uint32_t{std::bit_cast<std::uint16_t>(hi)} << 16;
}

PRECIS_TARGET_AVX512_BF16 void vdpbf16ps_16(float* c, const std::uint32_t* a, const std::uint32_t* b) {
  const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps(c), reinterpret_cast<__m512bh>(_mm512_loadu_si512(a)),
                                    reinterpret_cast<__m512bh>(_mm512_loadu_si512(b)));
  _mm512_storeu_ps(c, r);
}
#endif

/// A bf16 value with a random sign and a random exponent in [lo, hi] (biased: 0 gives the
/// denormals, 255 infinities and NaNs) and random mantissa bits.
bfloat16 random_bf16(std::mt19937_64& g, int lo, int hi) {
  const auto e = static_cast<std::uint16_t>(lo + static_cast<int>(g() % static_cast<std::uint64_t>(hi - lo + 1)));
  return std::bit_cast<bfloat16>(static_cast<std::uint16_t>((g() & 0x8000u) | (std::uint64_t{e} << 7) | (g() & 0x7Fu)));
}

/// What the AVX512-BF16 GEMM computes, written out from the lane model: K cut into
/// ceil(K / 256) equal blocks; within a block the pairs (k, k + 1), k even, go through
/// dpbf16_lane with k in the high halves (a zero pairs an odd block's last k); each block is
/// added into C as c = fma(beta_k, c, alpha * ab), beta_k = beta for the first block
/// (beta == 0: C is not read) and 1 after.
///
/// With amx, what the AMX kernel computes instead, from tdpbf16ps as measured on an Intel Xeon
/// (tests/data/amx): one sum S over all of K, whatever the blocking, in instructions of 32 k
/// (k = 0..31, 32..63, ...): per instruction the even-k and the odd-k products are summed in
/// two fp32 chains from zero (each step rounded to nearest, flushed), then S = ftz(S +
/// ftz(even + odd)); an odd K's last pair is completed with +0 * +0 (into the odd chain), the
/// rest of the last instruction with products -0, which change nothing. Then c = alpha S, or
/// fma(beta, c, alpha S).
template <class VA, class VB>
Tensor<float> bf16_dot_gemm_model(float alpha, const VA& a, const VB& b, float beta, const Tensor<float>& c0,
                                  bool amx = false) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const index_t blocks = amx ? 1 : (k + 255) / 256, kc = (k + blocks - 1) / blocks;
  Tensor<float> c = c0;
  const bfloat16 zero(0.0f);
  const auto f = [](bfloat16 x) { return flush_denormal(static_cast<float>(x)); };
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        const index_t p1 = std::min(k, p0 + kc);
        float ab = 0;
        if (amx) {
          for (index_t s = p0; s < p1; s += 32) {
            float chain[2] = {0.0f, 0.0f};  // even k, odd k
            for (index_t p = s; p < std::min(p1, s + 32); ++p)
              chain[(p - s) % 2] = flush_denormal(std::fma(f(a(i, p)), f(b(p, j)), chain[(p - s) % 2]));
            if ((p1 - s) % 2 == 1 && p1 - s < 32) chain[1] = flush_denormal(chain[1] + 0.0f);
            ab = flush_denormal(ab + flush_denormal(chain[0] + chain[1]));
          }
        } else {
          for (index_t p = p0; p < p1; p += 2) {
            const bool pair = p + 1 < p1;
            ab = dpbf16_lane(ab, pair ? a(i, p + 1) : zero, a(i, p), pair ? b(p + 1, j) : zero, b(p, j));
          }
        }
        const float beta_k = p0 == 0 ? beta : 1.0f;
        c(i, j) = beta_k == 0.0f ? alpha * ab : std::fma(beta_k, c(i, j), alpha * ab);
      }
  return c;
}

/// Whether the GEMM runs m x k x n as a small product (gemm_small): at most small_gemm_limit
/// multiply-adds with K within one K block of the fp32 kernels.
bool small_product(index_t m, index_t n, index_t k) { return k <= 256 && m * n * k <= detail::small_gemm_limit; }

void expect_bf16_dot_gemm_matches_model(index_t m, index_t k, index_t n, bool ta, bool tb, float alpha, float beta,
                                        int threads, int lo_exp, int hi_exp, bool amx) {
  std::mt19937_64 g(static_cast<std::uint64_t>(m * 1000003 + k * 1009 + n));
  Tensor<bfloat16> a_store(ta ? Shape{k, m} : Shape{m, k}), b_store(tb ? Shape{n, k} : Shape{k, n});
  for (auto& x : a_store) x = random_bf16(g, lo_exp, hi_exp);
  for (auto& x : b_store) x = random_bf16(g, lo_exp, hi_exp);
  const auto a = ta ? a_store.transpose() : a_store.view();
  const auto b = tb ? b_store.transpose() : b_store.view();
  const auto c0 = random_tensor<float>({m, n}, -1, 1, 5);
  auto c = c0;
  gemm<float>(alpha, a, b, beta, c, threads);
  auto want = c0;
  if (small_product(m, n, k)) {  // the small path at every level: the fp32 kernels' bits
    const gemm_isa before = limit_gemm_isa(gemm_isa::avx512);
    gemm<float>(alpha, a, b, beta, want, threads);
    limit_gemm_isa(before);
  } else {
    want = bf16_dot_gemm_model(alpha, a, b, beta, c0, amx);
  }
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      ASSERT_TRUE(same_bits(c(i, j), want(i, j)))
          << "C(" << i << "," << j << ") of " << m << "x" << k << "x" << n << " exponents [" << lo_exp << ", " << hi_exp
          << "]: " << c(i, j) << " vs the model's " << want(i, j);
}

}  // namespace

/// The bf16 x bf16 products of the level in use (vdpbf16ps or AMX) against the scalar model of
/// the instruction, bit for bit (the two smallest shapes: the small path's fp32 bits): ragged tiles (m, n not multiples of 12 and 32), odd K and odd
/// K blocks, several K blocks, transposed views, alpha and beta, two threads; magnitudes near
/// 1, tiny (fp32-denormal products, bf16 denormal inputs, partial sums that flush), and across
/// the whole range.
void expect_bf16_dot_model_cases(bool amx) {
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 5, 17}, {13, 300, 33}, {37, 129, 70}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        expect_bf16_dot_gemm_matches_model(m, k, n, ta, tb, 1.0f, 0.0f, 1, 120, 133, amx);
        expect_bf16_dot_gemm_matches_model(m, k, n, ta, tb, 1.0f, 0.0f, 1, 0, 72, amx);
      }
  }
  expect_bf16_dot_gemm_matches_model(50, 519, 70, false, false, -0.75f, 0.3f, 2, 110, 140, amx);
  expect_bf16_dot_gemm_matches_model(50, 519, 70, true, true, 1.25f, -1.0f, 2, 55, 70, amx);
  expect_bf16_dot_gemm_matches_model(25, 40, 45, false, true, 1.0f, 0.5f, 1, 0, 254, amx);
  expect_bf16_dot_gemm_matches_model(70, 1000, 100, false, true, 1.0f, 0.0f, 2, 0, 72, amx);
  // row-major A with an even row stride (its pairs are adjacent dwords) and odd K blocks
  // (770 = 4 x 193)
  expect_bf16_dot_gemm_matches_model(25, 770, 40, false, false, 1.0f, 0.0f, 1, 0, 72, amx);
  expect_bf16_dot_gemm_matches_model(25, 770, 40, false, true, 0.5f, 1.0f, 2, 120, 133, amx);
  // beyond the AMX kernel's K blocks of 1024 (2500 = 864 + 864 + 772, 1100 = 576 + 524):
  // partial sums carried through C, scaled at the last block, or through the workspace when
  // beta != 0; rows split over 3 and 4 threads
  expect_bf16_dot_gemm_matches_model(70, 2500, 100, false, true, 1.0f, 0.0f, 3, 0, 72, amx);
  expect_bf16_dot_gemm_matches_model(64, 1100, 64, false, false, 0.5f, 0.0f, 1, 110, 140, amx);
  expect_bf16_dot_gemm_matches_model(97, 1300, 130, true, false, 1.5f, -0.5f, 4, 120, 133, amx);
  // narrow products, run as C^T = B^T A^T
  expect_bf16_dot_gemm_matches_model(128, 300, 10, false, true, 1.0f, 0.0f, 1, 0, 72, amx);
  expect_bf16_dot_gemm_matches_model(130, 519, 3, true, false, -0.5f, 0.75f, 2, 110, 140, amx);
}

/// The level in use equals the fp32 kernels (the AVX-512 level) bit for bit on entries of
/// magnitude >= 2^-30 (or 0): every product and partial sum is a multiple of 2^-76, far from
/// fp32's denormals, so the pair order (k before k + 1) makes each lane the fp32 kernels' chain.
void expect_bf16_dot_identical_to_fp32_kernels() {
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 5, 17}, {13, 300, 33}, {130, 785, 97}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor<bfloat16> a_store(ta ? Shape{k, m} : Shape{m, k}), b_store(tb ? Shape{n, k} : Shape{k, n});
        fill_log_uniform(a_store, -30, 3, static_cast<std::uint64_t>(m + k), true);
        fill_log_uniform(b_store, -30, 3, static_cast<std::uint64_t>(n + k), true);
        const auto a = ta ? a_store.transpose() : a_store.view();
        const auto b = tb ? b_store.transpose() : b_store.view();
        const auto c0 = random_tensor<float>({m, n}, -1, 1, 9);
        auto c_dot = c0, c_fma = c0;
        gemm<float>(0.5f, a, b, 0.25f, c_dot, 2);
        const gemm_isa before = limit_gemm_isa(gemm_isa::avx512);
        gemm<float>(0.5f, a, b, 0.25f, c_fma, 2);
        limit_gemm_isa(before);
        for (index_t i = 0; i < c_dot.size(); ++i)
          ASSERT_EQ(std::memcmp(c_dot.data() + i, c_fma.data() + i, sizeof(float)), 0)
              << "entry " << i << " of " << m << "x" << k << "x" << n << ": " << c_dot.data()[i] << " vs "
              << c_fma.data()[i];
      }
  }
}

/// The level in use flushes a product that is an fp32 denormal (2^-64 * 2^-64 = 2^-128) to zero
/// and reads a bf16 denormal input (2^-130) as zero, where the fp32 kernels keep both: in a
/// 1 x 300 x 1 product (beyond the small path's K), the other 299 products zero. A small
/// product (1 x 1 x 1) takes the small path at every level and keeps them, as the fp32 kernels.
void expect_bf16_dot_flushes_denormals() {
  for (auto [x, y, exact] : {std::tuple{-64, -64, -128}, {-130, 100, -30}}) {
    for (const index_t k : {300, 1}) {
      Tensor<bfloat16> a({1, k}), b({k, 1});
      a(0, 0) = bfloat16(std::ldexp(1.0f, x));
      b(0, 0) = bfloat16(std::ldexp(1.0f, y));
      Tensor<float> c_dot({1, 1}), c_fma({1, 1});
      gemm<float>(1.0f, a, b, 0.0f, c_dot, 1);
      const gemm_isa before = limit_gemm_isa(gemm_isa::avx512);
      gemm<float>(1.0f, a, b, 0.0f, c_fma, 1);
      limit_gemm_isa(before);
      EXPECT_EQ(c_dot(0, 0), k == 1 ? std::ldexp(1.0f, exact) : 0.0f) << "2^" << x << " * 2^" << y << ", K " << k;
      EXPECT_EQ(c_fma(0, 0), std::ldexp(1.0f, exact)) << "2^" << x << " * 2^" << y << ", K " << k;
    }
    // within the documented bound: gamma_K |A||B| + K 2^-126 (1 + max |b|)
    EXPECT_LE(std::ldexp(1.0, exact), std::ldexp(1.0, -126) * (1 + std::ldexp(1.0, y)));
  }
}

TEST(GemmBf16Dot, TheInstructionMatchesItsScalarModel) {
  if (gemm_isa_available() < gemm_isa::avx512_bf16) GTEST_SKIP() << "AVX512-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
#if PRECIS_X86_SIMD
  // 2^20 lanes: exponents near 1 (rounding of every fma), tiny (fp32-denormal products and
  // bf16 denormal inputs), anywhere (infinities and NaNs), exact cancellation, and accumulators
  // that are denormal, zero or cancel the first product
  std::mt19937_64 g(11);
  long lanes = 0;
  for (int it = 0; it < (1 << 16); ++it) {
    alignas(64) float c[16], want[16];
    alignas(64) std::uint32_t a[16], b[16];
    for (int j = 0; j < 16; ++j) {
      const int kind = static_cast<int>(g() % 8);
      const int lo = kind < 4 ? 119 : 0, hi = kind < 4 ? 135 : kind < 7 ? 70 : 255;
      bfloat16 a0 = random_bf16(g, lo, hi), a1 = random_bf16(g, lo, hi), b0 = random_bf16(g, lo, hi), b1 = random_bf16(g, lo, hi);
      if (g() % 3 == 0) {  // a1 b1 = -a0 b0
        a1 = a0;
        b1 = -b0;
      }
      switch (g() % 4) {
        case 0: c[j] = 0.0f; break;
        case 1: c[j] = std::ldexp(static_cast<float>(g() % 1000), -130 - static_cast<int>(g() % 20)); break;
        case 2: c[j] = -static_cast<float>(a1) * static_cast<float>(b1); break;
        default: c[j] = std::ldexp(static_cast<float>(static_cast<int>(g() % 2001) - 1000), static_cast<int>(g() % 40) - 30);
      }
      a[j] = pair_bits(a0, a1);
      b[j] = pair_bits(b0, b1);
      want[j] = dpbf16_lane(c[j], a0, a1, b0, b1);
    }
    vdpbf16ps_16(c, a, b);
    for (int j = 0; j < 16; ++j, ++lanes)
      ASSERT_TRUE(same_bits(c[j], want[j])) << "lane " << lanes << ": vdpbf16ps gave " << c[j] << ", the model " << want[j];
  }
#endif
}

TEST(GemmBf16Dot, TheGemmComputesTheModelBitForBit) {
  if (gemm_isa_available() < gemm_isa::avx512_bf16) GTEST_SKIP() << "AVX512-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  const isa_cap cap(gemm_isa::avx512_bf16);
  ASSERT_EQ(gemm_isa_in_use(), gemm_isa::avx512_bf16);
  expect_bf16_dot_model_cases(false);
}

TEST(GemmBf16Dot, BitIdenticalToTheFp32KernelsWithoutDenormals) {
  if (gemm_isa_available() < gemm_isa::avx512_bf16) GTEST_SKIP() << "AVX512-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  const isa_cap cap(gemm_isa::avx512_bf16);
  expect_bf16_dot_identical_to_fp32_kernels();
}

TEST(GemmBf16Dot, FlushesTheDenormalsTheFp32KernelsKeep) {
  if (gemm_isa_available() < gemm_isa::avx512_bf16) GTEST_SKIP() << "AVX512-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  const isa_cap cap(gemm_isa::avx512_bf16);
  expect_bf16_dot_flushes_denormals();
}

// The AMX kernel: its own arithmetic (two chains per instruction, kernel_amx_bf16.hpp), checked
// against its scalar model bit for bit, against the fp32 bound, and for the flushes.
constexpr const char* no_amx = "AMX-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it, or the process was refused the tile data)";

TEST(GemmAmx, TheGemmComputesTheModelBitForBit) {
  if (gemm_isa_available() < gemm_isa::amx_bf16) GTEST_SKIP() << no_amx;
  const isa_cap cap(gemm_isa::amx_bf16);
  ASSERT_EQ(gemm_isa_in_use(), gemm_isa::amx_bf16);
  expect_bf16_dot_model_cases(true);
}

TEST(GemmAmx, BetaIntoATransposedCAsIntoADenseOne) {
  // beta != 0: the sums wait in a workspace and are added into C in vectors where C's rows
  // are dense, one entry at a time where they are not; both are the same fused multiply-add
  if (gemm_isa_available() < gemm_isa::amx_bf16) GTEST_SKIP() << no_amx;
  const isa_cap cap(gemm_isa::amx_bf16);
  const index_t m = 37, k = 300, n = 45;
  Tensor<bfloat16> a({m, k}), b({k, n});
  fill_uniform(a, -1, 1, 3);
  fill_uniform(b, -1, 1, 4);
  const auto c0 = random_tensor<float>({m, n}, -1, 1, 6);
  auto dense = c0;
  Tensor<float> store({n, m});
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) store(j, i) = c0(i, j);
  gemm<float>(-0.75f, a, b, 0.3f, dense, 1);
  gemm<float>(-0.75f, a, b, 0.3f, store.transpose(), 1);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) ASSERT_TRUE(same_bits(dense(i, j), store(j, i))) << "C(" << i << "," << j << ")";
}

TEST(GemmAmx, WithinTheFp32AccumulationBound) {
  if (gemm_isa_available() < gemm_isa::amx_bf16) GTEST_SKIP() << no_amx;
  const isa_cap cap(gemm_isa::amx_bf16);
  // not the fp32 kernels' chain (two chains per instruction, then two additions), but no
  // deeper: |C - AB| <= gamma_{K+2} |A||B| in fp32's u, against a double reference
  for (auto [m, k, n] : {std::tuple{7, 5, 17}, {37, 129, 70}, {64, 1000, 96}}) {
    Tensor<bfloat16> a({m, k}), b({k, n});
    fill_log_uniform(a, -8, 8, static_cast<std::uint64_t>(m + k), true);
    fill_log_uniform(b, -8, 8, static_cast<std::uint64_t>(n + k), true);
    Tensor<float> c({m, n});
    gemm<float>(1.0f, a, b, 0.0f, c, 2);
    const double u = 0x1p-24, g = (k + 2) * u / (1 - (k + 2) * u);
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (index_t p = 0; p < k; ++p) {
          const double x = static_cast<double>(static_cast<float>(a(i, p))) * static_cast<double>(static_cast<float>(b(p, j)));
          ref += x;
          mag += std::fabs(x);
        }
        ASSERT_LE(std::fabs(static_cast<double>(c(i, j)) - ref), g * mag)
            << "C(" << i << "," << j << ") of " << m << "x" << k << "x" << n;
      }
  }
}

TEST(GemmAmx, TheModelMatchesEveryRecordedOutput) {
  // runs on every machine: AMX outputs recorded on an Intel Xeon (tests/data/amx/README.md):
  // sets of 64 x K x 64 products, K = 2, 4, 32 and 64, exponents in [-8, 8] and [-40, 40]
  std::FILE* f = std::fopen(PRECIS_AMX_DATA, "rb");
  ASSERT_NE(f, nullptr) << PRECIS_AMX_DATA;
  int head[4];
  long outputs = 0, mismatches = 0, off_chain = 0;
  while (std::fread(head, sizeof head, 1, f) == 1) {
    const index_t m = head[0], k = head[1], n = head[2];
    Tensor<bfloat16> a({m, k}), b({k, n});
    Tensor<float> c({m, n});
    ASSERT_EQ(std::fread(a.data(), 2, static_cast<std::size_t>(m * k), f), static_cast<std::size_t>(m * k));
    ASSERT_EQ(std::fread(b.data(), 2, static_cast<std::size_t>(k * n), f), static_cast<std::size_t>(k * n));
    ASSERT_EQ(std::fread(c.data(), 4, static_cast<std::size_t>(m * n), f), static_cast<std::size_t>(m * n));
    const Tensor<float> zero({m, n});
    const auto want = bf16_dot_gemm_model(1.0f, a.view(), b.view(), 0.0f, zero, true);
    const auto chain = bf16_dot_gemm_model(1.0f, a.view(), b.view(), 0.0f, zero, false);
    for (index_t e = 0; e < m * n; ++e) {
      ++outputs;
      mismatches += !same_bits(c.data()[e], want.data()[e]);
      off_chain += !same_bits(c.data()[e], chain.data()[e]);
    }
  }
  std::fclose(f);
  EXPECT_EQ(outputs, 8 * 64 * 64);
  EXPECT_EQ(mismatches, 0) << "of " << outputs;
  // and the recordings tell the two arithmetics apart: the fp32 chain misses many
  EXPECT_GT(off_chain, outputs / 10) << "outputs off the vdpbf16ps / fp32-kernel chain";
}

TEST(GemmAmx, PacksPairsInKOrder) {
  // the packing needs AVX512-BF16 only, so it is checked beyond AMX machines: A rows of k-ordered
  // bf16 (an odd K completed with +0, then -0 to 16 pairs), B rows of pairs (k low, k + 1 high)
  if (gemm_isa_available() < gemm_isa::avx512_bf16) GTEST_SKIP() << "AVX512-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
#if PRECIS_X86_SIMD
  const index_t m = 5, k = 7, n = 40, mr = 32, nr = 32, kp16 = 16;
  Tensor<bfloat16> a({m, k});
  for (index_t i = 0; i < a.size(); ++i) a.data()[i] = bfloat16(static_cast<float>(i + 1));
  std::vector<std::uint32_t> ap(static_cast<std::size_t>(mr * kp16), 0xdeadbeefu);
  detail::pack_a_amx(a.data(), k, 1, m, k, mr, ap.data());
  const auto half16 = [](std::uint32_t d, int hi) { return static_cast<std::uint16_t>(hi ? d >> 16 : d & 0xffffu); };
  for (index_t r = 0; r < mr; ++r)
    for (index_t e = 0; e < 2 * kp16; ++e) {
      const std::uint16_t got = half16(ap[static_cast<std::size_t>(r * kp16 + e / 2)], static_cast<int>(e % 2));
      const std::uint16_t want = r >= m ? 0 : e < k ? std::bit_cast<std::uint16_t>(a(r, e)) : e == k ? 0 : 0x8000;
      ASSERT_EQ(got, want) << "A row " << r << ", k " << e;
    }
  // B, in both kernels' layouts (AMX: element k low, pair rows padded to 16; vdpbf16ps: k high,
  // no padding): dense rows (any row stride), dense columns a whole number of dwords apart
  // (register transposes) or not (element by element); an odd K; more than one block of 16 pair
  // rows; only some of the panels
  struct b_case {
    index_t k, ld;  // B^T's row stride (B's is n + ld - k)
  };
  for (const b_case bc :
       {b_case{7, 7}, b_case{7, 8}, b_case{8, 8}, b_case{45, 46}, b_case{45, 45}, b_case{64, 70}})
    for (bool amx : {true, false})
      for (bool transposed : {false, true})
        for (index_t p0 : {0, 1}) {
          const index_t kk = bc.k, ld = bc.ld, ldb = n + ld - kk;
          const index_t kq = amx ? ((kk + 1) / 2 + 15) / 16 * 16 : (kk + 1) / 2;
          Tensor<bfloat16> bw({kk, ldb}), btw({n, ld});
          for (index_t i = 0; i < bw.size(); ++i)
            bw.data()[i] = bfloat16(static_cast<float>(i % 251 + 1));
          for (index_t i = 0; i < n; ++i)
            for (index_t p = 0; p < ld; ++p) btw(i, p) = p < kk ? bw(p, i) : bfloat16(-7.0f);
          std::vector<std::uint32_t> bp(static_cast<std::size_t>(2 * nr * kq), 0xdeadbeefu);
          const auto pack = amx ? &detail::pack_b_amx : &detail::pack_b_bf16_pairs;
          if (transposed)
            pack(btw.data(), 1, ld, kk, n, nr, bp.data(), p0, 2);
          else
            pack(bw.data(), ldb, 1, kk, n, nr, bp.data(), p0, 2);
          for (index_t j = 0; j < 2 * nr; ++j)
            for (index_t q = 0; q < kq; ++q) {
              const std::uint32_t d =
                  bp[static_cast<std::size_t>((j / nr) * nr * kq + q * nr + j % nr)];
              if (j < p0 * nr) {
                ASSERT_EQ(d, 0xdeadbeefu) << "column " << j << " lies outside the panels asked for";
                continue;
              }
              for (int hi = 0; hi < 2; ++hi) {
                const index_t p = 2 * q + hi;
                const std::uint16_t want =
                    j < n && p < kk ? std::bit_cast<std::uint16_t>(bw(p, j)) : 0;
                ASSERT_EQ(half16(d, amx ? hi : 1 - hi), want)
                    << (amx ? "AMX " : "vdpbf16ps ") << (transposed ? "B^T" : "B") << " k " << kk
                    << ", stride " << ld << ", column " << j << ", k " << p;
              }
            }
        }
#endif
}

TEST(GemmAmx, FlushesTheDenormalsTheFp32KernelsKeep) {
  if (gemm_isa_available() < gemm_isa::amx_bf16) GTEST_SKIP() << no_amx;
  const isa_cap cap(gemm_isa::amx_bf16);
  expect_bf16_dot_flushes_denormals();
}

TEST(GemmKernels, LimitAndReportTheInstructionSetLevel) {
  const gemm_isa available = gemm_isa_available();
  const gemm_isa before = limit_gemm_isa(gemm_isa::portable);
  EXPECT_EQ(gemm_isa_in_use(), gemm_isa::portable);
  // the portable kernel still computes within the bound
  run_case<float, float>(13, 40, 9, false, true, 1.0, 0.0, 1);
  limit_gemm_isa(gemm_isa::amx_bf16);
  EXPECT_EQ(gemm_isa_in_use(), available);  // a cap above the CPU's level gives the CPU's level
  limit_gemm_isa(before);
  EXPECT_STREQ(to_string(gemm_isa::avx2), "avx2");
}
