// Element-wise maps: every op against a reference computed far wider and rounded once.
#include <cstring>
#include <functional>
#include <string>

#include "support.hpp"

using namespace precis;
using namespace tensor_test;

namespace {

/// Reference for the library functions (100 digits: ample for any format under test).
using ref_t = boost::multiprecision::cpp_bin_float_100;

template <class S>
class Elementwise : public ::testing::Test {};
TYPED_TEST_SUITE(Elementwise, StorageFormats);

template <class S>
ref_t ref_of(const S& x) {
  return detail::load<ref_t>(x);
}
template <class S>
exact_t exact_of(const S& x) {
  return detail::load<exact_t>(x);
}

/// Exactly rounded ops: computing in Compute and rounding once equals rounding the exact
/// result once (Compute has >= 2t+2 bits for every small format; IEEE for float/double;
/// cpp_bin_float is correctly rounded).
template <class S, class Op, class Ref>
void expect_exact_binary(const char* name, Op op, Ref ref, double lo, double hi) {
  const auto a = random_tensor<S>({64, 8}, lo, hi, 1);
  const auto b = random_tensor<S>({64, 8}, lo, hi, 2);
  const auto r = op(a, b);
  ASSERT_EQ(r.shape(), a.shape());
  for (index_t i = 0; i < a.size(); ++i) {
    // exact_t has > 2t+2 bits for every S, so rounding its result again is innocuous
    const S want = from_exact<S>(exact_t(ref(exact_of(a.data()[i]), exact_of(b.data()[i]))));
    ASSERT_EQ(exact_of(r.data()[i]), exact_of(want)) << name << " at " << i;
  }
}

/// Ops evaluated through library functions: within u_S + k u_C relative of the true value,
/// k the number of roundings and 1-ulp library calls in the formula, plus S's smallest
/// subnormal for results that underflow.
template <class S, class Op, class Ref>
void expect_close_unary(const char* name, Op op, Ref ref, double lo, double hi, int k) {
  using C = default_compute_t<S>;
  const auto a = random_tensor<S>({200}, lo, hi, 3);
  const auto r = op(a);
  // Boost.Multiprecision's elementary functions carry no ulp guarantee (1.5-11 ulp seen at
  // 50 digits): for those the check is that the math ran in the 50-digit type (within 2^-150,
  // far beyond double), not an ulp count.
  const ref_t tol = format_traits<C>::digits > 64
                        ? ref_t(std::ldexp(1.0, -150))
                        : ref_t(unit_roundoff<S>()) + ref_t(k) * ref_t(unit_roundoff<C>());
  const ref_t tiny = ref_t(format_traits<S>::min_subnormal());
  for (index_t i = 0; i < a.size(); ++i) {
    const ref_t want = ref(ref_of(a.data()[i]));
    const ref_t got = ref_of(r.data()[i]);
    using boost::multiprecision::abs;
    ASSERT_LE(abs(got - want), tol * abs(want) + tiny)
        << name << "(" << ref_of(a.data()[i]) << "): got " << got << ", want " << want;
  }
}

}  // namespace

TYPED_TEST(Elementwise, ExactlyRoundedOps) {
  using S = TypeParam;
  expect_exact_binary<S>("add", [](auto& a, auto& b) { return a + b; }, std::plus<>{}, -4, 4);
  expect_exact_binary<S>("sub", [](auto& a, auto& b) { return sub(a, b); }, std::minus<>{}, -4, 4);
  expect_exact_binary<S>("mul", [](auto& a, auto& b) { return a * b; }, std::multiplies<>{}, -4, 4);
  expect_exact_binary<S>("div", [](auto& a, auto& b) { return a / b; }, std::divides<>{}, 0.5, 4);
  expect_exact_binary<S>("max", [](auto& a, auto& b) { return max(a, b); },
                         [](const exact_t& x, const exact_t& y) { return x < y ? y : x; }, -4, 4);
  expect_exact_binary<S>("min", [](auto& a, auto& b) { return min(a, b); },
                         [](const exact_t& x, const exact_t& y) { return y < x ? y : x; }, -4, 4);
  expect_exact_binary<S>("sqrt", [](auto& a, auto&) { return sqrt(a); },
                         [](const exact_t& x, const exact_t&) { return exact_t(sqrt(x)); }, 0, 8);
  expect_exact_binary<S>("neg", [](auto& a, auto&) { return -a; },
                         [](const exact_t& x, const exact_t&) { return exact_t(-x); }, -4, 4);
  expect_exact_binary<S>("abs", [](auto& a, auto&) { return abs(a); },
                         [](const exact_t& x, const exact_t&) { return exact_t(abs(x)); }, -4, 4);
  expect_exact_binary<S>("relu", [](auto& a, auto&) { return relu(a); },
                         [](const exact_t& x, const exact_t&) { return x < 0 ? exact_t(0) : x; }, -4, 4);
}

TYPED_TEST(Elementwise, LibraryFunctionOps) {
  using S = TypeParam;
  using boost::multiprecision::erf;
  expect_close_unary<S>("exp", [](auto& a) { return exp(a); }, [](const ref_t& x) { return ref_t(exp(x)); }, -4, 4, 2);
  expect_close_unary<S>("log", [](auto& a) { return log(a); }, [](const ref_t& x) { return ref_t(log(x)); }, 0.01, 100, 2);
  expect_close_unary<S>("tanh", [](auto& a) { return tanh(a); }, [](const ref_t& x) { return ref_t(tanh(x)); }, -3, 3, 2);
  expect_close_unary<S>("rsqrt", [](auto& a) { return rsqrt(a); }, [](const ref_t& x) { return ref_t(1 / sqrt(x)); }, 0.01, 100, 2);
  // 1/(1+e^-x): exp 2 u, add u, divide u; the add's error is damped by e^-x/(1+e^-x) <= 1
  expect_close_unary<S>("sigmoid", [](auto& a) { return sigmoid(a); }, [](const ref_t& x) { return ref_t(1 / (1 + exp(-x))); }, -6, 6, 4);
  // x (1 + erf(x/sqrt2)) / 2 on x >= 0 (no cancellation): sqrt, divide, erf (2 u), add, 2 muls
  expect_close_unary<S>("gelu", [](auto& a) { return gelu(a); }, [](const ref_t& x) { return ref_t(x * (1 + erf(x / sqrt(ref_t(2)))) / 2); }, 0, 3, 7);
}

TYPED_TEST(Elementwise, PowWhereAndBroadcasting) {
  using S = TypeParam;
  using C = default_compute_t<S>;
  Tensor<S> a({3, 1, 4}), b({2, 1});
  fill_uniform(a, 0.5, 2.0, 5);
  fill_uniform(b, -2.0, 2.0, 6);
  const auto p = pow(a, b);
  ASSERT_EQ(p.shape(), (Shape{3, 2, 4}));
  const ref_t tol = ref_t(unit_roundoff<S>()) + 4 * ref_t(unit_roundoff<C>());
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 2; ++j)
      for (index_t k = 0; k < 4; ++k) {
        const ref_t want = pow(ref_of(a(i, 0, k)), ref_of(b(j, 0)));
        ASSERT_LE(abs(ref_of(p(i, j, k)) - want), tol * want);
      }
  Tensor<S> cond({3, 1, 1});
  cond(1, 0, 0) = detail::store<S>(C(1));
  const auto w = where(cond, a, a * a);
  ASSERT_EQ(w.shape(), (Shape{3, 1, 4}));
  EXPECT_EQ(ref_of(w(1, 0, 2)), ref_of(a(1, 0, 2)));
  EXPECT_EQ(ref_of(w(0, 0, 2)), ref_of(detail::store<S>(detail::load<C>(a(0, 0, 2)) * detail::load<C>(a(0, 0, 2)))));
}

TEST(ElementwiseMisc, StridedOperandsAndInPlace) {
  Tensor<float> m({5, 7});
  fill_uniform(m, -1, 1, 9);
  const auto mt = Tensor<float>(m.transpose());
  const auto s = add(m.transpose(), mt);  // strided + dense
  for (index_t i = 0; i < 7; ++i)
    for (index_t j = 0; j < 5; ++j) EXPECT_EQ(s(i, j), 2 * m(j, i));
  Tensor<float> x({1000});
  fill_uniform(x, -1, 1, 10);
  const Tensor<float> x0 = x;
  mul(x, x, x);  // exactly aliased output: fine
  for (index_t i = 0; i < 1000; ++i) EXPECT_EQ(x(i), x0(i) * x0(i));
  // partial overlap would read values already overwritten: rejected
  EXPECT_THROW(add(x.slice(0, 0, 999), x.slice(0, 0, 999), x.slice(0, 1, 1000)), aliasing_error);
  Tensor<float> out({3});
  EXPECT_THROW(add(Tensor<float>({4}), Tensor<float>({4}), out), shape_error);
}

TEST(ElementwiseMisc, PromotionAndNaN) {
  Tensor<half> h({2});
  Tensor<bfloat16> b({2});
  static_assert(std::is_same_v<decltype(h + b), Tensor<float>>);
  static_assert(std::is_same_v<decltype(h + Tensor<float>({2})), Tensor<float>>);
  static_assert(std::is_same_v<decltype(Tensor<float8_e4m3>({2}) + h), Tensor<half>>);
  static_assert(std::is_same_v<decltype(Tensor<float>({2}) + Tensor<double>({2})), Tensor<double>>);
  Tensor<float> a({2}), c({2});
  a(0) = std::nanf("");
  c(1) = std::nanf("");
  EXPECT_TRUE(std::isnan(max(a, c)(0)));
  EXPECT_TRUE(std::isnan(min(a, c)(1)));
  EXPECT_TRUE(std::isnan(relu(a)(0)));
  Tensor<float> big({1});
  big(0) = -200.0f;
  EXPECT_EQ(sigmoid(big)(0), 0.0f);
}

TEST(ElementwiseMisc, LargeThreadedMatchesSmallChunks) {
  // > the threading threshold: same values as element-by-element scalar evaluation
  Tensor<bfloat16> a({1 << 17}), b({1 << 17});
  fill_normal(a, 0, 1, 11);
  fill_normal(b, 0, 1, 12);
  const auto r = a * b + a;
  for (index_t i = 0; i < a.size(); i += 97) {
    const float prod = static_cast<float>(bfloat16(static_cast<float>(a(i)) * static_cast<float>(b(i))));
    EXPECT_EQ(static_cast<float>(r(i)), static_cast<float>(bfloat16(prod + static_cast<float>(a(i)))));
  }
}

namespace {

/// out = f(x, y) through map_into against element-by-element evaluation, for a permuted x (runs
/// of `inner` elements), a y broadcast along every axis but the last, and an output that is
/// itself a permuted view: the short-run path that gathers runs into chunks before converting.
template <class X, class Y, class O>
void expect_short_runs_match_elementwise(index_t inner) {
  const Shape xs{3, 7, 5, inner};
  const auto x_store = random_tensor<X>(xs, -4, 4, 21);
  const auto x = x_store.permute(Shape{0, 2, 1, 3});  // [3, 5, 7, inner], runs of `inner`
  const auto y = random_tensor<Y>(Shape{inner}, -4, 4, 22);
  Tensor<O> out_store(xs);
  const auto out = out_store.view().permute(Shape{0, 2, 1, 3});
  const auto f = [](const float& a, const float& b) { return a * b - a; };
  map_into<float>("test", out, f, x, y.view());
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 5; ++j)
      for (index_t k = 0; k < 7; ++k)
        for (index_t l = 0; l < inner; ++l) {
          const O want = detail::store<O>(f(detail::load<float>(x(i, j, k, l)), detail::load<float>(y(l))));
          ASSERT_EQ(std::memcmp(&out(i, j, k, l), &want, sizeof(O)), 0) << "at " << i << "," << j << "," << k << "," << l
                                                                           << " inner " << inner;
        }
  // in place: the output is the same elements as the first input
  Tensor<X> z_store = x_store;
  const auto z = z_store.view().permute(Shape{0, 2, 1, 3});
  map_into<float>("test", z, f, z.as_const(), y.view());
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 5; ++j)
      for (index_t k = 0; k < 7; ++k)
        for (index_t l = 0; l < inner; ++l) {
          const X want = detail::store<X>(f(detail::load<float>(x(i, j, k, l)), detail::load<float>(y(l))));
          ASSERT_EQ(std::memcmp(&z(i, j, k, l), &want, sizeof(X)), 0) << "in place at " << i << "," << j << "," << k << "," << l;
        }
}

}  // namespace

TEST(ElementwiseMisc, ShortStridedRunsWithConversions) {
  // 12 and 7 do not divide the 256-element chunks, so runs straddle them; 64 is the longest
  // run gathered, 65 the shortest left to the run-by-run path
  for (index_t inner : {1, 7, 12, 16, 64, 65}) {
    expect_short_runs_match_elementwise<bfloat16, bfloat16, bfloat16>(inner);
    expect_short_runs_match_elementwise<half, bfloat16, float>(inner);
    expect_short_runs_match_elementwise<float, half, half>(inner);
    expect_short_runs_match_elementwise<float8_e4m3, float, bfloat16>(inner);
  }
}

namespace {

/// Every bf16 bit pattern class a conversion treats apart: zeros, subnormals, normals, the
/// largest finite values, infinities, and NaNs with every kind of payload (signalling ones too).
std::vector<std::uint16_t> bf16_patterns(std::size_t n) {
  const std::uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x3f80, 0xbf81, 0x7f7f, 0xff7f, 0x7f80,
                                   0xff80, 0x7f81, 0xff81, 0x7fbf, 0x7fc0, 0xffc1, 0x7fff};
  std::vector<std::uint16_t> v(n);
  std::uint32_t s = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = i % 3 == 0 ? special[(s >> 8) % std::size(special)] : static_cast<std::uint16_t>(s >> 16);
  }
  return v;
}

}  // namespace

TEST(ElementwiseMisc, ShortBf16RunsWidenAsTheVectorKernels) {
  // load_run widens short dense bf16 runs in one AVX2 call (or portable vectors without AVX2); longer
  // ones through convert_dispatch. All must give the same bits, the quieted NaN payloads included.
  for (index_t n : {index_t{1}, index_t{7}, index_t{16}, index_t{33}, detail::inline_widen_max, detail::inline_widen_max + 1,
                    index_t{300}}) {
    const auto bits = bf16_patterns(static_cast<std::size_t>(n));
    std::vector<bfloat16> x;
    for (std::uint16_t b : bits) x.push_back(Eigen::numext::bit_cast<bfloat16>(b));
    std::vector<float> got(x.size()), want(x.size());
    const float* v = detail::load_run<float>(x.data(), n, 1, got.data());
    detail::convert_dispatch(x.data(), want.data(), x.size(), rounding::nearest_even, overflow::infinity);
    std::vector<float> plain(x.size());  // the portable vectors a machine without AVX2 takes
    detail::bf16_to_float_portable(bits.data(), plain.data(), bits.size());
    for (index_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(v + i, want.data() + i, 4), 0) << "n = " << n << ", element " << i << ", bf16 bits 0x" << std::hex
                                                           << bits[static_cast<std::size_t>(i)];
      ASSERT_EQ(std::memcmp(plain.data() + i, want.data() + i, 4), 0)
          << "bf16_to_float_portable, n = " << n << ", element " << i;
    }
  }
}

/// The float bits of fp16 pattern h, decoded from its fields alone (exact: every fp16 value is
/// a float): sign, then zero, a subnormal m 2^-24, a normal (1024 + m) 2^(e - 25), infinity, or
/// a NaN with its payload kept and made quiet, as every conversion in precis does.
std::uint32_t half_bits_to_float_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16, e = (h >> 10) & 0x1fu,
                      m = h & 0x3ffu;
  if (e == 0x1f) return sign | 0x7f800000u | (m != 0 ? 0x00400000u | (m << 13) : 0u);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                            : std::ldexp(static_cast<double>(1024 + m), static_cast<int>(e) - 25);
  const auto f = static_cast<float>(mag);  // exact
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return sign | u;
}

TEST(ElementwiseMisc, ShortHalfRunsWidenExactly) {
  // load_run widens short dense fp16 runs in one F16C call (AVX2 machines) and longer ones
  // through convert_dispatch: every one of the 65536 patterns, in runs of each length class,
  // against the decode from the fields
  std::vector<half> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = Eigen::numext::bit_cast<half>(static_cast<std::uint16_t>(i));
  for (index_t n : {index_t{1}, index_t{7}, index_t{16}, index_t{33}, detail::inline_widen_max,
                    detail::inline_widen_max + 1, index_t{300}}) {
    std::vector<float> buf(static_cast<std::size_t>(n));
    for (std::size_t first = 0; first < all.size(); first += static_cast<std::size_t>(n)) {
      const index_t len = std::min<index_t>(n, static_cast<index_t>(all.size() - first));
      const float* v = detail::load_run<float>(all.data() + first, len, 1, buf.data());
      for (index_t i = 0; i < len; ++i) {
        std::uint32_t got;
        std::memcpy(&got, v + i, 4);
        const auto h = static_cast<std::uint16_t>(first + static_cast<std::size_t>(i));
        ASSERT_EQ(got, half_bits_to_float_bits(h))
            << "n = " << n << ", fp16 bits 0x" << std::hex << h;
      }
    }
  }
}

TEST(ElementwiseMisc, PortableWideningIsTheDecodeFromTheFields) {
  // the portable vectors (every CPU without AVX2 and F16C) over all 65536 fp16 and bf16
  // patterns, in runs of every length class (whole vectors of 4, and the lanes after them)
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{7}, std::size_t{64}, all.size()}) {
    std::vector<float> half_out(all.size()), bf16_out(all.size());
    for (std::size_t first = 0; first < all.size(); first += n) {
      const std::size_t len = std::min(n, all.size() - first);
      detail::half_to_float_portable(all.data() + first, half_out.data() + first, len);
      detail::bf16_to_float_portable(all.data() + first, bf16_out.data() + first, len);
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto h = static_cast<std::uint16_t>(i);
      ASSERT_EQ(std::bit_cast<std::uint32_t>(half_out[i]), half_bits_to_float_bits(h)) << "runs of " << n << ", fp16 bits 0x" << std::hex << h;
      // bf16: the 16 bits shifted up, a NaN made quiet
      const std::uint32_t up = std::uint32_t{h} << 16;
      const std::uint32_t want = (up & 0x7fffffffu) > 0x7f800000u ? up | 0x00400000u : up;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(bf16_out[i]), want) << "runs of " << n << ", bf16 bits 0x" << std::hex << h;
    }
  }
}

namespace {

/// A copy (map_into with identity) from S into D, dense and through a permuted view, against
/// each value loaded as float and stored once; NaNs compared as NaNs (a copy quiets them).
template <class S, class D>
void expect_copy_converts_once() {
  const Shape shape{3, 5, 24};
  const auto bits = bf16_patterns(static_cast<std::size_t>(shape.size()));
  Tensor<S> x(shape);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    x.data()[i] = detail::store<S>(detail::load<float>(Eigen::numext::bit_cast<bfloat16>(bits[i])));
  }
  for (bool permuted : {false, true}) {
    Tensor<D> y(permuted ? Shape{5, 3, 24} : shape);
    const auto from = permuted ? x.view().as_const().permute(Shape{1, 0, 2}) : x.view().as_const();
    map_into<float>("test", y.view(), detail::identity{}, from);
    for (index_t i = 0; i < y.size(); ++i) {
      const index_t a = permuted ? i / 24 % 3 : i / 120, b = permuted ? i / 72 : i / 24 % 5, c = i % 24;
      const float xv = detail::load<float>(x(a, b, c));
      const D want = detail::store<D>(xv);
      const D got = y.data()[i];
      if (std::isnan(xv)) {
        ASSERT_TRUE(std::isnan(detail::load<float>(got))) << "element " << i;
      } else {
        ASSERT_EQ(std::memcmp(&got, &want, sizeof(D)), 0) << (permuted ? "permuted" : "dense") << ", element " << i;
      }
    }
  }
}

}  // namespace

TEST(ElementwiseMisc, CopiesConvertStraightIntoTheOutput) {
  expect_copy_converts_once<bfloat16, float>();
  expect_copy_converts_once<float, bfloat16>();
  expect_copy_converts_once<half, float>();
  expect_copy_converts_once<float, half>();
  expect_copy_converts_once<bfloat16, half>();
  expect_copy_converts_once<float, float>();
  expect_copy_converts_once<bfloat16, bfloat16>();
}
