// precis::dist under mpirun (ctest label `mpi`, run with -np 2 and -np 4): the collectives
// against exact results, data-parallel steps against one rank with the whole batch within the
// bound for a reordered fp32 sum, replicas bit-identical, an overflow on one rank skipping the
// step everywhere, and checkpoints written by rank 0 and loaded at another world size.
//
// `dist_tests --die-rank R --die-at-step K` is not a test suite: rank R kills itself at step K
// of a training loop, and ctest checks that the job ends with a clear error instead of hanging.
// `--stall-rank R --die-at-step K`: rank R stops calling collectives (sleeps) instead, and the
// other ranks' deadline (5 s here) must end the job with a message naming the collective.
#include <gtest/gtest.h>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <precis/dist/all.hpp>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <string>
#include <thread>
#include <vector>

using namespace precis;
namespace pol = precis::policy;
using dist::reduce_op;

namespace {

struct parameter_ref {
  float* g;
  std::size_t n;
};

dist::communicator& world() {
  static dist::communicator c;
  return c;
}

template <class T>
class Collectives : public ::testing::Test {};
using Reducible = ::testing::Types<float, double, bfloat16, half>;
TYPED_TEST_SUITE(Collectives, Reducible);

TYPED_TEST(Collectives, SumMeanAndMaxAreExact) {
  using T = TypeParam;
  auto& w = world();
  const int n = w.size(), r = w.rank();
  // rank r holds (r + 1) * v_i with small dyadic v_i: every sum, mean and max is representable
  std::vector<double> v(37);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(static_cast<double>(i % 7) - 3.0, -static_cast<int>(i % 5));
  std::vector<T> sum(v.size()), mean(v.size()), mx(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) sum[i] = mean[i] = mx[i] = static_cast<T>((r + 1) * v[i]);
  w.allreduce(std::span<T>(sum), reduce_op::sum);
  w.allreduce(std::span<T>(mean), reduce_op::mean);
  w.allreduce(std::span<T>(mx), reduce_op::max);
  const double tri = n * (n + 1) / 2.0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(static_cast<double>(sum[i]), tri * v[i]) << i;
    EXPECT_EQ(static_cast<double>(mean[i]), static_cast<double>(static_cast<T>(tri * v[i] / n))) << i;
    EXPECT_EQ(static_cast<double>(mx[i]), v[i] >= 0 ? n * v[i] : v[i]) << i;
  }
}

TEST(Collectives16Bit, SumsAreFp32SumsRoundedOnce) {
  // rank 0 holds 1, every other rank 2^-9 (a quarter of bf16's ulp at 1). Added one at a time
  // in bf16 each 2^-9 is lost (below half an ulp); the fp32 sum 1 + (n - 1) 2^-9 rounded once
  // is 1 + 2^-7 for n = 4. The result must be the exact sum rounded once.
  auto& w = world();
  std::vector<bfloat16> x(5, w.rank() == 0 ? bfloat16(1.0f) : bfloat16(std::ldexp(1.0f, -9)));
  w.allreduce(std::span<bfloat16>(x), reduce_op::sum);
  const double exact = 1.0 + (w.size() - 1) * std::ldexp(1.0, -9);
  for (auto v : x) EXPECT_EQ(static_cast<float>(v), static_cast<float>(round_to<bfloat16>(exact)));
  if (w.size() == 4) {
    EXPECT_EQ(static_cast<float>(x[0]), 1.0f + std::ldexp(1.0f, -7));  // bf16 additions would give 1
  }
}

TEST(CollectivesOther, BroadcastAllgatherAndTensors) {
  auto& w = world();
  std::vector<std::int64_t> b(4, w.rank() == 0 ? 42 : -1);
  w.broadcast(std::span<std::int64_t>(b), 0);
  for (auto v : b) EXPECT_EQ(v, 42);
  const int mine[2] = {w.rank(), 10 * w.rank()};
  const auto all = w.allgather(std::span<const int>(mine, 2));
  ASSERT_EQ(all.size(), static_cast<std::size_t>(2 * w.size()));
  for (int r = 0; r < w.size(); ++r) {
    EXPECT_EQ(all[static_cast<std::size_t>(2 * r)], r);
    EXPECT_EQ(all[static_cast<std::size_t>(2 * r + 1)], 10 * r);
  }
  Tensor<float> t(Shape{2, 3});
  for (index_t i = 0; i < 6; ++i) t.data()[i] = static_cast<float>(w.rank() * 6 + i);
  const auto g = w.allgather(t);
  EXPECT_EQ(g.shape(), (Shape{2 * w.size(), 3}));
  for (index_t i = 0; i < g.size(); ++i) EXPECT_EQ(g.data()[i], static_cast<float>(i));
  w.allreduce(t, reduce_op::max);
  EXPECT_EQ(t.data()[5], static_cast<float>(w.size() * 6 - 1));
  EXPECT_EQ(dist::shard(10, w.rank(), w.size()).second - dist::shard(10, w.rank(), w.size()).first,
            10 * (w.rank() + 1) / w.size() - 10 * w.rank() / w.size());
}

TEST(CollectivesErrors, MismatchedCountsAndBadRootsAreNamed) {
  auto& w = world();
  std::vector<float> x(static_cast<std::size_t>(3 + w.rank()));
  try {
    w.allreduce(std::span<float>(x), reduce_op::sum);
    FAIL() << "no error for different counts";
  } catch (const dist::dist_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected the same count on every rank"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.broadcast(std::span<float>(x), w.size()), dist::dist_error);
  EXPECT_THROW(dist::shard(10, w.size(), w.size()), dist::dist_error);
}

// ---- data parallel ------------------------------------------------------------------------

constexpr index_t batch = 16, features = 6, classes = 3;

struct problem {
  Tensor<float> x{Shape{batch, features}};
  std::vector<std::int64_t> y = std::vector<std::int64_t>(batch);
  explicit problem(std::uint64_t seed) {
    fill_normal(x, 0.0, 1.0, seed);
    for (index_t i = 0; i < batch; ++i) y[static_cast<std::size_t>(i)] = (x(i, 0) > 0) + (x(i, 1) > 0.5);
  }
  /// This rank's rows of the global batch.
  Tensor<float> rows(int rank, int size) const {
    const auto [b, e] = dist::shard(batch, rank, size);
    Tensor<float> out(Shape{e - b, features});
    std::copy(x.data() + b * features, x.data() + e * features, out.data());
    return out;
  }
  std::vector<std::int64_t> labels(int rank, int size) const {
    const auto [b, e] = dist::shard(batch, rank, size);
    return {y.begin() + b, y.begin() + e};
  }
};

std::vector<float> flat(nn::Module<pol::named<"32-true">>& m) {
  std::vector<float> out;
  m.for_each_parameter([&](auto& p) { out.insert(out.end(), p.value.begin(), p.value.end()); });
  return out;
}

void set_flat(nn::Module<pol::named<"32-true">>& m, const std::vector<float>& v) {
  std::size_t k = 0;
  m.for_each_parameter([&](auto& p) {
    for (auto& x : p.value) x = v[k++];
  });
}

TEST(DataParallel, EachStepMatchesOneRankWithTheWholeBatch) {
  // Logistic regression (Linear 6 -> 3, cross-entropy), SGD lr 0.5, global batch 16 split
  // over the ranks. At every step a reference model with the same weights takes one step on
  // the whole batch. The two gradients are the same sums of per-sample terms x_ij delta_ik
  // (every per-sample quantity is computed identically: rows are independent and 1/16 vs 1/8 or
  // 1/4 then 1/n are exact powers of two), only summed in another order. Each computed sum of
  // at most 16 terms is within gamma_16 sum |terms| of the exact one, so the updates differ by
  // at most lr 2 gamma_16 sum_i |x_ij| |delta_ik| plus the rounding of w - lr g on each side.
  using P = pol::named<"32-true">;
  auto& w = world();
  const problem data(11);
  const double lr = 0.5, u = std::ldexp(1.0, -24), g16 = 16 * u / (1 - 16 * u);
  nn::Linear<P> net(features, classes, 3 + static_cast<std::uint64_t>(w.rank()));  // different seeds: the broadcast must fix it
  optim::MixedPrecisionOptimizer opt(net, optim::SGD{.lr = lr}, optim::NoLossScaler{});
  dist::DataParallel dp(w, net, opt);
  const auto xr = data.rows(w.rank(), w.size());
  const auto yr = data.labels(w.rank(), w.size());
  Tape<P> tape;
  for (int step = 0; step < 10; ++step) {
    const auto before = flat(net);
    // the replicas are bit-identical
    const auto all = w.allgather(std::span<const float>(before));
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], before[i % before.size()]) << "step " << step;

    // reference: one rank, the whole batch
    nn::Linear<P> ref(features, classes, 0);
    set_flat(ref, before);
    optim::MixedPrecisionOptimizer ropt(ref, optim::SGD{.lr = lr}, optim::NoLossScaler{});
    {
      Tape<P> t;
      ropt.zero_grad();
      ropt.backward(t, cross_entropy(ref(t.borrow(data.x)), data.y));
      ropt.step();
    }
    // the bound's sum_i |x_ij| |delta_ik|, with delta = (softmax - onehot) / 16 in double
    std::vector<double> sw(static_cast<std::size_t>(classes * features), 0.0), sb(static_cast<std::size_t>(classes), 0.0);
    for (index_t i = 0; i < batch; ++i) {
      double z[classes], zmax = -1e300, den = 0;
      for (index_t k = 0; k < classes; ++k) {
        z[k] = before[static_cast<std::size_t>(classes * features + k)];
        for (index_t j = 0; j < features; ++j) z[k] += static_cast<double>(before[static_cast<std::size_t>(k * features + j)]) * data.x(i, j);
        zmax = std::max(zmax, z[k]);
      }
      for (index_t k = 0; k < classes; ++k) den += std::exp(z[k] - zmax);
      for (index_t k = 0; k < classes; ++k) {
        const double d = std::abs(std::exp(z[k] - zmax) / den - (data.y[static_cast<std::size_t>(i)] == k)) / batch;
        sb[static_cast<std::size_t>(k)] += d;
        for (index_t j = 0; j < features; ++j) sw[static_cast<std::size_t>(k * features + j)] += std::abs(data.x(i, j)) * d;
      }
    }
    tape.reset();
    opt.zero_grad();
    dp.backward(tape, cross_entropy(net(tape.borrow(xr)), yr));
    ASSERT_TRUE(dp.step());
    const auto mine = flat(net), want = flat(ref);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const double s = i < sw.size() ? sw[i] : sb[i - sw.size()];
      // (1 + 1e-6): delta above is computed in double from the same weights, not by the tape
      const double bound = lr * 2 * g16 * s * (1 + 1e-6) + 2 * u * (std::abs(static_cast<double>(before[i])) + std::abs(static_cast<double>(want[i])) + lr * 2 * s);
      ASSERT_LE(std::abs(static_cast<double>(mine[i]) - want[i]), bound) << "parameter element " << i << " at step " << step;
    }
  }
}

// fp8-mixed under DataParallel: each rank's inputs have another magnitude (so its own amaxes
// differ), yet after attach(tape) every cast on every rank uses the same scale, at every step,
// under current scaling (amax reduced at each cast) and delayed scaling (reduced in reset()).
template <class P>
void fp8_scales_agree() {
  auto& w = world();
  const problem data(13);
  nn::MLP<P> net({features, 8, classes}, nn::activation::relu, 5);
  optim::MixedPrecisionOptimizer opt(net, optim::SGD{.lr = 0.1}, optim::NoLossScaler{});
  dist::DataParallel dp(w, net, opt);
  Tape<P> tape;
  auto xr = data.rows(w.rank(), w.size());
  for (auto& v : xr) v *= static_cast<float>(10 * (1 + w.rank()));
  const auto yr = data.labels(w.rank(), w.size());
  if (w.size() > 1) {  // without attach, backward refuses: the scales would differ
    Tape<P> unshared;
    auto loss = cross_entropy(net(unshared.borrow(xr)), yr);
    EXPECT_THROW(dp.backward(unshared, loss), dist::dist_error);
  }
  dp.attach(tape);
  bool amax_differed = false;
  for (int step = 0; step < 6; ++step) {
    tape.reset();
    opt.zero_grad();
    dp.backward(tape, cross_entropy(net(tape.borrow(xr)), yr));
    dp.step();
    std::vector<float> mine, amax;
    for (std::size_t k = 0; k < tape.fp8().size(); ++k) {
      const auto& g = tape.fp8()[k];
      mine.insert(mine.end(), {g.input.last_scale(), g.weight.last_scale(), g.grad_output.last_scale(), g.input.delayed().scale(),
                               g.grad_output.delayed().scale()});
      amax.push_back(g.input.last().amax);
    }
    ASSERT_EQ(mine.size(), 10u);
    const auto all = w.allgather(std::span<const float>(mine));
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], mine[i % mine.size()]) << P::name() << " step " << step << " value " << i;
    const auto amaxes = w.allgather(std::span<const float>(amax));
    for (std::size_t i = 0; i < amaxes.size(); ++i) amax_differed = amax_differed || amaxes[i] != amax[i % amax.size()];
  }
  if (w.size() > 1) {
    EXPECT_TRUE(amax_differed) << "the ranks' own amaxes never differed: the test shows nothing";
  }
}

TEST(DataParallel, Fp8ScalesAgreeOnEveryRankAtEveryStep) {
  fp8_scales_agree<pol::named<"fp8-mixed">>();
  fp8_scales_agree<pol::fp8_mixed_with<fp8::delayed_scaling>>();
}

TEST(DataParallel, AnOverflowOnOneRankSkipsTheStepEverywhere) {
  using P = pol::named<"16-mixed">;
  auto& w = world();
  const problem data(5);
  nn::Linear<P> net(features, classes, 9);
  optim::DynamicLossScaler::options so;
  so.init_scale = 1024;  // no overflow of its own on this problem
  optim::MixedPrecisionOptimizer opt(net, optim::SGD{.lr = 0.1}, optim::DynamicLossScaler(so));
  dist::DataParallel dp(w, net, opt);
  const auto x = data.rows(w.rank(), w.size());
  const auto y = data.labels(w.rank(), w.size());
  Tensor<half> xh(x.shape());
  for (index_t i = 0; i < x.size(); ++i) xh.data()[i] = half(x.data()[i]);
  Tape<P> tape;
  const int last = w.size() - 1;
  for (int step = 0; step < 6; ++step) {
    tape.reset();
    opt.zero_grad();
    auto loss = cross_entropy(net(tape.borrow(xh)), y);
    if (step == 2 || step == 4) {
      opt.backward(tape, loss);
      // step 2: the last rank's local gradient overflows before the all-reduce; step 4: after
      // it, so only the explicit agreement can tell the others
      if (step == 2 && w.rank() == last) net.weight().grad.data()[1] = half(std::numeric_limits<float>::infinity());
      dp.reduce_gradients();
      if (step == 4 && w.rank() == last) net.weight().grad.data()[1] = half(std::numeric_limits<float>::infinity());
    } else {
      dp.backward(tape, loss);
    }
    const auto before = net.weight().value;
    const double scale_before = opt.loss_scale();
    const bool stepped = dp.step();
    EXPECT_EQ(stepped, step != 2 && step != 4) << "rank " << w.rank() << " step " << step;
    if (!stepped) {
      EXPECT_EQ(opt.loss_scale(), scale_before / 2);
      for (index_t i = 0; i < before.size(); ++i) EXPECT_EQ(float(net.weight().value.data()[i]), float(before.data()[i]));
    }
    const double scale = opt.loss_scale();
    const auto scales = w.allgather(std::span<const double>(&scale, 1));
    for (double s : scales) EXPECT_EQ(s, scale) << "step " << step;
  }
  EXPECT_EQ(opt.scaler().state().skipped, 2);
}

TEST(DataParallel, Bf16CompressionWithErrorFeedbackStaysWithinOneRounding) {
  // Each rank's gradient g_r is the same every step (values with many bits). One step sends
  // bf16(g_r): the mean is off by up to 2^-8 sum_r |g_r| / n. Over K steps error feedback
  // re-sends what rounding dropped, so the sum of the K means is within one such rounding of
  // K * mean (plain rounding would be off by K times it: the error is systematic here).
  using P = pol::named<"32-true">;
  auto& w = world();
  const int n = w.size();
  nn::Linear<P> net(features, classes, 4);
  optim::MixedPrecisionOptimizer opt(net, optim::SGD{.lr = 0.1}, optim::NoLossScaler{});
  dist::DataParallel<P, optim::SGD, optim::NoLossScaler>::options o;
  o.compress_bf16 = true;
  o.bucket_bytes = 40;  // several buckets, the last one short
  dist::DataParallel dp(w, net, opt, o);
  auto grad_of = [](int rank, std::size_t i) { return std::sin(1.0 + 0.37 * static_cast<double>(i) + 0.11 * rank) * (1 + 1e-3 * rank); };
  std::vector<parameter_ref> params;
  net.for_each_parameter([&](auto& p) { params.push_back({p.grad.data(), static_cast<std::size_t>(p.grad.size())}); });
  const double ub = std::ldexp(1.0, -8), u = std::ldexp(1.0, -24);
  constexpr int K = 64;
  std::vector<double> total;
  double worst_first = 0;
  for (int step = 0; step < K; ++step) {
    std::size_t k = 0;
    for (auto& p : params)
      for (std::size_t i = 0; i < p.n; ++i, ++k) p.g[i] = static_cast<float>(grad_of(w.rank(), k));
    dp.reduce_gradients();
    k = 0;
    if (total.empty()) {
      for (auto& p : params) total.resize(total.size() + p.n, 0.0);
    }
    for (auto& p : params) {
      for (std::size_t i = 0; i < p.n; ++i, ++k) {
        double mean = 0, mag = 0;
        for (int r = 0; r < n; ++r) {
          mean += static_cast<float>(grad_of(r, k));
          mag += std::abs(static_cast<float>(grad_of(r, k)));
        }
        mean /= n;
        mag /= n;
        const double err = std::abs(p.g[i] - mean);
        if (step == 0) {
          ASSERT_LE(err, ub * mag + 2 * n * u * mag) << "element " << k;  // one bf16 rounding per rank, fp32 sum and scaling
          worst_first = std::max(worst_first, err / mag);
        }
        total[k] += p.g[i];
        if (step == K - 1) {
          // one bf16 rounding of g + e per rank (|e| <= 2^-8 |g|), plus K steps of fp32 rounding
          ASSERT_LE(std::abs(total[k] - K * mean), ub * (1 + ub) * mag + K * 2 * n * u * mag) << "element " << k;
        }
      }
    }
    // every rank holds the same bits
    std::vector<float> mine;
    for (auto& p : params) mine.insert(mine.end(), p.g, p.g + p.n);
    const auto all = w.allgather(std::span<const float>(mine));
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], mine[i % mine.size()]);
  }
  EXPECT_GT(worst_first, 1e-4) << "bf16 rounding should lose bits here, or the test shows nothing";
}

std::string shared_path(const std::string& name) {
  const char* dir = std::getenv("PRECIS_DIST_DIR");
  return (std::filesystem::path(dir ? dir : std::filesystem::temp_directory_path().string()) / name).string();
}

TEST(DataParallel, CheckpointsFromRankZeroLoadAtAnyWorldSize) {
  using P = pol::named<"32-true">;
  auto& w = world();
  const problem data(2);
  const auto x = data.rows(w.rank(), w.size());
  const auto y = data.labels(w.rank(), w.size());
  nn::Linear<P> net(features, classes, 1);
  optim::MixedPrecisionOptimizer opt(net, optim::SGD{.lr = 0.3, .momentum = 0.9}, optim::NoLossScaler{});
  dist::DataParallel dp(w, net, opt);
  Tape<P> tape;
  for (int step = 0; step < 3; ++step) {
    tape.reset();
    opt.zero_grad();
    dp.backward(tape, cross_entropy(net(tape.borrow(x)), y));
    dp.step();
  }
  const std::string path = shared_path("precis_dist_np" + std::to_string(w.size()) + ".ckpt");
  dp.save(path);
  const auto trained = flat(net);
  // every rank loads rank 0's file into a fresh model: the same parameters, at any world size
  nn::Linear<P> fresh(features, classes, 77);
  optim::MixedPrecisionOptimizer fopt(fresh, optim::SGD{.lr = 0.3, .momentum = 0.9}, optim::NoLossScaler{});
  fopt.load(path);
  EXPECT_EQ(flat(fresh), trained);
  if (w.rank() == 0) {  // for the other world sizes' runs (ctest runs np 2 before np 4)
    std::ofstream f(path + ".params", std::ios::binary);
    f.write(reinterpret_cast<const char*>(trained.data()), static_cast<std::streamsize>(trained.size() * sizeof(float)));
  }
  w.barrier();
  // a checkpoint written by a run at another world size, when there is one
  for (int other : {1, 2, 4}) {
    if (other == w.size()) continue;
    const std::string p = shared_path("precis_dist_np" + std::to_string(other) + ".ckpt");
    std::ifstream f(p + ".params", std::ios::binary);
    if (!f) continue;
    std::vector<float> want(trained.size());
    f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
    nn::Linear<P> m(features, classes, 5);
    optim::MixedPrecisionOptimizer mopt(m, optim::SGD{.lr = 0.3, .momentum = 0.9}, optim::NoLossScaler{});
    dist::DataParallel mdp(w, m, mopt);
    mdp.load(p);
    EXPECT_EQ(flat(m), want) << "checkpoint from the np " << other << " run";
    if (w.rank() == 0) std::printf("loaded the checkpoint written at world size %d\n", other);
  }
}

/// Failures on ranks other than 0 are printed with their rank (their default printer is off).
class rank_failure_printer : public ::testing::EmptyTestEventListener {
 public:
  explicit rank_failure_printer(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

/// Rank `die_rank` kills itself (SIGKILL: no cleanup, no MPI_Finalize) or, with `stall`,
/// sleeps for a minute, at step `die_at`.
int die_mode(int die_rank, int die_at, bool stall) {
  using P = pol::named<"32-true">;
  auto& w = world();
  w.set_timeout(std::chrono::seconds(stall ? 5 : 20));
  const problem data(3);
  const auto x = data.rows(w.rank(), w.size());
  const auto y = data.labels(w.rank(), w.size());
  nn::Linear<P> net(features, classes, 1);
  optim::MixedPrecisionOptimizer opt(net, optim::SGD{.lr = 0.1}, optim::NoLossScaler{});
  dist::DataParallel dp(w, net, opt);
  Tape<P> tape;
  try {
    for (int step = 0; step < 1000; ++step) {
      if (w.rank() == die_rank && step == die_at) {
        if (stall) std::this_thread::sleep_for(std::chrono::seconds(60));
        else std::raise(SIGKILL);
      }
      tape.reset();
      opt.zero_grad();
      dp.backward(tape, cross_entropy(net(tape.borrow(x)), y));
      dp.step();
    }
  } catch (const dist::dist_error& e) {
    std::fprintf(stderr, "rank %d: %s\n", w.rank(), e.what());
    w.abort(1);
  }
  std::fprintf(stderr, "rank %d: finished although rank %d died\n", w.rank(), die_rank);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  dist::environment env(argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    const bool die = std::strcmp(argv[i], "--die-rank") == 0, stall = std::strcmp(argv[i], "--stall-rank") == 0;
    if ((die || stall) && i + 3 < argc && std::strcmp(argv[i + 2], "--die-at-step") == 0) {
      return die_mode(std::atoi(argv[i + 1]), std::atoi(argv[i + 3]), stall);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  auto& w = world();
  if (w.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new rank_failure_printer(w.rank()));
  }
  const int rc = RUN_ALL_TESTS();
  return w.any(rc != 0) ? 1 : 0;  // a failure on any rank fails every rank
}
