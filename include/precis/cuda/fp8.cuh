// fp8 scaling on the device: the casts of an fp8 policy's GEMM operands, their scales and their
// statistics kept in device memory, so an fp8 training step never waits for the device.
// Include only from .cu translation units.
//
// precis::cuda::fp8_scaling_state is what Tape<on_device<P>>::fp8() returns under an fp8
// policy: the host's fp8::scaling_state (entries in recording order, one per fp8 GEMM op, three
// scaled tensors each) with every tensor's state in device memory instead:
//   - the scale the next cast uses (delayed scaling) and the amax history, a ring of
//     history_len amaxes whose current entry moves on at end_step();
//   - the last cast's amax, scale and saturated / flushed counts, and the totals since
//     reset_telemetry().
// Each cast (fp8_scaling_state::cast) is one or two kernels on the caller's stream:
//   - current scaling: the tensor's amax (atomic maxima of |x|'s bits, so a NaN, whose bits
//     exceed infinity's, wins, as on the host), then the cast, whose every block derives the
//     scale from that amax with the host's fp8::scale_for arithmetic;
//   - delayed scaling: the cast with the kept scale, recording the tensor's amax in the
//     history's current entry; no scaling: the cast with scale 1.
// The cast writes the scale it used into a float the caller provides; the GEMM that reads the
// operands divides its alpha by that float when it runs (epilogue::divide_by). The values are
// x * scale formed in fp32 and rounded once to nearest even into e4m3 / e5m2, saturating at
// the format's largest value, through precis's rounding core: the host's bits for the same x
// and scale. Statistics as the host's (fp8::quantize_into): saturated where |x * scale| is at
// or past max + half its spacing, flushed where a nonzero finite x became zero.
//
// end_step() updates the scales of the entries used in the step (delayed scaling: one kernel,
// a block per tensor, Transformer Engine's rule as in fp8::delayed_scaler::update). Reading the
// state on the host (download(), totals()) waits for the stream: do it between steps. What the
// device state does not do: reduce amaxes across data-parallel ranks (it has no reducer), and
// checkpoint (download() fills the host entries, whose delayed state a host tape can save).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "precis/cuda/device.cuh"
#include "precis/cuda/elementwise.cuh"
#include "precis/cuda/gemm/epilogue.cuh"
#include "precis/error.hpp"
#include "precis/fp8/scaling.hpp"

namespace precis::cuda {

namespace fp8_detail {

/// One scaled tensor's state in device memory. The first three members are zeroed before every
/// cast (their bytes are contiguous: last_bytes).
struct slot {
  unsigned last_amax_bits;  // |x|'s largest bit pattern in the last cast (a NaN's exceeds infinity's)
  unsigned pad0;
  unsigned long long last_saturated, last_flushed;
  float scale;       // delayed scaling: the scale the next cast uses
  float last_scale;  // the scale the last cast used
  // since reset_telemetry() (contiguous: total_bytes), counted by the casts themselves, so that
  // the replays of a captured step count too
  unsigned long long saturated, flushed, casts, count;
  unsigned long long last_count;  // the elements of the last cast
  unsigned pos;                   // delayed scaling: the history's current entry
  unsigned pad1;
};
inline constexpr std::size_t last_bytes = 24;   // last_amax_bits .. last_flushed
inline constexpr std::size_t total_bytes = 32;  // saturated .. count
static_assert(offsetof(slot, scale) == last_bytes && offsetof(slot, count) + 8 == offsetof(slot, saturated) + total_bytes,
              "precis::cuda::fp8_detail::slot: layout");

inline constexpr int threads = 256;

/// The largest of v over a block of `threads` threads, in thread 0 (others: unspecified).
template <class T, class Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T part[threads / 32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < threads / 32 ? part[lane] : T(0);
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  __syncthreads();  // part may be reused by the next reduction
  return v;
}
struct max_op {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};
struct add_op {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a + b; }
};

/// The largest |x_i|'s bits into s->last_amax_bits (current scaling's first pass).
template <class S>
__global__ void __launch_bounds__(threads) amax_kernel(const S* x, index_t n, slot* s) {
  unsigned m = 0;
  const index_t step = static_cast<index_t>(gridDim.x) * threads;
  for (index_t i = static_cast<index_t>(blockIdx.x) * threads + threadIdx.x; i < n; i += step) {
    m = ::max(m, fp8::detail::amax_key(ew_detail::load<float>(x + i)));
  }
  m = block_reduce(m, max_op{});
  if (threadIdx.x == 0 && m != 0) atomicMax(&s->last_amax_bits, m);
}

/// out = x * scale rounded once into F8 (saturating), with the statistics. recipe: 0 current
/// (the scale from the amax the first pass found), 1 delayed (the kept scale; the amax goes
/// into history[pos]), 2 none (scale 1). Block 0 writes the scale used to *used and s->last_scale,
/// and counts the cast.
template <class F8, class S>
__global__ void __launch_bounds__(threads) cast_kernel(const S* x, index_t n, F8* out, slot* s, unsigned* history, int recipe,
                                                       float fp8_max, int margin, bool power_of_two, float overflow_at,
                                                       float* used) {
  float scale = 1.0f;
  if (recipe == 0) scale = precis::fp8::detail::scale_from_amax(__uint_as_float(s->last_amax_bits), fp8_max, margin, 1.0f, power_of_two);
  else if (recipe == 1) scale = s->scale;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *used = scale;
    s->last_scale = scale;
    s->last_count = static_cast<unsigned long long>(n);
    s->casts += 1;  // one thread of one block: the stream orders the casts of a slot
    s->count += static_cast<unsigned long long>(n);
  }
  unsigned m = 0;
  unsigned long long sat = 0, flush = 0;
  const index_t step = static_cast<index_t>(gridDim.x) * threads;
  for (index_t i = static_cast<index_t>(blockIdx.x) * threads + threadIdx.x; i < n; i += step) {
    const float v = ew_detail::load<float>(x + i);
    const fp8::detail::element_cast<F8> c = fp8::detail::cast_element<F8>(v, scale, overflow_at);
    detail::store_bits(out + i, c.bits);
    sat += c.saturated ? 1u : 0u;
    flush += c.flushed ? 1u : 0u;
    m = ::max(m, fp8::detail::amax_key(v));
  }
  sat = block_reduce(sat, add_op{});
  flush = block_reduce(flush, add_op{});
  if (recipe != 0) m = block_reduce(m, max_op{});
  if (threadIdx.x == 0) {
    if (sat != 0) {
      atomicAdd(&s->last_saturated, sat);
      atomicAdd(&s->saturated, sat);
    }
    if (flush != 0) {
      atomicAdd(&s->last_flushed, flush);
      atomicAdd(&s->flushed, flush);
    }
    if (recipe != 0 && m != 0) {
      atomicMax(&s->last_amax_bits, m);
      if (recipe == 1) atomicMax(&history[s->pos], m);
    }
  }
}

/// One scaled tensor of the table end_step() updates.
struct tensor_ref {
  slot* s;
  unsigned* history;
  float fp8_max;
};

/// Delayed scaling's update of table[blockIdx.x]: amax from the history (its maximum, NaN
/// winning, or the current entry), the scale from it (the previous one where it is 0 or not
/// finite), then the ring moves on to a zeroed entry. A template (of nothing) so that every
/// translation unit including this header may define it without a multiple definition.
template <int = 0>
__global__ void __launch_bounds__(threads) delayed_update_kernel(const tensor_ref* table, unsigned len, bool reduce_max, int margin) {
  const tensor_ref t = table[blockIdx.x];
  const unsigned cur = t.s->pos;
  unsigned m = 0;
  if (reduce_max) {
    for (unsigned i = threadIdx.x; i < len; i += threads) m = ::max(m, t.history[i]);
  } else if (threadIdx.x == 0) {
    m = t.history[cur];
  }
  m = block_reduce(m, max_op{});
  if (threadIdx.x == 0) {
    t.s->scale = precis::fp8::detail::scale_from_amax(__uint_as_float(m), t.fp8_max, margin, t.s->scale, false);
    const unsigned next = (cur + 1) % len;
    t.history[next] = 0u;
    t.s->pos = next;
  }
}

inline unsigned cast_blocks(index_t n) {
  return static_cast<unsigned>(std::clamp<index_t>((n + threads - 1) / threads, 1, 1024));
}

}  // namespace fp8_detail

/// The fp8 scaling state of a device tape (see the file comment): fp8::scaling_state's entries
/// and order, with each tensor's scale, history and statistics in device memory.
class fp8_scaling_state {
 public:
  /// `backend` names the stream end_step(), download() and the entries' set-up run on (any
  /// type with a `stream` member: precis::cuda::device_backend).
  template <class Backend>
  fp8_scaling_state(fp8::recipe r, const Backend& backend) : host_(r), stream_(backend.stream) {}
  explicit fp8_scaling_state(fp8::recipe r, cudaStream_t stream = nullptr) : host_(r), stream_(stream) {}
  fp8_scaling_state(const fp8_scaling_state&) = delete;
  fp8_scaling_state& operator=(const fp8_scaling_state&) = delete;

  const fp8::recipe& config() const noexcept { return host_.config(); }

  /// The entry of the next fp8 GEMM of this step (fp8::scaling_state::next). A new entry's
  /// device state is allocated and initialized here (scale 1, empty history; under delayed
  /// scaling the update table rebuilt): synchronous, so only the first step of a model pays it.
  fp8::gemm_scaling& next(std::string_view op) {
    fp8::gemm_scaling& g = host_.next(op);
    if (g.index >= entries_.size()) add_entry();
    return g;
  }

  /// Closes the step: under delayed scaling one kernel updates the scales of the entries used
  /// in it (no synchronization). The next step starts at entry 0.
  void end_step() {
    const std::size_t used = host_.used();
    host_.rewind();
    const fp8::recipe& r = host_.config();
    if (r.which != fp8::recipe::kind::delayed || used == 0) return;
    fp8_detail::delayed_update_kernel<><<<static_cast<unsigned>(3 * used), fp8_detail::threads, 0, stream_>>>(
        table_.data(), static_cast<unsigned>(r.delayed.history_len), r.delayed.reduce == fp8::amax_reduction::max, r.delayed.margin);
    check(cudaGetLastError(), "precis::cuda::fp8_scaling_state::end_step: launch");
  }

  /// x (n contiguous values of S in device memory) cast into out (n of operand R's format) by
  /// entry `entry`'s scaling of R, on `stream`; the scale used is written to the device float
  /// `used`. No synchronization.
  template <fp8::operand R, class S>
  void cast(std::size_t entry, const S* x, index_t n, fp8::operand_format_t<R>* out, float* used, cudaStream_t stream) {
    using F8 = fp8::operand_format_t<R>;
    if (entry >= entries_.size()) {
      throw invalid_argument("precis::cuda::fp8_scaling_state::cast: entry " + std::to_string(entry) + " of " +
                             std::to_string(entries_.size()) + "; expected an entry next() handed out");
    }
    constexpr int t = static_cast<int>(R);
    fp8_detail::slot* s = slot_of(entry, t);
    const fp8::recipe& r = host_.config();
    const int kind = r.which == fp8::recipe::kind::current ? 0 : r.which == fp8::recipe::kind::delayed ? 1 : 2;
    check(cudaMemsetAsync(s, 0, fp8_detail::last_bytes, stream), "precis::cuda::fp8_scaling_state::cast: cudaMemsetAsync");
    const unsigned blocks = fp8_detail::cast_blocks(n);
    if (kind == 0 && n > 0) {
      fp8_detail::amax_kernel<S><<<blocks, fp8_detail::threads, 0, stream>>>(x, n, s);
      check(cudaGetLastError(), "precis::cuda::fp8_scaling_state::cast: amax launch");
    }
    const float fp8_max = fp8::max_finite<F8>();
    const float overflow_at = fp8::overflow_threshold<F8>();
    fp8_detail::cast_kernel<F8, S><<<blocks, fp8_detail::threads, 0, stream>>>(
        x, n, out, s, history_of(entry, t), kind, fp8_max, r.which == fp8::recipe::kind::current ? r.current.margin : 0,
        r.which == fp8::recipe::kind::current && r.current.power_of_two, overflow_at, used);
    check(cudaGetLastError(), "precis::cuda::fp8_scaling_state::cast: launch");
  }

  /// Copies the device state into the host entries (waits for the stream): each tensor's last
  /// statistics and scale, totals, and under delayed scaling its scale and history (entry 0 the
  /// current step's, as fp8::delayed_scaler keeps it). Afterwards (*this)[k] reads as a host
  /// tape's entry would.
  void download() {
    const fp8::recipe& r = host_.config();
    const std::size_t len = r.which == fp8::recipe::kind::delayed ? r.delayed.history_len : 0;
    std::vector<unsigned char> buf;
    std::vector<float> hist(len);
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      buf.resize(entries_[k].mem.size());
      check(cudaMemcpyAsync(buf.data(), entries_[k].mem.data(), buf.size(), cudaMemcpyDeviceToHost, stream_),
            "precis::cuda::fp8_scaling_state::download");
      check(cudaStreamSynchronize(stream_), "precis::cuda::fp8_scaling_state::download");
      fp8::gemm_scaling& g = host_[k];
      const auto install = [&](auto& ts, int t) {
        fp8_detail::slot s;
        std::memcpy(&s, buf.data() + t * slot_stride, sizeof s);
        fp8::cast_stats last;
        last.amax = bits_to_float(s.last_amax_bits);
        last.count = static_cast<std::size_t>(s.last_count);
        last.saturated = static_cast<std::size_t>(s.last_saturated);
        last.flushed = static_cast<std::size_t>(s.last_flushed);
        fp8::telemetry total;
        total.casts = static_cast<std::size_t>(s.casts);
        total.count = static_cast<std::size_t>(s.count);
        total.saturated = static_cast<std::size_t>(s.saturated);
        total.flushed = static_cast<std::size_t>(s.flushed);
        ts.install(last, s.last_scale, total);
        if (len > 0) {
          const unsigned char* h = buf.data() + 3 * slot_stride + t * len * sizeof(unsigned);
          for (std::size_t i = 0; i < len; ++i) {
            unsigned b;
            std::memcpy(&b, h + ((s.pos + i) % len) * sizeof(unsigned), sizeof b);
            hist[i] = bits_to_float(b);
          }
          ts.delayed().restore(hist, s.scale);
        }
      };
      install(g.input, 0);
      install(g.weight, 1);
      install(g.grad_output, 2);
    }
  }

  /// Casts counted since the last reset_telemetry(), over every tensor of every entry (waits
  /// for the stream: download()).
  fp8::telemetry totals() {
    download();
    return host_.totals();
  }
  /// Zeroes the totals (on the stream, and on the host).
  void reset_telemetry() {
    for (entry& e : entries_) {
      for (int t = 0; t < 3; ++t) {
        fp8_detail::slot* s = slot_of_entry(e, t);
        check(cudaMemsetAsync(&s->saturated, 0, fp8_detail::total_bytes, stream_), "precis::cuda::fp8_scaling_state::reset_telemetry");
      }
    }
    host_.reset_telemetry();
  }

  std::size_t size() const noexcept { return host_.size(); }
  /// Entry k as of the last download().
  const fp8::gemm_scaling& operator[](std::size_t k) const { return host_[k]; }

 private:
  static constexpr std::size_t slot_stride = 128;
  static_assert(sizeof(fp8_detail::slot) <= slot_stride);

  /// One entry's device memory: three slots, then three histories of history_len amaxes
  /// (delayed scaling only).
  struct entry {
    device_buffer<unsigned char> mem;
  };

  static float bits_to_float(unsigned b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  }
  static fp8_detail::slot* slot_of_entry(entry& e, int t) {
    return reinterpret_cast<fp8_detail::slot*>(e.mem.data() + t * slot_stride);
  }
  fp8_detail::slot* slot_of(std::size_t k, int t) { return slot_of_entry(entries_[k], t); }
  unsigned* history_of(std::size_t k, int t) {
    const fp8::recipe& r = host_.config();
    if (r.which != fp8::recipe::kind::delayed) return nullptr;
    return reinterpret_cast<unsigned*>(entries_[k].mem.data() + 3 * slot_stride) + t * r.delayed.history_len;
  }

  void add_entry() {
    const fp8::recipe& r = host_.config();
    const std::size_t len = r.which == fp8::recipe::kind::delayed ? r.delayed.history_len : 0;
    std::vector<unsigned char> init(3 * slot_stride + 3 * len * sizeof(unsigned), 0);
    for (int t = 0; t < 3; ++t) {
      fp8_detail::slot s{};
      s.scale = 1.0f;
      s.last_scale = 1.0f;
      std::memcpy(init.data() + t * slot_stride, &s, sizeof s);
    }
    entry e{device_buffer<unsigned char>(init.size())};
    check(cudaMemcpyAsync(e.mem.data(), init.data(), init.size(), cudaMemcpyHostToDevice, stream_),
          "precis::cuda::fp8_scaling_state: a new entry's state");
    check(cudaStreamSynchronize(stream_), "precis::cuda::fp8_scaling_state: a new entry's state");
    entries_.push_back(std::move(e));
    if (len > 0) upload_table();  // here, in the step that met the entry, rather than in a later end_step()
  }

  void upload_table() {
    std::vector<fp8_detail::tensor_ref> t;
    t.reserve(3 * entries_.size());
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      t.push_back({slot_of(k, 0), history_of(k, 0), fp8::max_finite<float8_e4m3>()});
      t.push_back({slot_of(k, 1), history_of(k, 1), fp8::max_finite<float8_e4m3>()});
      t.push_back({slot_of(k, 2), history_of(k, 2), fp8::max_finite<float8_e5m2>()});
    }
    table_ = device_buffer<fp8_detail::tensor_ref>(t.size());
    check(cudaMemcpyAsync(table_.data(), t.data(), t.size() * sizeof(t[0]), cudaMemcpyHostToDevice, stream_),
          "precis::cuda::fp8_scaling_state: the update table");
    check(cudaStreamSynchronize(stream_), "precis::cuda::fp8_scaling_state: the update table");
  }

  fp8::scaling_state host_;
  cudaStream_t stream_;
  std::deque<entry> entries_;
  device_buffer<fp8_detail::tensor_ref> table_;
};

}  // namespace precis::cuda
