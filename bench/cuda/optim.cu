// The device's mixed-precision optimizer step (precis::cuda::MixedPrecisionOptimizer) against a
// device-to-device copy of the bytes the step must move, measured in the same run: the demo's
// MLP (784-256-128-10, 235 146 parameters) and the wide MLP (4096-4096-4096-10, 33.6 million),
// under 32-true (Adam), bf16-mixed (AdamW) and 16-mixed (AdamW, dynamic loss scaling). Each
// step is timed alone with CUDA events (medians of 50 after 5 warm-up steps), launched directly
// and replayed from a CUDA graph. bench/cuda/torch_optim_baseline.py times PyTorch's fused
// AdamW (with GradScaler under fp16) on the same shapes.
//
//   bench_cuda_optim [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <precis/cuda/optim.cuh>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <string>
#include <vector>

namespace {

using precis::index_t;
using precis::Shape;
using precis::cuda::check;

std::vector<Shape> mlp(const std::vector<index_t>& widths) {
  std::vector<Shape> s;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    s.push_back(Shape{widths[i + 1], widths[i]});
    s.push_back(Shape{widths[i + 1]});
  }
  return s;
}

template <class F>
double median_us(F&& f, cudaStream_t stream, int reps) {
  for (int i = 0; i < 5; ++i) f();
  check(cudaStreamSynchronize(stream), "sync");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a, stream), "record");
    f();
    check(cudaEventRecord(b, stream), "record");
    check(cudaEventSynchronize(b), "event sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(1000.0 * ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

/// Bytes one element costs a step: the gradient read twice (squares, update), the master and
/// each state array read and written, the parameter written (and read without a master).
template <class P, class Rule>
double bytes_per_element() {
  using S = typename P::param_type;
  using G = precis::grad_storage_t<P, S>;
  using M = typename P::master_type;
  const bool masters = !std::is_same_v<S, M>;
  return 2.0 * sizeof(G) + (masters ? 2.0 * sizeof(M) + sizeof(S) : 2.0 * sizeof(S)) + 2.0 * Rule::state_count * sizeof(M);
}

template <class P, class Rule>
void run(const char* model, const std::vector<Shape>& shapes, const char* policy, Rule rule, cudaStream_t stream, int reps) {
  using S = typename P::param_type;
  using G = precis::grad_storage_t<P, S>;
  using Opt = precis::cuda::MixedPrecisionOptimizer<P, Rule>;
  std::vector<precis::cuda::DeviceTensor<S>> v;
  std::vector<precis::cuda::DeviceTensor<G>> g;
  std::vector<typename Opt::parameter> list;
  index_t n = 0;
  for (const Shape& s : shapes) {
    v.emplace_back(s);
    g.emplace_back(s);
    check(cudaMemset(v.back().data(), 0, sizeof(S) * static_cast<std::size_t>(s.numel())), "memset");
    check(cudaMemset(g.back().data(), 0, sizeof(G) * static_cast<std::size_t>(s.numel())), "memset");
    n += s.numel();
  }
  check(cudaDeviceSynchronize(), "memset");  // the zeros are on the default stream; the optimizer's kernels are on `stream`
  for (std::size_t i = 0; i < shapes.size(); ++i) list.push_back({"p" + std::to_string(i), v[i].view(), g[i].view()});
  Opt opt(list, rule, typename Opt::options{.stream = stream});
  const double direct = median_us([&] { opt.step(); }, stream, reps);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  opt.step();
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double graphed = median_us([&] { check(cudaGraphLaunch(exec, stream), "graph launch"); }, stream, reps);
  const double bytes = bytes_per_element<P, Rule>() * static_cast<double>(n);
  precis::cuda::device_buffer<char> src(static_cast<std::size_t>(bytes) / 2 + 1), dst(static_cast<std::size_t>(bytes) / 2 + 1);
  // a copy reads and writes: bytes / 2 copied moves `bytes`
  const double copy = median_us([&] { check(cudaMemcpyAsync(dst.data(), src.data(), src.size(), cudaMemcpyDeviceToDevice, stream), "copy"); },
                                stream, reps);
  std::printf("| %s | %s | %lld | %.0f | %.1f | %.1f | %.1f | %.2f |\n", model, policy, static_cast<long long>(n),
              bytes_per_element<P, Rule>(), direct, graphed, copy, copy / graphed);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
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
    int driver = 0;
    cudaDriverGetVersion(&driver);
    std::printf("%s, sm_%d%d, %d SMs, driver %d\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount, driver);
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    const int reps = quick ? 5 : 50;
    std::printf("| model | policy | parameters | bytes / parameter | step (us) | graphed (us) | copy of those bytes (us) | copy / graphed |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    const auto small = mlp({784, 256, 128, 10});
    const auto wide = mlp({4096, 4096, 4096, 10});
    precis::optim::Adam adam;
    for (const auto& [name, shapes] : {std::pair{"MLP 784-256-128-10", small}, std::pair{"MLP 4096-4096-4096-10", wide}}) {
      if (quick && shapes.size() != small.size()) break;
      run<precis::policy::named<"32-true">>(name, shapes, "32-true, Adam", adam, stream, reps);
      run<precis::policy::named<"bf16-mixed">>(name, shapes, "bf16-mixed, AdamW", precis::optim::AdamW{}, stream, reps);
      run<precis::policy::named<"16-mixed">>(name, shapes, "16-mixed, AdamW", precis::optim::AdamW{}, stream, reps);
      if (quick) break;
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
