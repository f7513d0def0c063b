// The former name of precis/format/all.hpp, kept for existing code: every directory's
// umbrella header is all.hpp.
#pragma once

#include "precis/format/all.hpp"
