#include "model/kv_cache.h"

#include <cstring>
#include <string>

namespace ls {

KvCache::KvCache(int n_layer, int n_page, int64_t kv_dim)
    : cells_(size_t(n_layer) * 2 * size_t(n_page) * kKvPagePositions * size_t(kv_dim)),
      n_layer_(n_layer), n_page_(n_page), kv_dim_(kv_dim), layer_elems_(int64_t(n_page) * kKvPagePositions * kv_dim) {}

void KvCache::copy_page(int32_t src, int32_t dst, int n_pos) {
  if (src == dst || n_pos <= 0) return;
  const size_t n_bytes = size_t(n_pos) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int il = 0; il < n_layer_; ++il) {
    std::memcpy(k_row(il, dst, 0), k_row(il, src, 0), n_bytes);
    std::memcpy(v_row(il, dst, 0), v_row(il, src, 0), n_bytes);
  }
}

void KvCache::read_page(int32_t page, uint8_t* dst) const {
  const size_t n_bytes = size_t(kKvPagePositions) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int64_t half = 0; half < int64_t(n_layer_) * 2; ++half, dst += n_bytes)  // layer il's K, then its V
    std::memcpy(dst, cells_.data() + half * layer_elems_ + int64_t(page) * kKvPagePositions * kv_dim_, n_bytes);
}

void KvCache::write_page(int32_t page, const uint8_t* src) {
  const size_t n_bytes = size_t(kKvPagePositions) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int64_t half = 0; half < int64_t(n_layer_) * 2; ++half, src += n_bytes)
    std::memcpy(cells_.data() + half * layer_elems_ + int64_t(page) * kKvPagePositions * kv_dim_, src, n_bytes);
}

std::string KvCache::layout_key() const {
  return "kv=f16;page_positions=" + std::to_string(kKvPagePositions) + ";n_layer=" + std::to_string(n_layer_) +
         ";kv_dim=" + std::to_string(kv_dim_);
}

}  // namespace ls
