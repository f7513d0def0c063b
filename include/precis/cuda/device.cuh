// Device tensors for nvcc builds: cudaMalloc-backed memory (never managed memory), host <->
// device copies, strided views (transposes without copies), and element-wise conversions
// between fp32, fp16 and bf16 on the device. Include only from .cu translation units.
//
//   auto d = precis::cuda::DeviceTensor<float>::from_host(x);   // cudaMemcpy host -> device
//   precis::cuda::DeviceTensor<precis::bfloat16> b(d.shape());
//   precis::cuda::convert(d, b);                                 // one rounding per element
//   precis::Tensor<precis::bfloat16> back = b.to_host();
//
// Conversions round to nearest even with the device's own instructions (__float2half_rn,
// __float2bfloat16_rn) and give the same bits as precis::convert on the host for every
// non-NaN value (the gpu test checks every fp16 and bf16 pattern and 2^20 fp32 values); NaNs
// stay NaN, payloads may differ. A CUDA failure is a cuda_error naming the call and the bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "precis/error.hpp"
#include "precis/format/bfloat16.hpp"
#include "precis/format/half.hpp"
#include "precis/tensor/tensor.hpp"

namespace precis::cuda {

/// A CUDA runtime call failed (no device, out of memory, a bad launch ...).
class cuda_error : public precis::error {
 public:
  using precis::error::error;
};

inline void check(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky error of non-fatal failures
  throw cuda_error("precis::cuda: " + what + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
}

/// How many CUDA devices there are (0 when there is no driver or no device).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

/// n elements of T in device memory (cudaMalloc). Move-only.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n) : n_(n) {
    if (n == 0) return;
    void* p = nullptr;
    check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes");
    p_ = static_cast<T*>(p);
  }
  device_buffer(device_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() noexcept { return p_; }
  const T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

 private:
  void release() noexcept {
    if (p_) cudaFree(p_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// A non-owning view of device memory: a pointer, a shape and strides in elements (>= 0), like
/// precis::TensorView but never dereferenced on the host. S may be const-qualified.
template <class S>
class DeviceView {
 public:
  using storage_type = precis::detail::remove_const_t<S>;

  DeviceView() = default;
  DeviceView(S* data, const Shape& shape) : DeviceView(data, shape, contiguous_strides(shape)) {}
  DeviceView(S* data, const Shape& shape, const Shape& strides) : data_(data), shape_(shape), strides_(strides) {
    if (strides_.rank() != shape_.rank()) {
      throw shape_error("precis::cuda::DeviceView: shape " + shape_.str() + " and strides " + strides_.str() +
                        " differ in rank");
    }
    for (int i = 0; i < shape_.rank(); ++i) {
      if (shape_[i] < 0 || strides_[i] < 0) {
        throw shape_error("precis::cuda::DeviceView: shape " + shape_.str() + ", strides " + strides_.str() +
                          "; expected extents and strides >= 0");
      }
    }
  }
  /// A read-only view of a mutable one.
  template <class S2>
    requires(std::is_const_v<S> && std::is_same_v<S2, storage_type>)
  DeviceView(const DeviceView<S2>& v)  // NOLINT: implicit, like T* -> const T*
      : data_(v.data()), shape_(v.shape()), strides_(v.strides()) {}

  S* data() const noexcept { return data_; }
  const Shape& shape() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  int rank() const noexcept { return shape_.rank(); }
  index_t size() const noexcept { return shape_.numel(); }
  bool empty() const noexcept { return data_ == nullptr && size() == 0; }

  /// The 2-D view with its axes swapped (no copy).
  DeviceView transpose() const {
    if (rank() != 2) {
      throw shape_error("precis::cuda::DeviceView::transpose: shape " + shape_.str() + "; expected a 2-D view");
    }
    return DeviceView(data_, Shape{shape_[1], shape_[0]}, Shape{strides_[1], strides_[0]});
  }

  /// First and one-past-last byte the view can touch (equal when it has no elements).
  std::pair<const char*, const char*> byte_range() const noexcept {
    const char* p = reinterpret_cast<const char*>(data_);
    if (size() == 0) return {p, p};
    index_t last = 0;
    for (int i = 0; i < rank(); ++i) last += (shape_[i] - 1) * strides_[i];
    return {p, p + (last + 1) * static_cast<index_t>(sizeof(S))};
  }

 private:
  S* data_ = nullptr;
  Shape shape_;
  Shape strides_;
};

/// Whether two device views may share bytes (address ranges overlap).
template <class S1, class S2>
bool may_overlap(const DeviceView<S1>& a, const DeviceView<S2>& b) noexcept {
  const auto [a0, a1] = a.byte_range();
  const auto [b0, b1] = b.byte_range();
  return a0 < b1 && b0 < a1;
}

/// A dense row-major tensor of S in device memory.
template <class S>
class DeviceTensor {
 public:
  explicit DeviceTensor(const Shape& shape) : shape_(shape), buf_(static_cast<std::size_t>(shape.numel())) {}

  /// A device copy of a host tensor.
  static DeviceTensor from_host(const Tensor<S>& t) {
    DeviceTensor d(t.shape());
    d.copy_from(t);
    return d;
  }
  /// Host -> device; the shapes must match. Returns once the data is in device memory, so
  /// that work on any stream, a non-blocking one included, sees it (cudaMemcpy from pageable
  /// memory may return while its last transfer is still on the default stream).
  void copy_from(const Tensor<S>& t) {
    if (t.shape() != shape_) {
      throw shape_error("precis::cuda::DeviceTensor::copy_from: host " + t.shape().str() + " into device " + shape_.str() +
                        "; expected equal shapes");
    }
    check(cudaMemcpy(buf_.data(), t.data(), buf_.bytes(), cudaMemcpyHostToDevice),
          "cudaMemcpy host -> device of " + std::to_string(buf_.bytes()) + " bytes");
    check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize after a copy host -> device");
  }
  /// Device -> host, into a new tensor. It waits for the default stream only: synchronize the
  /// stream of the kernels that wrote this tensor first.
  Tensor<S> to_host() const {
    Tensor<S> t(shape_);
    check(cudaMemcpy(t.data(), buf_.data(), buf_.bytes(), cudaMemcpyDeviceToHost),
          "cudaMemcpy device -> host of " + std::to_string(buf_.bytes()) + " bytes");
    return t;
  }

  const Shape& shape() const noexcept { return shape_; }
  index_t size() const noexcept { return static_cast<index_t>(buf_.size()); }
  S* data() noexcept { return buf_.data(); }
  const S* data() const noexcept { return buf_.data(); }

  DeviceView<S> view() { return DeviceView<S>(buf_.data(), shape_); }
  DeviceView<const S> view() const { return DeviceView<const S>(buf_.data(), shape_); }
  /// The 2-D tensor's transpose as a view (no copy).
  DeviceView<S> transpose() { return view().transpose(); }
  DeviceView<const S> transpose() const { return view().transpose(); }

 private:
  Shape shape_;
  device_buffer<S> buf_;
};

namespace detail {

/// Device memory for one call (a GEMM's staging copies, a sum's partial results), allocated
/// and freed in stream order.
class stream_scratch {
 public:
  stream_scratch(std::size_t bytes, cudaStream_t s) : s_(s) {
    check(cudaMallocAsync(&p_, bytes, s), "cudaMallocAsync of " + std::to_string(bytes) + " bytes (a call's scratch memory)");
  }
  stream_scratch(const stream_scratch&) = delete;
  stream_scratch& operator=(const stream_scratch&) = delete;
  ~stream_scratch() {
    if (p_) cudaFreeAsync(p_, s_);
  }
  void* get() const noexcept { return p_; }

 private:
  void* p_ = nullptr;
  cudaStream_t s_;
};

// precis::half and precis::bfloat16 have the same 16 bits as __half and __nv_bfloat16.
template <class T>
__device__ float load_as_float(const T* p, std::size_t i) {
  if constexpr (std::is_same_v<T, float>) return p[i];
  else if constexpr (std::is_same_v<T, precis::half>) return __half2float(reinterpret_cast<const __half*>(p)[i]);
  else return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
}

template <class T>
__device__ void store_rounded(T* p, std::size_t i, float x) {
  if constexpr (std::is_same_v<T, float>) p[i] = x;
  else if constexpr (std::is_same_v<T, precis::half>) reinterpret_cast<__half*>(p)[i] = __float2half_rn(x);
  else reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
}

/// One element per thread, grid-stride. Widening to fp32 is exact for all three formats, so
/// each output is rounded once.
template <class To, class From>
__global__ void convert_kernel(const From* src, To* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    store_rounded(dst, i, load_as_float(src, i));
  }
}

template <class T>
constexpr bool device_format = std::is_same_v<T, float> || std::is_same_v<T, precis::half> || std::is_same_v<T, precis::bfloat16>;

}  // namespace detail

/// dst = src rounded to nearest even into To, on `stream`; shapes must match. Formats: fp32,
/// fp16, bf16 (either direction). Asynchronous on the stream, like any kernel launch.
template <class From, class To>
  requires(detail::device_format<From> && detail::device_format<To>)
void convert(const DeviceTensor<From>& src, DeviceTensor<To>& dst, cudaStream_t stream = nullptr) {
  if (src.shape() != dst.shape()) {
    throw shape_error("precis::cuda::convert: source " + src.shape().str() + ", destination " + dst.shape().str() +
                      "; expected equal shapes");
  }
  const auto n = static_cast<std::size_t>(src.size());
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 65535));
  detail::convert_kernel<To, From><<<blocks, threads, 0, stream>>>(src.data(), dst.data(), n);
  check(cudaGetLastError(), "precis::cuda::convert kernel launch (" + std::to_string(n) + " elements)");
}

}  // namespace precis::cuda
