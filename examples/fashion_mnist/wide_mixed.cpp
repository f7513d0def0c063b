// The demo's runs under 32-true, 64-true, bf16-mixed and 16-mixed (with dynamic loss
// scaling), for every model (train.hpp).
#include "train.hpp"

namespace fashion_mnist {

result run_wide_mixed(const request& q) {
  if (q.policy == "32-true") return train_model<pol::named<"32-true">>(q);
  if (q.policy == "64-true") return train_model<pol::named<"64-true">>(q);
  if (q.policy == "bf16-mixed") return train_model<pol::named<"bf16-mixed">>(q);
  if (q.policy == "16-mixed") return train_model<pol::named<"16-mixed">, optim::DynamicLossScaler>(q);
  throw precis::usage_error("train_fashion_mnist: policy " + q.policy + " is not one of run_wide_mixed's");
}

}  // namespace fashion_mnist
