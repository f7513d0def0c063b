// libFuzzer target: the op layer's geometry. The bytes choose an op (conv2d, max_pool2d,
// avg_pool2d, attention, bmm, embedding, slice, cat, max and argmax, masked_fill, where), its
// shapes and attributes (small extents, sometimes zero, sometimes out of range) and the seed of its
// data. The op runs forward and backward on a tape under 32-true, bf16-mixed and 16-mixed. Under
// every policy it must throw a precis::error, or under none; when it runs, its output shape must be
// the one the op's definition (PyTorch's) gives, the input must have been valid, and its output and
// every gradient (attention's: finite) must be those of a reference computed here in double:
// - the data are multiples of 2^-6 below 1 in magnitude (below 4 for the pools and max), exact in
//   bf16 and fp16, and no sum here has 4096 terms, so every sum of products is exact in fp32: each
//   output and gradient must be the reference rounded once to its storage, bit for bit;
// - avg_pool2d divides (one rounding, or two for a reciprocal and a product) and attention
//   exponentiates: those are held to the error bounds derived at their checks.
// A failed check prints what differed and traps, so that libFuzzer keeps the input.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <precis/precis.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using precis::index_t;
using precis::Shape;

/// The fuzzer's bytes, read front to back (zeros once they run out).
struct bytes {
  const std::uint8_t* p;
  std::size_t n;
  unsigned next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  /// lo..hi, each about equally likely.
  index_t pick(index_t lo, index_t hi) {
    return lo + static_cast<index_t>(next() % static_cast<unsigned>(hi - lo + 1));
  }
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_ops: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

std::uint64_t mix(std::uint64_t x) {  // SplitMix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// n multiples of 2^-6 in [-63/64, 63/64] from seed.
std::vector<double> small_values(std::uint64_t seed, index_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        (static_cast<double>(mix(seed * 1000003u + static_cast<std::uint64_t>(i)) % 127) - 63) / 64;
  return v;
}

/// n distinct multiples of 2^-6 below 4 in magnitude (n <= 511): no two tie for a maximum.
std::vector<double> distinct_values(std::uint64_t seed, index_t n) {
  std::vector<int> k(511);
  for (int i = 0; i < 511; ++i) k[static_cast<std::size_t>(i)] = i - 255;
  for (int i = 510; i > 0; --i)
    std::swap(k[static_cast<std::size_t>(i)],
              k[mix(seed + static_cast<std::uint64_t>(i)) % static_cast<unsigned>(i + 1)]);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = k[static_cast<std::size_t>(i)] / 64.0;
  return v;
}

precis::Tensor<float> tensor_of(const Shape& s, const std::vector<double>& v) {
  precis::Tensor<float> t(s);
  for (index_t i = 0; i < t.size(); ++i)
    t.data()[i] = static_cast<float>(v[static_cast<std::size_t>(i)]);
  return t;
}

template <class S>
double to_double(const S& x) {
  if constexpr (std::is_arithmetic_v<S>) {
    return static_cast<double>(x);
  } else {
    return precis::round_to<double>(x);
  }
}

/// A view's elements in row-major order, whatever its strides.
template <class S>
std::vector<double> read(const precis::TensorView<const S>& v) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(v.size()));
  if (v.size() == 0) return out;
  std::vector<index_t> at(static_cast<std::size_t>(v.rank()), 0);
  for (index_t i = 0; i < v.size(); ++i) {
    index_t off = 0;
    for (int d = 0; d < v.rank(); ++d) off += at[static_cast<std::size_t>(d)] * v.strides()[d];
    out.push_back(to_double(v.data()[off]));
    for (int d = v.rank() - 1; d >= 0; --d) {
      if (++at[static_cast<std::size_t>(d)] < v.shape()[d]) break;
      at[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

/// γ_n = n u / (1 - n u), the bound of a sum of n rounded operations (Higham, Lemma 3.1).
double gamma(double n, double u) { return n * u / (1 - n * u); }

/// A shape of rank lo..hi with extents 0..max.
Shape shape_of(bytes& in, int lo, int hi, index_t max) {
  Shape s;
  const int r = static_cast<int>(in.pick(lo, hi));
  for (int i = 0; i < r; ++i) s.push_back(in.pick(0, max));
  return s;
}

/// NumPy's broadcast of a and b (right-aligned; extents equal or 1), or false.
bool broadcast(const Shape& a, const Shape& b, Shape& out) {
  const int r = std::max(a.rank(), b.rank());
  out = Shape{};
  for (int i = 0; i < r; ++i) {
    const index_t ea = i < r - a.rank() ? 1 : a[i - (r - a.rank())],
                  eb = i < r - b.rank() ? 1 : b[i - (r - b.rank())];
    if (ea != eb && ea != 1 && eb != 1) return false;
    out.push_back(ea == 1 ? eb : ea);
  }
  return true;
}

/// The row-major offset, in a contiguous tensor of shape `own` broadcast to `out`, of out's
/// element `flat`.
index_t broadcast_offset(const Shape& out, const Shape& own, index_t flat) {
  index_t off = 0, stride = 1;
  for (int i = out.rank() - 1; i >= 0; --i) {
    const index_t idx = flat % out[i];
    flat /= out[i];
    const int oi = i - (out.rank() - own.rank());
    if (oi < 0) continue;
    if (own[oi] != 1) off += idx * stride;
    stride *= own[oi];
  }
  return off;
}

/// What a run checked against: the expected shape and, per element, the value and how far
/// from it the result may be before its rounding to storage (0: exact, so the result must be
/// the value rounded once to its storage).
struct expected {
  Shape shape;
  std::vector<double> value, tol;
  std::vector<double>
      per_u;  // where not empty: tol grows by per_u times the unit roundoff passed to check
  void resize(const Shape& s) {
    shape = s;
    value.assign(static_cast<std::size_t>(s.numel()), 0.0);
    tol.assign(static_cast<std::size_t>(s.numel()), 0.0);
  }
};

/// The result against the expectation: exact where tol is 0 (the value rounded once to S),
/// else within u_S |value| + (1 + u_S) tol.
template <class S>
void check(const char* op, const char* what, const precis::TensorView<const S>& got,
           const expected& e, double u_extra = 0) {
  if (!(got.shape() == e.shape))
    fail(std::string(op) + " " + what + ": shape " + got.shape().str() + ", expected " +
         e.shape.str());
  const std::vector<double> g = read(got);
  const double u = precis::format_traits<S>::unit_roundoff();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double want = e.value[i], t = e.tol[i] + (e.per_u.empty() ? 0.0 : u_extra * e.per_u[i]);
    const bool ok = t == 0 ? g[i] == to_double(precis::round_to<S>(want))
                           : std::abs(g[i] - want) <= u * std::abs(want) + (1 + u) * t;
    if (!ok) {
      fail(std::string(op) + " " + what + " [" + std::to_string(i) + "] of " + e.shape.str() +
           " (" + std::string(precis::format_traits<S>::name) + "): " + num(g[i]) + ", expected " +
           num(want) + " within " + num(t));
    }
  }
}

/// A gradient: the Var's, or, when no gradient reached it, zeros (allowed only when the
/// reference's are all zero).
template <class V>
void check_grad(const char* op, const char* what, const V& x, const expected& e) {
  using G = typename std::remove_cvref_t<decltype(x.grad())>::storage_type;
  bool reached = true;
  precis::TensorView<const G> g;
  try {
    g = x.grad();
  } catch (const precis::error&) {
    reached = false;
  }
  if (reached) return check(op, what, g, e);
  for (const double v : e.value) {
    if (v != 0)
      fail(std::string(op) + " " + what + ": no gradient reached the input, expected nonzeros");
  }
}

/// The op's forward, or nothing when it threw a precis::error (its input rejected).
template <class F>
auto forward_of(F f) -> std::optional<decltype(f())> {
  try {
    return f();
  } catch (const precis::error&) {
    return std::nullopt;
  }
}

// ---- the cases: each draws its shapes, attributes and data, computes the reference, and runs
// ---- the op under a policy: run<P>() is true when the op rejected its input; any other
// ---- precis::error (from the backward, or a gradient's read) escapes, and libFuzzer reports it

/// conv2d: x [N, C, H, W], w [O, C / groups, kh, kw], optional bias [O].
struct conv_case {
  Shape xs, ws;
  bool bias;
  precis::conv2d_options o;
  std::uint64_t seed;
  bool valid = false;
  expected y, gx, gw, gb;
  std::vector<double> x, w, b, g;

  explicit conv_case(bytes& in) {
    const index_t n = in.pick(0, 6), c = in.pick(0, 16), h = in.pick(0, 12), wd = in.pick(0, 12);
    const index_t groups = in.pick(0, 4), o_ = in.pick(0, 16), kh = in.pick(0, 5),
                  kw = in.pick(0, 5);
    const index_t wc =
        in.pick(0, 4) == 0 ? in.pick(0, 16) : (groups > 0 ? c / groups : c);  // mostly consistent
    xs = in.pick(0, 15) == 0 ? Shape{n, c, h} : Shape{n, c, h, wd};
    ws = Shape{o_, wc, kh, kw};
    bias = in.pick(0, 1) == 1;
    o.groups = groups;
    o.stride = {in.pick(0, 3), in.pick(0, 3)};
    o.padding = {in.pick(-1, 3), in.pick(-1, 3)};
    o.dilation = {in.pick(0, 3), in.pick(0, 3)};
    seed = in.next() | (in.next() << 8);
    x = small_values(seed, xs.numel());
    w = small_values(seed + 1, ws.numel());
    b = small_values(seed + 2, o_);
    // valid as PyTorch defines it (every extent may be 0 but the kernel's)
    if (xs.rank() != 4 || groups < 1 || o.stride[0] < 1 || o.stride[1] < 1 || o.dilation[0] < 1 ||
        o.dilation[1] < 1 || o.padding[0] < 0 || o.padding[1] < 0 || c % groups != 0 ||
        o_ % groups != 0 || wc != c / groups || kh < 1 || kw < 1) {
      return;
    }
    const index_t span_h = o.dilation[0] * (kh - 1) + 1, span_w = o.dilation[1] * (kw - 1) + 1;
    if (span_h > h + 2 * o.padding[0] || span_w > wd + 2 * o.padding[1]) return;
    valid = true;
    const index_t ho = (h + 2 * o.padding[0] - span_h) / o.stride[0] + 1,
                  wo = (wd + 2 * o.padding[1] - span_w) / o.stride[1] + 1;
    y.resize(Shape{n, o_, ho, wo});
    gx.resize(xs);
    gw.resize(ws);
    gb.resize(Shape{o_});
    g = small_values(seed + 3, y.shape.numel());
    const index_t cg = c / groups, og = o_ / groups;
    for (index_t in_ = 0; in_ < n; ++in_) {
      for (index_t oc = 0; oc < o_; ++oc) {
        const index_t grp = oc / og;
        for (index_t i = 0; i < ho; ++i) {
          for (index_t j = 0; j < wo; ++j) {
            const std::size_t yi = static_cast<std::size_t>(((in_ * o_ + oc) * ho + i) * wo + j);
            double acc = bias ? b[static_cast<std::size_t>(oc)] : 0.0;
            const double gy = g[yi];
            if (bias) gb.value[static_cast<std::size_t>(oc)] += gy;
            for (index_t cc = 0; cc < cg; ++cc) {
              for (index_t p = 0; p < kh; ++p) {
                for (index_t q = 0; q < kw; ++q) {
                  const index_t hh = i * o.stride[0] - o.padding[0] + p * o.dilation[0];
                  const index_t ww = j * o.stride[1] - o.padding[1] + q * o.dilation[1];
                  if (hh < 0 || hh >= h || ww < 0 || ww >= wd) continue;
                  const std::size_t xi =
                      static_cast<std::size_t>(((in_ * c + grp * cg + cc) * h + hh) * wd + ww);
                  const std::size_t wi =
                      static_cast<std::size_t>(((oc * cg + cc) * kh + p) * kw + q);
                  acc += x[xi] * w[wi];
                  gx.value[xi] += gy * w[wi];
                  gw.value[wi] += gy * x[xi];
                }
              }
            }
            y.value[yi] = acc;
          }
        }
      }
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    const auto tx = tensor_of(xs, x), tw = tensor_of(ws, w), tb = tensor_of(Shape{ws[0]}, b);
    auto vx = tape.input(tx, true), vw = tape.input(tw, true);
    auto vb = tape.input(tb, true);
    const auto out = forward_of([&] { return bias ? conv2d(vx, vw, vb, o) : conv2d(vx, vw, o); });
    if (!out) return true;
    if (!valid) fail("conv2d accepted x " + xs.str() + ", w " + ws.str() + " (invalid)");
    check("conv2d", "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad("conv2d", "dx", vx, gx);
    check_grad("conv2d", "dw", vw, gw);
    if (bias) check_grad("conv2d", "dbias", vb, gb);
    return false;
  }
};

/// max_pool2d and avg_pool2d: x [N, C, H, W].
struct pool_case {
  bool is_max;
  Shape xs;
  precis::pool2d_options o;
  bool valid = false;
  index_t ho = 0, wo = 0;
  expected y, gx;
  std::vector<double> x, g;

  explicit pool_case(bytes& in, bool max) : is_max(max) {
    const index_t n = in.pick(0, 2), c = in.pick(0, 2), h = in.pick(0, 9),
                  wd = in.pick(0, 9);  // <= 324 elements
    xs = in.pick(0, 15) == 0 ? Shape{n, c, h} : Shape{n, c, h, wd};
    o.kernel = {in.pick(0, 5), in.pick(0, 5)};
    o.stride = {in.pick(-1, 3), in.pick(-1, 3)};
    o.padding = {in.pick(-1, 2), in.pick(-1, 2)};
    const std::uint64_t seed = in.next() | (in.next() << 8);
    x = distinct_values(seed, xs.numel());
    if (xs.rank() != 4 || o.kernel[0] < 1 || o.kernel[1] < 1 || o.stride[0] < 0 ||
        o.stride[1] < 0 || o.padding[0] < 0 || o.padding[1] < 0 || 2 * o.padding[0] > o.kernel[0] ||
        2 * o.padding[1] > o.kernel[1] || h < 1 || wd < 1) {
      return;
    }
    const index_t sh = o.stride[0] == 0 ? o.kernel[0] : o.stride[0],
                  sw = o.stride[1] == 0 ? o.kernel[1] : o.stride[1];
    if (o.kernel[0] > h + 2 * o.padding[0] || o.kernel[1] > wd + 2 * o.padding[1]) return;
    valid = true;
    ho = (h + 2 * o.padding[0] - o.kernel[0]) / sh + 1;
    wo = (wd + 2 * o.padding[1] - o.kernel[1]) / sw + 1;
    y.resize(Shape{n, c, ho, wo});
    gx.resize(xs);
    g = small_values(seed + 1, y.shape.numel());
    const double area = static_cast<double>(o.kernel[0] * o.kernel[1]);
    const double u = std::ldexp(1.0, -24);
    std::vector<double> gx_abs(gx.value.size(), 0.0);
    std::vector<index_t> terms(gx.value.size(), 0);
    for (index_t plane = 0; plane < n * c; ++plane) {
      for (index_t i = 0; i < ho; ++i) {
        for (index_t j = 0; j < wo; ++j) {
          const std::size_t yi = static_cast<std::size_t>((plane * ho + i) * wo + j);
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          std::size_t arg = 0;
          for (index_t p = 0; p < o.kernel[0]; ++p) {
            for (index_t q = 0; q < o.kernel[1]; ++q) {
              const index_t hh = i * sh - o.padding[0] + p, ww = j * sw - o.padding[1] + q;
              if (hh < 0 || hh >= h || ww < 0 || ww >= wd) continue;
              const std::size_t xi = static_cast<std::size_t>((plane * h + hh) * wd + ww);
              sum += x[xi];
              if (x[xi] > best) best = x[xi], arg = xi;
              if (!max) {
                gx.value[xi] += g[yi] / area;
                gx_abs[xi] += std::abs(g[yi]) / area;
                ++terms[xi];
              }
            }
          }
          if (max) {
            y.value[yi] =
                best;  // every window holds an element of x (padding at most half the kernel)
            gx.value[arg] += g[yi];
          } else {
            // the window's sum is exact; dividing by kh kw rounds once, or twice as a product
            // with the rounded reciprocal: |error| <= gamma_2 |value|
            y.value[yi] = sum / area;
            y.tol[yi] = gamma(2, u) * std::abs(sum / area);
          }
        }
      }
    }
    // avg's gradient: m terms g / (kh kw), each within gamma_2 of its value, summed in some
    // order (m - 1 more roundings): |error| <= gamma_(m + 1) sum |g| / (kh kw)
    if (!max) {
      for (std::size_t i = 0; i < gx.tol.size(); ++i)
        gx.tol[i] = gamma(static_cast<double>(terms[i] + 1), u) * gx_abs[i];
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto vx = tape.input(tensor_of(xs, x), true);
    const auto out = forward_of([&] { return is_max ? max_pool2d(vx, o) : avg_pool2d(vx, o); });
    if (!out) return true;
    const char* name = is_max ? "max_pool2d" : "avg_pool2d";
    if (!valid) fail(std::string(name) + " accepted x " + xs.str() + " (invalid)");
    check(name, "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad(name, "dx", vx, gx);
    return false;
  }
};

/// attention: q [..., Tq, H D], k [..., Tk, H D], v [..., Tk, H Dv]; forward against the
/// reference, backward run (its gradients checked finite).
struct attention_case {
  Shape qs, ks, vs;
  precis::attention_options o;
  bool valid = false;
  expected y;
  std::vector<double> q, k, v, g;

  explicit attention_case(bytes& in) {
    const int lead = static_cast<int>(in.pick(0, 2));
    Shape batch;
    for (int i = 0; i < lead; ++i) batch.push_back(in.pick(0, 3));
    const index_t heads = in.pick(0, 3), tq = in.pick(0, 6), tk = in.pick(0, 6), d = in.pick(0, 4),
                  dv = in.pick(0, 4);
    const auto with = [&](Shape s, index_t a, index_t b) {
      s.push_back(a);
      s.push_back(b);
      return s;
    };
    const index_t hh = heads < 1 ? 1 : heads;
    qs = with(batch, tq, hh * d);
    ks = with(batch, tk, hh * d + (in.pick(0, 15) == 0 ? 1 : 0));
    vs = with(batch, in.pick(0, 15) == 0 ? tk + 1 : tk, hh * dv);
    o.heads = heads;
    o.causal = in.pick(0, 1) == 1;
    const double scales[] = {0,
                             0.25,
                             0.5,
                             1,
                             2,
                             -1,
                             std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity()};
    o.scale = scales[in.pick(0, 7)];
    const std::uint64_t seed = in.next() | (in.next() << 8);
    q = small_values(seed, qs.numel());
    k = small_values(seed + 1, ks.numel());
    v = small_values(seed + 2, vs.numel());
    if (heads < 1 || !(ks == with(batch, tk, hh * d)) || !(vs == with(batch, tk, hh * dv)) ||
        tk < 1 || !(o.scale >= 0) || !std::isfinite(o.scale) ||
        (o.scale == 0 && d == 0)) {  // 1/sqrt(D) needs D >= 1
      return;
    }
    valid = true;
    y.resize(with(batch, tq, hh * dv));
    y.per_u.assign(y.value.size(), 0.0);
    g = small_values(seed + 3, y.shape.numel());
    const double u = std::ldexp(1.0, -24);
    const double scale = o.scale > 0 ? o.scale : 1 / std::sqrt(static_cast<double>(d));
    const index_t entries = batch.numel();
    for (index_t e = 0; e < entries; ++e) {
      for (index_t h = 0; h < hh; ++h) {
        for (index_t i = 0; i < tq; ++i) {
          const index_t allowed = o.causal ? std::min(tk, i + 1) : tk;
          std::vector<double> s(static_cast<std::size_t>(allowed));
          double mx = -std::numeric_limits<double>::infinity(), big = 0;
          for (index_t j = 0; j < allowed; ++j) {
            double dot = 0;
            for (index_t t = 0; t < d; ++t) {
              dot += q[static_cast<std::size_t>((e * tq + i) * hh * d + h * d + t)] *
                     k[static_cast<std::size_t>((e * tk + j) * hh * d + h * d + t)];
            }
            s[static_cast<std::size_t>(j)] = dot * scale;
            mx = std::max(mx, s[static_cast<std::size_t>(j)]);
            big = std::max(big, std::abs(s[static_cast<std::size_t>(j)]));
          }
          double z = 0;
          for (auto& sj : s) z += (sj = std::exp(sj - mx));
          for (index_t c = 0; c < dv; ++c) {
            double acc = 0, mag = 0;
            for (index_t j = 0; j < allowed; ++j) {
              const double p = s[static_cast<std::size_t>(j)] / z,
                           vj = v[static_cast<std::size_t>((e * tk + j) * hh * dv + h * dv + c)];
              acc += p * vj;
              mag += p * std::abs(vj);
            }
            const std::size_t yi = static_cast<std::size_t>((e * tq + i) * hh * dv + h * dv + c);
            y.value[yi] = acc;
            // The dot products are exact. Each score is scaled (one rounding, a second through a
            // rounded 1/sqrt(D)) and shifted by the row's maximum (one more): an error in the
            // exponent of at most 6 u S (S: the row's largest |score|), which the exponential
            // turns into a relative error of about as much in each term and in their sum: 13 u S
            // in a probability. The exponential itself (2.25 u, detail/vexp.hpp), the sum's
            // Tk - 1 roundings and the division add gamma_(Tk + 5); the second product, gamma_Tk,
            // relative to sum p |v|. Under bf16-mixed the probabilities are rounded to bf16 for it
            // (u_bf16 each): per_u, which check multiplies by the unit roundoff of the op's
            // storage.
            y.tol[yi] = (gamma(2.0 * static_cast<double>(tk) + 7, u) + 13 * u * big) * mag;
            y.per_u[yi] = mag;
          }
        }
      }
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto vq = tape.input(tensor_of(qs, q), true), vk = tape.input(tensor_of(ks, k), true),
         vv = tape.input(tensor_of(vs, v), true);
    const auto out = forward_of([&] { return attention(vq, vk, vv, o); });
    if (!out) return true;
    if (!valid)
      fail("attention accepted q " + qs.str() + ", k " + ks.str() + ", v " + vs.str() +
           " (invalid)");
    using L = typename precis::policy::op_types<P, precis::op::attention, float>::storage;
    check("attention", "y", out->value(), y, precis::format_traits<L>::unit_roundoff());
    tape.backward(*out, tensor_of(y.shape, g));
    for (const auto* var : {&vq, &vk, &vv}) {
      try {
        for (const double gv : read(var->grad())) {
          if (!std::isfinite(gv)) fail("attention: a gradient is not finite");
        }
      } catch (const precis::error&) {  // no gradient reached it (no elements)
      }
    }
    return false;
  }
};

/// bmm: a [..., m, k] times b [..., k, n], the batch axes broadcast.
struct bmm_case {
  Shape as, bs;
  bool valid = false;
  expected y, ga, gb;
  std::vector<double> a, b, g;

  explicit bmm_case(bytes& in) {
    const Shape ba = shape_of(in, 0, 2, 3), bb = shape_of(in, 0, 2, 3);
    const index_t m = in.pick(0, 5), kk = in.pick(0, 5), n = in.pick(0, 5),
                  kb = in.pick(0, 7) == 0 ? in.pick(0, 5) : kk;
    as = ba;
    as.push_back(m);
    as.push_back(kk);
    bs = bb;
    bs.push_back(kb);
    bs.push_back(n);
    if (in.pick(0, 15) == 0) as = Shape{m};  // rank 1
    const std::uint64_t seed = in.next() | (in.next() << 8);
    a = small_values(seed, as.numel());
    b = small_values(seed + 1, bs.numel());
    if (as.rank() < 2 || kb != kk) return;
    Shape out;
    if (!broadcast(ba, bb, out)) return;  // the batch axes
    valid = true;
    Shape ys = out;
    ys.push_back(m);
    ys.push_back(n);
    y.resize(ys);
    ga.resize(as);
    gb.resize(bs);
    g = small_values(seed + 2, ys.numel());
    for (index_t e = 0; e < out.numel(); ++e) {
      const index_t ea = broadcast_offset(out, ba, e), eb = broadcast_offset(out, bb, e);
      for (index_t i = 0; i < m; ++i) {
        for (index_t j = 0; j < n; ++j) {
          const std::size_t yi = static_cast<std::size_t>((e * m + i) * n + j);
          double acc = 0;
          for (index_t t = 0; t < kk; ++t) {
            const std::size_t ai = static_cast<std::size_t>((ea * m + i) * kk + t),
                              bi = static_cast<std::size_t>((eb * kk + t) * n + j);
            acc += a[ai] * b[bi];
            ga.value[ai] += g[yi] * b[bi];
            gb.value[bi] += g[yi] * a[ai];
          }
          y.value[yi] = acc;
        }
      }
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto va = tape.input(tensor_of(as, a), true), vb = tape.input(tensor_of(bs, b), true);
    const auto out = forward_of([&] { return bmm(va, vb); });
    if (!out) return true;
    if (!valid) fail("bmm accepted a " + as.str() + ", b " + bs.str() + " (invalid)");
    check("bmm", "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad("bmm", "da", va, ga);
    check_grad("bmm", "db", vb, gb);
    return false;
  }
};

/// embedding: rows of w [V, D] at indices of shape I -> [I..., D].
struct embedding_case {
  Shape ws, is;
  std::vector<std::int64_t> idx;
  bool valid = false;
  expected y, gw;
  std::vector<double> w, g;

  explicit embedding_case(bytes& in) {
    const index_t vocab = in.pick(0, 6), d = in.pick(0, 5);
    ws = in.pick(0, 15) == 0 ? Shape{vocab} : Shape{vocab, d};
    const int r = static_cast<int>(in.pick(0, 2));
    for (int i = 0; i < r; ++i) is.push_back(in.pick(0, 4));
    for (index_t i = 0; i < is.numel(); ++i) {  // mostly in range; sometimes -1 or V
      const index_t hi = vocab - 1 + (in.pick(0, 7) == 0 ? 1 : 0);
      idx.push_back(in.pick(0, 15) == 0 ? -1 : in.pick(0, std::max<index_t>(hi, 0)));
    }
    const std::uint64_t seed = in.next() | (in.next() << 8);
    w = small_values(seed, ws.numel());
    if (ws.rank() != 2) return;
    for (const auto i : idx) {
      if (i < 0 || i >= vocab) return;
    }
    valid = true;
    Shape ys = is;
    ys.push_back(d);
    y.resize(ys);
    gw.resize(ws);
    g = small_values(seed + 1, ys.numel());
    for (std::size_t i = 0; i < idx.size(); ++i) {
      for (index_t c = 0; c < d; ++c) {
        const std::size_t yi = i * static_cast<std::size_t>(d) + static_cast<std::size_t>(c);
        const std::size_t wi = static_cast<std::size_t>(idx[i] * d + c);
        y.value[yi] = w[wi];
        gw.value[wi] += g[yi];
      }
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto vw = tape.input(tensor_of(ws, w), true);
    const auto out =
        forward_of([&] { return embedding(vw, std::span<const std::int64_t>(idx), is); });
    if (!out) return true;
    if (!valid)
      fail("embedding accepted w " + ws.str() + " with indices of shape " + is.str() +
           " (invalid)");
    check("embedding", "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad("embedding", "dw", vw, gw);
    return false;
  }
};

/// slice(x, axis, begin, end, step): elements begin, begin + step, ... < end along the axis,
/// with 0 <= begin <= end <= extent and step >= 1 (precis's contract: no negative indices).
struct slice_case {
  Shape xs;
  int axis;
  index_t begin, end, step;
  bool valid = false;
  expected y, gx;
  std::vector<double> x, g;

  explicit slice_case(bytes& in) {
    xs = shape_of(in, 0, 3, 5);
    axis = static_cast<int>(in.pick(-4, 3));
    begin = in.pick(-1, 6);
    end = in.pick(-1, 6);
    step = in.pick(-1, 3);
    const std::uint64_t seed = in.next() | (in.next() << 8);
    x = small_values(seed, xs.numel());
    const int r = xs.rank();
    if (axis < -r || axis >= r) return;
    const int a = axis < 0 ? axis + r : axis;
    if (step < 1 || begin < 0 || end < begin || end > xs[a]) return;
    valid = true;
    Shape ys = xs;
    ys[a] = (end - begin + step - 1) / step;
    y.resize(ys);
    gx.resize(xs);
    g = small_values(seed + 1, ys.numel());
    index_t inner = 1;
    for (int i = a + 1; i < r; ++i) inner *= xs[i];
    for (index_t i = 0; i < ys.numel(); ++i) {
      const index_t lo = i % inner, k = i / inner % ys[a], hi = i / inner / ys[a];
      const std::size_t xi = static_cast<std::size_t>((hi * xs[a] + begin + k * step) * inner + lo);
      y.value[static_cast<std::size_t>(i)] = x[xi];
      gx.value[xi] += g[static_cast<std::size_t>(i)];
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto vx = tape.input(tensor_of(xs, x), true);
    const auto out = forward_of([&] { return slice(vx, axis, begin, end, step); });
    if (!out) return true;
    if (!valid)
      fail("slice accepted x " + xs.str() + ", axis " + std::to_string(axis) + " (invalid)");
    check("slice", "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad("slice", "dx", vx, gx);
    return false;
  }
};

/// cat(axis, {x0, x1, ...}): inputs of one rank whose extents agree but along the axis.
struct cat_case {
  std::vector<Shape> xs;
  int axis;
  bool valid = false;
  expected y;
  std::vector<expected> gx;
  std::vector<std::vector<double>> x;
  std::vector<double> g;

  explicit cat_case(bytes& in) {
    const index_t count = in.pick(1, 3);
    const Shape base = shape_of(in, 0, 3, 4);
    axis = static_cast<int>(in.pick(-4, 3));
    const int r = base.rank();
    const int a = axis < 0 ? axis + r : axis;
    for (index_t i = 0; i < count; ++i) {
      Shape s = base;
      if (a >= 0 && a < r) s[a] = in.pick(0, 4);
      if (in.pick(0, 15) == 0 && r > 0)
        s[static_cast<int>(in.pick(0, r - 1))] += 1;  // sometimes mismatched
      if (in.pick(0, 15) == 0) s.push_back(1);        // or of another rank
      xs.push_back(s);
    }
    const std::uint64_t seed = in.next() | (in.next() << 8);
    for (index_t i = 0; i < count; ++i) {
      x.push_back(small_values(seed + static_cast<std::uint64_t>(i),
                               xs[static_cast<std::size_t>(i)].numel()));
    }
    // valid as the inputs are (they may all have gained an axis): one rank, extents equal to
    // the first input's but along the axis
    const int rank = xs[0].rank();
    if (axis < -rank || axis >= rank) return;
    const int ax = axis < 0 ? axis + rank : axis;
    Shape ys = xs[0];
    ys[ax] = 0;
    for (const auto& s : xs) {
      if (s.rank() != rank) return;
      for (int d = 0; d < rank; ++d) {
        if (d != ax && s[d] != xs[0][d]) return;
      }
      ys[ax] += s[ax];
    }
    valid = true;
    y.resize(ys);
    g = small_values(seed + 7, ys.numel());
    index_t inner = 1, outer = 1;
    for (int d = ax + 1; d < rank; ++d) inner *= ys[d];
    for (int d = 0; d < ax; ++d) outer *= ys[d];
    index_t at = 0;  // where input i starts along the axis
    for (std::size_t i = 0; i < xs.size(); ++i) {
      gx.emplace_back();
      gx.back().resize(xs[i]);
      const index_t len = xs[i][ax];
      for (index_t o = 0; o < outer; ++o) {
        for (index_t k = 0; k < len; ++k) {
          for (index_t l = 0; l < inner; ++l) {
            const std::size_t src = static_cast<std::size_t>((o * len + k) * inner + l);
            const std::size_t dst = static_cast<std::size_t>((o * ys[ax] + at + k) * inner + l);
            y.value[dst] = x[i][src];
            gx.back().value[src] = g[dst];
          }
        }
      }
      at += len;
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    std::vector<precis::Var<P, float>> v;
    for (std::size_t i = 0; i < xs.size(); ++i)
      v.push_back(tape.input(tensor_of(xs[i], x[i]), true));
    const auto out = forward_of([&] {
      if (v.size() == 1) return precis::cat(axis, {v[0]});
      if (v.size() == 2) return precis::cat(axis, {v[0], v[1]});
      return precis::cat(axis, {v[0], v[1], v[2]});
    });
    if (!out) return true;
    if (!valid)
      fail("cat accepted inputs of shapes " + xs[0].str() + ", ... on axis " +
           std::to_string(axis) + " (invalid)");
    check("cat", "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    for (std::size_t i = 0; i < v.size(); ++i) check_grad("cat", "dx", v[i], gx[i]);
    return false;
  }
};

/// max(x, axis) and argmax(x, axis): x's values distinct, so each maximum is one element, which
/// takes the gradient.
struct max_case {
  Shape xs;
  int axis;
  bool valid = false;
  expected y, gx;
  std::vector<std::int64_t> arg;
  std::vector<double> x, g;

  explicit max_case(bytes& in) {
    xs = shape_of(in, 0, 3, 6);
    if (xs.numel() > 511) xs = Shape{7};  // distinct_values has 511
    axis = static_cast<int>(in.pick(-4, 3));
    const std::uint64_t seed = in.next() | (in.next() << 8);
    x = distinct_values(seed, xs.numel());
    const int r = xs.rank();
    if (axis < -r || axis >= r) return;
    const int a = axis < 0 ? axis + r : axis;
    if (xs[a] == 0) return;  // a maximum over nothing
    valid = true;
    y.resize(xs.erased(a));
    gx.resize(xs);
    g = small_values(seed + 1, y.shape.numel());
    index_t inner = 1;
    for (int d = a + 1; d < r; ++d) inner *= xs[d];
    for (index_t i = 0; i < y.shape.numel(); ++i) {
      const index_t lo = i % inner, hi = i / inner;
      std::size_t best = static_cast<std::size_t>(hi * xs[a] * inner + lo);
      index_t at = 0;
      for (index_t k = 1; k < xs[a]; ++k) {
        const std::size_t xi = static_cast<std::size_t>((hi * xs[a] + k) * inner + lo);
        if (x[xi] > x[best]) best = xi, at = k;
      }
      y.value[static_cast<std::size_t>(i)] = x[best];
      gx.value[best] += g[static_cast<std::size_t>(i)];
      arg.push_back(at);
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto vx = tape.input(tensor_of(xs, x), true);
    const auto out = forward_of([&] { return max(vx, axis); });
    if (!out) return true;
    if (!valid)
      fail("max accepted x " + xs.str() + ", axis " + std::to_string(axis) + " (invalid)");
    check("max", "y", out->value(), y);
    if (argmax(vx, axis) != arg)
      fail("argmax of x " + xs.str() + " on axis " + std::to_string(axis) + " differs");
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad("max", "dx", vx, gx);
    return false;
  }
};

/// masked_fill(x, mask, value) (the mask broadcast to x) and where(cond, a, b) (cond broadcast
/// to a and b's broadcast); cond and mask hold 0 and 1 and take no gradient.
struct select_case {
  bool is_where;
  Shape as, bs, cs;
  double value;
  bool valid = false;
  expected y, ga, gb;
  std::vector<double> a, b, c, g;

  select_case(bytes& in, bool where) : is_where(where) {
    as = shape_of(in, 0, 3, 3);
    bs = where ? shape_of(in, 0, 3, 3) : Shape{};
    cs = shape_of(in, 0, 3, 3);
    const double values[] = {0, -0.5, 3, -std::numeric_limits<double>::infinity()};
    value = values[in.pick(0, 3)];
    const std::uint64_t seed = in.next() | (in.next() << 8);
    a = small_values(seed, as.numel());
    b = small_values(seed + 1, bs.numel());
    c.resize(static_cast<std::size_t>(cs.numel()));
    for (index_t i = 0; i < cs.numel(); ++i) {
      c[static_cast<std::size_t>(i)] =
          static_cast<double>(mix(seed + 2 + static_cast<std::uint64_t>(i)) & 1);
    }
    Shape ys;
    if (where) {
      Shape ab;
      if (!broadcast(as, bs, ab) || !broadcast(cs, ab, ys) || !(ys == ab)) return;
    } else {
      if (!broadcast(cs, as, ys) || !(ys == as)) return;
    }
    valid = true;
    y.resize(ys);
    ga.resize(as);
    gb.resize(bs);
    g = small_values(seed + 3, ys.numel());
    for (index_t i = 0; i < ys.numel(); ++i) {
      const auto ai = static_cast<std::size_t>(broadcast_offset(ys, as, i));
      const auto ci = static_cast<std::size_t>(broadcast_offset(ys, cs, i));
      const auto yi = static_cast<std::size_t>(i);
      if (where) {
        const auto bi = static_cast<std::size_t>(broadcast_offset(ys, bs, i));
        y.value[yi] = c[ci] != 0 ? a[ai] : b[bi];
        (c[ci] != 0 ? ga.value[ai] : gb.value[bi]) += g[yi];
      } else {
        y.value[yi] = c[ci] != 0 ? value : a[ai];
        if (c[ci] == 0) ga.value[ai] += g[yi];
      }
    }
  }

  template <class P>
  bool run() const {
    precis::Tape<P> tape;
    auto va = tape.input(tensor_of(as, a), true), vb = tape.input(tensor_of(bs, b), true);
    auto vc = tape.input(tensor_of(cs, c));
    const char* name = is_where ? "where" : "masked_fill";
    const auto out =
        forward_of([&] { return is_where ? where(vc, va, vb) : masked_fill(va, vc, value); });
    if (!out) return true;
    if (!valid)
      fail(std::string(name) + " accepted " + as.str() + ", " + bs.str() + ", " + cs.str() +
           " (invalid)");
    check(name, "y", out->value(), y);
    tape.backward(*out, tensor_of(y.shape, g));
    check_grad(name, "da", va, ga);
    if (is_where) check_grad(name, "db", vb, gb);
    return false;
  }
};

/// The case under 32-true, bf16-mixed and 16-mixed: each rejects the input or none does.
template <class Case>
void every_policy(const Case& c, const char* op) {
  const bool a = c.template run<precis::policy::named<"32-true">>();
  const bool b = c.template run<precis::policy::named<"bf16-mixed">>();
  const bool h = c.template run<precis::policy::named<"16-mixed">>();
  if (a != b || a != h) {
    fail(std::string(op) + ": rejected under " + (a ? "32-true" : "") + (b ? " bf16-mixed" : "") + (h ? " 16-mixed" : "") +
         " only");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  bytes in{data + 1, size - 1};
  switch (data[0] % 11) {
    case 0:
      every_policy(conv_case(in), "conv2d");
      break;
    case 1:
      every_policy(pool_case(in, true), "max_pool2d");
      break;
    case 2:
      every_policy(pool_case(in, false), "avg_pool2d");
      break;
    case 3:
      every_policy(attention_case(in), "attention");
      break;
    case 4:
      every_policy(bmm_case(in), "bmm");
      break;
    case 5:
      every_policy(embedding_case(in), "embedding");
      break;
    case 6:
      every_policy(slice_case(in), "slice");
      break;
    case 7:
      every_policy(cat_case(in), "cat");
      break;
    case 8:
      every_policy(max_case(in), "max");
      break;
    case 9:
      every_policy(select_case(in, false), "masked_fill");
      break;
    default:
      every_policy(select_case(in, true), "where");
      break;
  }
  return 0;
}
