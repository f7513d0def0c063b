// Compiled with -mavx2 -mfma.
#include <precis/tensor/all.hpp>

#include "products.hpp"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "this translation unit must be compiled with -mavx2 -mfma"
#endif

#define MIXED_FLAGS_AS_VIEW(t) (t).view()

namespace mixed_flags {
MIXED_FLAGS_PRODUCT(float, product_f_with_avx2, MIXED_FLAGS_AS_VIEW)
MIXED_FLAGS_PRODUCT(double, product_d_with_avx2, MIXED_FLAGS_AS_VIEW)
}  // namespace mixed_flags
