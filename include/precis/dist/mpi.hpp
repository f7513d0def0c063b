// A thin MPI layer: RAII init/finalize, a communicator with rank/size/barrier, and typed
// collectives over spans and precis tensors. Needs an MPI-3 implementation (<mpi.h>; link
// MPI::MPI_CXX). Nothing else in precis includes this header.
//
//   precis::dist::environment env(argc, argv);        // MPI_Init_thread ... MPI_Finalize
//   precis::dist::communicator world;                  // MPI_COMM_WORLD
//   world.allreduce(grads, precis::dist::reduce_op::mean);
//
// Element types: float, double, bfloat16, half (and, for broadcast/allgather, any trivially
// copyable type). 16-bit values are never added in 16 bits: they are widened to fp32, reduced
// in fp32 and rounded back once (so 2 ranks x 2^-9 added to a bf16 1 gives 1 + 2^-8, which
// bf16 additions would lose).
//
// Every collective runs under a deadline (default 300 s), kept by a watchdog thread: when a
// rank dies or stops calling collectives, the others print the operation, the bytes and the
// rank, and exit (the launcher then ends the job) instead of hanging. (Collectives are blocking calls: Open
// MPI's nonblocking all-reduce measured 0.3-0.5x the blocking one here, docs/benchmarks.md.)
// MPI errors become dist_error (MPI_ERRORS_RETURN); after one, call abort().
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "precis/error.hpp"
#include "precis/format/bfloat16.hpp"
#include "precis/format/convert.hpp"
#include "precis/format/half.hpp"
#include "precis/tensor/tensor.hpp"

namespace precis::dist {

/// An MPI failure, a collective that did not complete in time, or a misuse (sizes that differ
/// between ranks where they must agree).
class dist_error : public precis::error {
 public:
  using precis::error::error;
};

enum class reduce_op { sum, mean, max };

inline const char* name(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::mean: return "mean";
    case reduce_op::max: return "max";
  }
  return "?";
}

namespace detail {

inline void check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw dist_error("precis::dist: " + what + " failed: " + std::string(msg, static_cast<std::size_t>(len)));
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else static_assert(sizeof(T) == 0, "precis::dist: no MPI datatype for this element type");
}

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

template <class T>
constexpr bool reducible = std::is_same_v<T, float> || std::is_same_v<T, double> || is_16bit_float<T>;

/// One thread per process that ends the job when a collective outlives its deadline. A
/// collective arms it before the call and disarms it after; nothing runs on the thread
/// otherwise.
class watchdog {
 public:
  static watchdog& instance() {
    static watchdog w;
    return w;
  }
  void arm(std::string what, std::chrono::steady_clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(m_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    what_ = std::move(what);
    deadline_ = deadline;
    armed_ = true;
    cv_.notify_one();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(m_);
    armed_ = false;
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  watchdog() = default;
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      if (cv_.wait_until(lock, deadline, [&] { return stop_ || !armed_ || deadline_ != deadline; })) continue;
      // still armed for the same collective, past its deadline. Only the main thread may call
      // MPI (MPI_THREAD_FUNNELED), so this one does not call MPI_Abort: it ends the process,
      // and the launcher (mpirun, mpiexec) ends the job when a rank exits without finalizing.
      std::fprintf(stderr, "%s\n", what_.c_str());
      std::fflush(stderr);
      std::_Exit(70);
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::thread thread_;
  bool armed_ = false, stop_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace detail

/// MPI_Init_thread on construction (unless MPI is already initialized), MPI_Finalize on
/// destruction (only if this object initialized it).
class environment {
 public:
  environment(int& argc, char**& argv) {
    int done = 0;
    MPI_Initialized(&done);
    if (done) return;
    int provided = 0;
    detail::check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owner_ = true;
  }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  ~environment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && !finalized) MPI_Finalize();
  }

 private:
  bool owner_ = false;
};

/// A communicator (not owned: MPI_COMM_WORLD by default) with typed collectives.
class communicator {
 public:
  explicit communicator(MPI_Comm comm = MPI_COMM_WORLD, std::chrono::duration<double> timeout = std::chrono::seconds(300))
      : comm_(comm), timeout_(timeout) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) throw dist_error("precis::dist::communicator: MPI is not initialized; create a precis::dist::environment first");
    detail::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm handle() const noexcept { return comm_; }
  /// How long a collective may take before it is declared failed.
  void set_timeout(std::chrono::duration<double> t) { timeout_ = t; }
  /// Whether each collective first checks that every rank passes the same count (one extra
  /// 16-byte allreduce). On by default; turn it off where the layout was agreed once, as
  /// DataParallel does for its buckets.
  void set_verify_counts(bool on) noexcept { verify_ = on; }

  void barrier() const {
    guarded("barrier", [&] { return MPI_Barrier(comm_); });
  }

  /// Runs one MPI call under the deadline (see the watchdog above); `what` names it, and an
  /// MPI error it returns becomes a dist_error.
  template <class Call>
  void guarded(const std::string& what, Call&& call) const {
    auto& w = detail::watchdog::instance();
    w.arm("precis::dist: " + what + " did not complete within " + std::to_string(timeout_.count()) + " s on rank " +
              std::to_string(rank_) + " of " + std::to_string(size_) +
              ": another rank has died or stopped calling collectives; ending the job",
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_));
    const int rc = call();
    w.disarm();
    detail::check(rc, what);
  }

  /// Ends every process of the communicator (MPI_Abort): after a dist_error, or any error
  /// one rank cannot recover from alone.
  [[noreturn]] void abort(int code = 1) const {
    MPI_Abort(comm_, code);
    std::abort();
  }

  /// In place over all ranks. Each rank passes the same number of elements.
  template <class T>
    requires detail::reducible<T>
  void allreduce(std::span<T> buf, reduce_op op) const {
    if constexpr (detail::is_16bit_float<T>) {
      // widen, reduce in fp32, round once
      wide_.resize(buf.size());
      convert(std::span<const T>(buf.data(), buf.size()), std::span<float>(wide_));
      allreduce(std::span<float>(wide_), op);
      convert(std::span<const float>(wide_), buf);
    } else {
      check_same_count("allreduce", buf.size());
      guarded("allreduce (" + std::string(name(op)) + ") of " + std::to_string(buf.size_bytes()) + " bytes", [&] {
        return MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), detail::mpi_type<T>(),
                             op == reduce_op::max ? MPI_MAX : MPI_SUM, comm_);
      });
      if (op == reduce_op::mean) {
        const T inv = T(1) / static_cast<T>(size_);
        for (T& x : buf) x *= inv;
      }
    }
  }

  /// Whether any rank passes true.
  bool any(bool mine) const {
    int v = mine ? 1 : 0;
    guarded("any", [&] { return MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LOR, comm_); });
    return v != 0;
  }

  /// root's bytes into every rank's buffer (same length everywhere).
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void broadcast(std::span<T> buf, int root = 0) const {
    check_root(root);
    check_same_count("broadcast", buf.size());
    guarded("broadcast of " + std::to_string(buf.size_bytes()) + " bytes from rank " + std::to_string(root),
            [&] { return MPI_Bcast(buf.data(), static_cast<int>(buf.size_bytes()), MPI_BYTE, root, comm_); });
  }

  /// Every rank's `mine` (same length everywhere), concatenated in rank order.
  template <class T>
    requires std::is_trivially_copyable_v<T>
  std::vector<T> allgather(std::span<const T> mine) const {
    std::vector<T> out(mine.size() * static_cast<std::size_t>(size_));
    allgather(mine, std::span<T>(out));
    return out;
  }

  /// allgather into a caller's buffer of size() * mine.size() elements (no allocation).
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void allgather(std::span<const T> mine, std::span<T> out) const {
    check_same_count("allgather", mine.size());
    if (out.size() != mine.size() * static_cast<std::size_t>(size_)) {
      throw dist_error("precis::dist::allgather: output of " + std::to_string(out.size()) + " elements for " +
                       std::to_string(mine.size()) + " per rank on " + std::to_string(size_) + " ranks; expected " +
                       std::to_string(mine.size() * static_cast<std::size_t>(size_)));
    }
    guarded("allgather of " + std::to_string(mine.size_bytes()) + " bytes per rank", [&] {
      return MPI_Allgather(mine.data(), static_cast<int>(mine.size_bytes()), MPI_BYTE, out.data(),
                           static_cast<int>(mine.size_bytes()), MPI_BYTE, comm_);
    });
  }

  // ---- tensors (contiguous) ---------------------------------------------------------------

  template <class S, class C>
  void allreduce(Tensor<S, C>& t, reduce_op op) const {
    allreduce(std::span<S>(t.data(), static_cast<std::size_t>(t.size())), op);
  }
  template <class S, class C>
  void broadcast(Tensor<S, C>& t, int root = 0) const {
    broadcast(std::span<S>(t.data(), static_cast<std::size_t>(t.size())), root);
  }
  /// [size * extent(0), ...]: the ranks' tensors stacked along the first axis.
  template <class S, class C>
  Tensor<S, C> allgather(const Tensor<S, C>& t) const {
    if (t.rank() == 0) throw dist_error("precis::dist::allgather: a rank-0 tensor; expected rank >= 1");
    const auto all = allgather(std::span<const S>(t.data(), static_cast<std::size_t>(t.size())));
    Shape shape = t.shape();
    shape[0] *= size_;
    Tensor<S, C> out(shape);
    std::copy(all.begin(), all.end(), out.data());
    return out;
  }

 private:
  void check_root(int root) const {
    if (root < 0 || root >= size_) {
      throw dist_error("precis::dist::broadcast: root " + std::to_string(root) + "; expected a rank in [0, " +
                       std::to_string(size_) + ")");
    }
  }

  /// Collectives need equal counts: a mismatch would corrupt memory or hang, so it is checked
  /// (one small allreduce of the min and max) and named.
  void check_same_count(const char* op, std::size_t n) const {
    if (!verify_) return;
    long long mm[2] = {static_cast<long long>(n), -static_cast<long long>(n)};
    guarded(std::string(op) + " size check", [&] { return MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_LONG_LONG, MPI_MAX, comm_); });
    if (mm[0] != -mm[1]) {
      throw dist_error(std::string("precis::dist::") + op + ": rank " + std::to_string(rank_) + " passed " + std::to_string(n) +
                       " elements, other ranks between " + std::to_string(-mm[1]) + " and " + std::to_string(mm[0]) +
                       "; expected the same count on every rank");
    }
  }

  MPI_Comm comm_;
  std::chrono::duration<double> timeout_;
  int rank_ = 0, size_ = 1;
  bool verify_ = true;
  mutable std::vector<float> wide_;
};

/// The [begin, end) of `count` items that `rank` of `size` takes: contiguous, sizes differing
/// by at most one.
inline std::pair<std::int64_t, std::int64_t> shard(std::int64_t count, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size || count < 0) {
    throw dist_error("precis::dist::shard: rank " + std::to_string(rank) + " of " + std::to_string(size) + ", count " +
                     std::to_string(count) + "; expected 0 <= rank < size and count >= 0");
  }
  return {count * rank / size, count * (rank + 1) / size};
}

}  // namespace precis::dist
