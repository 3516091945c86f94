// The KV cache of all layers and sequence slots, as IEEE fp16 (llama.cpp's F16 cache type).
//
// Layout, in uint16_t elements: [n_layer][2 (K, V)][n_seq][ctx_size][kv_dim], one LazyArray:
// a lane with many slots and a long context starts instantly and holds resident only the
// positions that were written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/lazy_array.h"

namespace ls {

class KvCache {
 public:
  KvCache() = default;
  // Throws std::bad_alloc when the address space cannot be reserved.
  KvCache(int n_layer, int n_seq, int ctx_size, int64_t kv_dim);

  // Start of layer il's K (or V) rows of sequence seq: [ctx_size][kv_dim].
  uint16_t* k(int il, int seq) { return cells_.data() + (int64_t(il) * 2 * n_seq_ + seq) * seq_elems_; }
  uint16_t* v(int il, int seq) { return cells_.data() + (int64_t(il) * 2 * n_seq_ + n_seq_ + seq) * seq_elems_; }
  // Elements from one sequence's rows to the next within a layer's K (or V): ctx_size·kv_dim.
  int64_t seq_stride_elems() const { return seq_elems_; }
  size_t bytes() const { return cells_.bytes(); }

  // Copies positions [0, n_pos) of every layer's K and V from sequence src to dst.
  void copy(int src, int dst, int n_pos);
  // Positions [0, n_pos) of sequence seq to / from a buffer laid out [n_layer][2 (K, V)][n_pos][kv_dim]
  // (n_pos * bytes_per_pos() bytes): a prompt's K/V kept outside the cache (engine/prompt_cache.h).
  void save(int seq, int n_pos, uint16_t* out);
  void load(int seq, int n_pos, const uint16_t* in);
  int64_t bytes_per_pos() const { return int64_t(n_layer_) * 2 * kv_dim_ * int64_t(sizeof(uint16_t)); }

 private:
  LazyArray<uint16_t> cells_;
  int n_layer_ = 0, n_seq_ = 0;
  int64_t kv_dim_ = 0, seq_elems_ = 0;
};

}  // namespace ls
