// fp8 scaling in one include: recipes (current, delayed, none), per-tensor and per-block scales,
// and the scaling state a tape keeps for its fp8 GEMMs.
#pragma once

#include "precis/fp8/scaling.hpp"
