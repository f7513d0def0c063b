// max along an axis on a backend whose memory the host cannot touch: its definition selects in
// its own loops, not through its context, so recording it there is refused at compile time.
#include <precis/precis.hpp>

struct device_like : precis::backend::host {
  static constexpr bool host_memory = false;
};
struct on_device_like : precis::policy::named<"32-true"> {
  using backend = device_like;
};

int main() {
  precis::Tape<on_device_like> tape;
  precis::Tensor<float> x({2, 3});
  auto y = max(tape.input(x, true), 1);
  return static_cast<int>(y.size());
}
