// The tape on a backend whose memory the host may not touch. A device backend's values live where
// host code cannot read them, so the tape and the ops it runs there must reach that memory only
// through the backend and the op's context. This test gives the tape such a backend on the CPU:
// op::cpu's arithmetic on memory that is mapped PROT_NONE except while one of the backend's or
// the context's calls runs. A read or write from anywhere else (the tape, a definition's own
// loop, the recording machinery) faults; the fault handler names the address and ends the test
// binary. The results must be the host backend's, bit for bit (the same arithmetic underneath).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <precis/precis.hpp>
#include <string>
#include <utility>
#include <vector>

using namespace precis;
namespace pol = precis::policy;

namespace {

// ---- memory that is open only inside the backend ---------------------------------------------

namespace fence {

struct block {
  void* p;
  std::size_t bytes;
};
std::vector<block>& blocks() {
  static std::vector<block> b;
  return b;
}
int depth = 0;       // nested openings
long openings = 0;   // how often the memory was opened (the test checks the fence was used)

std::size_t page() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }
std::size_t mapped(std::size_t n) { return (std::max<std::size_t>(n, 1) + page() - 1) / page() * page(); }

void set(int prot) {
  for (const block& b : blocks()) {
    if (mprotect(b.p, b.bytes, prot) != 0) {
      std::perror("mprotect");
      std::abort();
    }
  }
}

/// While one lives, the fenced memory is readable and writable.
struct open {
  open() {
    if (depth++ == 0) {
      ++openings;
      set(PROT_READ | PROT_WRITE);
    }
  }
  ~open() {
    if (--depth == 0) set(PROT_NONE);
  }
  open(const open&) = delete;
  open& operator=(const open&) = delete;
};

void* allocate(std::size_t bytes) {
  const std::size_t n = mapped(bytes);
  void* p = mmap(nullptr, n, depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  blocks().push_back({p, n});
  return p;
}
void release(void* p, std::size_t) noexcept {
  auto& b = blocks();
  const auto it = std::find_if(b.begin(), b.end(), [p](const block& x) { return x.p == p; });
  if (it != b.end()) {
    munmap(it->p, it->bytes);
    b.erase(it);
  }
}
constexpr Arena::block_source source{&allocate, &release};

/// A fault inside fenced memory: name it and end the binary with a failure (a fault elsewhere
/// is not ours: the default action runs).
void on_fault(int sig, siginfo_t* info, void*) {
  for (const block& b : blocks()) {
    const auto* a = static_cast<const unsigned char*>(info->si_addr);
    const auto* p = static_cast<const unsigned char*>(b.p);
    if (a >= p && a < p + b.bytes) {
      char msg[160];
      const int n = std::snprintf(msg, sizeof msg,
                                  "\nFAILED: backend memory touched outside the backend and the op's context (address %p)\n",
                                  info->si_addr);
      if (n > 0) (void)!write(2, msg, static_cast<std::size_t>(n));
      _exit(3);
    }
  }
  signal(sig, SIG_DFL);
}

/// Installs the fault handler for a test's life.
struct handler {
  struct sigaction old_segv {}, old_bus {};
  handler() {
    struct sigaction sa {};
    sa.sa_sigaction = &on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
  }
  ~handler() {
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
  }
};

}  // namespace fence

// ---- the fenced backend: op::cpu's arithmetic, every memory access opened ----------------------

/// op::cpu with every member that touches tensor memory run with the memory open.
class fenced_cpu : public op::cpu {
 public:
  explicit fenced_cpu(const op::cpu& c) : op::cpu(c) {}

  template <class T>
  TensorView<T> zeros(const Shape& s) const {
    fence::open o;
    return op::cpu::zeros<T>(s);
  }
  template <class L, class S, class C>
  TensorView<const L> as(const TensorView<S, C>& x, bool for_backward) const {
    fence::open o;
    return op::cpu::as<L>(x, for_backward);
  }
  template <fp8::operand R, class S, class C>
  auto cast_fp8(const TensorView<S, C>& x, fp8::gemm_scaling& g, fp8::scale_ref& scale, bool for_backward) const {
    fence::open o;
    return op::cpu::cast_fp8<R>(x, g, scale, for_backward);
  }
  template <class Acc = void, class G, class SA, class CA, class SB, class CB>
  void gemm(const TensorView<G>& c, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, bool add,
            const fp8::gemm_alpha& alpha = 1.0) const {
    fence::open o;
    op::cpu::gemm<Acc>(c, a, b, add, alpha);
  }
  template <class Acc, class O, class SA, class CA, class SB, class CB, class B>
  void gemm_bias(const TensorView<O>& y, const TensorView<SA, CA>& a, const TensorView<SB, CB>& b, const TensorView<const B>& bias,
                 const fp8::gemm_alpha& alpha = 1.0) const {
    fence::open o;
    op::cpu::gemm_bias<Acc>(y, a, b, bias, alpha);
  }
  template <class A, class Y, class F, class... X>
  void map_into(const char* op, const Y& y, F f, const X&... x) const {
    fence::open o;
    op::cpu::map_into<A>(op, y, f, x...);
  }
  template <class T>
  void sum_to_shape(const TensorView<T>& to, const TensorView<const T>& from) const {
    fence::open o;
    op::cpu::sum_to_shape(to, from);
  }
  template <class Acc, class S, class C>
  void sum_rows(const TensorView<Acc>& col, const TensorView<S, C>& g) const {
    fence::open o;
    op::cpu::sum_rows(col, g);
  }
  template <class S, class C, class D, class DC>
  void copy(const TensorView<S, C>& from, const TensorView<D, DC>& to) const {
    fence::open o;
    op::cpu::copy(from, to);
  }
  template <class A, class D, class S, class C>
  void add_into(const char* op, const TensorView<D>& to, const TensorView<S, C>& from) const {
    fence::open o;
    op::cpu::add_into<A>(op, to, from);
  }
  template <class A, class G, class F, class... V>
  void accumulate(const char* op, const TensorView<G>& gx, F f, const V&... args) const {
    fence::open o;
    op::cpu::accumulate<A>(op, gx, f, args...);
  }
  template <class T, class C>
  bool take_fresh(const TensorView<T, C>& v) const {
    fence::open o;
    return op::cpu::take_fresh(v);
  }
  void settle_fresh() const {
    fence::open o;
    op::cpu::settle_fresh();
  }
  void zero_bytes(void* p, std::size_t n) const {
    fence::open o;
    op::cpu::zero_bytes(p, n);
  }
  template <class Acc, op::reduction R, class X, class O>
  void reduce(const char* op, const TensorView<const X>& x, bool whole, int axis, const TensorView<O>& y) const {
    fence::open o;
    op::cpu::reduce<Acc, R>(op, x, whole, axis, y);
  }
  template <class Acc, bool Log, class X, class O>
  void softmax(const char* op, const TensorView<const X>& x, int axis, const TensorView<O>& y) const {
    fence::open o;
    op::cpu::softmax<Acc, Log>(op, x, axis, y);
  }
  template <class Acc, class R, class X, class G, class B, class O>
  void layer_norm_forward(const TensorView<const X>& x, const TensorView<const G>& gamma, const TensorView<const B>& beta, double eps,
                          Acc* stats, const TensorView<O>& y) const {
    fence::open o;
    op::cpu::layer_norm_forward<Acc, R>(x, gamma, beta, eps, stats, y);
  }
  template <class Acc, class R, class X, class GY, class G, class GX>
  void layer_norm_backward(const TensorView<const X>& x, const TensorView<const GY>& gy, const TensorView<const G>& gamma,
                           const Acc* stats, const TensorView<GX>& gx, const TensorView<Acc>& dgamma,
                           const TensorView<Acc>& dbeta) const {
    fence::open o;
    op::cpu::layer_norm_backward<Acc, R>(x, gy, gamma, stats, gx, dgamma, dbeta);
  }
  template <class Acc, class O, class X>
  void nll_forward(const TensorView<const X>& x, const std::int64_t* labels, const TensorView<O>& y) const {
    fence::open o;
    op::cpu::nll_forward<Acc>(x, labels, y);
  }
  template <class R, class G, class GX>
  void nll_backward(const TensorView<const G>& gy, const std::int64_t* labels, const TensorView<GX>& gx) const {
    fence::open o;
    op::cpu::nll_backward<R>(gy, labels, gx);
  }
  template <class A, class O, class F, class I>
  void map_indexed(const TensorView<O>& out, F f, const TensorView<const I>& in) const {
    fence::open o;
    op::cpu::map_indexed<A>(out, f, in);
  }
  template <class Acc, class G>
  void scatter_add_rows(const TensorView<const G>& gy, const std::int64_t* indices, index_t n, const TensorView<Acc>& acc) const {
    fence::open o;
    op::cpu::scatter_add_rows<Acc>(gy, indices, n, acc);
  }
  template <bool Max, class X, class O>
  void select(const TensorView<const X>& x, int axis, const TensorView<O>& y, std::int32_t* pos) const {
    fence::open o;
    op::cpu::select<Max>(x, axis, y, pos);
  }
  template <class G, class GX>
  void add_selected(const TensorView<const G>& gy, const std::int32_t* pos, int axis, const TensorView<GX>& g) const {
    fence::open o;
    op::cpu::add_selected(gy, pos, axis, g);
  }
  template <class Acc>
  void attention_probabilities(const TensorView<Acc>& s, Acc scale, bool causal) const {
    fence::open o;
    op::cpu::attention_probabilities(s, scale, causal);
  }
  template <class Acc>
  void attention_score_gradients(const TensorView<Acc>& ds, const TensorView<const Acc>& p, Acc scale) const {
    fence::open o;
    op::cpu::attention_score_gradients(ds, p, scale);
  }
  template <class Acc, bool Log, class G, class O>
  void softmax_sums(const TensorView<const G>& g, const TensorView<const O>& y, int axis, const TensorView<Acc>& s) const {
    fence::open o;
    op::cpu::softmax_sums<Acc, Log>(g, y, axis, s);
  }
  template <class L, class S>
  void im2col(const op::conv_detail::geometry& g, const S* x, index_t c0, index_t cs, index_t first, index_t count, L* col) const {
    fence::open o;
    op::cpu::im2col(g, x, c0, cs, first, count, col);
  }
  template <class Acc>
  void col2im(const op::conv_detail::geometry& g, const Acc* dcol, index_t c0, index_t cs, index_t first, index_t count, Acc* dx) const {
    fence::open o;
    op::cpu::col2im(g, dcol, c0, cs, first, count, dx);
  }
  template <class Acc, class B, class O>
  void conv_output(Acc* acc, const TensorView<const B>& bias, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count,
                   index_t p, O* y) const {
    fence::open o;
    op::cpu::conv_output(acc, bias, oc0, og, oc_all, n0, count, p, y);
  }
  template <class Acc, class GQ, class G>
  void conv_output_grads(const GQ* gq, const G* gy, index_t oc0, index_t og, index_t oc_all, index_t n0, index_t count, index_t p,
                         GQ* gm, Acc* gb) const {
    fence::open o;
    op::cpu::conv_output_grads(gq, gy, oc0, og, oc_all, n0, count, p, gm, gb);
  }
  template <class L, class B, class O>
  bool conv_direct(const op::conv_detail::geometry& g, index_t groups, index_t oc_all, const L* x, const L* w,
                   const TensorView<const B>& bias, float alpha, O* y) const {
    fence::open o;
    return op::cpu::conv_direct(g, groups, oc_all, x, w, bias, alpha, y);
  }
  template <class GQ, class L>
  void weight_grad_direct(const GQ* g, index_t gs, index_t og, const L* col, index_t k, index_t count, index_t p, float alpha,
                          float* gw, float* part, GQ* tail_g, L* tail_c) const {
    fence::open o;
    op::cpu::weight_grad_direct(g, gs, og, col, k, count, p, alpha, gw, part, tail_g, tail_c);
  }
  template <class L>
  void pad_planes(const op::conv_detail::geometry& g, const op::conv_detail::padded_layout& d, const L* x, index_t c0, index_t cs,
                  index_t first, index_t count, L* xp) const {
    fence::open o;
    op::cpu::pad_planes(g, d, x, c0, cs, first, count, xp);
  }
  template <class GQ>
  void pad_output_grads(const op::conv_detail::geometry& g, const op::conv_detail::padded_layout& d, const GQ* gq, index_t oc0,
                        index_t og, index_t oc_all, index_t first, index_t count, GQ* gp) const {
    fence::open o;
    op::cpu::pad_output_grads(g, d, gq, oc0, og, oc_all, first, count, gp);
  }
  template <class Acc>
  void col2im_padded(const op::conv_detail::geometry& g, const op::conv_detail::padded_layout& d, const Acc* dcol, index_t c0,
                     index_t cs, index_t first, index_t count, Acc* dxp, Acc* dx) const {
    fence::open o;
    op::cpu::col2im_padded(g, d, dcol, c0, cs, first, count, dxp, dx);
  }
  template <class GQ, class L>
  void weight_grad_taps(const op::conv_detail::geometry& g, const op::conv_detail::padded_layout& d, const GQ* gp, index_t og,
                        const L* xp, index_t cg, index_t count, float alpha, float* gw, float* part) const {
    fence::open o;
    op::cpu::weight_grad_taps(g, d, gp, og, xp, cg, count, alpha, gw, part);
  }
  template <class T>
  void fill_zero(const TensorView<T>& v) const {
    fence::open o;
    op::cpu::fill_zero(v);
  }
  template <class X, class O>
  void max_pool(const op::conv_detail::geometry& g, const TensorView<const X>& x, const TensorView<O>& y, std::int32_t* at) const {
    fence::open o;
    op::cpu::max_pool(g, x, y, at);
  }
  template <class R, class G, class GX>
  void max_pool_backward(const op::conv_detail::geometry& g, const TensorView<const G>& gy, const std::int32_t* at,
                         const TensorView<GX>& d) const {
    fence::open o;
    op::cpu::max_pool_backward<R>(g, gy, at, d);
  }
  template <class R, class X, class O>
  void avg_pool(const op::conv_detail::geometry& g, const TensorView<const X>& x, const TensorView<O>& y) const {
    fence::open o;
    op::cpu::avg_pool<R>(g, x, y);
  }
  template <class R, class G>
  void avg_pool_backward(const op::conv_detail::geometry& g, const TensorView<const G>& gy, const TensorView<R>& acc) const {
    fence::open o;
    op::cpu::avg_pool_backward(g, gy, acc);
  }
  template <class Acc, class X, class Gm, class Bt, class O>
  void batch_norm_forward(const TensorView<const X>& x, const TensorView<const Gm>& gamma, const TensorView<const Bt>& beta, bool training,
                          double momentum, double eps, double* running_mean, double* running_var, Acc* stats,
                          const TensorView<O>& y) const {
    fence::open o;
    op::cpu::batch_norm_forward<Acc>(x, gamma, beta, training, momentum, eps, running_mean, running_var, stats, y);
  }
  template <class Acc, class G, class X, class Gm>
  void batch_norm_backward(const TensorView<const G>& gy, const TensorView<const X>& x, const TensorView<const Gm>& gamma, const Acc* stats,
                           bool training, Acc* dx, Acc* dg, Acc* db) const {
    fence::open o;
    op::cpu::batch_norm_backward<Acc>(gy, x, gamma, stats, training, dx, dg, db);
  }
  const std::int64_t* labels(std::span<const std::int64_t> l, bool for_backward) const {
    fence::open o;
    return op::cpu::labels(l, for_backward);
  }
  template <class Acc, class O, class X>
  void cross_entropy_forward(const char* op, const TensorView<const X>& x, const std::int64_t* labels, Acc* lse, const TensorView<O>& y) const {
    fence::open o;
    op::cpu::cross_entropy_forward<Acc>(op, x, labels, lse, y);
  }
  template <class R, class G, class X, class Acc, class GX>
  void cross_entropy_backward(const char* op, const TensorView<const G>& gy, const TensorView<const X>& x, const std::int64_t* labels,
                              const Acc* lse, const TensorView<GX>& gx) const {
    fence::open o;
    op::cpu::cross_entropy_backward<R>(op, gy, x, labels, lse, gx);
  }
};

/// Fenced memory owned for the object's life (nn modules' parameters and gradients).
template <class T>
class fenced_tensor {
 public:
  explicit fenced_tensor(const Shape& s) : shape_(s), p_(static_cast<T*>(fence::allocate(bytes()))) {}
  fenced_tensor(fenced_tensor&& o) noexcept : shape_(o.shape_), p_(std::exchange(o.p_, nullptr)) {}
  fenced_tensor& operator=(fenced_tensor&&) = delete;
  ~fenced_tensor() {
    if (p_ != nullptr) fence::release(p_, bytes());
  }
  const Shape& shape() const { return shape_; }
  index_t size() const { return shape_.numel(); }
  T* data() { return p_; }
  const T* data() const { return p_; }
  TensorView<T> view() { return TensorView<T>(p_, shape_); }
  TensorView<const T> view() const { return TensorView<const T>(p_, shape_); }

 private:
  std::size_t bytes() const { return static_cast<std::size_t>(shape_.numel()) * sizeof(T); }
  Shape shape_;
  T* p_;
};

/// The backend: fenced arenas, fenced_cpu contexts, and the tape's own writes opened.
struct fenced_backend {
  using arena_type = Arena;
  static constexpr bool host_memory = false;

  static Arena make_arena(std::size_t bytes) { return Arena(bytes, fence::source); }
  template <class P>
  static fenced_cpu context(Arena& temp, Arena& keep, bool saving, fp8::scaling_state* f8) {
    return fenced_cpu(backend::host::context<P>(temp, keep, saving, f8));
  }
  static void zero_bytes(void* p, std::size_t n) {
    fence::open o;
    backend::host::zero_bytes(p, n);
  }
  template <class S>
  static void fill(S* p, std::size_t n, const S& v) {
    fence::open o;
    backend::host::fill(p, n, v);
  }
  template <class S, class C, class D>
  static void upload(const TensorView<S, C>& from, const TensorView<D>& to) {
    fence::open o;
    backend::host::upload(from, to);
  }
  template <class S>
  static S read(const S* p) {
    fence::open o;
    return backend::host::read(p);
  }
  template <class T>
  using tensor = fenced_tensor<T>;
  template <class S>
  static void download(const TensorView<const S>& from, const TensorView<S>& to) {
    fence::open o;
    backend::host::download(from, to);
  }
};

/// P on the fenced backend.
template <class P>
struct fenced : P {
  using backend = fenced_backend;
};

// ---- a model recorded on either backend --------------------------------------------------------

/// A parameter's value and gradient in a backend's memory (fenced or the host's).
template <class S, class G>
struct param {
  TensorView<S> value;
  TensorView<G> grad;
};

template <class T>
Tensor<T> host_copy(const TensorView<const T>& v) {
  fence::open o;  // harmless for host memory
  Tensor<T> t(v.shape());
  std::copy_n(v.data(), v.size(), t.data());
  return t;
}

/// The results of one step: the loss, every parameter's gradient, the input's gradient.
template <class G, class GX>
struct step_result {
  double loss = 0;
  std::vector<Tensor<G>> grads;
  Tensor<GX> input_grad;
  std::vector<std::int64_t> arg;  // argmax of a recorded value
  std::vector<double> values;     // a recorded (strided) value read through to_host
};

/// x [8, 12] -> linear 12x16 -> relu -> (+ shift [16], * gate [8, 16]) -> gelu -> where(cond,
/// masked_fill(h, mask [16], 0.25), relu(h)) -> matmul [16, 10]
/// -> cat with itself along the columns, transposed twice -> linear 20x10 -> cross_entropy, two
/// steps with a reset between (the second reuses the memory): the second seeded from the
/// backend's memory and its labels borrowed from there.
template <class P>
auto run_model(Arena& params) {
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  using X = typename P::activation_type;
  const std::vector<Shape> shapes{{16, 12}, {16}, {16}, {16, 10}, {10, 20}, {10}};
  std::vector<param<S, G>> ps;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Tensor<S> v(shapes[i]);
    fill_uniform(v, -0.5, 0.5, 11 + i);
    const auto n = static_cast<std::size_t>(shapes[i].numel());
    param<S, G> p{TensorView<S>(params.allocate_array<S>(n), shapes[i]), TensorView<G>(params.allocate_array<G>(n), shapes[i])};
    backend_t<P>::upload(v.view().as_const(), p.value);
    backend_t<P>::zero_bytes(p.grad.data(), n * sizeof(G));
    ps.push_back(p);
  }
  Tensor<X> x(Shape{8, 12}), gate(Shape{8, 16});
  fill_uniform(x, -1.0, 1.0, 3);
  fill_uniform(gate, 0.5, 1.5, 4);
  Tensor<X> cond(Shape{8, 16}), mask(Shape{16});  // 0/1 patterns
  for (index_t i = 0; i < cond.size(); ++i) cond.data()[i] = X((i * 7) % 3 == 0 ? 1.0f : 0.0f);
  for (index_t i = 0; i < mask.size(); ++i) mask.data()[i] = X(i % 4 == 1 ? 1.0f : 0.0f);
  const std::vector<std::int64_t> labels{0, 3, 9, 2, 2, 7, 5, 1};
  // the same labels in the backend's memory, borrowed on the second step
  auto* kept = params.allocate_array<std::int64_t>(labels.size());
  {
    fence::open o;
    std::copy(labels.begin(), labels.end(), kept);
  }
  const borrowed_labels on_backend{std::span<const std::int64_t>(kept, labels.size())};

  using GX = grad_storage_t<P, X>;
  step_result<G, GX> r;
  Tape<P> tape;
  for (int step = 0; step < 2; ++step) {
    tape.reset();
    auto xv = tape.input(x, true);
    auto w1 = tape.param(ps[0].value, ps[0].grad);
    auto b1 = tape.param(ps[1].value, ps[1].grad);
    auto shift = tape.param(ps[2].value, ps[2].grad);
    auto w2 = tape.param(ps[3].value, ps[3].grad);
    auto w3 = tape.param(ps[4].value, ps[4].grad);
    auto b3 = tape.param(ps[5].value, ps[5].grad);
    auto h = relu(linear(xv, w1, b1));
    h = gelu((h + shift) * tape.input(gate));
    h = where(tape.input(cond), masked_fill(h, tape.input(mask), 0.25), relu(h));
    auto z = matmul(h, w2);
    auto zz = transpose(transpose(cat(1, {z, z})));
    auto logits = linear(zz, w3, b3);
    auto loss = step == 0 ? cross_entropy(logits, labels) : cross_entropy(logits, on_backend);
    if (step == 0) {
      tape.backward(loss, 8.0);
      r.loss = loss.item();
    } else {
      auto seed = tape.template full<typename decltype(loss)::grad_type>(Shape{}, 4.0);  // in the backend's memory
      tape.backward(loss, seed.value());
      r.input_grad = host_copy(xv.grad());
    }
  }
  for (const auto& p : ps) r.grads.push_back(host_copy(p.grad.as_const()));
  return r;
}

template <class T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(T)) == 0;
}

template <class P>
void expect_fenced_matches_host() {
  fence::handler h;
  Arena host_params, fenced_params(0, fence::source);
  const auto on_host = run_model<P>(host_params);
  const long before = fence::openings;
  const auto fenced_run = run_model<fenced<P>>(fenced_params);
  EXPECT_GT(fence::openings - before, 50) << "the fenced backend was barely used";
  EXPECT_EQ(fenced_run.loss, on_host.loss);
  ASSERT_EQ(fenced_run.grads.size(), on_host.grads.size());
  for (std::size_t i = 0; i < on_host.grads.size(); ++i) EXPECT_TRUE(same_bits(fenced_run.grads[i], on_host.grads[i])) << "parameter " << i;
  EXPECT_TRUE(same_bits(fenced_run.input_grad, on_host.input_grad));
  EXPECT_TRUE(std::isfinite(on_host.loss));
}

}  // namespace

TEST(Backend, TheTapeAndContextOnlyOpsTouchBackendMemoryOnlyThroughTheBackend32True) {
  expect_fenced_matches_host<pol::named<"32-true">>();
}
TEST(Backend, TheTapeAndContextOnlyOpsTouchBackendMemoryOnlyThroughTheBackendBf16Mixed) {
  expect_fenced_matches_host<pol::named<"bf16-mixed">>();
}
TEST(Backend, TheTapeAndContextOnlyOpsTouchBackendMemoryOnlyThroughTheBackend16Mixed) {
  expect_fenced_matches_host<pol::named<"16-mixed">>();
}
TEST(Backend, TheTapeAndContextOnlyOpsTouchBackendMemoryOnlyThroughTheBackend64True) {
  expect_fenced_matches_host<pol::named<"64-true">>();
}

// The fence itself: memory of a fenced arena faults when touched outside the backend (so the
// tests above would catch a stray access).
TEST(Backend, FencedMemoryFaultsWhenTouchedOutsideTheBackend) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the binary has OpenMP threads
  EXPECT_EXIT(
      {
        fence::handler h;
        Arena a(0, fence::source);
        float* p = a.allocate_array<float>(4);
        *static_cast<volatile float*>(p) = 1.0f;
      },
      ::testing::ExitedWithCode(3), "backend memory touched outside the backend");
}

// Borrowed labels are counted, not checked, on the host: one outside [0, classes) gives a NaN
// loss and NaN gradients in its row only (the device backend's behaviour, on the host too).
TEST(Backend, BorrowedLabelsAreCountedAndAnOutOfRangeOneGivesNaNInItsRow) {
  using P = pol::named<"32-true">;
  Tape<P> tape;
  Tensor<float> x(Shape{3, 4});
  fill_uniform(x, -1.0, 1.0, 5);
  const std::vector<std::int64_t> bad{1, 7, 2};
  auto xv = tape.input(x, true);
  auto loss = cross_entropy(xv, borrowed_labels{bad});
  EXPECT_TRUE(std::isnan(loss.item()));
  tape.backward(loss);
  const auto g = xv.grad();
  for (index_t j = 0; j < 4; ++j) {
    EXPECT_TRUE(std::isnan(g(1, j)));
    EXPECT_TRUE(std::isfinite(g(0, j)) && std::isfinite(g(2, j)));  // the other rows: their softmax
  }
  const std::vector<std::int64_t> two{1, 2};
  try {
    (void)cross_entropy(xv, borrowed_labels{two});
    ADD_FAILURE() << "two labels for three rows did not throw";
  } catch (const shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("precis::cross_entropy: logits [3, 4] and 2 borrowed labels"), std::string::npos) << e.what();
  }
}

// ---- the reductions, softmax, layer_norm, attention and mse on a backend --------------------------

namespace {

/// x [6, 10] (an input with a gradient) -> h = matmul(x, w [10, 10]) -> softmax along rows (of
/// h and, strided, of its transpose), log_softmax along columns, logsumexp, norm, sum and mean
/// over an axis and over everything, layer_norm (gamma, beta [10]), mse against a target, causal
/// attention of h as [2, 3, 10] with itself, nll of the log_softmax, max along rows and min
/// along columns (of a transposed view), dropout, an embedding of w's rows (one repeated):
/// their sum, differentiated with seed 2.
template <class P>
auto run_reductions(Arena& params) {
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  using X = typename P::activation_type;
  using GX = grad_storage_t<P, X>;
  const std::vector<Shape> shapes{{10, 10}, {10}, {10}};
  std::vector<param<S, G>> ps;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Tensor<S> v(shapes[i]);
    fill_uniform(v, i == 1 ? 0.5 : -0.5, i == 1 ? 1.5 : 0.5, 31 + i);
    const auto n = static_cast<std::size_t>(shapes[i].numel());
    param<S, G> p{TensorView<S>(params.allocate_array<S>(n), shapes[i]), TensorView<G>(params.allocate_array<G>(n), shapes[i])};
    backend_t<P>::upload(v.view().as_const(), p.value);
    backend_t<P>::zero_bytes(p.grad.data(), n * sizeof(G));
    ps.push_back(p);
  }
  Tensor<X> x(Shape{6, 10}), target(Shape{6, 10});
  fill_uniform(x, -1.0, 1.0, 34);
  fill_uniform(target, 0.0, 0.2, 35);

  step_result<G, GX> r;
  Tape<P> tape;
  auto xv = tape.input(x, true);
  auto w0 = tape.param(ps[0].value, ps[0].grad);
  auto h = matmul(xv, w0);
  auto a = softmax(h, 1);
  auto at = softmax(transpose(h), 0);
  auto lp = log_softmax(h, 0);
  auto ln = layer_norm(h, tape.param(ps[1].value, ps[1].grad), tape.param(ps[2].value, ps[2].grad));
  auto hq = reshape(h, Shape{2, 3, 10});
  auto loss = mse(a, tape.input(target)) + mean(lp) + mean(logsumexp(h, 1)) + sum(norm(h, 1)) + sum(mean(h, 0)) +
              sum(sum(at, 1)) + norm(lp) + mse(ln, tape.input(target)) +
              sum(attention(hq, hq, hq, attention_options{.causal = true})) + nll(lp, std::vector<std::int64_t>{1, 0, 9, 4, 4, 7}) +
              sum(max(h, 1)) + sum(min(transpose(h), 1)) + sum(dropout(h, dropout_options{.p = 0.3, .seed = 7, .offset = 2})) +
              sum(mul(embedding(w0, std::vector<std::int64_t>{3, 1, 3, 8}, Shape{2, 2}), tape.input(target.view().slice(0, 0, 4).reshape(Shape{2, 2, 10}))));
  tape.backward(loss, 2.0);
  r.loss = loss.item();
  r.arg = argmax(h, 1);
  const auto ht = to_host(transpose(h));
  for (index_t i = 0; i < 10; ++i) {
    for (index_t j = 0; j < 6; ++j) r.values.push_back(static_cast<double>(ht(i, j)));
  }
  for (const auto& p : ps) r.grads.push_back(host_copy(p.grad.as_const()));
  r.input_grad = host_copy(xv.grad());
  return r;
}

template <class P>
void expect_fenced_reductions_match_host() {
  fence::handler h;
  Arena host_params, fenced_params(0, fence::source);
  const auto on_host = run_reductions<P>(host_params);
  const long before = fence::openings;
  const auto fenced_run = run_reductions<fenced<P>>(fenced_params);
  EXPECT_GT(fence::openings - before, 20) << "the fenced backend was barely used";
  EXPECT_EQ(fenced_run.loss, on_host.loss);
  ASSERT_EQ(fenced_run.grads.size(), on_host.grads.size());
  for (std::size_t i = 0; i < on_host.grads.size(); ++i) EXPECT_TRUE(same_bits(fenced_run.grads[i], on_host.grads[i])) << "parameter " << i;
  EXPECT_TRUE(same_bits(fenced_run.input_grad, on_host.input_grad));
  EXPECT_TRUE(std::isfinite(on_host.loss));
  EXPECT_EQ(fenced_run.arg, on_host.arg);  // argmax and to_host read through the backend
  EXPECT_EQ(fenced_run.values, on_host.values);
  EXPECT_EQ(on_host.arg.size(), 6u);
}

}  // namespace

TEST(Backend, ReductionsNormsAttentionAndLossesTouchBackendMemoryOnlyThroughTheBackend32True) {
  expect_fenced_reductions_match_host<pol::named<"32-true">>();
}
TEST(Backend, ReductionsNormsAttentionAndLossesTouchBackendMemoryOnlyThroughTheBackendBf16Mixed) {
  expect_fenced_reductions_match_host<pol::named<"bf16-mixed">>();
}
TEST(Backend, ReductionsNormsAttentionAndLossesTouchBackendMemoryOnlyThroughTheBackend16Mixed) {
  expect_fenced_reductions_match_host<pol::named<"16-mixed">>();
}
TEST(Backend, ReductionsNormsAttentionAndLossesTouchBackendMemoryOnlyThroughTheBackend64True) {
  expect_fenced_reductions_match_host<pol::named<"64-true">>();
}

// ---- convolution, pooling, batch norm and bmm ------------------------------------------------------

namespace {

/// x [3, 2, 9, 9] (an input with a gradient) -> conv2d 3x3 pad 1 with bias -> batch_norm in
/// training (running estimates in the backend's memory) -> relu -> a 2 x 2 max pool, a padded
/// 3 x 3 stride-2 max pool and avg pool -> a grouped strided conv of the pools' sum, a dilated
/// conv of the 2 x 2 pool, bmm of the latter with a [16, 5] weight, batch_norm in evaluation
/// of the grouped conv: their sum, differentiated with seed 2; then a step in evaluation mode.
template <class P>
auto run_convolutions(Arena& params) {
  using S = typename P::param_type;
  using G = grad_storage_t<P, S>;
  using X = typename P::activation_type;
  using GX = grad_storage_t<P, X>;
  const std::vector<Shape> shapes{{6, 2, 3, 3}, {6}, {6}, {6}, {4, 3, 3, 3}, {4, 6, 3, 3}, {16, 5}, {4}, {4}};
  std::vector<param<S, G>> ps;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Tensor<S> v(shapes[i]);
    fill_uniform(v, i == 2 || i == 7 ? 0.5 : -0.5, i == 2 || i == 7 ? 1.5 : 0.5, 51 + i);
    const auto n = static_cast<std::size_t>(shapes[i].numel());
    param<S, G> p{TensorView<S>(params.allocate_array<S>(n), shapes[i]), TensorView<G>(params.allocate_array<G>(n), shapes[i])};
    backend_t<P>::upload(v.view().as_const(), p.value);
    backend_t<P>::zero_bytes(p.grad.data(), n * sizeof(G));
    ps.push_back(p);
  }
  // running estimates: [6] for the training norm (zeros and ones), [4] for the evaluation one
  Tensor<double> stats0(Shape{6}), stats1(Shape{6}), eval_mean(Shape{4}), eval_var(Shape{4});
  std::fill_n(stats1.data(), 6, 1.0);
  fill_uniform(eval_mean, -0.2, 0.2, 61);
  fill_uniform(eval_var, 0.5, 2.0, 62);
  const auto in_backend = [&](const Tensor<double>& t) {
    TensorView<double> v(params.allocate_array<double>(static_cast<std::size_t>(t.size())), t.shape());
    backend_t<P>::upload(t.view().as_const(), v);
    return v;
  };
  const auto rm = in_backend(stats0), rv = in_backend(stats1), em = in_backend(eval_mean), ev = in_backend(eval_var);
  Tensor<X> x(Shape{3, 2, 9, 9});
  fill_uniform(x, -1.0, 1.0, 63);

  step_result<G, GX> r;
  Tape<P> tape;
  for (int step = 0; step < 2; ++step) {
    const bool training = step == 0;
    tape.reset();
    auto xv = tape.input(x, true);
    auto pv = [&](std::size_t i) { return tape.param(ps[i].value, ps[i].grad); };
    auto c = conv2d(xv, pv(0), pv(1), conv2d_options{.padding = {1, 1}});
    auto h = relu(batch_norm(c, pv(2), pv(3), {training, 0.1, 1e-5, rm.data(), rv.data()}));
    auto p1 = max_pool2d(h);
    auto p2 = max_pool2d(h, pool2d_options{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    auto p3 = avg_pool2d(h, pool2d_options{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    auto q = conv2d(p2 + p3, pv(4), conv2d_options{.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
    auto d = conv2d(p1, pv(5), conv2d_options{.padding = {2, 2}, .dilation = {2, 2}});
    auto bm = bmm(reshape(d, Shape{3, 4, 16}), pv(6));
    auto qe = batch_norm(q, pv(7), pv(8), {false, 0.1, 1e-5, em.data(), ev.data()});
    auto loss = sum(mul(q, q)) + mean(mul(bm, bm)) + sum(p1) + sum(qe);
    tape.backward(loss, 2.0);
    if (training) {
      r.loss = loss.item();
      r.input_grad = host_copy(xv.grad());
    } else {
      r.values.push_back(loss.item());
    }
  }
  for (const auto& p : ps) r.grads.push_back(host_copy(p.grad.as_const()));
  const auto rmh = host_copy(rm.as_const()), rvh = host_copy(rv.as_const());
  r.values.insert(r.values.end(), rmh.data(), rmh.data() + rmh.size());
  r.values.insert(r.values.end(), rvh.data(), rvh.data() + rvh.size());
  return r;
}

template <class P>
void expect_fenced_convolutions_match_host() {
  fence::handler h;
  Arena host_params, fenced_params(0, fence::source);
  const auto on_host = run_convolutions<P>(host_params);
  const long before = fence::openings;
  const auto fenced_run = run_convolutions<fenced<P>>(fenced_params);
  EXPECT_GT(fence::openings - before, 40) << "the fenced backend was barely used";
  EXPECT_EQ(fenced_run.loss, on_host.loss);
  ASSERT_EQ(fenced_run.grads.size(), on_host.grads.size());
  for (std::size_t i = 0; i < on_host.grads.size(); ++i) EXPECT_TRUE(same_bits(fenced_run.grads[i], on_host.grads[i])) << "parameter " << i;
  EXPECT_TRUE(same_bits(fenced_run.input_grad, on_host.input_grad));
  EXPECT_EQ(fenced_run.values, on_host.values);  // the evaluation step's loss, the running estimates
  EXPECT_TRUE(std::isfinite(on_host.loss));
  ASSERT_EQ(on_host.values.size(), 13u);
  EXPECT_NE(on_host.values[1], 0.0);  // the running mean moved
}

}  // namespace

TEST(Backend, ConvolutionPoolingBatchNormAndBmmTouchBackendMemoryOnlyThroughTheBackend32True) {
  expect_fenced_convolutions_match_host<pol::named<"32-true">>();
}
TEST(Backend, ConvolutionPoolingBatchNormAndBmmTouchBackendMemoryOnlyThroughTheBackendBf16Mixed) {
  expect_fenced_convolutions_match_host<pol::named<"bf16-mixed">>();
}
TEST(Backend, ConvolutionPoolingBatchNormAndBmmTouchBackendMemoryOnlyThroughTheBackend16Mixed) {
  expect_fenced_convolutions_match_host<pol::named<"16-mixed">>();
}
TEST(Backend, ConvolutionPoolingBatchNormAndBmmTouchBackendMemoryOnlyThroughTheBackend64True) {
  expect_fenced_convolutions_match_host<pol::named<"64-true">>();
}

// ---- nn modules on a backend ---------------------------------------------------------------------

namespace {

/// Every parameter of two modules of the same layout: names equal, values (and gradients when
/// `grads`) the same bits.
template <class A, class B>
void expect_same_parameters(A& a, B& b, bool grads) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(same_bits(pa[i].second->value_on_host(), pb[i].second->value_on_host())) << pa[i].first;
    if (grads) {
      EXPECT_TRUE(same_bits(pa[i].second->grad_on_host(), pb[i].second->grad_on_host())) << pa[i].first << " gradient";
    }
  }
}

/// nn modules on the fenced backend: parameters in its memory, initialized on the host from the
/// same seeds (the host backend's bits), an MLP's training step recorded and differentiated
/// there, and zero_grad through the backend.
template <class P>
void expect_fenced_modules_match_host() {
  using F = fenced<P>;
  using X = typename P::activation_type;
  fence::handler h;
  nn::MLP<P> on_host({12, 16, 8, 4}, nn::activation::relu, 5);
  nn::MLP<F> on_fence({12, 16, 8, 4}, nn::activation::relu, 5);
  static_assert(std::is_same_v<typename nn::Module<F>::parameter::backend_type, fenced_backend>);
  expect_same_parameters(on_host, on_fence, true);

  Tensor<X> x(Shape{6, 12});
  fill_uniform(x, -1.0, 1.0, 9);
  const std::vector<std::int64_t> labels{0, 3, 1, 2, 2, 3};
  Tape<P> host_tape;
  Tape<F> fenced_tape;
  const long before = fence::openings;
  double host_loss = 0, fenced_loss = 0;
  for (int step = 0; step < 2; ++step) {  // gradients accumulate over the two
    host_tape.reset();
    fenced_tape.reset();
    auto lh = cross_entropy(on_host(host_tape.input(x)), labels);
    auto lf = cross_entropy(on_fence(fenced_tape.input(x)), labels);
    host_tape.backward(lh);
    fenced_tape.backward(lf);
    host_loss = lh.item();
    fenced_loss = lf.item();
  }
  EXPECT_GT(fence::openings - before, 20) << "the fenced backend was barely used";
  EXPECT_EQ(fenced_loss, host_loss);
  expect_same_parameters(on_host, on_fence, true);
  const auto g0 = on_fence.layer(0).weight().grad_on_host();
  EXPECT_TRUE(std::any_of(g0.data(), g0.data() + g0.size(), [](auto v) { return static_cast<double>(v) != 0; }));

  on_fence.zero_grad();
  for (auto* p : on_fence.parameters()) {
    const auto g = p->grad_on_host();
    EXPECT_TRUE(std::all_of(g.data(), g.data() + g.size(), [](auto v) { return static_cast<double>(v) == 0; })) << p->name;
  }
  EXPECT_EQ(on_fence.parameter_count(), on_host.parameter_count());
}

}  // namespace

TEST(Backend, NnModulesKeepTheirParametersInTheBackendsMemory32True) {
  expect_fenced_modules_match_host<pol::named<"32-true">>();
}
TEST(Backend, NnModulesKeepTheirParametersInTheBackendsMemoryBf16Mixed) {
  expect_fenced_modules_match_host<pol::named<"bf16-mixed">>();
}

// Every layer's initialization (Kaiming and Xavier weights, zero biases, LayerNorm's and
// BatchNorm's ones, the embedding table) gives the same bits on a backend whose memory the host
// cannot touch as on the host.
TEST(Backend, EveryLayerIsInitializedWithTheHostsBitsOnAnotherBackend) {
  using P = pol::named<"bf16-mixed">;
  using F = fenced<P>;
  fence::handler h;
  {
    nn::TransformerBlock<P> a(16, 4, 2, 3);
    nn::TransformerBlock<F> b(16, 4, 2, 3);
    expect_same_parameters(a, b, true);
  }
  {
    nn::Conv2d<P> a(4, 8, {3, 3}, conv2d_options{.padding = {1, 1}}, 7);
    nn::Conv2d<F> b(4, 8, {3, 3}, conv2d_options{.padding = {1, 1}}, 7);
    expect_same_parameters(a, b, true);
  }
  {
    nn::BatchNorm2d<P> a(6);
    nn::BatchNorm2d<F> b(6);
    expect_same_parameters(a, b, true);
  }
  {
    nn::Embedding<P> a(10, 8, 11);
    nn::Embedding<F> b(10, 8, 11);
    expect_same_parameters(a, b, true);
  }
  {
    nn::Linear<P> a(5, 3, 2, false, nn::init::xavier_uniform);
    nn::Linear<F> b(5, 3, 2, false, nn::init::xavier_uniform);
    expect_same_parameters(a, b, true);
  }
}

// A pre-LN transformer block (layer norms, multi-head attention, linear layers, tanh GELU,
// reshapes and permutes, residual adds) trains on a backend whose memory the host cannot touch
// with the host's bits: every op it records is context_only.
TEST(Backend, ATransformerBlockTrainsOnTheBackendWithTheHostsBits) {
  using P = pol::named<"bf16-mixed">;
  using F = fenced<P>;
  using X = typename P::activation_type;
  fence::handler h;
  nn::TransformerBlock<P> on_host(16, 4, 2, 3);
  nn::TransformerBlock<F> on_fence(16, 4, 2, 3);
  Tensor<X> x(Shape{2, 5, 16}), target(Shape{2, 5, 16});
  fill_uniform(x, -1.0, 1.0, 41);
  fill_uniform(target, -0.5, 0.5, 42);
  Tape<P> ht;
  Tape<F> ft;
  auto lh = mse(on_host(ht.input(x), true), ht.input(target));
  auto lf = mse(on_fence(ft.input(x), true), ft.input(target));
  ht.backward(lh);
  ft.backward(lf);
  EXPECT_EQ(lf.item(), lh.item());
  expect_same_parameters(on_host, on_fence, true);
}

// The demo's CNN layers (Conv2d, BatchNorm2d, max pooling, Linear) train on a backend whose
// memory the host cannot touch with the host's bits, BatchNorm2d's running estimates included
// (they live in the backend's memory), in training and in evaluation mode.
TEST(Backend, AConvolutionalNetworkTrainsOnTheBackendWithTheHostsBits) {
  using P = pol::named<"bf16-mixed">;
  using F = fenced<P>;
  using X = typename P::activation_type;
  fence::handler h;
  const conv2d_options same{.padding = {1, 1}};
  nn::Conv2d<P> ch(1, 4, {3, 3}, same, 5);
  nn::Conv2d<F> cf(1, 4, {3, 3}, same, 5);
  nn::BatchNorm2d<P> bh(4);
  nn::BatchNorm2d<F> bf(4);
  nn::Linear<P> lh(4 * 3 * 3, 3, 6);
  nn::Linear<F> lf(4 * 3 * 3, 3, 6);
  Tensor<X> x(Shape{5, 1, 6, 6});
  fill_uniform(x, -1.0, 1.0, 71);
  const std::vector<std::int64_t> labels{0, 2, 1, 1, 0};
  const auto net = [&](auto& c, auto& b, auto& l, auto& tape) {
    return cross_entropy(l(reshape(relu(max_pool2d(b(c(tape.input(x))))), Shape{5, 36})), labels);
  };
  for (const bool training : {true, false}) {
    bh.train(training);
    bf.train(training);
    Tape<P> ht;
    Tape<F> ft;
    auto losh = net(ch, bh, lh, ht);
    auto losf = net(cf, bf, lf, ft);
    ht.backward(losh);
    ft.backward(losf);
    EXPECT_EQ(losf.item(), losh.item()) << (training ? "training" : "evaluation");
  }
  expect_same_parameters(ch, cf, true);
  expect_same_parameters(bh, bf, true);
  expect_same_parameters(lh, lf, true);
  EXPECT_EQ(bf.running_mean(), bh.running_mean());
  EXPECT_EQ(bf.running_var(), bh.running_var());
  EXPECT_NE(bh.running_mean()[0], 0.0);
}

// The device's convolution and pooling kernels work one input element at a time: col2im gathers
// each element's taps (conv_detail::tap_source) and pooling's backward the windows covering it
// (conv_detail::covering). Over every small geometry, those maps name exactly the outputs that
// the host's sweeps (every output's window, every tap) reach the element from; and col2im as a
// gather, taps in kernel order, gives the host's scatter its bits.
TEST(Backend, TheDevicesPerElementWindowMapsMatchTheHostsSweeps) {
  using op::conv_detail::covering;
  using op::conv_detail::tap_source;
  int checked = 0;
  for (index_t in = 1; in <= 9; ++in)
    for (index_t k = 1; k <= 4; ++k)
      for (index_t s = 1; s <= 3; ++s)
        for (index_t d = 1; d <= 2; ++d)
          for (index_t p = 0; p <= 2; ++p) {
            const index_t out = op::conv_detail::out_extent(in, k, s, p, d);
            if (out <= 0) continue;
            for (index_t i = 0; i < in; ++i) {
              for (index_t t = 0; t < k; ++t) {  // the output whose tap t reads i
                index_t expect = -1;
                for (index_t o = 0; o < out; ++o) {
                  if (o * s - p + t * d == i) expect = o;
                }
                ASSERT_EQ(tap_source(i, t, s, p, d, out), expect) << "in " << in << " k " << k << " s " << s << " d " << d << " p " << p;
              }
              if (d == 1) {  // pooling: the windows covering i form one run
                index_t lo = out, hi = -1;
                for (index_t o = 0; o < out; ++o) {
                  if (o * s - p <= i && i < o * s - p + k) lo = std::min(lo, o), hi = std::max(hi, o);
                }
                const auto c = covering(i, k, s, p, out);
                if (hi < 0) {
                  ASSERT_GT(c.lo, c.hi) << "in " << in << " k " << k << " s " << s << " p " << p << " i " << i;
                } else {
                  ASSERT_EQ(c.lo, lo) << "in " << in << " k " << k << " s " << s << " p " << p << " i " << i;
                  ASSERT_EQ(c.hi, hi) << "in " << in << " k " << k << " s " << s << " p " << p << " i " << i;
                }
              }
              ++checked;
            }
          }
  EXPECT_GT(checked, 1000);

  // col2im of random column gradients: the host's scatter and a gather by tap_source
  const op::conv_detail::geometry g{2, 3, 7, 6, 3, 2, op::conv_detail::out_extent(7, 3, 2, 1, 2),
                                    op::conv_detail::out_extent(6, 2, 1, 1, 1), {2, 1}, {1, 1}, {2, 1}};
  const index_t cols = g.n * g.plane(), k = g.c * g.kh * g.kw;
  Tensor<float> dcol(Shape{k, cols});
  fill_uniform(dcol, -1.0, 1.0, 81);
  Tensor<float> scattered(Shape{g.n, g.c, g.h, g.w}), gathered(Shape{g.n, g.c, g.h, g.w});
  fill_uniform(scattered, -1.0, 1.0, 82);
  std::copy_n(scattered.data(), scattered.size(), gathered.data());
  op::conv_detail::col2im(g, dcol.data(), 0, g.c, 0, g.n, scattered.data());
  for (index_t b = 0; b < g.n; ++b)
    for (index_t c = 0; c < g.c; ++c)
      for (index_t ih = 0; ih < g.h; ++ih)
        for (index_t iw = 0; iw < g.w; ++iw) {
          float& v = gathered.data()[((b * g.c + c) * g.h + ih) * g.w + iw];
          for (index_t i = 0; i < g.kh; ++i) {
            const index_t oh = tap_source(ih, i, g.stride[0], g.pad[0], g.dil[0], g.ho);
            if (oh < 0) continue;
            for (index_t j = 0; j < g.kw; ++j) {
              const index_t ow = tap_source(iw, j, g.stride[1], g.pad[1], g.dil[1], g.wo);
              if (ow >= 0) v += dcol.data()[((c * g.kh + i) * g.kw + j) * cols + b * g.plane() + oh * g.wo + ow];
            }
          }
        }
  EXPECT_TRUE(same_bits(gathered, scattered));
}
