// precis::Shape: the extents (or strides) of a tensor of rank 0-8, and NumPy broadcasting.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>

#include "precis/error.hpp"

namespace precis {

using index_t = std::ptrdiff_t;

/// Largest rank a tensor may have.
inline constexpr int max_rank = 8;

/// A fixed-capacity list of up to max_rank signed integers: a tensor's shape or its strides.
class Shape {
 public:
  constexpr Shape() = default;
  constexpr Shape(std::initializer_list<index_t> extents) { assign(extents.begin(), extents.size()); }
  explicit constexpr Shape(std::span<const index_t> extents) { assign(extents.data(), extents.size()); }

  /// A rank-`rank` list with every entry equal to `value`.
  static constexpr Shape filled(int rank, index_t value) {
    check_rank(static_cast<std::size_t>(rank));
    Shape s;
    s.rank_ = rank;
    for (int i = 0; i < rank; ++i) s.v_[static_cast<std::size_t>(i)] = value;
    return s;
  }

  constexpr int rank() const noexcept { return rank_; }
  constexpr std::size_t size() const noexcept { return static_cast<std::size_t>(rank_); }
  constexpr bool empty() const noexcept { return rank_ == 0; }
  constexpr index_t operator[](int i) const noexcept { return v_[static_cast<std::size_t>(i)]; }
  constexpr index_t& operator[](int i) noexcept { return v_[static_cast<std::size_t>(i)]; }
  constexpr const index_t* begin() const noexcept { return v_.data(); }
  constexpr const index_t* end() const noexcept { return v_.data() + rank_; }
  constexpr index_t back() const noexcept { return v_[static_cast<std::size_t>(rank_ - 1)]; }

  /// Product of the extents (1 for rank 0). A product that index_t cannot hold (extents read
  /// from a file, say) throws shape_error naming them rather than wrapping around.
  constexpr index_t numel() const {
    index_t n = 1;
    for (int i = 0; i < rank_; ++i) {
      if (__builtin_mul_overflow(n, v_[static_cast<std::size_t>(i)], &n)) {
        throw shape_error("precis::Shape: the extents " + str() + " have more elements than index_t holds (" +
                          std::to_string(std::numeric_limits<index_t>::max()) + ")");
      }
    }
    return n;
  }

  constexpr void push_back(index_t x) {
    check_rank(size() + 1);
    v_[size()] = x;
    ++rank_;
  }
  /// This list without entry `axis`.
  constexpr Shape erased(int axis) const {
    Shape s;
    for (int i = 0; i < rank_; ++i)
      if (i != axis) s.push_back((*this)[i]);
    return s;
  }

  friend constexpr bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i) {  // a loop, not std::equal: it compiles to a memcmp call
      if (a.v_[static_cast<std::size_t>(i)] != b.v_[static_cast<std::size_t>(i)]) return false;
    }
    return true;
  }

  /// "[2, 3, 4]"; "[]" for rank 0.
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) {
      if (i) s += ", ";
      s += std::to_string((*this)[i]);
    }
    return s + "]";
  }

 private:
  static constexpr void check_rank(std::size_t n) {
    if (n > static_cast<std::size_t>(max_rank)) {
      throw shape_error("precis::Shape: rank " + std::to_string(n) + " requested; expected at most " +
                        std::to_string(max_rank));
    }
  }
  constexpr void assign(const index_t* p, std::size_t n) {
    check_rank(n);
    for (std::size_t i = 0; i < n; ++i) v_[i] = p[i];
    rank_ = static_cast<int>(n);
  }

  std::array<index_t, max_rank> v_{};
  int rank_ = 0;
};

/// Row-major (C order) strides of a shape, in elements. Strides that index_t cannot hold (an
/// empty shape such as [0, 2^62, 36] has them) throw shape_error.
constexpr Shape contiguous_strides(const Shape& shape) {
  Shape s = Shape::filled(shape.rank(), 1);
  for (int i = shape.rank() - 2; i >= 0; --i) {
    if (__builtin_mul_overflow(s[i + 1], shape[i + 1], &s[i])) {
      throw shape_error("precis::Shape: the extents " + shape.str() + " have strides larger than index_t holds");
    }
  }
  return s;
}

/// Normalizes a possibly negative axis against `rank`, or throws naming `op`.
inline int normalize_axis(int axis, int rank, const char* op) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw shape_error(std::string(op) + ": axis " + std::to_string(axis) +
                      " is out of range for a tensor of rank " + std::to_string(rank) +
                      "; expected -" + std::to_string(rank) + " <= axis < " + std::to_string(rank));
  }
  return a;
}

/// The NumPy broadcast of two shapes (aligned at the trailing axis; extents equal or 1).
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int r = std::max(a.rank(), b.rank());
  Shape out = Shape::filled(r, 1);
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.rank());
    const int ib = i - (r - b.rank());
    const index_t ea = ia >= 0 ? a[ia] : 1;
    const index_t eb = ib >= 0 ? b[ib] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      throw shape_error(std::string(op) + ": shapes " + a.str() + " and " + b.str() +
                        " cannot be broadcast together (axis " + std::to_string(i) + ": " +
                        std::to_string(ea) + " vs " + std::to_string(eb) +
                        "); expected equal extents or 1");
    }
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

}  // namespace precis
