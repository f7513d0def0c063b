// The op layer (precis/ops/): every op, each defined once with its policy entry, forward and
// backward, its tape front end (Var arguments) and the eager calls ops<P>::name(tensors).
#pragma once

#include "precis/ops/eager.hpp"
