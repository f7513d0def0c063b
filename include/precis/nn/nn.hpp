// precis::nn: thin layers on the tape. A Module owns named parameters (value + gradient, in the
// policy's parameter and gradient types) and child modules; calling a layer binds its
// parameters to the tape of its input and records the ops.
//
//   precis::nn::MLP<P> net({784, 256, 128, 10}, precis::nn::activation::relu, /*seed=*/1);
//   precis::Tape<P> tape;
//   auto loss = cross_entropy(net(tape.input(x)), labels);
//   tape.backward(loss);
//   for (auto* p : net.parameters()) { /* p->value, p->grad */ }
//   net.zero_grad(); tape.reset();
//
// Parameters live in the memory of the policy's backend (precis::backend_t<P>): host Tensors,
// or with precis::cuda::on_device<P> device tensors, initialized on the host from the same seeds
// and uploaded, so a model has the same initial bits on every backend. On a backend whose memory
// the host cannot touch, read them with p.value_on_host() and p.grad_on_host().
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "precis/autodiff/all.hpp"

namespace precis::nn {

/// A trainable tensor: its value and the gradient backward() accumulates into, in backend B's
/// memory (B::tensor: host Tensors by default).
template <class S, class G = S, class B = backend::host>
struct Parameter {
  using backend_type = B;
  std::string name;
  typename B::template tensor<S> value;
  typename B::template tensor<G> grad;
  /// True while `grad` is known to hold zeros: zero_grad() sets it, and the next backward's
  /// first write into the gradient then assigns instead of adding (a weight gradient's GEMM
  /// stores its product without reading the zeros back), and clears it. The values are the
  /// same either way (0 + v rounded once is v rounded once; a -0 stays -0). If you write into
  /// `grad` yourself between zero_grad() and backward, set it to false (builds without NDEBUG
  /// throw where a marked host gradient is not zeros; others would overwrite it).
  bool grad_is_zero = false;

  /// Host copies of the value and of the gradient: on a device backend, downloads that wait
  /// for the work enqueued where `b` enqueues its own (its stream).
  Tensor<S> value_on_host(const B& b = {}) const { return on_host(value, b); }
  Tensor<G> grad_on_host(const B& b = {}) const { return on_host(grad, b); }

 private:
  template <class X>
  static auto on_host(const X& x, const B& b) {
    using T = typename decltype(x.view())::storage_type;
    auto out = Tensor<T>::uninitialized(x.shape());
    b.download(x.view().as_const(), out.view());
    return out;
  }
};

/// The parameter registry: parameters and child modules by name, in registration order.
template <class P>
class Module {
 public:
  using policy_type = P;
  using backend_type = backend_t<P>;
  using param_type = typename P::param_type;
  using grad_type = grad_storage_t<P, param_type>;
  using parameter = Parameter<param_type, grad_type, backend_type>;

  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;
  virtual ~Module() = default;

  /// Every parameter of this module and its children ("child.name" paths), depth first.
  std::vector<std::pair<std::string, parameter*>> named_parameters() {
    std::vector<std::pair<std::string, parameter*>> out;
    for (auto& p : params_) out.emplace_back(p->name, p.get());
    for (auto& [name, child] : children_) {
      for (auto& [sub, p] : child->named_parameters()) out.emplace_back(name + "." + sub, p);
    }
    return out;
  }
  std::vector<parameter*> parameters() {
    std::vector<parameter*> out;
    for (auto& np : named_parameters()) out.push_back(np.second);
    return out;
  }
  /// Calls f(parameter&) for every parameter, depth first, without allocating.
  template <class F>
  void for_each_parameter(F&& f) {
    for (auto& p : params_) f(*p);
    for (auto& c : children_) c.second->for_each_parameter(f);
  }
  index_t parameter_count() {
    index_t n = 0;
    for_each_parameter([&](parameter& p) { n += p.value.size(); });
    return n;
  }
  /// Sets every gradient to zero (backward accumulates; call between steps) and marks it so
  /// (Parameter::grad_is_zero): the next backward assigns its first write. On a device
  /// backend the zeroing is enqueued where `b` enqueues its work (its stream).
  void zero_grad(const backend_type& b = {}) {
    for_each_parameter([&](parameter& p) {
      if constexpr (backend_type::host_memory) {
        std::fill_n(p.grad.data(), p.grad.size(), grad_type(0));
      } else {
        static_assert(std::is_trivially_copyable_v<grad_type>, "precis::nn::Module::zero_grad: a device gradient type is trivially copyable");
        b.zero_bytes(p.grad.data(), static_cast<std::size_t>(p.grad.size()) * sizeof(grad_type));
      }
      p.grad_is_zero = true;
    });
  }

 protected:
  /// A new parameter of `shape`: value and gradient zero (in the backend's memory).
  parameter& register_parameter(std::string name, const Shape& shape) {
    params_.push_back(std::make_unique<parameter>(parameter{std::move(name), typename parameter::backend_type::template tensor<param_type>(shape),
                                                            typename parameter::backend_type::template tensor<grad_type>(shape)}));
    parameter& p = *params_.back();
    if constexpr (backend_type::host_memory && std::is_same_v<typename backend_type::template tensor<param_type>, Tensor<param_type>>) {
      return p;  // host Tensors start as zeros
    } else {
      const backend_type b{};
      b.upload(Tensor<param_type>(shape).view().as_const(), p.value.view());
      b.upload(Tensor<grad_type>(shape).view().as_const(), p.grad.view());
      return p;
    }
  }
  /// Sets p's value by `init(view)` on a host view of its shape (kaiming_uniform, fill_uniform,
  /// ...): in place on the host backend, in a host tensor uploaded to any other.
  template <class F>
  void initialize(parameter& p, F&& init) {
    if constexpr (std::is_same_v<typename backend_type::template tensor<param_type>, Tensor<param_type>>) {
      init(p.value.view());
    } else {
      Tensor<param_type> h(p.value.shape());
      init(h.view());
      backend_type{}.upload(h.view().as_const(), p.value.view());
    }
  }
  template <class M>
  M& register_module(std::string name, std::unique_ptr<M> m) {
    M& ref = *m;
    children_.emplace_back(std::move(name), std::move(m));
    return ref;
  }

 private:
  std::vector<std::unique_ptr<parameter>> params_;  // stable addresses: tapes point into them
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// ---- initializers -------------------------------------------------------------------------------

/// Kaiming/He uniform (He et al. 2015): U(-b, b), b = gain sqrt(3 / fan_in); gain sqrt(2) keeps
/// the activations' variance through ReLU layers.
template <class S, class C>
void kaiming_uniform(const TensorView<S, C>& w, index_t fan_in, std::uint64_t seed, double gain = std::sqrt(2.0)) {
  if (fan_in <= 0) throw invalid_argument("precis::nn::kaiming_uniform: fan_in = " + std::to_string(fan_in) + "; expected > 0");
  const double b = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
  fill_uniform(w, -b, b, seed);
}
/// Xavier/Glorot uniform (Glorot & Bengio 2010): U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)).
template <class S, class C>
void xavier_uniform(const TensorView<S, C>& w, index_t fan_in, index_t fan_out, std::uint64_t seed, double gain = 1.0) {
  if (fan_in + fan_out <= 0) {
    throw invalid_argument("precis::nn::xavier_uniform: fan_in + fan_out = " + std::to_string(fan_in + fan_out) + "; expected > 0");
  }
  const double b = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  fill_uniform(w, -b, b, seed);
}

enum class init { kaiming_uniform, xavier_uniform };

// ---- layers -----------------------------------------------------------------------------------

/// y = x W^T + b, W [out, in]; bias zero-initialized.
template <class P>
class Linear : public Module<P> {
 public:
  using parameter = typename Module<P>::parameter;

  Linear(index_t in, index_t out, std::uint64_t seed, bool bias = true, init how = init::kaiming_uniform)
      : weight_(&this->register_parameter("weight", Shape{out, in})),
        bias_(bias ? &this->register_parameter("bias", Shape{out}) : nullptr) {
    if (in <= 0 || out <= 0) {
      throw invalid_argument("precis::nn::Linear: in = " + std::to_string(in) + ", out = " + std::to_string(out) +
                             "; expected positive sizes");
    }
    this->initialize(*weight_, [&](const TensorView<typename P::param_type>& w) {
      if (how == init::kaiming_uniform) kaiming_uniform(w, in, seed);
      else xavier_uniform(w, in, out, seed);
    });
  }

  template <class S>
  auto operator()(const Var<P, S>& x) {
    Tape<P>& t = x.tape();
    if (bias_ == nullptr) return linear(x, t.param(*weight_));
    return linear(x, t.param(*weight_), t.param(*bias_));
  }

  parameter& weight() { return *weight_; }
  parameter* bias() { return bias_; }
  index_t in_features() const { return weight_->value.shape()[1]; }
  index_t out_features() const { return weight_->value.shape()[0]; }

 private:
  parameter* weight_;
  parameter* bias_;
};

/// Normalization over the last axis with a learned scale (ones) and shift (zeros).
template <class P>
class LayerNorm : public Module<P> {
 public:
  explicit LayerNorm(index_t d, double eps = 1e-5)
      : gamma_(&this->register_parameter("weight", Shape{d})), beta_(&this->register_parameter("bias", Shape{d})), eps_(eps) {
    this->initialize(*gamma_, [](const TensorView<typename P::param_type>& g) { std::fill_n(g.data(), g.size(), typename P::param_type(1)); });
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    Tape<P>& t = x.tape();
    return layer_norm(x, t.param(*gamma_), t.param(*beta_), eps_);
  }

 private:
  typename Module<P>::parameter* gamma_;
  typename Module<P>::parameter* beta_;
  double eps_;
};

/// 2-D convolution over [N, C, H, W]: weight [out, in / groups, kh, kw] (Kaiming uniform),
/// bias [out] (zeros).
template <class P>
class Conv2d : public Module<P> {
 public:
  Conv2d(index_t in, index_t out, std::array<index_t, 2> kernel, const conv2d_options& o, std::uint64_t seed, bool bias = true)
      : o_(o) {
    if (in <= 0 || out <= 0 || o.groups <= 0 || in % o.groups != 0 || out % o.groups != 0 || kernel[0] <= 0 || kernel[1] <= 0) {
      throw invalid_argument("precis::nn::Conv2d: in = " + std::to_string(in) + ", out = " + std::to_string(out) +
                             ", groups = " + std::to_string(o.groups) + ", kernel " + std::to_string(kernel[0]) + "x" +
                             std::to_string(kernel[1]) + "; expected positive sizes with channels divisible by groups");
    }
    weight_ = &this->register_parameter("weight", Shape{out, in / o.groups, kernel[0], kernel[1]});
    bias_ = bias ? &this->register_parameter("bias", Shape{out}) : nullptr;
    this->initialize(*weight_, [&](const TensorView<typename P::param_type>& w) {
      kaiming_uniform(w, in / o.groups * kernel[0] * kernel[1], seed);
    });
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    Tape<P>& t = x.tape();
    if (bias_ == nullptr) return conv2d(x, t.param(*weight_), o_);
    return conv2d(x, t.param(*weight_), t.param(*bias_), o_);
  }

 private:
  conv2d_options o_;
  typename Module<P>::parameter* weight_ = nullptr;
  typename Module<P>::parameter* bias_ = nullptr;
};

/// Batch normalization over the channels of [N, C, ...]: scale (ones) and shift (zeros) are
/// parameters; the running mean and variance (in double, in the backend's memory beside the
/// parameters) are state, updated in training mode and used in evaluation mode (train(false)).
template <class P>
class BatchNorm2d : public Module<P> {
  using backend_type = typename Module<P>::backend_type;

 public:
  explicit BatchNorm2d(index_t channels, double momentum = 0.1, double eps = 1e-5)
      : gamma_(&this->register_parameter("weight", Shape{channels})),
        beta_(&this->register_parameter("bias", Shape{channels})),
        mean_(Shape{channels}),
        var_(Shape{channels}),
        momentum_(momentum),
        eps_(eps) {
    this->initialize(*gamma_, [](const TensorView<typename P::param_type>& g) { std::fill_n(g.data(), g.size(), typename P::param_type(1)); });
    Tensor<double> h(Shape{channels});  // zeros
    backend_type{}.upload(h.view().as_const(), mean_.view());
    std::fill_n(h.data(), h.size(), 1.0);
    backend_type{}.upload(h.view().as_const(), var_.view());
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    Tape<P>& t = x.tape();
    return batch_norm(x, t.param(*gamma_), t.param(*beta_), {training_, momentum_, eps_, mean_.data(), var_.data()});
  }
  void train(bool on) { training_ = on; }
  bool training() const { return training_; }
  /// Host copies of the running estimates (on a device backend, downloads that wait for the
  /// work enqueued where `b` enqueues its own).
  std::vector<double> running_mean(const backend_type& b = {}) const { return on_host(mean_, b); }
  std::vector<double> running_var(const backend_type& b = {}) const { return on_host(var_, b); }

 private:
  using state = typename backend_type::template tensor<double>;
  static std::vector<double> on_host(const state& v, const backend_type& b) {
    std::vector<double> out(static_cast<std::size_t>(v.size()));
    b.download(v.view(), TensorView<double>(out.data(), v.shape()));
    return out;
  }
  typename Module<P>::parameter* gamma_;
  typename Module<P>::parameter* beta_;
  state mean_, var_;
  double momentum_, eps_;
  bool training_ = true;
};

/// A table of `count` vectors of width `dim` (uniform in [-1, 1] / sqrt(dim)), looked up by index.
template <class P>
class Embedding : public Module<P> {
 public:
  Embedding(index_t count, index_t dim, std::uint64_t seed) : weight_(&this->register_parameter("weight", Shape{count, dim})) {
    this->initialize(*weight_, [&](const TensorView<typename P::param_type>& w) {
      fill_uniform(w, -1.0 / std::sqrt(static_cast<double>(dim)), 1.0 / std::sqrt(static_cast<double>(dim)), seed);
    });
  }
  /// Rows at `indices` (row-major, of shape index_shape) -> [index_shape..., dim].
  auto operator()(Tape<P>& t, std::span<const std::int64_t> indices, const Shape& index_shape) {
    return embedding(t.param(*weight_), indices, index_shape);
  }
  typename Module<P>::parameter& weight() { return *weight_; }

 private:
  typename Module<P>::parameter* weight_;
};

/// Inverted dropout; each call draws a new mask (the call counter is the RNG's offset), the
/// same for any thread count. Identity when p == 0 or in evaluation mode.
template <class P>
class Dropout : public Module<P> {
 public:
  explicit Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed) {
    if (!(p >= 0 && p < 1)) throw invalid_argument("precis::nn::Dropout: p = " + std::to_string(p) + "; expected 0 <= p < 1");
  }
  template <class S>
  Var<P, S> operator()(const Var<P, S>& x) {
    if (!training_ || p_ == 0) return x;
    return dropout(x, {p_, seed_, calls_++, true});
  }
  void train(bool on) { training_ = on; }

 private:
  double p_;
  std::uint64_t seed_, calls_ = 0;
  bool training_ = true;
};

/// Multi-head self-attention over x [B, T, D]: q, k, v projections, `heads` heads of D / heads,
/// fused scaled dot-product attention (softmax in the policy's wide type), output projection.
template <class P>
class MultiHeadAttention : public Module<P> {
 public:
  MultiHeadAttention(index_t dim, index_t heads, std::uint64_t seed) : dim_(dim), heads_(heads) {
    if (dim <= 0 || heads <= 0 || dim % heads != 0) {
      throw invalid_argument("precis::nn::MultiHeadAttention: dim = " + std::to_string(dim) + ", heads = " +
                             std::to_string(heads) + "; expected positive sizes with dim divisible by heads");
    }
    for (std::size_t i = 0; i < 4; ++i) {
      proj_[i] = &this->register_module(std::string(1, "qkvo"[i]), std::make_unique<Linear<P>>(dim, dim, seed + 7 * i, true,
                                                                                              init::xavier_uniform));
    }
  }
  template <class S>
  auto operator()(const Var<P, S>& x, bool causal = false) {
    const Shape& xs = x.shape();
    if (xs.rank() != 3 || xs[2] != dim_) {
      throw shape_error("precis::nn::MultiHeadAttention: input " + xs.str() + "; expected [batch, tokens, " +
                        std::to_string(dim_) + "]");
    }
    const index_t b = xs[0], t = xs[1];
    const auto flat = reshape(x, Shape{b * t, dim_});
    // the heads stay side by side in the projections' [b, t, dim] outputs: attention reads each
    // head's columns in place and writes its output likewise
    const auto project = [&](std::size_t i) { return reshape((*proj_[i])(flat), Shape{b, t, dim_}); };
    const auto o = attention(project(0), project(1), project(2), {causal, 0, heads_});
    return reshape((*proj_[3])(reshape(o, Shape{b * t, dim_})), Shape{b, t, dim_});
  }

 private:
  index_t dim_, heads_;
  std::array<Linear<P>*, 4> proj_{};
};

/// A pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with a GELU (tanh) MLP of
/// hidden width mlp_ratio * dim.
template <class P>
class TransformerBlock : public Module<P> {
 public:
  TransformerBlock(index_t dim, index_t heads, index_t mlp_ratio, std::uint64_t seed)
      : ln1_(&this->register_module("ln1", std::make_unique<LayerNorm<P>>(dim))),
        attn_(&this->register_module("attn", std::make_unique<MultiHeadAttention<P>>(dim, heads, seed))),
        ln2_(&this->register_module("ln2", std::make_unique<LayerNorm<P>>(dim))),
        fc1_(&this->register_module("fc1", std::make_unique<Linear<P>>(dim, mlp_ratio * dim, seed + 100))),
        fc2_(&this->register_module("fc2", std::make_unique<Linear<P>>(mlp_ratio * dim, dim, seed + 200, true,
                                                                        init::xavier_uniform))),
        dim_(dim) {}
  template <class S>
  auto operator()(const Var<P, S>& x, bool causal = false) {
    const Shape xs = x.shape();
    const auto h = add(x, (*attn_)((*ln1_)(x), causal));
    const auto m = (*fc2_)(gelu_tanh((*fc1_)(reshape((*ln2_)(h), Shape{xs[0] * xs[1], dim_}))));
    return add(h, reshape(m, xs));
  }

 private:
  LayerNorm<P>* ln1_;
  MultiHeadAttention<P>* attn_;
  LayerNorm<P>* ln2_;
  Linear<P>* fc1_;
  Linear<P>* fc2_;
  index_t dim_;
};

enum class activation { relu, gelu, tanh };

/// Linear layers of the given widths with an activation between them (none after the last).
template <class P>
class MLP : public Module<P> {
 public:
  MLP(const std::vector<index_t>& widths, activation act, std::uint64_t seed) : act_(act) {
    if (widths.size() < 2) {
      throw invalid_argument("precis::nn::MLP: " + std::to_string(widths.size()) +
                             " widths; expected at least 2 (inputs and outputs)");
    }
    for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
      layers_.push_back(&this->register_module("layer" + std::to_string(i),
                                               std::make_unique<Linear<P>>(widths[i], widths[i + 1], seed + i)));
    }
  }

  /// The logits; the hidden activations are stored in the policy's types.
  template <class S>
  auto operator()(const Var<P, S>& x) {
    auto h = (*layers_[0])(x);
    for (std::size_t i = 1; i < layers_.size(); ++i) h = (*layers_[i])(activate(h));
    return h;
  }

  std::size_t depth() const { return layers_.size(); }
  Linear<P>& layer(std::size_t i) { return *layers_.at(i); }

 private:
  template <class S>
  Var<P, S> activate(const Var<P, S>& h) const {
    switch (act_) {
      case activation::relu: return relu(h);
      case activation::gelu: return gelu(h);
      case activation::tanh: return tanh(h);
    }
    return h;
  }

  activation act_;
  std::vector<Linear<P>*> layers_;
};

}  // namespace precis::nn
