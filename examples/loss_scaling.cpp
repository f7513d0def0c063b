// What loss scaling, master weights and stochastic rounding each buy, measured: the same MLP
// (784-256-10, ReLU, cross-entropy, SGD with momentum) trained on Fashion-MNIST under
//   32-true                   fp32 everything (the reference)
//   16-mixed + dynamic scale  fp16 storage, fp32 masters, DynamicLossScaler
//   16-true                   fp16 everything, no scaling, no masters, round-to-nearest updates
//   bf16-true                 bf16 everything, round-to-nearest updates
//   bf16-true + SR            bf16 everything, stochastically rounded updates
// docs/optim.md records the output. Usage: loss_scaling [--data DIR] [--epochs N] [--lr X] [--only SUBSTRING]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <precis/data/idx.hpp>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <string>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

struct result {
  double train_loss, test_accuracy, seconds;
  std::int64_t skipped;
  double scale;
};

template <class P, class Scaler>
result train(const data::labelled_images& tr, const data::labelled_images& te, Scaler scaler, optim::update_rounding how,
             int epochs, double lr) {
  nn::MLP<P> net({784, 256, 10}, nn::activation::relu, 42);
  typename optim::MixedPrecisionOptimizer<P, optim::SGD, Scaler>::options o;
  o.rounding = how;
  optim::MixedPrecisionOptimizer<P, optim::SGD, Scaler> opt(net, optim::SGD{.lr = lr, .momentum = 0.9}, scaler, o);
  using S = typename P::param_type;
  constexpr index_t batch = 64;
  const index_t n = tr.images.shape()[0], steps_per_epoch = n / batch;
  Tensor<S> xb(Shape{batch, 784});
  std::vector<std::int64_t> yb(batch);
  Tape<P> tape;
  const auto t0 = std::chrono::steady_clock::now();
  double epoch_loss = 0;
  for (int e = 0; e < epochs; ++e) {
    epoch_loss = 0;
    for (index_t s = 0; s < steps_per_epoch; ++s) {
      // a fixed permutation-free schedule: batches in order, shifted each epoch
      const index_t first = (s * batch + e * 7919) % (n - batch);
      for (index_t i = 0; i < batch; ++i) {
        for (index_t j = 0; j < 784; ++j) xb(i, j) = static_cast<S>(tr.images(first + i, j));
        yb[static_cast<std::size_t>(i)] = tr.labels[static_cast<std::size_t>(first + i)];
      }
      tape.reset();
      opt.zero_grad();
      auto loss = cross_entropy(net(tape.borrow(xb)), yb);
      opt.backward(tape, loss);
      opt.step();
      epoch_loss += loss.item();
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // test accuracy, forward only
  index_t correct = 0;
  const index_t m = te.images.shape()[0];
  Tensor<S> xt(Shape{m, 784});
  for (index_t i = 0; i < m * 784; ++i) xt.data()[i] = static_cast<S>(te.images.data()[i]);
  tape.reset();
  {
    auto guard = tape.no_grad();
    const auto logits = net(tape.borrow(xt)).value();
    for (index_t i = 0; i < m; ++i) {
      index_t best = 0;
      for (index_t j = 1; j < 10; ++j) {
        if (static_cast<float>(logits(i, j)) > static_cast<float>(logits(i, best))) best = j;
      }
      correct += best == te.labels[static_cast<std::size_t>(i)];
    }
  }
  return {epoch_loss / static_cast<double>(steps_per_epoch), static_cast<double>(correct) / static_cast<double>(m), secs,
          opt.scaler().state().skipped, opt.loss_scale()};
}

int main(int argc, char** argv) {
  std::string dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 3;
  double lr = 0.01;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--data") == 0) dir = argv[i + 1];
    else if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--lr") == 0) lr = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  try {
    const auto tr = data::read_fashion_mnist(dir, true);
    const auto te = data::read_fashion_mnist(dir, false);
    std::printf("Fashion-MNIST: %lld training / %lld test images, MLP 784-256-10, SGD(lr %g, momentum 0.9), batch 64, %d epochs\n\n",
                static_cast<long long>(tr.images.shape()[0]), static_cast<long long>(te.images.shape()[0]), lr, epochs);
    std::printf("| configuration | final-epoch train loss | test accuracy | skipped steps | final loss scale | seconds |\n");
    std::printf("|---|---|---|---|---|---|\n");
    const auto want = [&](const char* name) { return only.empty() || std::string(name).find(only) != std::string::npos; };
    const auto row = [](const char* name, const result& r) {
      std::printf("| %s | %.4f | %.4f | %lld | %g | %.1f |\n", name, r.train_loss, r.test_accuracy, static_cast<long long>(r.skipped), r.scale, r.seconds);
    };
    using optim::update_rounding;
    if (want("32-true")) row("32-true", train<pol::named<"32-true">>(tr, te, optim::NoLossScaler{}, update_rounding::nearest, epochs, lr));
    if (want("16-mixed, dynamic loss scaling, fp32 masters")) row("16-mixed, dynamic loss scaling, fp32 masters",
        train<pol::named<"16-mixed">>(tr, te, optim::DynamicLossScaler{}, update_rounding::nearest, epochs, lr));
    if (want("16-mixed, no loss scaling, fp32 masters")) row("16-mixed, no loss scaling, fp32 masters",
        train<pol::named<"16-mixed">>(tr, te, optim::NoLossScaler{}, update_rounding::nearest, epochs, lr));
    if (want("16-true, no scaling, no masters")) row("16-true, no scaling, no masters", train<pol::named<"16-true">>(tr, te, optim::NoLossScaler{}, update_rounding::nearest, epochs, lr));
    if (want("bf16-true, round to nearest")) row("bf16-true, round to nearest", train<pol::named<"bf16-true">>(tr, te, optim::NoLossScaler{}, update_rounding::nearest, epochs, lr));
    if (want("bf16-true, stochastic rounding")) row("bf16-true, stochastic rounding", train<pol::named<"bf16-true">>(tr, te, optim::NoLossScaler{}, update_rounding::stochastic, epochs, lr));
    if (want("bf16-true, Kahan-compensated")) row("bf16-true, Kahan-compensated", train<pol::named<"bf16-true">>(tr, te, optim::NoLossScaler{}, update_rounding::kahan, epochs, lr));
  } catch (const precis::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
