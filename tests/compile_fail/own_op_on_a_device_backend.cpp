// An op of one's own whose definition maps tensor memory itself (precis::map_into, not its
// context's map_into), recorded on a backend whose memory the host cannot touch: it does not
// declare context_only, so recording it there is refused at compile time.
#include <precis/precis.hpp>
#include <tuple>

struct device_like : precis::backend::host {
  static constexpr bool host_memory = false;
};
struct on_device_like : precis::policy::named<"32-true"> {
  using backend = device_like;
};

/// y = 2 x, written with the host's map_into.
struct twice : precis::op::def<precis::policy::safety::low_precision_safe> {
  static constexpr std::string_view name = "twice";
  static constexpr std::string_view reason = "a doubling is exact";
  static precis::Shape shape(const attrs&, const precis::Shape& x) { return x; }
  template <class T, class Ctx, class O, class X>
  static void forward(const Ctx&, const attrs&, const precis::TensorView<O>& y, saved<T>&, const precis::TensorView<const X>& x) {
    using A = typename T::arithmetic;
    precis::map_into<A>("twice", y, [](const A& v) { return A(v + v); }, x);
  }
  template <class T, class Ctx, class G, class O, class X, class GX>
  static void backward(const Ctx&, const attrs&, const saved<T>&, const precis::TensorView<const G>& gy, const precis::TensorView<const O>&,
                       const std::tuple<precis::TensorView<const X>>&, const std::tuple<precis::TensorView<GX>>& gx) {
    using A = typename T::arithmetic;
    precis::map_into<A>("twice", std::get<0>(gx), [](const A& acc, const A& g) { return A(acc + g + g); }, std::get<0>(gx).as_const(), gy);
  }
};

int main() {
  precis::Tape<on_device_like> tape;
  precis::Tensor<float> x({2, 3});
  auto y = precis::record<twice>({}, tape.input(x, true));
  return static_cast<int>(y.size());
}
