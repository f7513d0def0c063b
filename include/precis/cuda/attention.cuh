// Attention of small matrices fused on the device: the op layer's attention (ops/attention.hpp)
// for every (entry, head) matrix of a call in one launch forward and one backward, a block per
// matrix, instead of a loop of GEMMs, softmax kernels and copies per matrix (the demo's vision
// transformer: 128 entries x 4 heads of 16 x 16 a call, about 10,000 launches a step that way).
// Include only from .cu translation units.
//
// The arithmetic is the loop's, in the accumulator's device type V = acc_t<Acc> (fp16 and bf16
// with every operation rounded into the format): scores s_ij = sum_c q_ic k_jc (c in order),
// times the scale; each row's maximum over the keys it may see, exp(s - max), their sum and the
// quotients (keys past i are 0 under the causal mask); the probabilities kept in Acc for the
// backward and rounded to the storage type L as the second product's operand when L is not
// Acc; y_ic = sum_j p_ij v_jc (j in order) rounded once into y. Backward: dv_jc = sum_i p_ij g_ic,
// dp_ij = sum_c g_ic v_jc, ds = p (dp - sum_j dp p) scale, dq = ds k, dk = ds^T q, each added
// into (or, for a fresh gradient, written to) an Acc gradient. Every sum runs in index order
// with each product and addition rounded once (acc_math::mul_rn / add_rn: never fused), and a
// row's maximum, sum of exponentials and dot product combine its 32 lanes by a butterfly, so a
// call gives the same bits on every run and GPU. The orders differ from the GEMMs' of the loop,
// not the bounds: a sum of m terms has gamma(m) (Higham 2002, 3.1).
//
// Every matrix of the call must fit in a block's shared memory (attention_fused_fits: the
// backward's six matrices in at most 48 KiB of words); larger ones take the loop.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/elementwise.cuh"
#include "precis/cuda/reduce.cuh"

namespace precis::cuda {

/// The sizes of one fused attention call: matrices entries x heads, each q [tq, d], k [tk, d],
/// v [tk, dv], heads side by side in the last axis of q, k, v and y ([..., rows, heads cols]).
struct attention_dims {
  index_t matrices = 0, heads = 1, tq = 0, tk = 0, d = 0, dv = 0;
};

namespace attention_detail {

using reduce_detail::from_word;
using reduce_detail::to_word;
using reduce_detail::word_t;

/// Element (i, c) of matrix b (entry b / heads, head b % heads) in a [..., rows, heads cols]
/// dense tensor.
__device__ __forceinline__ index_t at(const attention_dims& n, index_t rows, index_t cols, index_t b, index_t i, index_t c) {
  return (b / n.heads) * rows * n.heads * cols + i * n.heads * cols + (b % n.heads) * cols + c;
}

/// Matrix b of a heads layout widened into shared words, row-major [rows, cols].
template <class V, class S>
__device__ void load_matrix(word_t<V>* dst, const S* src, const attention_dims& n, index_t rows, index_t cols, index_t b) {
  for (index_t t = threadIdx.x; t < rows * cols; t += blockDim.x) dst[t] = to_word(ew_detail::load<V>(src + at(n, rows, cols, b, t / cols, t % cols)));
}

/// v rounded once into L and widened back: the operand a product in L reads.
template <class L, class V>
__device__ V through(V v) {
  L t;
  ew_detail::store(&t, v);
  return ew_detail::load<V>(&t);
}

/// The larger; a NaN wins (as the host's maximum).
template <class V>
__device__ V larger(V a, V b) {
  return b > a || b != b ? b : a;
}

/// v combined over the warp by a butterfly: every lane gets the same bits (each level adds the
/// same two values on both lanes of a pair).
template <class V, class Op>
__device__ V warp_all(V v, Op op) {
  for (int w = 16; w > 0; w /= 2) v = op(v, acc_math::shfl_xor(v, w));
  return v;
}

/// The words of shared memory the backward of one matrix needs (the forward needs fewer).
inline index_t words_backward(const attention_dims& n) {
  return n.tq * n.d + n.tk * n.d + n.tk * n.dv + n.tq * n.dv + 2 * n.tq * n.tk;
}

template <class Acc, class L, class O>
__global__ void __launch_bounds__(256) forward_kernel(const L* q, const L* k, const L* v, Acc* p, O* y, attention_dims n, Acc scale,
                                                      bool causal) {
  using V = acc_t<Acc>;
  using W = word_t<V>;
  extern __shared__ double smem_words[];
  W* sq = reinterpret_cast<W*>(smem_words);
  W* sk = sq + n.tq * n.d;
  W* sv = sk + n.tk * n.d;
  W* ss = sv + n.tk * n.dv;
  const index_t b = blockIdx.x;
  load_matrix<V>(sq, q, n, n.tq, n.d, b);
  load_matrix<V>(sk, k, n, n.tk, n.d, b);
  load_matrix<V>(sv, v, n, n.tk, n.dv, b);
  __syncthreads();
  const V sc = ew_detail::load<V>(&scale);
  for (index_t t = threadIdx.x; t < n.tq * n.tk; t += blockDim.x) {
    const index_t i = t / n.tk, j = t % n.tk;
    V s = 0;
    for (index_t c = 0; c < n.d; ++c) s = acc_math::add_rn(s, acc_math::mul_rn(from_word<V>(sq[i * n.d + c]), from_word<V>(sk[j * n.d + c])));
    ss[t] = to_word(V(s * sc));
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
  Acc* pb = p + b * n.tq * n.tk;
  for (index_t i = threadIdx.x / 32; i < n.tq; i += warps) {
    W* row = ss + i * n.tk;
    const index_t allowed = causal ? (i + 1 < n.tk ? i + 1 : n.tk) : n.tk;
    V mx = -V(INFINITY);
    for (index_t j = lane; j < allowed; j += 32) mx = larger(mx, from_word<V>(row[j]));
    mx = warp_all(mx, [](V a, V c) { return larger(a, c); });
    V sum = 0;
    for (index_t j = lane; j < allowed; j += 32) {
      const V e = acc_math::exp(V(from_word<V>(row[j]) - mx));
      row[j] = to_word(e);
      sum += e;
    }
    sum = warp_all(sum, [](V a, V c) { return a + c; });
    for (index_t j = lane; j < n.tk; j += 32) {
      const V pv = j < allowed ? V(from_word<V>(row[j]) / sum) : V(0);
      ew_detail::store(pb + i * n.tk + j, pv);
      if constexpr (std::is_same_v<L, Acc>) row[j] = to_word(pv);
      else row[j] = to_word(through<L>(pv));
    }
  }
  __syncthreads();
  for (index_t t = threadIdx.x; t < n.tq * n.dv; t += blockDim.x) {
    const index_t i = t / n.dv, c = t % n.dv;
    V o = 0;
    for (index_t j = 0; j < n.tk; ++j) o = acc_math::add_rn(o, acc_math::mul_rn(from_word<V>(ss[i * n.tk + j]), from_word<V>(sv[j * n.dv + c])));
    ew_detail::store(y + at(n, n.tq, n.dv, b, i, c), o);
  }
}

/// *g = a (fresh) or *g + a, in V, rounded once into Acc.
template <class V, class Acc>
__device__ void add_to(Acc* g, V a, bool fresh) {
  ew_detail::store(g, fresh ? a : V(ew_detail::load<V>(g) + a));
}

template <class Acc, class L, class G>
__global__ void __launch_bounds__(256) backward_kernel(const L* q, const L* k, const L* v, const Acc* p, const G* gy, Acc* gq, Acc* gk,
                                                       Acc* gv, bool fresh_q, bool fresh_k, bool fresh_v, attention_dims n, Acc scale) {
  using V = acc_t<Acc>;
  using W = word_t<V>;
  extern __shared__ double smem_words[];
  W* sq = reinterpret_cast<W*>(smem_words);
  W* sk = sq + n.tq * n.d;
  W* sv = sk + n.tk * n.d;
  W* sg = sv + n.tk * n.dv;
  W* sp = sg + n.tq * n.dv;
  W* sd = sp + n.tq * n.tk;
  const index_t b = blockIdx.x;
  load_matrix<V>(sq, q, n, n.tq, n.d, b);
  load_matrix<V>(sk, k, n, n.tk, n.d, b);
  load_matrix<V>(sv, v, n, n.tk, n.dv, b);
  load_matrix<V>(sg, gy, n, n.tq, n.dv, b);
  const Acc* pb = p + b * n.tq * n.tk;
  for (index_t t = threadIdx.x; t < n.tq * n.tk; t += blockDim.x) sp[t] = to_word(ew_detail::load<V>(pb + t));
  __syncthreads();
  if (gv != nullptr) {  // dv = p^T g, with p as the forward's product read it
    for (index_t t = threadIdx.x; t < n.tk * n.dv; t += blockDim.x) {
      const index_t j = t / n.dv, c = t % n.dv;
      V a = 0;
      for (index_t i = 0; i < n.tq; ++i) {
        V pv = from_word<V>(sp[i * n.tk + j]);
        if constexpr (!std::is_same_v<L, Acc>) pv = through<L>(pv);
        a = acc_math::add_rn(a, acc_math::mul_rn(pv, from_word<V>(sg[i * n.dv + c])));
      }
      add_to(gv + at(n, n.tk, n.dv, b, j, c), a, fresh_v);
    }
  }
  if (gq == nullptr && gk == nullptr) return;
  for (index_t t = threadIdx.x; t < n.tq * n.tk; t += blockDim.x) {  // dp = g v^T
    const index_t i = t / n.tk, j = t % n.tk;
    V s = 0;
    for (index_t c = 0; c < n.dv; ++c) s = acc_math::add_rn(s, acc_math::mul_rn(from_word<V>(sg[i * n.dv + c]), from_word<V>(sv[j * n.dv + c])));
    sd[t] = to_word(s);
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
  const V sc = ew_detail::load<V>(&scale);
  for (index_t i = threadIdx.x / 32; i < n.tq; i += warps) {  // ds = p (dp - sum(dp p)) scale
    W* d = sd + i * n.tk;
    const W* pr = sp + i * n.tk;
    V dot = 0;
    for (index_t j = lane; j < n.tk; j += 32) dot = acc_math::add_rn(dot, acc_math::mul_rn(from_word<V>(d[j]), from_word<V>(pr[j])));
    dot = warp_all(dot, [](V a, V c) { return a + c; });
    for (index_t j = lane; j < n.tk; j += 32) d[j] = to_word(V(V(from_word<V>(pr[j]) * V(from_word<V>(d[j]) - dot)) * sc));
  }
  __syncthreads();
  if (gq != nullptr) {  // dq = ds k
    for (index_t t = threadIdx.x; t < n.tq * n.d; t += blockDim.x) {
      const index_t i = t / n.d, c = t % n.d;
      V a = 0;
      for (index_t j = 0; j < n.tk; ++j) a = acc_math::add_rn(a, acc_math::mul_rn(from_word<V>(sd[i * n.tk + j]), from_word<V>(sk[j * n.d + c])));
      add_to(gq + at(n, n.tq, n.d, b, i, c), a, fresh_q);
    }
  }
  if (gk != nullptr) {  // dk = ds^T q
    for (index_t t = threadIdx.x; t < n.tk * n.d; t += blockDim.x) {
      const index_t j = t / n.d, c = t % n.d;
      V a = 0;
      for (index_t i = 0; i < n.tq; ++i) a = acc_math::add_rn(a, acc_math::mul_rn(from_word<V>(sd[i * n.tk + j]), from_word<V>(sq[i * n.d + c])));
      add_to(gk + at(n, n.tk, n.d, b, j, c), a, fresh_k);
    }
  }
}

}  // namespace attention_detail

/// Whether a call of these sizes runs fused: formats the device kernels read (fp64, fp32, fp16,
/// bf16) and a backward whose six matrices fit in 48 KiB of shared memory.
template <class Acc, class L, class O, class G>
bool attention_fused_fits(const attention_dims& n) {
  if constexpr (!ew_detail::format<L> || !ew_detail::format<O> || !ew_detail::format<G> || !acc_format<Acc>) {
    return false;
  } else {
    return n.tq > 0 && n.tk > 0 &&
           attention_detail::words_backward(n) * static_cast<index_t>(sizeof(attention_detail::word_t<acc_t<Acc>>)) <= 48 * 1024;
  }
}

/// Attention's forward for every matrix of the call on `stream` (see the file comment): q, k
/// [..., tq or tk, heads d], v [..., tk, heads dv] (dense, L), p [matrices, tq, tk] (dense, Acc)
/// and y [..., tq, heads dv] (dense, O) written.
template <class Acc, class L, class O>
void attention_forward(cudaStream_t stream, const attention_dims& n, const L* q, const L* k, const L* v, Acc scale, bool causal, Acc* p,
                       O* y) {
  if (n.matrices == 0) return;
  const auto bytes = static_cast<std::size_t>(n.tq * n.d + n.tk * n.d + n.tk * n.dv + n.tq * n.tk) *
                     sizeof(attention_detail::word_t<acc_t<Acc>>);
  attention_detail::forward_kernel<Acc, L, O><<<static_cast<unsigned>(n.matrices), 256, bytes, stream>>>(q, k, v, p, y, n, scale, causal);
  check(cudaGetLastError(), "precis::attention: launch of the fused forward (" + std::to_string(n.matrices) + " matrices)");
}

/// Attention's backward for every matrix of the call on `stream`: the gradients gq, gk, gv
/// (Acc, dense, q's, k's and v's shapes; null: not wanted) added into, or written where fresh.
template <class Acc, class L, class G>
void attention_backward(cudaStream_t stream, const attention_dims& n, const L* q, const L* k, const L* v, const Acc* p, const G* gy,
                        Acc scale, Acc* gq, Acc* gk, Acc* gv, bool fresh_q, bool fresh_k, bool fresh_v) {
  if (n.matrices == 0 || (gq == nullptr && gk == nullptr && gv == nullptr)) return;
  const auto bytes = static_cast<std::size_t>(attention_detail::words_backward(n)) * sizeof(attention_detail::word_t<acc_t<Acc>>);
  attention_detail::backward_kernel<Acc, L, G><<<static_cast<unsigned>(n.matrices), 256, bytes, stream>>>(
      q, k, v, p, gy, gq, gk, gv, fresh_q, fresh_k, fresh_v, n, scale);
  check(cudaGetLastError(), "precis::attention: launch of the fused backward (" + std::to_string(n.matrices) + " matrices)");
}

}  // namespace precis::cuda
