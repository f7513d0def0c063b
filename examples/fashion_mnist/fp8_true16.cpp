// The demo's runs under fp8-mixed, fp8-mixed/unscaled (the same fp8 casts with every scale 1),
// bf16-true (update rounding to nearest, and stochastic: bf16-true+sr) and 16-true, for every
// model (train.hpp).
#include "train.hpp"

namespace fashion_mnist {

result run_fp8_true16(const request& q) {
  if (q.policy == "fp8-mixed") return train_model<pol::named<"fp8-mixed">>(q);
  if (q.policy == "fp8-mixed/unscaled") return train_model<pol::fp8_mixed_with<fp8::no_scaling>>(q);
  if (q.policy == "bf16-true") return train_model<pol::named<"bf16-true">>(q);
  if (q.policy == "bf16-true+sr") return train_model<pol::named<"bf16-true">>(q, optim::update_rounding::stochastic);
  if (q.policy == "16-true") return train_model<pol::named<"16-true">>(q);
  throw precis::usage_error("train_fashion_mnist: policy " + q.policy + " is not one of run_fp8_true16's");
}

}  // namespace fashion_mnist
