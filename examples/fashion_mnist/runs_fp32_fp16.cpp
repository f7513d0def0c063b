// The default plan's runs under the policies that store fp32, fp64 or fp16 (train.hpp): every
// model under 32-true and 16-mixed (with dynamic loss scaling), the MLP also under 64-true and
// 16-true. A policy's ops, GEMMs and optimizer compile once here for all its models.
#include "train.hpp"

namespace fashion_mnist {

namespace {
template <template <class> class Model>
result run_model(const request& q) {
  if (q.policy == "32-true") return train_run<Model, pol::named<"32-true">>(q);
  if (q.policy == "16-mixed") return train_run<Model, pol::named<"16-mixed">, optim::DynamicLossScaler>(q);
  throw precis::usage_error("train_fashion_mnist: the " + q.model + " under " + q.policy + " is not one of run_fp32_fp16's");
}
}  // namespace

result run_fp32_fp16(const request& q) {
  if (q.model == "mlp") {
    if (q.policy == "64-true") return train_run<Mlp, pol::named<"64-true">>(q);
    if (q.policy == "16-true") return train_run<Mlp, pol::named<"16-true">>(q);
    return run_model<Mlp>(q);
  }
  return q.model == "cnn" ? run_model<Cnn>(q) : run_model<Vit>(q);
}

}  // namespace fashion_mnist
