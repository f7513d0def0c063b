// The CNN and the ViT under the default plan's policies (train.hpp, conv_default_policies):
// 32-true, bf16-mixed and 16-mixed (with dynamic loss scaling).
#include "train.hpp"

namespace fashion_mnist {

namespace {
template <template <class> class Model>
result run_mixed(const request& q) {
  if (q.policy == "32-true") return train_run<Model, pol::named<"32-true">>(q);
  if (q.policy == "bf16-mixed") return train_run<Model, pol::named<"bf16-mixed">>(q);
  if (q.policy == "16-mixed") return train_run<Model, pol::named<"16-mixed">, optim::DynamicLossScaler>(q);
  throw precis::usage_error("train_fashion_mnist: policy " + q.policy + " is not one of run_cnn_vit_mixed's");
}
}  // namespace

result run_cnn_vit_mixed(const request& q) { return q.model == "cnn" ? run_mixed<Cnn>(q) : run_mixed<Vit>(q); }

}  // namespace fashion_mnist
