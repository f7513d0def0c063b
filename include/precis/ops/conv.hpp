// Convolution and pooling over [N, C, H, W] images: conv2d (stride, padding, dilation, groups,
// optional bias), max_pool2d and avg_pool2d.
//
// conv2d is a GEMM per group: the input's receptive fields are gathered into columns (im2col,
// in the policy's compute type, a batch of images at a time), multiplied by the weights with
// the policy's accumulator, and each output rounded once after its bias is added. With an fp32
// accumulator, at most 256 taps per output (C / groups kh kw, the fp32 GEMM's K block) and unit
// stride along the rows, the host's forward skips the columns (op::cpu::conv_direct: each
// output's chain of FMAs read straight from the padded input, the GEMM path's bits). The backward
// runs the two transposed GEMMs in the accumulator and scatters the column gradients back
// (col2im) into an accumulator image: every gradient is rounded once into its storage. With an
// fp32 accumulator (and float, bfloat16 or half operands) on a CPU with AVX2 and FMA, the
// weight gradient is not a GEMM: op::cpu::weight_grad_direct reads the output gradient and the
// columns in place (a GEMM would pack both, each packed value used only O or C kh kw times).
// There, for unit strides and many taps, the backward makes no columns at all: x and the output
// gradient are laid on zero-padded rows, on which every tap is a plain offset (the weight
// gradient's tiles read them in place; the data gradient's GEMM writes the padded positions and
// op::cpu::col2im_padded adds each tap back in one run, the bits of col2im).
//
// The definitions keep the algorithm (column batches, groups, GEMMs) and reach memory only
// through their context (context_only): im2col, col2im, the output's bias and rounding, the
// gathers, the pools' windows are context members, the host's in ops/cpu_kernels.hpp, the
// device's in cuda/conv.cuh.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>

#include "precis/ops/op.hpp"

namespace precis::op {

/// 2-D cross-correlation (PyTorch's conv2d): x [N, C, H, W], w [O, C / groups, kh, kw],
/// optional bias [O] -> [N, O, Ho, Wo], Ho = (H + 2 pad - dil (kh - 1) - 1) / stride + 1.
struct conv2d : def<policy::safety::low_precision_safe> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "conv2d";
  static constexpr std::string_view reason =
      "a GEMM over receptive fields (im2col): products exact in fp32, a wide accumulator takes the C kh kw "
      "sums; the bias is added in the accumulator before the one rounding";
  static constexpr bool scaled_fp8 = true;  // fp8 policies: scaled e4m3 x and w, e5m2 gradient
  struct attrs {
    conv_detail::pair stride{1, 1};
    conv_detail::pair padding{0, 0};
    conv_detail::pair dilation{1, 1};
    index_t groups = 1;
  };
  template <class T>
  struct saved {
    TensorView<const typename T::storage> x, w;
    /// The forward's columns, group after group ([groups, k, N Ho Wo]), when the whole batch
    /// fit one column buffer; null otherwise (the backward recomputes them).
    const typename T::storage* cols = nullptr;
    detail::ad::gemm_scales sc;
  };

  static conv_detail::geometry geometry_of(const attrs& a, const Shape& x, const Shape& w) {
    return {x[0], x[1], x[2], x[3], w[2], w[3],
            conv_detail::out_extent(x[2], w[2], a.stride[0], a.padding[0], a.dilation[0]),
            conv_detail::out_extent(x[3], w[3], a.stride[1], a.padding[1], a.dilation[1]),
            a.stride, a.padding, a.dilation};
  }

  static Shape shape(const attrs& a, const Shape& x, const Shape& w, const Shape* b = nullptr) {
    using conv_detail::str;
    const auto fail = [&](const std::string& expected) {  // the message is built only on failure
      throw shape_error("precis::conv2d: x " + x.str() + ", weight " + w.str() + (b ? ", bias " + b->str() : std::string()) +
                        ", stride " + str(a.stride) + ", padding " + str(a.padding) + ", dilation " + str(a.dilation) +
                        ", groups " + std::to_string(a.groups) + "; expected " + expected);
    };
    if (x.rank() != 4 || w.rank() != 4) fail("x [N, C, H, W] and weight [O, C / groups, kh, kw]");
    if (a.groups < 1 || a.stride[0] < 1 || a.stride[1] < 1 || a.dilation[0] < 1 || a.dilation[1] < 1 ||
        a.padding[0] < 0 || a.padding[1] < 0) {
      fail("groups, stride and dilation >= 1 and padding >= 0");
    }
    if (x[1] % a.groups != 0 || w[0] % a.groups != 0) fail("input and output channels divisible by groups");
    if (w[1] != x[1] / a.groups) {
      fail("weight [O, " + std::to_string(x[1] / a.groups) + ", kh, kw]: the input's " + std::to_string(x[1]) +
           " channels over " + std::to_string(a.groups) + " groups (mismatched channels)");
    }
    if (w[2] < 1 || w[3] < 1) fail("a kernel of at least 1 x 1");
    if (b != nullptr && (b->rank() != 1 || (*b)[0] != w[0])) fail("bias [" + std::to_string(w[0]) + "]");
    const auto g = geometry_of(a, x, w);
    if (g.ho < 0 || g.wo < 0) fail("a (dilated) kernel no larger than the padded input");
    return Shape{x[0], w[0], g.ho, g.wo};
  }
  static Shape shape(const attrs& a, const Shape& x, const Shape& w, const Shape& b) { return shape(a, x, w, &b); }

  template <class T, class Ctx, class O, class X, class W, class... B>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x,
                      const TensorView<const W>& w, const TensorView<const B>&... bias) {
    using L = typename T::storage;
    using Acc = typename T::accumulator;
    if constexpr (detail::ad::scaled<T>) sv.sc.fp8 = &ctx.fp8_gemm(name);
    sv.x = detail::ad::gemm_operand<T, 0>(ctx, x, sv.sc);
    sv.w = detail::ad::gemm_operand<T, 1>(ctx, w, sv.sc);
    const fp8::gemm_alpha alpha = fp8::descale(sv.sc.s0, sv.sc.s1);
    const auto g = geometry_of(a, x.shape(), w.shape());
    const index_t groups = a.groups, cg = g.c / groups, og = w.shape()[0] / groups, k = cg * g.kh * g.kw, p = g.plane();
    TensorView<const Acc> no_bias;
    const auto bias_view = std::get<0>(std::forward_as_tuple(bias..., no_bias));  // no_bias when there is none
    sv.cols = nullptr;
    // few taps per output: straight from the input, no columns (the backward makes its own)
    if constexpr (Ctx::template conv_direct_types<Acc, L>) {
      if (ctx.conv_direct(g, groups, w.shape()[0], sv.x.data(), sv.w.data(), bias_view, static_cast<float>(alpha.value), y.data())) {
        return;
      }
    }
    const index_t nb = ctx.conv_images_per_batch(g.n, k, p);
    // when the batch fits one buffer and a backward will run, the columns are kept for it
    const bool keep_cols = ctx.saving() && nb == g.n;
    L* kept = keep_cols ? ctx.template keep_array<L>(groups * k * nb * p) : nullptr;
    const auto col = keep_cols ? TensorView<L>(kept, Shape{k, nb * p}) : ctx.template temp<L>(Shape{k, nb * p});
    sv.cols = kept;
    const auto acc = ctx.template temp<Acc>(Shape{og, nb * p});
    for (index_t n0 = 0; n0 < g.n; n0 += nb) {
      const index_t count = std::min(nb, g.n - n0), cols = count * p;
      for (index_t gi = 0; gi < groups; ++gi) {
        L* cg_cols = kept ? kept + gi * k * cols : col.data();
        ctx.im2col(g, sv.x.data(), gi * cg, cg, n0, count, cg_cols);
        const TensorView<Acc> av(acc.data(), Shape{og, cols});
        ctx.gemm(av, TensorView<const L>(sv.w.data() + gi * og * k, Shape{og, k}), TensorView<const L>(cg_cols, Shape{k, cols}),
                 false, alpha);
        ctx.conv_output(acc.data(), bias_view, gi * og, og, w.shape()[0], n0, count, p, y.data());
      }
    }
  }

  template <class T, class Ctx, class G, class O, class... X, class... GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>...>&, const std::tuple<TensorView<GX>...>& gx) {
    using L = typename T::storage;
    using Acc = typename T::accumulator;
    const auto& gxv = std::get<0>(gx);
    const auto& gwv = std::get<1>(gx);
    const bool want_x = gxv.data() != nullptr, want_w = gwv.data() != nullptr;
    bool want_b = false;
    if constexpr (sizeof...(GX) == 3) want_b = std::get<2>(gx).data() != nullptr;
    const auto g = geometry_of(a, sv.x.shape(), sv.w.shape());
    const index_t oc_all = sv.w.shape()[0], groups = a.groups, cg = g.c / groups, og = oc_all / groups,
                  k = cg * g.kh * g.kw, p = g.plane();
    const index_t nb = ctx.conv_images_per_batch(g.n, k, p);
    const auto gw_acc = want_w ? ctx.template zeros<Acc>(sv.w.shape()) : TensorView<Acc>();
    const auto gb_acc = want_b ? ctx.template zeros<Acc>(Shape{oc_all}) : TensorView<Acc>();
    // x's gradient is summed in Acc: straight into a fresh gradient of that type (zeroed here),
    // else into zeros added once at the end
    Acc* gx_sum = nullptr;
    if constexpr (std::is_same_v<std::remove_pointer_t<decltype(gxv.data())>, Acc>) {
      if (want_x && gxv.is_contiguous() && ctx.take_fresh(gxv)) {
        gx_sum = gxv.data();
        ctx.fill_zero(gxv);
      }
    }
    const bool gx_direct = gx_sum != nullptr;
    const auto gx_acc = want_x && !gx_direct ? ctx.template zeros<Acc>(sv.x.shape()) : TensorView<Acc>();
    if (want_x && !gx_direct) gx_sum = gx_acc.data();
    // the GEMMs' copy of gy: cast to scaled e5m2 under an fp8 policy (the bias sums read gy)
    fp8::scale_ref sg;
    const auto gq = detail::ad::grad_operand<T>(ctx, gy, sv.sc, sg);
    using GQ = detail::remove_const_t<std::remove_pointer_t<decltype(gq.data())>>;
    // the weight gradient straight from gy and the columns where the types allow
    // (conv_detail::weight_grad_direct); the GEMMs read gy reorganised as [og, images * p]
    constexpr bool direct_types = Ctx::template weight_grad_direct_types<Acc, L, GQ>;
    bool direct_w = false, padded = false;
    if constexpr (direct_types) {
      direct_w = want_w && ctx.weight_grad_direct_available();
      // unit strides and many taps: x and gy laid on zero-padded planes, every tap a plain
      // offset into them (conv_detail::padded_layout): no columns
      padded = !sv.cols && ctx.weight_grad_direct_available() && ctx.padded_backward_applies(g, groups, oc_all);
    }
    if constexpr (direct_types) {
      if (padded) {
        const conv_detail::padded_layout d(g);
        const index_t nbp = conv_detail::padded_images_per_batch(g, d, k);
        const auto xp = want_w ? ctx.template temp<L>(Shape{nbp * cg * d.plane}) : TensorView<L>();
        const auto gp = ctx.template temp<GQ>(Shape{og * nbp * d.len});
        const auto dcp = want_x ? ctx.template temp<Acc>(Shape{k, nbp * d.len}) : TensorView<Acc>();
        const auto dxp = want_x ? ctx.template temp<Acc>(Shape{nbp * cg * d.plane}) : TensorView<Acc>();
        const auto part = want_w ? ctx.template temp<float>(Shape{conv_detail::weight_grad_part_size(og, k)}) : TensorView<float>();
        for (index_t n0 = 0; n0 < g.n; n0 += nbp) {
          const index_t count = std::min(nbp, g.n - n0), cols = count * d.len;
          for (index_t gi = 0; gi < groups; ++gi) {
            if (want_b) {
              ctx.conv_output_grads(gq.data(), gy.data(), gi * og, og, oc_all, n0, count, p, static_cast<GQ*>(nullptr), gb_acc.data() + gi * og);
            }
            ctx.pad_output_grads(g, d, gq.data(), gi * og, og, oc_all, n0, count, gp.data());
            if (want_w) {  // dW_g += the taps' sums of gp and the padded planes
              ctx.pad_planes(g, d, sv.x.data(), gi * cg, cg, n0, count, xp.data());
              ctx.weight_grad_taps(g, d, gp.data(), og, xp.data(), cg, count, static_cast<float>(fp8::descale(sv.sc.s0, sg).value),
                                   gw_acc.data() + gi * og * k, part.data());
            }
            if (want_x) {  // dcol = W_g^T dY_g on the padded positions, added back tap by tap
              ctx.gemm(TensorView<Acc>(dcp.data(), Shape{k, cols}), TensorView<const L>(sv.w.data() + gi * og * k, Shape{og, k}).transpose(),
                       TensorView<const GQ>(gp.data(), Shape{og, cols}), false, fp8::descale(sv.sc.s1, sg));
              ctx.col2im_padded(g, d, dcp.data(), gi * cg, cg, n0, count, dxp.data(), gx_sum);
            }
          }
        }
      }
    }
    const auto col = want_w && !padded && !sv.cols ? ctx.template temp<L>(Shape{k, nb * p}) : TensorView<L>();
    const auto dcol = want_x && !padded ? ctx.template temp<Acc>(Shape{k, nb * p}) : TensorView<Acc>();
    const bool tiles_w = direct_w && !padded;
    const auto part = tiles_w ? ctx.template temp<float>(Shape{conv_detail::weight_grad_part_size(og, k)}) : TensorView<float>();
    const index_t tail = tiles_w ? conv_detail::weight_grad_tail_len(nb, p) : 0;
    const auto tail_g = ctx.template temp<GQ>(Shape{og * tail});
    const auto tail_c = ctx.template temp<L>(Shape{k * tail});
    const auto gyg = ctx.template temp<GQ>(Shape{og, padded ? 0 : nb * p});
    for (index_t n0 = 0; n0 < (padded ? 0 : g.n); n0 += nb) {
      const index_t count = std::min(nb, g.n - n0), cols = count * p;
      for (index_t gi = 0; gi < groups; ++gi) {
        const bool need_gm = want_x || (want_w && !direct_w);
        // this group's output gradients as [og, count * p], and the bias gradients
        ctx.conv_output_grads(gq.data(), gy.data(), gi * og, og, oc_all, n0, count, p, need_gm ? gyg.data() : nullptr,
                              want_b ? gb_acc.data() + gi * og : nullptr);
        const TensorView<const GQ> gm(gyg.data(), Shape{og, cols});
        if (want_w) {  // dW_g^T += col dY_g^T: the long operand (col, K = cols) packs row by row
          const L* cg_cols = sv.cols ? sv.cols + gi * k * cols : col.data();
          if (!sv.cols) ctx.im2col(g, sv.x.data(), gi * cg, cg, n0, count, col.data());
          const fp8::gemm_alpha alpha = fp8::descale(sv.sc.s0, sg);
          if constexpr (direct_types) {
            if (direct_w) {
              ctx.weight_grad_direct(gq.data() + (n0 * oc_all + gi * og) * p, oc_all * p, og, cg_cols, k, count, p,
                                              static_cast<float>(alpha.value), gw_acc.data() + gi * og * k, part.data(), tail_g.data(),
                                              tail_c.data());
            }
          }
          if (!direct_w) {
            ctx.gemm(TensorView<Acc>(gw_acc.data() + gi * og * k, Shape{og, k}).transpose(),
                     TensorView<const L>(cg_cols, Shape{k, cols}), gm.transpose(), true, alpha);
          }
        }
        if (want_x) {  // dcol = W_g^T dY_g, scattered back into the image
          const TensorView<Acc> dc(dcol.data(), Shape{k, cols});
          ctx.gemm(dc, TensorView<const L>(sv.w.data() + gi * og * k, Shape{og, k}).transpose(), gm, false, fp8::descale(sv.sc.s1, sg));
          ctx.col2im(g, dc.data(), gi * cg, cg, n0, count, gx_sum);
        }
      }
    }
    if (want_x && !gx_direct) ctx.template add_into<Acc>("precis::conv2d", gxv, gx_acc.as_const());
    if (want_w) ctx.template add_into<Acc>("precis::conv2d", gwv, gw_acc.as_const());
    if constexpr (sizeof...(GX) == 3) {
      if (want_b) ctx.template add_into<Acc>("precis::conv2d", std::get<2>(gx), gb_acc.as_const());
    }
  }
};

/// Pooling windows: kernel, stride (0: the kernel) and zero padding (at most half the kernel).
struct pool2d_attrs {
  conv_detail::pair kernel{2, 2};
  conv_detail::pair stride{0, 0};
  conv_detail::pair padding{0, 0};
};

template <class Op>
struct pool_def {
  static conv_detail::pair stride_of(const pool2d_attrs& a) {
    return {a.stride[0] == 0 ? a.kernel[0] : a.stride[0], a.stride[1] == 0 ? a.kernel[1] : a.stride[1]};
  }
  static conv_detail::geometry geometry_of(const pool2d_attrs& a, const Shape& x) {
    const auto s = stride_of(a);
    return {x[0], x[1], x[2], x[3], a.kernel[0], a.kernel[1], conv_detail::out_extent(x[2], a.kernel[0], s[0], a.padding[0], 1),
            conv_detail::out_extent(x[3], a.kernel[1], s[1], a.padding[1], 1), s, a.padding, {1, 1}};
  }
  static Shape shape(const pool2d_attrs& a, const Shape& x) {
    using conv_detail::str;
    const auto fail = [&](const std::string& expected) {
      throw shape_error(std::string(detail::ad::name_of<Op>()) + ": x " + x.str() + ", kernel " + str(a.kernel) + ", stride " +
                        str(a.stride) + ", padding " + str(a.padding) + "; expected " + expected);
    };
    if (x.rank() != 4) fail("x [N, C, H, W]");
    if (a.kernel[0] < 1 || a.kernel[1] < 1 || a.stride[0] < 0 || a.stride[1] < 0 || a.padding[0] < 0 || a.padding[1] < 0) {
      fail("kernel >= 1, stride >= 0 (0: the kernel) and padding >= 0");
    }
    if (2 * a.padding[0] > a.kernel[0] || 2 * a.padding[1] > a.kernel[1]) fail("padding at most half the kernel");
    // with H, W >= 1 and padding at most half the kernel, every window holds an element of x
    // (an empty plane's padded windows would hold none: a max over nothing)
    if (x[2] < 1 || x[3] < 1) fail("H and W of at least 1");
    const auto g = geometry_of(a, x);
    if (g.ho < 0 || g.wo < 0) fail("a kernel no larger than the padded input");
    return Shape{x[0], x[1], g.ho, g.wo};
  }
};

/// The largest element of each window (padding never wins); the gradient goes to it.
struct max_pool2d : def<policy::safety::neutral>, pool_def<max_pool2d> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "max_pool2d";
  static constexpr std::string_view reason = "selection: exact";
  using attrs = pool2d_attrs;
  template <class T>
  struct saved {
    const std::int32_t* at = nullptr;  // per output element, the input's position in its plane
  };
  using pool_def<max_pool2d>::shape;

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>& sv, const TensorView<const X>& x) {
    std::int32_t* at = ctx.saving() ? ctx.template keep_array<std::int32_t>(y.size()) : nullptr;
    ctx.max_pool(geometry_of(a, x.shape()), x, y, at);
    sv.at = at;
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>& sv, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    const auto& d = std::get<0>(gx);
    if (d.data() == nullptr) return;
    ctx.template max_pool_backward<detail::ad::arith_t<typename T::accumulator>>(geometry_of(a, d.shape()), gy, sv.at, d);
  }
};

/// The mean of each window, padding counted as zeros (the divisor is always kh kw).
struct avg_pool2d : def<policy::safety::needs_wide>, pool_def<avg_pool2d> {
  static constexpr bool assigns_fresh_gradients = true;  // op::cpu::take_fresh
  static constexpr bool context_only = true;
  static constexpr std::string_view name = "avg_pool2d";
  static constexpr std::string_view reason =
      "a sum of kh kw values: 4 fp16 values near 65504 overflow before the division, so it sums in the wide type";
  using attrs = pool2d_attrs;
  template <class T>
  struct saved {};
  using pool_def<avg_pool2d>::shape;

  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx& ctx, const attrs& a, const TensorView<O>& y, saved<T>&, const TensorView<const X>& x) {
    const auto xc = ctx.template as<detail::remove_const_t<X>>(x, false);
    ctx.template avg_pool<detail::ad::arith_t<typename T::accumulator>>(geometry_of(a, x.shape()), xc, y);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx& ctx, const attrs& a, const saved<T>&, const TensorView<const G>& gy, const TensorView<const O>&,
                       const std::tuple<TensorView<const X>>&, const std::tuple<TensorView<GX>>& gx) {
    const auto& d = std::get<0>(gx);
    if (d.data() == nullptr) return;
    using R = detail::ad::arith_t<typename T::accumulator>;
    const auto g = geometry_of(a, d.shape());
    const auto acc = ctx.template zeros<R>(d.shape());
    ctx.avg_pool_backward(g, gy, acc);
    ctx.template add_into<R>("precis::avg_pool2d", d, acc.as_const());
  }
};

}  // namespace precis::op

namespace precis {

using conv2d_options = op::conv2d::attrs;
using pool2d_options = op::pool2d_attrs;

/// 2-D convolution (cross-correlation) of x [N, C, H, W] with w [O, C / groups, kh, kw].
template <class P, class SX, class SW>
auto conv2d(const Var<P, SX>& x, const Var<P, SW>& w, const conv2d_options& o = {}) { return record<op::conv2d>(o, x, w); }
template <class P, class SX, class SW, class SB>
auto conv2d(const Var<P, SX>& x, const Var<P, SW>& w, const Var<P, SB>& bias, const conv2d_options& o = {}) {
  return record<op::conv2d>(o, x, w, bias);
}
template <class P, tensor_like X, tensor_like W>
auto conv2d(const X& x, const W& w, const conv2d_options& o = {}) { return evaluate<P, op::conv2d>(o, x, w); }
template <class P, tensor_like X, tensor_like W, tensor_like B>
auto conv2d(const X& x, const W& w, const B& bias, const conv2d_options& o = {}) {
  return evaluate<P, op::conv2d>(o, x, w, bias);
}

/// Max over each window of x [N, C, H, W].
template <class P, class S>
auto max_pool2d(const Var<P, S>& x, const pool2d_options& o = {}) { return record<op::max_pool2d>(o, x); }
template <class P, tensor_like X>
auto max_pool2d(const X& x, const pool2d_options& o = {}) { return evaluate<P, op::max_pool2d>(o, x); }
/// Mean over each window of x [N, C, H, W] (padding counts as zeros).
template <class P, class S>
auto avg_pool2d(const Var<P, S>& x, const pool2d_options& o = {}) { return record<op::avg_pool2d>(o, x); }
template <class P, tensor_like X>
auto avg_pool2d(const X& x, const pool2d_options& o = {}) { return evaluate<P, op::avg_pool2d>(o, x); }

}  // namespace precis
