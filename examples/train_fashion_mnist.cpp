// The main demo: an MLP (784-256-128-10, ReLU), a small CNN and a small vision transformer,
// each trained on Fashion-MNIST (cross-entropy; SGD with momentum for the MLP and the CNN, AdamW
// for the ViT; cosine learning-rate decay) under the named precision policies, side by side. `make demo` runs the default plan, `make demo-full` the full one.
// Two programs from this file: train_fashion_mnist has the runs of the default plan compiled in
// (the MLP under every policy, the CNN and the ViT under 32-true, bf16-mixed and 16-mixed) and
// names the program to use for any other; train_fashion_mnist_full, the same objects and
// fashion_mnist/cnn_vit_more.cpp, has every model under every policy and takes half as long
// again to build.
//
//   train_fashion_mnist [--data DIR] [--models M] [--epochs N] [--batch B] [--lr X] [--policies LIST]
//                       [--full] [--threads T] [--jobs J] [--seed S] [--out DIR] [--distributed [--compress-bf16]]
//                       [--device cpu|cuda]
//
// --threads T (default: OpenMP's, e.g. OMP_NUM_THREADS) threads in all; --jobs J runs at a time,
// T / J threads each (default: 2 runs of T / 2 threads where T >= 2). Small models use two threads
// poorly (the ViT's steps are 7.4 s per epoch on one thread, 6.9 s on two, on a 2-core AMD EPYC),
// so two runs side by side finish the plan in about 60% of the time. Results do not depend on T
// or J: every run is bit-for-bit the same at any thread count.
//
// Default plan: the MLP under every policy for 6 epochs, but 64-true (about 2.5x the time per
// epoch of 32-true) and the emulated 16-bit '-true' policies (5-8x) for 1 beside a 32-true run of
// 1 epoch as their reference; the CNN and the ViT under 32-true, bf16-mixed and 16-mixed for 3
// epochs each.
// --full: every model under every policy, the MLP for 12, the CNN for 8 and the ViT for 15
// epochs. --policies and --epochs override either; --lr replaces every model's own learning rate
// (MLP 0.05, CNN 0.1, ViT 3e-3: fashion_mnist/train.hpp).
//
// --distributed (builds with MPI): run under `mpirun -np N`; each rank takes B / N rows of every
// global batch of B, gradients are averaged over the ranks (precis::dist::DataParallel), and
// rank 0 evaluates, prints and writes the results. The gradient columns then describe rank
// 0's own shard, before the average. --compress-bf16 sends the gradients as bf16 with error
// feedback (DataParallel::options::compress_bf16).
//
// --device cuda (a build with CUDA, fashion_mnist/device_runs.cu and device_cnn_vit.cu): the
// models on the GPU, their parameters, tape and optimizer step on the device: the MLP under
// every policy but the fp8 ones (the emulated 16-bit "-true" ones accumulating in fp16 / bf16
// there too), the CNN and the ViT under the CPU plan's 32-true, bf16-mixed and 16-mixed (with
// --policies also bf16-true, bf16-true+sr and 16-true), one run at a time; the same seed, data
// order, schedule and scaler as on the CPU, and the memory column is GPU memory. Exits 77 where
// there is no GPU.
//
// LIST is comma-separated from: 32-true 64-true bf16-mixed 16-mixed fp8-mixed fp8-mixed/unscaled
// bf16-true bf16-true+sr 16-true (default: all, in that order). fp8-mixed/unscaled is
// fp8_mixed_with<fp8::no_scaling>: the same fp8 casts with every scale 1. Prints one Markdown table and writes DIR/results.json
// (the table, the loss curves and the gradient-exponent histograms) and DIR/results.csv;
// bench/demo_report.py turns the JSON into docs/demo.md and its plots.
//
// What each column measures:
//   test accuracy       on the 10000 test images, after the last epoch
//   final train loss    mean cross-entropy over the last epoch's steps (as the policy computed it)
//   s / epoch           wall-clock seconds per epoch, training only
//   memory              the tape's peak (activations, gradients, scratch) + parameters and their
//                       gradients + the optimizer's masters and state, in MiB
//   skipped, scale      steps the loss scaler skipped, and its final scale
//   fp8 saturated, flushed  fp8 policies: the fraction of the elements of every fp8 cast in
//                       training (GEMM operands and output gradients) that saturated, and that
//                       were nonzero and became zero
//   fp16-flushed grads  the fraction of weight-gradient values, unscaled, that are nonzero but
//                       round to zero in fp16: what fp16 without loss scaling would lose. Under
//                       16-true the gradients already are fp16 and unscaled, so there it is the
//                       fraction that are zero although the same step recomputed in fp32 (same
//                       weights, same batch) gives a nonzero value: what it did lose.
//   zero grads          the fraction of weight-gradient values that are exactly zero
// Both gradient columns are sampled every 20 steps over the whole run.
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "fashion_mnist/train.hpp"

using namespace fashion_mnist;

namespace {

/// The MLP's policies the default plan trains for 1 epoch, beside a 32-true run of 1 epoch as
/// their reference: the emulated 16-bit "-true" policies (their 16-bit arithmetic emulated on a
/// CPU without native 16-bit units, 5-8x the time per epoch of 32-true) and 64-true (double
/// products, about 2.5x), whose difference from 32-true one epoch shows as well as six
/// (docs/demo.md).
bool one_epoch_by_default(const std::string& policy) {
  return policy == "64-true" || policy == "bf16-true" || policy == "bf16-true+sr" || policy == "16-true";
}

/// The runs of a model, each a policy and its epochs, in table order: --policies and --epochs
/// when given; otherwise the MLP runs every policy for 6 epochs but 64-true and the emulated
/// 16-bit ones for 1, after the others and beside a 32-true run of 1 epoch (their reference at
/// the same length), and the CNN and the ViT run 32-true, bf16-mixed and 16-mixed for 3 epochs.
/// --full: every model under every policy, more epochs, each model's runs all of the same length.
struct run_spec {
  std::string policy;
  int epochs;
};
std::vector<run_spec> plan_for(const std::string& model, const settings& st) {
  std::vector<std::string> policies = model == "mlp" ? (st.cuda ? device_policies : all_policies) : conv_default_policies;
  if (st.full) policies = all_policies;
  if (!st.policies.empty()) policies = st.policies;
  const int full = model == "mlp" ? 12 : model == "cnn" ? 8 : 15, normal = model == "mlp" ? 6 : 3;
  const auto epochs_of = [&](const std::string& policy) {
    if (st.epochs > 0) return st.epochs;
    if (st.full) return full;
    return model == "mlp" && one_epoch_by_default(policy) ? 1 : normal;
  };
  std::vector<run_spec> runs;
  for (const auto& p : policies) runs.push_back({p, epochs_of(p)});
  // the runs of 32-true's length first, then the others after a 32-true reference of theirs
  const auto ref = std::find_if(runs.begin(), runs.end(), [](const run_spec& r) { return r.policy == "32-true"; });
  if (ref != runs.end()) {
    const int ref_epochs = ref->epochs;
    const auto shorter =
        std::stable_partition(runs.begin(), runs.end(), [&](const run_spec& r) { return r.epochs == ref_epochs; });
    if (shorter != runs.end()) {
      const int e = shorter->epochs;
      runs.insert(shorter, run_spec{"32-true", e});
    }
  }
  return runs;
}

/// "a, b and c for 6 epochs; d for 3" for the header line.
std::string describe(const std::vector<run_spec>& runs) {
  std::vector<int> lengths;
  for (const auto& r : runs) {
    if (std::find(lengths.begin(), lengths.end(), r.epochs) == lengths.end()) lengths.push_back(r.epochs);
  }
  std::string out;
  for (const int e : lengths) {
    std::string names;
    for (const auto& r : runs) {
      if (r.epochs == e) names += (names.empty() ? "" : ", ") + r.policy;
    }
    out += (out.empty() ? "" : "; ") + names + " for " + std::to_string(e) + (e == 1 ? " epoch" : " epochs");
  }
  return out;
}

/// What a model is, how it trains, and the learning rate it starts from (--lr, or its own).
struct model_info {
  const char* description;
  const char* optimizer;
  double lr;
};
model_info info(const std::string& model, const settings& st) {
  const auto of = [&](auto tag) {
    using M = typename decltype(tag)::type;
    return model_info{M::description, M::training::optimizer, st.lr > 0 ? st.lr : M::lr};
  };
  using F = pol::named<"32-true">;
  if (model == "mlp") return of(std::type_identity<Mlp<F>>{});
  if (model == "cnn") return of(std::type_identity<Cnn<F>>{});
  return of(std::type_identity<Vit<F>>{});
}

bool in_conv_default(const std::string& policy) {
  return std::find(conv_default_policies.begin(), conv_default_policies.end(), policy) != conv_default_policies.end();
}

/// Whether this program has the run of `model` under `policy` compiled in.
bool compiled_in(const std::string& model, const std::string& policy) {
  return model == "mlp" || in_conv_default(policy) || run_cnn_vit_more != nullptr;
}

/// What this program cannot run, and which one can: for a plan with runs it lacks.
std::string not_compiled_in(const std::string& runs) {
  return runs + ": this program (make demo) has the MLP under every policy and the CNN and the ViT under 32-true, "
                "bf16-mixed and 16-mixed; train_fashion_mnist_full has every model under every policy (make demo-full "
                "builds and runs it; cmake --build --preset release --target train_fashion_mnist_full builds it)";
}

result run(const std::string& model, const std::string& name, const data::labelled_images& tr, const data::labelled_images& te,
           const settings& st, const cluster& cl, int epochs) {
  const request q{model, name, tr, te, st, cl, epochs};
  if (st.cuda) return run_on_device(q);
  if (model == "mlp" || in_conv_default(name)) return stores_fp32_or_fp16(name) ? run_fp32_fp16(q) : run_bf16_fp8(q);
  if (run_cnn_vit_more == nullptr) throw precis::usage_error("train_fashion_mnist: " + not_compiled_in("the " + model + " under " + name));
  return run_cnn_vit_more(q);
}

/// One training run of the plan; `row` is its place in the tables.
struct job {
  std::string model, policy;
  int epochs;
  std::size_t row;
};

/// A rough relative cost of a run (seconds per epoch on one thread, relative to the MLP under
/// 32-true, from `make demo` on a 2-core AMD EPYC, docs/benchmarks.md), used only to start the
/// longest runs first so that two runs at a time end together. Results never depend on it.
double cost(const job& j) {
  const double model = j.model == "mlp" ? 1.0 : j.model == "cnn" ? 16.0 : 15.0;
  const double policy = j.policy == "64-true"          ? 2.0
                        : j.policy == "16-mixed"       ? 1.2
                        : j.policy.starts_with("fp8")  ? 1.8
                        : j.policy == "bf16-true"      ? 7.0
                        : j.policy == "bf16-true+sr"   ? 8.8
                        : j.policy == "16-true"        ? 6.2
                                                       : 1.0;
  return model * policy * j.epochs;
}

/// Every run of the plan, `jobs` at a time on `threads_each` OpenMP threads each, longest
/// first; each result lands in its row. The first exception a run throws is rethrown once
/// the runs already started have finished.
std::vector<result> run_all(std::vector<job> plan, const data::labelled_images& tr, const data::labelled_images& te,
                            const settings& st, const cluster& cl, int jobs, int threads_each) {
  std::vector<result> rows(plan.size());
  std::stable_sort(plan.begin(), plan.end(), [](const job& a, const job& b) { return cost(a) > cost(b); });
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const auto worker = [&] {
#if defined(_OPENMP)
    omp_set_num_threads(threads_each);  // this thread's parallel regions
#else
    (void)threads_each;
#endif
    for (std::size_t k; !failed && (k = next++) < plan.size();) {
      const job& j = plan[k];
      try {
        rows[j.row] = run(j.model, j.policy, tr, te, st, cl, j.epochs);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
    }
  };
  if (jobs <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int i = 0; i < jobs; ++i) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (first_error) std::rethrow_exception(first_error);
  return rows;
}

/// The runs this program has compiled in, for the usage text.
const char* program_note() {
  return run_cnn_vit_more != nullptr
             ? ""
             : "  (this program has the default plan's runs compiled in, and any run of the MLP; --full and the CNN and\n"
               "  the ViT under the other policies need train_fashion_mnist_full, which make demo-full builds and runs)\n";
}

[[noreturn]] void usage(const std::string& why) {
  const bool help = why == "help";  // asked for: the text on stdout, exit 0
  std::fprintf(help ? stdout : stderr,
               "train_fashion_mnist: %s\n"
               "usage: train_fashion_mnist [--data DIR] [--models M] [--epochs N] [--batch B] [--lr X] [--policies LIST]\n"
               "                           [--full] [--threads T] [--jobs J] [--seed S] [--out DIR] [--distributed [--compress-bf16]]\n"
               "                           [--device cpu|cuda]\n"
               "  M: comma-separated from mlp,cnn,vit (default: all three)\n"
               "  LIST: comma-separated from 32-true,64-true,bf16-mixed,16-mixed,fp8-mixed,fp8-mixed/unscaled,bf16-true,\n"
               "  bf16-true+sr,16-true\n"
               "  default: the MLP under every policy for 6 epochs (64-true and the emulated 16-bit -true ones for 1,\n"
               "  beside a 32-true run of 1); the CNN (3 epochs) and the ViT (3 epochs) under\n"
               "  32-true, bf16-mixed and 16-mixed; --full runs every model under every policy,\n"
               "  the MLP for 12, the CNN for 8 and the ViT for 15 epochs\n"
               "%s"
               "  X: the learning rate the cosine decay starts from, for every model (default: each model's own:\n"
               "  MLP 0.05 and CNN 0.1 with SGD, ViT 3e-3 with AdamW)\n"
               "  T: threads in all (default: OpenMP's); J: runs at a time, T / J threads each (default: 2 where T >= 2)\n"
               "  --device cuda: on the GPU, one run at a time: the MLP under every policy, the CNN and the ViT under\n"
               "  32-true, bf16-mixed and 16-mixed (--policies: every policy but 64-true); a build with CUDA; memory is\n"
               "  GPU memory\n",
               help ? "train every model under every precision policy on Fashion-MNIST" : why.c_str(), program_note());
  std::exit(help ? 0 : 2);
}

double number(const std::string& flag, const std::string& v, double lo, double hi, bool integer) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi) || (integer && x != std::floor(x))) {
    std::ostringstream s;
    s << flag << " " << v << ": expected " << (integer ? "an integer" : "a number") << " in [" << lo << ", " << hi << "]";
    usage(s.str());
  }
  return x;
}

settings parse(int argc, char** argv) {
  settings st;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("help");
    if (flag == "--distributed") {
      st.distributed = true;
      continue;
    }
    if (flag == "--compress-bf16") {
      st.compress_bf16 = true;
      continue;
    }
    if (flag == "--full") {
      if (run_cnn_vit_more == nullptr) usage(not_compiled_in("--full"));
      st.full = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--device") {
      if (v != "cpu" && v != "cuda") usage("--device " + v + ": expected cpu or cuda");
      st.cuda = v == "cuda";
      if (st.cuda && run_on_device == nullptr) {
        usage("--device cuda: this program was built without CUDA (CMake builds it with CUDA where it finds nvcc)");
      }
      continue;
    }
    if (flag == "--data") st.data = v;
    else if (flag == "--out") st.out = v;
    else if (flag == "--epochs") st.epochs = static_cast<int>(number(flag, v, 1, 1000, true));
    else if (flag == "--batch") st.batch = static_cast<index_t>(number(flag, v, 1, 60000, true));
    else if (flag == "--lr") st.lr = number(flag, v, 1e-8, 10, false);
    else if (flag == "--threads") st.threads = static_cast<int>(number(flag, v, 1, 1024, true));
    else if (flag == "--jobs") st.jobs = static_cast<int>(number(flag, v, 1, 64, true));
    else if (flag == "--seed") st.seed = static_cast<std::uint64_t>(number(flag, v, 0, 9007199254740992.0, true));
    else if (flag == "--policies") {
      st.policies.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');) {
        if (std::find(all_policies.begin(), all_policies.end(), p) == all_policies.end()) usage("unknown policy \"" + p + "\"");
        if (std::find(st.policies.begin(), st.policies.end(), p) != st.policies.end()) usage("--policies names \"" + p + "\" twice");
        st.policies.push_back(p);
      }
      if (st.policies.empty()) usage("--policies is empty");
    } else if (flag == "--models") {
      st.models.clear();
      std::stringstream ss(v);
      for (std::string m; std::getline(ss, m, ',');) {
        if (std::find(all_models.begin(), all_models.end(), m) == all_models.end()) usage("unknown model \"" + m + "\"");
        if (std::find(st.models.begin(), st.models.end(), m) != st.models.end()) usage("--models names \"" + m + "\" twice");
        st.models.push_back(m);
      }
      if (st.models.empty()) usage("--models is empty");
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (st.cuda) {  // the models under the policies the device has, one run at a time
    for (const auto& p : st.policies) {
      for (const auto& m : st.models) {
        const auto& on_device = m == "mlp" ? device_policies : device_conv_policies;
        if (std::find(on_device.begin(), on_device.end(), p) == on_device.end()) {
          std::string has;
          for (std::size_t k = 0; k < on_device.size(); ++k) has += (k == 0 ? "" : k + 1 == on_device.size() ? " and " : ", ") + on_device[k];
          usage("--device cuda: the " + m + " does not train under " + p + " on the device (it has " + has + ")");
        }
      }
    }
    if (st.full) usage("--device cuda: --full runs every model under every policy; the device has the default plan's");
    if (st.distributed) usage("--device cuda: not with --distributed");
    st.jobs = 1;
  }
  return st;
}

std::string json_string(const std::string& s) { return "\"" + s + "\""; }

/// A number for the JSON file: a non-finite one (a diverged run) is null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

/// Creates --out and checks a file can be written there: before training, so a bad directory
/// costs nothing. Exits 2 naming the flag.
void check_out_dir(const std::string& out) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  const std::string probe = out + "/.train_fashion_mnist_write_test";
  if (!ec) {
    std::ofstream f(probe);
    if (!f) ec = std::make_error_code(std::errc::permission_denied);
  }
  if (ec) usage("--out " + out + ": cannot create or write files there (" + ec.message() + ")");
  std::filesystem::remove(probe, ec);
}

void write_outputs(const settings& st, int ranks, const std::vector<result>& rows) {
  std::error_code ec;
  std::filesystem::create_directories(st.out, ec);
  if (ec) throw precis::error("train_fashion_mnist: cannot create " + st.out + " (" + ec.message() + ")");
  const std::string json_path = st.out + "/results.json", csv_path = st.out + "/results.csv";
  std::ofstream j(json_path), c(csv_path);
  if (!j || !c) throw precis::error("train_fashion_mnist: cannot write " + json_path + " or " + csv_path);
  j.precision(9);
  j << "{\n  \"settings\": {\"ranks\": " << ranks << ", \"batch\": " << st.batch
    << ", \"compress_bf16\": " << (st.compress_bf16 ? "true" : "false") << ", \"seed\": " << st.seed << ", \"jobs\": " << st.jobs << ", \"threads_per_job\": " << st.threads << "},\n  \"models\": {";
  for (std::size_t k = 0; k < st.models.size(); ++k) {
    j << (k ? ", " : "") << json_string(st.models[k]) << ": " << json_string(info(st.models[k], st).description);
  }
  j << "},\n  \"training\": {";
  for (std::size_t k = 0; k < st.models.size(); ++k) {
    const model_info mi = info(st.models[k], st);
    j << (k ? ", " : "") << json_string(st.models[k]) << ": {\"optimizer\": " << json_string(mi.optimizer) << ", \"lr\": " << mi.lr << "}";
  }
  j << "},\n"
    << "  \"histogram_binades\": [" << hist_lo << ", " << hist_hi << "],\n  \"results\": [\n";
  c << "model,policy,epochs,test_accuracy,final_train_loss,seconds_per_epoch,memory_mib,skipped_steps,final_loss_scale,fp16_flushed_grads,zero_grads,"
       "fp8_saturated,fp8_flushed\n";
  const auto fp8_json = [](double v) {
    if (v < 0) return std::string("null");
    std::ostringstream o;
    o.precision(9);
    o << v;
    return o.str();
  };
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const result& r = rows[k];
    j << "    {\"model\": " << json_string(r.model) << ", \"policy\": " << json_string(r.policy) << ", \"epochs\": " << r.epochs
      << ", \"test_accuracy\": " << json_number(r.test_accuracy) << ", \"final_train_loss\": " << json_number(r.final_loss)
      << ", \"seconds_per_epoch\": " << r.seconds_per_epoch << ", \"memory_mib\": " << r.memory_mib << ", \"skipped_steps\": " << r.skipped
      << ", \"final_loss_scale\": " << r.scale << ", \"fp16_flushed_grads\": " << r.flushed << ", \"zero_grads\": " << r.zeros
      << ", \"fp8_saturated\": " << fp8_json(r.fp8_saturated) << ", \"fp8_flushed\": " << fp8_json(r.fp8_flushed)
      << ", \"steps\": " << r.steps << ", \"gradient_values_sampled\": " << r.sampled << ",\n     \"curve\": [";
    for (std::size_t i = 0; i < r.curve.size(); ++i) j << (i ? ", " : "") << json_number(r.curve[i]);
    j << "],\n     \"histogram\": [";
    for (std::size_t i = 0; i < r.hist.size(); ++i) j << (i ? ", " : "") << r.hist[i];
    j << "]}" << (k + 1 < rows.size() ? "," : "") << "\n";
    c << r.model << "," << r.policy << "," << r.epochs << "," << r.test_accuracy << "," << (std::isfinite(r.final_loss) ? json_number(r.final_loss) : "") << "," << r.seconds_per_epoch << "," << r.memory_mib << "," << r.skipped << ","
      << r.scale << "," << r.flushed << "," << r.zeros << "," << (r.fp8_saturated < 0 ? "" : fp8_json(r.fp8_saturated)) << ","
      << (r.fp8_flushed < 0 ? "" : fp8_json(r.fp8_flushed)) << "\n";
  }
  j << "  ]\n}\n";
  if (!j || !c) throw precis::error("train_fashion_mnist: writing " + json_path + " or " + csv_path + " failed");
  std::printf("\nwrote %s and %s\n", json_path.c_str(), csv_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  settings st = parse(argc, argv);
  cluster cl;
#if PRECIS_HAS_MPI
  std::optional<dist::environment> env;
  std::optional<dist::communicator> comm;
  if (st.distributed) {
    env.emplace(argc, argv);
    comm.emplace();
    cl = {comm->rank(), comm->size(), &*comm};
  }
#else
  if (st.distributed) usage("--distributed: this build has no MPI (install libopenmpi-dev and openmpi-bin, then rebuild)");
#endif
  if (st.compress_bf16 && !st.distributed) usage("--compress-bf16 applies to --distributed runs");
  if (st.batch % cl.size != 0) {
    usage("--batch " + std::to_string(st.batch) + " over " + std::to_string(cl.size) + " ranks: expected a multiple of the rank count");
  }
  // the threads to use, and how many runs share them
#if defined(_OPENMP)
  const int threads = st.threads > 0 ? st.threads : omp_get_max_threads();
#else
  const int threads = st.threads > 0 ? st.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#endif
  if (st.distributed && st.jobs > 1) usage("--jobs " + std::to_string(st.jobs) + ": a --distributed run trains one run at a time");
  std::vector<job> plan_jobs;
  std::string missing;  // the runs of the plan this program lacks, before any training
  for (const auto& m : st.models) {
    for (const auto& r : plan_for(m, st)) {
      plan_jobs.push_back({m, r.policy, r.epochs, plan_jobs.size()});
      const std::string what = "the " + m + " under " + r.policy;
      if (!compiled_in(m, r.policy) && missing.find(what) == std::string::npos) missing += (missing.empty() ? "" : ", ") + what;
    }
  }
  if (!missing.empty() && !st.cuda) usage(not_compiled_in(missing));
  std::string gpu;
  if (st.cuda) {
    gpu = cuda_device_name();
    if (gpu.empty()) {
      std::fprintf(stderr, "train_fashion_mnist: --device cuda: no CUDA device\n");
      return 77;  // skipped, for ctest
    }
  }
  const int jobs = static_cast<int>(std::min<std::size_t>(
      plan_jobs.size(), static_cast<std::size_t>(st.jobs > 0 ? st.jobs : (threads >= 2 && !st.distributed ? 2 : 1))));
  const int threads_each = std::max(1, threads / jobs);
  st.plain_progress = jobs > 1;
  st.jobs = jobs;  // what ran, for results.json
  st.threads = threads_each;
  if (cl.rank == 0) check_out_dir(st.out);
  try {
    const auto tr = data::read_fashion_mnist(st.data, true);  // 28 x 28 images, or a data_error
    const auto te = data::read_fashion_mnist(st.data, false);
    if (tr.images.shape()[0] < st.batch) {
      throw data::data_error(st.data + "/train-images-idx3-ubyte.gz has " + std::to_string(tr.images.shape()[0]) +
                             " training images; expected at least one batch of " + std::to_string(st.batch) + " (--batch)");
    }
    if (te.images.shape()[0] == 0) {
      throw data::data_error(st.data + "/t10k-images-idx3-ubyte.gz has no test images; expected at least one");
    }
    if (cl.rank == 0) {
      std::printf("Fashion-MNIST: %lld training / %lld test images; cross-entropy, cosine learning-rate decay to 0,\n"
                  "batch %lld, seed %llu",
                  static_cast<long long>(tr.images.shape()[0]), static_cast<long long>(te.images.shape()[0]),
                  static_cast<long long>(st.batch), static_cast<unsigned long long>(st.seed));
      if (cl.size > 1) std::printf(", %d ranks of %lld rows each", cl.size, static_cast<long long>(st.batch / cl.size));
      std::printf(".\n");
      for (const auto& m : st.models) {
        const model_info mi = info(m, st);
        std::printf("  %s: %s; %s, lr %g; %s\n", m.c_str(), mi.description, mi.optimizer, mi.lr, describe(plan_for(m, st)).c_str());
      }
      if (st.cuda) {
        std::printf("%zu run%s, one at a time on the GPU (%s); memory is GPU memory\n\n", plan_jobs.size(),
                    plan_jobs.size() == 1 ? "" : "s", gpu.c_str());
      } else {
        std::printf("%zu run%s, %d at a time on %d thread%s each (the s / epoch column is timed so)\n\n", plan_jobs.size(),
                    plan_jobs.size() == 1 ? "" : "s", jobs, threads_each, threads_each == 1 ? "" : "s");
      }
      std::fflush(stdout);
    }
    const std::vector<result> rows = run_all(plan_jobs, tr, te, st, cl, jobs, threads_each);
    if (cl.rank != 0) return 0;
    for (const auto& m : st.models) {
      std::printf("\n%s (%s)\n\n", m.c_str(), info(m, st).description);
      std::printf("| policy | epochs | test accuracy | final train loss | s / epoch | memory (MiB) | skipped steps | final loss scale | fp16-flushed grads | zero grads | fp8 saturated | fp8 flushed |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
      for (const auto& r : rows) {
        if (r.model != m) continue;
        const auto frac = [](double v) {
          char b[32];
          if (v < 0) return std::string("–");
          std::snprintf(b, sizeof b, "%.2e", v);
          return std::string(b);
        };
        char loss[32];
        if (std::isfinite(r.final_loss)) std::snprintf(loss, sizeof loss, "%.4f", r.final_loss);
        else std::snprintf(loss, sizeof loss, "diverged");
        std::printf("| %s | %d | %.4f | %s | %.1f | %.1f | %lld | %g | %.2e | %.4f | %s | %s |\n", r.policy.c_str(), r.epochs, r.test_accuracy,
                    loss, r.seconds_per_epoch, r.memory_mib, static_cast<long long>(r.skipped), r.scale, r.flushed, r.zeros,
                    frac(r.fp8_saturated).c_str(), frac(r.fp8_flushed).c_str());
      }
    }
    write_outputs(st, cl.size, rows);
  } catch (const data::data_error& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n(the Debian package dataset-fashion-mnist installs the files in "
                         "/usr/share/datasets/fashion-mnist; --data DIR reads them from elsewhere)\n", e.what());
    return 1;
  } catch (const precis::error& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
#if PRECIS_HAS_MPI
    if (cl.comm) cl.comm->abort(1);  // the other ranks would wait for this one
#endif
    return 1;
  }
}
