// The CNN and the ViT under the policies outside the default plan (train.hpp): 64-true,
// fp8-mixed, fp8-mixed/unscaled, bf16-true (update rounding to nearest, and stochastic:
// bf16-true+sr) and 16-true. Compiled into train_fashion_mnist_full only (`make demo-full`).
#include "train.hpp"

namespace fashion_mnist {

namespace {
template <template <class> class Model>
result run_more(const request& q) {
  if (q.policy == "64-true") return train_run<Model, pol::named<"64-true">>(q);
  if (q.policy == "fp8-mixed") return train_run<Model, pol::named<"fp8-mixed">>(q);
  if (q.policy == "fp8-mixed/unscaled") return train_run<Model, pol::fp8_mixed_with<fp8::no_scaling>>(q);
  if (q.policy == "bf16-true") return train_run<Model, pol::named<"bf16-true">>(q);
  if (q.policy == "bf16-true+sr") return train_run<Model, pol::named<"bf16-true">>(q, optim::update_rounding::stochastic);
  if (q.policy == "16-true") return train_run<Model, pol::named<"16-true">>(q);
  throw precis::usage_error("train_fashion_mnist: policy " + q.policy + " is not one of run_cnn_vit_more's");
}

result run_cnn_vit_more_here(const request& q) { return q.model == "cnn" ? run_more<Cnn>(q) : run_more<Vit>(q); }

// linked into train_fashion_mnist_full: its runs become the program's before main starts
[[maybe_unused]] const bool registered = (run_cnn_vit_more = &run_cnn_vit_more_here, true);
}  // namespace

}  // namespace fashion_mnist
