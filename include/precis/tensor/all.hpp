// The tensor engine in one include: tensors and views, conversion, element-wise maps,
// reductions, GEMM, random fills and Eigen interop.
#pragma once

#include "precis/tensor/astype.hpp"
#include "precis/tensor/eigen.hpp"
#include "precis/tensor/elementwise.hpp"
#include "precis/tensor/gemm.hpp"
#include "precis/tensor/random.hpp"
#include "precis/tensor/reduce.hpp"
#include "precis/tensor/shape.hpp"
#include "precis/tensor/tensor.hpp"
