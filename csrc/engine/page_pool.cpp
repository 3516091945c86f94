#include "engine/page_pool.h"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace ls {

PagePool::PagePool(int32_t n_pages, uint64_t shuffle_seed) : refs_(size_t(std::max(n_pages, 0)), 0) {
  free_.reserve(refs_.size());
  for (int32_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);  // page 0 first
  if (shuffle_seed) std::shuffle(free_.begin(), free_.end(), std::mt19937_64(shuffle_seed));
}

int32_t PagePool::alloc() {
  if (free_.empty()) return -1;
  const int32_t p = free_.back();
  free_.pop_back();
  refs_[size_t(p)] = 1;
  return p;
}

void PagePool::unref(int32_t page) {
  int32_t& r = refs_[size_t(page)];
  if (r <= 0) throw std::logic_error("PagePool::unref of a free page");
  if (--r == 0) free_.push_back(page);
}

}  // namespace ls
