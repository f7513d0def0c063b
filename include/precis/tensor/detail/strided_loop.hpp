// The iteration engine under element-wise maps: N strided operands walked together over one
// shape, handed to a body as 1-D runs (offsets + count), optionally split across threads.
#pragma once

#include <array>
#include <cstddef>

#include "precis/config.hpp"
#include "precis/tensor/shape.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace precis::detail {

template <std::size_t N>
struct strided_loop {
  Shape shape;
  std::array<Shape, N> strides;

  /// Drops unit axes and merges neighbours that are contiguous for every operand, so a
  /// dense tensor becomes one long run whatever its rank.
  void coalesce() {
    Shape s;
    std::array<Shape, N> st;
    for (int a = 0; a < shape.rank(); ++a) {
      if (shape[a] == 1) continue;
      if (s.rank() > 0) {
        bool merge = true;
        for (std::size_t k = 0; k < N; ++k) merge = merge && st[k].back() == strides[k][a] * shape[a];
        if (merge) {
          s[s.rank() - 1] *= shape[a];
          for (std::size_t k = 0; k < N; ++k) st[k][st[k].rank() - 1] = strides[k][a];
          continue;
        }
      }
      s.push_back(shape[a]);
      for (std::size_t k = 0; k < N; ++k) st[k].push_back(strides[k][a]);
    }
    if (s.rank() == 0) {  // a single element
      s.push_back(shape.numel() == 0 ? 0 : 1);
      for (std::size_t k = 0; k < N; ++k) st[k].push_back(1);
    }
    shape = s;
    strides = st;
  }

  /// Calls body(offsets, count, inner_strides) for the 1-D runs covering linear positions
  /// [begin, end) in row-major order.
  template <class Body>
  void run(index_t begin, index_t end, Body&& body) const {
    const int r = shape.rank();
    if (begin >= end) return;
    std::array<index_t, max_rank> idx{};
    std::array<index_t, N> off{};
    index_t lin = begin;
    for (int a = r - 1; a >= 0; --a) {
      idx[static_cast<std::size_t>(a)] = lin % shape[a];
      lin /= shape[a];
      for (std::size_t k = 0; k < N; ++k) off[k] += idx[static_cast<std::size_t>(a)] * strides[k][a];
    }
    std::array<index_t, N> inner{};
    for (std::size_t k = 0; k < N; ++k) inner[k] = strides[k][r - 1];
    index_t pos = begin;
    const std::size_t last = static_cast<std::size_t>(r - 1);
    while (pos < end) {
      const index_t count = std::min(end - pos, shape[r - 1] - idx[last]);
      body(off, count, inner);
      pos += count;
      // advance the multi-index by `count` (the innermost run always ends at its extent
      // or at `end`)
      idx[last] += count;
      for (std::size_t k = 0; k < N; ++k) off[k] += count * inner[k];
      for (int a = r - 1; a > 0 && idx[static_cast<std::size_t>(a)] == shape[a]; --a) {
        idx[static_cast<std::size_t>(a)] = 0;
        ++idx[static_cast<std::size_t>(a - 1)];
        for (std::size_t k = 0; k < N; ++k)
          off[k] += strides[k][a - 1] - shape[a] * strides[k][a];
      }
    }
  }
};

/// Number of threads a loop over `work` elements should use (1 without OpenMP).
inline int threads_for(index_t work, index_t min_per_thread) {
#if defined(_OPENMP)
  const index_t t = work / min_per_thread;
  const int maxt = omp_get_max_threads();
  return static_cast<int>(t < 1 ? 1 : (t > maxt ? maxt : t));
#else
  (void)work;
  (void)min_per_thread;
  return 1;
#endif
}

/// Runs fn(begin, end) over [0, total) split into contiguous pieces, one per thread.
template <class Fn>
void parallel_ranges(index_t total, int threads, Fn&& fn) {
#if defined(_OPENMP)
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      const index_t t = omp_get_thread_num();
      const index_t n = omp_get_num_threads();
      fn(total * t / n, total * (t + 1) / n);
    }
    return;
  }
#endif
  (void)threads;
  fn(index_t{0}, total);
}

}  // namespace precis::detail
