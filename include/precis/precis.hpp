// precis: header-only numerics and mixed-precision autodiff. The umbrella header: everything
// that needs nothing beyond Eigen —
//   formats and rounding (format/), tensors and GEMM (tensor/), precision policies (policy/),
//   the op layer and the tape (ops/, autodiff/), layers (nn/), optimizers, loss scalers and
//   checkpoints (optim/), fp8 scaling (fp8/), the tensor-core models (tc/).
// The parts with dependencies of their own are included on their own, each with its CMake
// component: precis/analysis/all.hpp and precis/autodiff/gradcheck.hpp (precis::analysis,
// Boost.Multiprecision), precis/data/idx.hpp (precis::data, zlib), precis/dist/all.hpp
// (precis::dist, MPI), precis/cuda/all.cuh (precis::cuda, nvcc).
#pragma once

#include "precis/config.hpp"
#include "precis/error.hpp"
#include "precis/format/all.hpp"
#include "precis/tensor/all.hpp"
#include "precis/policy/all.hpp"
#include "precis/autodiff/all.hpp"
#include "precis/nn/all.hpp"
#include "precis/optim/all.hpp"
#include "precis/fp8/all.hpp"
#include "precis/tc/all.hpp"
