// precis::gradcheck: gradients from a tape under policy P compared with references at the same
// point (the parameters rounded to P's storage):
//   - the same graph on a Tape<true_<gradcheck_real>> (50 decimal digits), whose gradients are
//     exact to far below any policy's unit roundoff: this measures P's rounding errors;
//   - central finite differences of that multiprecision loss (step 2^-60 max(1, |x|), so the
//     O(h^2) truncation and O(eps/h) cancellation errors are below 1e-30): this checks the
//     backward rules themselves, independently of the tape;
//   - optionally, central finite differences of the loss evaluated in double (accurate to
//     about eps^(2/3), so meaningful only for a double-precision policy).
// The graph is a generic callable, instantiated once per tape type:
//   auto loss = [](auto& tape, const auto& p) { return sum(tanh(matmul(p[0], p[1]))); };
//   auto r = precis::gradcheck<precis::policy::named<"bf16-mixed">>(loss, {A, B}, {.ops = 3});
// Needs Boost (header-only Boost.Multiprecision); not included by precis.hpp.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "precis/analysis/bounds.hpp"
#include "precis/autodiff/all.hpp"

namespace precis {

/// The reference type of gradcheck: 50 significant decimal digits (166 bits).
using gradcheck_real = boost::multiprecision::cpp_bin_float_50;

struct gradcheck_options {
  /// Ops on the longest path from a parameter to the loss (k in the tolerance).
  int ops = 1;
  /// Bound assumed on the relative condition number of each op at the test inputs (kappa).
  double conditioning = 4;
  /// Also compare with central finite differences in double.
  bool finite_differences = false;
  /// Check the backward rules: the multiprecision tape against multiprecision differences
  /// (policy-independent, so one policy per graph is enough; it costs 2 evaluations per element).
  bool check_rules = true;
  /// Tolerance of the finite-difference comparison.
  double fd_tolerance = 1e-6;
};

/// The normwise bound a gradient computed under P is held to: gamma_{2 k kappa}(u) with u the
/// unit roundoff of P's activation/gradient storage. Each of the k ops on a path rounds its
/// value once and its gradient contribution once (2k roundings of relative size <= u, the wide
/// accumulators' own errors being smaller), and each rounding error is amplified by at most
/// kappa on its way to the parameter's gradient (first-order analysis, Higham 2002 ch. 3).
/// Under an fp8 policy u is the largest of the activations' and the fp8 GEMM formats' (e5m2's
/// 2^-3), for which the bound is vacuous (infinite) beyond a handful of ops.
template <class P>
double gradient_tolerance(int ops, double conditioning = 4) {
  double u = unit_roundoff<typename P::activation_type>();
  if constexpr (policy::fp8_policy<P>) {
    u = std::max({u, double(unit_roundoff<typename P::fp8_forward>()), double(unit_roundoff<typename P::fp8_backward>())});
  }
  return bounds::gamma(2.0 * ops * conditioning, u);
}

struct gradcheck_result {
  std::string policy;
  /// Per parameter: max_i |g_i - r_i| / max_i |r_i| against the multiprecision gradient.
  std::vector<double> error;
  /// Per parameter, the same against finite differences in double (empty unless requested).
  std::vector<double> fd_error;
  /// Per parameter: the multiprecision tape's gradient against multiprecision finite
  /// differences (a wrong backward rule shows here whatever the policy).
  std::vector<double> rule_error;
  /// Bound on rule_error: the accuracy of the multiprecision difference quotient.
  double rule_tolerance = 1e-20;
  double tolerance = 0;
  double fd_tolerance = 0;
  double loss = 0;

  double worst() const { return error.empty() ? 0 : *std::max_element(error.begin(), error.end()); }
  double worst_fd() const { return fd_error.empty() ? 0 : *std::max_element(fd_error.begin(), fd_error.end()); }
  double worst_rule() const { return rule_error.empty() ? 0 : *std::max_element(rule_error.begin(), rule_error.end()); }
  bool passed() const { return worst() <= tolerance && worst_fd() <= fd_tolerance && worst_rule() <= rule_tolerance; }
  std::string report() const {
    std::ostringstream os;
    os << policy << ": loss " << loss << ", tolerance " << tolerance << "; error per parameter vs multiprecision:";
    for (double e : error) os << ' ' << e;
    os << "; multiprecision tape vs multiprecision differences (tolerance " << rule_tolerance << "):";
    for (double e : rule_error) os << ' ' << e;
    if (!fd_error.empty()) {
      os << "; vs finite differences (tolerance " << fd_tolerance << "):";
      for (double e : fd_error) os << ' ' << e;
    }
    return os.str();
  }
};

namespace detail::ad {

/// max |a - b| / max |b| (max |a| when b is zero), evaluated in gradcheck_real.
inline double normwise_error(const Tensor<gradcheck_real>& a, const Tensor<gradcheck_real>& b) {
  gradcheck_real num = 0, den = 0;
  for (index_t i = 0; i < a.size(); ++i) {
    num = std::max(num, gradcheck_real(abs(a.data()[i] - b.data()[i])));
    den = std::max(den, gradcheck_real(abs(b.data()[i])));
  }
  return static_cast<double>(den > 0 ? gradcheck_real(num / den) : num);
}

/// The loss and the gradient with respect to every parameter, on a Tape<Q>, at `at` (R: the
/// type of the point, double or gradcheck_real, exactly representable in Q's parameter type).
template <class Q, class F, class R>
gradcheck_real loss_and_gradients(F& f, const std::vector<Tensor<R>>& at, std::vector<Tensor<gradcheck_real>>* grads) {
  using S = typename Q::param_type;
  using G = grad_storage_t<Q, S>;
  std::vector<Tensor<S>> values;
  std::vector<Tensor<G>> g;
  for (const auto& x : at) {
    auto v = Tensor<S>::uninitialized(x.shape());
    for (index_t i = 0; i < x.size(); ++i) v.data()[i] = detail::store<S>(static_cast<default_compute_t<S>>(x.data()[i]));
    values.push_back(std::move(v));
    g.emplace_back(x.shape());
  }
  Tape<Q> tape;
  std::vector<Var<Q, S>> vars;
  for (std::size_t i = 0; i < at.size(); ++i) vars.push_back(tape.param(values[i].view(), g[i].view()));
  const auto loss = f(tape, vars);
  using LS = typename detail::remove_cvref_t<decltype(loss)>::storage_type;
  if (loss.size() != 1) throw shape_error("precis::gradcheck: the loss has shape " + loss.shape().str() + "; expected one element");
  const gradcheck_real value(detail::load<default_compute_t<LS>>(*loss.value().data()));
  if (grads != nullptr) {
    tape.backward(loss);
    grads->clear();
    for (const auto& gi : g) {
      Tensor<gradcheck_real> d(gi.shape());
      for (index_t i = 0; i < gi.size(); ++i) d.data()[i] = gradcheck_real(detail::load<default_compute_t<G>>(gi.data()[i]));
      grads->push_back(std::move(d));
    }
  }
  return value;
}

/// Central differences of the loss on a Tape<Q> at `point`, with steps h_i = step * max(1, |x_i|).
template <class Q, class F, class R>
std::vector<Tensor<gradcheck_real>> central_differences(F& f, const std::vector<Tensor<R>>& point, const R& step) {
  std::vector<Tensor<gradcheck_real>> out;
  auto shifted = point;
  for (std::size_t k = 0; k < point.size(); ++k) {
    Tensor<gradcheck_real> fd(point[k].shape());
    for (index_t i = 0; i < point[k].size(); ++i) {
      using std::abs;
      const R x0 = point[k].data()[i];
      const R h = step * (abs(x0) > R(1) ? R(abs(x0)) : R(1));
      shifted[k].data()[i] = x0 + h;
      const gradcheck_real up = loss_and_gradients<Q>(f, shifted, static_cast<std::vector<Tensor<gradcheck_real>>*>(nullptr));
      shifted[k].data()[i] = x0 - h;
      const gradcheck_real down = loss_and_gradients<Q>(f, shifted, static_cast<std::vector<Tensor<gradcheck_real>>*>(nullptr));
      shifted[k].data()[i] = x0;
      // the step actually taken: (x0 + h) - (x0 - h) is exact in R for these h
      fd.data()[i] = (up - down) / gradcheck_real(R(2) * h);
    }
    out.push_back(std::move(fd));
  }
  return out;
}

}  // namespace detail::ad

/// Runs f on a Tape<P> at `at` rounded to P's parameter type, and compares the gradients with
/// the multiprecision tape (and, on request, with central differences in double).
template <class P, class F>
gradcheck_result gradcheck(F&& f, const std::vector<Tensor<double>>& at, const gradcheck_options& opt = {}) {
  using S = typename P::param_type;
  // the point: the parameters as P stores them, so every reference differentiates there
  std::vector<Tensor<double>> point;
  for (const auto& x : at) {
    auto p = Tensor<double>::uninitialized(x.shape());
    for (index_t i = 0; i < x.size(); ++i) {
      p.data()[i] = detail::load<double>(detail::load<default_compute_t<S>>(detail::store<S>(detail::load<default_compute_t<S>>(x.data()[i]))));
    }
    point.push_back(std::move(p));
  }
  gradcheck_result r;
  r.policy = P::name();
  r.tolerance = gradient_tolerance<P>(opt.ops, opt.conditioning);
  std::vector<Tensor<gradcheck_real>> g, ref;
  r.loss = static_cast<double>(detail::ad::loss_and_gradients<P>(f, point, &g));
  using exact = policy::true_<gradcheck_real>;
  detail::ad::loss_and_gradients<exact>(f, point, &ref);
  for (std::size_t i = 0; i < g.size(); ++i) r.error.push_back(detail::ad::normwise_error(g[i], ref[i]));
  // the backward rules, checked against multiprecision differences
  if (opt.check_rules) {
  std::vector<Tensor<gradcheck_real>> exact_point;
  for (const auto& x : point) {
    Tensor<gradcheck_real> e(x.shape());
    for (index_t i = 0; i < x.size(); ++i) e.data()[i] = gradcheck_real(x.data()[i]);
    exact_point.push_back(std::move(e));
  }
  const auto mp_fd = detail::ad::central_differences<exact>(f, exact_point, gradcheck_real(std::ldexp(1.0, -60)));
  for (std::size_t i = 0; i < ref.size(); ++i) r.rule_error.push_back(detail::ad::normwise_error(ref[i], mp_fd[i]));
  }
  if (opt.finite_differences) {
    r.fd_tolerance = opt.fd_tolerance;
    const auto fd = detail::ad::central_differences<policy::true_<double>>(f, point, std::cbrt(std::numeric_limits<double>::epsilon()));
    for (std::size_t i = 0; i < g.size(); ++i) r.fd_error.push_back(detail::ad::normwise_error(g[i], fd[i]));
  }
  return r;
}

}  // namespace precis
