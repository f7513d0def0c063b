// Precision policies: the op-safety table, policies as types, named policies, strict checking,
// run-time dispatch from a name, and the policy-aware tensor ops.
#pragma once

#include "precis/policy/ops.hpp"
#include "precis/policy/policies.hpp"
#include "precis/policy/table.hpp"
