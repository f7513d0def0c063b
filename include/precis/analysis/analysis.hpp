// The former name of precis/analysis/all.hpp, kept for existing code: every directory's
// umbrella header is all.hpp.
#pragma once

#include "precis/analysis/all.hpp"
