// Data-parallel training over MPI: every rank holds the whole model and optimizer, takes its
// own shard of each global batch, and after backward the gradients are averaged over the ranks,
// so every rank applies the same update.
//
//   precis::dist::environment env(argc, argv);
//   precis::dist::communicator world;
//   nn::MLP<P> net(...);
//   optim::MixedPrecisionOptimizer opt(net, optim::SGD{...}, optim::DynamicLossScaler{});
//   precis::dist::DataParallel dp(world, net, opt);    // rank 0's parameters everywhere
//   // each step, on this rank's B / size samples (dist::shard):
//   dp.backward(tape, loss);                            // backward, then the gradient mean
//   bool stepped = dp.step();                           // the same decision on every rank
//
// What is synchronized: parameters and masters once at construction (from rank 0); gradients
// every step (mean over ranks, in fp32 for 16-bit gradients, rounded back once); the loss
// scaler's skip decision (any rank's overflow skips the step everywhere, so the scales stay
// identical); under an fp8 policy, after dp.attach(tape), every amax before a scale is chosen
// from it (max over the ranks), so every rank casts with the same scales. What is not: the data (each rank reads its own shard) and anything outside the
// module and optimizer. With the same seed on every rank, stochastic rounding draws the same
// numbers everywhere, so the replicas stay bit-identical.
//
// Buckets: gradients are packed into fp32 buckets of about `bucket_bytes`, each all-reduced with
// a blocking MPI_Allreduce (Open MPI's nonblocking one measured 0.3-0.5x as fast here, so packing
// is not overlapped with it). The tape has no per-parameter completion hook yet, so the
// all-reduce starts after backward rather than during it. options::compress_bf16 sends bf16
// with error feedback instead (reduce_gradients).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "precis/autodiff/tape.hpp"
#include "precis/dist/mpi.hpp"
#include "precis/nn/nn.hpp"
#include "precis/optim/mixed_precision.hpp"

namespace precis::dist {

template <class P, class Rule, class Scaler>
class DataParallel {
 public:
  using optimizer = optim::MixedPrecisionOptimizer<P, Rule, Scaler>;
  using grad_type = typename P::grad_type;

  struct options {
    /// fp32 bytes per all-reduce.
    std::size_t bucket_bytes = std::size_t{4} << 20;
    /// Send gradients as bf16 with error feedback (see reduce_gradients). Off by default.
    bool compress_bf16 = false;
  };

  DataParallel(const communicator& comm, nn::Module<P>& module, optimizer& opt, options o = {}) : comm_(comm), opt_(opt), o_(o) {
    if (o_.bucket_bytes < sizeof(float)) {
      throw dist_error("precis::dist::DataParallel: bucket_bytes = " + std::to_string(o_.bucket_bytes) + "; expected >= 4");
    }
    for (auto& [name, p] : module.named_parameters()) params_.push_back(p);
    check_layout(module);
    comm_.set_verify_counts(false);  // the layout is agreed: every bucket has the same count everywhere
    for (auto* p : params_) comm_.broadcast(std::span(p->value.data(), static_cast<std::size_t>(p->value.size())), 0);
    opt_.refresh_masters();
    plan_buckets();
  }

  int rank() const noexcept { return comm_.rank(); }
  int size() const noexcept { return comm_.size(); }
  const communicator& comm() const noexcept { return comm_; }
  optimizer& opt() noexcept { return opt_; }
  /// The buckets' element counts, in order.
  std::vector<std::size_t> bucket_sizes() const {
    std::vector<std::size_t> out;
    for (const auto& b : buckets_) out.push_back(b.count);
    return out;
  }

  /// Under an fp8 policy: makes `tape`'s fp8 scales agree on every rank, by reducing each amax
  /// (max over the ranks) before a scale is chosen from it: at every cast under current
  /// scaling, once per step (in tape.reset()) under delayed scaling. Call it before the first
  /// forward; backward() checks that it was.
  template <class T>
  void attach(T& tape)
    requires policy::fp8_policy<P>
  {
    const communicator* c = &comm_;
    tape.fp8().set_amax_reducer([c](std::span<float> amax) { c->allreduce(amax, reduce_op::max); });
  }

  /// The optimizer's backward (seeded with the loss scale), then the gradient mean over ranks.
  template <class T, class S>
  void backward(T& tape, const Var<P, S>& loss) {
    if constexpr (policy::fp8_policy<P>) {
      if (comm_.size() > 1 && !tape.fp8().has_amax_reducer()) {
        throw dist_error("precis::dist::DataParallel::backward: the tape's fp8 scales are not shared between the " +
                         std::to_string(comm_.size()) + " ranks; call attach(tape) before the first forward");
      }
    }
    opt_.backward(tape, loss);
    reduce_gradients();
  }

  /// Every parameter's gradient becomes the mean of the ranks' gradients: bucket by bucket,
  /// packed into fp32, summed, scaled by 1 / size and rounded back once.
  ///
  /// With compress_bf16, each rank sends v = g + e rounded to bf16 (q) and keeps e = v - q for
  /// the next step (error feedback: what rounding drops is sent later, so the sum of what was
  /// sent over the steps stays within one bf16 rounding of the sum of the gradients). The q of
  /// all ranks are gathered (half the bytes of fp32) and summed in fp32 in rank order, so every
  /// rank gets the same bits. It pays where the network is the bottleneck and the rank count is
  /// small: each rank receives (size - 1) bf16 copies against ~2 fp32 copies for an all-reduce.
  void reduce_gradients() {
    if (comm_.size() == 1) return;
    const float inv = 1.0f / static_cast<float>(comm_.size());
    std::size_t offset = 0;  // of the bucket in the error-feedback memory
    for (const bucket& b : buckets_) {
      pack(b, staging_);
      if (o_.compress_bf16) {
        float* v = staging_.data();
        float* e = feedback_.data() + offset;
        for (std::size_t i = 0; i < b.count; ++i) {
          const float x = v[i] + e[i];
          const bfloat16 q(x);
          sent_[i] = q;
          const float back = static_cast<float>(q);
          e[i] = std::isfinite(x) ? x - back : 0.0f;  // exact: a rounding error is representable
        }
        const auto n = static_cast<std::size_t>(comm_.size());
        comm_.allgather(std::span<const bfloat16>(sent_.data(), b.count), std::span<bfloat16>(gathered_.data(), n * b.count));
        for (std::size_t i = 0; i < b.count; ++i) {
          float sum = 0;
          for (std::size_t r = 0; r < n; ++r) sum += static_cast<float>(gathered_[r * b.count + i]);
          v[i] = sum;
        }
      } else {
        comm_.allreduce(std::span<float>(staging_.data(), b.count), reduce_op::sum);
      }
      unpack(b, staging_, inv);
      offset += b.count;
    }
  }

  /// Unscales, agrees with the other ranks on whether any gradient overflowed, and steps (or
  /// skips) everywhere alike. Returns whether the parameters were updated.
  bool step() {
    opt_.unscale();
    if (comm_.any(opt_.found_inf()) && !opt_.found_inf()) opt_.force_found_inf();
    return opt_.step();
  }

  /// Rank 0 writes the checkpoint (atomically); every rank learns whether it succeeded. The
  /// file holds no rank or world-size information: any world size can load it.
  template <class... Part>
  void save(const std::string& path, const Part&... part) const {
    std::string why;
    if (comm_.rank() == 0) {
      try {
        opt_.save(path, part...);
      } catch (const precis::error& e) {
        why = e.what();
      }
    }
    const bool failed = comm_.any(!why.empty());
    if (failed) throw dist_error(comm_.rank() == 0 ? why : "precis::dist::DataParallel::save: rank 0 failed to write " + path);
  }

  /// Every rank loads the same file (on a shared file system, or a copy on each machine). A
  /// rank whose load fails keeps its state (MixedPrecisionOptimizer::load validates before it
  /// copies), and every rank then throws. If some ranks succeeded the replicas differ: load
  /// again, on every rank, once the file is fixed.
  template <class... Part>
  void load(const std::string& path, Part&... part) {
    std::string why;
    try {
      opt_.load(path, part...);
    } catch (const precis::error& e) {
      why = e.what();
    }
    if (comm_.any(!why.empty())) {
      throw dist_error(!why.empty() ? why
                                    : "precis::dist::DataParallel::load: another rank could not load " + path +
                                          "; the replicas now differ: load again on every rank");
    }
  }

 private:
  using parameter = typename nn::Module<P>::parameter;

  struct piece {
    parameter* p;
    index_t begin, end;  // elements of p->grad
  };
  struct bucket {
    std::vector<piece> pieces;
    std::size_t count = 0;
  };

  /// Every rank must have the same parameters in the same order with the same shapes: checked
  /// once, by comparing a fingerprint of the layout.
  void check_layout(nn::Module<P>& module) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over names and extents
    auto mix = [&](std::uint64_t v) {
      for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
      }
    };
    std::int64_t total = 0;
    for (auto& [name, p] : module.named_parameters()) {
      for (char c : name) mix(static_cast<unsigned char>(c));
      for (index_t e : p->value.shape()) mix(static_cast<std::uint64_t>(e));
      total += p->value.size();
    }
    const std::uint64_t mine[2] = {h, static_cast<std::uint64_t>(total)};
    const auto all = comm_.allgather(std::span<const std::uint64_t>(mine, 2));
    for (int r = 0; r < comm_.size(); ++r) {
      if (all[2 * static_cast<std::size_t>(r)] != h || all[2 * static_cast<std::size_t>(r) + 1] != mine[1]) {
        throw dist_error("precis::dist::DataParallel: rank " + std::to_string(r) + " has a different model (" +
                         std::to_string(all[2 * static_cast<std::size_t>(r) + 1]) + " parameters) from rank " +
                         std::to_string(comm_.rank()) + " (" + std::to_string(total) +
                         "); expected the same parameters, names and shapes on every rank");
      }
    }
  }

  void plan_buckets() {
    const std::size_t cap = std::max<std::size_t>(1, o_.bucket_bytes / sizeof(float));
    bucket cur;
    for (auto* p : params_) {
      for (index_t at = 0; at < p->grad.size();) {
        const index_t take = std::min<index_t>(p->grad.size() - at, static_cast<index_t>(cap - cur.count));
        cur.pieces.push_back({p, at, at + take});
        cur.count += static_cast<std::size_t>(take);
        at += take;
        if (cur.count == cap) {
          buckets_.push_back(std::move(cur));
          cur = bucket{};
        }
      }
    }
    if (cur.count > 0) buckets_.push_back(std::move(cur));
    std::size_t most = 0;
    for (const auto& b : buckets_) most = std::max(most, b.count);
    staging_.resize(most);
    if (o_.compress_bf16) {
      std::size_t total = 0;
      for (const auto& b : buckets_) total += b.count;
      feedback_.assign(total, 0.0f);
      sent_.resize(most);
      gathered_.resize(most * static_cast<std::size_t>(comm_.size()));
    }
  }

  static void pack(const bucket& b, std::vector<float>& buf) {
    float* out = buf.data();
    for (const piece& c : b.pieces) {
      const auto n = static_cast<std::size_t>(c.end - c.begin);
      if constexpr (std::is_same_v<grad_type, float>) {
        std::copy_n(c.p->grad.data() + c.begin, n, out);
      } else {
        convert(std::span<const grad_type>(c.p->grad.data() + c.begin, n), std::span<float>(out, n));
      }
      out += n;
    }
  }

  static void unpack(const bucket& b, std::vector<float>& buf, float inv) {
    float* in = buf.data();
    for (std::size_t i = 0; i < b.count; ++i) in[i] *= inv;  // the mean, in fp32, before the one rounding
    for (const piece& c : b.pieces) {
      const auto n = static_cast<std::size_t>(c.end - c.begin);
      if constexpr (std::is_same_v<grad_type, float>) {
        std::copy_n(in, n, c.p->grad.data() + c.begin);
      } else {
        convert(std::span<const float>(in, n), std::span<grad_type>(c.p->grad.data() + c.begin, n));
      }
      in += n;
    }
  }

  communicator comm_;
  optimizer& opt_;
  options o_;
  std::vector<parameter*> params_;
  std::vector<bucket> buckets_;
  std::vector<float> staging_, feedback_;
  std::vector<bfloat16> sent_, gathered_;
};

}  // namespace precis::dist
