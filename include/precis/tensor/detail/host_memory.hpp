// Host memory for tensors, GEMM scratch and tape arenas: 64-byte-aligned blocks, and blocks of
// 2 MiB or more on 2 MiB boundaries with their whole 2 MiB pages marked for transparent huge
// pages (Linux: madvise(MADV_HUGEPAGE), which the kernel's "madvise" mode, the default of many
// distributions, requires).
//
// Why: a GEMM over large operands touches more 4 KiB pages than the TLB holds, and every pass
// over C walks them again; in a virtual machine each walk is two-dimensional (up to 24 memory
// references where a native one makes 4). On 2048 x 2048 fp32 operands huge pages made
// precis's GEMM 1-4% faster on a 2-core KVM guest (docs/benchmarks.md). Only the whole 2 MiB
// pages inside a block are marked, so a block written whole holds no more physical memory than
// its bytes rounded up to 4 KiB; one written in part (an arena block), at most one 2 MiB page
// more. The alignment is a function of the size alone, so a block is freed with the alignment
// it was allocated with.
//
// PRECIS_HUGE_PAGES=off (read at the first large allocation) leaves every block on 4 KiB
// pages; `on` is the default.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "precis/error.hpp"

namespace precis::detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

/// The alignment of a host block of `bytes` bytes: 2 MiB from 2 MiB up, 64 bytes below.
constexpr std::size_t host_alignment(std::size_t bytes) noexcept { return bytes >= huge_page_bytes ? huge_page_bytes : 64; }

inline bool huge_pages_from_env() {
  const char* e = std::getenv("PRECIS_HUGE_PAGES");
  if (e == nullptr || std::string(e) == "on") return true;
  if (std::string(e) == "off") return false;
  throw invalid_argument("precis: PRECIS_HUGE_PAGES=\"" + std::string(e) + "\"; expected on or off");
}

/// Whether large host blocks ask for transparent huge pages (PRECIS_HUGE_PAGES).
inline bool huge_pages_in_use() {
  static const bool on = huge_pages_from_env();
  return on;
}

/// `bytes` (> 0) of uninitialized host memory aligned to host_alignment(bytes); throws
/// std::bad_alloc as operator new does. Free it with release_host(p, bytes).
inline void* allocate_host(std::size_t bytes) {
  const std::size_t align = host_alignment(bytes);
  [[maybe_unused]] const bool mark = align == huge_page_bytes && huge_pages_in_use();  // may throw: before the allocation
  void* p = ::operator new(bytes, std::align_val_t{align});
#if defined(__linux__)
  // A hint: where the kernel has no transparent huge pages, or refuses, the block keeps 4 KiB
  // pages and nothing else changes. Marked before the first touch, which is what places pages.
  if (mark) static_cast<void>(::madvise(p, bytes / huge_page_bytes * huge_page_bytes, MADV_HUGEPAGE));
#endif
  return p;
}

/// Frees a block from allocate_host(bytes).
inline void release_host(void* p, std::size_t bytes) noexcept { ::operator delete(p, std::align_val_t{host_alignment(bytes)}); }

}  // namespace precis::detail
