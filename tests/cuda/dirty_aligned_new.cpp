// Linked into device_test: every over-aligned allocation (precis::Tensor's buffers) is handed
// out filled with 0xA5, as memory the program freed earlier may be, so that what a new Tensor
// holds cannot depend on the allocator's luck. Host C++ (nvcc would make these replacements
// __host__ __device__).
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

void* operator new(std::size_t n, std::align_val_t a) {
  const auto al = static_cast<std::size_t>(a);
  void* p = std::aligned_alloc(al, (std::max<std::size_t>(n, 1) + al - 1) / al * al);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0xA5, n);
  return p;
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
