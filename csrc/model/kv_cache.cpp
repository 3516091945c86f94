#include "model/kv_cache.h"

#include <cstring>
#include <string>

namespace ls {

KvCache::KvCache(int n_layer, int n_page, int64_t kv_dim)
    : KvCache(std::vector<bool>(size_t(n_layer), false), n_page, 0, kv_dim) {}

KvCache::KvCache(const std::vector<bool>& window_layer, int32_t n_page_full, int32_t n_page_window, int64_t kv_dim)
    : n_layer_(int(window_layer.size())), kv_dim_(kv_dim) {
  n_groups_ = n_page_window > 0 ? 2 : 1;
  n_page_[kKvFullGroup] = n_page_full;
  n_page_[kKvWindowGroup] = n_groups_ == 2 ? n_page_window : 0;
  layer_group_.resize(size_t(n_layer_));
  layer_off_.resize(size_t(n_layer_));
  int64_t off = 0;
  for (int il = 0; il < n_layer_; ++il) {
    const int g = n_groups_ == 2 && window_layer[size_t(il)] ? kKvWindowGroup : kKvFullGroup;
    layer_group_[size_t(il)] = uint8_t(g);
    ++n_group_layers_[g];
    layer_off_[size_t(il)] = off;
    off += 2 * layer_elems(il);
  }
  cells_ = LazyArray<uint16_t>(size_t(off));
}

void KvCache::copy_page(int g, int32_t src, int32_t dst, int n_pos) {
  if (src == dst || n_pos <= 0) return;
  const size_t n_bytes = size_t(n_pos) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int il = 0; il < n_layer_; ++il) {
    if (group(il) != g) continue;
    std::memcpy(k_row(il, dst, 0), k_row(il, src, 0), n_bytes);
    std::memcpy(v_row(il, dst, 0), v_row(il, src, 0), n_bytes);
  }
}

void KvCache::read_page(const int32_t* page, uint8_t* dst) const {
  const size_t n_bytes = size_t(kKvPagePositions) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int il = 0; il < n_layer_; ++il) {
    if (page[group(il)] < 0) {  // a window part no longer held: zeros (the reader knows)
      std::memset(dst, 0, 2 * n_bytes);
      dst += 2 * n_bytes;
      continue;
    }
    const int64_t at = layer_off_[size_t(il)] + int64_t(page[group(il)]) * kKvPagePositions * kv_dim_;
    std::memcpy(dst, cells_.data() + at, n_bytes);  // K, then V
    std::memcpy(dst + n_bytes, cells_.data() + at + layer_elems(il), n_bytes);
    dst += 2 * n_bytes;
  }
}

void KvCache::write_page(const int32_t* page, const uint8_t* src) {
  const size_t n_bytes = size_t(kKvPagePositions) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int il = 0; il < n_layer_; ++il) {
    if (page[group(il)] < 0) {
      src += 2 * n_bytes;
      continue;
    }
    const int64_t at = layer_off_[size_t(il)] + int64_t(page[group(il)]) * kKvPagePositions * kv_dim_;
    std::memcpy(cells_.data() + at, src, n_bytes);
    std::memcpy(cells_.data() + at + layer_elems(il), src + n_bytes, n_bytes);
    src += 2 * n_bytes;
  }
}

std::string KvCache::layout_key() const {
  return "kv=f16;page_positions=" + std::to_string(kKvPagePositions) + ";n_layer=" + std::to_string(n_layer_) +
         ";kv_dim=" + std::to_string(kv_dim_);
}

}  // namespace ls
