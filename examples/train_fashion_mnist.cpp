// The main demo: an MLP (784-256-128-10, ReLU), a small CNN and a small vision transformer,
// each trained on Fashion-MNIST (cross-entropy, SGD with momentum) under the named precision
// policies, side by side. `make demo` runs the default plan, `make demo-full` the full one.
//
//   train_fashion_mnist [--data DIR] [--models M] [--epochs N] [--batch B] [--lr X] [--policies LIST]
//                       [--full] [--threads T] [--seed S] [--out DIR] [--distributed [--compress-bf16]]
//
// Default plan: the MLP under every policy for 6 epochs, the CNN and the ViT under 32-true,
// bf16-mixed and 16-mixed for 5 epochs each (the emulated 16-bit '-true' arithmetic costs 3-6x
// per epoch), the CNN also under fp8-mixed. --full: every model under every policy, the MLP for 12, the CNN for 8 and the ViT
// for 15 epochs. --policies and --epochs override either.
//
// --distributed (builds with MPI): run under `mpirun -np N`; each rank takes B / N rows of every
// global batch of B, gradients are averaged over the ranks (precis::dist::DataParallel), and
// rank 0 evaluates, prints and writes the results. The gradient columns then describe rank
// 0's own shard, before the average. --compress-bf16 sends the gradients as bf16 with error
// feedback (DataParallel::options::compress_bf16).
//
// LIST is comma-separated from: 32-true 64-true bf16-mixed 16-mixed fp8-mixed fp8-mixed/unscaled
// bf16-true bf16-true+sr 16-true (default: all, in that order). fp8-mixed/unscaled is
// fp8_mixed_with<fp8::no_scaling>: the same fp8 casts with every scale 1. Prints one Markdown table and writes DIR/results.json
// (the table, the loss curves and the gradient-exponent histograms) and DIR/results.csv;
// bench/demo_report.py turns the JSON into docs/demo.md and its plots.
//
// What each column measures:
//   test accuracy       on the 10000 test images, after the last epoch
//   final train loss    mean cross-entropy over the last epoch's steps (as the policy computed it)
//   s / epoch           wall-clock seconds per epoch, training only
//   memory              the tape's peak (activations, gradients, scratch) + parameters and their
//                       gradients + the optimizer's masters and state, in MiB
//   skipped, scale      steps the loss scaler skipped, and its final scale
//   fp8 saturated, flushed  fp8 policies: the fraction of the elements of every fp8 cast in
//                       training (GEMM operands and output gradients) that saturated, and that
//                       were nonzero and became zero
//   fp16-flushed grads  the fraction of weight-gradient values, unscaled, that are nonzero but
//                       round to zero in fp16: what fp16 without loss scaling would lose. Under
//                       16-true the gradients already are fp16 and unscaled, so there it is the
//                       fraction that are zero although the same step recomputed in fp32 (same
//                       weights, same batch) gives a nonzero value: what it did lose.
//   zero grads          the fraction of weight-gradient values that are exactly zero
// Both gradient columns are sampled every 20 steps over the whole run.
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

using namespace precis;
namespace pol = precis::policy;

namespace {

const std::vector<std::string> all_policies = {"32-true",   "64-true",     "bf16-mixed",   "16-mixed", "fp8-mixed",
                                               "fp8-mixed/unscaled", "bf16-true", "bf16-true+sr", "16-true"};
const std::vector<std::string> all_models = {"mlp", "cnn", "vit"};

// ---- the three models; each maps a batch of flattened images [B, 784] to logits [B, 10] ----------

/// MLP 784-256-128-10 with ReLU.
template <class P>
struct Mlp : nn::MLP<P> {
  static constexpr const char* description = "MLP 784-256-128-10 (ReLU)";
  explicit Mlp(std::uint64_t seed) : nn::MLP<P>({784, 256, 128, 10}, nn::activation::relu, seed) {}
};

/// Two blocks of 3x3 convolution (padding 1), ReLU and 2x2 max pooling (1 -> 16 -> 32 channels,
/// 28x28 -> 14x14 -> 7x7), then a linear head on the 1568 features.
template <class P>
struct Cnn : nn::Module<P> {
  static constexpr const char* description = "CNN conv3x3(16)-relu-maxpool-conv3x3(32)-relu-maxpool-linear(10)";
  explicit Cnn(std::uint64_t seed) {
    const conv2d_options same{{1, 1}, {1, 1}, {1, 1}, 1};
    conv1_ = &this->register_module("conv1", std::make_unique<nn::Conv2d<P>>(1, 16, std::array<index_t, 2>{3, 3}, same, seed));
    conv2_ = &this->register_module("conv2", std::make_unique<nn::Conv2d<P>>(16, 32, std::array<index_t, 2>{3, 3}, same, seed + 1));
    head_ = &this->register_module("head", std::make_unique<nn::Linear<P>>(32 * 7 * 7, 10, seed + 2));
  }
  template <class S>
  auto operator()(const Var<P, S>& x) {
    const index_t b = x.shape()[0];
    const auto h1 = max_pool2d(relu((*conv1_)(reshape(x, Shape{b, 1, 28, 28}))));
    const auto h2 = max_pool2d(relu((*conv2_)(h1)));
    return (*head_)(reshape(h2, Shape{b, 32 * 7 * 7}));
  }

 private:
  nn::Conv2d<P>* conv1_;
  nn::Conv2d<P>* conv2_;
  nn::Linear<P>* head_;
};

/// A small vision transformer: 7x7 patches (a stride-7 convolution) -> 16 tokens of width 64,
/// plus a learned position embedding; 2 pre-LN blocks of 4 heads with a GELU MLP of width 128;
/// a final layer norm, the mean over tokens, and a linear head.
template <class P>
struct Vit : nn::Module<P> {
  static constexpr const char* description = "ViT 7x7 patches, 16 tokens, width 64, 2 pre-LN blocks, 4 heads, MLP 128";
  explicit Vit(std::uint64_t seed) {
    patch_ = &this->register_module("patch", std::make_unique<nn::Conv2d<P>>(1, 64, std::array<index_t, 2>{7, 7},
                                                                            conv2d_options{{7, 7}, {0, 0}, {1, 1}, 1}, seed));
    pos_ = &this->register_parameter("position", Shape{16, 64});
    fill_uniform(pos_->value.view(), -0.02, 0.02, seed + 1);
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
  double lr = 0.05;
  int threads = 0;
  std::uint64_t seed = 1;
  std::vector<std::string> policies;  // empty: each model's default
  bool distributed = false, compress_bf16 = false;
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
  progress(std::string name, int epochs, bool quiet)
      : name_(std::move(name)), epochs_(epochs), tty_(::isatty(STDERR_FILENO) != 0), quiet_(quiet) {}
  void update(int epoch, double fraction, double loss) {
    if (!tty_ || quiet_) return;
    const int width = 30, filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r%-13s epoch %d/%d [%s%s] %3d%%  loss %.4f ", name_.c_str(), epoch + 1, epochs_,
                 std::string(static_cast<std::size_t>(filled), '#').c_str(), std::string(static_cast<std::size_t>(width - filled), '.').c_str(),
                 static_cast<int>(fraction * 100), loss);
    std::fflush(stderr);
  }
  void epoch_done(int epoch, double loss, double seconds) {
    if (quiet_) return;
    if (tty_) std::fprintf(stderr, "\r%-13s epoch %d/%d  loss %.4f  %.1f s%40s\n", name_.c_str(), epoch + 1, epochs_, loss, seconds, "");
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

/// Adds the weight gradients (divided by the loss scale) to the histogram and counters. Without
/// `ref`, a value counts as flushed when it is nonzero and rounds to zero in fp16; with `ref`
/// (the same step's weight gradients recomputed in fp32), when it is zero and ref's is not.
template <class P>
void sample_gradients(nn::Module<P>& net, double scale, result& r, const std::vector<float>* ref) {
  const double inv = 1.0 / scale;
  std::size_t k = 0;
  net.for_each_parameter([&](auto& p) {
    if (p.name.find("weight") == std::string::npos) return;
    for (const auto& gs : p.grad) {
      const double g = static_cast<double>(static_cast<float>(gs)) * inv;
      ++r.sampled;
      if (ref) r.flushed += g == 0 && (*ref)[k] != 0;
      ++k;
      if (g == 0) {
        ++r.zeros;
        continue;
      }
      if (!ref && static_cast<float>(round_to<half>(g)) == 0.0f) ++r.flushed;
      const int e = std::clamp(static_cast<int>(std::floor(std::log2(std::abs(g)))), hist_lo, hist_hi);
      ++r.hist[static_cast<std::size_t>(e - hist_lo)];
    }
  });
}

/// The weight gradients of `net`'s current weights on batch (x, y), computed in fp32: for a
/// policy whose gradients are fp16 without scaling, what its own gradients would have been.
template <class P, class Shadow, class S>
std::vector<float> fp32_weight_gradients(nn::Module<P>& net, Shadow& shadow, const Tensor<S>& x,
                                         const std::vector<std::int64_t>& y) {
  using F = pol::named<"32-true">;
  std::vector<nn::Parameter<float, float>*> dst;
  shadow.for_each_parameter([&](auto& p) { dst.push_back(&p); });
  std::size_t i = 0;
  net.for_each_parameter([&](auto& p) {
    auto& d = *dst[i++];
    for (index_t j = 0; j < p.value.size(); ++j) d.value.data()[j] = static_cast<float>(p.value.data()[j]);
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

template <template <class> class Model, class P, class Scaler>
result train(const std::string& name, const data::labelled_images& tr, const data::labelled_images& te, const settings& st,
             const cluster& cl, Scaler scaler, optim::update_rounding how, int epochs) {
  using S = typename P::param_type;
  result r;
  r.policy = name;
  r.hist.assign(hist_hi - hist_lo + 1, 0);
  Model<P> net(st.seed);
  typename optim::MixedPrecisionOptimizer<P, optim::SGD, Scaler>::options o;
  o.rounding = how;
  o.seed = st.seed;
  optim::MixedPrecisionOptimizer<P, optim::SGD, Scaler> opt(net, optim::SGD{.lr = st.lr, .momentum = 0.9}, scaler, o);
#if PRECIS_HAS_MPI
  std::optional<dist::DataParallel<P, optim::SGD, Scaler>> dp;
  if (cl.comm) {
    typename dist::DataParallel<P, optim::SGD, Scaler>::options dpo;
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
      std::is_same_v<typename P::grad_type, half> && std::is_same_v<Scaler, optim::NoLossScaler>;
  Model<pol::named<"32-true">> shadow(st.seed);
  progress bar(name, epochs, cl.rank != 0);
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
      opt.rule().lr = st.lr * 0.5 * (1 + std::cos(3.141592653589793 * static_cast<double>(r.steps) / static_cast<double>(total_steps)));
      if (r.steps % 20 == 0 && cl.rank == 0) {
        if constexpr (measure_against_fp32) {
          const auto ref = fp32_weight_gradients(net, shadow, xb, yb);
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
  r.memory_mib = static_cast<double>(tape.arena().peak_bytes() + tape.scratch_arena().peak_bytes() + model_bytes + opt.state_bytes()) /
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

template <template <class> class Model>
result run_model(const std::string& name, const data::labelled_images& tr, const data::labelled_images& te, const settings& st,
                 const cluster& cl, int epochs) {
  using optim::update_rounding;
  using optim::NoLossScaler;
  if (name == "32-true") return train<Model, pol::named<"32-true">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
  if (name == "64-true") return train<Model, pol::named<"64-true">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
  if (name == "bf16-mixed") return train<Model, pol::named<"bf16-mixed">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
  if (name == "16-mixed") return train<Model, pol::named<"16-mixed">>(name, tr, te, st, cl, optim::DynamicLossScaler{}, update_rounding::nearest, epochs);
  if (name == "fp8-mixed") return train<Model, pol::named<"fp8-mixed">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
  if (name == "fp8-mixed/unscaled") {
    return train<Model, pol::fp8_mixed_with<fp8::no_scaling>>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
  }
  if (name == "bf16-true") return train<Model, pol::named<"bf16-true">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
  if (name == "bf16-true+sr") return train<Model, pol::named<"bf16-true">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::stochastic, epochs);
  return train<Model, pol::named<"16-true">>(name, tr, te, st, cl, NoLossScaler{}, update_rounding::nearest, epochs);
}

/// The policies and epochs a model runs with: --policies and --epochs when given; otherwise
/// the MLP runs every policy for 6 epochs, and the CNN and the ViT, whose emulated 16-bit
/// '-true' arithmetic costs 3-6x per epoch (docs/demo.md), run 32-true, bf16-mixed and
/// 16-mixed for 5 epochs, the CNN also fp8-mixed (--full: every policy, more epochs).
struct plan {
  std::vector<std::string> policies;
  int epochs;
};
plan plan_for(const std::string& model, const settings& st) {
  plan p;
  if (model == "mlp") p = {all_policies, st.full ? 12 : 6};
  else if (model == "cnn") p = {{"32-true", "bf16-mixed", "16-mixed", "fp8-mixed"}, st.full ? 8 : 5};
  else p = {{"32-true", "bf16-mixed", "16-mixed"}, st.full ? 15 : 5};
  if (st.full) p.policies = all_policies;
  if (!st.policies.empty()) p.policies = st.policies;
  if (st.epochs > 0) p.epochs = st.epochs;
  return p;
}

const char* description(const std::string& model) {
  if (model == "mlp") return Mlp<pol::named<"32-true">>::description;
  if (model == "cnn") return Cnn<pol::named<"32-true">>::description;
  return Vit<pol::named<"32-true">>::description;
}

result run(const std::string& model, const std::string& name, const data::labelled_images& tr, const data::labelled_images& te,
           const settings& st, const cluster& cl, int epochs) {
  result r = model == "mlp"   ? run_model<Mlp>(name, tr, te, st, cl, epochs)
             : model == "cnn" ? run_model<Cnn>(name, tr, te, st, cl, epochs)
                              : run_model<Vit>(name, tr, te, st, cl, epochs);
  r.model = model;
  return r;
}

[[noreturn]] void usage(const std::string& why) {
  const bool help = why == "help";  // asked for: the text on stdout, exit 0
  std::fprintf(help ? stdout : stderr,
               "train_fashion_mnist: %s\n"
               "usage: train_fashion_mnist [--data DIR] [--models M] [--epochs N] [--batch B] [--lr X] [--policies LIST]\n"
               "                           [--full] [--threads T] [--seed S] [--out DIR] [--distributed [--compress-bf16]]\n"
               "  M: comma-separated from mlp,cnn,vit (default: all three)\n"
               "  LIST: comma-separated from 32-true,64-true,bf16-mixed,16-mixed,fp8-mixed,fp8-mixed/unscaled,bf16-true,\n"
               "  bf16-true+sr,16-true\n"
               "  default: the MLP under every policy for 6 epochs; the CNN (5 epochs) and the ViT (5 epochs) under\n"
               "  32-true, bf16-mixed and 16-mixed, the CNN also fp8-mixed; --full runs every model under every policy,\n"
               "  the MLP for 12, the CNN for 8 and the ViT for 15 epochs\n",
               help ? "train every model under every precision policy on Fashion-MNIST" : why.c_str());
  std::exit(help ? 0 : 2);
}

double number(const std::string& flag, const std::string& v, double lo, double hi, bool integer) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi) || (integer && x != std::floor(x))) {
    std::ostringstream s;
    s << flag << " " << v << ": expected " << (integer ? "an integer" : "a number") << " in [" << lo << ", " << hi << "]";
    usage(s.str());
  }
  return x;
}

settings parse(int argc, char** argv) {
  settings st;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("help");
    if (flag == "--distributed") {
      st.distributed = true;
      continue;
    }
    if (flag == "--compress-bf16") {
      st.compress_bf16 = true;
      continue;
    }
    if (flag == "--full") {
      st.full = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--data") st.data = v;
    else if (flag == "--out") st.out = v;
    else if (flag == "--epochs") st.epochs = static_cast<int>(number(flag, v, 1, 1000, true));
    else if (flag == "--batch") st.batch = static_cast<index_t>(number(flag, v, 1, 60000, true));
    else if (flag == "--lr") st.lr = number(flag, v, 1e-8, 10, false);
    else if (flag == "--threads") st.threads = static_cast<int>(number(flag, v, 1, 1024, true));
    else if (flag == "--seed") st.seed = static_cast<std::uint64_t>(number(flag, v, 0, 9007199254740992.0, true));
    else if (flag == "--policies") {
      st.policies.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');) {
        if (std::find(all_policies.begin(), all_policies.end(), p) == all_policies.end()) usage("unknown policy \"" + p + "\"");
        st.policies.push_back(p);
      }
      if (st.policies.empty()) usage("--policies is empty");
    } else if (flag == "--models") {
      st.models.clear();
      std::stringstream ss(v);
      for (std::string m; std::getline(ss, m, ',');) {
        if (std::find(all_models.begin(), all_models.end(), m) == all_models.end()) usage("unknown model \"" + m + "\"");
        st.models.push_back(m);
      }
      if (st.models.empty()) usage("--models is empty");
    } else {
      usage("unknown flag " + flag);
    }
  }
  return st;
}

std::string json_string(const std::string& s) { return "\"" + s + "\""; }

/// A number for the JSON file: a non-finite one (a diverged run) is null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

/// Creates --out and checks a file can be written there: before training, so a bad directory
/// costs nothing. Exits 2 naming the flag.
void check_out_dir(const std::string& out) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  const std::string probe = out + "/.train_fashion_mnist_write_test";
  if (!ec) {
    std::ofstream f(probe);
    if (!f) ec = std::make_error_code(std::errc::permission_denied);
  }
  if (ec) usage("--out " + out + ": cannot create or write files there (" + ec.message() + ")");
  std::filesystem::remove(probe, ec);
}

void write_outputs(const settings& st, int ranks, const std::vector<result>& rows) {
  std::error_code ec;
  std::filesystem::create_directories(st.out, ec);
  if (ec) throw precis::error("train_fashion_mnist: cannot create " + st.out + " (" + ec.message() + ")");
  const std::string json_path = st.out + "/results.json", csv_path = st.out + "/results.csv";
  std::ofstream j(json_path), c(csv_path);
  if (!j || !c) throw precis::error("train_fashion_mnist: cannot write " + json_path + " or " + csv_path);
  j.precision(9);
  j << "{\n  \"settings\": {\"ranks\": " << ranks << ", \"batch\": " << st.batch << ", \"lr\": " << st.lr
    << ", \"momentum\": 0.9, \"compress_bf16\": " << (st.compress_bf16 ? "true" : "false") << ", \"seed\": " << st.seed << ", \"threads\": " << st.threads << "},\n  \"models\": {";
  for (std::size_t k = 0; k < st.models.size(); ++k) {
    j << (k ? ", " : "") << json_string(st.models[k]) << ": " << json_string(description(st.models[k]));
  }
  j << "},\n"
    << "  \"histogram_binades\": [" << hist_lo << ", " << hist_hi << "],\n  \"results\": [\n";
  c << "model,policy,epochs,test_accuracy,final_train_loss,seconds_per_epoch,memory_mib,skipped_steps,final_loss_scale,fp16_flushed_grads,zero_grads,"
       "fp8_saturated,fp8_flushed\n";
  const auto fp8_json = [](double v) {
    if (v < 0) return std::string("null");
    std::ostringstream o;
    o.precision(9);
    o << v;
    return o.str();
  };
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const result& r = rows[k];
    j << "    {\"model\": " << json_string(r.model) << ", \"policy\": " << json_string(r.policy) << ", \"epochs\": " << r.epochs
      << ", \"test_accuracy\": " << json_number(r.test_accuracy) << ", \"final_train_loss\": " << json_number(r.final_loss)
      << ", \"seconds_per_epoch\": " << r.seconds_per_epoch << ", \"memory_mib\": " << r.memory_mib << ", \"skipped_steps\": " << r.skipped
      << ", \"final_loss_scale\": " << r.scale << ", \"fp16_flushed_grads\": " << r.flushed << ", \"zero_grads\": " << r.zeros
      << ", \"fp8_saturated\": " << fp8_json(r.fp8_saturated) << ", \"fp8_flushed\": " << fp8_json(r.fp8_flushed)
      << ", \"steps\": " << r.steps << ", \"gradient_values_sampled\": " << r.sampled << ",\n     \"curve\": [";
    for (std::size_t i = 0; i < r.curve.size(); ++i) j << (i ? ", " : "") << json_number(r.curve[i]);
    j << "],\n     \"histogram\": [";
    for (std::size_t i = 0; i < r.hist.size(); ++i) j << (i ? ", " : "") << r.hist[i];
    j << "]}" << (k + 1 < rows.size() ? "," : "") << "\n";
    c << r.model << "," << r.policy << "," << r.epochs << "," << r.test_accuracy << "," << (std::isfinite(r.final_loss) ? json_number(r.final_loss) : "") << "," << r.seconds_per_epoch << "," << r.memory_mib << "," << r.skipped << ","
      << r.scale << "," << r.flushed << "," << r.zeros << "," << (r.fp8_saturated < 0 ? "" : fp8_json(r.fp8_saturated)) << ","
      << (r.fp8_flushed < 0 ? "" : fp8_json(r.fp8_flushed)) << "\n";
  }
  j << "  ]\n}\n";
  if (!j || !c) throw precis::error("train_fashion_mnist: writing " + json_path + " or " + csv_path + " failed");
  std::printf("\nwrote %s and %s\n", json_path.c_str(), csv_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const settings st = parse(argc, argv);
  cluster cl;
#if PRECIS_HAS_MPI
  std::optional<dist::environment> env;
  std::optional<dist::communicator> comm;
  if (st.distributed) {
    env.emplace(argc, argv);
    comm.emplace();
    cl = {comm->rank(), comm->size(), &*comm};
  }
#else
  if (st.distributed) usage("--distributed: this build has no MPI (install libopenmpi-dev and openmpi-bin, then rebuild)");
#endif
  if (st.compress_bf16 && !st.distributed) usage("--compress-bf16 applies to --distributed runs");
  if (st.batch % cl.size != 0) {
    usage("--batch " + std::to_string(st.batch) + " over " + std::to_string(cl.size) + " ranks: expected a multiple of the rank count");
  }
#if defined(_OPENMP)
  if (st.threads > 0) omp_set_num_threads(st.threads);
#endif
  if (cl.rank == 0) check_out_dir(st.out);
  try {
    const auto tr = data::read_fashion_mnist(st.data, true);  // 28 x 28 images, or a data_error
    const auto te = data::read_fashion_mnist(st.data, false);
    if (tr.images.shape()[0] < st.batch) {
      throw data::data_error(st.data + "/train-images-idx3-ubyte.gz has " + std::to_string(tr.images.shape()[0]) +
                             " training images; expected at least one batch of " + std::to_string(st.batch) + " (--batch)");
    }
    if (te.images.shape()[0] == 0) {
      throw data::data_error(st.data + "/t10k-images-idx3-ubyte.gz has no test images; expected at least one");
    }
    if (cl.rank == 0) {
      std::printf("Fashion-MNIST: %lld training / %lld test images; cross-entropy, SGD (lr %g, momentum 0.9, cosine decay),\n"
                  "batch %lld, seed %llu",
                  static_cast<long long>(tr.images.shape()[0]), static_cast<long long>(te.images.shape()[0]), st.lr,
                  static_cast<long long>(st.batch), static_cast<unsigned long long>(st.seed));
      if (cl.size > 1) std::printf(", %d ranks of %lld rows each", cl.size, static_cast<long long>(st.batch / cl.size));
      std::printf(".\n");
      for (const auto& m : st.models) {
        const plan pl = plan_for(m, st);
        std::string ps;
        for (const auto& p : pl.policies) ps += (ps.empty() ? "" : ", ") + p;
        std::printf("  %s: %s; %d epochs under %s\n", m.c_str(), description(m), pl.epochs, ps.c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    std::vector<result> rows;
    for (const auto& m : st.models) {
      const plan pl = plan_for(m, st);
      for (const auto& p : pl.policies) rows.push_back(run(m, p, tr, te, st, cl, pl.epochs));
    }
    if (cl.rank != 0) return 0;
    for (const auto& m : st.models) {
      std::printf("\n%s (%s)\n\n", m.c_str(), description(m));
      std::printf("| policy | epochs | test accuracy | final train loss | s / epoch | memory (MiB) | skipped steps | final loss scale | fp16-flushed grads | zero grads | fp8 saturated | fp8 flushed |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
      for (const auto& r : rows) {
        if (r.model != m) continue;
        const auto frac = [](double v) {
          char b[32];
          if (v < 0) return std::string("–");
          std::snprintf(b, sizeof b, "%.2e", v);
          return std::string(b);
        };
        char loss[32];
        if (std::isfinite(r.final_loss)) std::snprintf(loss, sizeof loss, "%.4f", r.final_loss);
        else std::snprintf(loss, sizeof loss, "diverged");
        std::printf("| %s | %d | %.4f | %s | %.1f | %.1f | %lld | %g | %.2e | %.4f | %s | %s |\n", r.policy.c_str(), r.epochs, r.test_accuracy,
                    loss, r.seconds_per_epoch, r.memory_mib, static_cast<long long>(r.skipped), r.scale, r.flushed, r.zeros,
                    frac(r.fp8_saturated).c_str(), frac(r.fp8_flushed).c_str());
      }
    }
    write_outputs(st, cl.size, rows);
  } catch (const data::data_error& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n(the Debian package dataset-fashion-mnist installs the files in "
                         "/usr/share/datasets/fashion-mnist; --data DIR reads them from elsewhere)\n", e.what());
    return 1;
  } catch (const precis::error& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
#if PRECIS_HAS_MPI
    if (cl.comm) cl.comm->abort(1);  // the other ranks would wait for this one
#endif
    return 1;
  }
}
