// Optimizer update rules, element by element, in the arithmetic of the master weights. Each rule
// is a small struct: its hyperparameters, how many state arrays it keeps per parameter, a
// per-step context (learning rate, bias corrections) and the update of one weight.
// The definitions follow PyTorch's torch.optim (SGD, Adam, AdamW) so results can be compared.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "precis/error.hpp"

namespace precis::optim {

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

  int state_arrays() const { return momentum != 0 ? 1 : 0; }
  void validate() const {
    if (!(lr >= 0) || !(momentum >= 0) || !(weight_decay >= 0) || (nesterov && (momentum <= 0 || dampening != 0))) {
      throw invalid_argument("precis::optim::SGD: lr = " + std::to_string(lr) + ", momentum = " + std::to_string(momentum) +
                             ", dampening = " + std::to_string(dampening) + ", weight_decay = " + std::to_string(weight_decay) +
                             (nesterov ? ", nesterov" : "") +
                             "; expected non-negative values, and Nesterov only with momentum > 0 and no dampening");
    }
  }
  context prepare(std::int64_t step) const { return {lr, step == 1}; }
  template <class T>
  T update(T w, T g, T* s, const context& c) const {
    if (weight_decay != 0) g += T(weight_decay) * w;
    if (momentum != 0) {
      const T b = c.first ? g : T(T(momentum) * s[0] + T(1 - dampening) * g);
      s[0] = b;
      g = nesterov ? T(g + T(momentum) * b) : b;
    }
    return w - T(c.lr) * g;
  }
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

  int state_arrays() const { return 2; }
  void validate() const {
    if (!(lr >= 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0) || !(weight_decay >= 0)) {
      throw invalid_argument("precis::optim::Adam: lr = " + std::to_string(lr) + ", betas = (" + std::to_string(beta1) + ", " +
                             std::to_string(beta2) + "), eps = " + std::to_string(eps) + ", weight_decay = " +
                             std::to_string(weight_decay) + "; expected lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0");
    }
  }
  context prepare(std::int64_t step) const {
    const auto t = static_cast<double>(step);
    return {lr, 1 - std::pow(beta1, t), 1 - std::pow(beta2, t)};
  }
  template <class T>
  T update(T w, T g, T* s, const context& c) const {
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
};

/// AdamW: Adam with decoupled weight decay (PyTorch's default weight_decay = 0.01).
struct AdamW : Adam {
  AdamW() {
    decoupled = true;
    weight_decay = 0.01;
  }
};

}  // namespace precis::optim
