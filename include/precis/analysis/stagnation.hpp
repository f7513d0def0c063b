// Stagnation of sums computed in a format (numerics cases 2 and 3, docs/numerics.md):
//   ones:     1 + 1 + 1 + ... until the sum stops growing (at 2^t for t significand bits);
//   harmonic: 1 + 1/2 + 1/3 + ... until adding the next term leaves the sum unchanged
//             (Higham & Pranesh, "Simulating low precision floating-point arithmetic", SIAM J.
//             Sci. Comput. 41(5), 2019, Table 3.1; chop's demo_harmonic).
// Every operation is rounded once, in the given mode, directly into F (add_in, summation.hpp),
// and 1/k is rounded from a 1000-bit quotient, so nothing rounds twice.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "precis/analysis/reference.hpp"
#include "precis/analysis/summation.hpp"
#include "precis/error.hpp"
#include "precis/format/round_to.hpp"

namespace precis::analysis {

template <class F>
struct stagnation_result {
  std::uint64_t terms = 0;  // number of terms added when the sum first failed to change
  F sum{};                  // the stagnated sum
  bool stagnated = false;   // false: max_terms reached first
};

namespace detail {

template <class F>
F reciprocal_rounded(std::uint64_t k, rounding mode) {
  return round_to<F>(exact_t(1) / exact_t(k), mode, study_overflow<F>);
}

}  // namespace detail

/// Adds term(k) for k = 1, 2, ... to a sum in F, rounding in `mode`, until a term leaves the
/// sum unchanged (or max_terms is reached). observe(k, sum) sees every partial sum that changed.
template <floating F, class Term, class Observe>
stagnation_result<F> sum_until_stagnation(Term term, rounding mode, std::uint64_t max_terms, Observe observe) {
  stagnation_result<F> r;
  for (std::uint64_t k = 1; k <= max_terms; ++k) {
    const F next = add_in(r.sum, term(k), mode);
    r.terms = k;
    if (next == r.sum) {
      r.stagnated = true;
      return r;
    }
    r.sum = next;
    observe(k, r.sum);
  }
  return r;
}

template <floating F, class Term>
stagnation_result<F> sum_until_stagnation(Term term, rounding mode, std::uint64_t max_terms) {
  return sum_until_stagnation<F>(term, mode, max_terms, [](std::uint64_t, const F&) {});
}

/// Sum of ones in F, rounded in `mode`, until it stops growing.
template <floating F>
stagnation_result<F> ones_stagnation(rounding mode, std::uint64_t max_terms) {
  const F one = round_to<F>(1.0, rounding::nearest_even, overflow::saturate);
  return sum_until_stagnation<F>([&](std::uint64_t) { return one; }, mode, max_terms);
}

/// Harmonic series in F, each 1/k and each partial sum rounded in `mode`, until a term no
/// longer changes the sum; observe(k, sum) as in sum_until_stagnation.
template <floating F, class Observe>
stagnation_result<F> harmonic_stagnation(rounding mode, std::uint64_t max_terms, Observe observe) {
  return sum_until_stagnation<F>([&](std::uint64_t k) { return detail::reciprocal_rounded<F>(k, mode); },
                                 mode, max_terms, observe);
}

template <floating F>
stagnation_result<F> harmonic_stagnation(rounding mode, std::uint64_t max_terms) {
  return harmonic_stagnation<F>(mode, max_terms, [](std::uint64_t, const F&) {});
}

}  // namespace precis::analysis

namespace precis::analysis {

/// How a weight update w <- w + delta is applied in F (numerics case 7: Micikevicius et al.,
/// "Mixed Precision Training", ICLR 2018; Zamirai et al., "Revisiting BFloat16 Training", 2020).
enum class update_rule {
  nearest,     // round to nearest: stagnates once |delta| < ulp(w)/2
  stochastic,  // stochastic rounding: right in expectation
  kahan,       // compensated: the lost low part is carried to the next step (all ops in F)
};

/// w0 + delta + delta + ... (steps times), each update applied in F by `rule`.
template <floating F, std::uniform_random_bit_generator Gen>
F repeated_update(const F& w0, const F& delta, std::uint64_t steps, update_rule rule, Gen& gen) {
  if (rule == update_rule::kahan) {
    compensated_accumulator<F> acc(w0);
    for (std::uint64_t i = 0; i < steps; ++i) acc.add(delta);
    return acc.sum;
  }
  F w = w0;
  for (std::uint64_t i = 0; i < steps; ++i)
    w = rule == update_rule::nearest ? add_in(w, delta, rounding::nearest_even) : add_in(w, delta, rounding::stochastic, gen);
  return w;
}

}  // namespace precis::analysis
