// Optimizer update rules, element by element, in the arithmetic of the master weights. Each rule
// is a small struct: its hyperparameters, how many state arrays it keeps per parameter, a
// per-step context (learning rate, bias corrections) and the update of one weight. Any struct
// with the members `optimizer_rule` names is a rule (examples/adan_rule.hpp writes one). A rule
// whose prepare() and update() are also device functions (PRECIS_HOST_DEVICE, as SGD's and
// Adam's) runs in the device's fused step too (precis/cuda/optim.cuh).
// The definitions follow PyTorch's torch.optim (SGD, Adam, AdamW) so results can be compared.
#pragma once

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "precis/error.hpp"
#include "precis/format/convert.hpp"

namespace precis::optim {

// ---- what a rule is -------------------------------------------------------------------------
//
//   struct MyRule {
//     static constexpr std::size_t state_count = 3;    // state arrays per parameter (any number)
//     struct context { ... };                          // what prepare() computes once per step
//     context prepare(std::int64_t step) const;        // step = 1, 2, ... (updates applied)
//     void validate() const;                           // throws invalid_argument on bad values
//     template <class T> T update(T w, T g, T* s, const context&) const;
//                                      // the new weight; s: this weight's state_count values
//     // optional:
//     std::size_t active_states() const;  // arrays these hyperparameters use (<= state_count;
//                                         // SGD without momentum keeps none)
//     std::size_t update_run(float* w, const float* g, std::array<float*, state_count> s,
//                            std::size_t n, float factor, const context&) const;
//         // a vector kernel over n weights whose gradients are multiplied by factor first:
//         // updates a prefix, returns its length (the rest goes through update()). It must
//         // compute what update() computes; a rule deriving from one that has it and changing
//         // update() must declare its own.
//   };

namespace detail {
template <class R>
concept rule_has_state_count = requires {
  { R::state_count } -> std::convertible_to<std::size_t>;
  typename std::integral_constant<std::size_t, R::state_count>;  // a constant expression
};
template <class R>
concept rule_has_prepare = requires(const R r, std::int64_t step) {
  typename R::context;
  { r.prepare(step) } -> std::same_as<typename R::context>;
};
template <class R>
concept rule_has_validate = requires(const R r) { r.validate(); };
template <class R, class T>
concept rule_updates = requires(const R r, T w, T g, T* s, const typename R::context& c) {
  { r.update(w, g, s, c) } -> std::convertible_to<T>;
};
template <class R>
concept rule_has_active_states = requires(const R r) {
  { r.active_states() } -> std::convertible_to<std::size_t>;
};
template <class R>
concept rule_has_update_run =
    requires(const R r, float* w, const float* g, std::array<float*, R::state_count> s, std::size_t n, float f,
             const typename R::context& c) {
      { r.update_run(w, g, s, n, f, c) } -> std::same_as<std::size_t>;
    };
}  // namespace detail

/// An optimizer update rule for weights whose arithmetic is T (see above for the members).
template <class R, class T = float>
concept optimizer_rule = std::copy_constructible<R> && detail::rule_has_state_count<R> && detail::rule_has_prepare<R> &&
                         detail::rule_has_validate<R> && detail::rule_updates<R, T>;

/// The state arrays a rule uses with its current hyperparameters.
template <class R>
std::size_t active_states(const R& r) {
  if constexpr (detail::rule_has_active_states<R>) {
    return static_cast<std::size_t>(r.active_states());
  } else {
    return R::state_count;
  }
}

/// SGD with momentum, dampening, Nesterov momentum and L2 weight decay (torch.optim.SGD):
///   g += wd w;  b = mu b + (1 - dampening) g (b = g on the first step);
///   g = nesterov ? g + mu b : b;  w -= lr g.
struct SGD {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;

  struct context {
    double lr;
    bool first;
  };

  static constexpr std::size_t state_count = 1;  // the momentum buffer
  std::size_t active_states() const { return momentum != 0 ? 1 : 0; }
  void validate() const {
    if (!(lr >= 0) || !(momentum >= 0) || !(weight_decay >= 0) || (nesterov && (momentum <= 0 || dampening != 0))) {
      throw invalid_argument("precis::optim::SGD: lr = " + std::to_string(lr) + ", momentum = " + std::to_string(momentum) +
                             ", dampening = " + std::to_string(dampening) + ", weight_decay = " + std::to_string(weight_decay) +
                             (nesterov ? ", nesterov" : "") +
                             "; expected non-negative values, and Nesterov only with momentum > 0 and no dampening");
    }
  }
  PRECIS_HOST_DEVICE context prepare(std::int64_t step) const { return {lr, step == 1}; }
  template <class T>
  PRECIS_HOST_DEVICE T update(T w, T g, T* s, const context& c) const {
    if (weight_decay != 0) g += T(weight_decay) * w;
    if (momentum != 0) {
      const T b = c.first ? g : T(T(momentum) * s[0] + T(1 - dampening) * g);
      s[0] = b;
      g = nesterov ? T(g + T(momentum) * b) : b;
    }
    return w - T(c.lr) * g;
  }
  std::size_t update_run(float* w, const float* g, std::array<float*, 1> s, std::size_t n, float factor,
                         const context& c) const;
};

/// Adam (Kingma & Ba 2015) as torch.optim.Adam, with L2 weight decay added to the gradient;
/// decoupled = true gives AdamW (Loshchilov & Hutter 2019): w -= lr wd w before the Adam step.
struct Adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;

  struct context {
    double lr, c1, c2;  // bias corrections 1 - beta^t
  };

  static constexpr std::size_t state_count = 2;  // first and second moments
  void validate() const {
    if (!(lr >= 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0) || !(weight_decay >= 0)) {
      throw invalid_argument("precis::optim::Adam: lr = " + std::to_string(lr) + ", betas = (" + std::to_string(beta1) + ", " +
                             std::to_string(beta2) + "), eps = " + std::to_string(eps) + ", weight_decay = " +
                             std::to_string(weight_decay) + "; expected lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0");
    }
  }
  PRECIS_HOST_DEVICE context prepare(std::int64_t step) const {
    const auto t = static_cast<double>(step);
    return {lr, 1 - ::pow(beta1, t), 1 - ::pow(beta2, t)};
  }
  template <class T>
  PRECIS_HOST_DEVICE T update(T w, T g, T* s, const context& c) const {
    using std::sqrt;
    if (decoupled) {
      w -= T(c.lr * weight_decay) * w;
    } else if (weight_decay != 0) {
      g += T(weight_decay) * w;
    }
    s[0] = T(beta1) * s[0] + T(1 - beta1) * g;
    s[1] = T(beta2) * s[1] + T(1 - beta2) * g * g;
    const T mhat = s[0] / T(c.c1);
    const T vhat = s[1] / T(c.c2);
    return w - T(c.lr) * mhat / (sqrt(vhat) + T(eps));
  }
  std::size_t update_run(float* w, const float* g, std::array<float*, 2> s, std::size_t n, float factor,
                         const context& c) const;
};

namespace simd {
#if PRECIS_X86_SIMD
/// SGD over float arrays, 8 lanes at a time (b: the momentum buffer, null without momentum);
/// the operations of SGD::update in the same order (the compiler may fuse a multiply and an
/// add, as in adam_float, so a result can differ from the scalar path in its last bit). Returns
/// the elements handled.
PRECIS_TARGET_AVX2 inline std::size_t sgd_float(float* w, const float* g, float* b, std::size_t n, float factor, const SGD& r,
                                                const SGD::context& c) {
  const __m256 f = _mm256_set1_ps(factor), wd = _mm256_set1_ps(static_cast<float>(r.weight_decay)),
               mu = _mm256_set1_ps(static_cast<float>(r.momentum)), damp = _mm256_set1_ps(static_cast<float>(1 - r.dampening)),
               lr = _mm256_set1_ps(static_cast<float>(c.lr));
  const bool decay = r.weight_decay != 0, momentum = r.momentum != 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wi = _mm256_loadu_ps(w + i);
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), f);
    if (decay) gi = _mm256_add_ps(gi, _mm256_mul_ps(wd, wi));
    if (momentum) {
      const __m256 bi = c.first ? gi : _mm256_add_ps(_mm256_mul_ps(mu, _mm256_loadu_ps(b + i)), _mm256_mul_ps(damp, gi));
      _mm256_storeu_ps(b + i, bi);
      gi = r.nesterov ? _mm256_add_ps(gi, _mm256_mul_ps(mu, bi)) : bi;
    }
    _mm256_storeu_ps(w + i, _mm256_sub_ps(wi, _mm256_mul_ps(lr, gi)));
  }
  return i;
}

/// Adam over float arrays, 8 lanes at a time: the same operations as Adam::update in the same
/// order (the compiler may fuse a multiply and an add, so a result can differ from the scalar
/// path in its last bit: GCC's default -ffp-contract=fast does). Returns how many elements it handled (a multiple of 8).
PRECIS_TARGET_AVX2 inline std::size_t adam_float(float* w, const float* g, float* m, float* v, std::size_t n, float factor,
                                                 const Adam& a, const Adam::context& c) {
  const __m256 f = _mm256_set1_ps(factor), b1 = _mm256_set1_ps(static_cast<float>(a.beta1)),
               b1c = _mm256_set1_ps(static_cast<float>(1 - a.beta1)), b2 = _mm256_set1_ps(static_cast<float>(a.beta2)),
               b2c = _mm256_set1_ps(static_cast<float>(1 - a.beta2)), c1 = _mm256_set1_ps(static_cast<float>(c.c1)),
               c2 = _mm256_set1_ps(static_cast<float>(c.c2)), lr = _mm256_set1_ps(static_cast<float>(c.lr)),
               eps = _mm256_set1_ps(static_cast<float>(a.eps)), wd = _mm256_set1_ps(static_cast<float>(a.weight_decay)),
               lrwd = _mm256_set1_ps(static_cast<float>(c.lr * a.weight_decay));
  const bool l2 = !a.decoupled && a.weight_decay != 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wi = _mm256_loadu_ps(w + i);
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), f);
    if (a.decoupled) wi = _mm256_sub_ps(wi, _mm256_mul_ps(lrwd, wi));
    else if (l2) gi = _mm256_add_ps(gi, _mm256_mul_ps(wd, wi));
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(b1c, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(b2c, gi), gi));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 mhat = _mm256_div_ps(mi, c1), vhat = _mm256_div_ps(vi, c2);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(lr, mhat), _mm256_add_ps(_mm256_sqrt_ps(vhat), eps));
    _mm256_storeu_ps(w + i, _mm256_sub_ps(wi, step));
  }
  return i;
}
#endif
}  // namespace simd

inline std::size_t SGD::update_run(float* w, const float* g, std::array<float*, 1> s, std::size_t n, float factor,
                                   const context& c) const {
#if PRECIS_X86_SIMD
  if (precis::detail::cpu_has_avx2_f16c()) return simd::sgd_float(w, g, momentum != 0 ? s[0] : nullptr, n, factor, *this, c);
#else
  (void)w, (void)g, (void)s, (void)n, (void)factor, (void)c;
#endif
  return 0;
}

inline std::size_t Adam::update_run(float* w, const float* g, std::array<float*, 2> s, std::size_t n, float factor,
                                    const context& c) const {
#if PRECIS_X86_SIMD
  // sqrt and division keep GCC from vectorizing the scalar loop (errno semantics): a kernel
  if (precis::detail::cpu_has_avx2_f16c()) return simd::adam_float(w, g, s[0], s[1], n, factor, *this, c);
#else
  (void)w, (void)g, (void)s, (void)n, (void)factor, (void)c;
#endif
  return 0;
}

/// AdamW: Adam with decoupled weight decay (PyTorch's default weight_decay = 0.01).
struct AdamW : Adam {
  AdamW() {
    decoupled = true;
    weight_decay = 0.01;
  }
};

static_assert(optimizer_rule<SGD> && optimizer_rule<Adam> && optimizer_rule<AdamW> && optimizer_rule<SGD, double> &&
              detail::rule_has_update_run<SGD> && detail::rule_has_update_run<AdamW>);

}  // namespace precis::optim
