// precis::Tensor<Storage, Compute>: an owning, contiguous, 64-byte-aligned, row-major array of
// rank 0-8; precis::TensorView<Storage, Compute>: a non-owning strided window onto one.
//
// Storage is what sits in memory; Compute is what element-wise math on the tensor runs in
// (float for 8/16-bit formats, the storage type otherwise). Values move between the two by
// load (exact) and store (rounded once, to nearest even).
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "precis/error.hpp"
#include "precis/format/all.hpp"
#include "precis/tensor/detail/host_memory.hpp"
#include "precis/tensor/shape.hpp"

namespace precis {

/// The type element-wise math on Storage runs in: float for formats narrower than float,
/// Storage itself otherwise.
template <class Storage>
using default_compute_t =
    std::conditional_t<(format_traits<Storage>::digits < format_traits<float>::digits), float,
                       Storage>;

namespace detail {

/// Overflow rule for values rounded into a tensor's storage: IEEE infinity where the format
/// has one, saturation otherwise (the OCP fp8 "fn" convention of minifloat's own arithmetic).
template <class S>
inline constexpr overflow storage_overflow =
    format_traits<S>::has_infinity ? overflow::infinity : overflow::saturate;

/// A stored value as a Compute value (exact whenever Compute is at least as wide).
template <class C, class S>
inline C load(const S& s) {
  if constexpr (std::is_same_v<C, S>) {
    return s;
  } else if constexpr (std::is_arithmetic_v<S> || std::is_arithmetic_v<C>) {
    return static_cast<C>(s);
  } else {
    return round_to<C>(s, rounding::nearest_even, storage_overflow<C>);
  }
}

/// A Compute value rounded once, to nearest even, into storage S.
template <class S, class C>
inline S store(const C& c) {
  if constexpr (std::is_same_v<C, S>) {
    return c;
  } else if constexpr (std::is_same_v<C, float> || (std::is_arithmetic_v<C> && std::is_arithmetic_v<S>)) {
    // Every storage format rounds a float once on construction (nearest even).
    return static_cast<S>(c);
  } else {
    return round_to<S>(c, rounding::nearest_even, storage_overflow<S>);
  }
}

template <class T>
struct aligned_delete {
  std::size_t n = 0;
  void operator()(T* p) const noexcept {
    std::destroy_n(p, n);
    release_host(static_cast<void*>(p), std::max<std::size_t>(n * sizeof(T), 1));
  }
};

template <class T>
using aligned_buffer = std::unique_ptr<T[], aligned_delete<T>>;

/// n zero elements on a 64-byte boundary (2 MiB from 2 MiB up, on huge pages where the system
/// has them: tensor/detail/host_memory.hpp); with zero = false, trivial types are left
/// uninitialized (for results every element of which is about to be written).
///
/// A trivially copyable element is zeroed byte by byte (all-zero bits are +0 in every format):
/// value-initialization does not zero every format. Eigen::half's default constructor sets no
/// bits where nvcc compiles it (its raw type is then CUDA's __half_raw, which has no
/// initializer), so in a .cu program value-initialized halves hold whatever the memory held.
template <class T>
aligned_buffer<T> allocate_aligned(std::size_t n, bool zero = true) {
  const std::size_t bytes = std::max<std::size_t>(n * sizeof(T), 1);
  void* raw = allocate_host(bytes);
  T* p = static_cast<T*>(raw);
  try {
    if (zero && std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>) {
      std::uninitialized_default_construct_n(p, n);
      std::memset(raw, 0, n * sizeof(T));
    } else if (zero || !std::is_trivially_default_constructible_v<T>) {
      std::uninitialized_value_construct_n(p, n);
    } else {
      std::uninitialized_default_construct_n(p, n);
    }
  } catch (...) {
    release_host(raw, bytes);
    throw;
  }
  return aligned_buffer<T>(p, aligned_delete<T>{n});
}

inline void check_extents(const Shape& shape, const char* op) {
  for (index_t e : shape) {
    if (e < 0) {
      throw shape_error(std::string(op) + ": shape " + shape.str() +
                        " has a negative extent; expected extents >= 0");
    }
  }
}

/// The element count of a new tensor of `shape` with elements of `bytes_each` bytes, after
/// checking that the count and the byte count fit (the allocation size is never computed with
/// overflow). Throws shape_error naming `op` and the shape.
inline std::size_t checked_elements(const Shape& shape, std::size_t bytes_each, const char* op) {
  check_extents(shape, op);
  index_t n = 1;
  for (index_t e : shape) {
    if (__builtin_mul_overflow(n, e, &n)) {
      throw shape_error(std::string(op) + ": shape " + shape.str() + " has more elements than index_t holds");
    }
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(n), bytes_each, &bytes) ||
      bytes > static_cast<std::size_t>(std::numeric_limits<index_t>::max())) {
    throw shape_error(std::string(op) + ": shape " + shape.str() + " of " + std::to_string(bytes_each) +
                      "-byte elements needs more than " + std::to_string(std::numeric_limits<index_t>::max()) +
                      " bytes");
  }
  (void)contiguous_strides(shape);  // an empty shape can still have strides that do not fit
  return static_cast<std::size_t>(n);
}

}  // namespace detail

/// The public conversions between storage formats and arithmetic types, as the library's own
/// kernels use them: load<C>(s) is a stored value as arithmetic type C (exact when C is at
/// least as wide), store<S>(c) rounds c once, to nearest even, into storage S (overflowing to
/// infinity where S has one, saturating otherwise).
///   const float v = precis::load<float>(h);          // half -> float, exact
///   const precis::half h2 = precis::store<precis::half>(v * 3.0f);
using detail::load;
using detail::store;

template <class Storage, class Compute = default_compute_t<detail::remove_const_t<Storage>>>
class Tensor;

/// A non-owning view: a pointer, a shape and strides (in elements, >= 0; 0 repeats a value,
/// as broadcasting does). Storage may be const-qualified for a read-only view.
template <class Storage, class Compute = default_compute_t<detail::remove_const_t<Storage>>>
class TensorView {
 public:
  using storage_type = detail::remove_const_t<Storage>;
  using compute_type = Compute;
  using element_type = Storage;

  TensorView() = default;
  TensorView(Storage* data, Shape shape) : TensorView(data, shape, contiguous_strides(shape)) {}
  /// Construction without validation, for shapes and strides already checked.
  struct unchecked {};
  TensorView(Storage* data, const Shape& shape, const Shape& strides, unchecked) noexcept
      : data_(data), shape_(shape), strides_(strides) {}
  TensorView(Storage* data, Shape shape, Shape strides)
      : data_(data), shape_(shape), strides_(strides) {
    detail::check_extents(shape_, "precis::TensorView");
    if (strides_.rank() != shape_.rank()) {
      throw shape_error("precis::TensorView: shape " + shape_.str() + " and strides " +
                        strides_.str() + " differ in rank");
    }
    for (index_t s : strides_) {
      if (s < 0) {
        throw shape_error("precis::TensorView: strides " + strides_.str() +
                          " have a negative entry; expected strides >= 0");
      }
    }
  }
  /// A read-only view of a mutable one.
  template <class S2>
    requires(std::is_const_v<Storage> && std::is_same_v<S2, storage_type>)
  TensorView(const TensorView<S2, Compute>& v)  // NOLINT: implicit by design, like T* -> const T*
      : data_(v.data()), shape_(v.shape()), strides_(v.strides()) {}

  Storage* data() const noexcept { return data_; }
  /// The same view, read-only.
  TensorView<const storage_type, Compute> as_const() const noexcept {
    return TensorView<const storage_type, Compute>(data_, shape_, strides_,
                                                   typename TensorView<const storage_type, Compute>::unchecked{});
  }
  const Shape& shape() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  int rank() const noexcept { return shape_.rank(); }
  index_t extent(int axis) const { return shape_[normalize_axis(axis, rank(), "precis::TensorView::extent")]; }
  index_t size() const noexcept { return shape_.numel(); }
  bool empty() const noexcept { return size() == 0; }

  /// True when the elements are densely packed in row-major order.
  bool is_contiguous() const noexcept {
    index_t expected = 1;
    for (int i = rank() - 1; i >= 0; --i) {
      if (shape_[i] != 1 && strides_[i] != expected) return false;
      expected *= shape_[i];
    }
    return true;
  }

  /// Unchecked element access by multi-index.
  template <class... I>
  Storage& operator()(I... i) const noexcept {
    static_assert((std::is_integral_v<I> && ...));
    index_t off = 0;
    int a = 0;
    ((off += static_cast<index_t>(i) * strides_[a++]), ...);
    return data_[off];
  }

  /// Bounds-checked element access.
  Storage& at(std::initializer_list<index_t> idx) const {
    if (static_cast<int>(idx.size()) != rank()) {
      throw shape_error("precis::TensorView::at: " + std::to_string(idx.size()) +
                        " indices for a tensor of shape " + shape_.str());
    }
    index_t off = 0;
    int a = 0;
    for (index_t i : idx) {
      if (i < 0 || i >= shape_[a]) {
        throw shape_error("precis::TensorView::at: index " + std::to_string(i) + " on axis " +
                          std::to_string(a) + " of shape " + shape_.str() + " is out of range");
      }
      off += i * strides_[a++];
    }
    return data_[off];
  }

  /// Elements begin, begin+step, ... < end along `axis` (a view).
  TensorView slice(int axis, index_t begin, index_t end, index_t step = 1) const {
    const int a = normalize_axis(axis, rank(), "precis::slice");
    if (step <= 0 || begin < 0 || end < begin || end > shape_[a]) {
      throw shape_error("precis::slice: range [" + std::to_string(begin) + ", " +
                        std::to_string(end) + ") step " + std::to_string(step) + " on axis " +
                        std::to_string(a) + " of shape " + shape_.str() +
                        "; expected 0 <= begin <= end <= extent and step > 0");
    }
    TensorView v = *this;
    v.data_ = data_ + (end > begin ? begin * strides_[a] : 0);
    v.shape_[a] = (end - begin + step - 1) / step;
    v.strides_[a] = strides_[a] * step;
    return v;
  }

  /// The sub-tensor at `index` along `axis`, with that axis removed (a view).
  TensorView select(int axis, index_t index) const {
    const int a = normalize_axis(axis, rank(), "precis::select");
    if (index < 0 || index >= shape_[a]) {
      throw shape_error("precis::select: index " + std::to_string(index) + " on axis " +
                        std::to_string(a) + " of shape " + shape_.str() + " is out of range");
    }
    return TensorView(data_ + index * strides_[a], shape_.erased(a), strides_.erased(a));
  }

  /// Axes reordered: axis i of the result is axis perm[i] of this (a view).
  TensorView permute(const Shape& perm) const {
    bool ok = perm.rank() == rank();
    std::array<bool, max_rank> seen{};
    for (int i = 0; ok && i < perm.rank(); ++i) {
      const index_t p = perm[i];
      ok = p >= 0 && p < rank() && !seen[static_cast<std::size_t>(p)];
      if (ok) seen[static_cast<std::size_t>(p)] = true;
    }
    if (!ok) {
      throw shape_error("precis::permute: " + perm.str() + " is not a permutation of the " +
                        std::to_string(rank()) + " axes of shape " + shape_.str());
    }
    TensorView v = *this;
    for (int i = 0; i < rank(); ++i) {
      v.shape_[i] = shape_[static_cast<int>(perm[i])];
      v.strides_[i] = strides_[static_cast<int>(perm[i])];
    }
    return v;
  }

  /// Axes in reverse order (the matrix transpose for rank 2).
  TensorView transpose() const {
    Shape perm;
    for (int i = rank() - 1; i >= 0; --i) perm.push_back(i);
    return permute(perm);
  }

  /// The same elements, in row-major order, with another shape. A view, so this must be
  /// contiguous; otherwise copy first (Tensor(view)).
  TensorView reshape(const Shape& shape) const {
    detail::check_extents(shape, "precis::reshape");
    if (shape.numel() != size()) {
      throw shape_error("precis::reshape: cannot view shape " + shape_.str() + " (" +
                        std::to_string(size()) + " elements) as " + shape.str() + " (" +
                        std::to_string(shape.numel()) + " elements)");
    }
    if (!is_contiguous()) {
      throw shape_error("precis::reshape: the view of shape " + shape_.str() + " with strides " +
                        strides_.str() +
                        " is not contiguous, so it cannot be reshaped without a copy; copy it "
                        "into a Tensor first");
    }
    return TensorView(data_, shape);
  }

  /// This view repeated (stride 0) along new or unit axes to `shape` (NumPy rules).
  TensorView broadcast_to(const Shape& shape) const {
    const Shape b = broadcast_shapes(shape_, shape, "precis::broadcast_to");
    if (!(b == shape)) {
      throw shape_error("precis::broadcast_to: shape " + shape_.str() + " cannot be broadcast to " +
                        shape.str());
    }
    Shape st = Shape::filled(shape.rank(), 0);
    const int off = shape.rank() - rank();
    for (int i = 0; i < rank(); ++i) st[i + off] = shape_[i] == 1 ? 0 : strides_[i];
    return TensorView(data_, shape, st);
  }

  /// Element (multi-index in row-major order) as Compute.
  Compute value_at_linear(index_t linear) const {
    index_t off = 0;
    for (int a = rank() - 1; a >= 0; --a) {
      off += (linear % shape_[a]) * strides_[a];
      linear /= shape_[a];
    }
    return detail::load<Compute>(data_[off]);
  }

 private:
  Storage* data_ = nullptr;
  Shape shape_;
  Shape strides_;
};

/// Owning tensor: contiguous, row-major, 64-byte aligned, zero-initialized.
template <class Storage, class Compute>
class Tensor {
  static_assert(floating<Storage>, "precis::Tensor: Storage must be a format precis knows "
                                   "(specialize precis::format_traits for new types)");
  static_assert(!std::is_const_v<Storage>, "precis::Tensor: Storage must not be const");

 public:
  using storage_type = Storage;
  using compute_type = Compute;
  using view_type = TensorView<Storage, Compute>;
  using const_view_type = TensorView<const Storage, Compute>;

  Tensor() : Tensor(Shape{0}) {}
  explicit Tensor(Shape shape) : Tensor(shape, true) {}

  /// A tensor whose elements are unspecified (not zeroed) when Storage is trivial: for
  /// results that are about to be written in full.
  static Tensor uninitialized(Shape shape) { return Tensor(shape, false); }
  /// A copy of any view of the same storage type (densely packed).
  template <class S2>
    requires std::is_same_v<detail::remove_const_t<S2>, Storage>
  explicit Tensor(const TensorView<S2, Compute>& v) : Tensor(v.shape(), false) {
    copy_from(v);
  }
  Tensor(const Tensor& o) : Tensor(o.shape_, false) {
    std::copy_n(o.data(), o.size(), data());
  }
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(const Tensor& o) {
    if (this != &o) *this = Tensor(o);
    return *this;
  }
  Tensor& operator=(Tensor&&) noexcept = default;

  /// A tensor of `shape` with every element `value` (rounded once into Storage).
  static Tensor full(Shape shape, Compute value) {
    Tensor t(shape, false);
    std::fill_n(t.data(), t.size(), detail::store<Storage>(value));
    return t;
  }

  Storage* data() noexcept { return buf_.get(); }
  const Storage* data() const noexcept { return buf_.get(); }
  const Shape& shape() const noexcept { return shape_; }
  Shape strides() const { return contiguous_strides(shape_); }
  int rank() const noexcept { return shape_.rank(); }
  index_t extent(int axis) const { return view().extent(axis); }
  index_t size() const noexcept { return shape_.numel(); }
  bool empty() const noexcept { return size() == 0; }
  Storage* begin() noexcept { return data(); }
  Storage* end() noexcept { return data() + size(); }
  const Storage* begin() const noexcept { return data(); }
  const Storage* end() const noexcept { return data() + size(); }

  view_type view() noexcept { return view_type(data(), shape_); }
  const_view_type view() const noexcept { return const_view_type(data(), shape_); }
  operator view_type() noexcept { return view(); }              // NOLINT: a tensor is a view
  operator const_view_type() const noexcept { return view(); }  // NOLINT

  template <class... I>
  Storage& operator()(I... i) noexcept { return view()(i...); }
  template <class... I>
  const Storage& operator()(I... i) const noexcept { return view()(i...); }
  Storage& at(std::initializer_list<index_t> idx) { return view().at(idx); }
  const Storage& at(std::initializer_list<index_t> idx) const { return view().at(idx); }

  view_type slice(int axis, index_t b, index_t e, index_t step = 1) { return view().slice(axis, b, e, step); }
  const_view_type slice(int axis, index_t b, index_t e, index_t step = 1) const { return view().slice(axis, b, e, step); }
  view_type select(int axis, index_t i) { return view().select(axis, i); }
  const_view_type select(int axis, index_t i) const { return view().select(axis, i); }
  view_type permute(const Shape& p) { return view().permute(p); }
  const_view_type permute(const Shape& p) const { return view().permute(p); }
  view_type transpose() { return view().transpose(); }
  const_view_type transpose() const { return view().transpose(); }
  view_type reshape(const Shape& s) { return view().reshape(s); }
  const_view_type reshape(const Shape& s) const { return view().reshape(s); }

  /// Copies the elements of `v` (same shape) into this tensor.
  template <class S2>
    requires std::is_same_v<detail::remove_const_t<S2>, Storage>
  void copy_from(const TensorView<S2, Compute>& v) {
    if (!(v.shape() == shape_)) {
      throw shape_error("precis::Tensor::copy_from: source shape " + v.shape().str() +
                        " differs from destination shape " + shape_.str());
    }
    if (v.is_contiguous()) {
      std::copy_n(v.data(), size(), data());
      return;
    }
    for (index_t i = 0; i < size(); ++i) {
      index_t off = 0, lin = i;
      for (int a = rank() - 1; a >= 0; --a) {
        off += (lin % shape_[a]) * v.strides()[a];
        lin /= shape_[a];
      }
      data()[i] = v.data()[off];
    }
  }

 private:
  Tensor(Shape shape, bool zero) : shape_(shape) {
    const std::size_t n = detail::checked_elements(shape_, sizeof(Storage), "precis::Tensor");
    try {
      buf_ = detail::allocate_aligned<Storage>(n, zero);
    } catch (const std::bad_alloc&) {
      throw allocation_error("precis::Tensor: " + std::to_string(n * sizeof(Storage)) + " bytes for shape " +
                             shape_.str() + " could not be allocated");
    }
  }

  Shape shape_;
  detail::aligned_buffer<Storage> buf_;
};

/// Copy of a view into a new owning tensor.
template <class S, class C>
Tensor<detail::remove_const_t<S>, C> to_tensor(const TensorView<S, C>& v) {
  return Tensor<detail::remove_const_t<S>, C>(v);
}

namespace detail {

/// Address range [lo, hi) covered by a view's elements (empty views cover nothing).
template <class S, class C>
std::pair<const unsigned char*, const unsigned char*> byte_extent(const TensorView<S, C>& v) {
  if (v.empty()) return {nullptr, nullptr};
  index_t last = 0;
  for (int a = 0; a < v.rank(); ++a) last += (v.shape()[a] - 1) * v.strides()[a];
  const auto* lo = reinterpret_cast<const unsigned char*>(v.data());
  const auto* hi = reinterpret_cast<const unsigned char*>(v.data() + last + 1);
  return {lo, hi};
}

/// True when two views may share memory (conservative: compares address ranges).
template <class S1, class C1, class S2, class C2>
bool may_overlap(const TensorView<S1, C1>& a, const TensorView<S2, C2>& b) {
  const auto [a0, a1] = byte_extent(a);
  const auto [b0, b1] = byte_extent(b);
  if (a0 == nullptr || b0 == nullptr) return false;
  return std::less<>{}(a0, b1) && std::less<>{}(b0, a1);
}

/// True when two views address exactly the same elements in the same order.
template <class S1, class C1, class S2, class C2>
bool same_elements(const TensorView<S1, C1>& a, const TensorView<S2, C2>& b) {
  return static_cast<const void*>(a.data()) == static_cast<const void*>(b.data()) &&
         sizeof(S1) == sizeof(S2) && a.shape() == b.shape() && a.strides() == b.strides();
}

}  // namespace detail

}  // namespace precis
