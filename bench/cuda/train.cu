// precis's training step on the GPU: a Tape<cuda::on_device<P>> records the forward of an
// nn::MLP whose parameters live on the device (linear + relu, cross-entropy), differentiates it
// seeded with the device's loss scale, and precis::cuda::MixedPrecisionOptimizer (SGD, momentum
// 0.9, lr 0.01), made from the module, takes the step; zero_grad after it. The demo's MLP 784-256-128-10 at batch 128 and 4096 and the wide
// MLP 4096-4096-4096-10 at batch 8192, under 32-true, bf16-mixed and 16-mixed (dynamic loss
// scaling). bench/cuda/torch_train_baseline.py times PyTorch eager on the same models, data
// shapes, optimizer and policies: run both in one session on one GPU and compare.
//
// A step's time: wall-clock time over `reps` steps back to back, then a stream synchronization,
// divided by `reps` (the torch baseline's method), the median of 5 runs after 10 warm-up steps;
// and the same step captured once into a CUDA graph (cudaStreamCaptureModeGlobal, which refuses
// any synchronizing call) and replayed.
// The batch and its labels stay on the device (borrowed), as the torch baseline's do, and the
// seed is the optimizer's loss scale in device memory: a step enqueues its work and waits for
// nothing.
//
//   bench_cuda_train [--quick] [--only TEXT]
//
// --only runs the rows whose "model | batch | policy" text contains TEXT (for example
// "4096-4096-4096-10 | 8192 | bf16-mixed"), so that a profiler sees one case's kernels alone.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <precis/cuda/backend.cuh>
#include <precis/cuda/optim.cuh>
#include <precis/nn/nn.hpp>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using precis::index_t;
using precis::Shape;
using precis::cuda::check;
namespace pc = precis::cuda;

struct times {
  double eager = 0, graphed = 0;
};

/// The median of 5 runs of `reps` calls of f, each run ended by a stream synchronization, in
/// microseconds per call.
template <class F>
double per_call_us(F&& f, cudaStream_t stream, int reps) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    check(cudaStreamSynchronize(stream), "sync");
    runs.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::nth_element(runs.begin(), runs.begin() + 2, runs.end());
  return runs[2];
}

template <class P>
times step_time_us(const std::vector<index_t>& widths, index_t batch, cudaStream_t stream, int reps) {
  using X = typename P::activation_type;
  using D = pc::on_device<P>;
  using Opt = pc::MixedPrecisionOptimizer<P, precis::optim::SGD>;
  precis::nn::MLP<D> net(widths, precis::nn::activation::relu, 1);  // parameters in device memory
  precis::optim::SGD sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  Opt opt(net, sgd, typename Opt::options{.stream = stream});

  precis::Tensor<X> xh(Shape{batch, widths[0]});
  precis::fill_uniform(xh, -1.0, 1.0, 7);
  const auto x = pc::DeviceTensor<X>::from_host(xh);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  std::mt19937 rng(3);
  for (auto& c : labels) c = static_cast<std::int64_t>(rng() % static_cast<unsigned>(widths.back()));
  pc::device_buffer<std::int64_t> dlabels(labels.size());
  check(cudaMemcpy(dlabels.data(), labels.data(), labels.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "labels");
  check(cudaStreamSynchronize(nullptr), "labels");  // landed before the step's kernels on `stream` read them
  const precis::borrowed_labels on_device{std::span<const std::int64_t>(dlabels.data(), labels.size())};

  precis::Tape<D> tape(0, pc::device_backend{stream});
  const precis::TensorView<const double> seed(opt.device_scale(), Shape{});
  const auto step = [&] {
    tape.reset();
    auto loss = precis::cross_entropy(net(tape.borrow(precis::TensorView<const X>(x.data(), x.shape()))), on_device);
    tape.backward(loss, seed);
    opt.step();
    opt.zero_grad();
  };
  for (int i = 0; i < 10; ++i) step();
  check(cudaStreamSynchronize(stream), "sync");
  times t;
  t.eager = per_call_us(step, stream, reps);
  // the same step captured once and replayed (the arenas hand out the same memory every step)
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  step();
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  t.graphed = per_call_us([&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); }, stream, reps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  const auto st = opt.read_status();
  if (!std::isfinite(st.grad_norm) || st.updates == 0) {
    throw precis::error("bench_cuda_train: no update was applied (gradient norm " + std::to_string(st.grad_norm) + ")");
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--only TEXT]\n", argv[0]);
      return 2;
    }
  }
  if (pc::device_count() == 0) {
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
    std::printf("| model | batch | policy | precis step (us) | replayed from a CUDA graph (us) |\n|---|---|---|---|---|\n");
    const std::vector<index_t> small{784, 256, 128, 10}, wide{4096, 4096, 4096, 10};
    const std::vector<std::pair<std::vector<index_t>, index_t>> cases{{small, 128}, {small, 4096}, {wide, 8192}};
    for (const auto& [widths, batch] : cases) {
      if (quick && batch != 128) break;
      const int reps = quick ? 5 : (widths == wide ? 20 : 200);
      std::string name = "MLP";
      for (std::size_t i = 0; i < widths.size(); ++i) name += (i ? "-" : " ") + std::to_string(widths[i]);
      const auto key = [&](const char* policy) { return name + " | " + std::to_string(batch) + " | " + policy; };
      const auto wanted = [&](const char* policy) { return key(policy).find(only) != std::string::npos; };
      const auto row = [&](const char* policy, times t) { std::printf("| %s | %.1f | %.1f |\n", key(policy).c_str(), t.eager, t.graphed); };
      if (wanted("32-true")) row("32-true", step_time_us<precis::policy::named<"32-true">>(widths, batch, stream, reps));
      if (wanted("bf16-mixed")) row("bf16-mixed", step_time_us<precis::policy::named<"bf16-mixed">>(widths, batch, stream, reps));
      if (wanted("16-mixed")) row("16-mixed", step_time_us<precis::policy::named<"16-mixed">>(widths, batch, stream, reps));
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
