// An optimizer rule that does not say how many state arrays it keeps.
#include <cstdint>
#include <precis/precis.hpp>

struct Rule {
  struct context {};
  context prepare(std::int64_t) const { return {}; }
  void validate() const {}
  template <class T>
  T update(T w, T g, T*, const context&) const {
    return w - g;
  }
};

int main() {
  using P = precis::policy::named<"32-true">;
  precis::nn::MLP<P> net({2, 2}, precis::nn::activation::relu, 1);
  precis::optim::MixedPrecisionOptimizer<P, Rule> opt(net, Rule{});
  return opt.step() ? 0 : 1;
}
