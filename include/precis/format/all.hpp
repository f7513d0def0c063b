// The scalar-format layer: formats, traits, rounding, scalar and bulk conversion.
#pragma once

#include "precis/format/bfloat16.hpp"
#include "precis/format/convert.hpp"
#include "precis/format/float8.hpp"
#include "precis/format/format_table.hpp"
#include "precis/format/format_traits.hpp"
#include "precis/format/half.hpp"
#include "precis/format/minifloat.hpp"
#include "precis/format/random.hpp"
#include "precis/format/round_to.hpp"
#include "precis/format/rounding.hpp"
#include "precis/format/tf32.hpp"
