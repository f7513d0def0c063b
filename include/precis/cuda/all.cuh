// The CUDA backend in one include, for .cu translation units: device tensors and conversions,
// and the tensor-core GEMM (precis::cuda; link precis::cuda).
#pragma once

#include "precis/cuda/device.cuh"
#include "precis/cuda/gemm.cuh"
