// libFuzzer target: MixedPrecisionOptimizer::load on arbitrary bytes, for a small bf16-mixed MLP
// with Adam and a dynamic scaler (the seed corpus holds checkpoints it saved). A load either
// succeeds or throws precis::error and leaves every parameter, master and counter as it was.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <precis/precis.hpp>

namespace {

using P = precis::policy::named<"bf16-mixed">;

struct model {
  precis::nn::MLP<P> net{{3, 4, 2}, precis::nn::activation::tanh, 5};
  precis::optim::MixedPrecisionOptimizer<P, precis::optim::Adam, precis::optim::DynamicLossScaler> opt{
      net, precis::optim::Adam{.lr = 0.01}, precis::optim::DynamicLossScaler{}};

  std::vector<float> snapshot() const {
    std::vector<float> s;
    for (auto* p : const_cast<precis::nn::MLP<P>&>(net).parameters()) {
      for (auto v : p->value) s.push_back(static_cast<float>(v));
    }
    for (std::size_t i = 0; i < 4; ++i) {
      const auto m = opt.master(i);
      for (precis::index_t k = 0; k < m.size(); ++k) s.push_back(m.data()[k]);
    }
    s.push_back(static_cast<float>(opt.loss_scale()));
    s.push_back(static_cast<float>(opt.steps_taken()));
    return s;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static model m;
  static const std::string path = "/tmp/precis_fuzz_checkpoint_" + std::to_string(::getpid()) + ".ckpt";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  const auto before = m.snapshot();
  try {
    m.opt.load(path);
  } catch (const precis::error&) {
    // rejected: nothing may have changed (compare bit patterns: NaN != NaN)
    const auto after = m.snapshot();
    if (after.size() != before.size()) __builtin_trap();
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (__builtin_memcmp(&after[i], &before[i], sizeof(float)) != 0) __builtin_trap();
    }
  }
  return 0;
}
