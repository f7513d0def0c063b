// Tensor-core GEMM speed: precis's kernels against cuBLASLt in the same run, on the same GPU.
//
//   bench_cuda_gemm [--quick] [--big | --demo] [--sustained SECONDS] [--only
//   bf16,fp16,fp32,tf32,e4m3]
//                   [--json FILE]
//   bench_cuda_gemm --profile N sm90|sm80|cublaslt [CM CN [REPEAT]]   (for a profiler)
//
// For bf16, fp16, tf32 and fp8 e4m3 operands (fp32 accumulation; C in bf16, fp16, fp32 and
// bf16), at 4096^3, 8192^3 and the demo's layer shapes (--big: only the first two; --demo: only the
// demo's), each precis kernel that takes the format (sm90 with every cluster shape at the large
// shapes, sm80) and cuBLASLt through precis's cublaslt backend; at the demo's shapes each precis
// kernel also with the whole of K in one block per tile (gemm_options::split_k = 1) beside the
// automatic slices of K, and fp32 operands on the CUDA cores (simt) against cuBLASLt's fp32
// kernels. Operands are K-major ("TN", the layout every tensor-core kernel reads without staging),
// uniform random in [-1, 1). Each implementation is a CUDA graph of back-to-back calls (host
// dispatch excluded). The implementations take turns over rounds, in an order that rotates every
// round, and each reports the median of its rounds, as TFLOP/s (2mnk / time) and as a ratio to
// cuBLASLt. A round is 5 replays (bursts near the maximum clock), or with --sustained S, S seconds
// of replays back to back timed over the second half (at the GPU's power limit). Small shapes
// rotate over several operand sets so they are not served from L2 alone. Also measured: the
// mma.sync issue ceiling of this GPU (a loop of independent m16n8k16 bf16 instructions in
// registers), the bound the sm80 kernel cannot pass.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <precis/cuda/gemm.cuh>
#include <precis/precis.hpp>
#include <string>
#include <vector>

namespace {

using precis::index_t;
using precis::Shape;
using precis::cuda::check;
using precis::cuda::gemm_backend;

struct row {
  std::string format, shape, impl;
  double tflops = 0, ms = 0, ratio = 0;
  std::string note;
};

/// Times `call` as a CUDA graph of `per_graph` back-to-back calls (host dispatch excluded).
class graph_timer {
 public:
  graph_timer(const std::function<void(cudaStream_t, int)>& call, int per_graph, cudaStream_t s) : s_(s), per_graph_(per_graph) {
    for (int i = 0; i < 2; ++i) call(s, i);  // plans, probes, first-use allocations
    check(cudaStreamSynchronize(s), "warm-up");
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
    for (int i = 0; i < per_graph; ++i) call(s, i);
    check(cudaStreamEndCapture(s, &g_), "end capture");
    check(cudaGraphInstantiate(&ge_, g_, 0), "graph instantiate");
    check(cudaGraphLaunch(ge_, s), "graph launch");  // warm-up replay
    check(cudaEventCreate(&a_), "event");
    check(cudaEventCreate(&b_), "event");
  }
  graph_timer(const graph_timer&) = delete;
  graph_timer& operator=(const graph_timer&) = delete;
  ~graph_timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
    cudaGraphExecDestroy(ge_);
    cudaGraphDestroy(g_);
  }
  /// Median milliseconds per call over replays run back to back for `seconds`, from the second
  /// half of the window (the clocks have settled under the power limit by then).
  double sustained(double seconds) {
    std::vector<cudaEvent_t> ev;
    std::vector<double> t;
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
      for (int i = 0; i < 8; ++i) {  // keep the queue full: events between replays, no host waits
        cudaEvent_t e;
        check(cudaEventCreate(&e), "event");
        if (ev.empty()) check(cudaEventRecord(e, s_), "record");
        else {
          check(cudaGraphLaunch(ge_, s_), "graph launch");
          check(cudaEventRecord(e, s_), "record");
        }
        ev.push_back(e);
      }
      check(cudaEventSynchronize(ev[ev.size() > 12 ? ev.size() - 5 : ev.size() - 1]), "sync");  // keep ~4 queued
    }
    check(cudaEventSynchronize(ev.back()), "sync");
    for (std::size_t i = ev.size() / 2 + 1; i < ev.size(); ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]), "elapsed");
      t.push_back(ms / per_graph_);
    }
    for (auto e : ev) cudaEventDestroy(e);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  /// Median milliseconds per call over `reps` replays.
  double sample(int reps) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      check(cudaEventRecord(a_, s_), "record");
      check(cudaGraphLaunch(ge_, s_), "graph launch");
      check(cudaEventRecord(b_, s_), "record");
      check(cudaEventSynchronize(b_), "sync");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, a_, b_), "elapsed");
      t.push_back(ms / per_graph_);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

 private:
  cudaStream_t s_;
  int per_graph_;
  cudaGraph_t g_{};
  cudaGraphExec_t ge_{};
  cudaEvent_t a_{}, b_{};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class T>
precis::cuda::DeviceTensor<T> random_device(index_t r, index_t c, std::uint64_t seed) {
  precis::Tensor<float> f(Shape{r, c});
  precis::fill_uniform(f, -1.0, 1.0, seed);
  precis::Tensor<T> h(Shape{r, c});
  for (index_t i = 0; i < f.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) h.data()[i] = f.data()[i];
    else if constexpr (precis::format_traits<T>::has_infinity) h.data()[i] = precis::round_to<T>(f.data()[i]);
    else h.data()[i] = precis::round_to<T>(f.data()[i], precis::rounding::nearest_even, precis::overflow::saturate);
  }
  return precis::cuda::DeviceTensor<T>::from_host(h);
}

struct shape3 {
  index_t m, n, k;
  const char* name;
};

/// One format: every implementation on every shape.
template <class S, class Op, class Out>
void bench_format(const char* fmt, const std::vector<shape3>& shapes, std::vector<gemm_backend> backends, bool sm90, bool quick,
                  double sustained_s, std::vector<row>& out, cudaStream_t stream) {
  for (const auto& sh : shapes) {
    const double flop = 2.0 * static_cast<double>(sh.m) * static_cast<double>(sh.n) * static_cast<double>(sh.k);
    const double bytes = static_cast<double>(sh.m * sh.k + sh.n * sh.k) * sizeof(S);
    // rotate over enough operand sets to exceed the 50 MB L2 several times
    const int sets = static_cast<int>(std::clamp(200e6 / bytes, 1.0, 16.0));
    std::vector<precis::cuda::DeviceTensor<S>> as, bts;
    std::vector<precis::cuda::DeviceTensor<Out>> cs;
    for (int i = 0; i < sets; ++i) {
      as.push_back(random_device<S>(sh.m, sh.k, 100 + i));
      bts.push_back(random_device<S>(sh.n, sh.k, 200 + i));
      cs.emplace_back(Shape{sh.m, sh.n});
    }
    const bool big = flop > 1e11;
    const int per_graph = big ? (quick ? 2 : 5) : 20 * sets;
    const int reps = quick ? 2 : 5, rounds = quick ? 1 : (sustained_s > 0 ? 3 : 5);
    struct impl {
      std::string name;
      gemm_backend be;
      int cm, cn;
      int split_k = 0;
    };
    std::vector<impl> impls;
    for (gemm_backend be : backends) {
      if (be == gemm_backend::sm90) {
        if (!sm90) continue;
        if (!big) {
          impls.push_back({"precis sm90", be, 0, 0});  // the cluster the dispatcher chooses
        } else {
          for (const auto& [cm, cn] :
               {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
            if (sustained_s > 0 && cm * cn != 2) continue;  // sustained runs: the two useful shapes
            impls.push_back(
                {"precis sm90 (cluster " + std::to_string(cm) + "x" + std::to_string(cn) + ")", be,
                 cm, cn});
          }
        }
      } else {
        impls.push_back({be == gemm_backend::cublaslt ? std::string("cuBLASLt") : "precis " + std::string(precis::cuda::to_string(be)),
                         be, 0, 0});
      }
      // small products: the automatic slices of K beside the whole of K in one block per tile
      if (!big && be != gemm_backend::cublaslt && (be != gemm_backend::sm90 || sm90)) {
        impls.push_back(
            {"precis " + std::string(precis::cuda::to_string(be)) + " (whole K)", be, 0, 0, 1});
      }
    }
    // Every implementation is timed in each of several rounds, in turn, and reported as the
    // median over rounds: clocks drift with power and temperature, and interleaving keeps
    // that drift out of the ratios.
    std::vector<row> rows;
    std::vector<std::unique_ptr<graph_timer>> timers;
    for (const auto& im : impls) {
      rows.push_back(row{fmt, sh.name, im.name});
      try {
        precis::cuda::gemm_options o;
        o.backend = im.be;
        o.cluster_m = im.cm;
        o.cluster_n = im.cn;
        o.split_k = im.split_k;
        timers.push_back(std::make_unique<graph_timer>(
            [&, o](cudaStream_t s, int i) mutable {
              o.stream = s;
              const int j = i % sets;
              precis::cuda::gemm<float, Op>(1.0f, as[j], bts[j].transpose(), 0.0f, cs[j], {}, o);
            },
            per_graph, stream));
      } catch (const std::exception& e) {
        rows.back().note = e.what();
        timers.push_back(nullptr);
      }
    }
    // the order rotates every round: the implementation that runs first after a lighter one
    // meets a fuller power budget
    std::vector<std::vector<double>> ms(impls.size());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t q = 0; q < impls.size(); ++q) {
        const std::size_t i = (q + static_cast<std::size_t>(round)) % impls.size();
        if (timers[i]) ms[i].push_back(sustained_s > 0 ? timers[i]->sustained(sustained_s) : timers[i]->sample(reps));
      }
    double base = 0;
    for (std::size_t i = 0; i < impls.size(); ++i) {
      if (!timers[i]) continue;
      rows[i].ms = median(ms[i]);
      rows[i].tflops = flop / (rows[i].ms * 1e-3) / 1e12;
      if (impls[i].be == gemm_backend::cublaslt) base = rows[i].tflops;
    }
    for (auto& r : rows) {
      r.ratio = base > 0 && r.tflops > 0 ? r.tflops / base : 0;
      std::printf("%-5s %-26s %-24s %9.4f ms %8.1f TFLOP/s  %5.2fx cuBLASLt %s\n", r.format.c_str(), r.shape.c_str(), r.impl.c_str(), r.ms,
                  r.tflops, r.ratio, r.note.c_str());
      std::fflush(stdout);
      out.push_back(r);
    }
  }
}

/// Independent mma.sync chains in registers: the instruction's throughput ceiling.
__global__ void mma_peak_kernel(float* sink, int iters) {
  std::uint32_t a[4] = {threadIdx.x, 1u, 2u, 3u}, b[2] = {5u, 7u};
  float d[8][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < 8; ++c) precis::cuda::detail::ptx::mma_bf16(d[c], a, b);
  }
  float s = 0;
#pragma unroll
  for (int c = 0; c < 8; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  if (s == 1.2345f) sink[threadIdx.x] = s;  // keeps the loop alive
}

double mma_peak(int sms, cudaStream_t s) {
  precis::cuda::device_buffer<float> sink(1024);
  const int iters = 4096, blocks = sms * 4, threads = 256;
  graph_timer t([&](cudaStream_t st, int) { mma_peak_kernel<<<blocks, threads, 0, st>>>(sink.data(), iters); }, 3, s);
  const double ms = t.sample(5);
  const double flop = 2.0 * 16 * 8 * 16 * 8.0 * iters * (threads / 32) * blocks;
  return flop / (ms * 1e-3) / 1e12;
}

}  // namespace

/// `repeat` calls of one configuration (bf16, n^3), for a profiler or a clock and power
/// reading: --profile N BACKEND [CM CN [REPEAT]].
int profile(int n, const std::string& backend, int cm, int cn, int repeat) {
  auto a = random_device<precis::bfloat16>(n, n, 1), bt = random_device<precis::bfloat16>(n, n, 2);
  precis::cuda::DeviceTensor<precis::bfloat16> c(Shape{n, n});
  precis::cuda::gemm_options o;
  o.backend = backend == "sm90" ? gemm_backend::sm90 : backend == "sm80" ? gemm_backend::sm80 : gemm_backend::cublaslt;
  o.cluster_m = cm, o.cluster_n = cn;
  for (int i = 0; i < repeat; ++i) precis::cuda::gemm<float>(1.0f, a, bt.transpose(), 0.0f, c, {}, o);
  check(cudaDeviceSynchronize(), "profile run");
  return 0;
}

int main(int argc, char** argv) {
  bool quick = false, big_only = false, demo_only = false;
  double sustained_s = 0;
  std::string only;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--big") == 0) big_only = true;
    else if (std::strcmp(argv[i], "--demo") == 0)
      demo_only = true;
    else if (std::strcmp(argv[i], "--sustained") == 0 && i + 1 < argc) sustained_s = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    else if (std::strcmp(argv[i], "--profile") == 0 && i + 2 < argc) {
      try {
        return profile(std::atoi(argv[i + 1]), argv[i + 2], i + 3 < argc ? std::atoi(argv[i + 3]) : 0,
                       i + 4 < argc ? std::atoi(argv[i + 4]) : 0, i + 5 < argc ? std::atoi(argv[i + 5]) : 3);
      } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--big | --demo] [--sustained SECONDS] [--only "
                   "bf16,fp16,fp32,tf32,e4m3] [--json FILE] | --profile N sm90|sm80|cublaslt [CM "
                   "CN [REPEAT]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (precis::cuda::device_count() == 0) {
    std::printf("no CUDA device\n");
    return 77;
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    const auto dev = precis::cuda::detail::current_device_info();
    std::printf("%s, sm_%d%d, %d SMs, driver %d, runtime %d\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount, driver,
                runtime);
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "stream");
    const double peak = mma_peak(prop.multiProcessorCount, stream);
    std::printf("mma.sync m16n8k16 bf16 issue ceiling: %.1f TFLOP/s\n", peak);

    std::vector<shape3> shapes = {{4096, 4096, 4096, "4096^3"}, {8192, 8192, 8192, "8192^3"}};
    if (quick) shapes.pop_back();
    const std::vector<shape3> demo = {{128, 256, 784, "demo 128x784 @ 784x256"},
                                      {128, 128, 256, "demo 128x256 @ 256x128"},
                                      {128, 10, 128, "demo 128x128 @ 128x10"},
                                      {784, 256, 128, "demo dW 784x128 @ 128x256"},
                                      {4096, 256, 784, "demo b4096 4096x784 @ 784x256"}};
    std::vector<shape3> all = demo_only ? std::vector<shape3>{} : shapes;
    if (!big_only) all.insert(all.end(), demo.begin(), demo.end());
    const auto want = [&](const char* f) { return only.empty() || only.find(f) != std::string::npos; };
    std::vector<row> rows;
    const std::vector<gemm_backend> b16 = {gemm_backend::cublaslt, gemm_backend::sm90, gemm_backend::sm80};
    const std::vector<gemm_backend> others = {gemm_backend::cublaslt, gemm_backend::sm80};
    if (want("bf16")) bench_format<precis::bfloat16, void, precis::bfloat16>("bf16", all, b16, dev.sm90a, quick, sustained_s, rows, stream);
    if (want("fp16")) bench_format<precis::half, void, precis::half>("fp16", all, b16, dev.sm90a, quick, sustained_s, rows, stream);
    // fp32 on the CUDA cores (the 32-true policy's products) against cuBLAS's fp32 kernels
    if (want("fp32") && !big_only) {
      bench_format<float, void, float>("fp32", demo, {gemm_backend::cublaslt, gemm_backend::simt},
                                       false, quick, sustained_s, rows, stream);
    }
    if (demo_only) shapes.clear();
    if (want("tf32")) bench_format<float, precis::tf32, float>("tf32", shapes, others, false, quick, sustained_s, rows, stream);
    if (want("e4m3") && prop.major * 10 + prop.minor >= 89) {
      const std::vector<gemm_backend> f8 = {gemm_backend::cublaslt, gemm_backend::sm90, gemm_backend::sm80};
      bench_format<precis::float8_e4m3, void, precis::bfloat16>("e4m3", shapes, f8, dev.sm90a, quick, sustained_s, rows, stream);
    }
    if (json) {
      FILE* f = std::fopen(json, "w");
      if (!f) throw precis::error(std::string("bench_cuda_gemm: cannot write ") + json);
      std::fprintf(f, "{\"device\": \"%s\", \"sm\": %d, \"sms\": %d, \"driver\": %d, \"runtime\": %d, \"mma_sync_peak_tflops\": %.2f,\n \"rows\": [\n",
                   prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount, driver, runtime, peak);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        std::string note;
        for (char ch : r.note) note += (ch == '"' || ch == '\\') ? '\'' : ch;
        std::fprintf(f, "  {\"format\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", \"ms\": %.6f, \"tflops\": %.3f, \"ratio\": %.4f, \"note\": \"%s\"}%s\n",
                     r.format.c_str(), r.shape.c_str(), r.impl.c_str(), r.ms, r.tflops, r.ratio, note.c_str(),
                     i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
