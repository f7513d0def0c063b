// An emulated tensor-core GEMM on the CPU: precis::gemm with the accumulator
// precis::tc::accumulator<Arch, In> computes every C entry with Arch's tensor-core arithmetic
// (tc/tensor_core.hpp), bit for bit:
//
//   #include <precis/tc/gemm.hpp>
//   precis::gemm<precis::tc::accumulator<precis::tc::sm90, precis::half>>(1.0f, A, B, 1.0f, C);
//
// A and B must be stored in In, C in float; K must be a multiple of the instruction's K. With
// alpha = beta = 1, C is the instruction's accumulator input, as in D = A B + C on the
// hardware (the entry's k runs in order, one instruction after another). Otherwise the product
// is accumulated from zero and then C = alpha * AB + beta * C in fp32 (beta = 0: C is not
// read), the usual epilogue of a tensor-core GEMM.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "precis/tc/tensor_core.hpp"
#include "precis/tensor/gemm.hpp"

namespace precis::tc {

/// The fp32 accumulator of Arch's tensor cores for inputs of format In, as a GEMM accumulator:
/// precis::gemm<accumulator<Arch, In>>(alpha, A, B, beta, C). alpha and beta are floats.
template <class Arch, class In>
struct accumulator {
  static_assert(supports<Arch, In>,
                "precis::tc::accumulator: this architecture's tensor cores do not take this input format "
                "(precis::tc::block_fma<Arch, In> is not defined)");
  float value = 0.0f;
  accumulator(float v = 0.0f) : value(v) {}  // NOLINT: implicit, so gemm<accumulator<...>>(1.0f, ...) reads naturally
};

}  // namespace precis::tc

namespace precis::detail {

template <class Arch, class In>
struct gemm_override<tc::accumulator<Arch, In>> : std::true_type {
  template <class VA, class VB, class VC>
  static void run(const tc::accumulator<Arch, In>& alpha_, const VA& a, const VB& b, const tc::accumulator<Arch, In>& beta_,
                  const VC& c, int threads) {
    using F = tc::block_fma<Arch, In>;
    static_assert(std::is_same_v<remove_cv_t<storage_of<VA>>, In> && std::is_same_v<remove_cv_t<storage_of<VB>>, In>,
                  "precis::gemm with a precis::tc::accumulator<Arch, In>: A and B must be stored in In");
    static_assert(std::is_same_v<remove_cv_t<storage_of<VC>>, float>,
                  "precis::gemm with a precis::tc::accumulator<Arch, In>: C must be stored in float");
    const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    if (k % F::k != 0) {
      throw invalid_argument("precis::gemm<precis::tc::accumulator<" + std::string(Arch::name) + ", " +
                             std::string(format_traits<In>::name) + ">>: A " + a.shape().str() + " times B " +
                             b.shape().str() + "; expected K a multiple of the instruction's K = " + std::to_string(F::k));
    }
    const float alpha = alpha_.value, beta = beta_.value;
    const bool accumulate_into_c = alpha == 1.0f && beta == 1.0f;
    // every input decoded once: A by rows, B by columns, each dense along k
    const auto ku = static_cast<std::size_t>(k);
    std::vector<tc::detail::operand> ad(static_cast<std::size_t>(m) * ku), bd(static_cast<std::size_t>(n) * ku);
    for (index_t i = 0; i < m; ++i)
      for (index_t p = 0; p < k; ++p) ad[static_cast<std::size_t>(i) * ku + static_cast<std::size_t>(p)] = tc::detail::decode_operand(a(i, p));
    for (index_t j = 0; j < n; ++j)
      for (index_t p = 0; p < k; ++p) bd[static_cast<std::size_t>(j) * ku + static_cast<std::size_t>(p)] = tc::detail::decode_operand(b(p, j));
    parallel_ranges(m, std::max(1, std::min<int>(threads, static_cast<int>(m))), [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        const tc::detail::operand* ai = ad.data() + static_cast<std::size_t>(i) * ku;
        for (index_t j = 0; j < n; ++j) {
          float& cij = c(i, j);
          const tc::detail::operand* bj = bd.data() + static_cast<std::size_t>(j) * ku;
          if (accumulate_into_c) {
            cij = tc::detail::run_steps<F>(cij, ai, bj, ku);
          } else {
            const float ab = tc::detail::run_steps<F>(0.0f, ai, bj, ku);
            cij = beta == 0.0f ? alpha * ab : alpha * ab + beta * cij;
          }
        }
      }
    });
  }
};

}  // namespace precis::detail
