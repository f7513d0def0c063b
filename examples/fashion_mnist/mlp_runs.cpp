// The MLP under every policy (train.hpp): 32-true, 64-true, bf16-mixed, 16-mixed (with dynamic
// loss scaling), fp8-mixed, fp8-mixed/unscaled (the same fp8 casts with every scale 1),
// bf16-true (update rounding to nearest, and stochastic: bf16-true+sr) and 16-true.
#include "train.hpp"

namespace fashion_mnist {

result run_mlp(const request& q) {
  if (q.policy == "32-true") return train_run<Mlp, pol::named<"32-true">>(q);
  if (q.policy == "64-true") return train_run<Mlp, pol::named<"64-true">>(q);
  if (q.policy == "bf16-mixed") return train_run<Mlp, pol::named<"bf16-mixed">>(q);
  if (q.policy == "16-mixed") return train_run<Mlp, pol::named<"16-mixed">, optim::DynamicLossScaler>(q);
  if (q.policy == "fp8-mixed") return train_run<Mlp, pol::named<"fp8-mixed">>(q);
  if (q.policy == "fp8-mixed/unscaled") return train_run<Mlp, pol::fp8_mixed_with<fp8::no_scaling>>(q);
  if (q.policy == "bf16-true") return train_run<Mlp, pol::named<"bf16-true">>(q);
  if (q.policy == "bf16-true+sr") return train_run<Mlp, pol::named<"bf16-true">>(q, optim::update_rounding::stochastic);
  if (q.policy == "16-true") return train_run<Mlp, pol::named<"16-true">>(q);
  throw precis::usage_error("train_fashion_mnist: policy " + q.policy + " is not one of run_mlp's");
}

}  // namespace fashion_mnist
