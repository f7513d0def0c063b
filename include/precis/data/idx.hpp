// IDX files (the MNIST / Fashion-MNIST format, http://yann.lecun.com/exdb/mnist/): a big-endian
// header of magic 0x0000TTNN (TT = 0x08 for unsigned bytes, NN = the rank) and NN extents, then
// the elements; plain, or one or more gzip members (RFC 1952) decompressed with zlib. Needs zlib
// (the precis::data component); not included by precis.hpp.
//
// Sizes come from the file, so nothing is trusted: the element count is computed with overflow
// checks and compared with a cap (idx_options::max_elements) before anything is allocated; a
// plain file must be exactly header + elements long; a gzip file's output buffer grows only as
// data arrives, its stream must end with a valid trailer, and nothing but further gzip members
// may follow it. Every problem is a data_error naming the file and what was expected: a missing
// or non-regular file, a wrong magic number, a truncated or damaged body, trailing bytes, an
// image/label count mismatch, a label out of range, images of the wrong size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <system_error>
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

/// Limits on what a file may make the reader allocate.
struct idx_options {
  /// Elements a file may claim (2^32 by default: 4 GiB of bytes, 16 GiB as a float tensor).
  std::uint64_t max_elements = std::uint64_t{1} << 32;
  /// Bytes of a file read into memory (compressed files are read whole before inflating).
  std::uint64_t max_file_bytes = std::uint64_t{1} << 32;
};

namespace detail {

inline std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

/// The whole file, after checking it is a regular file no larger than the cap.
inline std::vector<unsigned char> read_file(const std::string& path, std::uint64_t max_bytes, const char* op) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    throw data_error(std::string(op) + ": cannot open " + path + " (expected an IDX file, optionally gzip-compressed)");
  }
  if (!std::filesystem::is_regular_file(st)) {
    throw data_error(std::string(op) + ": " + path + " is not a regular file; expected an IDX file");
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw data_error(std::string(op) + ": cannot read the size of " + path + " (" + ec.message() + ")");
  if (size > max_bytes) {
    throw data_error(std::string(op) + ": " + path + " has " + std::to_string(size) + " bytes; expected at most " +
                     std::to_string(max_bytes) + " (idx_options::max_file_bytes)");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw data_error(std::string(op) + ": cannot open " + path);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    throw data_error(std::string(op) + ": " + path + " could not be read whole (" + std::to_string(size) + " bytes)");
  }
  return bytes;
}

/// The decompressed contents of one or more gzip members, never more than limit(out) bytes, where
/// out is what has arrived so far (more is an error: the IDX header's size plus one byte tells
/// trailing data from a valid end).
template <class Limit>
std::vector<unsigned char> gunzip(std::span<const unsigned char> in, const Limit& limit, const std::string& path) {
  const char* op = "precis::data::read_idx";
  std::vector<unsigned char> out;
  std::size_t pos = 0;
  while (pos < in.size()) {
    if (in.size() - pos < 2 || in[pos] != 0x1f || in[pos + 1] != 0x8b) {
      throw data_error(std::string(op) + ": " + path + " has " + std::to_string(in.size() - pos) +
                       " bytes after the end of its gzip stream; expected nothing or another gzip member");
    }
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw data_error(std::string(op) + ": zlib could not start for " + path);
    struct ender {
      z_stream* z;
      ~ender() { inflateEnd(z); }
    } end_guard{&z};
    std::size_t fed = pos;  // input handed to zlib so far (at most 1 GiB at a time)
    int rc = Z_OK;
    unsigned char chunk[1 << 16];
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0 && fed < in.size()) {
        const std::size_t n = std::min<std::size_t>(in.size() - fed, std::size_t{1} << 30);
        z.next_in = const_cast<Bytef*>(in.data() + fed);
        z.avail_in = static_cast<uInt>(n);
        fed += n;
      }
      z.next_out = chunk;
      z.avail_out = sizeof chunk;
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_BUF_ERROR) {  // no progress: the input ended inside the stream
        throw data_error(std::string(op) + ": " + path + " is truncated: its gzip stream ends after " + std::to_string(out.size()) +
                         " decompressed bytes, before its end and trailer");
      }
      if (rc != Z_OK && rc != Z_STREAM_END) {
        throw data_error(std::string(op) + ": " + path + " is damaged: zlib says \"" + (z.msg ? z.msg : "error " + std::to_string(rc)) +
                         "\" after " + std::to_string(out.size()) + " decompressed bytes");
      }
      const std::size_t got = sizeof chunk - z.avail_out;
      if (const std::uint64_t cap = limit(out); out.size() + got > cap) {
        throw data_error(std::string(op) + ": " + path + " decompresses to more than " + std::to_string(cap - 1) +
                         " bytes, the header and the elements it claims; expected nothing after them");
      }
      out.insert(out.end(), chunk, chunk + got);  // the buffer grows only with data that arrived
    }
    pos = fed - z.avail_in;  // the next member, if any, starts after this one's trailer
  }
  return out;
}

}  // namespace detail

/// Parses the bytes of an IDX file (plain or gzip-compressed) of unsigned bytes with `rank` axes;
/// `path` names it in errors. read_idx reads a file and calls this.
inline idx_array parse_idx(std::span<const unsigned char> file, const std::string& path, int rank, const idx_options& opt = {}) {
  const char* op = "precis::data::read_idx";
  if (rank < 1 || rank > 8) throw invalid_argument(std::string(op) + ": rank " + std::to_string(rank) + "; expected 1 to 8");
  const std::uint64_t header = 4 + 4 * static_cast<std::uint64_t>(rank);
  const bool gz = file.size() >= 2 && file[0] == 0x1f && file[1] == 0x8b;
  // the largest stream that can be valid: the header and the element count it claims (the cap
  // until the header has arrived); one byte more is how trailing data shows
  const auto limit = [&](const std::vector<unsigned char>& out) -> std::uint64_t {
    std::uint64_t n = 1;
    if (out.size() >= header) {
      for (int i = 0; i < rank; ++i) {
        if (__builtin_mul_overflow(n, std::uint64_t{detail::be32(out.data() + 4 + 4 * i)}, &n) || n > opt.max_elements) {
          n = opt.max_elements;  // the header check below reports it
          break;
        }
      }
    } else {
      n = opt.max_elements;
    }
    return header + n + 1;
  };
  std::vector<unsigned char> inflated;
  if (gz) inflated = detail::gunzip(file, limit, path);
  const std::span<const unsigned char> data = gz ? std::span<const unsigned char>(inflated) : file;
  const auto need = [&](std::uint64_t n, const std::string& what) {
    if (data.size() < n) {
      throw data_error(std::string(op) + ": " + path + " is truncated: it ends after " + std::to_string(data.size()) + " of the " +
                       std::to_string(n) + " bytes of " + what);
    }
  };
  need(4, "the magic number");
  const std::uint32_t magic = detail::be32(data.data()), expected = 0x00000800u | static_cast<std::uint32_t>(rank);
  if (magic != expected) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%08X; expected 0x%08X", magic, expected);
    throw data_error(std::string(op) + ": " + path + " has magic number " + buf + " (unsigned bytes, rank " + std::to_string(rank) +
                     ")");
  }
  need(header, "the header");
  idx_array a;
  std::uint64_t total = 1;
  std::string extents;
  for (int i = 0; i < rank; ++i) {
    a.dims.push_back(detail::be32(data.data() + 4 + 4 * i));
    extents += (i ? " x " : "") + std::to_string(a.dims.back());
  }
  for (std::uint32_t d : a.dims) {
    if (__builtin_mul_overflow(total, std::uint64_t{d}, &total) || total > opt.max_elements) {
      throw data_error(std::string(op) + ": " + path + " claims " + extents + " elements; expected at most " +
                       std::to_string(opt.max_elements) + " (idx_options::max_elements)");
    }
  }
  if (data.size() < header + total) {
    throw data_error(std::string(op) + ": " + path + " is truncated: it ends after " + std::to_string(data.size() - header) +
                     " of the " + std::to_string(total) + " bytes of the elements (" + extents + ")");
  }
  if (data.size() > header + total) {
    throw data_error(std::string(op) + ": " + path + " has " + std::to_string(data.size() - header - total) + " bytes after its " +
                     std::to_string(total) + " elements (" + extents + ")");
  }
  a.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(header), data.end());
  return a;
}

/// Reads an IDX file of unsigned bytes with `rank` axes, plain or gzip-compressed.
inline idx_array read_idx(const std::string& path, int rank, const idx_options& opt = {}) {
  if (rank < 1 || rank > 8) {
    throw invalid_argument("precis::data::read_idx: rank " + std::to_string(rank) + "; expected 1 to 8");
  }
  const std::vector<unsigned char> file = detail::read_file(path, opt.max_file_bytes, "precis::data::read_idx");
  return parse_idx(file, path, rank, opt);
}

/// Images scaled to [0, 1] as [count, rows * cols] and their labels.
struct labelled_images {
  Tensor<float> images;
  std::vector<std::int64_t> labels;
  index_t rows = 0, cols = 0;
};

/// Reads an images file (rank 3) and its labels file (rank 1) and checks they agree; labels
/// must lie in [0, classes). With rows and cols > 0, the images must have that size.
inline labelled_images read_idx_images(const std::string& images_path, const std::string& labels_path, int classes,
                                       index_t rows = 0, index_t cols = 0, const idx_options& opt = {}) {
  const idx_array im = read_idx(images_path, 3, opt);
  const idx_array lb = read_idx(labels_path, 1, opt);
  if (im.dims[0] != lb.dims[0]) {
    throw data_error("precis::data::read_idx_images: " + images_path + " has " + std::to_string(im.dims[0]) + " images but " +
                     labels_path + " has " + std::to_string(lb.dims[0]) + " labels; expected one label per image");
  }
  if ((rows > 0 && im.dims[1] != rows) || (cols > 0 && im.dims[2] != cols)) {
    throw data_error("precis::data::read_idx_images: " + images_path + " has images of " + std::to_string(im.dims[1]) + " x " +
                     std::to_string(im.dims[2]) + " pixels; expected " + std::to_string(rows) + " x " + std::to_string(cols));
  }
  labelled_images d;
  d.rows = im.dims[1];
  d.cols = im.dims[2];
  // read_idx capped the element count, so these products fit
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

/// The Fashion-MNIST training (train = true, 60000 images) or test set (10000) in `dir`, 28 x 28
/// images (another size is a data_error)
/// (Debian's dataset-fashion-mnist installs it in /usr/share/datasets/fashion-mnist).
inline labelled_images read_fashion_mnist(const std::string& dir, bool train) {
  const std::string stem = dir + "/" + (train ? "train" : "t10k");
  return read_idx_images(stem + "-images-idx3-ubyte.gz", stem + "-labels-idx1-ubyte.gz", 10, 28, 28);
}

}  // namespace precis::data
