// All-reduce bandwidth under mpirun: precis::dist::communicator::allreduce against a plain
// MPI_Allreduce of the same bytes, in the same run, for 1 MB to 256 MB of fp32 gradients; and the
// 16-bit path (bf16 widened to fp32, reduced, rounded back) against the plain fp32 all-reduce of
// the widened bytes. Counter busbw_GBs = bytes * 2 (n - 1) / n / time (NCCL's bus bandwidth,
// comparable across rank counts); n = 1 reports 0.
//
//   mpirun -np 2 bench_allreduce --benchmark_repetitions=5 --benchmark_format=json
//
// Iteration counts are fixed (every rank must run the same number of collectives) and only
// rank 0 reports. bench/ratios.py --allreduce makes the table in docs/benchmarks.md.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <precis/dist/mpi.hpp>
#include <precis/precis.hpp>
#include <vector>

namespace {

precis::dist::communicator& world() {
  static precis::dist::communicator c;
  return c;
}

void set_busbw(benchmark::State& state, double bytes) {
  const int n = world().size();
  state.counters["busbw_GBs"] = benchmark::Counter(bytes * 2.0 * (n - 1) / n * 1e-9 * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
}

void BM_mpi_allreduce_fp32(benchmark::State& state) {
  std::vector<float> buf(static_cast<std::size_t>(state.range(0)) / sizeof(float), 1.0f);
  world().barrier();
  for (auto _ : state) {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    benchmark::ClobberMemory();
  }
  set_busbw(state, static_cast<double>(state.range(0)));
}

void BM_precis_allreduce_fp32(benchmark::State& state) {
  std::vector<float> buf(static_cast<std::size_t>(state.range(0)) / sizeof(float), 1.0f);
  world().barrier();
  for (auto _ : state) {
    world().allreduce(std::span<float>(buf), precis::dist::reduce_op::sum);
    benchmark::ClobberMemory();
  }
  set_busbw(state, static_cast<double>(state.range(0)));
}

/// range(0) is the fp32 bytes on the wire: the bf16 buffer is half of it.
void BM_precis_allreduce_bf16(benchmark::State& state) {
  std::vector<precis::bfloat16> buf(static_cast<std::size_t>(state.range(0)) / sizeof(float), precis::bfloat16(1.0f));
  world().barrier();
  for (auto _ : state) {
    world().allreduce(std::span<precis::bfloat16>(buf), precis::dist::reduce_op::mean);
    benchmark::ClobberMemory();
  }
  set_busbw(state, static_cast<double>(state.range(0)));
}

/// Each size registered on its own, with a fixed iteration count (the same on every rank):
/// about 0.25 s per repetition at ~1 GB/s.
void register_all() {
  const std::pair<const char*, void (*)(benchmark::State&)> kinds[] = {
      {"BM_mpi_allreduce_fp32", BM_mpi_allreduce_fp32},
      {"BM_precis_allreduce_fp32", BM_precis_allreduce_fp32},
      {"BM_precis_allreduce_bf16", BM_precis_allreduce_bf16}};
  // size-major, so each size's plain and precis runs are next to each other in time
  for (long mb : {1, 4, 16, 64, 256}) {
    for (const auto& [name, fn] : kinds) {
      benchmark::RegisterBenchmark(name, fn)
          ->Arg(mb << 20)
          ->ArgName("bytes")
          ->Iterations(std::max<long>(2, 256 / mb))
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

class null_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  precis::dist::environment env(argc, argv);
  benchmark::Initialize(&argc, argv);
  register_all();
  if (world().rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    null_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
}
