// precis::error family: every precondition failure of the library throws one of these,
// with a message that names the operation, the offending value or shape, and what was
// expected.
#pragma once

#include <stdexcept>
#include <string>

namespace precis {

/// Base of every exception precis throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An argument has a value the operation cannot accept (e.g. stochastic rounding without a
/// random source, an overflow mode a format cannot represent).
class invalid_argument : public error {
 public:
  using error::error;
};

/// Sizes or shapes of the operands do not agree.
class shape_error : public error {
 public:
  using error::error;
};

/// Memory for a result could not be allocated (the message names the shape and the bytes).
class allocation_error : public error {
 public:
  using error::error;
};

/// Calls in an order the object cannot accept (e.g. an optimizer stepping twice before the loss
/// scaler it shares is updated).
class usage_error : public error {
 public:
  using error::error;
};

}  // namespace precis
