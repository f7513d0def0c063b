// Element-wise maps on device views: y = f(x...) with NumPy broadcasting and any strides, each
// input widened exactly to the arithmetic type A, f evaluated in A, and each output rounded
// once to nearest into y's format. The device half of precis::map_into: the same functors (the
// op layer's, precis::fn and the derivatives, are PRECIS_HOST_DEVICE) on the same semantics.
// Include only from .cu translation units.
//
//   precis::cuda::map_into<float>(stream, "precis::relu", y.view(), precis::fn::relu{}, x.view());
//   precis::cuda::map_into<float>(stream, "precis::add", y.view(), precis::fn::add{}, a.view(), bias.view());  // bias [n] broadcast
//
// Formats: fp64, fp32, fp16, bf16 (inputs and output); A is float, double, or narrow<half> /
// narrow<bfloat16> (fp16 / bf16 arithmetic, each operation rounded into the format: the host's
// maps in precis::half or precis::bfloat16). An output rounded from double to fp16 or bf16 is
// rounded once from the double value. Against the host's
// map_into on the same data: the same bits wherever f's every operation is correctly rounded on
// both (+ - * / sqrt, comparisons, selections) and nvcc does not fuse a multiply and an add
// (a * b + c becomes one fused multiply-add on the device unless the translation unit is built
// with -fmad=false); library functions (exp, log, tanh, erf, pow) follow CUDA's error bounds
// (CUDA C++ Programming Guide, "Mathematical Functions": expf 2 ulp, logf 1, tanhf 2, erff 2).
//
// Where every operand is dense (row-major over the whole shape, no broadcast) and 16-byte
// aligned, a thread reads and writes eight neighbouring elements at a time with 16-byte
// accesses (the tail one by one): the same values, fewer and wider memory instructions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "precis/cuda/accumulator.cuh"
#include "precis/cuda/device.cuh"
#include "precis/error.hpp"
#include "precis/tensor/elementwise.hpp"
#include "precis/tensor/shape.hpp"

namespace precis::cuda {

namespace ew_detail {

template <class T>
constexpr bool format = std::is_same_v<T, double> || std::is_same_v<T, float> || std::is_same_v<T, precis::half> ||
                        std::is_same_v<T, precis::bfloat16>;

/// The arithmetic a map evaluates its function in: fp64, fp32, or an emulated 16-bit format.
template <class A>
constexpr bool arithmetic = std::is_same_v<A, float> || std::is_same_v<A, double> || std::is_same_v<A, narrow<precis::half>> ||
                            std::is_same_v<A, narrow<precis::bfloat16>>;

/// p[0] widened exactly to A.
template <class A, class S>
__device__ A load(const S* p) {
  if constexpr (std::is_same_v<S, double>) return static_cast<A>(*p);
  else return static_cast<A>(precis::cuda::detail::load_as_float(p, 0));
}

/// *p = v rounded once to nearest even.
template <class O, class A>
__device__ void store(O* p, A v) {
  if constexpr (std::is_same_v<O, double> || std::is_same_v<O, float>) {
    *p = static_cast<O>(v);
  } else if constexpr (std::is_same_v<A, double>) {
    if constexpr (std::is_same_v<O, precis::half>) *reinterpret_cast<__half*>(p) = __double2half(v);
    else *reinterpret_cast<__nv_bfloat16*>(p) = __double2bfloat16(v);
  } else {
    precis::cuda::detail::store_rounded(p, 0, static_cast<float>(v));
  }
}

/// The output's shape and, for the output and each input, its strides broadcast to that shape
/// (0 on broadcast axes), after merging axes that are contiguous in every operand.
template <std::size_t N>
struct layout {
  int rank = 0;
  index_t shape[max_rank] = {};
  index_t strides[N][max_rank] = {};
  bool dense = false;  // every operand row-major over the whole shape: offset = index
  bool vec = false;    // dense, and every operand 16-byte aligned: eight elements a load
};

/// Eight neighbouring elements, loaded and stored as 16-byte words.
template <class T>
struct alignas(16) vec8 {
  T v[8];
};

template <class A, class O, class F, std::size_t N, class... X, std::size_t... I>
__device__ void apply(O* y, const F& f, const layout<N>& l, index_t i, std::index_sequence<I...>, const X*... x) {
  if (l.dense) {
    store(y + i, f(load<A>(x + i)...));
    return;
  }
  index_t off[N] = {};
  index_t rest = i;
  for (int d = l.rank - 1; d >= 0; --d) {
    const index_t c = rest % l.shape[d];
    rest /= l.shape[d];
    for (std::size_t k = 0; k < N; ++k) off[k] += c * l.strides[k][d];
  }
  store(y + off[0], f(load<A>(x + off[I + 1])...));
}

/// out[e] = p[e] widened to A, for the eight elements at p (16-byte aligned).
template <class A, class X>
__device__ __forceinline__ void load8(const X* p, A (&out)[8]) {
  const vec8<X> c = *reinterpret_cast<const vec8<X>*>(p);
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = load<A>(&c.v[e]);
}

/// y[i + e] = f(x[i + e]...) for e < 8, every input's eight elements loaded before any is
/// stored (so y may be an input exactly).
template <class A, class O, class F, class... X>
__device__ void apply8(O* y, const F& f, index_t i, const X*... x) {
  A v[sizeof...(X) > 0 ? sizeof...(X) : 1][8];
  [[maybe_unused]] std::size_t k = 0;
  (load8<A>(x + i, v[k++]), ...);
  vec8<O> out;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
#pragma unroll
    for (int e = 0; e < 8; ++e) store(&out.v[e], f(v[I][e]...));
  }(std::index_sequence_for<X...>{});
  *reinterpret_cast<vec8<O>*>(y + i) = out;
}

template <class A, class O, class F, std::size_t N, class... X>
__global__ void map_kernel(O* y, F f, layout<N> l, index_t n, const X*... x) {
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  index_t done = 0;
  if (l.vec) {
    done = n / 8 * 8;
    for (index_t g = first; g < n / 8; g += step) apply8<A>(y, f, 8 * g, x...);
  }
  for (index_t i = done + first; i < n; i += step) apply<A>(y, f, l, i, std::index_sequence_for<X...>{}, x...);
}

/// Strides of view v (shape s, strides st) broadcast to `out` (aligned at the trailing axis).
inline void broadcast_strides(const Shape& s, const Shape& st, const Shape& out, index_t* to) {
  for (int d = 0; d < out.rank(); ++d) {
    const int k = d - (out.rank() - s.rank());
    to[d] = (k < 0 || s[k] == 1) ? 0 : st[k];
  }
}

/// The layout of y and its inputs x (each broadcast to y's shape): every operand's strides over
/// the output's axes, then axes of extent 1 dropped and axes that continue each other in every
/// operand merged (the row-major order of y's elements is kept: element i of a kernel's loop is
/// y's row-major position i).
template <std::size_t N, class O, class... X>
layout<N> layout_of(const DeviceView<O>& y, const DeviceView<X>&... x) {
  const Shape& out = y.shape();
  layout<N> l;
  std::array<std::array<index_t, max_rank>, N> st{};
  for (int d = 0; d < out.rank(); ++d) st[0][static_cast<std::size_t>(d)] = y.strides()[d];
  {
    std::size_t k = 1;
    ((broadcast_strides(x.shape(), x.strides(), out, st[k++].data())), ...);
  }
  for (int d = 0; d < out.rank(); ++d) {
    if (out[d] == 1) continue;
    const int r = l.rank;
    bool merge = r > 0;
    for (std::size_t k = 0; k < N && merge; ++k) merge = l.strides[k][r - 1] == st[k][static_cast<std::size_t>(d)] * out[d];
    if (merge) {
      l.shape[r - 1] *= out[d];
      for (std::size_t k = 0; k < N; ++k) l.strides[k][r - 1] = st[k][static_cast<std::size_t>(d)];
    } else {
      l.shape[r] = out[d];
      for (std::size_t k = 0; k < N; ++k) l.strides[k][r] = st[k][static_cast<std::size_t>(d)];
      ++l.rank;
    }
  }
  l.dense = l.rank <= 1;
  for (std::size_t k = 0; k < N && l.dense; ++k) l.dense = l.rank == 0 || l.strides[k][0] == 1;
  return l;
}

/// Offsets of element i (row-major) in each operand.
template <std::size_t N>
__device__ void offsets(const layout<N>& l, index_t i, index_t* off) {
  for (std::size_t k = 0; k < N; ++k) off[k] = l.dense ? i : 0;
  if (l.dense) return;
  index_t rest = i;
  for (int d = l.rank - 1; d >= 0; --d) {
    const index_t c = rest % l.shape[d];
    rest /= l.shape[d];
    for (std::size_t k = 0; k < N; ++k) off[k] += c * l.strides[k][d];
  }
}

/// y[i] = f(i, y[i], x[i]) for y's elements in row-major order i.
template <class A, class O, class F, class X>
__global__ void map_indexed_kernel(O* y, F f, layout<2> l, index_t n, const X* x) {
  const auto step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    index_t off[2];
    offsets(l, i, off);
    store(y + off[0], f(i, load<A>(y + off[0]), load<A>(x + off[1])));
  }
}

}  // namespace ew_detail

/// y = f(x...) element-wise on `stream`: x broadcast to y's shape (NumPy rules), each loaded into
/// A, f(A...) -> A, rounded once into y. y may be one of the inputs exactly (the same pointer,
/// shape and strides: each element is read before it is written by the same thread); any other
/// overlap is an aliasing_error, as is an output with a broadcast (zero-stride) axis. Shapes
/// that do not broadcast to y's are a shape_error naming `op`. Asynchronous, like any launch.
template <class A, class O, class F, class... X>
void map_into(cudaStream_t stream, const char* op, const DeviceView<O>& y, F f, const DeviceView<X>&... x) {
  static_assert(ew_detail::arithmetic<A>, "precis::cuda::map_into: arithmetic in float, double or precis::cuda::narrow");
  static_assert(ew_detail::format<O> && (ew_detail::format<precis::detail::remove_const_t<X>> && ...),
                "precis::cuda::map_into: formats fp64, fp32, fp16, bf16");
  static_assert(!std::is_const_v<O>, "precis::cuda::map_into: the output view must be writable");
  constexpr std::size_t N = 1 + sizeof...(X);
  const Shape& out = y.shape();
  (
      [&] {
        if (broadcast_shapes(x.shape(), out, op) != out) {
          throw shape_error(std::string(op) + ": an input of shape " + x.shape().str() + " does not broadcast to the output's " +
                            out.str());
        }
      }(),
      ...);
  for (int d = 0; d < out.rank(); ++d) {
    if (out[d] > 1 && y.strides()[d] == 0) {
      throw aliasing_error(std::string(op) + ": the output " + out.str() + " has strides " + y.strides().str() +
                           "; expected no broadcast (zero-stride) axis in an output");
    }
  }
  (
      [&] {
        const bool same = static_cast<const void*>(x.data()) == static_cast<const void*>(y.data()) && x.shape() == out &&
                          x.strides() == y.strides() && sizeof(*x.data()) == sizeof(O);
        if (!same && may_overlap(DeviceView<const O>(y), x)) {
          throw aliasing_error(std::string(op) + ": the output " + out.str() + " overlaps an input " + x.shape().str() +
                               " without being that input exactly");
        }
      }(),
      ...);
  const index_t n = out.numel();
  if (n == 0) return;
  auto l = ew_detail::layout_of<N>(y, x...);
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  l.vec = l.dense && n >= 8 && aligned(y.data()) && (aligned(x.data()) && ...);
  const int threads = 256;
  const index_t items = l.vec ? n / 8 : n;
  const auto blocks = static_cast<unsigned>(std::min<index_t>((items + threads - 1) / threads, 65535));
  ew_detail::map_kernel<A><<<blocks, threads, 0, stream>>>(y.data(), f, l, n, x.data()...);
  check(cudaGetLastError(), std::string(op) + ": launch of the element-wise kernel (" + std::to_string(n) + " elements)");
}

/// y[i] = f(i, y[i], x[i]) element-wise on `stream`, i the element's row-major position in y
/// (dropout's mask), y and x of one shape, each loaded into A and the result rounded once into
/// y. x overlapping y other than exactly is an aliasing_error.
template <class A, class O, class F, class X>
void map_indexed(cudaStream_t stream, const char* op, const DeviceView<O>& y, F f, const DeviceView<X>& x) {
  static_assert(ew_detail::arithmetic<A>, "precis::cuda::map_indexed: arithmetic in float, double or precis::cuda::narrow");
  if (x.shape() != y.shape()) {
    throw shape_error(std::string(op) + ": an input of shape " + x.shape().str() + " for an output of shape " + y.shape().str() +
                      "; expected the same shape");
  }
  const bool same = static_cast<const void*>(x.data()) == static_cast<const void*>(y.data()) && x.strides() == y.strides();
  if (!same && may_overlap(DeviceView<const O>(y), x)) {
    throw aliasing_error(std::string(op) + ": the output " + y.shape().str() + " overlaps its input without being it exactly");
  }
  const index_t n = y.size();
  if (n == 0) return;
  const auto l = ew_detail::layout_of<2>(y, x);
  const auto blocks = static_cast<unsigned>(std::min<index_t>((n + 255) / 256, 65535));
  ew_detail::map_indexed_kernel<A><<<blocks, 256, 0, stream>>>(y.data(), f, l, n, x.data());
  check(cudaGetLastError(), std::string(op) + ": launch of the indexed element-wise kernel (" + std::to_string(n) + " elements)");
}

}  // namespace precis::cuda
