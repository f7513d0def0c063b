// Adan as a user-defined optimizer rule: a struct with the members precis::optim::optimizer_rule
// names, and four state arrays per parameter, which MixedPrecisionOptimizer keeps in the
// master type, checkpoints and restores like its own rules' state.
//
// Adan (Xie, Zhou, Li, Lin & Yan, "Adan: Adaptive Nesterov Momentum Algorithm for Faster
// Optimizing Deep Models", arXiv:2208.06677, IEEE TPAMI 2024), Algorithm 1 without restarts,
// with the bias corrections of the authors' implementation. Written with decays
// b1 = 1 - beta1, b2 = 1 - beta2, b3 = 1 - beta3 of the paper's notation (its defaults
// beta = 0.02, 0.08, 0.01), for gradient g_k:
//   d_k = g_k - g_{k-1}                 (0 at the first step: g_0 = g_1)
//   m_k = b1 m_{k-1} + (1 - b1) g_k
//   v_k = b2 v_{k-1} + (1 - b2) d_k
//   n_k = b3 n_{k-1} + (1 - b3) (g_k + b2 d_k)^2
//   w_{k+1} = (w_k - lr (m_k / c1 + b2 v_k / c2) / (sqrt(n_k / c3) + eps)) / (1 + lr wd)
// with c_i = 1 - b_i^k; the division by 1 + lr wd is the paper's proximal weight decay.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include <precis/error.hpp>

namespace adan_example {

struct Adan {
  double lr = 1e-3;
  double b1 = 0.98, b2 = 0.92, b3 = 0.99;  // decays of m, v and n
  double eps = 1e-8;
  double weight_decay = 0;

  /// m, v (the averaged gradient difference), n, and the previous gradient.
  static constexpr std::size_t state_count = 4;

  struct context {
    double lr, c1, c2, sqrt_c3;
    bool first;
  };

  void validate() const {
    const auto in01 = [](double b) { return b >= 0 && b < 1; };
    if (!(lr >= 0) || !in01(b1) || !in01(b2) || !in01(b3) || !(eps > 0) || !(weight_decay >= 0)) {
      throw precis::invalid_argument("Adan: lr = " + std::to_string(lr) + ", decays (" + std::to_string(b1) + ", " +
                                     std::to_string(b2) + ", " + std::to_string(b3) + "), eps = " + std::to_string(eps) +
                                     ", weight_decay = " + std::to_string(weight_decay) +
                                     "; expected lr >= 0, decays in [0, 1), eps > 0, weight_decay >= 0");
    }
  }

  context prepare(std::int64_t step) const {
    const auto t = static_cast<double>(step);
    return {lr, 1 - std::pow(b1, t), 1 - std::pow(b2, t), std::sqrt(1 - std::pow(b3, t)), step == 1};
  }

  template <class T>
  T update(T w, T g, T* s, const context& c) const {
    using std::sqrt;
    T& m = s[0];
    T& v = s[1];
    T& n = s[2];
    T& previous = s[3];
    const T d = c.first ? T(0) : T(g - previous);
    m = T(b1) * m + T(1 - b1) * g;
    v = T(b2) * v + T(1 - b2) * d;
    const T u = g + T(b2) * d;
    n = T(b3) * n + T(1 - b3) * u * u;
    previous = g;
    const T step = (m / T(c.c1) + T(b2) * v / T(c.c2)) / (sqrt(n) / T(c.sqrt_c3) + T(eps));
    return (w - T(c.lr) * step) / T(1 + c.lr * weight_decay);
  }
};

}  // namespace adan_example
