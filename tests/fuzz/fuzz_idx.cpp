// libFuzzer target: the IDX parser (plain and gzip) on arbitrary bytes. The first byte picks the
// rank; the rest is the file. Anything but a precis::error escaping, a crash, UB or a leak is a
// finding; caps keep every input's memory small.
#include <cstddef>
#include <cstdint>
#include <span>

#include <precis/data/idx.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int rank = 1 + data[0] % 4;
  const precis::data::idx_options opt{.max_elements = std::uint64_t{1} << 20, .max_file_bytes = std::uint64_t{1} << 20};
  try {
    const auto a = precis::data::parse_idx(std::span<const unsigned char>(data + 1, size - 1), "fuzz-input", rank, opt);
    std::uint64_t n = 1;
    for (auto d : a.dims) n *= d;
    if (a.dims.size() != static_cast<std::size_t>(rank) || a.bytes.size() != n) __builtin_trap();  // the parser's promise
  } catch (const precis::error&) {
  }
  return 0;
}
