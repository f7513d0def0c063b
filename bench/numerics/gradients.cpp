// Numerics case 8: the demo network's real weight gradients cast to fp16, with and without a
// loss scale, against Micikevicius et al., "Mixed Precision Training" (ICLR 2018), Sec. 3.1:
// about 5% of the weight-gradient values of their speech model had exponents below -24, i.e.
// magnitudes below fp16's smallest subnormal 2^-24.
//
// The run: the demo's MLP 784-256-128-10 (ReLU, seed 1) under the fp32 policy "32-true",
// trained on Fashion-MNIST as the demo trains it (cross-entropy, SGD with momentum 0.9, lr 0.05
// with cosine decay, batch 128, the demo's shuffling) for the demo's 6 epochs (2808 steps, a few
// seconds): the same steps as the demo's 32-true MLP run. At each checkpoint step the fp32 weight
// gradients (no loss scale) are taken after backward, before the update, and each value is
// classified after multiplying it by 2^0, 2^8 or 2^16 and rounding to nearest into fp16 (and
// into bf16 at 2^0). Counters: fractions of the nonzero values. BM_gradients_sampled pools every
// 20th step of the run, the steps the demo's "fp16-flushed grads" column samples.
//
// Fashion-MNIST is read from /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist,
// the demo's default) or from --data DIR. Without it every benchmark is skipped with a message
// and the program exits 0; no data is made up.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <precis/analysis/all.hpp>
#include <precis/data/idx.hpp>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <string>
#include <vector>

namespace {

namespace an = precis::analysis;
using P = precis::policy::named<"32-true">;
using Optimizer =
    precis::optim::MixedPrecisionOptimizer<P, precis::optim::SGD, precis::optim::NoLossScaler>;
using precis::index_t;

// the demo's MLP settings
constexpr std::uint64_t seed = 1;
constexpr index_t batch = 128;
constexpr double lr = 0.05, momentum = 0.9;
constexpr int demo_epochs = 6;           // the length of the cosine schedule: the demo's MLP run
constexpr index_t train_images = 60000;  // Fashion-MNIST's training set
constexpr long run_steps = train_images / batch * demo_epochs;
// the steps whose gradients are reported (1-based): the first, ..., the demo run's last
constexpr long checkpoint_steps[] = {1, 10, 100, 1000, run_steps};
constexpr int hist_lo = -50, hist_hi = 5;  // binades of the exponent histogram

std::string data_dir = "/usr/share/datasets/fashion-mnist";

/// The weight gradients of one step (all of them, layer after layer, and each layer's), and
/// the step's loss.
struct snapshot {
  double loss = 0;
  precis::Tensor<float> all;
  std::vector<precis::Tensor<float>> layers;
};

/// Counts pooled over the steps the demo samples (every 20th, from the first).
struct pooled {
  long samples = 0;
  std::uint64_t values = 0, zero = 0, below_m24 = 0, flushed_s0 = 0, flushed_s8 = 0,
                flushed_s16 = 0;
};

/// The number of nonzero values of x with exponent below -24 (|x| < 2^-24).
template <class X>
std::uint64_t count_below_m24(const X& x) {
  const an::exponent_histogram h = an::histogram_of_exponents(x, -24, hist_hi);
  return h.below;
}

/// The demo's 32-true MLP run, advanced step by step.
class demo_run {
 public:
  explicit demo_run(precis::data::labelled_images train)
      : tr_(std::move(train)),
        net_({784, 256, 128, 10}, precis::nn::activation::relu, seed),
        opt_(net_, precis::optim::SGD{.lr = lr, .momentum = momentum},
             precis::optim::NoLossScaler{}, optimizer_options()),
        xb_(precis::Shape{batch, 784}),
        yb_(static_cast<std::size_t>(batch)),
        order_(static_cast<std::size_t>(tr_.images.shape()[0])),
        gen_(seed),
        steps_per_epoch_(tr_.images.shape()[0] / batch) {
    std::iota(order_.begin(), order_.end(), index_t{0});
  }

  /// The demo's run length: 6 epochs.
  long total_steps() const { return run_steps; }

  /// The gradients of step `step` (1-based; checkpoint steps only), taken after backward and
  /// before the update; trains up to there if needed.
  const snapshot& at(long step) {
    advance_to(step);
    return checkpoints_.at(step);
  }

  /// The counts pooled over the demo's sampled steps up to `step`; trains up to there if needed.
  const pooled& sampled_up_to(long step) {
    advance_to(step);
    return pooled_;
  }

  void keep(long step) { checkpoints_.emplace(step, snapshot{}); }

 private:
  static Optimizer::options optimizer_options() {
    Optimizer::options o;
    o.rounding = precis::optim::update_rounding::nearest;
    o.seed = seed;
    return o;
  }

  void advance_to(long step) {
    if (step > total_steps()) {
      throw precis::invalid_argument("numerics_gradients: step " + std::to_string(step) +
                                     "; the demo's run has " + std::to_string(total_steps()));
    }
    while (done_ < step) train_step();
  }

  void train_step() {
    const index_t s = done_ % steps_per_epoch_;
    if (s == 0) {  // a fresh permutation every epoch, drawn as the demo draws it
      for (std::size_t i = order_.size() - 1; i > 0; --i)
        std::swap(order_[i], order_[gen_() % (i + 1)]);
    }
    const index_t cols = xb_.shape()[1];
    for (index_t i = 0; i < batch; ++i) {
      const index_t src = order_[static_cast<std::size_t>(s * batch + i)];
      std::memcpy(xb_.data() + i * cols, tr_.images.data() + src * cols,
                  static_cast<std::size_t>(cols) * sizeof(float));
      yb_[static_cast<std::size_t>(i)] = tr_.labels[static_cast<std::size_t>(src)];
    }
    tape_.reset();
    opt_.zero_grad();
    auto loss = cross_entropy(net_(tape_.borrow(xb_)), yb_);
    opt_.backward(tape_, loss);
    // cosine decay from lr to 0 over the demo's run
    opt_.rule().lr = lr * 0.5 *
                     (1 + std::cos(3.141592653589793 * static_cast<double>(done_) /
                                   static_cast<double>(total_steps())));
    const auto kept = checkpoints_.find(done_ + 1);
    if (kept != checkpoints_.end() || done_ % 20 == 0) {
      snapshot snap;
      snap.loss = loss.item();
      std::vector<float> all;
      net_.for_each_parameter([&](auto& p) {
        if (p.name.find("weight") == std::string::npos) return;
        precis::Tensor<float> g(precis::Shape{p.grad.size()});
        std::copy(p.grad.begin(), p.grad.end(), g.data());
        all.insert(all.end(), p.grad.begin(), p.grad.end());
        snap.layers.push_back(std::move(g));
      });
      snap.all = precis::Tensor<float>(precis::Shape{static_cast<index_t>(all.size())});
      std::copy(all.begin(), all.end(), snap.all.data());
      if (done_ % 20 == 0) pool(snap.all);
      if (kept != checkpoints_.end()) kept->second = std::move(snap);
    }
    opt_.step();
    ++done_;
  }

  void pool(const precis::Tensor<float>& g) {
    const an::cast_statistics s0 = an::cast_statistics_of<precis::half>(g);
    ++pooled_.samples;
    pooled_.values += s0.total;
    pooled_.zero += s0.zero;
    pooled_.below_m24 += count_below_m24(g);
    pooled_.flushed_s0 += s0.flushed;
    pooled_.flushed_s8 += an::cast_statistics_of<precis::half>(g, std::exp2(8)).flushed;
    pooled_.flushed_s16 += an::cast_statistics_of<precis::half>(g, std::exp2(16)).flushed;
  }

  precis::data::labelled_images tr_;
  precis::nn::MLP<P> net_;
  Optimizer opt_;
  precis::Tape<P> tape_;
  precis::Tensor<float> xb_;
  std::vector<std::int64_t> yb_;
  std::vector<index_t> order_;
  precis::xoshiro256pp gen_;
  index_t steps_per_epoch_;
  long done_ = 0;
  std::map<long, snapshot> checkpoints_;
  pooled pooled_;
};

/// The run, or why there is none (Fashion-MNIST missing or unreadable).
struct loaded {
  std::unique_ptr<demo_run> run;
  std::string why;
};

loaded& the_run() {
  static loaded l = [] {
    loaded r;
    try {
      auto train = precis::data::read_fashion_mnist(data_dir, true);
      if (train.images.shape()[0] != train_images || train.images.shape()[1] != 784) {
        r.why = "skipped: " + data_dir + " holds " + std::to_string(train.images.shape()[0]) +
                " training images of " + std::to_string(train.images.shape()[1]) +
                " pixels; expected Fashion-MNIST's 60000 of 784";
        return r;
      }
      r.run = std::make_unique<demo_run>(std::move(train));
      for (long s : checkpoint_steps) r.run->keep(s);
    } catch (const precis::data::data_error& e) {
      r.why = "skipped: Fashion-MNIST not found at " + data_dir +
              " (Debian: apt-get install dataset-fashion-mnist; or --data DIR): " + e.what();
    }
    return r;
  }();
  return l;
}

/// What rounding to nearest (ties to even) into F does to |x| s, predicted from F's thresholds
/// alone: zero at or below half the smallest subnormal; subnormal below the smallest normal
/// less half the subnormal spacing; infinite at or above the largest finite value plus half its
/// ulp (65520 for fp16).
struct predicted {
  std::uint64_t flushed = 0, subnormal = 0, overflowed = 0;
};

template <class F>
predicted predict(const precis::Tensor<float>& x, double scale) {
  using T = precis::format_traits<F>;
  const double flush = T::min_subnormal() / 2, normal = T::min_normal() - T::min_subnormal() / 2,
               over = T::max_finite() + std::exp2(T::emax - T::digits);
  predicted p;
  for (index_t i = 0; i < x.size(); ++i) {
    const double a =
        std::abs(static_cast<double>(x.data()[i])) * scale;  // exact: scale is a power of two
    if (a == 0 || !std::isfinite(a)) continue;
    if (a <= flush)
      ++p.flushed;
    else if (a < normal)
      ++p.subnormal;
    else if (a >= over)
      ++p.overflowed;
  }
  return p;
}

/// Fraction of the nonzero values.
double of_nonzero(std::uint64_t part, const an::cast_statistics& s) {
  const std::uint64_t nonzero = s.total - s.zero - s.nonfinite;
  return nonzero ? static_cast<double>(part) / static_cast<double>(nonzero) : 0.0;
}

void BM_gradients(benchmark::State& state) {
  loaded& l = the_run();
  if (!l.run) {
    state.SkipWithError(l.why.c_str());
    return;
  }
  const long step = static_cast<long>(state.range(0));
  const snapshot* snap = nullptr;
  for (auto _ : state) snap = &l.run->at(step);

  state.counters["step"] = static_cast<double>(step);
  state.counters["steps_in_run"] = static_cast<double>(l.run->total_steps());
  state.counters["loss"] = snap->loss;
  const an::cast_statistics base = an::cast_statistics_of<precis::half>(snap->all);
  state.counters["values"] = static_cast<double>(base.total);
  state.counters["zero"] = base.fraction(base.zero);
  state.counters["nonfinite"] = base.fraction(base.nonfinite);
  double max_abs = 0,
         min_abs = std::numeric_limits<double>::infinity();  // min: of the nonzero values
  for (index_t i = 0; i < snap->all.size(); ++i) {
    const double a = std::abs(static_cast<double>(snap->all.data()[i]));
    max_abs = std::max(max_abs, a);
    if (a > 0) min_abs = std::min(min_abs, a);
  }
  state.counters["max_abs"] = max_abs;
  state.counters["min_abs"] = min_abs;
  // Micikevicius's statistic: exponent below -24, |g| < 2^-24
  state.counters["exp_below_m24"] = of_nonzero(count_below_m24(snap->all), base);
  state.counters["exp_below_m24_published"] = 0.05;  // Micikevicius et al. 2018, Sec. 3.1: about 5%

  const auto classify = [&]<class F>(const std::string& fmt, int s) {
    const an::cast_statistics c = an::cast_statistics_of<F>(snap->all, std::exp2(s));
    const predicted pr = predict<F>(snap->all, std::exp2(s));
    std::string k = "_s";
    k += std::to_string(s);
    state.counters[fmt + "_flushed" + k] = of_nonzero(c.flushed, c);
    state.counters[fmt + "_subnormal" + k] = of_nonzero(c.subnormal, c);
    state.counters[fmt + "_overflowed" + k] = of_nonzero(c.overflowed, c);
    state.counters[fmt + "_flushed_predicted" + k] = of_nonzero(pr.flushed, c);
    state.counters[fmt + "_subnormal_predicted" + k] = of_nonzero(pr.subnormal, c);
    state.counters[fmt + "_overflowed_predicted" + k] = of_nonzero(pr.overflowed, c);
  };
  for (int s : {0, 8, 16}) classify.operator()<precis::half>("fp16", s);
  // the largest power-of-two scale that overflows nothing: max |g| 2^s below 65520
  const double over = precis::format_traits<precis::half>::max_finite() +
                      std::exp2(precis::format_traits<precis::half>::emax -
                                precis::format_traits<precis::half>::digits);
  int s_max = max_abs > 0 ? static_cast<int>(std::floor(std::log2(over / max_abs))) : 0;
  if (max_abs * std::exp2(s_max) >= over) --s_max;
  const an::cast_statistics cm = an::cast_statistics_of<precis::half>(snap->all, std::exp2(s_max));
  state.counters["log2_scale_max"] = s_max;
  state.counters["fp16_flushed_smax"] = of_nonzero(cm.flushed, cm);
  state.counters["fp16_overflowed_smax"] = of_nonzero(cm.overflowed, cm);
  classify.operator()<precis::bfloat16>("bf16", 0);

  for (std::size_t i = 0; i < snap->layers.size(); ++i) {
    const an::cast_statistics c = an::cast_statistics_of<precis::half>(snap->layers[i]);
    std::string k = "layer";  // (not "layer" + to_string: GCC 12 warns -Wrestrict on that)
    k += std::to_string(i);
    state.counters[k + "_values"] = static_cast<double>(c.total);
    state.counters[k + "_zero"] = c.fraction(c.zero);
    state.counters[k + "_exp_below_m24"] = of_nonzero(count_below_m24(snap->layers[i]), c);
    state.counters[k + "_fp16_flushed_s0"] = of_nonzero(c.flushed, c);
  }

  // the exponent histogram, for the report's plot
  const an::exponent_histogram h = an::histogram_of_exponents(snap->all, hist_lo, hist_hi);
  state.counters["e_below"] = static_cast<double>(h.below);
  state.counters["e_above"] = static_cast<double>(h.above);
  for (int e = hist_lo; e <= hist_hi; ++e) {
    std::string name = "e";
    name += std::to_string(e);
    state.counters[name] = static_cast<double>(h.at(e));
  }
}

/// The demo's own statistic: every 20th step of the whole run (the steps its "fp16-flushed
/// grads" column samples), pooled.
void BM_gradients_sampled(benchmark::State& state) {
  loaded& l = the_run();
  if (!l.run) {
    state.SkipWithError(l.why.c_str());
    return;
  }
  const pooled* p = nullptr;
  for (auto _ : state) p = &l.run->sampled_up_to(l.run->total_steps());
  const double all = static_cast<double>(p->values),
               nonzero = static_cast<double>(p->values - p->zero);
  state.counters["steps_in_run"] = static_cast<double>(l.run->total_steps());
  state.counters["samples"] = static_cast<double>(p->samples);
  state.counters["values"] = all;
  state.counters["zero"] = static_cast<double>(p->zero) / all;
  state.counters["exp_below_m24"] = static_cast<double>(p->below_m24) / nonzero;
  state.counters["fp16_flushed_s0"] = static_cast<double>(p->flushed_s0) / nonzero;
  state.counters["fp16_flushed_s8"] = static_cast<double>(p->flushed_s8) / nonzero;
  state.counters["fp16_flushed_s16"] = static_cast<double>(p->flushed_s16) / nonzero;
  state.counters["fp16_flushed_s0_of_all"] =
      static_cast<double>(p->flushed_s0) / all;  // the demo's column
}

void checkpoints(benchmark::internal::Benchmark* b) {
  for (long s : checkpoint_steps) b->Arg(s);
  b->ArgName("step")->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_gradients)->Apply(checkpoints);
BENCHMARK(BM_gradients_sampled)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // --data DIR / --data=DIR, as the demo takes it; the rest goes to Google Benchmark
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) {
      data_dir = argv[++i];
    } else if (a.rfind("--data=", 0) == 0) {
      data_dir = a.substr(7);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
