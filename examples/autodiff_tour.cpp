// A tour of the tape: one MLP trained on a toy task under any named policy (argv[1], default
// bf16-mixed), the types each value is stored in, gradient checking, and no_grad evaluation.
// docs/autodiff.md quotes this file.
#include <cstdint>
#include <cstdio>
#include <precis/autodiff/gradcheck.hpp>
#include <precis/nn/nn.hpp>
#include <precis/precis.hpp>
#include <string>
#include <vector>

using namespace precis;

template <class P>
int tour() {
  // data: the label is whether x0 * x1 > 0 (not linearly separable)
  Tensor<float> x(Shape{256, 2});
  fill_uniform(x, -1, 1, 1);
  std::vector<std::int64_t> y(256);
  for (index_t i = 0; i < 256; ++i) y[static_cast<std::size_t>(i)] = x(i, 0) * x(i, 1) > 0 ? 1 : 0;

  nn::MLP<P> net({2, 64, 64, 2}, nn::activation::tanh, /*seed=*/3);
  Tape<P> tape;
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    tape.reset();     // same memory as the last step: no allocation
    net.zero_grad();  // backward accumulates into the parameters' gradients
    auto logits = net(tape.input(x));
    auto loss = cross_entropy(logits, y);
    tape.backward(loss);
    if (step == 0) first = loss.item();
    last = loss.item();
    for (auto* p : net.parameters()) {  // plain SGD on the stored parameters
      for (index_t i = 0; i < p->value.size(); ++i) {
        p->value.data()[i] = static_cast<typename P::param_type>(static_cast<float>(p->value.data()[i]) -
                                                                 0.5f * static_cast<float>(p->grad.data()[i]));
      }
    }
  }
  std::printf("%s: cross-entropy %.4f -> %.4f after 400 steps; parameters stored as %s, logits as %s\n",
              P::name().c_str(), first, last, std::string(format_traits<typename P::param_type>::name).c_str(),
              std::string(format_traits<typename decltype(net(tape.input(x)))::storage_type>::name).c_str());

  // evaluation without recording
  tape.reset();
  {
    auto guard = tape.no_grad();
    const auto p = softmax(net(tape.input(x)), 1);
    std::printf("no_grad forward: %zu nodes recorded; softmax stored as %s\n", tape.nodes(),
                std::string(format_traits<typename decltype(p)::storage_type>::name).c_str());
  }

  // gradient check of a small graph against the multiprecision tape
  Tensor<double> a(Shape{3, 4}), b(Shape{4, 2});
  fill_uniform(a, -1, 1, 4);
  fill_uniform(b, -1, 1, 5);
  const auto r = gradcheck<P>([](auto&, const auto& q) { return sum(tanh(matmul(q[0], q[1]))); }, {a, b}, {.ops = 3});
  std::printf("gradcheck: %s -> %s\n", r.report().c_str(), r.passed() ? "passed" : "FAILED");
  return r.passed() && last < 0.5 * first ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return policy::dispatch(argc > 1 ? argv[1] : "bf16-mixed", []<class P>() { return tour<P>(); });
  } catch (const precis::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
