// precis::Tape<Policy>: a reverse-mode tape over tensors. Ops on Var handles (precis/ops/)
// compute their value in the types the policy gives (policy::op_types), store it in the arena
// in its output storage type, and append one node: a backward function pointer and the op's
// typed state (attributes, operand ids, saved values). backward() walks the nodes in reverse.
//
//   precis::Tape<precis::policy::named<"bf16-mixed">> tape;
//   auto w = tape.param(W.value, W.grad);         // gradients accumulate into W.grad
//   auto x = tape.input(batch);                   // copied into the arena
//   auto loss = cross_entropy(matmul(x, w), labels);
//   tape.backward(loss, /*seed = loss scale*/ 1024);
//   tape.reset();                                 // next step: same memory, no allocation
//
// Memory: values, gradients and saved tensors live in the backend's arena (backend_t<P>: host
// memory by default, precis/ops/cpu.hpp), which reset() rewinds; the ops' recorded state in a
// host arena beside it; nodes and slots in vectors whose capacity survives reset(). A step of
// the same shapes as an earlier one allocates nothing. A Tape must outlive the Vars it hands
// out. The tape itself touches value and gradient memory only through its backend, so on a
// backend whose memory the host cannot read (a GPU's) the same code records and differentiates.
#pragma once

#include "precis/config.hpp"

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
#include <string>
#include <type_traits>
#include <vector>

#include "precis/autodiff/arena.hpp"
#include "precis/error.hpp"
#include "precis/ops/cpu.hpp"
#include "precis/policy/policies.hpp"
#include "precis/tensor/all.hpp"

namespace precis {

/// Misuse of a tape: backward twice, a Var from a reset step or another tape, a loss that
/// does not depend on anything that requires a gradient.
class autodiff_error : public error {
 public:
  using error::error;
};

template <class P>
class Tape;

namespace detail {
struct no_fp8_state {};
/// The fp8 scaling state of a Tape<P>: none without an fp8 recipe; the backend's own when it
/// keeps the scales itself (B::fp8_state, built from the recipe and the backend: a device's
/// scales live in device memory); fp8::scaling_state otherwise.
template <class P, class B = backend_t<P>>
struct fp8_state_of {
  using type = no_fp8_state;
};
template <class P, class B>
  requires policy::fp8_policy<P>
struct fp8_state_of<P, B> {
  using type = fp8::scaling_state;
};
template <class P, class B>
  requires policy::fp8_policy<P> && requires { typename B::fp8_state; }
struct fp8_state_of<P, B> {
  using type = typename B::fp8_state;
};
template <class P>
using fp8_state_t = typename fp8_state_of<P>::type;
template <class P, class B>
fp8_state_t<P> make_fp8_state([[maybe_unused]] const B& backend) {
  if constexpr (!policy::fp8_policy<P>) return {};
  else if constexpr (requires { typename B::fp8_state; }) return fp8_state_t<P>(fp8::recipe(typename P::fp8_recipe{}), backend);
  else return fp8_state_t<P>(fp8::recipe(typename P::fp8_recipe{}));
}

}  // namespace detail

/// A precision policy (policy::true_, mixed, fp8_mixed, strict, or a user's own): what a tape
/// and its values are parameterized on. Var<P, S> with anything else is not a type, so the
/// tape's op overloads drop out of overload sets of tensor functions called with explicit
/// template arguments (sum<float, float>(x)).
template <class P>
concept precision_policy = requires {
  typename P::param_type;
  typename P::activation_type;
  typename P::grad_type;
};

/// Storage of the gradient of a value stored as S under policy P: the policy's gradient type
/// for activation-typed values, S itself otherwise.
template <class P, class S>
using grad_storage_t =
    std::conditional_t<std::is_same_v<S, typename P::activation_type>, typename P::grad_type, S>;

/// A handle to a value recorded on a Tape<P>, stored as S. Cheap to copy (a pointer and two
/// integers); valid until the tape's next reset().
template <class P, class S>
  requires precision_policy<P>
class Var {
  static_assert(!(P::is_strict && fp8::is_fp8<S>),
                "precis::policy::strict: a value stored in an fp8 format without a scale. Under a strict policy fp8 "
                "appears only as the scaled GEMM operands of fp8_mixed (matmul, linear, conv2d); keep parameters, "
                "inputs and activations in bf16 or wider.");

 public:
  using policy_type = P;
  using storage_type = S;
  using grad_type = grad_storage_t<P, S>;

  Var() = default;

  Tape<P>& tape() const {
    check("precis::Var::tape");
    return *tape_;
  }
  std::uint32_t id() const noexcept { return id_; }
  const Shape& shape() const { return tape().slot(id_).shape; }
  index_t size() const { return shape().numel(); }
  bool requires_grad() const { return tape().slot(id_).requires_grad; }
  /// The value (valid until reset()).
  TensorView<const S> value() const { return tape().template value_view<S>(id_); }
  /// The gradient accumulated by backward(); throws if none has reached this Var.
  TensorView<const grad_type> grad() const {
    const auto& s = tape().slot(id_);
    if (s.grad == nullptr) {
      throw autodiff_error("precis::Var::grad: no gradient has reached this value of shape " + s.shape.str() +
                           (s.requires_grad ? "; call backward() on a loss that depends on it"
                                            : "; it does not require a gradient (an input, a constant, a "
                                              "detached value or one recorded under no_grad)"));
    }
    return TensorView<const grad_type>(static_cast<const grad_type*>(s.grad), s.shape);
  }
  /// The value of a one-element Var as a double.
  double item() const {
    const auto v = value();
    if (v.size() != 1) {
      throw shape_error("precis::Var::item: value of shape " + v.shape().str() + " has " + std::to_string(v.size()) +
                        " elements; expected exactly one");
    }
    return static_cast<double>(detail::load<double>(detail::load<default_compute_t<S>>(tape().backend().read(v.data()))));
  }
  /// True when this handle refers to a value of the tape's current step.
  bool valid() const noexcept { return tape_ != nullptr && tape_->generation() == gen_; }

  void check(const char* op) const {
    if (tape_ == nullptr || tape_->generation() != gen_) [[unlikely]] fail(op);
  }

 private:
  friend class Tape<P>;
  Var(Tape<P>* t, std::uint32_t id, std::uint64_t gen) : tape_(t), id_(id), gen_(gen) {}

  [[noreturn, gnu::cold, gnu::noinline]] void fail(const char* op) const {
    if (tape_ == nullptr) {
      throw autodiff_error(std::string(op) + ": this Var is empty (default-constructed); expected a value recorded "
                                             "on a tape");
    }
    throw autodiff_error(std::string(op) + ": this Var belongs to step " + std::to_string(gen_) +
                         " of its tape, which has since been reset (now step " +
                         std::to_string(tape_->generation()) + "); record it again in the current step");
  }

  Tape<P>* tape_ = nullptr;
  std::uint32_t id_ = 0;
  std::uint64_t gen_ = 0;
};

template <class P>
class Tape {
 public:
  using policy_type = P;
  template <class S>
  using var = Var<P, S>;
  using param_type = typename P::param_type;
  /// Where the values live and what runs the ops (precis/ops/cpu.hpp).
  using backend_type = backend_t<P>;
  using arena_type = typename backend_type::arena_type;

  /// A recorded value: where it lives, its shape and strides (views share their base's memory)
  /// and its gradient buffer (null until a gradient reaches it).
  struct Slot {
    void* value = nullptr;
    void* grad = nullptr;
    Shape shape;
    Shape strides;
    bool requires_grad = false;
    bool external_grad = false;  // a parameter's gradient lives in the caller's tensor
    bool contiguous = false;     // strides are the row-major ones
    std::uint32_t uses = 0;      // recorded ops that read it (each adds into its gradient)
    bool* grad_is_zero = nullptr;  // a parameter's mark that its gradient holds zeros (param())
  };

  /// One recorded op: its backward function, its output, and its typed state in the arena
  /// (the op's attributes, its inputs' ids and what its forward saved; precis/ops/op.hpp).
  struct Node {
    using backward_fn = void (*)(Tape&, const Node&);
    /// A state this small lives in the node itself (most element-wise ops), a larger one in the
    /// arena (state points to it).
    static constexpr std::size_t inline_bytes = 24;
    backward_fn backward = nullptr;
    std::uint32_t out = 0;
    const void* state = nullptr;
    alignas(8) unsigned char local[inline_bytes];
  };

  /// `arena_bytes` reserves the arena up front (otherwise it grows during the first step).
  /// `backend`: the backend's settings (a device backend's stream).
  explicit Tape(std::size_t arena_bytes = 0, backend_type backend = {})
      : backend_(std::move(backend)),
        arena_(backend_.make_arena(arena_bytes)),
        scratch_(backend_.make_arena(0)),
        fp8_(detail::make_fp8_state<P>(backend_)) {
    slots_.reserve(256);
    nodes_.reserve(256);
  }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // ---- leaves -------------------------------------------------------------------------------

  /// A parameter: its value is read in place and its gradient accumulates (+=) into `grad`
  /// (same shape, contiguous) on every backward, until the caller zeroes it.
  /// `grad_is_zero`, when given, is the caller's mark that `grad` holds zeros (as
  /// nn::Parameter::grad_is_zero, which zero_grad() sets): while it is true when a backward
  /// first reaches this gradient, that backward clears it and assigns its first write instead
  /// of adding it to the zeros (the same values, without reading them back). The mark is read
  /// then, not now, so a gradient written by an earlier backward (of this tape or another) is
  /// added to.
  template <class S, class C, class G, class GC>
  Var<P, S> param(const TensorView<S, C>& value, const TensorView<G, GC>& grad,
                  bool* grad_is_zero = nullptr) {
    using V = detail::remove_const_t<S>;
    static_assert(std::is_same_v<G, grad_storage_t<P, V>>,
                  "precis::Tape::param: the gradient tensor's storage must be grad_storage_t<Policy, S>");
    if (!(grad.shape() == value.shape()) || !grad.is_contiguous()) {
      throw shape_error("precis::Tape::param: value of shape " + value.shape().str() + " and gradient of shape " +
                        grad.shape().str() + (grad.is_contiguous() ? "" : " (not contiguous)") +
                        "; expected a contiguous gradient of the value's shape");
    }
    const std::uint32_t id = add_slot(const_cast<V*>(value.data()), value.shape(), value.strides(), true,
                                      value.is_contiguous());
    slots_[id].grad = grad.data();
    slots_[id].external_grad = true;
    slots_[id].grad_is_zero = grad_is_zero;
    return Var<P, V>(this, id, gen_);
  }
  /// param(p.value, p.grad) for anything holding a value and a gradient tensor (nn::Parameter),
  /// with &p.grad_is_zero when it has that mark.
  template <class Prm>
    requires requires(Prm& p) {
      p.value.view();
      p.grad.view();
    }
  auto param(Prm& p) {
    if constexpr (requires {
                    { p.grad_is_zero } -> std::same_as<bool&>;
                  }) {
      return param(p.value.view(), p.grad.view(), &p.grad_is_zero);
    } else {
      return param(p.value.view(), p.grad.view());
    }
  }

  /// An input in host memory, copied into the arena (the caller's buffer may change
  /// afterwards; on a device backend this is the upload). With requires_grad its gradient is
  /// computed (e.g. for saliency or gradient checking).
  template <tensor_like X>
  Var<P, storage_of<X>> input(const X& x, bool requires_grad = false) {
    using S = storage_of<X>;
    const auto v = as_view(x);
    auto out = make<S>(v.shape(), requires_grad);
    backend_.upload(v, value_view<S>(out.id()));
    return out;
  }
  /// An input read in place, without a copy: the caller's tensor (in the backend's memory) must
  /// stay alive and unchanged until the step is reset. For large batches whose copy would cost
  /// memory.
  template <class S, class C>
  Var<P, detail::remove_const_t<S>> borrow(const TensorView<S, C>& x) {
    using V = detail::remove_const_t<S>;
    return Var<P, V>(this, add_slot(const_cast<V*>(x.data()), x.shape(), x.strides(), false, x.is_contiguous()), gen_);
  }
  template <class S, class C>
  Var<P, S> borrow(const Tensor<S, C>& x) {
    return borrow(x.view());
  }

  /// A tensor of `shape` filled with `value` (rounded once into S), not differentiated.
  template <class S>
  Var<P, S> full(const Shape& shape, double value) {
    auto out = make<S>(shape, false);
    const S v = detail::store<S>(detail::load<default_compute_t<S>>(value));
    backend_.fill(value_view<S>(out.id()).data(), static_cast<std::size_t>(shape.numel()), v);
    return out;
  }
  /// The same value, cut off from the graph: no gradient flows through it.
  template <class S>
  Var<P, S> detach(const Var<P, S>& x) {
    check(x, "precis::detach");
    const Slot s = slots_[x.id()];
    return Var<P, S>(this, add_slot(s.value, s.shape, s.strides, false, s.contiguous), gen_);
  }

  // ---- gradient mode --------------------------------------------------------------------------

  /// While the returned guard lives, ops record nothing and their results need no gradient.
  class no_grad_guard {
   public:
    explicit no_grad_guard(Tape& t) : t_(&t), saved_(t.grad_enabled_) { t.grad_enabled_ = false; }
    no_grad_guard(const no_grad_guard&) = delete;
    no_grad_guard& operator=(const no_grad_guard&) = delete;
    ~no_grad_guard() { t_->grad_enabled_ = saved_; }

   private:
    Tape* t_;
    bool saved_;
  };
  [[nodiscard]] no_grad_guard no_grad() { return no_grad_guard(*this); }
  bool grad_enabled() const noexcept { return grad_enabled_; }

  // ---- the reverse sweep ----------------------------------------------------------------------

  /// Differentiates a one-element loss; the seed (the loss scale) is its gradient. Parameter
  /// gradients accumulate into their tensors. Without retain_graph the step can be
  /// differentiated only once.
  template <class S>
  void backward(const Var<P, S>& loss, double seed = 1.0, bool retain_graph = false) {
    check(loss, "precis::Tape::backward");
    if (loss.size() != 1) {
      throw shape_error("precis::Tape::backward: the loss has shape " + loss.shape().str() + " (" +
                        std::to_string(loss.size()) +
                        " elements); expected a single element, or pass a seed tensor of the loss's shape");
    }
    using G = grad_storage_t<P, S>;
    begin_backward(loss);
    backend_.fill(grad_view<G>(loss.id()).data(), 1, detail::store<G>(detail::load<default_compute_t<G>>(seed)));
    sweep(retain_graph);
  }
  /// Differentiates y with the seed tensor `seed` (y's shape, in the backend's memory: on a
  /// device backend a device view, such as a loss scale the device keeps): a vector-Jacobian
  /// product.
  template <class S, tensor_like Seed>
  void backward(const Var<P, S>& y, const Seed& seed, bool retain_graph = false) {
    check(y, "precis::Tape::backward");
    if (!(as_view(seed).shape() == y.shape())) {
      throw shape_error("precis::Tape::backward: seed of shape " + as_view(seed).shape().str() + " for a value of shape " +
                        y.shape().str() + "; expected the same shape");
    }
    using G = grad_storage_t<P, S>;
    begin_backward(y);
    context(false).template map_into<default_compute_t<G>>("precis::Tape::backward", grad_view<G>(y.id()), detail::identity{},
                                                          as_view(seed));
    sweep(retain_graph);
  }

  /// The fp8 scaling state of an fp8 policy's tape: one entry per fp8 GEMM of a step, in
  /// recording order (fp8/scaling.hpp; a device backend's: precis::cuda::fp8_scaling_state).
  /// reset() closes each step (end_step).
  detail::fp8_state_t<P>& fp8() noexcept
    requires policy::fp8_policy<P>
  {
    return fp8_;
  }
  const detail::fp8_state_t<P>& fp8() const noexcept
    requires policy::fp8_policy<P>
  {
    return fp8_;
  }

  /// Forgets the step: every Var handed out so far becomes invalid; the memory is kept. Under an
  /// fp8 policy it also closes the step's scaling (delayed scaling updates its scales here).
  void reset() {
    if constexpr (policy::fp8_policy<P>) fp8_.end_step();
    nodes_.clear();
    slots_.clear();
    arena_.reset();
    scratch_.reset();
    state_.reset();
    ++gen_;
    differentiated_ = false;
  }

  // ---- introspection ----------------------------------------------------------------------------

  std::uint64_t generation() const noexcept { return gen_; }
  std::size_t nodes() const noexcept { return nodes_.size(); }
  std::size_t values() const noexcept { return slots_.size(); }
  /// The step's values, gradients and saved tensors (the backend's memory).
  const arena_type& arena() const noexcept { return arena_; }
  /// One op's temporaries (the backend's memory).
  const arena_type& scratch_arena() const noexcept { return scratch_; }
  /// The ops' recorded state (attributes, input ids, what the forward saved): host memory.
  const Arena& state_arena() const noexcept { return state_; }
  const backend_type& backend() const noexcept { return backend_; }

  // ---- for op implementations (precis/ops/op.hpp) ----------------------------------------------

  /// A new contiguous value of `shape` in the arena (uninitialized). It requires a gradient if
  /// requires_grad and gradients are enabled.
  template <class S>
  Var<P, S> make(const Shape& shape, bool requires_grad) {
    detail::check_extents(shape, "precis::Tape::make");
    S* p = arena_.template allocate_array<S>(static_cast<std::size_t>(shape.numel()));
    return Var<P, S>(this, add_slot(p, shape, contiguous_strides(shape), requires_grad && grad_enabled_, true), gen_);
  }
  /// A new value that is a view (shape, strides, element offset) of x's memory.
  template <class S>
  Var<P, S> make_view(const Var<P, S>& x, const TensorView<const S>& v) {
    return Var<P, S>(this, add_slot(const_cast<S*>(v.data()), v.shape(), v.strides(),
                                    x.requires_grad() && grad_enabled_, v.is_contiguous()), gen_);
  }
  /// Appends a node (call only when the output requires a gradient) whose backward adds into
  /// the gradients of the values `in` (its inputs; a value given twice counts twice).
  void record(const Node& n, std::span<const std::uint32_t> in) {
    nodes_.push_back(n);
    for (const std::uint32_t id : in) ++slots_[id].uses;
  }

  const Slot& slot(std::uint32_t id) const { return slots_[id]; }
  template <class S>
  TensorView<S> value_view(std::uint32_t id) const {
    const Slot& s = slots_[id];
    return TensorView<S>(static_cast<S*>(s.value), s.shape, s.strides, typename TensorView<S>::unchecked{});
  }
  /// The gradient buffer of a value (contiguous, its shape), allocated and zeroed on first use;
  /// G const gives a read-only view.
  template <class G>
  TensorView<G> grad_view(std::uint32_t id) {
    using M = detail::remove_const_t<G>;
    Slot& s = slots_[id];
    if (s.grad_is_zero != nullptr) *s.grad_is_zero = false;  // whoever asks may add into it
    if (s.grad == nullptr) {
      const auto n = static_cast<std::size_t>(s.shape.numel());
      M* g = arena_.template allocate_array<M>(n);
      if constexpr (std::is_trivially_copyable_v<M>) {  // the binary formats: +0 is all zero bytes
        backend_.zero_bytes(g, n * sizeof(M));
      } else {
        static_assert(backend_type::host_memory, "precis::Tape: a format without a trivial zero lives in host memory only");
        std::uninitialized_fill_n(g, n, M(0));
      }
      s.grad = g;
    }
    return TensorView<G>(static_cast<G*>(s.grad), s.shape, s.contiguous ? s.strides : contiguous_strides(s.shape),
                         typename TensorView<G>::unchecked{});
  }
  /// The gradient buffer of a value that has none yet, its n elements (the value's) allocated
  /// uninitialized: for a caller that writes every element or zeroes it (op::cpu::mark_fresh).
  template <class G>
  G* new_grad(std::uint32_t id, std::size_t n) {
    G* g = arena_.template allocate_array<G>(n);
    slots_[id].grad = g;
    return g;
  }
  bool has_grad(std::uint32_t id) const { return slots_[id].grad != nullptr; }
  /// Whether value id is a parameter whose gradient (of type G) its caller marked as zeros
  /// (param(value, grad, grad_is_zero)) and no backward has written since: then clears the
  /// mark, and the caller's first write into the gradient may assign. Builds without NDEBUG
  /// check the mark where the host can read the gradient: a gradient that holds anything but
  /// zero bytes (written by its owner after zero_grad(), the mark left set) throws, since the
  /// write would overwrite it.
  template <class G>
  bool take_zeroed_grad(std::uint32_t id) {
    const Slot& s = slots_[id];
    if (s.grad_is_zero == nullptr || !*s.grad_is_zero) return false;
    *s.grad_is_zero = false;
#ifndef NDEBUG
    if constexpr (backend_type::host_memory && std::is_trivially_copyable_v<G>) {
      const auto* b = static_cast<const unsigned char*>(s.grad);
      const auto bytes = static_cast<std::size_t>(s.shape.numel()) * sizeof(G);
      if (std::any_of(b, b + bytes, [](unsigned char c) { return c != 0; })) [[unlikely]] {
        throw autodiff_error(
            "precis::Tape::backward: the gradient of a parameter of shape " + s.shape.str() +
            " is marked as zeros (grad_is_zero, set by zero_grad()) but holds other values; "
            "expected grad_is_zero = false after writing into a gradient yourself (the backward "
            "would overwrite it, not add to it)");
      }
    }
#endif
    return true;
  }
  /// Gives value `in` the gradient buffer of value `out`, for an op whose input's gradient is its
  /// output's element for element in row-major order (a reshape; either input of an add that
  /// broadcasts neither): only when `in` has no gradient yet and that op is the one recorded op
  /// that reads it, so that nothing else ever adds into the shared buffer (and `out`'s gradient,
  /// read later, is still its own; both inputs of an add may share it, each only read after).
  /// Returns whether it did; the op's backward then has nothing left to do for `in`.
  bool share_grad(std::uint32_t in, std::uint32_t out) {
    Slot& s = slots_[in];
    if (!s.requires_grad || s.grad != nullptr || s.uses != 1 || slots_[out].grad == nullptr) return false;
    s.grad = slots_[out].grad;
    return true;
  }
  arena_type& arena() noexcept { return arena_; }
  /// Memory for one op's temporaries: rewound after every op and every backward node.
  arena_type& scratch() noexcept { return scratch_; }
  /// Host memory for the ops' recorded state, as long as the step.
  Arena& state_arena() noexcept { return state_; }
  backend_type& backend() noexcept { return backend_; }
  /// An op's context on this tape's memory: temporaries from scratch(), kept memory from
  /// arena(); `saving` when the forward's saved state will be used.
  auto context(bool saving) {
    std::conditional_t<policy::fp8_policy<P>, detail::fp8_state_t<P>, fp8::scaling_state>* f8 = nullptr;
    if constexpr (policy::fp8_policy<P>) f8 = &fp8_;
    return backend_.template context<P>(scratch_, arena_, saving, f8);
  }
  void end_op() { scratch_.reset(); }

  template <class S>
  void check(const Var<P, S>& x, const char* op) const {
    x.check(op);
    if (&x.tape() != this) [[unlikely]] {
      throw autodiff_error(std::string(op) + ": this Var was recorded on another tape");
    }
  }

 private:
  std::uint32_t add_slot(void* value, const Shape& shape, const Shape& strides, bool requires_grad, bool contiguous) {
    slots_.push_back(Slot{value, nullptr, shape, strides, requires_grad, false, contiguous});
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }

  template <class S>
  void begin_backward(const Var<P, S>& y) {
    if (!y.requires_grad()) {
      throw autodiff_error("precis::Tape::backward: the value of shape " + y.shape().str() +
                           " does not depend on any parameter or input that requires a gradient");
    }
    if (differentiated_) {
      throw autodiff_error("precis::Tape::backward: this step's graph was already differentiated; pass "
                           "retain_graph = true to the first backward() to run it again, or reset() and record "
                           "the next step");
    }
    for (Slot& s : slots_) {  // a retained graph run again: intermediate gradients start afresh
      if (!s.external_grad) s.grad = nullptr;
    }
  }

  void sweep(bool retain_graph) {
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
      if (slots_[it->out].grad == nullptr) continue;  // no gradient reached this op's output
      it->backward(*this, *it);
      scratch_.reset();
    }
    differentiated_ = !retain_graph;
  }

  backend_type backend_;
  arena_type arena_;
  arena_type scratch_;
  Arena state_;
  std::vector<Slot> slots_;
  std::vector<Node> nodes_;
  std::uint64_t gen_ = 0;
  bool grad_enabled_ = true;
  bool differentiated_ = false;
  detail::fp8_state_t<P> fp8_;  // (not [[no_unique_address]]: that would forbid the elided copy)
};

}  // namespace precis
