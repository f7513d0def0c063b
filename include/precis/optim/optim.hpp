// The former name of precis/optim/all.hpp, kept for existing code: every directory's
// umbrella header is all.hpp.
#pragma once

#include "precis/optim/all.hpp"
