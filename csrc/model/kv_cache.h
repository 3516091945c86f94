// The KV cache of all layers as pools of fixed-size pages, IEEE fp16 (llama.cpp's F16 cache type).
//
// Page groups: a model whose sliding-window layers (Gemma 3's local layers) read only the last
// `window` positions may keep those layers' K/V in a group of its own (group 1, "window"), so a
// long sequence holds whole-context pages only for its global layers (group 0, "full") and a
// window's worth for the others. Each group has its own page ids; page p of group g holds
// kKvPagePositions positions of every layer of that group. A model without sliding layers (or
// whose caller keeps one group) has group 0 only, covering every layer: the layout and bits of a
// single pool.
//
// Layout, in uint16_t elements: per layer il in order, [K, V][n_page(group(il))][kKvPagePositions]
// [kv_dim], one LazyArray: a lane with a large pool starts instantly and holds resident only the
// pages that were written. Which pages hold a sequence's positions is its page table per group
// (ModelRuntime::page_table); who owns a page (refcounts, the prefix tree) is the engine's business
// (engine/page_pool.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/lazy_array.h"

namespace ls {

// Positions per page. Divides kAttnChunkPositions (512), so a causal token's softmax chunks start
// on page boundaries. 64: the smallest size whose attention cost per layer stayed within the noise
// of a contiguous cache (benchmarks/README.md: 16 and 32 cost up to 1.5×, each page being its own
// kernel call); smaller pages would share prefixes more finely (a partly shared page is copied).
constexpr int kKvPagePositions = 64;

constexpr int kKvFullGroup = 0, kKvWindowGroup = 1, kMaxKvGroups = 2;

class KvCache {
 public:
  KvCache() = default;
  // One group of n_page pages holding every layer. Throws std::bad_alloc when the address space
  // cannot be reserved.
  KvCache(int n_layer, int n_page, int64_t kv_dim);
  // window_layer[il]: layer il's K/V live in the window group (n_page_window pages) rather than
  // the full group (n_page_full pages). n_page_window 0: one group, every layer in it.
  KvCache(const std::vector<bool>& window_layer, int32_t n_page_full, int32_t n_page_window, int64_t kv_dim);

  // Page 0 of layer il's K (or V): [n_page(group(il))][kKvPagePositions][kv_dim].
  uint16_t* k(int il) { return cells_.data() + layer_off_[size_t(il)]; }
  uint16_t* v(int il) { return k(il) + layer_elems(il); }
  // Row of position `slot` (< kKvPagePositions) of page `page` (of il's group) in layer il's K (or V).
  uint16_t* k_row(int il, int32_t page, int slot) { return k(il) + (int64_t(page) * kKvPagePositions + slot) * kv_dim_; }
  uint16_t* v_row(int il, int32_t page, int slot) { return v(il) + (int64_t(page) * kKvPagePositions + slot) * kv_dim_; }
  int group(int il) const { return layer_group_[size_t(il)]; }
  int n_groups() const { return n_groups_; }
  int32_t n_page(int g = kKvFullGroup) const { return n_page_[g]; }
  size_t bytes() const { return cells_.bytes(); }
  int64_t bytes_per_pos() const { return int64_t(n_layer_) * 2 * kv_dim_ * int64_t(sizeof(uint16_t)); }
  // One page of group g (its layers only); every layer's when the model has one group.
  int64_t group_bytes_per_page(int g) const { return int64_t(n_group_layers_[g]) * 2 * kv_dim_ * kKvPagePositions * 2; }
  // A position's page in every group: what a page file holds (read_page / write_page).
  int64_t bytes_per_page() const { return bytes_per_pos() * kKvPagePositions; }

  // Copies the first n_pos positions (≤ kKvPagePositions) of page src to page dst of group g.
  void copy_page(int g, int32_t src, int32_t dst, int n_pos);
  // The positions of a page as bytes_per_page() bytes laid out [n_layer][K, V][kKvPagePositions]
  // [kv_dim] fp16 (each layer from its group's page: page[g]), copied out to dst / in from src
  // (the prefix cache's disk tier, engine/disk_tier.h). The same bytes whatever the grouping.
  // page[g] < 0: that group's layers read as zeros / are not written.
  void read_page(const int32_t* page, uint8_t* dst) const;
  void write_page(const int32_t* page, const uint8_t* src);
  // n_layer, kv_dim and the element type: what a page's bytes mean (keys of files holding pages).
  std::string layout_key() const;

 private:
  int64_t layer_elems(int il) const { return int64_t(n_page_[layer_group_[size_t(il)]]) * kKvPagePositions * kv_dim_; }

  LazyArray<uint16_t> cells_;
  int n_layer_ = 0, n_groups_ = 1;
  int32_t n_page_[kMaxKvGroups] = {0, 0};
  int n_group_layers_[kMaxKvGroups] = {0, 0};
  int64_t kv_dim_ = 0;
  std::vector<uint8_t> layer_group_;  // [n_layer] group of each layer
  std::vector<int64_t> layer_off_;    // [n_layer] element offset of each layer's K
};

}  // namespace ls
