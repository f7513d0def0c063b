// Shared by the CUDA test programs (plain programs, not GoogleTest: nvcc compiles them).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace cuda_test {

inline int failures = 0;

/// Prints and counts a failed check.
inline void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}

template <class T>
std::uint32_t bits_of(T x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}

}  // namespace cuda_test
