// PagePool: who holds each K/V page of a lane (model/kv_cache.h) — a refcount per page and a free
// list. A page is held by every running sequence whose page table maps it and by the prefix tree
// (engine/prefix_tree.h) when it caches it; it is free when nobody does. A page with more than one
// holder is read-only: the engine writes only pages its sequence holds alone (copy-on-write).
//
// Free pages are reused last-freed first, so a lane's resident memory stays near its peak use
// rather than spreading over the whole reservation. Sized once; nothing is allocated afterwards.
// Not thread-safe: the engine's one thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ls {

class PagePool {
 public:
  PagePool() = default;
  // shuffle_seed ≠ 0: the free list starts in a seeded random order (tests: any page layout
  // must give the same bits as any other).
  explicit PagePool(int32_t n_pages, uint64_t shuffle_seed = 0);

  int32_t alloc();  // a free page with one holder, or -1 when none is free
  void ref(int32_t page) { ++refs_[size_t(page)]; }
  void unref(int32_t page);  // the last holder frees it
  int32_t refs(int32_t page) const { return refs_[size_t(page)]; }
  int32_t num_pages() const { return int32_t(refs_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }

 private:
  std::vector<int32_t> refs_;  // [n_pages] holders of each page
  std::vector<int32_t> free_;  // stack of free pages (capacity n_pages)
};

}  // namespace ls
