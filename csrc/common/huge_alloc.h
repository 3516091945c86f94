// Buffers streamed once per token (repacked weights, LoRA halves), on 2 MiB transparent huge
// pages: with 4 KiB pages every page of a stream costs a TLB miss (measured ~4% of 1B decode).
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace ls {

constexpr size_t kHugePageBytes = size_t(2) << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using FreeBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;  // from aligned_alloc / alloc_huge

// bytes rounded up to whole huge pages, 2 MiB-aligned, uninitialised; release with std::free.
inline uint8_t* alloc_huge(size_t bytes) {
  const size_t alloc_bytes = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, alloc_bytes ? alloc_bytes : kHugePageBytes));
  if (!p) throw std::bad_alloc();
  madvise(p, alloc_bytes, MADV_HUGEPAGE);  // advice only: without THP it stays 4 KiB pages
  return p;
}

}  // namespace ls
