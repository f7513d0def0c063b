// A precision string that names no policy.
#include <precis/precis.hpp>

int main() {
  using P = precis::policy::named<"fp16-mixed">;  // the valid spelling is "16-mixed"
  return P::needs_loss_scaling ? 0 : 1;
}
