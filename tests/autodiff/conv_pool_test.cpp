// conv2d and max pooling against direct references evaluated in double, and their kernels
// against each other: the direct forward and the columns' GEMM as the same fp32 FMA chains, the
// backward's weight-gradient tiles (AVX2, AVX-512) and padded planes bit for bit, any thread
// count. A file of its own so that isa_emulation_tests compiles it again with AVX-512 emulated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <precis/analysis/bounds.hpp>
#include <precis/precis.hpp>
#include <random>
#include <tuple>
#include <vector>

#include "uniform_tensor.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

using namespace precis;
namespace pol = precis::policy;
using precis_test::uniform;

namespace {

/// conv2d by its definition, each output as a sum over (c, i, j), with the sum of |terms|.
void conv_reference(const Tensor<double>& x, const Tensor<double>& w, const Tensor<double>& b, const conv2d_options& o,
                    Tensor<double>& y, Tensor<double>& mag) {
  const index_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  const index_t oc = w.shape()[0], cg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3], og = oc / o.groups;
  const index_t ho = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const index_t wo = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  y = Tensor<double>(Shape{n, oc, ho, wo});
  mag = Tensor<double>(Shape{n, oc, ho, wo});
  (void)c;
  for (index_t in = 0; in < n; ++in)
    for (index_t f = 0; f < oc; ++f)
      for (index_t oh = 0; oh < ho; ++oh)
        for (index_t ow = 0; ow < wo; ++ow) {
          double s = b(f), m = std::abs(b(f));
          const index_t g = f / og;
          for (index_t ci = 0; ci < cg; ++ci)
            for (index_t i = 0; i < kh; ++i)
              for (index_t j = 0; j < kw; ++j) {
                const index_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const index_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const double t = x(in, g * cg + ci, ih, iw) * w(f, ci, i, j);
                s += t;
                m += std::abs(t);
              }
          y(in, f, oh, ow) = s;
          mag(in, f, oh, ow) = m;
        }
}

template <class P>
void expect_conv_matches(const conv2d_options& o, const Shape& xs, const Shape& ws, unsigned seed) {
  using S = typename P::param_type;
  // the operands rounded to the policy's storage, so both sides multiply the same numbers
  auto rounded = [](Tensor<double> t) {
    for (auto& v : t) v = detail::load<double>(detail::load<default_compute_t<S>>(detail::store<S>(detail::load<default_compute_t<S>>(v))));
    return t;
  };
  const auto x = rounded(uniform(xs, -1, 1, seed)), w = rounded(uniform(ws, -1, 1, seed + 1)),
             b = rounded(uniform({ws[0]}, -1, 1, seed + 2));
  Tensor<double> ref, mag;
  conv_reference(x, w, b, o, ref, mag);
  const auto y = conv2d<P>(astype<S>(x), astype<S>(w), astype<S>(b), o);
  ASSERT_EQ(y.shape(), ref.shape());
  // accumulation of K + 1 terms in the accumulator, then one rounding to the output storage
  using T = pol::op_types<P, op::conv2d, S, S, S>;
  const double k = static_cast<double>(ws[1] * ws[2] * ws[3] + 1);
  const double tol_acc = bounds::gamma(k, unit_roundoff<typename T::accumulator>());
  const double u_out = unit_roundoff<typename T::output>();
  for (index_t i = 0; i < y.size(); ++i) {
    const double got = detail::load<double>(detail::load<default_compute_t<typename T::output>>(y.data()[i]));
    const double bound = tol_acc * mag.data()[i] + u_out * (std::abs(ref.data()[i]) + tol_acc * mag.data()[i]);
    ASSERT_LE(std::abs(got - ref.data()[i]), bound) << "element " << i << " under " << P::name();
  }
}

TEST(OpLayerReference, Conv2dMatchesDefinition) {
  const std::vector<std::tuple<conv2d_options, Shape, Shape>> cases{
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {2, 3, 6, 5}, {4, 3, 3, 3}},
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 1, 7, 7}, {5, 1, 3, 3}},
      {{{2, 3}, {2, 1}, {1, 1}, 1}, {1, 2, 9, 8}, {3, 2, 4, 3}},
      {{{1, 2}, {1, 0}, {2, 1}, 3}, {2, 6, 7, 7}, {6, 2, 3, 2}},
      {{{1, 1}, {0, 0}, {1, 1}, 4}, {1, 4, 3, 3}, {8, 1, 2, 2}},  // depthwise, channel multiplier 2
      {{{1, 1}, {2, 1}, {1, 1}, 1}, {2, 2, 4, 6}, {3, 2, 5, 3}},  // same width, taps past every edge
      // 259200 column elements an image: batches of 2 images and 1 (im2col's buffer holds 2^19)
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 2, 120, 120}, {3, 2, 3, 3}},
  };
  unsigned seed = 100;
  for (const auto& [o, xs, ws] : cases) {
    expect_conv_matches<pol::true_<double>>(o, xs, ws, seed);
    expect_conv_matches<pol::true_<float>>(o, xs, ws, seed);
    expect_conv_matches<pol::named<"bf16-mixed">>(o, xs, ws, seed);
    expect_conv_matches<pol::named<"16-mixed">>(o, xs, ws, seed);
    seed += 10;
  }
}

/// conv2d's forward with an fp32 accumulator, written out: per output, the chain of fp32 FMAs
/// over its taps in k order (channel, kernel row, kernel column) from +0, a tap over padding
/// multiplying +0, then the bias added in fp32 and one rounding to the storage. The direct kernel
/// computes exactly this, and so does the columns' GEMM (K within one block, fp32 lanes).
template <class S>
Tensor<S> conv_fma_chain(const Tensor<S>& x, const Tensor<S>& w, const Tensor<S>& b, const conv2d_options& o, const Shape& ys) {
  Tensor<S> y(ys);
  const index_t og = w.shape()[0] / o.groups, cg = w.shape()[1];
  for (index_t n = 0; n < ys[0]; ++n)
    for (index_t f = 0; f < ys[1]; ++f)
      for (index_t oh = 0; oh < ys[2]; ++oh)
        for (index_t ow = 0; ow < ys[3]; ++ow) {
          float ab = 0.0f;
          for (index_t ci = 0; ci < cg; ++ci)
            for (index_t i = 0; i < w.shape()[2]; ++i)
              for (index_t j = 0; j < w.shape()[3]; ++j) {
                const index_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const index_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                const bool inside = ih >= 0 && ih < x.shape()[2] && iw >= 0 && iw < x.shape()[3];
                const float xv = inside ? detail::load<float>(x(n, (f / og) * cg + ci, ih, iw)) : 0.0f;
                ab = std::fma(detail::load<float>(w(f, ci, i, j)), xv, ab);
              }
          y(n, f, oh, ow) = detail::store<S>(ab + detail::load<float>(b(f)));
        }
  return y;
}

/// conv2d's forward under 32-true, bf16-mixed and 16-mixed against conv_fma_chain, bit for bit,
/// at every vector level this CPU has (AVX2, AVX-512: the direct kernel's two widths) and for
/// one thread and two: output widths that leave a partial vector, channel counts that leave a
/// partial block of 8 (or 4), padding, dilation, row stride, groups, several image batches, and
/// one infinite weight (its taps over padding give NaN, inf x 0, as the GEMM over zero-filled
/// columns does); a column stride of 2 takes the columns' GEMM, with the same bits (more taps than
/// the GEMM's K block, 256, take it too: its blocks are added one after the other, not this chain).
template <class P>
void expect_conv_forward_fma_chain() {
  using S = typename P::param_type;
  struct geometry_case {
    conv2d_options o;
    Shape xs, ws;
    bool inf_weight = false;
  };
  const std::vector<geometry_case> cases{
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 1, 28, 28}, {16, 1, 3, 3}},  // the demo CNN's first convolution
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 16, 14, 14}, {32, 16, 3, 3}, true},  // its second
      {{{2, 1}, {2, 1}, {1, 2}, 2}, {2, 4, 9, 19}, {6, 2, 3, 2}},
      {{{1, 1}, {0, 3}, {2, 1}, 1}, {1, 3, 8, 33}, {5, 3, 2, 3}, true},
      {{{1, 1}, {0, 0}, {1, 1}, 3}, {2, 3, 5, 7}, {9, 1, 1, 1}},  // depthwise 1 x 1, 3 outputs a channel
      {{{1, 2}, {1, 1}, {1, 1}, 1}, {2, 2, 6, 9}, {3, 2, 3, 3}},  // column stride 2: the GEMM
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 8, 150, 150}, {3, 8, 1, 1}},  // image batches of 2 and 1
  };
  std::vector<gemm_isa> levels;
  for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512})
    if (isa <= gemm_isa_available()) levels.push_back(isa);
  if (levels.empty()) GTEST_SKIP() << "AVX2 and FMA are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  unsigned seed = 300;
  for (const auto& [o, xs, ws, inf_weight] : cases) {
    const auto x = astype<S>(uniform(xs, -1, 1, seed)), b = astype<S>(uniform({ws[0]}, -1, 1, seed + 2));
    auto w = astype<S>(uniform(ws, -1, 1, seed + 1));
    seed += 10;
    if (inf_weight) w(1, 0, 0, 0) = detail::store<S>(std::numeric_limits<float>::infinity());
    const auto want = conv_fma_chain(x, w, b, o, conv2d<P>(x, w, b, o).shape());
    const std::string at = std::string(P::name()) + ", x " + xs.str() + ", w " + ws.str();
    for (gemm_isa isa : levels) {
      const gemm_isa before = limit_gemm_isa(isa);
      for (int threads : {1, 2}) {
#if defined(_OPENMP)
        const int before_threads = omp_get_max_threads();
        omp_set_num_threads(threads);
#endif
        const auto y = conv2d<P>(x, w, b, o);
#if defined(_OPENMP)
        omp_set_num_threads(before_threads);
#endif
        for (index_t i = 0; i < y.size(); ++i) {
          const float got = detail::load<float>(y.data()[i]), ref = detail::load<float>(want.data()[i]);
          if (std::isnan(ref)) {
            ASSERT_TRUE(std::isnan(got)) << "element " << i << " (" << at << ", " << to_string(isa) << ", " << threads << " threads)";
            continue;
          }
          ASSERT_EQ(std::memcmp(&y.data()[i], &want.data()[i], sizeof(S)), 0)
              << "element " << i << ": " << got << " against the chain's " << ref << " (" << at << ", " << to_string(isa) << ", "
              << threads << " threads)";
        }
      }
      limit_gemm_isa(before);
    }
    if (inf_weight) {  // the infinite weight's taps over padding did give NaN
      const auto y = conv2d<P>(x, w, b, o);
      ASSERT_TRUE(std::isnan(detail::load<float>(y(0, 1, 0, 0)))) << at;
    }
  }
  // the cases meant for the direct kernel take it, the others the GEMM, and the last one several batches
  const auto geometry = [](const geometry_case& c) { return op::conv2d::geometry_of(c.o, c.xs, c.ws); };
  EXPECT_TRUE(op::conv_detail::direct_applies(geometry(cases[0]), 1, 16));
  EXPECT_FALSE(op::conv_detail::direct_applies(geometry(cases[5]), 1, 16));
  EXPECT_FALSE(op::conv_detail::direct_applies(geometry({{{1, 1}, {1, 1}, {1, 1}, 1}, {1, 32, 5, 6}, {4, 32, 3, 3}}), 1, 16));
  const auto last = geometry(cases.back());
  EXPECT_LT(op::conv_detail::direct_images_per_batch(last, op::conv_detail::direct_layout(last, 16), 3, true), last.n);
}

TEST(OpLayerReference, Conv2dForwardIsTheFmaChain32True) { expect_conv_forward_fma_chain<pol::named<"32-true">>(); }
TEST(OpLayerReference, Conv2dForwardIsTheFmaChainBf16Mixed) { expect_conv_forward_fma_chain<pol::named<"bf16-mixed">>(); }
TEST(OpLayerReference, Conv2dForwardIsTheFmaChain16Mixed) { expect_conv_forward_fma_chain<pol::named<"16-mixed">>(); }

/// conv2d's gradients under 64-true and 32-true against the adjoint of the definition (dx, dw,
/// db of sum(y * c)), each a plain sum of products evaluated in double from the values the tape
/// sees; geometries that take every im2col / col2im path (strided, dilated, grouped, and "same"
/// unit-stride sweeps with taps off every edge) and, in fp32, the weight gradient read straight
/// from the output gradient (tiles of 3 x 3 entries: channel counts that leave partial tiles,
/// planes that leave a tail of positions past a multiple of 8). Each entry's error is bounded by
/// gamma(n) times the sum of its terms' magnitudes, n the number of terms (any summation order).
template <class S>
void expect_conv_gradients_match_adjoint() {
  struct geometry_case {
    conv2d_options o;
    Shape xs, ws;
  };
  const std::vector<geometry_case> cases{
      {{{2, 1}, {1, 1}, {1, 2}, 2}, {2, 4, 6, 5}, {4, 2, 3, 2}},
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 3, 7, 6}, {4, 3, 3, 3}},  // same size out: contiguous rows
      {{{1, 1}, {2, 2}, {2, 2}, 1}, {1, 2, 5, 5}, {3, 2, 3, 3}},  // dilated, same size
      {{{1, 1}, {2, 1}, {1, 1}, 1}, {1, 2, 4, 6}, {2, 2, 5, 3}},  // taps past both edges
      {{{1, 2}, {0, 1}, {1, 1}, 1}, {2, 2, 5, 7}, {3, 2, 2, 3}},  // horizontal stride
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {2, 2, 5, 4}, {10, 2, 3, 3}},  // 10 channels: bias sums 8 side by side, then 2
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 1, 4, 4}, {16, 1, 3, 3}},  // 16 planes of 16 positions: no tail
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {5, 3, 7, 9}, {7, 3, 2, 2}},  // 6 x 8 = 48 positions: no tail; k = 12
      // several column batches (2 images, then 1), each recomputing its columns in the backward
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {3, 2, 120, 120}, {3, 2, 3, 3}},
  };
  // the last case must take more than one column batch
  const auto& last = cases.back();
  ASSERT_LT(op::conv_detail::images_per_batch(last.xs[0], last.ws[1] * last.ws[2] * last.ws[3], last.xs[2] * last.xs[3]), last.xs[0]);
  unsigned seed = 200;
  const auto to_s = [](Tensor<double>& t) {  // the values the tape sees, in double
    for (auto& v : t) v = static_cast<double>(static_cast<S>(v));
  };
  for (const auto& [o, xs, ws] : cases) {
    auto x = uniform(xs, -1, 1, seed), w = uniform(ws, -1, 1, seed + 1), b = uniform({ws[0]}, -1, 1, seed + 2);
    to_s(x), to_s(w), to_s(b);
    Tensor<double> ref, mag;
    conv_reference(x, w, b, o, ref, mag);
    auto c = uniform(ref.shape(), -1, 1, seed + 3);
    to_s(c);
    seed += 10;
    using P = pol::true_<S>;
    auto xt = astype<S>(x), wt = astype<S>(w), bt = astype<S>(b);
    const auto ct = astype<S>(c);
    Tensor<S> gx(x.shape()), gw(w.shape()), gb(b.shape());
    Tape<P> t;
    const auto xv = t.param(xt.view(), gx.view());
    const auto wv = t.param(wt.view(), gw.view());
    const auto bv = t.param(bt.view(), gb.view());
    t.backward(sum(mul(conv2d(xv, wv, bv, o), t.input(ct))));
    // the adjoint and, beside each entry, the sum of its terms' magnitudes
    Tensor<double> rx(x.shape()), rw(w.shape()), rb(b.shape()), ax(x.shape()), aw(w.shape()), ab(b.shape());
    const index_t og = ws[0] / o.groups, cg = ws[1];
    for (index_t n = 0; n < xs[0]; ++n)
      for (index_t f = 0; f < ws[0]; ++f)
        for (index_t oh = 0; oh < ref.shape()[2]; ++oh)
          for (index_t ow = 0; ow < ref.shape()[3]; ++ow) {
            const double g = c(n, f, oh, ow);
            rb(f) += g;
            ab(f) += std::abs(g);
            for (index_t ci = 0; ci < cg; ++ci)
              for (index_t i = 0; i < ws[2]; ++i)
                for (index_t j = 0; j < ws[3]; ++j) {
                  const index_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                  const index_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                  if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                  const index_t ch = (f / og) * cg + ci;
                  rx(n, ch, ih, iw) += g * w(f, ci, i, j);
                  ax(n, ch, ih, iw) += std::abs(g * w(f, ci, i, j));
                  rw(f, ci, i, j) += g * x(n, ch, ih, iw);
                  aw(f, ci, i, j) += std::abs(g * x(n, ch, ih, iw));
                }
          }
    // dw and db: one term per image and output position; dx: one per output channel of its
    // group and tap; and one rounding more into the gradient's storage
    const auto terms = static_cast<double>(std::max(xs[0] * ref.shape()[2] * ref.shape()[3], og * ws[2] * ws[3]));
    const double gam = bounds::gamma(terms + 1, unit_roundoff<S>());
    const std::string at = " (" + std::string(P::name()) + ", case x " + xs.str() + ", w " + ws.str() + ")";
    for (index_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gx.data()[i], rx.data()[i], gam * ax.data()[i]) << "dx " << i << at;
    for (index_t i = 0; i < w.size(); ++i) ASSERT_NEAR(gw.data()[i], rw.data()[i], gam * aw.data()[i]) << "dw " << i << at;
    for (index_t i = 0; i < b.size(); ++i) ASSERT_NEAR(gb.data()[i], rb.data()[i], gam * ab.data()[i]) << "db " << i << at;
  }
}

TEST(OpLayerReference, Conv2dGradientsMatchAdjoint) {
  expect_conv_gradients_match_adjoint<double>();
  expect_conv_gradients_match_adjoint<float>();
}

/// conv_detail::weight_grad_direct (the fp32 weight gradient read in place) for fp32, bf16 and
/// fp16 operands against sums in double: partial tiles of both levels in both directions (the
/// AVX2 tiles are 3 x 3 entries, the AVX-512 ones 8 x 6), planes with and without a tail past a
/// multiple of 8, several images; gw starts non-zero and alpha scales. The same bits for one
/// thread and two, and with the AVX2 and the AVX-512 tiles.
template <class S>
void expect_weight_grad_direct() {
  if (!op::conv_detail::weight_grad_direct_available()) GTEST_SKIP() << "AVX2 and FMA are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& [og, oc, k, count, p] :
       std::vector<std::array<index_t, 5>>{{5, 6, 7, 3, 13}, {5, 5, 7, 2, 16}, {1, 2, 1, 1, 3}, {16, 16, 9, 4, 49}, {7, 9, 6, 2, 21},
                                          {19, 20, 13, 2, 27}, {8, 8, 12, 3, 24}}) {
    std::vector<S> g(static_cast<std::size_t>(count * oc * p)), col(static_cast<std::size_t>(k * count * p));
    for (auto& v : g) v = static_cast<S>(u(rng));
    for (auto& v : col) v = static_cast<S>(u(rng));
    std::vector<float> gw0(static_cast<std::size_t>(og * k));
    for (auto& v : gw0) v = u(rng);
    const float alpha = 0.5f;
    // on operands of type T (S, or S's values widened to float)
    auto run_on = [&](const auto& gt, const auto& ct, int threads) {
      using T = typename std::decay_t<decltype(gt)>::value_type;
      std::vector<float> gw = gw0, part(static_cast<std::size_t>(op::conv_detail::weight_grad_part_size(og, k)));
      const index_t tail = op::conv_detail::weight_grad_tail_len(count, p);
      std::vector<T> tg(static_cast<std::size_t>(og * tail + 1)), tc(static_cast<std::size_t>(k * tail + 1));
#if defined(_OPENMP)
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
#else
      (void)threads;
#endif
      op::conv_detail::weight_grad_direct(gt.data(), oc * p, og, ct.data(), k, count, p, alpha, gw.data(), part.data(), tg.data(), tc.data());
#if defined(_OPENMP)
      omp_set_num_threads(before);
#endif
      return gw;
    };
    auto run = [&](int threads) { return run_on(g, col, threads); };
    const auto gw = run(1);
    EXPECT_EQ(run(2), gw) << "og " << og << ", k " << k << ", p " << p;
    if constexpr (!std::is_same_v<S, float>) {  // 16-bit operands: the fp32 path's bits on their values
      const std::vector<float> gf(g.begin(), g.end()), cf(col.begin(), col.end());
      EXPECT_EQ(run_on(gf, cf, 1), gw) << "widened, og " << og << ", k " << k << ", p " << p;
    }
    // the AVX-512 tiles (8 x 6 entries) add the AVX2 tiles' (3 x 3) products in their order
    for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512}) {
      if (isa > gemm_isa_available()) continue;
      const gemm_isa before = limit_gemm_isa(isa);
      EXPECT_EQ(run(1), gw) << to_string(isa) << ", og " << og << ", k " << k << ", p " << p;
      EXPECT_EQ(run(2), gw) << to_string(isa) << ", 2 threads, og " << og << ", k " << k << ", p " << p;
      limit_gemm_isa(before);
    }
    const double gam = bounds::gamma(static_cast<double>(count * p + 2), unit_roundoff<float>());
    for (index_t o = 0; o < og; ++o)
      for (index_t t = 0; t < k; ++t) {
        double s = 0, a = 0;
        for (index_t b = 0; b < count; ++b)
          for (index_t q = 0; q < p; ++q) {
            const double v = static_cast<double>(static_cast<float>(g[static_cast<std::size_t>(b * oc * p + o * p + q)])) *
                             static_cast<double>(static_cast<float>(col[static_cast<std::size_t>(t * count * p + b * p + q)]));
            s += v;
            a += std::abs(v);
          }
        const double ref = gw0[static_cast<std::size_t>(o * k + t)] + alpha * s;
        const double tol = gam * (std::abs(gw0[static_cast<std::size_t>(o * k + t)]) + alpha * a);
        ASSERT_NEAR(gw[static_cast<std::size_t>(o * k + t)], ref, tol) << "o " << o << ", t " << t << ", og " << og << ", k " << k << ", p " << p;
      }
  }
}

/// conv2d's backward on padded planes (unit strides, no columns), for fp32, bf16 and fp16
/// operands: padding on neither, one or both axes, dilation, groups, rows that are and are not a
/// whole number of vectors, several image batches.
/// - The weight gradient (pad_planes, pad_output_grads, weight_grad_taps) against sums in double,
///   gw starting non-zero and alpha scaling; the same bits for one thread and two, and with the
///   AVX2 and the AVX-512 tiles.
/// - The data gradient (the GEMM on the padded positions, then col2im_padded): the same bits as
///   the columns' path (the GEMM on the reorganised output gradient, then col2im).
/// The demo CNN's second convolution takes it, its first (one input channel) keeps its columns.
template <class S>
void expect_conv_backward_padded() {
  if (!op::conv_detail::weight_grad_direct_available()) GTEST_SKIP() << "AVX2 and FMA are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  struct geometry_case {
    conv2d_options o;
    Shape xs, ws;
    index_t nb;  // images per batch
  };
  const std::vector<geometry_case> cases{
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {5, 3, 7, 6}, {4, 3, 3, 3}, 2},
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {3, 4, 6, 9}, {7, 4, 2, 3}, 3},
      {{{1, 1}, {2, 0}, {2, 1}, 1}, {2, 3, 8, 5}, {5, 3, 3, 2}, 1},
      {{{1, 1}, {1, 2}, {1, 2}, 2}, {3, 4, 5, 7}, {6, 2, 3, 3}, 2},
      {{{1, 1}, {1, 1}, {1, 1}, 1}, {4, 16, 14, 14}, {32, 16, 3, 3}, 3},  // the demo CNN's second convolution
  };
  std::mt19937_64 rng(78);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& [o, xs, ws, nb] : cases) {
    const auto g = op::conv2d::geometry_of(o, xs, ws);
    const index_t oc = ws[0], groups = o.groups, cg = ws[1], og = oc / groups, k = cg * ws[2] * ws[3], p = g.plane();
    ASSERT_TRUE(op::conv_detail::padded_backward_applies(g, groups, oc)) << xs.str() << " " << ws.str();
    const op::conv_detail::padded_layout d(g);
    std::vector<S> x(static_cast<std::size_t>(xs.numel())), w(static_cast<std::size_t>(ws.numel())),
        gy(static_cast<std::size_t>(xs[0] * oc * p));
    for (auto& v : x) v = static_cast<S>(u(rng));
    for (auto& v : w) v = static_cast<S>(u(rng));
    for (auto& v : gy) v = static_cast<S>(u(rng));
    std::vector<float> gw0(static_cast<std::size_t>(oc * k));
    for (auto& v : gw0) v = u(rng);
    const float alpha = 0.5f;
    std::vector<S> xp(static_cast<std::size_t>(nb * cg * d.plane)), gp(static_cast<std::size_t>(og * nb * d.len));
    // on operands of type T (S, or S's values widened to float)
    auto weight_grad_on = [&](const auto& x_, const auto& gy_, int threads) {
      using T = typename std::decay_t<decltype(x_)>::value_type;
      std::vector<T> xp_(xp.size()), gp_(gp.size());
      std::vector<float> gw = gw0, part(static_cast<std::size_t>(op::conv_detail::weight_grad_part_size(og, k)));
      std::vector<index_t> roff(static_cast<std::size_t>(k));
#if defined(_OPENMP)
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
#else
      (void)threads;
#endif
      for (index_t n0 = 0; n0 < xs[0]; n0 += nb) {
        const index_t count = std::min(nb, xs[0] - n0);
        for (index_t gi = 0; gi < groups; ++gi) {
          op::conv_detail::pad_planes(g, d, x_.data(), gi * cg, cg, n0, count, xp_.data());
          op::conv_detail::pad_output_grads(g, d, gy_.data(), gi * og, og, oc, n0, count, gp_.data());
          op::conv_detail::weight_grad_taps(g, d, gp_.data(), og, xp_.data(), cg, count, alpha, gw.data() + gi * og * k, part.data(),
                                            roff.data());
        }
      }
#if defined(_OPENMP)
      omp_set_num_threads(before);
#endif
      return gw;
    };
    auto weight_grad = [&](int threads) { return weight_grad_on(x, gy, threads); };
    const std::string at = "x " + xs.str() + ", w " + ws.str();
    const auto gw = weight_grad(1);
    EXPECT_EQ(weight_grad(2), gw) << at;
    if constexpr (!std::is_same_v<S, float>) {  // 16-bit operands: the fp32 path's bits on their values
      const std::vector<float> xf(x.begin(), x.end()), gyf(gy.begin(), gy.end());
      EXPECT_EQ(weight_grad_on(xf, gyf, 1), gw) << "widened, " << at;
    }
    for (gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512}) {
      if (isa > gemm_isa_available()) continue;
      const gemm_isa before = limit_gemm_isa(isa);
      EXPECT_EQ(weight_grad(1), gw) << to_string(isa) << ", " << at;
      EXPECT_EQ(weight_grad(2), gw) << to_string(isa) << ", 2 threads, " << at;
      limit_gemm_isa(before);
    }
    const double gam = bounds::gamma(static_cast<double>(xs[0] * p + 2), unit_roundoff<float>());
    const auto val = [](S v) { return static_cast<double>(static_cast<float>(v)); };
    for (index_t f = 0; f < oc; ++f)
      for (index_t ci = 0; ci < cg; ++ci)
        for (index_t i = 0; i < ws[2]; ++i)
          for (index_t j = 0; j < ws[3]; ++j) {
            double sum = 0, mag = 0;
            for (index_t n = 0; n < xs[0]; ++n)
              for (index_t oh = 0; oh < g.ho; ++oh)
                for (index_t ow = 0; ow < g.wo; ++ow) {
                  const index_t ih = oh - o.padding[0] + i * o.dilation[0], iw = ow - o.padding[1] + j * o.dilation[1];
                  if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                  const index_t ch = (f / og) * cg + ci;
                  const double v = val(gy[static_cast<std::size_t>(((n * oc + f) * g.ho + oh) * g.wo + ow)]) *
                                   val(x[static_cast<std::size_t>(((n * xs[1] + ch) * xs[2] + ih) * xs[3] + iw)]);
                  sum += v;
                  mag += std::abs(v);
                }
            const auto e = static_cast<std::size_t>(((f * cg + ci) * ws[2] + i) * ws[3] + j);
            ASSERT_NEAR(gw[e], gw0[e] + alpha * sum, gam * (std::abs(gw0[e]) + alpha * mag))
                << "f " << f << ", c " << ci << ", tap " << i << " " << j << ", " << at;
          }
    // the data gradient both ways, batch by batch and group by group, into zeros
    std::vector<float> dx_cols(x.size(), 0.0f), dx_pad(x.size(), 0.0f), dcol(static_cast<std::size_t>(k * nb * p)),
        dcp(static_cast<std::size_t>(k * nb * d.len)), dxp(static_cast<std::size_t>(nb * cg * d.plane));
    std::vector<S> gm(static_cast<std::size_t>(og * nb * p));
    for (index_t n0 = 0; n0 < xs[0]; n0 += nb) {
      const index_t count = std::min(nb, xs[0] - n0);
      for (index_t gi = 0; gi < groups; ++gi) {
        const TensorView<const S> wt = TensorView<const S>(w.data() + gi * og * k, Shape{og, k}).transpose();
        for (index_t f = 0; f < og; ++f)
          for (index_t b = 0; b < count; ++b)
            std::copy_n(gy.data() + ((n0 + b) * oc + gi * og + f) * p, p, gm.data() + (f * count + b) * p);
        precis::gemm(1.0f, wt, TensorView<const S>(gm.data(), Shape{og, count * p}), 0.0f, TensorView<float>(dcol.data(), Shape{k, count * p}));
        op::conv_detail::col2im(g, dcol.data(), gi * cg, cg, n0, count, dx_cols.data());
        op::conv_detail::pad_output_grads(g, d, gy.data(), gi * og, og, oc, n0, count, gp.data());
        precis::gemm(1.0f, wt, TensorView<const S>(gp.data(), Shape{og, count * d.len}), 0.0f,
                     TensorView<float>(dcp.data(), Shape{k, count * d.len}));
        op::conv_detail::col2im_padded(g, d, dcp.data(), gi * cg, cg, n0, count, dxp.data(), dx_pad.data());
      }
    }
    for (std::size_t i = 0; i < dx_cols.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(dx_pad[i]), std::bit_cast<std::uint32_t>(dx_cols[i])) << "dx " << i << ", " << at;
  }
  // the demo CNN: conv1 (1 channel, 28 x 28, 16 filters) keeps its columns, conv2 pads
  const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
  EXPECT_FALSE(op::conv_detail::padded_backward_applies(op::conv2d::geometry_of(same, Shape{128, 1, 28, 28}, Shape{16, 1, 3, 3}), 1, 16));
  EXPECT_TRUE(op::conv_detail::padded_backward_applies(op::conv2d::geometry_of(same, Shape{128, 16, 14, 14}, Shape{32, 16, 3, 3}), 1, 32));
  // strided sweeps keep their columns
  EXPECT_FALSE(op::conv_detail::padded_backward_applies(
      op::conv2d::geometry_of({{2, 1}, {1, 1}, {1, 1}, 1}, Shape{2, 16, 14, 14}, Shape{32, 16, 3, 3}), 1, 32));
}

TEST(OpLayerReference, Conv2dBackwardPaddedFloat) { expect_conv_backward_padded<float>(); }
TEST(OpLayerReference, Conv2dBackwardPaddedBfloat16) { expect_conv_backward_padded<bfloat16>(); }
TEST(OpLayerReference, Conv2dBackwardPaddedHalf) { expect_conv_backward_padded<half>(); }

TEST(OpLayerReference, Conv2dWeightGradientDirectFloat) { expect_weight_grad_direct<float>(); }
TEST(OpLayerReference, Conv2dWeightGradientDirectBfloat16) { expect_weight_grad_direct<bfloat16>(); }
TEST(OpLayerReference, Conv2dWeightGradientDirectHalf) { expect_weight_grad_direct<half>(); }

/// max_pool2d's 2 x 2, stride-2 path (vectorized where the CPU allows) against the rule written
/// out here: in each window, in the order (0,0) (0,1) (1,0) (1,1), an element replaces the best
/// so far when it is larger or a NaN. Inputs drawn from {-1, -0, 0, 1, 2, NaN} make ties, signed
/// zeros and NaNs common; rows of 18 and 7 windows cover a full and a partial vector of 16 and
/// an odd width (the last column belongs to no window), rows of 1, 3, 5 and 12 windows every
/// size of the partial rows' copies. The gradient of sum(y * w) lands on each
/// window's winner, so it checks the saved positions. `activation`: the pool reads x * 1, an
/// activation in the policy's storage (bf16 under bf16-mixed, as after a convolution), so that
/// its input gradient is a fresh tensor of that format rather than the fp32 parameter's.
template <class P>
void check_max_pool_2x2(index_t w, bool activation = false) {
  using S = typename P::param_type;
  const index_t n = 2, c = 3, h = 5, ho = h / 2, wo = w / 2;
  const float pool[] = {-1.0f, -0.0f, 0.0f, 1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  Tensor<S> x(Shape{n, c, h, w});
  std::uint32_t state = 12345;
  for (index_t i = 0; i < x.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    x.data()[i] = S(pool[(state >> 16) % 6]);
  }
  Tape<P> t;
  Tensor<S> gx(x.shape());
  const auto xv = t.param(x.view(), gx.view());
  Tensor<S> ones(x.shape());
  for (index_t i = 0; i < ones.size(); ++i) ones.data()[i] = S(1.0f);
  const auto y = activation ? max_pool2d(mul(xv, t.input(ones.view())), {{2, 2}, {2, 2}, {0, 0}})
                            : max_pool2d(xv, {{2, 2}, {2, 2}, {0, 0}});
  Tensor<S> wts(y.shape());
  for (index_t i = 0; i < wts.size(); ++i) wts.data()[i] = S(static_cast<float>(i % 61 + 1));
  t.backward(sum(mul(y, t.input(wts.view()))));
  std::vector<float> want_gx(static_cast<std::size_t>(x.size()), 0.0f);
  for (index_t pl = 0; pl < n * c; ++pl)
    for (index_t oh = 0; oh < ho; ++oh)
      for (index_t ow = 0; ow < wo; ++ow) {
        const index_t base = pl * h * w + 2 * oh * w + 2 * ow, o = (pl * ho + oh) * wo + ow;
        index_t best = base;
        float bv = static_cast<float>(x.data()[base]);
        for (const index_t at : {base + 1, base + w, base + w + 1}) {
          const float v = static_cast<float>(x.data()[at]);
          if (v > bv || std::isnan(v)) {
            bv = v;
            best = at;
          }
        }
        const float got = static_cast<float>(y.value().data()[o]);
        std::uint32_t gb, wb;
        std::memcpy(&gb, &got, 4);
        std::memcpy(&wb, &bv, 4);
        if (std::isnan(bv)) {
          ASSERT_TRUE(std::isnan(got)) << "window " << o << ", width " << w;
        } else {
          ASSERT_EQ(gb, wb) << "window " << o << " (plane " << pl << ", row " << oh << ", column " << ow << "), width " << w;
        }
        want_gx[static_cast<std::size_t>(best)] = static_cast<float>(wts.data()[o]);
      }
  for (index_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(static_cast<float>(gx.data()[i]), want_gx[static_cast<std::size_t>(i)]) << "input " << i << ", width " << w;
  }
}

TEST(OpLayerReference, MaxPool2x2KeepsTheFirstLargestOrTheNaN) {
  for (const index_t w : {36, 37, 14, 2, 6, 11, 25}) {  // 18, 7, 1, 3, 5 and 12 windows a row
    check_max_pool_2x2<pol::named<"32-true">>(w);
    check_max_pool_2x2<pol::named<"bf16-mixed">>(w);
    check_max_pool_2x2<pol::named<"bf16-mixed">>(w, true);
    check_max_pool_2x2<pol::named<"16-mixed">>(w, true);
    check_max_pool_2x2<pol::named<"64-true">>(w);
    check_max_pool_2x2<pol::named<"bf16-true">>(w);  // 16-bit in and out: selected in place
    check_max_pool_2x2<pol::named<"16-true">>(w);
  }
}

}  // namespace
