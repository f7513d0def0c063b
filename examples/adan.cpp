// A user-defined optimizer rule with four state arrays (Adan, examples/adan_rule.hpp) driven by
// MixedPrecisionOptimizer under bf16-mixed: bf16 parameters, fp32 masters and fp32 Adan state,
// dynamic loss scaling, and a checkpoint that carries the four arrays. Beside it, AdamW on the
// same model and data.
//
//   adan            trains both for 300 steps and prints the losses
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <precis/precis.hpp>

#include "adan_rule.hpp"

using namespace precis;

namespace {

using P = policy::named<"bf16-mixed">;

// the label is whether x0 * x1 > 0: not linearly separable
struct problem {
  Tensor<float> x{Shape{256, 2}};
  std::vector<std::int64_t> y = std::vector<std::int64_t>(256);
  problem() {
    fill_uniform(x, -1, 1, 1);
    for (index_t i = 0; i < 256; ++i) y[static_cast<std::size_t>(i)] = x(i, 0) * x(i, 1) > 0 ? 1 : 0;
  }
};

template <class Rule>
double train(const problem& d, Rule rule, int steps, const char* name) {
  nn::MLP<P> net({2, 64, 64, 2}, nn::activation::tanh, /*seed=*/3);
  optim::MixedPrecisionOptimizer opt(net, rule, optim::DynamicLossScaler{});
  Tape<P> tape;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    tape.reset();
    opt.zero_grad();
    auto loss = cross_entropy(net(tape.input(d.x)), d.y);
    opt.backward(tape, loss);
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  std::printf("%-6s cross-entropy %.4f -> %.4f after %d steps; optimizer state %zu bytes (%zu arrays per parameter)\n", name,
              first, last, steps, opt.state_bytes(), optim::active_states(rule));
  if constexpr (Rule::state_count == 4) {
    // the checkpoint holds the masters and the four state arrays; a fresh optimizer resumes
    const auto path = (std::filesystem::temp_directory_path() / "precis_adan_example.ckpt").string();
    opt.save(path);
    nn::MLP<P> net2({2, 64, 64, 2}, nn::activation::tanh, /*seed=*/99);
    optim::MixedPrecisionOptimizer opt2(net2, rule, optim::DynamicLossScaler{});
    opt2.load(path);
    std::filesystem::remove(path);
    std::printf("%-6s checkpoint: resumed at step %lld with the same masters: %s\n", name,
                static_cast<long long>(opt2.steps_taken()),
                opt2.master(0).data()[0] == opt.master(0).data()[0] ? "yes" : "NO");
  }
  return last;
}

}  // namespace

int main() {
  const problem d;
  const double adan = train(d, adan_example::Adan{.lr = 0.01}, 300, "Adan");
  const double adamw = train(d, optim::AdamW{}, 300, "AdamW");
  return adan < 0.5 && adamw < 0.9 ? 0 : 1;
}
