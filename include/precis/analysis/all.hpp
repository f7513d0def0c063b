// The analysis layer in one include: error metrics, bounds from the literature, exact
// references, and underflow/overflow statistics.
#pragma once

#include "precis/analysis/bounds.hpp"
#include "precis/analysis/metrics.hpp"
#include "precis/analysis/reference.hpp"
#include "precis/analysis/stagnation.hpp"
#include "precis/analysis/summation.hpp"
#include "precis/analysis/underflow.hpp"
