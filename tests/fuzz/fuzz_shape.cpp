// libFuzzer target: shapes from arbitrary extents. Shape construction, element counts, tensor
// allocation (only when small), broadcasting and reshapes must either work or throw a
// precis::error; overflow is never allowed to wrap.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <precis/precis.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using precis::index_t;
  if (size < 2) return 0;
  const std::size_t ra = data[0] % 10, rb = data[1] % 10;  // ranks up to 9: above max_rank throws
  data += 2;
  size -= 2;
  const auto take = [&](std::size_t rank) {
    precis::Shape s;
    for (std::size_t i = 0; i < rank; ++i) {
      index_t e = 0;
      const std::size_t n = size < sizeof e ? size : sizeof e;
      std::memcpy(&e, data, n);
      data += n;
      size -= n;
      // mostly small extents (interesting broadcasts), sometimes anything
      if ((e & 0x100) == 0) e = (e & 0xff) % 7;
      s.push_back(e);
    }
    return s;
  };
  try {
    const precis::Shape a = take(ra), b = take(rb);
    const index_t na = a.numel();  // throws on overflow
    (void)b.numel();
    if (na >= 0 && na <= (1 << 16)) {
      precis::Tensor<float> t(a);  // negative extents are a shape_error
      if (t.size() != na) __builtin_trap();
      if (t.rank() > 0) (void)t.view().reshape(precis::Shape{t.size()});
      const precis::Shape c = precis::broadcast_shapes(a, b, "fuzz");
      if (c.numel() <= (1 << 16)) (void)t.view().broadcast_to(c);
    }
  } catch (const precis::error&) {
  }
  return 0;
}
