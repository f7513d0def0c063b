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
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "precis/error.hpp"
#include "precis/format/format.hpp"
#include "precis/format/round_to.hpp"
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

/// scale = fp8_max / amax / 2^margin (rounded to the largest power of two not above it when
/// power_of_two); `previous` where amax is 0 or not finite; FLT_MAX where the quotient is not
/// finite.
template <class F8>
float scale_for(float amax, int margin, float previous, bool power_of_two = false) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  double s = static_cast<double>(max_finite<F8>()) / static_cast<double>(amax) / std::ldexp(1.0, margin);
  if (power_of_two) s = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(s))));
  const auto f = static_cast<float>(s);
  return std::isfinite(f) ? f : std::numeric_limits<float>::max();
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

/// x * scale rounded once to F8 (to nearest even, saturating at the format's largest value), with
/// the scale kept; stats, when given, receives the cast's amax and counts.
template <class F8>
scaled_tensor<F8> quantize(const Tensor<float>& x, float scale, cast_stats* stats = nullptr) {
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    throw invalid_argument("precis::fp8::quantize<" + std::string(format_traits<F8>::name) + ">: scale " + std::to_string(scale) +
                           " for a tensor of shape " + x.shape().str() + "; expected a finite positive scale");
  }
  scaled_tensor<F8> q{Tensor<F8>(x.shape()), scale};
  cast_stats st;
  st.count = static_cast<std::size_t>(x.size());
  // rounding to nearest overflows from max + half the spacing at max (464 for e4m3, 61440 for e5m2)
  const float overflow_at = max_finite<F8>() + std::ldexp(1.0f, format_traits<F8>::emax - format_traits<F8>::digits);
  for (index_t i = 0; i < x.size(); ++i) {
    const float v = x.data()[i];
    const float a = std::fabs(v);
    st.amax = (std::isnan(v) || std::isnan(st.amax)) ? std::numeric_limits<float>::quiet_NaN() : std::max(st.amax, a);
    const float s = v * scale;
    const F8 r = round_to<F8>(s, rounding::nearest_even, overflow::saturate);
    if (std::fabs(s) >= overflow_at) ++st.saturated;
    if (v != 0.0f && !std::isnan(v) && static_cast<float>(r) == 0.0f) ++st.flushed;
    q.data.data()[i] = r;
  }
  if (stats) *stats = st;
  return q;
}

/// Current scaling: the scale from x's own amax (1 if x is all zeros or holds no finite amax).
template <class F8>
scaled_tensor<F8> quantize(const Tensor<float>& x, current_scaling cfg, cast_stats* stats = nullptr) {
  float amax = 0.0f;
  for (index_t i = 0; i < x.size(); ++i) amax = std::max(amax, std::fabs(x.data()[i]));
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

}  // namespace precis::fp8
