// Precision policies from a user's side: one model written once and run under every named
// policy (chosen from the command line through policy::dispatch), a user policy made by
// inheritance (reclassify one op), and one entry changed by specialization (a wider
// accumulator for matmul) -- all without touching precis's headers.
//   policy_extension [policy-name ...]     default: every named policy, then the user's
#include <cstdio>
#include <precis/precis.hpp>
#include <string>
#include <vector>

namespace pol = precis::policy;

/// fp16-mixed, but gelu computed in fp32 as well (say a user measured it drifting in fp16).
struct my_policy : pol::mixed<precis::half> {
  template <class Op>
  static constexpr pol::safety safety_of =
      std::is_same_v<Op, precis::op::gelu> ? pol::safety::needs_wide : pol::op_safety<Op>::value;
  static std::string name() { return "my-16-mixed"; }
};

/// ... and its matmul accumulates in double (one entry of the table, by specialization).
template <class In>
struct precis::policy::op_types<my_policy, precis::op::matmul, In, In> {
  using storage = precis::half;
  using arithmetic = float;
  using accumulator = double;
  using output = precis::half;
};

/// A two-layer classifier head written once: types come from the policy.
template <class P>
void run() {
  using O = precis::ops<P>;
  using L = typename P::param_type;
  precis::Tensor<L> x({8, 16}), w1({32, 16}), b1({32}), w2({10, 32}), b2({10});
  precis::fill_normal(x, 0, 1, 1);
  precis::fill_normal(w1, 0, 0.25, 2);
  precis::fill_normal(w2, 0, 0.18, 3);
  const auto h = O::gelu(O::linear(x, w1, b1));
  const auto logits = O::linear(h, w2, b2);
  const std::vector<std::int64_t> labels{0, 1, 2, 3, 4, 5, 6, 7};
  const auto loss = O::cross_entropy(logits, labels);
  using H = precis::storage_of<decltype(h)>;
  using Loss = precis::storage_of<decltype(loss)>;
  std::printf("%-16s hidden stored as %-8s loss %.6f (in %s)\n", P::name().c_str(),
              std::string(precis::format_traits<H>::name).c_str(),
              precis::load<double>(loss.data()[0]), std::string(precis::format_traits<Loss>::name).c_str());
}

int main(int argc, char** argv) {
  std::vector<std::string> names(argv + 1, argv + argc);
  if (names.empty()) names.assign(pol::names.begin(), pol::names.end());
  try {
    for (const auto& name : names) pol::dispatch(name, []<class P>() { run<P>(); });
  } catch (const precis::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  if (argc == 1) run<my_policy>();
  return 0;
}
