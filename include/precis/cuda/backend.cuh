// The op layer's device backend: a context with op::cpu's members whose memory is device memory
// and whose GEMM, element-wise maps, sums and zeroing run on one CUDA stream, so an op
// definition that reaches memory and arithmetic only through its context (the element-wise
// ops, linear's forward, every use of add_into / accumulate / gemm) runs unchanged on the GPU.
// Include only from .cu translation units.
//
//   precis::cuda::DeviceArena temp, keep;
//   const precis::op::cuda ctx(temp, keep, true, stream);
//   precis::op::relu::forward<T>(ctx, {}, y, saved, x);   // y, x: TensorViews of device memory
//
// TensorViews handed to this context point to device memory and are never dereferenced on the
// host. Under an fp8 policy the GEMM ops' casts, scales and statistics stay on the device
// (precis::cuda::fp8_scaling_state, cuda/fp8.cuh): a GEMM reads the scales its operands were
// cast with when it runs.
//
// The same context behind a tape: precis::cuda::device_backend, named by the policy wrapper
// precis::cuda::on_device<P>, puts a Tape's values, gradients and temporaries in device memory
// and runs its ops (those that declare context_only) on one stream:
//
//   using P = precis::cuda::on_device<precis::policy::named<"bf16-mixed">>;
//   precis::Tape<P> tape;                        // or Tape<P>(bytes, {stream})
//   auto w = tape.param(w_device_view, gw_device_view);
//   auto loss = cross_entropy(relu(linear(tape.borrow(x_device_view), w, b)),
//                             precis::borrowed_labels{labels_device_span});
//   tape.backward(loss, precis::TensorView<const double>(opt.device_scale(), precis::Shape{}));
//                                                 // the loss scale the device keeps: no host sync
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "precis/cuda/conv.cuh"
#include "precis/cuda/device.cuh"
#include "precis/cuda/elementwise.cuh"
#include "precis/cuda/fiber.cuh"
#include "precis/cuda/fp8.cuh"
#include "precis/cuda/gemm.cuh"
#include "precis/cuda/loss.cuh"
#include "precis/cuda/reduce.cuh"
#include "precis/ops/op.hpp"

namespace precis::cuda {

/// The bump allocator of device memory behind a device context: every allocation of one op or
/// one step from cudaMalloc'd blocks, rewound by reset(). As precis::Arena: when a step needed
/// more than one block, reset() replaces them by one block of the largest step seen, so from
/// the second step of the same shapes on nothing is allocated.
class DeviceArena {
 public:
  static constexpr std::size_t alignment = 256;

  DeviceArena() = default;
  explicit DeviceArena(std::size_t initial_bytes) { add_block(round_up(initial_bytes)); }

  /// `bytes` of uninitialized device memory on a 256-byte boundary, valid until reset().
  void* allocate(std::size_t bytes) {
    bytes = round_up(std::max<std::size_t>(bytes, 1));
    if (current_ < blocks_.size() && blocks_[current_].used + bytes > blocks_[current_].data.size()) {
      ++current_;
      while (current_ < blocks_.size() && bytes > blocks_[current_].data.size()) ++current_;
    }
    if (current_ >= blocks_.size()) {
      const std::size_t last = blocks_.empty() ? 0 : blocks_.back().data.size();
      add_block(std::max({bytes, 2 * last, std::size_t{1} << 20}));
      current_ = blocks_.size() - 1;
    }
    block& b = blocks_[current_];
    void* p = b.data.data() + b.used;
    b.used += bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  template <class T>
  T* allocate_array(std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>, "precis::cuda::DeviceArena holds trivially copyable types only");
    return static_cast<T*>(allocate(n * sizeof(T)));
  }
  /// Forgets every allocation (the memory is reused; kernels still reading it must be ordered
  /// before the next writes, as on one stream). After a step that spilled into more than one
  /// block, the blocks are merged into one of the peak's size: that waits for the device first
  /// (kernels queued on any stream may still read the blocks it frees), so it cannot happen
  /// inside a CUDA graph capture, and a graph captured before it refers to freed memory: capture
  /// after a step of the same shapes has run.
  void reset() {
    if (blocks_.size() > 1) {
      check(cudaDeviceSynchronize(), "precis::cuda::DeviceArena::reset: cudaDeviceSynchronize before merging its blocks");
      blocks_.clear();
      add_block(peak_);
    }
    for (block& b : blocks_) b.used = 0;
    current_ = 0;
    in_use_ = 0;
  }
  std::size_t bytes_in_use() const noexcept { return in_use_; }
  std::size_t peak_bytes() const noexcept { return peak_; }
  std::size_t capacity() const noexcept {
    std::size_t c = 0;
    for (const block& b : blocks_) c += b.data.size();
    return c;
  }

 private:
  struct block {
    device_buffer<unsigned char> data;
    std::size_t used = 0;
  };
  static std::size_t round_up(std::size_t n) { return (n + alignment - 1) / alignment * alignment; }
  void add_block(std::size_t bytes) { blocks_.push_back(block{device_buffer<unsigned char>(bytes), 0}); }

  std::vector<block> blocks_;
  std::size_t current_ = 0;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
};

/// Dense row-major device memory of T owned for the object's life, seen as a precis::TensorView
/// (of device memory: never dereferenced on the host): what device_backend keeps nn modules'
/// parameters and gradients in. Its contents start unspecified.
template <class T>
class backend_tensor {
 public:
  explicit backend_tensor(const Shape& shape) : shape_(shape), buf_(static_cast<std::size_t>(shape.numel())) {}

  const Shape& shape() const noexcept { return shape_; }
  index_t size() const noexcept { return shape_.numel(); }
  T* data() noexcept { return buf_.data(); }
  const T* data() const noexcept { return buf_.data(); }
  TensorView<T> view() noexcept { return TensorView<T>(buf_.data(), shape_); }
  TensorView<const T> view() const noexcept { return TensorView<const T>(buf_.data(), shape_); }

 private:
  Shape shape_;
  device_buffer<T> buf_;
};

/// A TensorView of device memory as a DeviceView (the same pointer, shape and strides).
template <class S, class C>
DeviceView<S> device_view(const TensorView<S, C>& v) {
  return DeviceView<S>(v.data(), v.shape(), v.strides());
}

}  // namespace precis::cuda

namespace precis::op {

/// The device backend (see the file comment): op::cpu's members on device memory and one
/// stream.
class cuda : public fresh_tracking<cuda> {
 public:
  /// fp8: the scaling state of an fp8 policy's tape (null otherwise).
  cuda(precis::cuda::DeviceArena& temp, precis::cuda::DeviceArena& keep, bool saving, cudaStream_t stream = nullptr,
       precis::cuda::fp8_scaling_state* fp8 = nullptr) noexcept
      : temp_(&temp), keep_(&keep), saving_(saving), stream_(stream), fp8_(fp8) {}

  bool saving() const noexcept { return saving_; }
  cudaStream_t stream() const noexcept { return stream_; }

  /// Uninitialized device memory rewound after the op (forward) or the node (backward).
  template <class T>
  TensorView<T> temp(const Shape& s) const {
    return TensorView<T>(temp_->template allocate_array<T>(static_cast<std::size_t>(s.numel())), s);
  }
  /// temp() filled with zeros (all zero bytes: the binary formats' +0).
  template <class T>
  TensorView<T> zeros(const Shape& s) const {
    const auto v = temp<T>(s);
    zero_bytes(v.data(), static_cast<std::size_t>(v.size()) * sizeof(T));
    return v;
  }
  /// Uninitialized device memory that lives as long as the step (saved state).
  template <class T>
  TensorView<T> keep(const Shape& s) const {
    return TensorView<T>(keep_->template allocate_array<T>(static_cast<std::size_t>(s.numel())), s);
  }
  template <class T>
  T* keep_array(index_t n) const {
    return keep_->template allocate_array<T>(static_cast<std::size_t>(n));
  }

  /// x as a contiguous device view of storage L: x itself when it already is one, otherwise a
  /// copy rounded once to nearest, kept for the backward when `for_backward` and saving().
  template <class L, class S, class C>
  TensorView<const L> as(const TensorView<S, C>& x, bool for_backward) const {
    if constexpr (std::is_same_v<precis::detail::remove_const_t<S>, L>) {
      if (x.is_contiguous()) return TensorView<const L>(x.data(), x.shape());
    }
    const auto out = (for_backward && saving_) ? keep<L>(x.shape()) : temp<L>(x.shape());
    copy(x, out);
    return out.as_const();
  }

  /// The fp8 scaling entry of the next fp8 GEMM op `name` of this step.
  fp8::gemm_scaling& fp8_gemm(std::string_view name) const {
    if (fp8_ == nullptr) throw invalid_argument("precis::" + std::string(name) + ": an fp8 GEMM without fp8 scaling state");
    return fp8_->next(name);
  }
  /// x cast to fp8 on the device by entry g's scaling of operand R (fp8_scaling_state::cast),
  /// as a contiguous view kept for the backward when `for_backward` and saving(); `scale` gets
  /// the address of the device float holding the scale used (kept as long as the view).
  template <fp8::operand R, class S, class C>
  TensorView<const fp8::operand_format_t<R>> cast_fp8(const TensorView<S, C>& x, fp8::gemm_scaling& g, fp8::scale_ref& scale,
                                                      bool for_backward) const {
    using F8 = fp8::operand_format_t<R>;
    if (fp8_ == nullptr) throw invalid_argument("precis::cuda backend: an fp8 cast without fp8 scaling state");
    const auto xd = as<precis::detail::remove_const_t<S>>(x, false);
    const bool kept = for_backward && saving_;
    const auto out = kept ? keep<F8>(x.shape()) : temp<F8>(x.shape());
    float* used = (kept ? keep_ : temp_)->template allocate_array<float>(1);
    fp8_->cast<R>(g.index, xd.data(), xd.size(), out.data(), used, stream_);
    scale.value = 1.0f;
    scale.device = used;
    return out.as_const();
  }

  /// c = alpha a b (+ c when add) with precis::cuda::gemm, accumulating in Acc (by default c's
  /// own type, as op::cpu) and rounding once into c; alpha's device divisors (the scales of
  /// fp8 operands) are read by the kernel.
  template <class Acc = void, class G, class SA, class CA, class SB, class CB>
  void gemm(const TensorView<G>& c, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, bool add,
            const fp8::gemm_alpha& alpha = 1.0) const {
    using A = std::conditional_t<std::is_void_v<Acc>, G, Acc>;
    if (take_fresh(c)) add = false;
    precis::cuda::gemm_options opt;
    opt.stream = stream_;
    precis::cuda::epilogue<float> ep;
    ep.divide_by[0] = alpha.divide_by[0];
    ep.divide_by[1] = alpha.divide_by[1];
    precis::cuda::gemm<A>(static_cast<A>(alpha.value), precis::cuda::device_view(a), precis::cuda::device_view(b), add ? A(1) : A(0),
                          precis::cuda::device_view(c), ep, opt);
  }

  /// y = alpha a b + bias (bias [n] broadcast over the rows), rounded once into y. With an fp32
  /// or fp64 accumulator, one GEMM whose epilogue adds the bias to each sum in that arithmetic
  /// (inline in the kernel for an fp32, fp16 or bf16 bias: y written once); with a 16-bit
  /// accumulator (or a bias of a format C cannot be), op::gemm_bias_in_steps (the bias starts
  /// each sum, as on the CPU).
  template <class Acc, class O, class SA, class CA, class SB, class CB, class B>
  void gemm_bias(const TensorView<O>& y, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, const TensorView<const B>& bias,
                 const fp8::gemm_alpha& alpha = 1.0) const {
    if constexpr ((std::is_same_v<Acc, float> || std::is_same_v<Acc, double>) && precis::cuda::detail::value_format_of<B>() >= 0) {
      precis::cuda::gemm_options opt;
      opt.stream = stream_;
      precis::cuda::epilogue<B> ep;
      ep.bias = precis::cuda::device_view(as<B>(bias, false));  // contiguous, as the epilogue reads it
      ep.divide_by[0] = alpha.divide_by[0];
      ep.divide_by[1] = alpha.divide_by[1];
      precis::cuda::gemm<Acc>(static_cast<Acc>(alpha.value), precis::cuda::device_view(a), precis::cuda::device_view(b), Acc(0),
                              precis::cuda::device_view(y), ep, opt);
    } else {
      gemm_bias_in_steps<Acc>(*this, y, a, b, bias, alpha);
    }
  }

  /// y = f(x...) element-wise on the device (precis::cuda::map_into), in A's device arithmetic
  /// (precis::cuda::acc_t: fp16 and bf16 as narrow, every operation rounded into the format).
  template <class A, class Y, class F, class... X>
  void map_into(const char* op, const Y& y, F f, const X&... x) const {
    precis::cuda::map_into<precis::cuda::acc_t<A>>(stream_, op, precis::cuda::device_view(y), f, precis::cuda::device_view(x)...);
  }

  /// to = the sum of `from` over to's broadcast axes (precis::cuda::sum_into, in T).
  template <class T>
  void sum_to_shape(const TensorView<T>& to, const TensorView<const T>& from) const {
    precis::cuda::sum_into<T>(stream_, "precis::sum_to_shape", precis::cuda::device_view(to), precis::cuda::device_view(from));
  }

  /// col = the column sums of g [rows, cols] in Acc (precis::cuda::sum_into: coalesced column
  /// sums in a fixed order, another than op::cpu's running sums).
  template <class Acc, class S, class C>
  void sum_rows(const TensorView<Acc>& col, const TensorView<S, C>& g) const {
    precis::cuda::sum_into<Acc>(stream_, "precis::sum_rows", precis::cuda::device_view(col), precis::cuda::device_view(g));
  }

  /// to = from rounded once to nearest into to's storage.
  template <class S, class C, class D, class DC>
  void copy(const TensorView<S, C>& from, const TensorView<D, DC>& to) const {
    map_into<default_compute_t<precis::detail::remove_const_t<S>>>("precis::copy", to, precis::detail::identity{}, from);
  }

  /// to += from (broadcast), in A; a fresh gradient is assigned (see fresh_tracking).
  template <class A, class D, class S, class C>
  void add_into(const char* op, const TensorView<D>& to, const TensorView<S, C>& from) const {
    using DA = precis::cuda::acc_t<A>;
    if (take_fresh(to)) {
      map_into<A>(op, to, precis::detail::identity{}, from);
      return;
    }
    map_into<A>(op, to, add_fn<DA>{}, to.as_const(), from);
  }

  /// gx += f(args...) in A; a fresh gradient is assigned f(args...).
  template <class A, class G, class F, class... V>
  void accumulate(const char* op, const TensorView<G>& gx, F f, const V&... args) const {
    using DA = precis::cuda::acc_t<A>;
    if (take_fresh(gx)) {
      map_into<A>(op, gx, assign_fn<DA, F>{f}, args...);
    } else {
      map_into<A>(op, gx, accumulate_fn<DA, F>{f}, TensorView<const G>(gx), args...);
    }
  }

  /// Class labels (host memory, checked there) copied to device memory: kept for the step when
  /// `for_backward`, otherwise for the op. The copy from pageable host memory waits for the
  /// stream (labels already on the device are the way to a step without synchronization).
  const std::int64_t* labels(std::span<const std::int64_t> l, bool for_backward) const {
    std::int64_t* p = (for_backward ? keep_ : temp_)->template allocate_array<std::int64_t>(l.size());
    precis::cuda::check(cudaMemcpyAsync(p, l.data(), l.size_bytes(), cudaMemcpyHostToDevice, stream_),
                        "precis::op::cuda: copying " + std::to_string(l.size()) + " labels to the device");
    precis::cuda::check(cudaStreamSynchronize(stream_), "precis::op::cuda: the labels' copy");
    return p;
  }

  /// The loss over rows of logits x (precis::cuda::cross_entropy_forward, a warp per row).
  template <class Acc, class O, class X>
  void cross_entropy_forward(const char* op, const TensorView<const X>& x, const std::int64_t* labels, Acc* lse, const TensorView<O>& y) const {
    Acc* terms = temp_->template allocate_array<Acc>(static_cast<std::size_t>(x.shape()[0]));
    precis::cuda::cross_entropy_forward<Acc>(stream_, op, precis::cuda::device_view(x), labels, lse, terms, precis::cuda::device_view(y));
  }
  /// gx (+)= the loss's gradient (precis::cuda::cross_entropy_backward), assigned when fresh.
  template <class R, class G, class X, class Acc, class GX>
  void cross_entropy_backward(const char* op, const TensorView<const G>& gy, const TensorView<const X>& x, const std::int64_t* labels,
                              const Acc* lse, const TensorView<GX>& gx) const {
    const bool fresh = take_fresh(gx);
    precis::cuda::cross_entropy_backward<R>(stream_, op, precis::cuda::device_view(gy), precis::cuda::device_view(x), labels, lse,
                                            precis::cuda::device_view(gx), fresh);
  }

  /// y = reduction R along `axis` or of all of x (precis::cuda::reduce_fibers: a block per
  /// fiber, or per range of a few long ones; another order than op::cpu's pairwise sums); a
  /// strided x is made dense first.
  template <class Acc, reduction R, class X, class O>
  void reduce(const char* op, const TensorView<const X>& x, bool whole, int axis, const TensorView<O>& y) const {
    const auto xd = as<X>(x, false);
    const index_t scratch = precis::cuda::reduce_scratch_elements(op, precis::cuda::device_view(xd), whole, axis);
    precis::cuda::reduce_fibers<Acc, R>(stream_, op, precis::cuda::device_view(xd), whole, axis, precis::cuda::device_view(y),
                                        scratch > 0 ? temp_->template allocate_array<Acc>(static_cast<std::size_t>(scratch)) : nullptr);
  }
  /// y = softmax or log_softmax of x along `axis` (precis::cuda::softmax_fibers).
  template <class Acc, bool Log, class X, class O>
  void softmax(const char* op, const TensorView<const X>& x, int axis, const TensorView<O>& y) const {
    const auto xd = as<X>(x, false);
    precis::cuda::softmax_fibers<Acc, Log>(stream_, op, precis::cuda::device_view(xd), axis, precis::cuda::device_view(y));
  }
  /// softmax's backward sums (precis::cuda::softmax_sums), a block per fiber.
  template <class Acc, bool Log, class G, class O>
  void softmax_sums(const TensorView<const G>& g, const TensorView<const O>& y, int axis, const TensorView<Acc>& s) const {
    const auto gd = as<G>(g, false);
    const auto yd = as<O>(y, false);
    precis::cuda::softmax_sums<Acc, Log>(stream_, "precis::softmax", precis::cuda::device_view(gd), precis::cuda::device_view(yd), axis,
                                         precis::cuda::device_view(s));
  }

  /// Layer normalization's rows (precis::cuda::layer_norm_forward: a block per row).
  template <class Acc, class R, class X, class G, class B, class O>
  void layer_norm_forward(const TensorView<const X>& x, const TensorView<const G>& gamma, const TensorView<const B>& beta, double eps,
                          Acc* stats, const TensorView<O>& y) const {
    precis::cuda::layer_norm_forward<Acc, R>(stream_, precis::cuda::device_view(x), precis::cuda::device_view(gamma),
                                             precis::cuda::device_view(beta), eps, stats, precis::cuda::device_view(y));
  }
  /// Layer normalization's backward (precis::cuda::layer_norm_backward); gx assigned when fresh.
  template <class Acc, class R, class X, class GY, class G, class GX>
  void layer_norm_backward(const TensorView<const X>& x, const TensorView<const GY>& gy, const TensorView<const G>& gamma,
                           const Acc* stats, const TensorView<GX>& gx, const TensorView<Acc>& dgamma,
                           const TensorView<Acc>& dbeta) const {
    const bool fresh = gx.data() != nullptr && take_fresh(gx);
    precis::cuda::layer_norm_backward<Acc, R>(stream_, precis::cuda::device_view(x), precis::cuda::device_view(gy),
                                              precis::cuda::device_view(gamma), stats, precis::cuda::device_view(gx), fresh,
                                              dgamma.data(), dbeta.data());
  }

  /// max/min by selection along `axis` and its gradient (precis::cuda::select_fibers /
  /// add_selected: a thread per fiber, the host's order, so the same positions).
  template <bool Max, class X, class O>
  void select(const TensorView<const X>& x, int axis, const TensorView<O>& y, std::int32_t* pos) const {
    precis::cuda::select_fibers<Max>(stream_, Max ? "precis::max" : "precis::min", precis::cuda::device_view(x), axis,
                                     precis::cuda::device_view(y), pos);
  }
  template <class G, class GX>
  void add_selected(const TensorView<const G>& gy, const std::int32_t* pos, int axis, const TensorView<GX>& g) const {
    precis::cuda::add_selected<precis::detail::ad::arith_t<GX>>(stream_, "precis::max", precis::cuda::device_view(gy), pos, axis,
                                                                 precis::cuda::device_view(g));
  }

  /// out[i] = f(i, out[i], in[i]) in row-major order i (precis::cuda::map_indexed).
  template <class A, class O, class F, class I>
  void map_indexed(const TensorView<O>& out, F f, const TensorView<const I>& in) const {
    precis::cuda::map_indexed<precis::cuda::acc_t<A>>(stream_, "precis::dropout", precis::cuda::device_view(out), f, precis::cuda::device_view(in));
  }
  /// acc[indices[i], :] += gy[i, :] in index order (precis::cuda::scatter_add_rows: a thread per
  /// column, so repeated indices add in the host's order, without atomics).
  template <class Acc, class G>
  void scatter_add_rows(const TensorView<const G>& gy, const std::int64_t* indices, index_t n, const TensorView<Acc>& acc) const {
    precis::cuda::scatter_add_rows(stream_, precis::cuda::device_view(gy), indices, n, precis::cuda::device_view(acc));
  }

  /// nll's loss and gradient (precis::cuda::nll_forward / nll_backward).
  template <class Acc, class O, class X>
  void nll_forward(const TensorView<const X>& x, const std::int64_t* labels, const TensorView<O>& y) const {
    precis::cuda::nll_forward<Acc>(stream_, precis::cuda::device_view(x), labels, precis::cuda::device_view(y));
  }
  template <class R, class G, class GX>
  void nll_backward(const TensorView<const G>& gy, const std::int64_t* labels, const TensorView<GX>& gx) const {
    precis::cuda::nll_backward<R>(stream_, precis::cuda::device_view(gy), labels, precis::cuda::device_view(gx));
  }

  /// Attention's probabilities and score gradients in place (a block per row).
  template <class Acc>
  void attention_probabilities(const TensorView<Acc>& s, Acc scale, bool causal) const {
    precis::cuda::attention_probabilities(stream_, precis::cuda::device_view(s), scale, causal);
  }
  template <class Acc>
  void attention_score_gradients(const TensorView<Acc>& ds, const TensorView<const Acc>& p, Acc scale) const {
    precis::cuda::attention_score_gradients(stream_, precis::cuda::device_view(ds), precis::cuda::device_view(p), scale);
  }

  /// Images per conv2d column batch: at most 2^24 column elements (32 MiB of bf16), so that the
  /// demo's convolutions are one GEMM per group for a whole batch of 128 (the host's 2^19 is
  /// sized for a CPU's caches).
  static index_t conv_images_per_batch(index_t n, index_t k, index_t plane) {
    return conv_detail::images_per_batch(n, k, plane, index_t{1} << 24);
  }
  /// conv2d's columns and their transpose (precis::cuda::im2col / col2im: col2im a thread per
  /// input element adding its taps in the host's order, so the same bits).
  template <class L, class S>
  void im2col(const conv_detail::geometry& g, const S* x, index_t c0, index_t cs, index_t first, index_t count, L* col) const {
    precis::cuda::im2col(stream_, g, x, c0, cs, first, count, col);
  }
  template <class Acc>
  void col2im(const conv_detail::geometry& g, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count, Acc* dx) const {
    precis::cuda::col2im(stream_, g, dcol, c0, cs, first, count, dx);
  }
  /// conv2d's outputs from a GEMM plus the bias, and its output and bias gradients
  /// (precis::cuda::conv_output / conv_output_grads; the bias sums a block per channel).
  template <class Acc, class B, class O>
  void conv_output(Acc* acc, const TensorView<const B>& bias, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count,
                   index_t p, O* y) const {
    precis::cuda::conv_output(stream_, acc, precis::cuda::device_view(bias), oc0, og, oc_all, n0, count, p, y);
  }
  template <class Acc, class GQ, class G>
  void conv_output_grads(const GQ* gq, const G* gy, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count, index_t p,
                         GQ* gm, Acc* gb) const {
    precis::cuda::conv_output_grads(stream_, gq, gy, oc0, og, oc_all, n0, count, p, gm, gb);
  }
  /// The device computes conv2d's forward and weight gradient with its GEMM (the host's direct
  /// forward and in-place weight gradient are CPU kernels).
  template <class Acc, class L>
  static constexpr bool conv_direct_types = false;
  template <class Acc, class L, class GQ>
  static constexpr bool weight_grad_direct_types = false;
  /// v (contiguous, a binary format) = zeros.
  template <class T>
  void fill_zero(const TensorView<T>& v) const {
    zero_bytes(v.data(), static_cast<std::size_t>(v.size()) * sizeof(T));
  }

  /// Max and average pooling and their gradients (precis::cuda::max_pool / avg_pool: a thread
  /// per output, the host's window order and rule; the backwards in the host's order).
  template <class X, class O>
  void max_pool(const conv_detail::geometry& g, const TensorView<const X>& x, const TensorView<O>& y, std::int32_t* at) const {
    using R = precis::detail::ad::arith_t<precis::detail::remove_const_t<X>>;
    const auto xd = as<precis::detail::remove_const_t<X>>(x, false);
    precis::cuda::max_pool<R>(stream_, g, xd.data(), y.data(), at);
  }
  template <class R, class G, class GX>
  void max_pool_backward(const conv_detail::geometry& g, const TensorView<const G>& gy, const std::int32_t* at, const TensorView<GX>& d) const {
    const auto acc = zeros<R>(d.shape());
    const auto gd = as<G>(gy, false);
    precis::cuda::max_pool_backward(stream_, g, gd.data(), at, acc.data());
    add_into<R>("precis::max_pool2d", d, acc.as_const());
  }
  template <class R, class X, class O>
  void avg_pool(const conv_detail::geometry& g, const TensorView<const X>& x, const TensorView<O>& y) const {
    precis::cuda::avg_pool<R>(stream_, g, x.data(), y.data());
  }
  template <class R, class G>
  void avg_pool_backward(const conv_detail::geometry& g, const TensorView<const G>& gy, const TensorView<R>& acc) const {
    const auto gd = as<G>(gy, false);
    precis::cuda::avg_pool_backward(stream_, g, gd.data(), acc.data());
  }

  /// Batch normalization (precis::cuda::batch_norm_forward / backward: a block per channel; the
  /// running estimates in device memory).
  template <class Acc, class X, class Gm, class Bt, class O>
  void batch_norm_forward(const TensorView<const X>& x, const TensorView<const Gm>& gamma, const TensorView<const Bt>& beta, bool training,
                          double momentum, double eps, double* running_mean, double* running_var, Acc* stats,
                          const TensorView<O>& y) const {
    precis::cuda::batch_norm_forward<Acc>(stream_, precis::cuda::device_view(x), precis::cuda::device_view(gamma),
                                          precis::cuda::device_view(beta), training, momentum, eps, running_mean, running_var, stats,
                                          y.data());
  }
  template <class Acc, class G, class X, class Gm>
  void batch_norm_backward(const TensorView<const G>& gy, const TensorView<const X>& x, const TensorView<const Gm>& gamma, const Acc* stats,
                           bool training, Acc* dx, Acc* dg, Acc* db) const {
    const auto gd = as<G>(gy, false);
    precis::cuda::batch_norm_backward<Acc>(stream_, gd.data(), precis::cuda::device_view(x), precis::cuda::device_view(gamma), stats,
                                           training, dx, dg, db);
  }

  /// n zero bytes at device address p, on the stream (fresh_tracking's zeroing).
  void zero_bytes(void* p, std::size_t n) const {
    precis::cuda::check(cudaMemsetAsync(p, 0, n, stream_), "precis::op::cuda: cudaMemsetAsync of " + std::to_string(n) + " bytes");
  }

 private:
  precis::cuda::DeviceArena* temp_;
  precis::cuda::DeviceArena* keep_;
  bool saving_;
  cudaStream_t stream_;
  precis::cuda::fp8_scaling_state* fp8_;
};

}  // namespace precis::op

namespace precis::cuda {

namespace backend_detail {

/// p[0, n) = v, as raw words of v's size (any trivially copyable format of 1, 2, 4 or 8 bytes).
template <class W>
__global__ void fill_words(W* p, std::size_t n, W v) {
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) p[i] = v;
}

template <std::size_t N>
using word_t = std::conditional_t<N == 1, std::uint8_t,
                                  std::conditional_t<N == 2, std::uint16_t, std::conditional_t<N == 4, std::uint32_t, std::uint64_t>>>;

}  // namespace backend_detail

/// A tape's backend on the GPU (precis/ops/cpu.hpp names what a backend gives): values,
/// gradients and temporaries in DeviceArenas, ops through op::cuda on `stream`. The tape's own
/// writes are kernels and copies on the stream; item() and input() from host memory wait for it.
struct device_backend {
  using arena_type = DeviceArena;
  static constexpr bool host_memory = false;
  /// An fp8 policy's tape keeps its scales in device memory.
  using fp8_state = fp8_scaling_state;
  cudaStream_t stream = nullptr;

  static DeviceArena make_arena(std::size_t bytes) { return bytes > 0 ? DeviceArena(bytes) : DeviceArena(); }
  /// f8: the tape's fp8_scaling_state under an fp8 policy (a null pointer of any type otherwise).
  template <class P, class F8State>
  op::cuda context(DeviceArena& temp, DeviceArena& keep, bool saving, F8State* f8) const noexcept {
    if constexpr (policy::fp8_policy<P>) return op::cuda(temp, keep, saving, stream, f8);
    else return op::cuda(temp, keep, saving, stream);
  }
  void zero_bytes(void* p, std::size_t n) const {
    check(cudaMemsetAsync(p, 0, n, stream), "precis::cuda::device_backend: cudaMemsetAsync of " + std::to_string(n) + " bytes");
  }
  /// n copies of v from device address p (a kernel on the stream: v travels as its argument).
  template <class S>
  void fill(S* p, std::size_t n, const S& v) const {
    static_assert(std::is_trivially_copyable_v<S> && (sizeof(S) == 1 || sizeof(S) == 2 || sizeof(S) == 4 || sizeof(S) == 8),
                  "precis::cuda::device_backend::fill: a format of 1, 2, 4 or 8 bytes");
    if (n == 0) return;
    using W = backend_detail::word_t<sizeof(S)>;
    W w;
    std::memcpy(&w, &v, sizeof(S));
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
    backend_detail::fill_words<<<blocks, 256, 0, stream>>>(reinterpret_cast<W*>(p), n, w);
    check(cudaGetLastError(), "precis::cuda::device_backend::fill: launch");
  }
  /// to (device, contiguous) = from (host memory, any strides), rounded once to nearest into to's
  /// format on the host, then copied; returns when the host buffer has been read (a synchronous
  /// upload: keep a step's data on the device and borrow() it for steps without one).
  template <class S, class C, class D>
  void upload(const TensorView<S, C>& from, const TensorView<D>& to) const {
    using V = precis::detail::remove_const_t<S>;
    const D* src = nullptr;
    Tensor<D> staged;
    if constexpr (std::is_same_v<V, D>) {
      if (from.is_contiguous()) src = from.data();
    }
    if (src == nullptr) {
      staged = Tensor<D>::uninitialized(from.shape());
      precis::detail::copy_view(from, staged.view());
      src = staged.data();
    }
    const std::size_t bytes = static_cast<std::size_t>(to.size()) * sizeof(D);
    check(cudaMemcpyAsync(to.data(), src, bytes, cudaMemcpyHostToDevice, stream),
          "precis::cuda::device_backend::upload: cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
    check(cudaStreamSynchronize(stream), "precis::cuda::device_backend::upload");
  }
  /// The element at device address p (waits for the stream).
  template <class S>
  S read(const S* p) const {
    S v;
    check(cudaMemcpyAsync(&v, p, sizeof(S), cudaMemcpyDeviceToHost, stream), "precis::cuda::device_backend::read");
    check(cudaStreamSynchronize(stream), "precis::cuda::device_backend::read");
    return v;
  }

  /// What nn modules keep their parameters and gradients in.
  template <class T>
  using tensor = backend_tensor<T>;
  /// to (host, contiguous) = from (device, contiguous), same shape; waits for the stream.
  template <class S>
  void download(const TensorView<const S>& from, const TensorView<S>& to) const {
    if (from.shape() != to.shape() || !from.is_contiguous() || !to.is_contiguous()) {
      throw shape_error("precis::cuda::device_backend::download: " + from.shape().str() + " into " + to.shape().str() +
                        "; expected equal shapes, both contiguous");
    }
    const std::size_t bytes = static_cast<std::size_t>(to.size()) * sizeof(S);
    check(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToHost, stream),
          "precis::cuda::device_backend::download: cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
    check(cudaStreamSynchronize(stream), "precis::cuda::device_backend::download");
  }
};

/// Policy P with its tape on the GPU: the same types, device_backend's memory and ops.
template <class P>
struct on_device : P {
  using backend = device_backend;
  static std::string name() { return P::name() + " on cuda"; }
};

}  // namespace precis::cuda
