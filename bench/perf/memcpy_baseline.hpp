// The memcpy baseline shared by the streaming benchmarks: copies range(0) bytes per iteration
// and reports `counted` x that many bytes (2 for kernels counted as read + write, 1 for kernels
// counted by the bytes they read).
#pragma once

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

inline void time_memcpy(benchmark::State& state, int counted) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes) * counted);
}
