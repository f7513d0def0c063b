// A new rounding-error study in a dozen lines with precis::analysis: the dot product of two
// bf16 vectors accumulated in bf16 itself, against the exact value and the deterministic and
// probabilistic bounds.
#include <cstdio>
#include <precis/analysis/all.hpp>
#include <precis/precis.hpp>

int main() {
  namespace an = precis::analysis;
  for (precis::index_t n : {100, 1000, 10000}) {
    precis::Tensor<precis::bfloat16> x({n}), y({n});
    precis::fill_uniform(x, -1, 1, 1);
    precis::fill_uniform(y, -1, 1, 2);
    const auto [exact, magnitude] = an::reference_dot(x, y);            // exact, and sum |x_i y_i|
    const auto computed = precis::sum<precis::bfloat16>(x * y, precis::summation::recursive)();
    const double err = static_cast<double>(abs(an::exact_t(static_cast<float>(computed)) - exact) / magnitude);
    const double u = precis::unit_roundoff<precis::bfloat16>();
    std::printf("n = %5ld  error %.3g  gamma_n %.3g  gamma~_n(3) %.3g\n", static_cast<long>(n), err,
                precis::bounds::dot(static_cast<double>(n), u), precis::bounds::probabilistic(static_cast<double>(n), 3, u));
  }
}
