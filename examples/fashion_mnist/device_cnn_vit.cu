// The CNN and the ViT trained on the GPU (train_fashion_mnist --device cuda), the loop of
// device_train.cuh under the CPU plan's policies for them: 32-true, bf16-mixed and 16-mixed
// (with dynamic loss scaling); with --policies also fp8-mixed, fp8-mixed/unscaled, bf16-true,
// bf16-true+sr and 16-true (the full CPU program's, but 64-true). Their own translation unit, so that a 2-core build compiles it beside
// the MLP's.
#include "device_train.cuh"

namespace fashion_mnist {

namespace {
template <template <class> class Model>
result run_model(const request& q) {
  using device_detail::train_on_device;
  constexpr auto nearest = optim::update_rounding::nearest;
  if (q.policy == "32-true") return train_on_device<Model, pol::named<"32-true">>(q, nearest);
  if (q.policy == "bf16-mixed") return train_on_device<Model, pol::named<"bf16-mixed">>(q, nearest);
  if (q.policy == "16-mixed") return train_on_device<Model, pol::named<"16-mixed">>(q, nearest, optim::DynamicLossScaler{});
  if (q.policy == "fp8-mixed") return train_on_device<Model, pol::named<"fp8-mixed">>(q, nearest);
  if (q.policy == "fp8-mixed/unscaled") return train_on_device<Model, pol::fp8_mixed_with<fp8::no_scaling>>(q, nearest);
  if (q.policy == "bf16-true") return train_on_device<Model, pol::named<"bf16-true">>(q, nearest);
  if (q.policy == "bf16-true+sr") return train_on_device<Model, pol::named<"bf16-true">>(q, optim::update_rounding::stochastic);
  if (q.policy == "16-true") return train_on_device<Model, pol::named<"16-true">>(q, nearest);
  throw precis::usage_error("train_fashion_mnist: --device cuda: the " + q.model + " does not train under " + q.policy + " on the device");
}
}  // namespace

result run_cnn_vit_on_device(const request& q) { return q.model == "cnn" ? run_model<Cnn>(q) : run_model<Vit>(q); }

}  // namespace fashion_mnist
