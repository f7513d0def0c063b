// Precision policies: the op-safety table, policies as types, named policies, strict checking,
// run-time dispatch from a name. The policy-aware eager ops (ops<P>) are in precis/ops/.
#pragma once

#include "precis/policy/policies.hpp"
#include "precis/policy/table.hpp"
