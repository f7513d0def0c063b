// Tensor, views, conversion, random fills and Eigen interop.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

using namespace precis;
using tensor_test::mp50;

TEST(Tensor, DefaultsAndLayout) {
  static_assert(std::is_same_v<Tensor<half>::compute_type, float>);
  static_assert(std::is_same_v<Tensor<bfloat16>::compute_type, float>);
  static_assert(std::is_same_v<Tensor<float8_e4m3>::compute_type, float>);
  static_assert(std::is_same_v<Tensor<tf32>::compute_type, float>);
  static_assert(std::is_same_v<Tensor<float>::compute_type, float>);
  static_assert(std::is_same_v<Tensor<double>::compute_type, double>);
  static_assert(std::is_same_v<Tensor<mp50>::compute_type, mp50>);
  Tensor<half> t({2, 3, 4});
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.size(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  for (const half& x : t) EXPECT_EQ(static_cast<float>(x), 0.0f);
  Tensor<float> scalar(Shape{});
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.size(), 1);
  EXPECT_THROW(Tensor<float>(Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), shape_error);
  EXPECT_THROW(Tensor<float>(Shape{2, -1}), shape_error);
}

/// The VmFlags of the mapping of this process that holds address p ("" where none does).
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto x = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= x && x < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// A block of 2 MiB or more lies on a 2 MiB boundary, and its whole 2 MiB pages (only those)
// are marked for transparent huge pages: the kernel shows the mark as "hg" in the mapping's
// VmFlags, whether or not it then has huge pages to give. Under PRECIS_HUGE_PAGES=off nothing
// is marked (ctest runs this test again so: huge_pages.off; and huge_pages.bad_value).
TEST(Tensor, LargeBlocksAskForHugePages) {
  Tensor<float> big({1281, 1024});  // 5 MiB + 4 KiB: two whole 2 MiB pages and a tail
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.data()) % (std::uintptr_t{2} << 20), 0u);
  EXPECT_EQ(*std::max_element(big.begin(), big.end()), 0.0f);
  Arena arena(std::size_t{4} << 20);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena.allocate(64)) % (std::uintptr_t{2} << 20), 0u);
  Tensor<float> small({511, 1024});  // just under 2 MiB: 64-byte aligned, 4 KiB pages
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % 64, 0u);
#if defined(__linux__)
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "no transparent huge pages in this kernel";
  }
  const char* env = std::getenv("PRECIS_HUGE_PAGES");
  const bool off = env != nullptr && std::string(env) == "off";
  const std::string head = vm_flags_at(big.data()), tail = vm_flags_at(big.data() + (1 << 20));
  ASSERT_NE(head, "") << "no mapping holds the tensor in /proc/self/smaps";
  EXPECT_EQ((head + " ").find(" hg ") != std::string::npos, !off) << head;
  EXPECT_EQ((tail + " ").find(" hg "), std::string::npos) << tail;
#endif
}

TEST(Tensor, CopyIsDeepMoveIsCheap) {
  Tensor<mp50> a({3});
  a(0) = mp50("0.1");
  Tensor<mp50> b = a;
  b(0) = mp50(2);
  EXPECT_EQ(a(0), mp50("0.1"));
  const mp50* p = b.data();
  Tensor<mp50> c = std::move(b);
  EXPECT_EQ(c.data(), p);
}

TEST(Tensor, SizesThatDoNotFitAreShapeErrorsNotWrapAround) {
  // element and byte counts are checked before anything is allocated or zero-filled
  const auto expect_shape_error = [](auto f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "expected a shape_error containing \"" << needle << "\"";
    } catch (const shape_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const index_t e40 = index_t{1} << 40, e31 = index_t{1} << 31;
  expect_shape_error([&] { (void)Shape{e40, e40}.numel(); }, "the extents [1099511627776, 1099511627776] have more elements");
  expect_shape_error([&] { Tensor<float> t(Shape{index_t{1} << 62}); }, "shape [4611686018427387904] of 4-byte elements needs more than");
  expect_shape_error([&] { (void)Tensor<float>::uninitialized(Shape{e31, e31}); }, "shape [2147483648, 2147483648] of 4-byte elements");
  expect_shape_error([&] { Tensor<double> t(Shape{e40, e40}); }, "has more elements than index_t holds");
  // empty, yet its row-major strides would overflow: refused, so view() never has to
  expect_shape_error([&] { Tensor<float> t(Shape{0, index_t{1} << 62, 36}); }, "have strides larger than index_t holds");
  EXPECT_EQ((Shape{e31, 2}.numel()), e31 * 2);
}

TEST(TensorView, SliceSelectTransposeReshape) {
  Tensor<float> t({3, 4});
  for (int i = 0; i < 12; ++i) t.data()[i] = static_cast<float>(i);
  auto s = t.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s(2, 1), 11.0f);
  EXPECT_FALSE(s.is_contiguous());
  auto tr = t.transpose();
  EXPECT_EQ(tr.shape(), (Shape{4, 3}));
  EXPECT_EQ(tr(3, 1), t(1, 3));
  auto row = t.select(0, 2);
  EXPECT_EQ(row.shape(), (Shape{4}));
  EXPECT_EQ(row(0), 8.0f);
  auto r = t.reshape({2, 6});
  EXPECT_EQ(r(1, 0), 6.0f);
  EXPECT_EQ(r.data(), t.data());  // no copy
  EXPECT_THROW(tr.reshape({12}), shape_error);  // not contiguous
  EXPECT_THROW(t.reshape({5}), shape_error);
  EXPECT_THROW(t.slice(1, 2, 5), shape_error);
  EXPECT_THROW(t.slice(2, 0, 1), shape_error);
  EXPECT_THROW(t.select(0, 3), shape_error);
  EXPECT_THROW(t.permute({0, 0}), shape_error);
  EXPECT_THROW(t.at({3, 0}), shape_error);
  Tensor<float> copy(tr);  // dense copy of a strided view
  EXPECT_EQ(copy.shape(), (Shape{4, 3}));
  EXPECT_EQ(copy(3, 1), t(1, 3));
  auto p = Tensor<float>({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
}

TEST(TensorView, ErrorMessagesNameOpAndShapes) {
  Tensor<float> t({3, 4});
  try {
    (void)t.slice(5, 0, 1);
    FAIL();
  } catch (const shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("precis::slice"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("axis 5"), std::string::npos);
  }
  try {
    (void)add(Tensor<float>({3, 4}), Tensor<float>({3}));
    FAIL();
  } catch (const shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("precis::add"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos);
  }
}

TEST(Astype, RoundsOnceAndFollowsModes) {
  Tensor<double> d({4});
  d(0) = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);  // just above a half tie
  d(1) = 70000.0;
  d(2) = -1e-9;
  d(3) = 0.1;
  const auto h = astype<half>(d);
  EXPECT_EQ(static_cast<float>(h(0)), 1.0f + std::ldexp(1.0f, -10));  // not double-rounded
  EXPECT_TRUE(std::isinf(static_cast<float>(h(1))));
  const auto hz = astype<half>(d, rounding::toward_zero);
  EXPECT_EQ(static_cast<float>(hz(1)), 65504.0f);
  const auto e4 = astype<float8_e4m3>(d, rounding::nearest_even, overflow::saturate);
  EXPECT_EQ(static_cast<float>(e4(1)), 448.0f);
  // strided source
  Tensor<float> m({2, 2});
  m(0, 1) = 3.0f;
  const auto bt = astype<bfloat16>(m.transpose());
  EXPECT_EQ(static_cast<float>(bt(1, 0)), 3.0f);
  xoshiro256pp gen(7);
  const auto sr = astype<half>(d, rounding::stochastic, overflow::infinity, gen);
  const float lo = static_cast<float>(round_to<half>(0.1, rounding::downward));
  const float hi = static_cast<float>(round_to<half>(0.1, rounding::upward));
  EXPECT_TRUE(static_cast<float>(sr(3)) == lo || static_cast<float>(sr(3)) == hi);
}

TEST(Random, ReproducibleAcrossThreadCountsAndViews) {
  Tensor<float> a({300, 300}), b({300, 300});
#if defined(_OPENMP)
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  fill_normal(a, 0.0, 1.0, 42);
  omp_set_num_threads(2);
  fill_normal(b, 0.0, 1.0, 42);
  omp_set_num_threads(saved);
#else
  fill_normal(a, 0.0, 1.0, 42);
  fill_normal(b, 0.0, 1.0, 42);
#endif
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
  Tensor<float> c({300, 300});
  fill_normal(c, 0.0, 1.0, 43);
  EXPECT_FALSE(std::equal(a.begin(), a.end(), c.begin()));
  // moments of 90000 normal draws: mean within 5 standard errors of 0, variance near 1
  double s = 0, s2 = 0;
  for (float x : a) { s += x; s2 += double(x) * x; }
  const double n = static_cast<double>(a.size());
  EXPECT_LT(std::abs(s / n), 5.0 / std::sqrt(n));
  EXPECT_NEAR(s2 / n, 1.0, 5.0 * std::sqrt(2.0 / n));
}

TEST(Random, UniformAndLogUniformRanges) {
  Tensor<double> u({10000}), l({10000});
  fill_uniform(u, -2.0, 3.0, 1);
  fill_log_uniform(l, -20.0, -10.0, 2, true);
  int neg = 0;
  std::vector<int> binade(10, 0);
  for (double x : u) { EXPECT_GE(x, -2.0); EXPECT_LT(x, 3.0); }
  for (double x : l) {
    const double e = std::log2(std::abs(x));
    EXPECT_GE(e, -20.0);
    EXPECT_LT(e, -10.0);
    neg += x < 0;
    ++binade[static_cast<std::size_t>(std::floor(e + 20.0))];
  }
  EXPECT_NEAR(neg, 5000, 5 * 50);  // binomial(10000, 1/2): sd 50
  for (int c : binade) EXPECT_NEAR(c, 1000, 5 * 30);
  EXPECT_THROW(fill_uniform(u, 1.0, 0.0, 1), invalid_argument);
  EXPECT_THROW(fill_normal(u, 0.0, -1.0, 1), invalid_argument);
  // a fill into a strided view writes exactly the view's elements
  Tensor<half> h({4, 4});
  fill_uniform(h.slice(1, 0, 4, 2), 1.0, 2.0, 3);
  for (int i = 0; i < 4; ++i) {
    EXPECT_GE(static_cast<float>(h(i, 0)), 1.0f);
    EXPECT_EQ(static_cast<float>(h(i, 1)), 0.0f);
  }
}

TEST(Eigen, MapsBothWays) {
  Tensor<float> t({2, 3});
  for (int i = 0; i < 6; ++i) t.data()[i] = static_cast<float>(i);
  auto m = as_eigen_matrix(t);
  EXPECT_EQ(m(1, 2), 5.0f);
  m(0, 0) = 9.0f;  // writes through
  EXPECT_EQ(t(0, 0), 9.0f);
  auto mt = as_eigen_matrix(t.transpose());
  EXPECT_EQ(mt(2, 1), 5.0f);
  Eigen::MatrixXd cm(3, 2);  // column-major
  cm << 1, 2, 3, 4, 5, 6;
  auto v = view_of(cm);
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  EXPECT_EQ(v(2, 1), 6.0);
  v(0, 0) = -1.0;
  EXPECT_EQ(cm(0, 0), -1.0);
  auto blk = view_of(cm.block(1, 0, 2, 2));
  EXPECT_EQ(blk(1, 1), 6.0);
  Eigen::VectorXf vec = Eigen::VectorXf::LinSpaced(5, 0, 4);
  auto vv = view_of(vec);
  EXPECT_EQ(vv.shape(), (Shape{5}));
  EXPECT_EQ(as_eigen_vector(vv)(4), 4.0f);
  const auto sum_row = sum<double>(view_of(std::as_const(cm)), 1);
  EXPECT_EQ(sum_row(2), 11.0);
  EXPECT_THROW(as_eigen_matrix(Tensor<float>({2, 2, 2}).view()), shape_error);
  Tensor<half> ht({2, 2});
  ht(1, 1) = half(1.5f);
  EXPECT_EQ(static_cast<float>(as_eigen_matrix(ht)(1, 1)), 1.5f);
}
