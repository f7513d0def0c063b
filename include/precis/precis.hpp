// precis: header-only numerics and mixed-precision autodiff. The umbrella header.
#pragma once

#include "precis/config.hpp"
#include "precis/error.hpp"
#include "precis/format/format.hpp"
#include "precis/tensor/all.hpp"
#include "precis/policy/all.hpp"
#include "precis/autodiff/all.hpp"
