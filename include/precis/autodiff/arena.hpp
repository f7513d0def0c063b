// precis::Arena: the bump allocator behind a tape. Every value, gradient and saved tensor of
// one training step is carved from it; reset() rewinds it for the next step. When a step
// needed more than the first block, reset() replaces the blocks by one block big enough for
// the whole step, so from the second step on a step of the same shape allocates nothing.
// Blocks come from precis's host allocator (64-byte aligned; blocks of 2 MiB or more on
// transparent huge pages where the system has them: tensor/detail/host_memory.hpp), or from a
// block_source the caller names (pinned memory, or memory a test watches).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include "precis/tensor/detail/host_memory.hpp"

namespace precis {

/// Where an Arena's blocks come from: allocate(bytes) returns memory aligned to at least 64
/// bytes (or throws), release(p, bytes) gives it back. Null members: precis's host allocator.
struct arena_block_source {
  void* (*allocate)(std::size_t bytes) = nullptr;
  void (*release)(void* p, std::size_t bytes) noexcept = nullptr;
};

class Arena {
 public:
  static constexpr std::size_t alignment = 64;

  using block_source = arena_block_source;

  Arena() = default;
  explicit Arena(std::size_t initial_bytes, block_source source = {}) : source_(source) { reserve(initial_bytes); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&&) noexcept = default;
  Arena& operator=(Arena&&) noexcept = default;

  /// `bytes` of uninitialized memory on a 64-byte boundary, valid until reset().
  void* allocate(std::size_t bytes) {
    bytes = round_up(std::max<std::size_t>(bytes, 1));
    if (current_ < blocks_.size() && blocks_[current_].used + bytes > blocks_[current_].size) {
      ++current_;  // later blocks (if any) are empty: a rewound arena reuses them in order
      while (current_ < blocks_.size() && bytes > blocks_[current_].size) ++current_;
    }
    if (current_ >= blocks_.size()) {
      const std::size_t last = blocks_.empty() ? 0 : blocks_.back().size;
      add_block(std::max({bytes, 2 * last, std::size_t{1} << 16}));
      current_ = blocks_.size() - 1;
    }
    Block& b = blocks_[current_];
    void* p = b.data.get() + b.used;
    b.used += bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return p;
  }

  /// n uninitialized objects of type T. A trivially copyable T (float, and the 16-bit formats,
  /// whose default constructors write zeros) is an implicit-lifetime type: its objects begin to
  /// exist in the storage without a constructor call, so nothing is written here (zeroing a
  /// value that is about to be written cost a memset per 16-bit value and gradient).
  template <class T>
  T* allocate_array(std::size_t n) {
    static_assert(std::is_trivially_destructible_v<T>, "precis::Arena holds trivially destructible types only");
    T* p = static_cast<T*>(allocate(n * sizeof(T)));
    if constexpr (!std::is_trivially_default_constructible_v<T> && !std::is_trivially_copyable_v<T>) {
      std::uninitialized_default_construct_n(p, n);
    }
    return p;
  }

  /// Forgets every allocation. If the step spilled into more than one block, the blocks are
  /// replaced by one block of the largest step seen, so the next step of that size fits (and
  /// the doubling growth of the first step is not kept).
  void reset() {
    if (blocks_.size() > 1) {
      blocks_.clear();
      add_block(peak_);
    }
    for (Block& b : blocks_) b.used = 0;
    current_ = 0;
    in_use_ = 0;
  }

  /// Makes sure the first `bytes` of a step need no further allocation.
  void reserve(std::size_t bytes) {
    if (capacity() >= bytes) return;
    blocks_.clear();
    add_block(round_up(bytes));
    current_ = 0;
    in_use_ = 0;
  }

  /// Bytes handed out since the last reset.
  std::size_t bytes_in_use() const noexcept { return in_use_; }
  /// Largest bytes_in_use() seen over the arena's life.
  std::size_t peak_bytes() const noexcept { return peak_; }
  /// Bytes held from the system.
  std::size_t capacity() const noexcept {
    std::size_t c = 0;
    for (const Block& b : blocks_) c += b.size;
    return c;
  }

 private:
  struct Free {
    block_source source;
    std::size_t size = 0;
    void operator()(std::byte* p) const noexcept {
      if (source.release != nullptr) source.release(p, size);
      else detail::release_host(p, size);
    }
  };
  struct Block {
    std::unique_ptr<std::byte[], Free> data;
    std::size_t size = 0;
    std::size_t used = 0;
  };

  static std::size_t round_up(std::size_t n) { return (n + alignment - 1) / alignment * alignment; }

  void add_block(std::size_t size) {
    blocks_.reserve(blocks_.size() + 1);  // before the block exists: nothing to leak if this throws
    auto* p = static_cast<std::byte*>(source_.allocate != nullptr ? source_.allocate(size)
                                                                  : detail::allocate_host(size));
    blocks_.push_back(Block{std::unique_ptr<std::byte[], Free>(p, Free{source_, size}), size, 0});
  }

  block_source source_;
  std::vector<Block> blocks_;
  std::size_t current_ = 0;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace precis
