// An optimizer rule without the per-weight update.
#include <cstddef>
#include <cstdint>
#include <precis/precis.hpp>

struct Rule {
  static constexpr std::size_t state_count = 0;
  struct context {};
  context prepare(std::int64_t) const { return {}; }
  void validate() const {}
};

int main() {
  using P = precis::policy::named<"32-true">;
  precis::nn::MLP<P> net({2, 2}, precis::nn::activation::relu, 1);
  precis::optim::MixedPrecisionOptimizer<P, Rule> opt(net, Rule{});
  return opt.step() ? 0 : 1;
}
