// Optimizers, loss scalers and the mixed-precision wrapper with master weights.
#pragma once

#include "precis/optim/mixed_precision.hpp"
#include "precis/optim/optimizers.hpp"
#include "precis/optim/scaler.hpp"
