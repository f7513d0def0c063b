// The MLP trained on the GPU (train_fashion_mnist --device cuda), the loop of device_train.cuh
// under 32-true, 64-true, bf16-mixed, 16-mixed, fp8-mixed, fp8-mixed/unscaled (scales and
// casts on the device), bf16-true (update rounding to nearest, and stochastic: bf16-true+sr)
// and 16-true: every CPU policy; the CNN and the ViT are in device_cnn_vit.cu.
// Registers the device runs and the GPU's name with the program.
#include "device_train.cuh"

namespace fashion_mnist {

result run_cnn_vit_on_device(const request& q);  // device_cnn_vit.cu

namespace {

namespace pc = precis::cuda;
using device_detail::train_on_device;

result device_run(const request& q) {
  if (q.model != "mlp") return run_cnn_vit_on_device(q);
  constexpr auto nearest = optim::update_rounding::nearest;
  if (q.policy == "32-true") return train_on_device<Mlp, pol::named<"32-true">>(q, nearest);
  if (q.policy == "64-true") return train_on_device<Mlp, pol::named<"64-true">>(q, nearest);
  if (q.policy == "bf16-mixed") return train_on_device<Mlp, pol::named<"bf16-mixed">>(q, nearest);
  if (q.policy == "16-mixed") return train_on_device<Mlp, pol::named<"16-mixed">>(q, nearest, optim::DynamicLossScaler{});
  if (q.policy == "fp8-mixed") return train_on_device<Mlp, pol::named<"fp8-mixed">>(q, nearest);
  if (q.policy == "fp8-mixed/unscaled") return train_on_device<Mlp, pol::fp8_mixed_with<fp8::no_scaling>>(q, nearest);
  if (q.policy == "bf16-true") return train_on_device<Mlp, pol::named<"bf16-true">>(q, nearest);
  if (q.policy == "bf16-true+sr") return train_on_device<Mlp, pol::named<"bf16-true">>(q, optim::update_rounding::stochastic);
  if (q.policy == "16-true") return train_on_device<Mlp, pol::named<"16-true">>(q, nearest);
  throw precis::usage_error("train_fashion_mnist: --device cuda: policy " + q.policy + " is not on the device");
}

std::string device_name() {
  if (pc::device_count() == 0) return "";
  cudaDeviceProp prop{};
  pc::check(cudaGetDeviceProperties(&prop, 0), "train_fashion_mnist: cudaGetDeviceProperties");
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", driver " + std::to_string(driver);
}

/// Registers the device runs while the program starts.
const bool registered = [] {
  run_on_device = &device_run;
  cuda_device_name = &device_name;
  return true;
}();

}  // namespace
}  // namespace fashion_mnist
