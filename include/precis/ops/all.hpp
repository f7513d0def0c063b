// Every op of the op layer (precis/ops/): conv2d and pooling, batch norm and embedding, batched
// matmul and attention, dropout, where and masked_fill, max/min/argmax, silu, gelu_tanh, permute.
#pragma once

#include "precis/ops/attention.hpp"
#include "precis/ops/batch_norm.hpp"
#include "precis/ops/conv.hpp"
#include "precis/ops/elementwise.hpp"
#include "precis/ops/linalg.hpp"
#include "precis/ops/op.hpp"
#include "precis/ops/reduce.hpp"
