// IDX files (the MNIST / Fashion-MNIST format, http://yann.lecun.com/exdb/mnist/): a big-endian
// header of magic 0x0000TTNN (TT = 0x08 for unsigned bytes, NN = the rank) and NN extents, then
// the elements. Read through zlib, so ".gz" and uncompressed files both work. Needs zlib
// (link ZLIB::ZLIB); not included by precis.hpp.
//
// Every problem is a data_error naming the file and what was expected: a missing file, a wrong
// magic number, a truncated body, trailing bytes, an image/label count mismatch, a label out of
// range.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <zlib.h>

#include "precis/error.hpp"
#include "precis/tensor/tensor.hpp"

namespace precis::data {

class data_error : public error {
 public:
  using error::error;
};

/// An IDX array of unsigned bytes: its extents and its elements in row-major order.
struct idx_array {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> bytes;
};

/// Reads an IDX file of unsigned bytes with `rank` axes.
inline idx_array read_idx(const std::string& path, int rank) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw data_error("precis::data::read_idx: cannot open " + path + " (expected an IDX file, optionally gzip-compressed)");
  struct closer {
    gzFile f;
    ~closer() { gzclose(f); }
  } guard{f};
  const auto read_exact = [&](void* dst, std::size_t n, const std::string& what) {
    std::size_t done = 0;
    while (done < n) {
      const int got = gzread(f, static_cast<char*>(dst) + done, static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30)));
      if (got < 0) {
        int code = 0;
        throw data_error("precis::data::read_idx: " + path + " is damaged (" + gzerror(f, &code) + ") while reading " + what);
      }
      if (got == 0) {
        throw data_error("precis::data::read_idx: " + path + " is truncated: it ends after " + std::to_string(done) + " of the " +
                         std::to_string(n) + " bytes of " + what);
      }
      done += static_cast<std::size_t>(got);
    }
  };
  const auto be32 = [](const unsigned char* p) {
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
  };
  unsigned char head[4];
  read_exact(head, 4, "the magic number");
  const std::uint32_t magic = be32(head), expected = 0x00000800u | static_cast<std::uint32_t>(rank);
  if (magic != expected) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%08X; expected 0x%08X", magic, expected);
    throw data_error("precis::data::read_idx: " + path + " has magic number " + buf + " (unsigned bytes, rank " +
                     std::to_string(rank) + ")");
  }
  idx_array a;
  std::uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    read_exact(head, 4, "the extents");
    a.dims.push_back(be32(head));
    total *= a.dims.back();
  }
  if (total > (std::uint64_t{1} << 34)) {
    throw data_error("precis::data::read_idx: " + path + " claims " + std::to_string(total) + " elements; expected a plausible size");
  }
  a.bytes.resize(static_cast<std::size_t>(total));
  read_exact(a.bytes.data(), a.bytes.size(), "the elements");
  char extra;
  if (gzread(f, &extra, 1) > 0) {
    throw data_error("precis::data::read_idx: " + path + " has bytes after its " + std::to_string(total) + " elements");
  }
  return a;
}

/// Images scaled to [0, 1] as [count, rows * cols] and their labels.
struct labelled_images {
  Tensor<float> images;
  std::vector<std::int64_t> labels;
  index_t rows = 0, cols = 0;
};

/// Reads an images file (rank 3) and its labels file (rank 1) and checks they agree; labels
/// must lie in [0, classes).
inline labelled_images read_idx_images(const std::string& images_path, const std::string& labels_path, int classes) {
  const idx_array im = read_idx(images_path, 3);
  const idx_array lb = read_idx(labels_path, 1);
  if (im.dims[0] != lb.dims[0]) {
    throw data_error("precis::data::read_idx_images: " + images_path + " has " + std::to_string(im.dims[0]) + " images but " +
                     labels_path + " has " + std::to_string(lb.dims[0]) + " labels; expected one label per image");
  }
  labelled_images d;
  d.rows = im.dims[1];
  d.cols = im.dims[2];
  const index_t n = im.dims[0], px = d.rows * d.cols;
  d.images = Tensor<float>::uninitialized(Shape{n, px});
  for (std::size_t i = 0; i < im.bytes.size(); ++i) d.images.data()[i] = static_cast<float>(im.bytes[i]) / 255.0f;
  d.labels.resize(lb.bytes.size());
  for (std::size_t i = 0; i < lb.bytes.size(); ++i) {
    if (lb.bytes[i] >= classes) {
      throw data_error("precis::data::read_idx_images: " + labels_path + " has label " + std::to_string(lb.bytes[i]) + " at index " +
                       std::to_string(i) + "; expected labels in [0, " + std::to_string(classes) + ")");
    }
    d.labels[i] = lb.bytes[i];
  }
  return d;
}

/// The Fashion-MNIST training (train = true, 60000 images) or test set (10000) in `dir`
/// (Debian's dataset-fashion-mnist installs it in /usr/share/datasets/fashion-mnist).
inline labelled_images read_fashion_mnist(const std::string& dir, bool train) {
  const std::string stem = dir + "/" + (train ? "train" : "t10k");
  return read_idx_images(stem + "-images-idx3-ubyte.gz", stem + "-labels-idx1-ubyte.gz", 10);
}

}  // namespace precis::data
