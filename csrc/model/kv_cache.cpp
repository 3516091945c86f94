#include "model/kv_cache.h"

#include <cstring>

namespace ls {

KvCache::KvCache(int n_layer, int n_seq, int ctx_size, int64_t kv_dim)
    : cells_(size_t(n_layer) * 2 * size_t(n_seq) * size_t(ctx_size) * size_t(kv_dim)),
      n_layer_(n_layer), n_seq_(n_seq), kv_dim_(kv_dim), seq_elems_(int64_t(ctx_size) * kv_dim) {}

void KvCache::copy(int src, int dst, int n_pos) {
  if (src == dst || n_pos <= 0) return;
  const size_t n_bytes = size_t(n_pos) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int il = 0; il < n_layer_; ++il) {
    std::memcpy(k(il, dst), k(il, src), n_bytes);
    std::memcpy(v(il, dst), v(il, src), n_bytes);
  }
}

void KvCache::save(int seq, int n_pos, uint16_t* out) {
  const size_t n_elems = size_t(n_pos) * size_t(kv_dim_);
  for (int il = 0; il < n_layer_; ++il) {
    std::memcpy(out, k(il, seq), n_elems * sizeof(uint16_t));
    std::memcpy(out + n_elems, v(il, seq), n_elems * sizeof(uint16_t));
    out += 2 * n_elems;
  }
}

void KvCache::load(int seq, int n_pos, const uint16_t* in) {
  const size_t n_elems = size_t(n_pos) * size_t(kv_dim_);
  for (int il = 0; il < n_layer_; ++il) {
    std::memcpy(k(il, seq), in, n_elems * sizeof(uint16_t));
    std::memcpy(v(il, seq), in + n_elems, n_elems * sizeof(uint16_t));
    in += 2 * n_elems;
  }
}

}  // namespace ls
