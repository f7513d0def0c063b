// Scaled fp8: fp8 bits with an fp32 scale per tensor, and the recipes that choose the scale.
//
//   precis::fp8::delayed_scaler<precis::float8_e4m3> s;        // Transformer Engine's defaults
//   precis::fp8::cast_stats st;
//   auto q = precis::fp8::quantize<precis::float8_e4m3>(x, s.scale(), &st);   // x * scale, rounded once
//   s.record(st.amax);
//   s.update();                                                 // the scale for the next step
//   Tensor<float> back = q.dequantize();                        // q.data / q.scale
//
// fp8 has 3 (e4m3) or 2 (e5m2) fraction bits and a narrow range: unscaled, a value of 1000 in
// e4m3 saturates to 448 and values below 2^-10 flush to zero. A per-tensor scale moves the
// tensor's largest magnitude (amax) to the top of the format, so the rounding error is relative
// again. Two recipes choose it:
//  - current scaling: from this tensor's own amax (one extra pass over the data);
//  - delayed scaling (NVIDIA Transformer Engine's DelayedScaling, the rule of its
//    nvte_delayed_scaling_recipe_amax_and_scale_update): from a history of past amaxes, so the
//    cast needs one pass; the history is a window of history_len steps, reduced by max or
//    most_recent.
// Both set scale = fp8_max / amax / 2^margin, keeping the previous scale when amax is 0 or not
// finite and using FLT_MAX when the quotient overflows.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <deque>
#include <functional>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "precis/config.hpp"
#include "precis/error.hpp"
#include "precis/format/all.hpp"
#include "precis/format/convert.hpp"
#include "precis/optim/checkpoint.hpp"
#include "precis/tensor/tensor.hpp"

namespace precis::fp8 {

template <class F8>
inline constexpr bool is_fp8 = std::is_same_v<F8, float8_e4m3> || std::is_same_v<F8, float8_e5m2>;

/// The largest finite value of F8 (448 for e4m3, 57344 for e5m2).
template <class F8>
constexpr float max_finite() {
  static_assert(is_fp8<F8>, "precis::fp8: F8 must be precis::float8_e4m3 or precis::float8_e5m2");
  return static_cast<float>(format_traits<F8>::max_finite());
}

namespace detail {

/// scale_for's arithmetic, for the host and for device code (a device backend's casts choose
/// their scales on the device): fp8_max / amax / 2^margin in double, rounded once to fp32.
PRECIS_HOST_DEVICE inline float scale_from_amax(float amax, float fp8_max, int margin, float previous, bool power_of_two) {
  constexpr float flt_max = 3.40282346638528859812e+38f;
  if (!(amax > 0.0f) || !(amax <= flt_max)) return previous;  // zero, NaN or infinite
  double s = static_cast<double>(fp8_max) / static_cast<double>(amax) / ::ldexp(1.0, margin);
  if (power_of_two) {  // s = m 2^e with m in [0.5, 1): the largest power of two not above s is 2^(e-1)
    int e = 0;
    (void)::frexp(s, &e);
    s = ::ldexp(1.0, e - 1);
  }
  const auto f = static_cast<float>(s);
  return f <= flt_max ? f : flt_max;
}

/// fp32's bits, on the host and in device code.
PRECIS_HOST_DEVICE inline std::uint32_t fp32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}

/// |x|'s bits: ordered as |x| is among non-NaN values, with every NaN above infinity, so the
/// largest key of a tensor is its amax, or a NaN where it holds one (as amax_of). Device code
/// reduces keys with integer maxima (atomicMax).
PRECIS_HOST_DEVICE inline std::uint32_t amax_key(float x) { return fp32_bits(x) & 0x7fffffffu; }

/// One value's fp8 cast, as fp8::quantize_into makes it: the bits of x * scale (formed in fp32)
/// rounded once to nearest even into F8, saturating; whether |x * scale| reached overflow_at
/// (F8's max + half its spacing there: what rounding to nearest would overflow from); whether a
/// nonzero finite x became a zero. The device's casts call this per element; quantize_into is
/// the host's vectorized form of it. A NaN x keeps its sign and payload, made quiet, as x86's
/// multiply leaves it; a GPU's multiply returns one canonical NaN instead, whose payload would
/// reach e5m2's two mantissa bits as another pattern than the host's.
template <class F8>
struct element_cast {
  typename F8::storage_type bits;
  bool saturated;
  bool flushed;
};
template <class F8>
PRECIS_HOST_DEVICE inline element_cast<F8> cast_element(float x, float scale, float overflow_at) {
  using storage = typename F8::storage_type;
  constexpr auto magnitude = static_cast<storage>((1u << (8 * sizeof(storage) - 1)) - 1u);
  const float b = x * scale;
  const std::uint32_t product = x == x ? fp32_bits(b) : (fp32_bits(x) | 0x00400000u);
  const auto bits = static_cast<storage>(precis::detail::encode_bits<precis::detail::bit_format<F8>::lay>(
      precis::detail::split_bits<precis::detail::fp32_layout>(product), rounding::nearest_even, overflow::saturate, 0));
  return {bits, b >= overflow_at || -b >= overflow_at, x != 0.0f && x == x && (bits & magnitude) == 0};
}

}  // namespace detail

/// What rounding to nearest into F8 overflows from: max + half the spacing at max (464 for
/// e4m3, 61440 for e5m2). A cast counts a value as saturated where |x * scale| reaches it.
template <class F8>
float overflow_threshold() {
  return max_finite<F8>() + std::ldexp(1.0f, format_traits<F8>::emax - format_traits<F8>::digits);
}

/// scale = fp8_max / amax / 2^margin (rounded to the largest power of two not above it when
/// power_of_two); `previous` where amax is 0 or not finite; FLT_MAX where the quotient is not
/// finite.
template <class F8>
float scale_for(float amax, int margin, float previous, bool power_of_two = false) {
  return detail::scale_from_amax(amax, max_finite<F8>(), margin, previous, power_of_two);
}

enum class amax_reduction { max, most_recent };

/// Transformer Engine's DelayedScaling parameters, with its defaults (v1.x and later).
struct delayed_scaling {
  std::size_t history_len = 1024;
  amax_reduction reduce = amax_reduction::max;
  int margin = 0;
};

/// Current scaling: the scale comes from the tensor being cast.
struct current_scaling {
  int margin = 0;
  bool power_of_two = false;
};

/// No scaling: every cast multiplies by 1 (plain fp8 casts, the baseline scaling is measured
/// against).
struct no_scaling {};

/// The delayed-scaling state of one tensor: the amax history and the scale the next cast uses.
/// Each step: cast with scale(), record() the amax of what was cast (several casts in one step
/// keep the largest), then update().
template <class F8>
class delayed_scaler {
 public:
  explicit delayed_scaler(delayed_scaling cfg = {}) : cfg_(cfg) {
    if (cfg.history_len == 0) throw invalid_argument("precis::fp8::delayed_scaler: history_len is 0; expected at least 1");
    history_.assign(cfg.history_len, 0.0f);
  }

  /// The scale the next cast multiplies by (1 before the first update).
  float scale() const noexcept { return scale_; }
  const delayed_scaling& config() const noexcept { return cfg_; }

  /// The amax history: entry 0 is the current step's, entry history_len - 1 the previous
  /// step's, entry 1 the oldest still in the window.
  std::span<const float> amax_history() const noexcept { return history_; }

  /// Records this step's amax (a NaN is kept: it makes the step's reduced amax NaN).
  void record(float amax) {
    float& h = history_[0];
    if (std::isnan(amax) || std::isnan(h)) h = std::numeric_limits<float>::quiet_NaN();
    else h = std::max(h, std::fabs(amax));
  }

  /// Transformer Engine's update: amax = max of the history (or its entry 0 for most_recent);
  /// scale = scale_for(amax); the history rotates by -1 (entry 0 becomes the last) and its new
  /// entry 0 is zeroed.
  void update() {
    float amax = history_[0];
    if (cfg_.reduce == amax_reduction::max) {
      for (const float h : history_) amax = (std::isnan(h) || std::isnan(amax)) ? std::numeric_limits<float>::quiet_NaN() : std::max(amax, h);
    }
    scale_ = scale_for<F8>(amax, cfg_.margin, scale_);
    std::rotate(history_.begin(), history_.begin() + 1, history_.end());
    history_[0] = 0.0f;
  }

  /// Restores a saved state (checkpoints): the history must have history_len entries, none
  /// negative, and the scale must be finite and positive; nothing changes otherwise.
  void restore(std::span<const float> history, float scale) {
    if (history.size() != history_.size()) {
      throw invalid_argument("precis::fp8::delayed_scaler::restore: the history has " + std::to_string(history.size()) +
                             " entries; expected history_len = " + std::to_string(history_.size()));
    }
    if (!(scale > 0.0f) || !std::isfinite(scale)) {
      throw invalid_argument("precis::fp8::delayed_scaler::restore: scale " + std::to_string(scale) + " is not finite and positive");
    }
    for (const float h : history) {
      if (h < 0.0f) throw invalid_argument("precis::fp8::delayed_scaler::restore: a negative amax " + std::to_string(h) + " in the history");
    }
    history_.assign(history.begin(), history.end());
    scale_ = scale;
  }

 private:
  delayed_scaling cfg_;
  std::vector<float> history_;
  float scale_ = 1.0f;
};

/// What one cast did: the amax of the input (NaN if it held a NaN), how many elements, how many
/// saturated (|x| * scale at or past the point where rounding to nearest would overflow, max +
/// half its spacing, or infinite: clamped to the largest value) and how many nonzero values
/// flushed to zero.
struct cast_stats {
  float amax = 0.0f;
  std::size_t count = 0, saturated = 0, flushed = 0;
  double saturated_fraction() const { return count ? static_cast<double>(saturated) / static_cast<double>(count) : 0.0; }
  double flushed_fraction() const { return count ? static_cast<double>(flushed) / static_cast<double>(count) : 0.0; }
};

/// fp8 values with their scale: the value of element i is data[i] / scale.
template <class F8>
struct scaled_tensor {
  static_assert(is_fp8<F8>, "precis::fp8::scaled_tensor: F8 must be precis::float8_e4m3 or precis::float8_e5m2");
  Tensor<F8> data;
  float scale = 1.0f;

  /// The values in fp32: data / scale, each rounded once.
  Tensor<float> dequantize() const {
    Tensor<float> out(data.shape());
    for (index_t i = 0; i < data.size(); ++i) out.data()[i] = static_cast<float>(data.data()[i]) / scale;
    return out;
  }
};

namespace detail {

/// The largest |x_i| of n floats; NaN if any is NaN. Eight independent running maxima and a
/// NaN flag, so the loop vectorizes without fast-math (the maximum of non-negative values is
/// the same in any order).
inline float amax_of(const float* x, std::size_t n) {
  constexpr std::size_t W = 8;
  float m[W] = {};
  unsigned nan = 0;
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    for (std::size_t j = 0; j < W; ++j) {
      const float a = std::fabs(x[i + j]);
      m[j] = a > m[j] ? a : m[j];
      nan |= static_cast<unsigned>(x[i + j] != x[i + j]);
    }
  }
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m[0] = a > m[0] ? a : m[0];
    nan |= static_cast<unsigned>(x[i] != x[i]);
  }
  float r = 0.0f;
  for (const float v : m) r = v > r ? v : r;
  return nan ? std::numeric_limits<float>::quiet_NaN() : r;
}

template <class F8>
void check_scale(float scale, const char* who, const Shape& shape) {
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    throw invalid_argument(std::string(who) + "<" + std::string(format_traits<F8>::name) + ">: scale " + std::to_string(scale) +
                           " for a tensor of shape " + shape.str() + "; expected a finite positive scale");
  }
}

}  // namespace detail

/// The cast itself: out[i] = x[i] * scale rounded once to F8 (to nearest even, saturating at the
/// format's largest value), with its statistics. The products are formed in fp32 and the
/// rounding is precis::convert's (vectorized where the CPU allows). `amax`, when given, is
/// amax_of(x, n), already computed by the caller.
template <class F8>
cast_stats quantize_into(const float* x, std::size_t n, float scale, F8* out, const float* amax = nullptr) {
  static_assert(is_fp8<F8>, "precis::fp8::quantize_into: F8 must be precis::float8_e4m3 or precis::float8_e5m2");
  const float overflow_at = overflow_threshold<F8>();
  cast_stats st;
  st.count = n;
  st.amax = amax != nullptr ? *amax : detail::amax_of(x, n);
  constexpr std::size_t chunk = 1024;
  // a result is zero when its bits other than the sign are
  constexpr auto magnitude = static_cast<typename F8::storage_type>((1u << (8 * sizeof(typename F8::storage_type) - 1)) - 1u);
  float buf[chunk];
  for (std::size_t i0 = 0; i0 < n; i0 += chunk) {
    const std::size_t len = std::min(chunk, n - i0);
    for (std::size_t i = 0; i < len; ++i) buf[i] = x[i0 + i] * scale;
    convert(std::span<const float>(buf, len), std::span<F8>(out + i0, len), rounding::nearest_even, overflow::saturate);
    unsigned sat = 0, flush = 0;  // branch-free, so the loop vectorizes
    for (std::size_t i = 0; i < len; ++i) {
      const float v = x[i0 + i];
      sat += static_cast<unsigned>(std::fabs(buf[i]) >= overflow_at);
      flush += static_cast<unsigned>((v != 0.0f) & (v == v) & ((out[i0 + i].bits() & magnitude) == 0));
    }
    st.saturated += sat;
    st.flushed += flush;
  }
  return st;
}

/// x * scale rounded once to F8 (to nearest even, saturating at the format's largest value), with
/// the scale kept; stats, when given, receives the cast's amax and counts.
template <class F8>
scaled_tensor<F8> quantize(const Tensor<float>& x, float scale, cast_stats* stats = nullptr) {
  detail::check_scale<F8>(scale, "precis::fp8::quantize", x.shape());
  scaled_tensor<F8> q{Tensor<F8>(x.shape()), scale};
  const cast_stats st = quantize_into<F8>(x.data(), static_cast<std::size_t>(x.size()), scale, q.data.data());
  if (stats) *stats = st;
  return q;
}

/// Current scaling: the scale from x's own amax (1 if x is all zeros or holds no finite amax).
template <class F8>
scaled_tensor<F8> quantize(const Tensor<float>& x, current_scaling cfg, cast_stats* stats = nullptr) {
  const float amax = detail::amax_of(x.data(), static_cast<std::size_t>(x.size()));
  return quantize<F8>(x, scale_for<F8>(amax, cfg.margin, 1.0f, cfg.power_of_two), stats);
}

/// fp8 values with one scale per block of `block` consecutive elements along the last axis
/// (the 1 x 128 tiles of DeepSeek-V3's fine-grained scaling): element j of row r belongs to
/// block j / block and its value is data(r, j) / scales(r, j / block).
template <class F8>
struct block_scaled_tensor {
  static_assert(is_fp8<F8>, "precis::fp8::block_scaled_tensor: F8 must be precis::float8_e4m3 or precis::float8_e5m2");
  Tensor<F8> data;       // rows x k
  Tensor<float> scales;  // rows x ceil(k / block)
  index_t block = 128;

  Tensor<float> dequantize() const {
    Tensor<float> out(data.shape());
    const index_t rows = data.shape()[0], k = data.shape()[1];
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < k; ++j) out(r, j) = static_cast<float>(data(r, j)) / scales(r, j / block);
    return out;
  }
};

/// Current scaling per block of `block` elements along the last axis of a 2-D x: each block's
/// scale from its own amax (1 for an all-zero block); stats, when given, covers the whole
/// tensor.
template <class F8>
block_scaled_tensor<F8> quantize_blocks(const Tensor<float>& x, index_t block = 128, current_scaling cfg = {},
                                        cast_stats* stats = nullptr) {
  if (x.shape().rank() != 2 || block < 1) {
    throw invalid_argument("precis::fp8::quantize_blocks<" + std::string(format_traits<F8>::name) + ">: x of shape " +
                           x.shape().str() + " with block " + std::to_string(block) +
                           "; expected a 2-D tensor and a block of at least 1");
  }
  const index_t rows = x.shape()[0], k = x.shape()[1], nb = (k + block - 1) / block;
  block_scaled_tensor<F8> q{Tensor<F8>(x.shape()), Tensor<float>(Shape{rows, nb}), block};
  cast_stats total;
  total.count = static_cast<std::size_t>(x.size());
  for (index_t r = 0; r < rows; ++r) {
    for (index_t b = 0; b < nb; ++b) {
      const index_t j0 = b * block, len = std::min(block, k - j0);
      Tensor<float> part(Shape{len});
      for (index_t j = 0; j < len; ++j) part.data()[j] = x(r, j0 + j);
      cast_stats st;
      const auto qb = quantize<F8>(part, cfg, &st);
      for (index_t j = 0; j < len; ++j) q.data(r, j0 + j) = qb.data.data()[j];
      q.scales(r, b) = qb.scale;
      total.amax = (std::isnan(st.amax) || std::isnan(total.amax)) ? std::numeric_limits<float>::quiet_NaN() : std::max(total.amax, st.amax);
      total.saturated += st.saturated;
      total.flushed += st.flushed;
    }
  }
  if (stats) *stats = total;
  return q;
}

// ---- the scaling state of a tape: one entry per fp8 GEMM, three scaled tensors each ----------

/// A scaling recipe at run time: which of the three, with its parameters.
struct recipe {
  enum class kind { current, delayed, none };
  kind which = kind::current;
  current_scaling current{};
  delayed_scaling delayed{};

  recipe() = default;
  recipe(current_scaling c) : which(kind::current), current(c) {}  // NOLINT: a recipe type converts
  recipe(delayed_scaling d) : which(kind::delayed), delayed(d) {}  // NOLINT
  recipe(no_scaling) : which(kind::none) {}                        // NOLINT

  std::string str() const {
    switch (which) {
      case kind::current: return "current scaling (margin " + std::to_string(current.margin) + (current.power_of_two ? ", powers of two)" : ")");
      case kind::delayed:
        return "delayed scaling (history " + std::to_string(delayed.history_len) + ", " +
               (delayed.reduce == amax_reduction::max ? "max" : "most_recent") + ", margin " + std::to_string(delayed.margin) + ")";
      case kind::none: break;
    }
    return "no scaling";
  }
  bool operator==(const recipe& o) const {
    if (which != o.which) return false;
    if (which == kind::current) return current.margin == o.current.margin && current.power_of_two == o.current.power_of_two;
    if (which == kind::delayed) {
      return delayed.history_len == o.delayed.history_len && delayed.reduce == o.delayed.reduce && delayed.margin == o.delayed.margin;
    }
    return true;
  }
};

/// Combines amaxes across data-parallel ranks (elementwise max, in place); set by
/// dist::DataParallel so every rank chooses the same scales. NaN never reaches it: a NaN amax is
/// sent as +infinity, which chooses the same scale (the previous one).
using amax_reducer = std::function<void(std::span<float>)>;

/// Underflow and overflow counts of the casts of one tensor (or of many, summed).
struct telemetry {
  std::size_t casts = 0, count = 0, saturated = 0, flushed = 0;
  void add(const cast_stats& s) {
    ++casts;
    count += s.count;
    saturated += s.saturated;
    flushed += s.flushed;
  }
  void add(const telemetry& t) {
    casts += t.casts;
    count += t.count;
    saturated += t.saturated;
    flushed += t.flushed;
  }
  double saturated_fraction() const { return count ? static_cast<double>(saturated) / static_cast<double>(count) : 0.0; }
  double flushed_fraction() const { return count ? static_cast<double>(flushed) / static_cast<double>(count) : 0.0; }
};

/// The scaling of one tensor that is cast to F8 once per step (or more): the recipe's scale for
/// the next cast, the delayed recipe's history, the last cast's statistics and the totals.
template <class F8>
class tensor_scaling {
 public:
  explicit tensor_scaling(const recipe& r)
      : recipe_(r), delayed_(r.which == recipe::kind::delayed ? r.delayed : delayed_scaling{1, amax_reduction::max, 0}) {}

  /// The scale a cast of these n values uses: from their amax (current scaling, reduced across
  /// ranks when `reduce` is set), from the history (delayed) or 1 (none).
  float choose(const float* x, std::size_t n, const amax_reducer* reduce) const {
    const float amax = recipe_.which == recipe::kind::current ? detail::amax_of(x, n) : 0.0f;
    return choose_with(amax, reduce);
  }

  /// Casts n contiguous floats into out with the chosen scale; records the amax (delayed) and
  /// the statistics. Returns the scale used.
  float cast(const float* x, std::size_t n, F8* out, const amax_reducer* reduce) {
    const float own = detail::amax_of(x, n);  // this rank's, before any reduction
    const float scale = choose_with(own, reduce);
    last_scale_ = scale;
    last_ = quantize_into<F8>(x, n, scale, out, &own);
    total_.add(last_);
    if (recipe_.which == recipe::kind::delayed) delayed_.record(last_.amax);
    return scale;
  }

  /// The delayed recipe's state (history and scale); unused by the other recipes.
  const delayed_scaler<F8>& delayed() const noexcept { return delayed_; }
  delayed_scaler<F8>& delayed() noexcept { return delayed_; }
  /// The last cast's statistics (its amax is this rank's own) and the scale it used.
  const cast_stats& last() const noexcept { return last_; }
  float last_scale() const noexcept { return last_scale_; }
  const telemetry& total() const noexcept { return total_; }
  void reset_telemetry() noexcept { total_ = {}; }
  /// Installs the statistics of casts made elsewhere: a device backend casts on the device and
  /// keeps this state there, copying it here when asked (precis::cuda::fp8_scaling_state).
  void install(const cast_stats& last, float last_scale, const telemetry& total) noexcept {
    last_ = last;
    last_scale_ = last_scale;
    total_ = total;
  }

 private:
  /// choose() given the values' own amax (used by the current recipe only).
  float choose_with(float own_amax, const amax_reducer* reduce) const {
    switch (recipe_.which) {
      case recipe::kind::current: {
        float amax = own_amax;
        if (reduce != nullptr && *reduce) {
          float v = std::isnan(amax) ? std::numeric_limits<float>::infinity() : amax;
          (*reduce)(std::span<float>(&v, 1));
          amax = v;
        }
        return scale_for<F8>(amax, recipe_.current.margin, 1.0f, recipe_.current.power_of_two);
      }
      case recipe::kind::delayed: return delayed_.scale();
      case recipe::kind::none: break;
    }
    return 1.0f;
  }

  recipe recipe_;
  delayed_scaler<F8> delayed_;
  cast_stats last_{};
  float last_scale_ = 1.0f;
  telemetry total_{};
};

/// The three scaled tensors of an fp8 GEMM op.
enum class operand { input, weight, grad_output };
/// The format each is cast to: e4m3 for the forward operands, e5m2 for the output gradient.
template <operand R>
using operand_format_t = std::conditional_t<R == operand::grad_output, float8_e5m2, float8_e4m3>;

/// The three scaled tensors of one fp8 GEMM op (matmul, linear, conv2d): its two forward
/// operands in e4m3 and its output gradient in e5m2 (the hybrid format recipe). `index` is the
/// entry's position in its step (scaling_state::next).
struct gemm_scaling {
  std::string op;
  tensor_scaling<float8_e4m3> input, weight;
  tensor_scaling<float8_e5m2> grad_output;
  std::size_t index = 0;
  gemm_scaling(std::string op_name, const recipe& r, std::size_t position = 0)
      : op(std::move(op_name)), input(r), weight(r), grad_output(r), index(position) {}

  template <operand R>
  tensor_scaling<operand_format_t<R>>& scaling() noexcept {
    if constexpr (R == operand::input) return input;
    else if constexpr (R == operand::weight) return weight;
    else return grad_output;
  }
};

/// The scale a cast used, where its backend keeps it: on the host its value; on a device
/// backend, whose casts choose their scales on the device, the address of the device float the
/// cast wrote (value stays 1), so that no step waits for the device.
struct scale_ref {
  float value = 1.0f;
  const float* device = nullptr;
};

/// The alpha of a GEMM of scaled operands: value / (*divide_by[0] * *divide_by[1]), a missing
/// divisor counting as 1, computed in double and rounded once to the GEMM's epilogue type. The
/// host's divisors are folded into value; a device backend's are read by the GEMM kernel.
struct gemm_alpha {
  double value = 1.0;
  const float* divide_by[2] = {nullptr, nullptr};
  gemm_alpha(double v = 1.0) noexcept : value(v) {}  // NOLINT: a plain alpha converts
};

/// 1 / (a b) for the scales of a GEMM's two operands.
inline gemm_alpha descale(const scale_ref& a, const scale_ref& b) noexcept {
  gemm_alpha r(1.0 / (static_cast<double>(a.value) * static_cast<double>(b.value)));
  r.divide_by[0] = a.device;
  r.divide_by[1] = b.device;
  return r;
}

/// The fp8 scaling state of a tape (Tape<P>::fp8() under an fp8 policy): one gemm_scaling per
/// fp8 GEMM op, assigned in the order the ops are recorded in a step (the k-th fp8 GEMM of every
/// step uses entry k, so a training loop that records the same model each step keeps each
/// layer's history). end_step() (called by Tape::reset) closes a step: under delayed scaling the
/// step's amaxes are reduced across ranks and every entry used in the step is updated.
class scaling_state {
 public:
  explicit scaling_state(recipe r = {}) : recipe_(r) {}
  scaling_state(const scaling_state&) = delete;
  scaling_state& operator=(const scaling_state&) = delete;

  const recipe& config() const noexcept { return recipe_; }

  /// The entry of the next fp8 GEMM of this step (created on first use). An entry recorded for
  /// another op is an invalid_argument: the step records a different graph than earlier steps.
  gemm_scaling& next(std::string_view op) {
    if (cursor_ == gemms_.size()) gemms_.emplace_back(std::string(op), recipe_, cursor_);
    gemm_scaling& g = gemms_[cursor_];
    if (g.op != op) {
      throw invalid_argument("precis::fp8::scaling_state: fp8 GEMM " + std::to_string(cursor_) + " of this step is " +
                             std::string(op) + ", but earlier steps recorded " + g.op +
                             " there; fp8 scaling state follows the order of the GEMMs, so every step must record the "
                             "same ops in the same order (use one tape per model)");
    }
    ++cursor_;
    return g;
  }

  /// Closes the step: under delayed scaling, the amaxes recorded by the entries used in this step
  /// are reduced across ranks (when a reducer is set) and each of their scales updated
  /// (delayed_scaler::update). The next step starts again at entry 0.
  void end_step() {
    const std::size_t used = cursor_;
    cursor_ = 0;
    if (recipe_.which != recipe::kind::delayed || used == 0) return;
    if (reducer_) {
      std::vector<float> amax;
      amax.reserve(3 * used);
      const auto put = [&](float h) { amax.push_back(std::isnan(h) ? std::numeric_limits<float>::infinity() : h); };
      for (std::size_t i = 0; i < used; ++i) {
        put(gemms_[i].input.delayed().amax_history()[0]);
        put(gemms_[i].weight.delayed().amax_history()[0]);
        put(gemms_[i].grad_output.delayed().amax_history()[0]);
      }
      reducer_(std::span<float>(amax));
      for (std::size_t i = 0; i < used; ++i) {  // record keeps the larger: the reduced value
        gemms_[i].input.delayed().record(amax[3 * i]);
        gemms_[i].weight.delayed().record(amax[3 * i + 1]);
        gemms_[i].grad_output.delayed().record(amax[3 * i + 2]);
      }
    }
    for (std::size_t i = 0; i < used; ++i) {
      gemms_[i].input.delayed().update();
      gemms_[i].weight.delayed().update();
      gemms_[i].grad_output.delayed().update();
    }
  }

  /// Where the amaxes of every rank are combined (dist::DataParallel sets it).
  void set_amax_reducer(amax_reducer f) { reducer_ = std::move(f); }
  bool has_amax_reducer() const noexcept { return static_cast<bool>(reducer_); }
  const amax_reducer* reducer() const noexcept { return reducer_ ? &reducer_ : nullptr; }

  std::size_t size() const noexcept { return gemms_.size(); }
  const gemm_scaling& operator[](std::size_t i) const { return gemms_.at(i); }
  gemm_scaling& operator[](std::size_t i) { return gemms_.at(i); }
  /// The entries used so far in this step.
  std::size_t used() const noexcept { return cursor_; }
  /// Starts the next step at entry 0 without updating any scale: for a backend that keeps the
  /// scales itself (precis::cuda::fp8_scaling_state); end_step() otherwise.
  void rewind() noexcept { cursor_ = 0; }

  /// Casts counted since the last reset_telemetry(), over every tensor of every entry.
  telemetry totals() const {
    telemetry t;
    for (const auto& g : gemms_) {
      t.add(g.input.total());
      t.add(g.weight.total());
      t.add(g.grad_output.total());
    }
    return t;
  }
  void reset_telemetry() {
    for (auto& g : gemms_) {
      g.input.reset_telemetry();
      g.weight.reset_telemetry();
      g.grad_output.reset_telemetry();
    }
  }

  // ---- checkpoints (MixedPrecisionOptimizer::save / load take this as an extra part) ----------
  //
  // Records: "fp8/recipe" (i64: kind, history_len, reduction, margin, power_of_two) and, under
  // delayed scaling, "fp8/<k>/<op>/<tensor>" (fp32, [1 + history_len]: the scale, then the
  // history) for every entry k and tensor input, weight, grad_output.

  void checkpoint_save(optim::checkpoint_writer& w) const {
    const auto rec = recipe_record(recipe_);
    w.add("fp8/recipe", Shape{5}, rec.data());
    if (recipe_.which != recipe::kind::delayed) return;
    std::vector<float> buf;
    for (std::size_t k = 0; k < gemms_.size(); ++k) {
      const auto put = [&](const char* t, const auto& d) {
        buf.assign(1, d.scale());
        buf.insert(buf.end(), d.amax_history().begin(), d.amax_history().end());
        w.add(entry_name(k, gemms_[k].op, t), Shape{static_cast<index_t>(buf.size())}, buf.data());
      };
      put("input", gemms_[k].input.delayed());
      put("weight", gemms_[k].weight.delayed());
      put("grad_output", gemms_[k].grad_output.delayed());
    }
  }

  /// Everything a load would install, checked: the recipe must match this state's, the entries
  /// must be 0..n-1 with all three tensors, each record's scale finite and positive and no amax
  /// negative. Throws checkpoint_error naming the record otherwise; changes nothing.
  struct staged {
    std::vector<gemm_scaling> gemms;
    std::size_t records = 0;
  };
  staged checkpoint_stage(const optim::checkpoint_reader& r) const {
    std::array<std::int64_t, 5> rec{};
    r.copy("fp8/recipe", Shape{5}, rec.data());
    if (rec != recipe_record(recipe_)) {
      r.fail("holds fp8 scaling state for another recipe (kind, history, reduction, margin, powers of two = " +
             std::to_string(rec[0]) + ", " + std::to_string(rec[1]) + ", " + std::to_string(rec[2]) + ", " + std::to_string(rec[3]) +
             ", " + std::to_string(rec[4]) + "); this tape uses " + recipe_.str());
    }
    staged s;
    s.records = 1;
    const auto names = r.names_with_prefix("fp8/");
    if (recipe_.which != recipe::kind::delayed) {
      if (names.size() != 1) r.fail("holds fp8 scaling entries, but the recipe " + recipe_.str() + " keeps none");
      return s;
    }
    // entry k's op, from its names ("fp8/<k>/<op>/<tensor>")
    std::vector<std::string> ops;
    for (const auto& n : names) {
      if (n == "fp8/recipe") continue;
      const auto a = n.find('/', 4), b = a == std::string::npos ? a : n.find('/', a + 1);
      std::size_t k = 0;
      bool ok = a != std::string::npos && b != std::string::npos && a > 4 && a - 4 <= 6;
      for (std::size_t i = 4; ok && i < a; ++i) ok = n[i] >= '0' && n[i] <= '9';
      if (ok) k = static_cast<std::size_t>(std::stoul(n.substr(4, a - 4)));
      if (!ok || k >= names.size()) r.fail("holds a malformed fp8 scaling record \"" + n + "\"; expected fp8/<entry>/<op>/<tensor>");
      if (ops.size() <= k) ops.resize(k + 1);
      const std::string op = n.substr(a + 1, b - a - 1);
      if (!ops[k].empty() && ops[k] != op) r.fail("holds fp8 scaling records of two ops (" + ops[k] + ", " + op + ") for entry " + std::to_string(k));
      ops[k] = op;
    }
    const Shape len{static_cast<index_t>(1 + recipe_.delayed.history_len)};
    std::vector<float> buf(1 + recipe_.delayed.history_len);
    s.gemms.reserve(ops.size());
    for (std::size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].empty()) r.fail("has no fp8 scaling records for entry " + std::to_string(k) + " of " + std::to_string(ops.size()));
      s.gemms.emplace_back(ops[k], recipe_, k);
      const auto get = [&](const char* t, auto& d) {
        const std::string name = entry_name(k, ops[k], t);
        r.copy(name, len, buf.data());
        try {
          d.restore(std::span<const float>(buf.data() + 1, buf.size() - 1), buf[0]);
        } catch (const invalid_argument& e) {
          r.fail("record \"" + name + "\" is not a valid scaling state: " + e.what());
        }
        ++s.records;
      };
      get("input", s.gemms.back().input.delayed());
      get("weight", s.gemms.back().weight.delayed());
      get("grad_output", s.gemms.back().grad_output.delayed());
    }
    if (s.records != names.size()) r.fail("holds " + std::to_string(names.size()) + " fp8 records; expected " + std::to_string(s.records));
    return s;
  }

  /// Installs a staged state (cannot fail); the next step starts at entry 0.
  void checkpoint_commit(staged&& s) {
    if (recipe_.which == recipe::kind::delayed) {
      gemms_.clear();
      for (auto& g : s.gemms) gemms_.push_back(std::move(g));
    }
    cursor_ = 0;
  }

 private:
  static std::array<std::int64_t, 5> recipe_record(const recipe& r) {
    return {static_cast<std::int64_t>(r.which), static_cast<std::int64_t>(r.delayed.history_len),
            static_cast<std::int64_t>(r.delayed.reduce), static_cast<std::int64_t>(r.which == recipe::kind::delayed ? r.delayed.margin : r.current.margin),
            r.which == recipe::kind::current && r.current.power_of_two ? 1 : 0};
  }
  static std::string entry_name(std::size_t k, const std::string& op, const char* t) {
    return "fp8/" + std::to_string(k) + "/" + op + "/" + t;
  }

  recipe recipe_;
  std::deque<gemm_scaling> gemms_;  // a deque: entries never move (saved op state points at them)
  std::size_t cursor_ = 0;
  amax_reducer reducer_;
};

}  // namespace precis::fp8
