// The Fashion-MNIST demo's shared part: the three models, the settings, one training run and
// its result. The runs of each group of policies are compiled in a translation unit of their own
// (the .cpp files next to this one); train_fashion_mnist.cpp plans the runs, schedules them and
// writes the tables.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <map>
#include <numeric>
#include <precis/data/idx.hpp>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <sstream>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif
#if PRECIS_HAS_MPI
#include <optional>
#include <precis/dist/all.hpp>
#endif

namespace fashion_mnist {

using namespace precis;
namespace pol = precis::policy;

inline const std::vector<std::string> all_policies = {"32-true",   "64-true",     "bf16-mixed",   "16-mixed", "fp8-mixed",
                                               "fp8-mixed/unscaled", "bf16-true", "bf16-true+sr", "16-true"};
inline const std::vector<std::string> all_models = {"mlp", "cnn", "vit"};
/// The policies the CNN and the ViT train under in the default plan.
inline const std::vector<std::string> conv_default_policies = {"32-true", "bf16-mixed", "16-mixed"};

// ---- the three models; each maps a batch of flattened images [B, 784] to logits [B, 10] ----------
//
// Each names how it trains: its optimizer rule, the rule's description, and the learning rate
// the cosine schedule decays from (--lr overrides it). The CNN at lr 0.1 reaches in 3 epochs the
// test accuracy lr 0.05 reaches in 5; the ViT under AdamW at 3e-3 reaches in 3 epochs more than
// SGD did in 5 (docs/benchmarks.md, "make demo for slower 2-core machines").

/// SGD with momentum 0.9, as the MLP and the CNN train.
struct sgd_momentum {
  using rule = optim::SGD;
  static constexpr const char* optimizer = "SGD, momentum 0.9";
  static rule make(double lr) { return optim::SGD{.lr = lr, .momentum = 0.9}; }
};

/// AdamW with PyTorch's defaults (betas 0.9 and 0.999, eps 1e-8, weight decay 0.01).
struct adamw {
  using rule = optim::AdamW;
  static constexpr const char* optimizer = "AdamW, betas 0.9 and 0.999, weight decay 0.01";
  static rule make(double lr) {
    rule r;
    r.lr = lr;
    return r;
  }
};

/// MLP 784-256-128-10 with ReLU.
template <class P>
struct Mlp : nn::MLP<P> {
  static constexpr const char* description = "MLP 784-256-128-10 (ReLU)";
  using training = sgd_momentum;
  static constexpr double lr = 0.05;
  explicit Mlp(std::uint64_t seed) : nn::MLP<P>({784, 256, 128, 10}, nn::activation::relu, seed) {}
};

/// Two blocks of 3x3 convolution (padding 1), 2x2 max pooling and ReLU (1 -> 16 -> 32 channels,
/// 28x28 -> 14x14 -> 7x7), then a head of two linear layers on the 1568 features (a hidden ReLU
/// layer of 128, then the 10 classes). Without the hidden layer the same network reached
/// 0.894-0.904 in three epochs over seeds 1-4, too close to 0.90 for the rounding differences
/// between machines; with it, 0.905-0.908 (docs/benchmarks.md). Pooling before the ReLU
/// computes the same function with the same gradients, bit for bit (max and ReLU commute, and a
/// window whose largest element is not positive passes no gradient either way), on a quarter of
/// the elements: the ReLU's forward and backward cost 4x less.
template <class P>
struct Cnn : nn::Module<P> {
  static constexpr const char* description = "CNN conv3x3(16)-maxpool-relu-conv3x3(32)-maxpool-relu-linear(128)-relu-linear(10)";
  using training = sgd_momentum;
  static constexpr double lr = 0.1;
  explicit Cnn(std::uint64_t seed) {
    const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
    conv1_ = &this->register_module("conv1", std::make_unique<nn::Conv2d<P>>(1, 16, std::array<index_t, 2>{3, 3}, same, seed));
    conv2_ = &this->register_module("conv2", std::make_unique<nn::Conv2d<P>>(16, 32, std::array<index_t, 2>{3, 3}, same, seed + 1));
    hidden_ = &this->register_module("hidden", std::make_unique<nn::Linear<P>>(32 * 7 * 7, 128, seed + 2));
    head_ = &this->register_module("head", std::make_unique<nn::Linear<P>>(128, 10, seed + 3));
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    const index_t b = x.shape()[0];
    const auto h1 = relu(max_pool2d((*conv1_)(reshape(x, Shape{b, 1, 28, 28}))));
    const auto h2 = relu(max_pool2d((*conv2_)(h1)));
    return (*head_)(relu((*hidden_)(reshape(h2, Shape{b, 32 * 7 * 7}))));
  }

 private:
  nn::Conv2d<P>* conv1_;
  nn::Conv2d<P>* conv2_;
  nn::Linear<P>* hidden_;
  nn::Linear<P>* head_;
};

/// A small vision transformer: 7x7 patches (a stride-7 convolution) -> 16 tokens of width 64,
/// plus a learned position embedding; 2 pre-LN blocks of 4 heads with a GELU MLP of width 128;
/// a final layer norm, the mean over tokens, and a linear head.
template <class P>
struct Vit : nn::Module<P> {
  static constexpr const char* description = "ViT 7x7 patches, 16 tokens, width 64, 2 pre-LN blocks, 4 heads, MLP 128";
  using training = adamw;
  static constexpr double lr = 3e-3;
  explicit Vit(std::uint64_t seed) {
    patch_ = &this->register_module("patch", std::make_unique<nn::Conv2d<P>>(1, 64, std::array<index_t, 2>{7, 7},
                                                                            conv2d_options{{7, 7}, {0, 0}, {1, 1}, 1}, seed));
    pos_ = &this->register_parameter("position", Shape{16, 64});
    this->initialize(*pos_, [&](const TensorView<typename P::param_type>& v) { fill_uniform(v, -0.02, 0.02, seed + 1); });
    for (std::size_t i = 0; i < 2; ++i) {
      blocks_[i] = &this->register_module("block" + std::to_string(i),
                                          std::make_unique<nn::TransformerBlock<P>>(64, 4, 2, seed + 10 * (i + 1)));
    }
    norm_ = &this->register_module("norm", std::make_unique<nn::LayerNorm<P>>(64));
    head_ = &this->register_module("head", std::make_unique<nn::Linear<P>>(64, 10, seed + 50));
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    const index_t b = x.shape()[0];
    Tape<P>& t = x.tape();
    const auto patches = (*patch_)(reshape(x, Shape{b, 1, 28, 28}));                 // [B, 64, 4, 4]
    const auto tokens = permute(reshape(patches, Shape{b, 64, 16}), Shape{0, 2, 1});  // [B, 16, 64]
    const auto h = (*blocks_[1])((*blocks_[0])(add(tokens, t.param(*pos_))));
    return (*head_)(mean((*norm_)(h), 1));
  }

 private:
  nn::Conv2d<P>* patch_;
  typename nn::Module<P>::parameter* pos_;
  std::array<nn::TransformerBlock<P>*, 2> blocks_{};
  nn::LayerNorm<P>* norm_;
  nn::Linear<P>* head_;
};

struct settings {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "build/demo";
  int epochs = 0;  // 0: each model's default
  bool full = false;
  std::vector<std::string> models = all_models;
  index_t batch = 128;
  double lr = 0;  // 0: each model's own
  int threads = 0;  // 0: OpenMP's default
  int jobs = 0;     // runs at a time; 0: 2 where there are 2 or more threads, else 1
  bool plain_progress = false;  // plain lines, no redrawn bar (set when runs share the terminal)
  std::uint64_t seed = 1;
  std::vector<std::string> policies;  // empty: each model's default
  bool distributed = false, compress_bf16 = false;
  bool cuda = false;  // --device cuda: train on the GPU
};

/// This process's place in a --distributed run (rank 0 of 1 otherwise).
struct cluster {
  int rank = 0, size = 1;
#if PRECIS_HAS_MPI
  dist::communicator* comm = nullptr;
#endif
};

/// Binades of |g| from 2^-40 to 2^0 (everything smaller lands in the first, larger in the last).
constexpr int hist_lo = -40, hist_hi = 0;

struct result {
  std::string model, policy;
  int epochs = 0;
  double test_accuracy = 0, final_loss = 0, seconds_per_epoch = 0, memory_mib = 0, scale = 1;
  std::int64_t skipped = 0, steps = 0;
  double flushed = 0, zeros = 0;
  double fp8_saturated = -1, fp8_flushed = -1;  // fractions of the fp8 casts' elements; -1: no fp8
  std::vector<double> curve;        // mean training loss over each tenth of an epoch
  std::vector<std::int64_t> hist;   // weight-gradient counts per binade, hist_lo..hist_hi
  std::int64_t sampled = 0;         // weight-gradient values sampled
};

/// One line that redraws itself on a terminal, plain lines otherwise.
class progress {
 public:
  progress(std::string name, int epochs, bool quiet, bool plain)
      : name_(std::move(name)), epochs_(epochs), tty_(!plain && ::isatty(STDERR_FILENO) != 0), quiet_(quiet) {}
  void update(int epoch, double fraction, double loss) {
    if (!tty_ || quiet_) return;
    const int width = 30, filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r%-22s epoch %d/%d [%s%s] %3d%%  loss %.4f ", name_.c_str(), epoch + 1, epochs_,
                 std::string(static_cast<std::size_t>(filled), '#').c_str(), std::string(static_cast<std::size_t>(width - filled), '.').c_str(),
                 static_cast<int>(fraction * 100), loss);
    std::fflush(stderr);
  }
  void epoch_done(int epoch, double loss, double seconds) {
    if (quiet_) return;
    if (tty_) std::fprintf(stderr, "\r%-22s epoch %d/%d  loss %.4f  %.1f s%40s\n", name_.c_str(), epoch + 1, epochs_, loss, seconds, "");
    else std::fprintf(stderr, "%s epoch %d/%d: train loss %.4f, %.1f s\n", name_.c_str(), epoch + 1, epochs_, loss, seconds);
  }

 private:
  std::string name_;
  int epochs_;
  bool tty_, quiet_;
};

/// Rows [first, first + rows) of `order` gathered from `images` into `x` (converted once).
template <class S>
void gather(const data::labelled_images& set, const std::vector<index_t>& order, index_t first, Tensor<float>& staging,
            Tensor<S>& x, std::vector<std::int64_t>& y) {
  const index_t rows = x.shape()[0], cols = x.shape()[1];
  for (index_t i = 0; i < rows; ++i) {
    const index_t src = order[static_cast<std::size_t>(first + i)];
    std::memcpy(staging.data() + i * cols, set.images.data() + src * cols, static_cast<std::size_t>(cols) * sizeof(float));
    y[static_cast<std::size_t>(i)] = set.labels[static_cast<std::size_t>(src)];
  }
  if constexpr (std::is_same_v<S, float>) std::memcpy(x.data(), staging.data(), static_cast<std::size_t>(rows * cols) * sizeof(float));
  else convert(std::span<const float>(staging.data(), static_cast<std::size_t>(rows * cols)), std::span<S>(x.data(), static_cast<std::size_t>(rows * cols)));
}

/// Adds one weight-gradient value g (divided by the loss scale) to the histogram and counters.
/// Without `ref`, it counts as flushed when it is nonzero and rounds to zero in fp16; with `ref`
/// (the same value recomputed in fp32), when it is zero and *ref is not.
inline void count_gradient(double g, result& r, const float* ref) {
  ++r.sampled;
  if (ref) r.flushed += g == 0 && *ref != 0;
  if (g == 0) {
    ++r.zeros;
    return;
  }
  // precis::half, not half: device_runs.cu sees CUDA's global half too
  if (!ref && static_cast<float>(round_to<precis::half>(g)) == 0.0f) ++r.flushed;
  const int e = std::clamp(static_cast<int>(std::floor(std::log2(std::abs(g)))), hist_lo, hist_hi);
  ++r.hist[static_cast<std::size_t>(e - hist_lo)];
}

/// Adds the weight gradients (divided by the loss scale) to the histogram and counters
/// (count_gradient; `ref`: the same step's weight gradients recomputed in fp32, in order).
template <class P>
void sample_gradients(nn::Module<P>& net, double scale, result& r, const std::vector<float>* ref) {
  const double inv = 1.0 / scale;
  std::size_t k = 0;
  net.for_each_parameter([&](auto& p) {
    if (p.name.find("weight") == std::string::npos) return;
    for (const auto& gs : p.grad) {
      count_gradient(static_cast<double>(static_cast<float>(gs)) * inv, r, ref ? &(*ref)[k] : nullptr);
      ++k;
    }
  });
}

/// The weight gradients of `net`'s current weights on batch (x, y), computed in fp32 on the
/// host: for a policy whose gradients are fp16 without scaling, what its own gradients would
/// have been. `values(p)`: parameter p's values as a host tensor (p.value on the host; a copy
/// from the device for a model on the GPU).
template <class P, class Shadow, class S, class Values>
std::vector<float> fp32_weight_gradients(nn::Module<P>& net, Shadow& shadow, const Tensor<S>& x,
                                         const std::vector<std::int64_t>& y, Values&& values) {
  using F = pol::named<"32-true">;
  std::vector<nn::Parameter<float, float>*> dst;
  shadow.for_each_parameter([&](auto& p) { dst.push_back(&p); });
  std::size_t i = 0;
  net.for_each_parameter([&](auto& p) {
    auto& d = *dst[i++];
    const auto& v = values(p);
    for (index_t j = 0; j < v.size(); ++j) d.value.data()[j] = static_cast<float>(v.data()[j]);
  });
  shadow.zero_grad();
  Tape<F> tape;
  Tensor<float> xf(x.shape());
  for (index_t j = 0; j < x.size(); ++j) xf.data()[j] = static_cast<float>(x.data()[j]);
  tape.backward(cross_entropy(shadow(tape.borrow(xf)), y));
  std::vector<float> g;
  shadow.for_each_parameter([&](auto& p) {
    if (p.name.find("weight") != std::string::npos) g.insert(g.end(), p.grad.begin(), p.grad.end());
  });
  return g;
}

/// What a run that measures against fp32 (fp16 gradients without loss scaling) recomputes its
/// gradients with: the model under 32-true; nothing for the other runs, so that a policy's
/// translation unit does not compile the 32-true models' constructors for a copy it never uses.
struct no_fp32_shadow {
  explicit no_fp32_shadow(std::uint64_t) {}
};
template <template <class> class Model, bool Measured>
using fp32_shadow = std::conditional_t<Measured, Model<pol::named<"32-true">>, no_fp32_shadow>;

template <template <class> class Model, class P, class Scaler>
result train(const std::string& model, const std::string& name, const data::labelled_images& tr, const data::labelled_images& te, const settings& st,
             const cluster& cl, Scaler scaler, optim::update_rounding how, int epochs) {
  using S = typename P::param_type;
  result r;
  r.model = model;
  r.policy = name;
  r.hist.assign(hist_hi - hist_lo + 1, 0);
  Model<P> net(st.seed);
  using Rule = typename Model<P>::training::rule;
  const double lr = st.lr > 0 ? st.lr : Model<P>::lr;
  typename optim::MixedPrecisionOptimizer<P, Rule, Scaler>::options o;
  o.rounding = how;
  o.seed = st.seed;
  optim::MixedPrecisionOptimizer<P, Rule, Scaler> opt(net, Model<P>::training::make(lr), scaler, o);
#if PRECIS_HAS_MPI
  std::optional<dist::DataParallel<P, Rule, Scaler>> dp;
  if (cl.comm) {
    typename dist::DataParallel<P, Rule, Scaler>::options dpo;
    dpo.compress_bf16 = st.compress_bf16;
    dp.emplace(*cl.comm, net, opt, dpo);
  }
#endif

  // this rank's rows of each global batch
  const index_t local = st.batch / cl.size, first_row = local * cl.rank;
  const index_t n = tr.images.shape()[0], steps_per_epoch = n / st.batch;
  const index_t curve_every = std::max<index_t>(1, steps_per_epoch / 10);
  const index_t total_steps = steps_per_epoch * epochs;
  Tensor<float> staging(Shape{local, 784});
  Tensor<S> xb(Shape{local, 784});
  std::vector<std::int64_t> yb(static_cast<std::size_t>(local));
  std::vector<index_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), index_t{0});
  xoshiro256pp gen(st.seed);
  Tape<P> tape;
#if PRECIS_HAS_MPI
  if constexpr (pol::fp8_policy<P>) {
    if (dp) dp->attach(tape);  // every rank casts with the same scales
  }
#endif
  // fp16 gradients without loss scaling have already lost what underflows: count it against
  // the same step recomputed in fp32
  constexpr bool measure_against_fp32 =
      std::is_same_v<typename P::grad_type, precis::half> && std::is_same_v<Scaler, optim::NoLossScaler>;
  fp32_shadow<Model, measure_against_fp32> shadow(st.seed);
  progress bar(model + " " + name, epochs, cl.rank != 0, st.plain_progress);
  double seconds = 0;
  for (int e = 0; e < epochs; ++e) {
    // a fresh permutation every epoch, the same for every policy
    for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[gen() % (i + 1)]);
    const auto t0 = std::chrono::steady_clock::now();
    double epoch_loss = 0, window = 0;
    for (index_t s = 0; s < steps_per_epoch; ++s) {
      gather(tr, order, s * st.batch + first_row, staging, xb, yb);
      tape.reset();
      opt.zero_grad();
      auto loss = cross_entropy(net(tape.borrow(xb)), yb);
      opt.backward(tape, loss);
      // cosine decay from lr to 0 over the run
      opt.rule().lr = lr * 0.5 * (1 + std::cos(3.141592653589793 * static_cast<double>(r.steps) / static_cast<double>(total_steps)));
      if (r.steps % 20 == 0 && cl.rank == 0) {
        if constexpr (measure_against_fp32) {
          const auto ref = fp32_weight_gradients(net, shadow, xb, yb, [](auto& p) -> const auto& { return p.value; });
          sample_gradients(net, opt.loss_scale(), r, &ref);
        } else {
          sample_gradients(net, opt.loss_scale(), r, nullptr);
        }
      }
#if PRECIS_HAS_MPI
      if (dp) {
        dp->reduce_gradients();
        dp->step();
      } else {
        opt.step();
      }
#else
      opt.step();
#endif
      ++r.steps;
      const double l = loss.item();
      epoch_loss += l;
      window += l;
      if ((s + 1) % curve_every == 0) {
        r.curve.push_back(window / static_cast<double>(curve_every));
        window = 0;
        bar.update(e, static_cast<double>(s + 1) / static_cast<double>(steps_per_epoch), epoch_loss / static_cast<double>(s + 1));
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += secs;
    r.final_loss = epoch_loss / static_cast<double>(steps_per_epoch);
#if PRECIS_HAS_MPI
    if (cl.comm) cl.comm->allreduce(std::span<double>(&r.final_loss, 1), dist::reduce_op::mean);  // over all shards
#endif
    bar.epoch_done(e, r.final_loss, secs);
  }
  r.seconds_per_epoch = seconds / epochs;
  r.epochs = epochs;
  r.skipped = opt.scaler().state().skipped;
  r.scale = opt.loss_scale();
  r.flushed /= static_cast<double>(r.sampled);
  r.zeros /= static_cast<double>(r.sampled);
  if constexpr (pol::fp8_policy<P>) {  // every fp8 cast of the training steps
    const auto tot = tape.fp8().totals();
    r.fp8_saturated = tot.saturated_fraction();
    r.fp8_flushed = tot.flushed_fraction();
  }

  std::size_t model_bytes = 0;
  net.for_each_parameter([&](auto& p) {
    model_bytes += static_cast<std::size_t>(p.value.size()) * (sizeof(S) + sizeof(typename P::grad_type));
  });
  r.memory_mib = static_cast<double>(tape.arena().peak_bytes() + tape.scratch_arena().peak_bytes() +
                                     tape.state_arena().peak_bytes() + model_bytes + opt.state_bytes()) /
                 (1024.0 * 1024.0);

  if (cl.rank != 0) return r;  // rank 0 evaluates and reports
  // test accuracy, forward only, in chunks of 1000 images (the last one ragged)
  const index_t m = te.images.shape()[0], chunk = std::min<index_t>(1000, m);
  Tensor<float> tstaging(Shape{chunk, 784});
  Tensor<S> xt(Shape{chunk, 784});
  std::vector<std::int64_t> yt(static_cast<std::size_t>(chunk));
  std::vector<index_t> identity(static_cast<std::size_t>(m));
  std::iota(identity.begin(), identity.end(), index_t{0});
  index_t correct = 0;
  for (index_t first = 0; first < m; first += chunk) {
    const index_t len = std::min(chunk, m - first);
    if (len != chunk) {
      tstaging = Tensor<float>(Shape{len, 784});
      xt = Tensor<S>(Shape{len, 784});
    }
    gather(te, identity, first, tstaging, xt, yt);
    tape.reset();
    auto guard = tape.no_grad();
    const auto logits = net(tape.borrow(xt)).value();
    for (index_t i = 0; i < len; ++i) {
      index_t best = 0;
      for (index_t j = 1; j < 10; ++j) {
        if (static_cast<double>(logits(i, j)) > static_cast<double>(logits(i, best))) best = j;
      }
      correct += best == yt[static_cast<std::size_t>(i)];
    }
  }
  r.test_accuracy = static_cast<double>(correct) / static_cast<double>(m);
  return r;
}

/// What one run needs: which model, under which policy (the name in all_policies), the data,
/// the settings and the epochs.
struct request {
  const std::string& model;
  const std::string& policy;
  const data::labelled_images& tr;
  const data::labelled_images& te;
  const settings& st;
  const cluster& cl;
  int epochs;
};

/// The run of q.model (a Model) under the policy P, with the loss scaler Scaler and the master
/// weights' update rounding `how`.
template <template <class> class Model, class P, class Scaler = optim::NoLossScaler>
result train_run(const request& q, optim::update_rounding how = optim::update_rounding::nearest) {
  return train<Model, P>(q.model, q.policy, q.tr, q.te, q.st, q.cl, Scaler{}, how, q.epochs);
}

// The runs, in translation units of their own (the file named) that a 2-core build compiles side
// by side, split by policy: what a policy needs (its ops, GEMMs and optimizer) is compiled once
// for all the models that train under it. The first two hold the default plan (`make demo`); the
// CNN and the ViT under the other policies are compiled into train_fashion_mnist_full only (`make
// demo-full`): they would make the default build half as long again, for runs it does not make.

/// Whether the default plan's runs under `policy` are run_fp32_fp16's (else run_bf16_fp8's).
inline bool stores_fp32_or_fp16(const std::string& policy) {
  return policy == "32-true" || policy == "64-true" || policy == "16-mixed" || policy == "16-true";
}
/// runs_fp32_fp16.cpp: every model under 32-true and 16-mixed, the MLP under 64-true and 16-true.
result run_fp32_fp16(const request& q);
/// runs_bf16_fp8.cpp: every model under bf16-mixed, the MLP under fp8-mixed, fp8-mixed/unscaled,
/// bf16-true and bf16-true+sr.
result run_bf16_fp8(const request& q);
/// cnn_vit_more.cpp: the CNN and the ViT under the other policies, where the program has them
/// (that file sets this pointer while the program starts); null in train_fashion_mnist.
inline result (*run_cnn_vit_more)(const request& q) = nullptr;

/// The policies --device cuda trains the MLP under: every CPU policy, fp8's casts and scales on
/// the device, the emulated 16-bit "-true" ones accumulating in fp16 / bf16 as on the CPU. The
/// CNN and the ViT train under conv_default_policies by default, as on the CPU, and under
/// device_conv_policies with --policies.
inline const std::vector<std::string> device_policies = {"32-true",   "64-true",      "bf16-mixed", "16-mixed", "fp8-mixed", "fp8-mixed/unscaled",
                                                         "bf16-true", "bf16-true+sr", "16-true"};
inline const std::vector<std::string> device_conv_policies = {"32-true",   "bf16-mixed",   "16-mixed", "fp8-mixed", "fp8-mixed/unscaled",
                                                              "bf16-true", "bf16-true+sr", "16-true"};
/// device_runs.cu, built with CUDA: a run on the GPU (--device cuda; the CNN and the ViT in
/// device_cnn_vit.cu), and the GPU's name ("" when there is none); both null in a build without
/// CUDA (the file sets them while the program starts).
inline result (*run_on_device)(const request& q) = nullptr;
inline std::string (*cuda_device_name)() = nullptr;

}  // namespace fashion_mnist
