// The former name of precis/dist/all.hpp, kept for existing code: every directory's
// umbrella header is all.hpp.
#pragma once

#include "precis/dist/all.hpp"
