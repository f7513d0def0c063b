// Attention's output and gradients against its definition, evaluated in long double (in double
// where nvcc compiles it; the definition's own error is added to the bound), with an
// error bound derived from the unit roundoffs of the formats the op goes through. Shared by the
// CPU tape's test (ops_test.cpp) and the device tape's (tests/cuda/backend_test.cu), so that
// both implementations (a loop of GEMMs and softmax passes, or one fused kernel a matrix) are
// held to the same bound, whatever their summation orders.
//
// The bound, first order in each rounding but composed as products of (1 + e) (so that it holds
// to all orders), with u the accumulator's unit roundoff, gamma(n) = n u / (1 - n u) (Higham
// 2002, lemma 3.1), and sigma the largest scale * sum_c |q_ic| |k_jc|:
//
// - each score is a sum of d products, then multiplied by the scale (itself 1 / sqrt(d) rounded
//   twice): its absolute error is at most gamma(d + 3) sigma. The softmax is invariant under a
//   shift, so the maximum subtracted adds another such error, and the subtraction's own
//   rounding (of an argument at most 2 sigma in size) 2 sigma u; exp is within 2 ulps. So each
//   exponential has a relative error of at most k_e u, k_e = 2 (d + 3) sigma + 2 sigma + 2;
// - their sum (at most Tk terms) k_e + Tk, the quotient one more: each probability p within
//   eps_p = gamma(2 k_e + Tk + 1) of the exact one, relatively;
// - y = sum_j p_j v_j (p rounded once to the storage as the product's operand, u_S), a sum of Tk
//   products: within ((1 + eps_p)(1 + u_S)(1 + gamma(Tk)) - 1) sum_j p_j |v_j|, then rounded
//   into y's format;
// - dv_j = sum_i p_ij g_i the same way, over Tq;
// - dp_ij = sum_c g_ic v_jc within gamma(Dv) A_ij (A_ij = sum_c |g_ic| |v_jc|), their
//   p-weighted sum within ((1 + gamma(Dv))(1 + eps_p)(1 + gamma(Tk)) - 1) B_i (B_i = sum_j p_ij
//   A_ij), and ds_ij = p_ij (dp_ij - dot_i) scale (three roundings and the scale's two) within
//   eps_ds E_ij, E_ij = p_ij (A_ij + B_i) scale;
// - dq_i = sum_j ds_ij k_j and dk_j = sum_i ds_ij q_i: within ((1 + eps_ds)(1 + gamma(n)) - 1)
//   times sum_j E_ij |k_j| (sum_i E_ij |q_i|), n = Tk (Tq), then rounded into the gradient's
//   format.
//
// Subnormal results (fp16 products of small probabilities) break the relative model: each
// operation may add an absolute error of up to half the format's smallest subnormal, eta.
// Every path above has fewer than 4 (d + Dv + Tq + Tk + 8) operations, each error multiplied on its
// way by at most the product of the operands' largest magnitudes, which gives the absolute term.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace precis_test {

/// b entries of h heads side by side: q [b, tq, h d], k [b, tk, h d], v [b, tk, h dv].
struct attention_case {
  long b = 1, tq = 1, tk = 1, h = 1, d = 1, dv = 1;
  bool causal = false;
};

/// What the op read, as doubles in storage order (q, k, v exact in the op's storage format), and
/// the weights c [b, tq, h dv] of the loss sum(y * c), whose gradient with respect to y is c.
struct attention_data {
  std::vector<double> q, k, v, c;
};

/// What an implementation produced: y and the gradients of q, k and v.
struct attention_result {
  std::vector<double> y, gq, gk, gv;
};

/// Unit roundoffs: the op's storage (its operands, and the probabilities as the second product's
/// operand), its accumulator, y's format and the gradients' format; eta: the accumulator's
/// smallest subnormal (an operation with a subnormal result errs by at most half of it), and
/// the same for the storage.
struct attention_units {
  double storage = 0, acc = 0, out = 0, grad = 0, eta_acc = 0, eta_storage = 0;
};

/// "" when every value is within its bound, else a description of the first that is not.
/// worst (optional): the largest ratio of an error to its bound.
inline std::string check_attention_bound(const attention_case& n, const attention_data& x,
                                         const attention_result& r, const attention_units& un,
                                         double* worst = nullptr) {
#if defined(__CUDACC__)
  using R = double;  // nvcc has no long double on the device side, and warns of it in host code
#else
  using R = long double;
#endif
  const auto at = [&](long rows, long cols, long m, long i, long c) {
    return static_cast<std::size_t>((m / n.h) * rows * n.h * cols + i * n.h * cols +
                                    (m % n.h) * cols + c);
  };
  const R scale = 1 / std::sqrt(static_cast<R>(n.d));
  double sigma = 0, mq = 1, mk = 1, mv = 1, mc = 1;
  for (double e : x.q) mq = std::max(mq, std::fabs(e));
  for (double e : x.k) mk = std::max(mk, std::fabs(e));
  for (double e : x.v) mv = std::max(mv, std::fabs(e));
  for (double e : x.c) mc = std::max(mc, std::fabs(e));
  const long matrices = n.b * n.h;
  for (long m = 0; m < matrices; ++m)
    for (long i = 0; i < n.tq; ++i)
      for (long j = 0; j < n.tk; ++j) {
        R s = 0;
        for (long c = 0; c < n.d; ++c)
          s += std::fabs(static_cast<R>(x.q[at(n.tq, n.d, m, i, c)]) * x.k[at(n.tk, n.d, m, j, c)]);
        sigma = std::max(sigma, static_cast<double>(s * scale));
      }
  const double td = static_cast<double>(n.d), tq = static_cast<double>(n.tq),
               tk = static_cast<double>(n.tk), tdv = static_cast<double>(n.dv);
  // the relative factors of y, dv, dq and dk for unit roundoffs u (accumulator), us (storage)
  struct factors {
    double y, dv, dq, dk;
  };
  const auto factors_of = [&](double u, double us) {
    const auto gamma = [&](double k) { return k * u / (1 - k * u); };
    const double k_e = 2 * (td + 3) * sigma + 2 * sigma + 2;
    const double eps_p = gamma(2 * k_e + tk + 1);
    const double e_dot = (1 + gamma(tdv)) * (1 + eps_p) * (1 + gamma(tk)) - 1;
    const double e_4 = (1 + eps_p) * (1 + gamma(5)) - 1;
    const double e_ds = e_4 + e_dot + e_4 * e_dot;
    return factors{(1 + eps_p) * (1 + us) * (1 + gamma(tk)) - 1,
                   (1 + eps_p) * (1 + us) * (1 + gamma(tq)) - 1, (1 + e_ds) * (1 + gamma(tk)) - 1,
                   (1 + e_ds) * (1 + gamma(tq)) - 1};
  };
  const factors fi = factors_of(un.acc, un.storage);
  // the definition evaluated in R takes the same steps with R's unit roundoff and no storage
  // roundings: its error adds to the implementation's, and its magnitudes are within
  // gamma(tq + tk + d + dv) of the exact ones
  const double u_r = static_cast<double>(std::numeric_limits<R>::epsilon()) / 2;
  const factors fr = factors_of(u_r, 0);
  const double slack = 1 + (tq + tk + td + tdv) * u_r / (1 - (tq + tk + td + tdv) * u_r);
  const double ops = 4 * (td + tdv + tq + tk + 8);
  const double big = std::max({mq, mk, mv, mc});
  const double eta =
      un.eta_acc * ops * big * big * big * big * std::max(1.0, static_cast<double>(scale)) +
      un.eta_storage * (tk + tq) * big * big;

  double worst_ratio = 0;
  std::string failure;
  const auto expect = [&](const char* what, long m, long i, long c, double got, R want, R magr,
                          double rel, double rel_r, double out_u) {
    const double mag = static_cast<double>(magr) * slack;
    const double bound =
        mag * (rel + rel_r) + out_u * (std::fabs(static_cast<double>(want)) + mag * rel) + eta;
    const double err = std::fabs(got - static_cast<double>(want));
    const double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
    if (!(ratio <= 1) && failure.empty()) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s of matrix %ld at (%ld, %ld): %.9g against the definition's %.9g, error "
                    "%.3g over the bound %.3g",
                    what, m, i, c, got, static_cast<double>(want), err, bound);
      failure = buf;
    }
    if (ratio > worst_ratio) worst_ratio = ratio;
  };

  std::vector<R> p(static_cast<std::size_t>(n.tq * n.tk)), a(p.size()), ds(p.size()), e(p.size());
  for (long m = 0; m < matrices; ++m) {
    const auto Q = [&](long i, long c) { return static_cast<R>(x.q[at(n.tq, n.d, m, i, c)]); };
    const auto K = [&](long j, long c) { return static_cast<R>(x.k[at(n.tk, n.d, m, j, c)]); };
    const auto V = [&](long j, long c) { return static_cast<R>(x.v[at(n.tk, n.dv, m, j, c)]); };
    const auto C = [&](long i, long c) { return static_cast<R>(x.c[at(n.tq, n.dv, m, i, c)]); };
    for (long i = 0; i < n.tq; ++i) {
      const long allowed = n.causal ? std::min(i + 1, n.tk) : n.tk;
      R mx = -INFINITY;
      std::vector<R> s(static_cast<std::size_t>(n.tk), 0);
      for (long j = 0; j < allowed; ++j) {
        R dot = 0;
        for (long c = 0; c < n.d; ++c) dot += Q(i, c) * K(j, c);
        s[static_cast<std::size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<std::size_t>(j)]);
      }
      R z = 0;
      for (long j = 0; j < allowed; ++j) z += std::exp(s[static_cast<std::size_t>(j)] - mx);
      for (long j = 0; j < n.tk; ++j)
        p[static_cast<std::size_t>(i * n.tk + j)] =
            j < allowed ? std::exp(s[static_cast<std::size_t>(j)] - mx) / z : 0;
    }
    // y and dv
    for (long i = 0; i < n.tq; ++i)
      for (long c = 0; c < n.dv; ++c) {
        R y = 0, mag = 0;
        for (long j = 0; j < n.tk; ++j) {
          y += p[static_cast<std::size_t>(i * n.tk + j)] * V(j, c);
          mag += p[static_cast<std::size_t>(i * n.tk + j)] * std::fabs(V(j, c));
        }
        expect("y", m, i, c, r.y[at(n.tq, n.dv, m, i, c)], y, mag, fi.y, fr.y, un.out);
      }
    for (long j = 0; j < n.tk; ++j)
      for (long c = 0; c < n.dv; ++c) {
        R g = 0, mag = 0;
        for (long i = 0; i < n.tq; ++i) {
          g += p[static_cast<std::size_t>(i * n.tk + j)] * C(i, c);
          mag += p[static_cast<std::size_t>(i * n.tk + j)] * std::fabs(C(i, c));
        }
        expect("dv", m, j, c, r.gv[at(n.tk, n.dv, m, j, c)], g, mag, fi.dv, fr.dv, un.grad);
      }
    // ds and its magnitude E
    for (long i = 0; i < n.tq; ++i) {
      R dot = 0, b = 0;
      std::vector<R> dp(static_cast<std::size_t>(n.tk));
      for (long j = 0; j < n.tk; ++j) {
        R s = 0, am = 0;
        for (long c = 0; c < n.dv; ++c) {
          s += C(i, c) * V(j, c);
          am += std::fabs(C(i, c) * V(j, c));
        }
        dp[static_cast<std::size_t>(j)] = s;
        a[static_cast<std::size_t>(i * n.tk + j)] = am;
        dot += p[static_cast<std::size_t>(i * n.tk + j)] * s;
        b += p[static_cast<std::size_t>(i * n.tk + j)] * am;
      }
      for (long j = 0; j < n.tk; ++j) {
        const auto t = static_cast<std::size_t>(i * n.tk + j);
        ds[t] = p[t] * (dp[static_cast<std::size_t>(j)] - dot) * scale;
        e[t] = p[t] * (a[t] + b) * scale;
      }
    }
    for (long i = 0; i < n.tq; ++i)
      for (long c = 0; c < n.d; ++c) {
        R g = 0, mag = 0;
        for (long j = 0; j < n.tk; ++j) {
          g += ds[static_cast<std::size_t>(i * n.tk + j)] * K(j, c);
          mag += e[static_cast<std::size_t>(i * n.tk + j)] * std::fabs(K(j, c));
        }
        expect("dq", m, i, c, r.gq[at(n.tq, n.d, m, i, c)], g, mag, fi.dq, fr.dq, un.grad);
      }
    for (long j = 0; j < n.tk; ++j)
      for (long c = 0; c < n.d; ++c) {
        R g = 0, mag = 0;
        for (long i = 0; i < n.tq; ++i) {
          g += ds[static_cast<std::size_t>(i * n.tk + j)] * Q(i, c);
          mag += e[static_cast<std::size_t>(i * n.tk + j)] * std::fabs(Q(i, c));
        }
        expect("dk", m, j, c, r.gk[at(n.tk, n.d, m, j, c)], g, mag, fi.dk, fr.dk, un.grad);
      }
  }
  if (worst != nullptr) *worst = worst_ratio;
  return failure;
}

}  // namespace precis_test
