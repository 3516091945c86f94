// The KV cache of all layers as a pool of fixed-size pages, IEEE fp16 (llama.cpp's F16 cache type).
//
// Layout, in uint16_t elements: [n_layer][2 (K, V)][n_page][kKvPagePositions][kv_dim], one
// LazyArray: a lane with a large pool starts instantly and holds resident only the pages that were
// written. Which pages hold a sequence's positions is its page table (ModelRuntime::page_table);
// who owns a page (refcounts, the prefix tree) is the engine's business (engine/page_pool.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/lazy_array.h"

namespace ls {

// Positions per page. Divides kAttnChunkPositions (512), so a causal token's softmax chunks start
// on page boundaries. 64: the smallest size whose attention cost per layer stayed within the noise
// of a contiguous cache (benchmarks/README.md: 16 and 32 cost up to 1.5×, each page being its own
// kernel call); smaller pages would share prefixes more finely (a partly shared page is copied).
constexpr int kKvPagePositions = 64;

class KvCache {
 public:
  KvCache() = default;
  // Throws std::bad_alloc when the address space cannot be reserved.
  KvCache(int n_layer, int n_page, int64_t kv_dim);

  // Page 0 of layer il's K (or V): [n_page][kKvPagePositions][kv_dim].
  uint16_t* k(int il) { return cells_.data() + int64_t(il) * 2 * layer_elems_; }
  uint16_t* v(int il) { return cells_.data() + (int64_t(il) * 2 + 1) * layer_elems_; }
  // Row of position `slot` (< kKvPagePositions) of page `page` in layer il's K (or V).
  uint16_t* k_row(int il, int32_t page, int slot) { return k(il) + (int64_t(page) * kKvPagePositions + slot) * kv_dim_; }
  uint16_t* v_row(int il, int32_t page, int slot) { return v(il) + (int64_t(page) * kKvPagePositions + slot) * kv_dim_; }
  int32_t n_page() const { return n_page_; }
  size_t bytes() const { return cells_.bytes(); }
  int64_t bytes_per_pos() const { return int64_t(n_layer_) * 2 * kv_dim_ * int64_t(sizeof(uint16_t)); }
  int64_t bytes_per_page() const { return bytes_per_pos() * kKvPagePositions; }

  // Copies the first n_pos positions (≤ kKvPagePositions) of page src to page dst, every layer.
  void copy_page(int32_t src, int32_t dst, int n_pos);
  // A whole page, every layer, as bytes_per_page() bytes laid out [n_layer][K, V][kKvPagePositions][kv_dim]
  // fp16: copied out to dst / in from src (the prefix cache's disk tier, engine/disk_tier.h).
  void read_page(int32_t page, uint8_t* dst) const;
  void write_page(int32_t page, const uint8_t* src);
  // n_layer, kv_dim and the element type: what a page's bytes mean (keys of files holding pages).
  std::string layout_key() const;

 private:
  LazyArray<uint16_t> cells_;
  int n_layer_ = 0;
  int32_t n_page_ = 0;
  int64_t kv_dim_ = 0, layer_elems_ = 0;  // layer_elems_: one layer's K (or V), n_page·P·kv_dim
};

}  // namespace ls
