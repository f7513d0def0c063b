// Eigen interop, both ways and without copies:
//   auto m = precis::as_eigen(t);          // Eigen::Map of a 1-D or 2-D tensor or view
//   auto v = precis::view_of(eigen_matrix); // TensorView of an Eigen matrix, map or block
#pragma once

#include "precis/config.hpp"

#include <Eigen/Core>
#include <string>
#include <type_traits>

#include "precis/tensor/elementwise.hpp"

namespace precis {

template <class S>
using eigen_matrix_map = Eigen::Map<
    std::conditional_t<std::is_const_v<S>,
                       const Eigen::Matrix<detail::remove_const_t<S>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                       Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>,
    Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

template <class S>
using eigen_vector_map = Eigen::Map<
    std::conditional_t<std::is_const_v<S>, const Eigen::Matrix<detail::remove_const_t<S>, Eigen::Dynamic, 1>,
                       Eigen::Matrix<S, Eigen::Dynamic, 1>>,
    Eigen::Unaligned, Eigen::InnerStride<Eigen::Dynamic>>;

/// A 2-D view as an Eigen row-major matrix map (any strides, including transposed views).
template <class S, class C>
eigen_matrix_map<S> as_eigen_matrix(const TensorView<S, C>& v) {
  if (v.rank() != 2) {
    throw shape_error("precis::as_eigen_matrix: tensor of shape " + v.shape().str() +
                      "; expected rank 2");
  }
  return eigen_matrix_map<S>(v.data(), v.shape()[0], v.shape()[1],
                             Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(v.strides()[0], v.strides()[1]));
}

/// A 1-D view as an Eigen column-vector map.
template <class S, class C>
eigen_vector_map<S> as_eigen_vector(const TensorView<S, C>& v) {
  if (v.rank() != 1) {
    throw shape_error("precis::as_eigen_vector: tensor of shape " + v.shape().str() +
                      "; expected rank 1");
  }
  return eigen_vector_map<S>(v.data(), v.shape()[0], Eigen::InnerStride<Eigen::Dynamic>(v.strides()[0]));
}

template <class S, class C>
auto as_eigen_matrix(Tensor<S, C>& t) { return as_eigen_matrix(t.view()); }
template <class S, class C>
auto as_eigen_matrix(const Tensor<S, C>& t) { return as_eigen_matrix(t.view()); }
template <class S, class C>
auto as_eigen_vector(Tensor<S, C>& t) { return as_eigen_vector(t.view()); }
template <class S, class C>
auto as_eigen_vector(const Tensor<S, C>& t) { return as_eigen_vector(t.view()); }

/// A TensorView of any Eigen dense expression with direct access (Matrix, Map, Block, ...),
/// honouring its storage order and strides. A vector gives a 1-D view, anything else 2-D.
template <class Derived>
auto view_of(Eigen::DenseBase<Derived>& e) {
  using S = typename Derived::Scalar;
  using Elem = std::conditional_t<bool(Eigen::internal::traits<Derived>::Flags & Eigen::LvalueBit), S, const S>;
  Elem* p = const_cast<Elem*>(e.derived().data());
  const auto outer = static_cast<index_t>(e.derived().outerStride());
  const auto inner = static_cast<index_t>(e.derived().innerStride());
  if constexpr (Derived::IsVectorAtCompileTime) {
    return TensorView<Elem>(p, Shape{static_cast<index_t>(e.size())}, Shape{inner});
  } else if constexpr (Derived::IsRowMajor) {
    return TensorView<Elem>(p, Shape{static_cast<index_t>(e.rows()), static_cast<index_t>(e.cols())},
                            Shape{outer, inner});
  } else {
    return TensorView<Elem>(p, Shape{static_cast<index_t>(e.rows()), static_cast<index_t>(e.cols())},
                            Shape{inner, outer});
  }
}
template <class Derived>
auto view_of(const Eigen::DenseBase<Derived>& e) {
  using S = typename Derived::Scalar;
  auto v = view_of(const_cast<Eigen::DenseBase<Derived>&>(e));
  return TensorView<const S>(v.data(), v.shape(), v.strides());
}

}  // namespace precis
