// precis::nn in one include: modules, parameters and the layers built on the tape.
#pragma once

#include "precis/nn/nn.hpp"
