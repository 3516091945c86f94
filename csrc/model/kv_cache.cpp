#include "model/kv_cache.h"

#include <sys/mman.h>

#include <cstring>
#include <new>
#include <utility>

namespace ls {

KvCache::KvCache(int n_layer, int n_seq, int ctx_size, int64_t kv_dim)
    : n_layer_(n_layer), n_seq_(n_seq), kv_dim_(kv_dim), seq_elems_(int64_t(ctx_size) * kv_dim) {
  bytes_ = size_t(n_layer) * 2 * size_t(n_seq) * size_t(seq_elems_) * sizeof(uint16_t);
  if (bytes_ == 0) return;
  // MAP_NORESERVE: reserve address space only; pages are committed (zeroed) on first touch.
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = static_cast<uint16_t*>(p);
}

KvCache::~KvCache() {
  if (base_) munmap(base_, bytes_);
}

void KvCache::swap(KvCache& o) noexcept {
  std::swap(base_, o.base_);
  std::swap(bytes_, o.bytes_);
  std::swap(n_layer_, o.n_layer_);
  std::swap(n_seq_, o.n_seq_);
  std::swap(kv_dim_, o.kv_dim_);
  std::swap(seq_elems_, o.seq_elems_);
}

void KvCache::copy(int src, int dst, int n_pos) {
  if (src == dst || n_pos <= 0) return;
  const size_t n_bytes = size_t(n_pos) * size_t(kv_dim_) * sizeof(uint16_t);
  for (int il = 0; il < n_layer_; ++il) {
    std::memcpy(k(il, dst), k(il, src), n_bytes);
    std::memcpy(v(il, dst), v(il, src), n_bytes);
  }
}

}  // namespace ls
