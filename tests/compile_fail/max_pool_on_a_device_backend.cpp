// max pooling on a backend whose memory the host cannot touch: its definition reads windows in
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
  precis::Tensor<float> x({1, 1, 4, 4});
  auto y = max_pool2d(tape.input(x, true));
  return static_cast<int>(y.size());
}
