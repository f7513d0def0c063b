// An op defined outside precis, in the op layer's form (docs/architecture.md, "Adding an op"):
// softplus(x) = log(1 + e^x), with its policy entry, forward and backward in one struct. The
// tape op and the eager call come from precis::record and precis::evaluate; the op is then
// gradchecked under 64-true, 32-true, bf16-mixed and 16-mixed. Exit status 1 if any check fails.
#include <cmath>
#include <cstdio>
#include <precis/autodiff/gradcheck.hpp>
#include <precis/precis.hpp>
#include <tuple>

namespace my {

/// softplus: e^x overflows fp16 above x = 11.09, so the policy entry is "needs wide" (computed
/// in fp32 under the mixed policies).
struct softplus : precis::op::def<precis::policy::safety::needs_wide> {
  static constexpr std::string_view name = "softplus";
  static constexpr std::string_view reason = "log(1 + e^x): e^x overflows fp16 for x > 11.09";

  static precis::Shape shape(const attrs&, const precis::Shape& x) { return x; }

  /// y = log1p(e^-|x|) + max(x, 0), stable for large |x|, in T::arithmetic (fp32 for 16-bit storage).
  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx&, const attrs&, const precis::TensorView<O>& y, saved<T>&, const precis::TensorView<const X>& x) {
    using A = typename T::arithmetic;
    precis::map_into<A>("my::softplus", y, [](const A& v) {
      using std::exp;
      using std::log;
      using std::abs;
      return A(log(A(1) + exp(A(-abs(v)))) + (v > A(0) ? v : A(0)));
    }, x);
  }

  /// dx += g sigmoid(x).
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx&, const attrs&, const saved<T>&, const precis::TensorView<const G>& gy,
                       const precis::TensorView<const O>&, const std::tuple<precis::TensorView<const X>>& x,
                       const std::tuple<precis::TensorView<GX>>& gx) {
    if (std::get<0>(gx).data() == nullptr) return;  // the input needs no gradient
    using A = typename T::arithmetic;
    precis::map_into<A>("my::softplus", std::get<0>(gx), [](const A& acc, const A& g, const A& v) {
      using std::exp;
      return A(acc + g / (A(1) + exp(-v)));
    }, std::get<0>(gx).as_const(), gy, std::get<0>(x));
  }
};

/// The two front ends: a Var records on its tape, a tensor is evaluated under a policy.
template <class P, class S>
auto softplus_of(const precis::Var<P, S>& x) {
  return precis::record<softplus>({}, x);
}
template <class P, precis::tensor_like X>
auto softplus_of(const X& x) {
  return precis::evaluate<P, softplus>({}, x);
}

}  // namespace my

template <class P>
bool check(const char* name) {
  precis::Tensor<double> x(precis::Shape{3, 4}), c(precis::Shape{3, 4});
  precis::fill_uniform(x.view(), -3, 3, 1);
  precis::fill_uniform(c.view(), -1, 1, 2);
  precis::gradcheck_options o;
  o.ops = 3;  // softplus, mul, sum
  o.finite_differences = o.check_rules = std::is_same_v<P, precis::policy::true_<double>>;
  const auto r = precis::gradcheck<P>([](auto&, const auto& p) { return sum(mul(my::softplus_of(p[0]), p[1])); }, {x, c}, o);
  using T = precis::policy::op_types<P, my::softplus, typename P::param_type>;
  std::printf("%-11s softplus stores %-8s arithmetic %-8s gradcheck error %.2e (tolerance %.2e) -> %s\n", name,
              std::string(precis::format_traits<typename T::storage>::name).c_str(),
              std::string(precis::format_traits<typename T::arithmetic>::name).c_str(), r.worst(), r.tolerance,
              r.passed() ? "passed" : "FAILED");
  return r.passed();
}

int main() {
  // eager, under bf16-mixed: the result is fp32 (needs wide)
  const precis::Tensor<float> x = precis::Tensor<float>::full(precis::Shape{2}, 20.0f);
  const auto y = my::softplus_of<precis::policy::named<"bf16-mixed">>(x);
  std::printf("eager softplus(20) under bf16-mixed = %.6f\n", static_cast<double>(y.data()[0]));
  bool ok = check<precis::policy::named<"64-true">>("64-true");
  ok = check<precis::policy::named<"32-true">>("32-true") && ok;
  ok = check<precis::policy::named<"bf16-mixed">>("bf16-mixed") && ok;
  ok = check<precis::policy::named<"16-mixed">>("16-mixed") && ok;
  return ok ? 0 : 1;
}
