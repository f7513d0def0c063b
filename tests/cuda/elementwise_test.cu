// Element-wise maps and sums over broadcast axes on the device (include/precis/cuda/
// elementwise.cuh, reduce.cuh) and the emulated 16-bit accumulators (accumulator.cuh). Without
// --device (label `cuda`, runs in CI without a GPU): narrow<half> and narrow<bfloat16> on the
// host (correctly rounded + - * /, one rounding from double, the host types' functions and
// running sums); shapes that do not broadcast, outputs with a broadcast axis and partial
// overlaps are named before any launch. With --device (label `gpu`;
// exit 77, skipped, without a device):
// - broadcasting, strides (a transposed input, a scalar, a row), in-place outputs, dense
//   operands read eight at a time (aligned, with a tail) or one at a time (misaligned), and
//   every output format, with correctly rounded functors: the host's precis::map_into bits;
// - the op layer's functors whose every operation is correctly rounded and has no multiply
//   followed by an add (neg, abs, relu, sqrt, rsqrt, reciprocal, add, sub, mul, div, maximum,
//   minimum, where and the derivatives of that form) over every finite bf16 and fp16 value:
//   the host's bits, in fp32 and rounded to bf16/fp16;
// - exp, log and tanh over the same values, in fp32: within CUDA's documented bounds (2, 1 and 2
//   ulp) of a double-precision reference, where the result is a normal fp32 number;
// - sums over broadcast axes (a bias gradient, a middle axis of a strided view, a total) within
//   gamma(ceil(m / 32) + 5) sum |x| (+ the output's rounding) of a double sum, the same bits on
//   a second run;
// - cross-entropy's loss and gradient against double-precision ones, within bounds counted
//   from the roundings of the sums, exp and log; a label out of range is named on the host and
//   gives NaN, not a stray read, on the device.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <precis/cuda/elementwise.cuh>
#include <precis/cuda/loss.cuh>
#include <precis/cuda/reduce.cuh>
#include <precis/precis.hpp>
#include <string>
#include <vector>

#include "support.cuh"

namespace {

using cuda_test::check;
using cuda_test::failures;
using precis::index_t;
using precis::Shape;
namespace pc = precis::cuda;

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class E>
bool throws_naming(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const E& e) {
    if (std::string(e.what()).find(part) != std::string::npos) return true;
    std::printf("  message was: %s\n", e.what());
    return false;
  }
  return false;
}

/// The emulated 16-bit accumulators (precis::cuda::narrow<F>, accumulator.cuh) on the host, the
/// same class the kernels use: + - * / of two F values are F's correctly rounded operations (the
/// reference: the exact or, for /, double result rounded once by precis::round_to; double holds
/// 2t + 2 bits) and the host's precis::half / precis::bfloat16 arithmetic's bits; a value from a
/// double rounds once (not through fp32); exp, log and sqrt are the host types' functions; a
/// running sum is the host's running sum in F.
template <class F>
void narrow_accumulator(const char* name) {
  using N = pc::narrow<F>;
  using bits = std::uint16_t;
  const auto of_bits = [](bits b) { return std::bit_cast<F>(b); };
  const auto bits_of = [](F v) { return std::bit_cast<bits>(v); };
  const auto n_bits = [&](N v) { return bits_of(F(v.value())); };
  // got holds exactly want (a value of F, not an fp32 value that would round to it)
  const auto same = [&](N got, F want) {
    const bool nan = std::isnan(got.value()) && std::isnan(static_cast<float>(want));
    return nan || (n_bits(got) == bits_of(want) && got.value() == static_cast<float>(want));
  };
  std::vector<F> finite;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const F v = of_bits(static_cast<bits>(b));
    if (std::isfinite(static_cast<float>(v))) finite.push_back(v);
  }
  // every finite value against 32 others drawn at random, and 2^19 random pairs
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, finite.size() - 1);
  long bad_ref = 0, bad_host = 0, pairs = 0;
  const auto pair = [&](F x, F y) {
    const N a(static_cast<float>(x)), b(static_cast<float>(y));
    const double dx = static_cast<float>(x), dy = static_cast<float>(y);
    const N got[4] = {a + b, a - b, a * b, a / b};
    const F ref[4] = {precis::round_to<F>(dx + dy), precis::round_to<F>(dx - dy), precis::round_to<F>(dx * dy),
                      precis::round_to<F>(dx / dy)};
    const F host[4] = {F(x + y), F(x - y), F(x * y), F(x / y)};
    for (int k = 0; k < 4; ++k) {
      bad_ref += !same(got[k], ref[k]);
      bad_host += !same(got[k], host[k]);
    }
    ++pairs;
  };
  for (const F x : finite) {
    for (int r = 0; r < 32; ++r) pair(x, finite[pick(rng)]);
  }
  for (int r = 0; r < (1 << 19); ++r) pair(finite[pick(rng)], finite[pick(rng)]);
  check(bad_ref == 0, std::string(name) + ": + - * / correctly rounded over " + std::to_string(pairs) + " pairs (" +
                          std::to_string(bad_ref) + " differ)");
  check(bad_host == 0, std::string(name) + ": + - * / the host type's bits (" + std::to_string(bad_host) + " differ)");
  // a double just above a midpoint of F that fp32 rounds onto the midpoint: once from the
  // double it rounds up, through fp32 it would tie to even (down)
  int bad_double = 0;
  for (const F x : finite) {
    const float fx = static_cast<float>(x);
    if (!(fx > 0) || !std::isfinite(fx)) continue;
    const F up = of_bits(static_cast<bits>(bits_of(x) + 1));
    if (!std::isfinite(static_cast<float>(up)) || (bits_of(x) & 1) != 0) continue;  // x even: a tie goes down to it
    const double mid = (static_cast<double>(fx) + static_cast<double>(static_cast<float>(up))) / 2;
    const double above = mid + std::ldexp(mid, -40);
    bad_double += !same(N(above), up) || !same(N(static_cast<float>(mid)), x);
  }
  check(bad_double == 0, std::string(name) + ": from a double rounds once, from fp32 ties to even (" + std::to_string(bad_double) + " differ)");
  // library functions and the value round trip, over every value
  int bad_fn = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const F x = of_bits(static_cast<bits>(b));
    const N v(static_cast<float>(x));
    using std::exp;
    using std::log;
    using std::sqrt;
    bad_fn += !same(v, x);
    bad_fn += !same(exp(v), F(exp(x)));
    bad_fn += !same(log(v), F(log(x)));
    bad_fn += !same(sqrt(v), F(sqrt(x)));
    bad_fn += !same(-v, F(-x));
  }
  check(bad_fn == 0, std::string(name) + ": every value round-trips; exp, log, sqrt and negation are the host type's (" +
                         std::to_string(bad_fn) + " differ)");
  // a running sum of 4096 terms: the host's running sum in F, term by term
  std::normal_distribution<float> nd(0.0f, 1.0f);
  N s = 0;
  F h = F(0.0f);
  int bad_sum = 0;
  for (int k = 0; k < 4096; ++k) {
    const F t = F(nd(rng));
    s += N(static_cast<float>(t));
    h = F(h + t);
    bad_sum += !same(s, h);
  }
  check(bad_sum == 0, std::string(name) + ": a running sum is the host's running sum in the format, at every term");
}

int run_host() {
  static_assert(std::is_same_v<pc::acc_t<float>, float> && std::is_same_v<pc::acc_t<double>, double> &&
                std::is_same_v<pc::acc_t<precis::half>, pc::narrow<precis::half>> &&
                std::is_same_v<pc::acc_t<precis::bfloat16>, pc::narrow<precis::bfloat16>>);
  narrow_accumulator<precis::half>("narrow<half>");
  narrow_accumulator<precis::bfloat16>("narrow<bfloat16>");
  static float a[64], b[64];
  const pc::DeviceView<float> y(a, Shape{4, 16});
  check(throws_naming<precis::shape_error>(
            [&] { pc::map_into<float>(nullptr, "precis::add", y, precis::fn::add{}, y, pc::DeviceView<float>(b, Shape{8})); },
            "precis::add: shapes [8] and [4, 16] cannot be broadcast together"),
        "a shape that does not broadcast is a named shape_error");
  check(throws_naming<precis::shape_error>(
            [&] { pc::map_into<float>(nullptr, "precis::neg", pc::DeviceView<float>(a, Shape{4, 8}), precis::fn::neg{}, pc::DeviceView<float>(b, Shape{2, 4, 8})); },
            "precis::neg: an input of shape [2, 4, 8] does not broadcast to the output's [4, 8]"),
        "an input larger than the output is a named shape_error");
  check(throws_naming<precis::aliasing_error>(
            [&] { pc::map_into<float>(nullptr, "precis::relu", pc::DeviceView<float>(a, Shape{4, 16}, Shape{0, 1}), precis::fn::relu{}, pc::DeviceView<float>(b, Shape{4, 16})); },
            "expected no broadcast (zero-stride) axis in an output"),
        "an output with a broadcast axis is an aliasing_error");
  check(throws_naming<precis::aliasing_error>(
            [&] { pc::map_into<float>(nullptr, "precis::neg", pc::DeviceView<float>(a + 1, Shape{32}), precis::fn::neg{}, pc::DeviceView<float>(a, Shape{32})); },
            "overlaps an input"),
        "a partial overlap is an aliasing_error");
  check(throws_naming<precis::shape_error>(
            [&] { pc::sum_into<float>(nullptr, "precis::linear", pc::DeviceView<float>(a, Shape{3}), pc::DeviceView<float>(b, Shape{4, 5})); },
            "precis::linear: "),
        "a sum into a shape that does not broadcast is a named shape_error");
  check(throws_naming<precis::aliasing_error>(
            [&] { pc::sum_into<float>(nullptr, "precis::sum", pc::DeviceView<float>(a, Shape{5}), pc::DeviceView<float>(a, Shape{4, 5})); },
            "overlaps its input"),
        "a sum over its own input is an aliasing_error");
  std::printf("%s\n", failures == 0 ? "host checks: fp16 and bf16 accumulators; bad shapes and overlaps are named before any launch" : "failed");
  return failures == 0 ? 0 : 1;
}

template <class T>
precis::Tensor<T> back(const pc::DeviceTensor<T>& d) {
  precis::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return d.to_host();
}

/// Elements whose bits differ (two NaNs count as equal: their payloads are the platform's).
template <class T>
int mismatches(const precis::Tensor<T>& a, const precis::Tensor<T>& b) {
  int bad = 0;
  for (index_t i = 0; i < a.size(); ++i) {
    const bool nans = std::isnan(static_cast<float>(a.data()[i])) && std::isnan(static_cast<float>(b.data()[i]));
    bad += !nans && !same_bits(a.data()[i], b.data()[i]);
  }
  return bad;
}

/// Broadcasting, strides and formats, with correctly rounded functors.
void machinery() {
  precis::Tensor<float> x(Shape{6, 5, 7}), row(Shape{7}), t(Shape{7, 5});
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto* m : {&x, &row, &t}) for (auto& v : *m) v = nd(rng);
  auto dx = pc::DeviceTensor<float>::from_host(x), drow = pc::DeviceTensor<float>::from_host(row), dt = pc::DeviceTensor<float>::from_host(t);
  // y[i, j, k] = x[i, j, k] * row[k] + t[k, j]   (t transposed: a strided input)
  const auto run = [&]<class O>(O*) {
    pc::DeviceTensor<O> y(Shape{6, 5, 7});
    pc::map_into<float>(nullptr, "mul-sub", y.view(), precis::fn::mul{}, dx.view(), drow.view());
    pc::map_into<float>(nullptr, "sub", y.view(), precis::fn::sub{}, pc::DeviceView<const O>(y.view()),
                        pc::DeviceView<const float>(dt.data(), Shape{5, 7}, Shape{1, 5}));
    precis::Tensor<O> want(Shape{6, 5, 7});
    precis::map_into<float>("mul", want.view(), precis::fn::mul{}, x.view(), row.view());
    precis::map_into<float>("sub", want.view(), precis::fn::sub{}, want.view().as_const(), t.view().as_const().transpose());
    return mismatches(back(y), want);
  };
  check(run(static_cast<float*>(nullptr)) == 0, "broadcast and strided inputs, fp32 output: the host's bits");
  check(run(static_cast<precis::bfloat16*>(nullptr)) == 0, "the same, bf16 output (rounded once per map)");
  check(run(static_cast<precis::half*>(nullptr)) == 0, "the same, fp16 output");
  // double arithmetic rounded once into fp16: the host rounds double -> half directly too
  pc::DeviceTensor<precis::half> h(Shape{6, 5, 7});
  pc::map_into<double>(nullptr, "div", h.view(), precis::fn::div{}, dx.view(), drow.view());
  precis::Tensor<precis::half> hw(Shape{6, 5, 7});
  precis::map_into<double>("div", hw.view(), precis::fn::div{}, x.view(), row.view());
  check(mismatches(back(h), hw) == 0, "double arithmetic rounded once into fp16: the host's bits");
  // dense operands: eight elements at a time where every pointer is 16-byte aligned (301 = 8 x
  // 37 + a tail of 5), one at a time where one is not (the output one element in); in place
  precis::Tensor<float> u(Shape{301});
  for (auto& v : u) v = nd(rng);
  auto du = pc::DeviceTensor<float>::from_host(u);
  pc::DeviceTensor<precis::bfloat16> yb(Shape{301}), yo(Shape{302});
  pc::map_into<float>(nullptr, "relu", yb.view(), precis::fn::relu{}, du.view());
  pc::map_into<float>(nullptr, "relu", pc::DeviceView<precis::bfloat16>(yo.data() + 1, Shape{301}), precis::fn::relu{}, du.view());
  pc::map_into<float>(nullptr, "neg", du.view(), precis::fn::neg{}, pc::DeviceView<const float>(du.view()));
  precis::Tensor<precis::bfloat16> wr(Shape{301});
  precis::map_into<float>("relu", wr.view(), precis::fn::relu{}, u.view());
  precis::Tensor<float> wn(Shape{301});
  precis::map_into<float>("neg", wn.view(), precis::fn::neg{}, u.view());
  const auto yo_host = back(yo);
  precis::Tensor<precis::bfloat16> yo_tail(Shape{301});
  std::copy(yo_host.data() + 1, yo_host.data() + 302, yo_tail.data());
  check(mismatches(back(yb), wr) == 0, "a dense map, eight elements at a time and a tail of five: the host's bits");
  check(mismatches(yo_tail, wr) == 0, "the same map with the output not 16-byte aligned: the host's bits");
  check(mismatches(back(du), wn) == 0, "a dense map in place: the host's bits");
  std::printf("machinery: broadcasting, strides, in-place, dense maps and every output format give the host's bits\n");
}

/// Every finite value of S, as a tensor.
template <class S>
precis::Tensor<S> all_finite() {
  std::vector<S> v;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto u = static_cast<std::uint16_t>(b);
    S s;
    std::memcpy(&s, &u, 2);
    if (std::isfinite(static_cast<float>(s))) v.push_back(s);
  }
  precis::Tensor<S> t(Shape{static_cast<index_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data());
  return t;
}

/// f over every finite S in float, device against host, rounded to float and to S.
template <class S, class F, class... Extra>
void exact_unary(const char* name, F f, const precis::Tensor<S>& x, const Extra&... extra) {
  auto dx = pc::DeviceTensor<S>::from_host(x);
  std::vector<pc::DeviceTensor<S>> de;
  (de.push_back(pc::DeviceTensor<S>::from_host(extra)), ...);
  pc::DeviceTensor<float> yf(x.shape());
  pc::DeviceTensor<S> ys(x.shape());
  precis::Tensor<float> wf(x.shape());
  precis::Tensor<S> ws(x.shape());
  if constexpr (sizeof...(Extra) == 0) {
    pc::map_into<float>(nullptr, name, yf.view(), f, dx.view());
    pc::map_into<float>(nullptr, name, ys.view(), f, dx.view());
    precis::map_into<float>(name, wf.view(), f, x.view());
    precis::map_into<float>(name, ws.view(), f, x.view());
  } else {
    // derivative functors (g, x, y): g = the second tensor, y = the third
    pc::map_into<float>(nullptr, name, yf.view(), f, de[0].view(), dx.view(), de[1].view());
    pc::map_into<float>(nullptr, name, ys.view(), f, de[0].view(), dx.view(), de[1].view());
    const auto& [g, y] = std::tie(extra...);
    precis::map_into<float>(name, wf.view(), f, g.view(), x.view(), y.view());
    precis::map_into<float>(name, ws.view(), f, g.view(), x.view(), y.view());
  }
  const int bf = mismatches(back(yf), wf), bs = mismatches(back(ys), ws);
  check(bf == 0 && bs == 0, std::string(name) + ": " + std::to_string(bf) + " fp32 and " + std::to_string(bs) +
                                " rounded results differ from the host's");
}

template <class S, class F, class... Extra>
void exact_binary(const char* name, F f, const precis::Tensor<S>& a, const precis::Tensor<S>& b) {
  auto da = pc::DeviceTensor<S>::from_host(a), db = pc::DeviceTensor<S>::from_host(b);
  pc::DeviceTensor<float> y(a.shape());
  pc::map_into<float>(nullptr, name, y.view(), f, da.view(), db.view());
  precis::Tensor<float> w(a.shape());
  precis::map_into<float>(name, w.view(), f, a.view(), b.view());
  const int bad = mismatches(back(y), w);
  check(bad == 0, std::string(name) + ": " + std::to_string(bad) + " results differ from the host's");
}

/// |device - exact| <= ulps ulp(exact) in fp32, CUDA's bound (the reference in double).
template <class S, class F, class R>
void bounded(const char* name, F f, R ref, double ulps, const precis::Tensor<S>& x) {
  auto dx = pc::DeviceTensor<S>::from_host(x);
  pc::DeviceTensor<float> y(x.shape());
  pc::map_into<float>(nullptr, name, y.view(), f, dx.view());
  const auto got = back(y);
  int bad = 0, checked = 0;
  for (index_t i = 0; i < x.size(); ++i) {
    const double xi = static_cast<double>(static_cast<float>(x.data()[i]));
    const double r = ref(xi);
    if (!std::isfinite(r) || std::fabs(r) > 3.4e38 || std::fabs(r) < 1.2e-38) continue;  // fp32's normal range
    ++checked;
    int e = 0;
    std::frexp(r, &e);
    const double ulp = std::ldexp(1.0, e - 24);
    if (!(std::fabs(static_cast<double>(got.data()[i]) - r) <= ulps * ulp)) {
      if (bad < 3) std::printf("  %s(%.9g): device %.9g, exact %.9g\n", name, xi, static_cast<double>(got.data()[i]), r);
      ++bad;
    }
  }
  check(bad == 0, std::string(name) + ": " + std::to_string(bad) + " of " + std::to_string(checked) + " outside " +
                      std::to_string(ulps) + " ulp");
}

template <class S>
void functors(const char* format) {
  namespace fn = precis::fn;
  namespace fd = precis::op::fn_;
  const auto x = all_finite<S>();
  precis::Tensor<S> g(x.shape()), y2(x.shape()), b(x.shape());
  std::mt19937 rng(2);
  std::uniform_int_distribution<index_t> pick(0, x.size() - 1);
  for (index_t i = 0; i < x.size(); ++i) {
    g.data()[i] = x.data()[pick(rng)];
    y2.data()[i] = x.data()[pick(rng)];
    b.data()[i] = x.data()[pick(rng)];
  }
  exact_unary("neg", fn::neg{}, x);
  exact_unary("abs", fn::abs{}, x);
  exact_unary("relu", fn::relu{}, x);
  exact_unary("sqrt", fn::sqrt{}, x);
  exact_unary("rsqrt", fn::rsqrt{}, x);
  exact_unary("reciprocal", fd::reciprocal{}, x);
  exact_unary("d_neg", fd::d_neg{}, x, g, y2);
  exact_unary("d_abs", fd::d_abs{}, x, g, y2);
  exact_unary("d_relu", fd::d_relu{}, x, g, y2);
  exact_unary("d_exp", fd::d_exp{}, x, g, y2);
  exact_unary("d_log", fd::d_log{}, x, g, y2);
  exact_unary("d_sqrt", fd::d_sqrt{}, x, g, y2);
  exact_unary("d_rsqrt", fd::d_rsqrt{}, x, g, y2);
  exact_unary("d_reciprocal", fd::d_reciprocal{}, x, g, y2);
  exact_binary("add", fn::add{}, x, b);
  exact_binary("sub", fn::sub{}, x, b);
  exact_binary("mul", fn::mul{}, x, b);
  exact_binary("div", fn::div{}, x, b);
  exact_binary("maximum", fn::max{}, x, b);
  exact_binary("minimum", fn::min{}, x, b);
  bounded("exp", fn::exp{}, [](double v) { return std::exp(v); }, 2, x);
  bounded("log", fn::log{}, [](double v) { return std::log(v); }, 1, x);
  bounded("tanh", fn::tanh{}, [](double v) { return std::tanh(v); }, 2, x);
  std::printf("functors over every finite %s value: the host's bits where every operation is correctly rounded; "
              "exp, log, tanh within CUDA's bounds\n",
              format);
}

/// to = sum of from over to's broadcast axes, against double sums and the bound.
template <class O>
void one_sum(const char* what, const Shape& to_shape, const precis::Tensor<float>& from, const Shape& view_shape,
             const Shape& view_strides) {
  auto df = pc::DeviceTensor<float>::from_host(from);
  const pc::DeviceView<const float> v(df.data(), view_shape, view_strides);
  const precis::TensorView<const float> hv(from.data(), view_shape, view_strides);
  std::vector<precis::Tensor<O>> got;
  for (int run = 0; run < 2; ++run) {
    pc::DeviceTensor<O> to(to_shape);
    pc::sum_into<float>(nullptr, what, to.view(), v);
    got.push_back(back(to));
  }
  // double sums over the same axes on the host
  precis::Tensor<double> ref(to_shape), mag(to_shape);
  std::fill(ref.begin(), ref.end(), 0.0);
  std::fill(mag.begin(), mag.end(), 0.0);
  const auto rb = ref.view().broadcast_to(view_shape);  // mag has the same strides
  index_t m = 1;
  for (int d = 0; d < view_shape.rank(); ++d) {
    const int k = d - (view_shape.rank() - to_shape.rank());
    if (k < 0 || to_shape[k] != view_shape[d]) m *= view_shape[d];
  }
  std::vector<index_t> idx(static_cast<std::size_t>(view_shape.rank()), 0);
  for (index_t i = 0; i < hv.size(); ++i) {
    index_t r = i, oh = 0, ot = 0;
    for (int d = view_shape.rank() - 1; d >= 0; --d) {
      const index_t c = r % view_shape[d];
      r /= view_shape[d];
      oh += c * hv.strides()[d];
      ot += c * rb.strides()[d];
    }
    const double x = static_cast<double>(hv.data()[oh]);
    ref.data()[ot] += x;
    mag.data()[ot] += std::fabs(x);
  }
  const double u = std::ldexp(1.0, -std::numeric_limits<float>::digits);  // fp32's unit roundoff, 2^-24
  const double n = static_cast<double>((m + 31) / 32 + 5);
  const double uout = std::is_same_v<O, float> ? 0.0 : std::ldexp(1.0, -precis::format_traits<O>::digits);
  int bad = 0;
  for (index_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(static_cast<float>(got[0].data()[i])), r = ref.data()[i];
    const double tol = n * u / (1 - n * u) * mag.data()[i] * (1 + uout) + uout * std::fabs(r);
    if (!(std::fabs(g - r) <= tol)) {
      if (bad < 3) std::printf("  %s[%lld]: device %.9g, double %.9g, bound %.3g\n", what, static_cast<long long>(i), g, r, tol);
      ++bad;
    }
  }
  check(bad == 0, std::string(what) + ": " + std::to_string(bad) + " sums outside the bound");
  check(mismatches(got[0], got[1]) == 0, std::string(what) + ": a second run gave other bits");
}

void sums() {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(1.0f, 2.0f);
  precis::Tensor<float> a(Shape{300, 257}), b(Shape{50, 4, 6}), c(Shape{1000, 37}), d(Shape{3, 700, 33}), e(Shape{8192, 10});
  for (auto* t : {&a, &b, &c, &d, &e}) for (auto& v : *t) v = nd(rng);
  one_sum<float>("bias gradient [257] from [300, 257]", Shape{257}, a, Shape{300, 257}, Shape{257, 1});
  // column sums of more than 1024 rows: chunks of rows, then the chunks' sums
  one_sum<float>("bias gradient [33] from [3, 700, 33] (4 chunks)", Shape{33}, d, Shape{3, 700, 33}, Shape{23100, 33, 1});
  one_sum<precis::bfloat16>("bias gradient [10] from [8192, 10] into bf16 (16 chunks)", Shape{10}, e, Shape{8192, 10}, Shape{10, 1});
  one_sum<precis::bfloat16>("the same into bf16", Shape{257}, a, Shape{300, 257}, Shape{257, 1});
  // b stored [50, 4, 6], viewed as [4, 50, 6] (a permuted, strided view): sum over the middle axis
  one_sum<float>("middle axis [4, 1, 6] from a strided [4, 50, 6]", Shape{4, 1, 6}, b, Shape{4, 50, 6}, Shape{6, 24, 1});
  one_sum<precis::half>("total [1, 1] from [1000, 37] into fp16", Shape{1, 1}, c, Shape{1000, 37}, Shape{37, 1});
  std::printf("sums over broadcast axes: within gamma(ceil(m / 32) + 5) sum |x| of double sums, the same bits twice\n");
}

/// Cross-entropy on [rows, k] logits against double on the host.
void cross_entropy() {
  const index_t rows = 300, k = 77;
  precis::Tensor<float> x(Shape{rows, k});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_int_distribution<std::int64_t> cls(0, k - 1);
  for (auto& v : x) v = nd(rng);
  for (auto& c : labels) c = cls(rng);
  auto dx = pc::DeviceTensor<float>::from_host(x);
  precis::cuda::device_buffer<std::int64_t> dl(labels.size());
  precis::cuda::check(cudaMemcpy(dl.data(), labels.data(), labels.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "labels");
  precis::cuda::device_buffer<float> lse(labels.size()), terms(labels.size());
  pc::DeviceTensor<float> loss(Shape{1}), gloss(Shape{1}), gx(Shape{rows, k});
  const auto one = precis::Tensor<float>::full(Shape{1}, 1.0f);
  gloss.copy_from(one);
  pc::cross_entropy_forward<float>(nullptr, "ce", dx.view(), dl.data(), lse.data(), terms.data(), loss.view());
  pc::cross_entropy_backward<float>(nullptr, "ce", pc::DeviceView<const float>(gloss.view()), dx.view(), dl.data(), lse.data(), gx.view(), true);
  const float got = back(loss).data()[0];
  const auto g = back(gx);
  // double reference; bounds: the row sum (ceil(k / 32) + 5 additions) and the mean
  // (ceil(rows / 32) + 5), exp (2 ulp) and log (1 ulp), the subtractions (1 each)
  const double u = std::ldexp(1.0, -24);
  const double ns = static_cast<double>((k + 31) / 32 + 5), nm = static_cast<double>((rows + 31) / 32 + 5);
  double total = 0, bound = 0;
  int bad = 0;
  for (index_t i = 0; i < rows; ++i) {
    double m = -INFINITY;
    for (index_t j = 0; j < k; ++j) m = std::max(m, static_cast<double>(x(i, j)));
    double s = 0, spread = 0;
    for (index_t j = 0; j < k; ++j) {
      const double e = std::exp(static_cast<double>(x(i, j)) - m);
      s += e;
      spread += e * (m - static_cast<double>(x(i, j)));  // x - m's rounding, amplified by exp
    }
    const double l = m + std::log(s);
    // the sum's additions, exp's 2 ulp per term and x - m's rounding (relative to the sum), log's
    // ulp and the addition of m
    const double lse_err = (ns + 2) * u + u * spread / s + u * std::fabs(l - m) + u * std::fabs(l);
    const auto c = static_cast<std::size_t>(i);
    const double term = l - static_cast<double>(x(i, labels[c]));
    total += term;
    bound += lse_err + u * std::fabs(term);
    for (index_t j = 0; j < k; ++j) {
      const double p = std::exp(static_cast<double>(x(i, j)) - l);
      const double d = (p - (j == labels[c] ? 1.0 : 0.0)) / static_cast<double>(rows);
      // p's relative error: lse's, the subtraction's, exp's 2 ulp; then p - 1, g / rows and the
      // product, one rounding each
      const double tol = p * (lse_err + u * std::fabs(static_cast<double>(x(i, j)) - l) + 3 * u) / static_cast<double>(rows) +
                         3 * u * std::fabs(d);
      if (!(std::fabs(static_cast<double>(g(i, j)) - d) <= tol)) {
        if (bad < 3) std::printf("  ce gradient [%lld, %lld]: device %.9g, double %.9g, bound %.3g\n", static_cast<long long>(i),
                                 static_cast<long long>(j), static_cast<double>(g(i, j)), d, tol);
        ++bad;
      }
    }
  }
  const double want = total / static_cast<double>(rows);
  const double ltol = bound / static_cast<double>(rows) + nm * u * std::fabs(want) * 2;
  check(std::fabs(static_cast<double>(got) - want) <= ltol,
        "cross-entropy loss " + std::to_string(got) + " against " + std::to_string(want) + " (bound " + std::to_string(ltol) + ")");
  check(bad == 0, "cross-entropy: " + std::to_string(bad) + " gradient elements outside the bound");
  // a label out of range: named on the host, NaN on the device
  labels[5] = k;
  check(throws_naming<precis::invalid_argument>([&] { pc::check_labels("precis::cross_entropy", labels, k); },
                                                "label 77 at row 5; expected 0 <= label < 77"),
        "check_labels names the row and the label");
  precis::cuda::check(cudaMemcpy(dl.data(), labels.data(), labels.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "labels");
  pc::cross_entropy_forward<float>(nullptr, "ce", dx.view(), dl.data(), lse.data(), terms.data(), loss.view());
  check(std::isnan(back(loss).data()[0]), "a label out of range on the device gives a NaN loss");
  std::printf("cross-entropy: loss and gradient within their bounds of double; bad labels named or NaN\n");
}

int run_device() {
  if (pc::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  machinery();
  functors<precis::bfloat16>("bf16");
  functors<precis::half>("fp16");
  sums();
  cross_entropy();
  std::printf("%s\n", failures == 0 ? "device element-wise maps: all checks passed" : "device element-wise maps: FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--device") == 0) return run_device();
    return run_host();
  } catch (const precis::error& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
