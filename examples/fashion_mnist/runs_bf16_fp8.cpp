// The default plan's runs under the policies that store bf16 or cast to fp8 (train.hpp): every
// model under bf16-mixed, the MLP also under fp8-mixed, fp8-mixed/unscaled (the same fp8 casts
// with every scale 1) and bf16-true (update rounding to nearest, and stochastic: bf16-true+sr).
#include "train.hpp"

namespace fashion_mnist {

result run_bf16_fp8(const request& q) {
  if (q.policy == "bf16-mixed") {
    if (q.model == "mlp") return train_run<Mlp, pol::named<"bf16-mixed">>(q);
    return q.model == "cnn" ? train_run<Cnn, pol::named<"bf16-mixed">>(q) : train_run<Vit, pol::named<"bf16-mixed">>(q);
  }
  if (q.model == "mlp") {
    if (q.policy == "fp8-mixed") return train_run<Mlp, pol::named<"fp8-mixed">>(q);
    if (q.policy == "fp8-mixed/unscaled") return train_run<Mlp, pol::fp8_mixed_with<fp8::no_scaling>>(q);
    if (q.policy == "bf16-true") return train_run<Mlp, pol::named<"bf16-true">>(q);
    if (q.policy == "bf16-true+sr") return train_run<Mlp, pol::named<"bf16-true">>(q, optim::update_rounding::stochastic);
  }
  throw precis::usage_error("train_fashion_mnist: the " + q.model + " under " + q.policy + " is not one of run_bf16_fp8's");
}

}  // namespace fashion_mnist
