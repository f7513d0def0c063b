// The two 8-bit formats of the OCP 8-bit Floating Point Specification (OFP8) Rev 1.0, 2023.
#pragma once

#include "precis/format/minifloat.hpp"

namespace precis {

/// OCP E4M3 ("fn"): bias 7, no infinities, NaN = S.1111.111 only, max 448, min subnormal 2^-9.
using float8_e4m3 = minifloat<4, 3, encoding::fn>;

/// OCP E5M2: IEEE-like; bias 15, infinities S.11111.00, NaNs S.11111.{01,10,11}, max 57344.
using float8_e5m2 = minifloat<5, 2, encoding::ieee>;

}  // namespace precis
