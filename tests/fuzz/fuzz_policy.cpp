// libFuzzer target: run-time policy dispatch from an arbitrary name, and one small op under the
// policy it names. Unknown names must be an invalid_argument, never anything else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <precis/precis.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  try {
    precis::policy::dispatch(name, []<class P>() {
      precis::Tensor<typename P::param_type> x(precis::Shape{3});
      (void)precis::ops<P>::sum(x);
      return 0;
    });
  } catch (const precis::invalid_argument&) {
  }
  return 0;
}
