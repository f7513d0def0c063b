// Compiled without instruction-set flags.
#include <precis/tensor/all.hpp>

#include "products.hpp"

#if defined(__AVX2__)
#error "this translation unit must be compiled without -mavx2"
#endif

namespace mixed_flags {
MIXED_FLAGS_PRODUCT(float, product_f_without_avx2, )
MIXED_FLAGS_PRODUCT(double, product_d_without_avx2, )
}  // namespace mixed_flags
