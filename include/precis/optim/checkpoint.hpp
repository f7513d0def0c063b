// The checkpoint file format and its atomic writer (docs/optim.md, "Checkpoints").
//
// Little-endian, in this order:
//   header   8 bytes  magic "PRECISCK"
//            u32      format version (1)
//            u32      0x01020304 (byte-order check)
//            u64      record count
//   records  u32 name length, name bytes (UTF-8, unique)
//            u32 dtype length, dtype bytes ("fp32", "bf16", "fp16", "fp64", "i64", "u64", ...)
//            u32 rank, rank x u64 extents
//            u64 payload bytes, payload (row-major elements)
//   trailer  u32      CRC-32 (IEEE 802.3, reflected 0xEDB88320) of every byte before it
//            8 bytes  magic "PRECISND"
// A checkpoint is read whole and validated (size, magics, version, checksum, every record's
// bounds, then the names, dtypes and shapes the reader expects) before anything in memory is
// changed. Writing goes to "<path>.tmp", is flushed with fsync, and is renamed over <path>, so a
// crash at any moment leaves either the old or the new checkpoint.
#pragma once

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <map>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "precis/error.hpp"
#include "precis/format/all.hpp"
#include "precis/tensor/shape.hpp"

namespace precis::optim {

/// A checkpoint that cannot be read or written, or does not match the model: the message names
/// the file and what was expected.
class checkpoint_error : public error {
 public:
  using error::error;
};

namespace detail {

inline constexpr char checkpoint_magic[8] = {'P', 'R', 'E', 'C', 'I', 'S', 'C', 'K'};
inline constexpr char checkpoint_end[8] = {'P', 'R', 'E', 'C', 'I', 'S', 'N', 'D'};
inline constexpr std::uint32_t checkpoint_version = 1;

inline std::uint32_t crc32(const unsigned char* p, std::size_t n) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

template <class T>
std::string dtype_name() {
  if constexpr (std::is_same_v<T, std::int64_t>) return "i64";
  else if constexpr (std::is_same_v<T, std::uint64_t>) return "u64";
  else return std::string(format_traits<T>::name);
}

/// Called after the temporary file is written and flushed, before the rename: tests use it to
/// simulate a crash there (by throwing).
inline void (*checkpoint_before_rename)(const std::string& tmp_path) = nullptr;

}  // namespace detail

/// Builds a checkpoint in memory and writes it atomically.
class checkpoint_writer {
 public:
  // (Constructing bytes_ from the magic, rather than inserting it into an empty vector, also
  // avoids a false -Wstringop-overflow from GCC 12 at -O2.)
  checkpoint_writer() : bytes_(std::begin(detail::checkpoint_magic), std::end(detail::checkpoint_magic)) {
    put<std::uint32_t>(detail::checkpoint_version);
    put<std::uint32_t>(0x01020304u);
    put<std::uint64_t>(0);
  }

  template <class T>
  void add(const std::string& name, const Shape& shape, const T* data) {
    static_assert(std::is_trivially_copyable_v<T>, "checkpoint records hold trivially copyable elements");
    put_string(name);
    put_string(detail::dtype_name<T>());
    put<std::uint32_t>(static_cast<std::uint32_t>(shape.rank()));
    for (index_t e : shape) put<std::uint64_t>(static_cast<std::uint64_t>(e));
    const auto n = static_cast<std::uint64_t>(shape.numel()) * sizeof(T);
    put<std::uint64_t>(n);
    const auto* p = reinterpret_cast<const unsigned char*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
    ++count_;
  }

  /// The finished file: record count patched in, checksum and end magic appended.
  std::vector<unsigned char> finish() const {
    std::vector<unsigned char> out = bytes_;
    std::memcpy(out.data() + 16, &count_, sizeof(count_));
    const std::uint32_t crc = detail::crc32(out.data(), out.size());
    const auto* c = reinterpret_cast<const unsigned char*>(&crc);
    out.insert(out.end(), c, c + 4);
    out.insert(out.end(), std::begin(detail::checkpoint_end), std::end(detail::checkpoint_end));
    return out;
  }

  /// Writes to path + ".tmp", fsyncs it, renames it over path and fsyncs the directory.
  void write(const std::string& path) const {
    const auto bytes = finish();
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw checkpoint_error("precis::checkpoint: cannot create " + tmp + ": " + std::strerror(errno));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        const std::string why = std::strerror(errno);
        ::close(fd);
        ::unlink(tmp.c_str());
        throw checkpoint_error("precis::checkpoint: writing " + tmp + " failed: " + why);
      }
      done += static_cast<std::size_t>(w);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
      const std::string why = std::strerror(errno);
      ::unlink(tmp.c_str());
      throw checkpoint_error("precis::checkpoint: flushing " + tmp + " failed: " + why);
    }
    if (detail::checkpoint_before_rename != nullptr) detail::checkpoint_before_rename(tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      ::unlink(tmp.c_str());
      throw checkpoint_error("precis::checkpoint: renaming " + tmp + " to " + path + " failed: " + why);
    }
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // makes the rename durable; a directory that cannot be opened is not an error
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }

  std::vector<unsigned char> bytes_;
  std::uint64_t count_ = 0;
};

/// A checkpoint read whole and checked: records by name, each with its dtype, shape and bytes.
class checkpoint_reader {
 public:
  struct record {
    std::string dtype;
    Shape shape;
    const unsigned char* data = nullptr;
    std::uint64_t bytes = 0;
  };

  explicit checkpoint_reader(const std::string& path) : path_(path) {
    // a regular file, read up to the size it had when opened: a device or a pipe (/dev/zero)
    // would otherwise be read until memory runs out
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
      fail("it is not a regular file; expected a checkpoint written by save()");
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) fail("cannot open it: " + std::string(std::strerror(errno)));
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) {
      std::fclose(f);
      fail("cannot read its size: " + ec.message());
    }
    bytes_.resize(static_cast<std::size_t>(size));
    const std::size_t got = size == 0 ? 0 : std::fread(bytes_.data(), 1, bytes_.size(), f);
    const bool err = std::ferror(f) != 0;
    std::fclose(f);
    if (err || got != bytes_.size()) fail("reading it failed after " + std::to_string(got) + " of " + std::to_string(size) + " bytes");
    parse();
  }

  const std::string& path() const noexcept { return path_; }
  std::size_t size() const noexcept { return records_.size(); }
  bool contains(const std::string& name) const { return records_.count(name) != 0; }
  /// The names of the records that begin with `prefix`, in byte order.
  std::vector<std::string> names_with_prefix(const std::string& prefix) const {
    std::vector<std::string> out;
    for (auto it = records_.lower_bound(prefix); it != records_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      out.push_back(it->first);
    }
    return out;
  }

  /// Fails unless record `name` exists with dtype T and this shape.
  template <class T>
  void check(const std::string& name, const Shape& shape) const {
    const auto it = records_.find(name);
    if (it == records_.end()) fail("has no record \"" + name + "\"; the model expects one of dtype " + detail::dtype_name<T>() + " and shape " + shape.str());
    const record& r = it->second;
    if (r.dtype != detail::dtype_name<T>() || !(r.shape == shape) ||
        r.bytes != static_cast<std::uint64_t>(shape.numel()) * sizeof(T)) {
      fail("record \"" + name + "\" is " + r.dtype + " " + r.shape.str() + "; the model expects " + detail::dtype_name<T>() + " " + shape.str());
    }
  }
  /// Copies record `name` (checked as by check) into shape.numel() elements at `out`.
  template <class T>
  void copy(const std::string& name, const Shape& shape, T* out) const {
    check<T>(name, shape);
    const record& r = records_.at(name);
    std::memcpy(out, r.data, static_cast<std::size_t>(r.bytes));
  }
  /// Fails unless the file holds exactly `expected` records (a file of another model).
  void expect_count(std::size_t expected) const {
    if (records_.size() != expected) {
      fail("holds " + std::to_string(records_.size()) + " records; the model expects " + std::to_string(expected));
    }
  }

  /// Throws checkpoint_error("precis::checkpoint: <path> <what>"): for the parts of a model
  /// (such as fp8 scaling state) that validate their own records.
  [[noreturn]] void fail(const std::string& what) const {
    throw checkpoint_error("precis::checkpoint: " + path_ + " " + what);
  }

 private:

  template <class T>
  T get(std::size_t& at, std::size_t end, const char* what) const {
    if (end - at < sizeof(T)) fail(std::string("is truncated: it ends inside ") + what);
    T v;
    std::memcpy(&v, bytes_.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string get_string(std::size_t& at, std::size_t end, const char* what) const {
    const auto n = get<std::uint32_t>(at, end, what);
    if (end - at < n) fail(std::string("is truncated: it ends inside ") + what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at), n);
    at += n;
    return s;
  }

  void parse() {
    constexpr std::size_t header = 8 + 4 + 4 + 8, trailer = 4 + 8;
    if (bytes_.size() < header + trailer) {
      fail("has " + std::to_string(bytes_.size()) + " bytes; a checkpoint has at least " + std::to_string(header + trailer));
    }
    if (std::memcmp(bytes_.data(), detail::checkpoint_magic, 8) != 0) fail("is not a precis checkpoint (wrong magic number)");
    if (std::memcmp(bytes_.data() + bytes_.size() - 8, detail::checkpoint_end, 8) != 0) {
      fail("is truncated or damaged (its end marker is missing)");
    }
    const std::size_t end = bytes_.size() - trailer;
    std::uint32_t stored;
    std::memcpy(&stored, bytes_.data() + end, 4);
    if (detail::crc32(bytes_.data(), end) != stored) fail("is damaged: its CRC-32 does not match its contents");
    std::size_t at = 8;
    const auto version = get<std::uint32_t>(at, end, "the header");
    if (version != detail::checkpoint_version) {
      fail("has format version " + std::to_string(version) + "; this precis reads version " + std::to_string(detail::checkpoint_version));
    }
    if (get<std::uint32_t>(at, end, "the header") != 0x01020304u) fail("was written on a machine of the other byte order");
    const auto count = get<std::uint64_t>(at, end, "the header");
    for (std::uint64_t i = 0; i < count; ++i) {
      record r;
      const std::string name = get_string(at, end, "a record name");
      r.dtype = get_string(at, end, "a record dtype");
      const auto rank = get<std::uint32_t>(at, end, "a record rank");
      if (rank > static_cast<std::uint32_t>(max_rank)) fail("record \"" + name + "\" has rank " + std::to_string(rank));
      std::uint64_t elements = 1;
      for (std::uint32_t a = 0; a < rank; ++a) {
        const auto e = get<std::uint64_t>(at, end, "a record shape");
        if (e > (std::uint64_t{1} << 40)) fail("record \"" + name + "\" has an extent of " + std::to_string(e));
        r.shape.push_back(static_cast<index_t>(e));
        elements *= e;
      }
      r.bytes = get<std::uint64_t>(at, end, "a record size");
      if (end - at < r.bytes) fail("is truncated: record \"" + name + "\" needs " + std::to_string(r.bytes) + " bytes");
      if (elements != 0 && r.bytes % elements != 0) fail("record \"" + name + "\" has " + std::to_string(r.bytes) + " bytes for " + std::to_string(elements) + " elements");
      r.data = bytes_.data() + at;
      at += static_cast<std::size_t>(r.bytes);
      if (!records_.emplace(name, r).second) fail("has two records named \"" + name + "\"");
    }
    if (at != end) fail("has " + std::to_string(end - at) + " bytes after its last record");
  }

  std::string path_;
  std::vector<unsigned char> bytes_;
  std::map<std::string, record> records_;
};

}  // namespace precis::optim
