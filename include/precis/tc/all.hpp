// The tensor-core models in one include: each generation's inner-product arithmetic, bit for
// bit, and the emulated tensor-core GEMM accumulator.
#pragma once

#include "precis/tc/gemm.hpp"
#include "precis/tc/tensor_core.hpp"
