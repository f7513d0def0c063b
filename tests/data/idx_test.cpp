// The IDX reader: raw and gzip files round-trip; every malformed file is a data_error naming
// the file and what was expected.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <precis/data/idx.hpp>
#include <string>
#include <vector>

using namespace precis;

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

}  // namespace
