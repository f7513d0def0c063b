// A program outside the precis tree: the umbrella header alone gives formats, tensors, policies,
// the tape, layers, optimizers, fp8 scaling and the tensor-core models; the former umbrella name
// of the format layer still works.
#include <cstdio>
#include <precis/format/format.hpp>
#include <precis/precis.hpp>

int main() {
  const auto h = precis::round_to<precis::half>(0.1);
  const auto f8 = precis::round_to<precis::float8_e4m3>(1000.0, precis::rounding::nearest_even,
                                                        precis::overflow::saturate);
  std::printf("%s %.10g %s %g\n", precis::format_traits<precis::half>::name.data(),
              static_cast<double>(static_cast<float>(h)),
              precis::format_traits<precis::float8_e4m3>::name.data(), static_cast<double>(static_cast<float>(f8)));
  // one name from each layer the umbrella header promises
  using P = precis::policy::named<"bf16-mixed">;
  [[maybe_unused]] precis::Tape<P>* tape = nullptr;
  [[maybe_unused]] precis::nn::MLP<P>* net = nullptr;
  [[maybe_unused]] const precis::optim::SGD sgd{};
  [[maybe_unused]] const precis::optim::DynamicLossScaler scaler{};
  [[maybe_unused]] const precis::fp8::current_scaling recipe{};
  [[maybe_unused]] const precis::tc::sm90 arch{};
  return static_cast<float>(h) == 0.0999755859375f && static_cast<float>(f8) == 448.0f ? 0 : 1;
}
