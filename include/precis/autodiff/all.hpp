// The reverse-mode tape and its differentiable ops (gradcheck.hpp, which needs Boost, is
// included separately).
#pragma once

#include "precis/autodiff/arena.hpp"
#include "precis/autodiff/tape.hpp"
#include "precis/ops/all.hpp"
