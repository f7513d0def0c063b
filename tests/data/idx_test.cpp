// The IDX reader: raw and gzip files round-trip; every malformed file is a data_error naming
// the file and what was expected; sizes claimed by a header are never trusted: no allocation
// is larger than the file (or, for gzip, the data that arrived) can justify.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <fstream>
#include <precis/data/idx.hpp>
#include <string>
#include <vector>

using namespace precis;

// The largest single allocation while `tracking` is set: the reader must not size memory from a
// header it has not checked against the file.
namespace {
std::atomic<bool> tracking{false};
std::atomic<std::size_t> largest{0};
}  // namespace

// malloc and free behind the replaced operators (GCC cannot see they pair up)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (tracking.load(std::memory_order_relaxed)) {
    std::size_t seen = largest.load(std::memory_order_relaxed);
    while (n > seen && !largest.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("precis_idx_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<unsigned char> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims, const std::vector<unsigned char>& body) {
  std::vector<unsigned char> b;
  const auto put = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
  };
  put(magic);
  for (auto d : dims) put(d);
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

void write_raw(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_gz(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  gzclose(f);
}

template <class F>
void expect_data_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a data_error containing \"" << needle << "\"";
  } catch (const data::data_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Idx, RawAndGzipFilesRoundTrip) {
  std::vector<unsigned char> pixels(2 * 3 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i * 10);
  const auto im = temp_path("im.idx"), lb = temp_path("lb.idx.gz");
  write_raw(im, idx_bytes(0x803, {2, 3, 4}, pixels));
  write_gz(lb, idx_bytes(0x801, {2}, {7, 1}));
  const auto d = data::read_idx_images(im, lb, 10);
  EXPECT_EQ(d.images.shape(), (Shape{2, 12}));
  EXPECT_EQ(d.rows, 3);
  EXPECT_EQ(d.cols, 4);
  EXPECT_FLOAT_EQ(d.images(1, 0), 120.0f / 255.0f);
  EXPECT_EQ(d.labels, (std::vector<std::int64_t>{7, 1}));
}

TEST(Idx, MalformedFilesAreNamedErrors) {
  const auto p = temp_path("bad.idx"), lb = temp_path("labels.idx");
  expect_data_error([&] { data::read_idx(temp_path("missing.idx"), 1); }, "cannot open");
  write_raw(p, idx_bytes(0x803, {2}, {1, 2}));
  expect_data_error([&] { data::read_idx(p, 1); }, "has magic number 0x00000803; expected 0x00000801");
  write_gz(p, idx_bytes(0x801, {5}, {1, 2, 3}));
  expect_data_error([&] { data::read_idx(p, 1); }, "is truncated: it ends after 3 of the 5 bytes of the elements");
  write_raw(p, {0, 0, 8});
  expect_data_error([&] { data::read_idx(p, 1); }, "truncated");
  write_raw(p, idx_bytes(0x801, {2}, {1, 2, 3}));
  expect_data_error([&] { data::read_idx(p, 1); }, "bytes after its 2 elements");
  write_raw(p, idx_bytes(0x803, {3, 1, 1}, {1, 2, 3}));
  write_raw(lb, idx_bytes(0x801, {2}, {1, 2}));
  expect_data_error([&] { data::read_idx_images(p, lb, 10); }, "has 3 images but");
  write_raw(lb, idx_bytes(0x801, {3}, {1, 12, 2}));
  expect_data_error([&] { data::read_idx_images(p, lb, 10); }, "has label 12 at index 1; expected labels in [0, 10)");
}

std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

/// A data_error containing `needle`, and no allocation above `max_bytes` on the way.
template <class F>
void expect_bounded_error(F f, const std::string& needle, std::size_t max_bytes) {
  largest = 0;
  tracking = true;
  expect_data_error(f, needle);
  tracking = false;
  EXPECT_LE(largest.load(), max_bytes) << "while expecting \"" << needle << "\"";
}

TEST(Idx, HeaderSizesAreNotTrusted) {
  const auto p = temp_path("huge.idx");
  // extents whose product wraps past 2^64 (2^22 x 2^21 x 2^21 = 2^64): not an empty array
  write_raw(p, idx_bytes(0x803, {1u << 22, 1u << 21, 1u << 21}, {}));
  expect_bounded_error([&] { data::read_idx(p, 3); }, "claims 4194304 x 2097152 x 2097152 elements; expected at most", 1 << 16);
  // a claim of 2^32 - 1 bytes in an 8-byte file, and of 2^32 in a 16-byte one: truncated, and
  // nothing near the claim allocated
  write_raw(p, idx_bytes(0x801, {0xFFFFFFFFu}, {}));
  expect_bounded_error([&] { data::read_idx(p, 1); }, "is truncated: it ends after 0 of the 4294967295 bytes", 1 << 16);
  write_raw(p, idx_bytes(0x803, {1u << 16, 1u << 8, 1u << 8}, {}));
  expect_bounded_error([&] { data::read_idx(p, 3); }, "of the 4294967296 bytes", 1 << 16);
  // the same claim gzip-compressed: the buffer grows only with the data that arrives
  write_gz(p, idx_bytes(0x803, {1u << 16, 1u << 8, 1u << 8}, {1, 2, 3}));
  expect_bounded_error([&] { data::read_idx_images(p, p, 10); }, "of the 4294967296 bytes", 1 << 18);
  // a caller's cap
  write_raw(p, idx_bytes(0x801, {1000}, std::vector<unsigned char>(1000, 1)));
  expect_data_error([&] { data::read_idx(p, 1, {.max_elements = 100}); }, "claims 1000 elements; expected at most 100");
  EXPECT_EQ(data::read_idx(p, 1).bytes.size(), 1000u);
}

TEST(Idx, GzipStreamsMustEndExactly) {
  const auto p = temp_path("gz.idx");
  const auto good = idx_bytes(0x801, {4}, {1, 2, 3, 4});
  write_gz(p, good);
  const auto gz = file_bytes(p);
  ASSERT_GT(gz.size(), 8u);
  // missing its 8-byte trailer (CRC and length)
  write_raw(p, std::vector<unsigned char>(gz.begin(), gz.end() - 8));
  expect_data_error([&] { data::read_idx(p, 1); }, "is truncated: its gzip stream ends after 12 decompressed bytes");
  // a damaged trailer
  auto bad = gz;
  bad[bad.size() - 6] ^= 0xFF;
  write_raw(p, bad);
  expect_data_error([&] { data::read_idx(p, 1); }, "is damaged: zlib says");
  // followed by garbage
  auto tail = gz;
  for (char c : std::string("garbage")) tail.push_back(static_cast<unsigned char>(c));
  write_raw(p, tail);
  expect_data_error([&] { data::read_idx(p, 1); }, "has 7 bytes after the end of its gzip stream");
  // more elements than the header claims
  write_gz(p, idx_bytes(0x801, {2}, {1, 2, 3}));
  expect_data_error([&] { data::read_idx(p, 1); }, "has 1 bytes after its 2 elements");
  // two members (what `cat a.gz b.gz` makes) are one valid stream
  const auto g1 = temp_path("part1.gz"), g2 = temp_path("part2.gz");
  write_gz(g1, std::vector<unsigned char>(good.begin(), good.begin() + 6));
  write_gz(g2, std::vector<unsigned char>(good.begin() + 6, good.end()));
  auto both = file_bytes(g1);
  const auto second = file_bytes(g2);
  both.insert(both.end(), second.begin(), second.end());
  write_raw(p, both);
  EXPECT_EQ(data::read_idx(p, 1).bytes, (std::vector<std::uint8_t>{1, 2, 3, 4}));
}

TEST(Idx, OnlyRegularFilesAndTheExpectedImageSize) {
  expect_data_error([&] { data::read_idx(std::filesystem::temp_directory_path().string(), 1); }, "is not a regular file");
  if (std::filesystem::exists("/dev/zero")) {
    expect_bounded_error([&] { data::read_idx("/dev/zero", 1); }, "/dev/zero is not a regular file", 1 << 16);
  }
  const auto im = temp_path("im.idx"), lb = temp_path("lb.idx");
  write_raw(im, idx_bytes(0x803, {1, 2, 2}, {0, 1, 2, 3}));
  write_raw(lb, idx_bytes(0x801, {1}, {3}));
  EXPECT_EQ(data::read_idx_images(im, lb, 10).images.shape(), (Shape{1, 4}));
  expect_data_error([&] { data::read_idx_images(im, lb, 10, 28, 28); }, "has images of 2 x 2 pixels; expected 28 x 28");
}

}  // namespace
