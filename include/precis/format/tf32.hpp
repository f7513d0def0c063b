// NVIDIA TensorFloat-32: fp32's 8-bit exponent with 10 stored mantissa bits (19 bits used).
#pragma once

#include "precis/format/minifloat.hpp"

namespace precis {

/// tf32 as a value type: its bits() are the 19-bit encoding (sign, 8 exponent, 10 mantissa
/// bits). Note that tensor cores read fp32 operands and *truncate* them to tf32; precis's
/// conversion rounds in whichever mode it is asked for (use rounding::toward_zero to model
/// the hardware).
using tf32 = minifloat<8, 10, encoding::ieee>;

}  // namespace precis
