// PrefixTree: cached K/V pages keyed by the token ids they hold — a radix tree whose edges are
// whole pages of kKvPagePositions key ids (engine/batch_engine.cpp's prompt_key: prompt ids, an
// image's positions as ids derived from its content hash), one tree per adapter set (LoraSet
// serials and scales: K/V computed under other adapters differ).
//
// A node is one page: its K/V are those of its key ids after exactly the key ids of its ancestors,
// and a finished sequence's last, partly filled page is a leaf of fewer key ids (matched only
// partially: a sequence copies such a page's first positions, never maps it). Node pages are
// never written again: the engine caches a running sequence's pages only below its position.
// under its root's adapters — the same bits a fresh prefill computes (kernels are batch-invariant
// and the page layout never changes a result), so any sequence whose prompt starts with a node's
// path may map the node's page instead of computing it. The tree holds one reference on each
// node's page (engine/page_pool.h); sequences mapping it hold their own.
//
// Invariant: a running sequence that maps a node's page maps every ancestor's page too, so the
// pages only the tree holds are whole subtrees and all of them can be evicted, leaves first (the
// engine's admission counts on it). Eviction takes the least recently used such leaf (a match
// or insert touches its whole path, so a parent is never older than its children).
//
// Window pages (model/kv_cache.h's window group, for sliding-window layers): a node may also
// hold its page of the window group — while a sequence that cached it still held it then. A
// cached prefix is usable only as far as window pages cover the window before its end (the
// engine decides, engine/window_pages.h); a node's window page can be dropped alone, leaving
// its full page (evict_window_one), and goes with the node when the node is evicted.
//
// Memory: nodes and child lists are allocated when pages are cached (admission, the end of a
// prefill, the end of a sequence), never per decoded token. Not thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/page_pool.h"
#include "model/kv_cache.h"
#include "model/lora.h"

namespace ls {

// The prefix cache's figures (STATS wire and /metrics keep the names of the copy-based prompt
// cache they replace): the cache proper is the pages only the tree holds, within a budget.
struct PromptCacheStats {
  int64_t bytes_used = 0;    // pages only the tree holds, beyond the last num_slots ended sequences'
  int64_t max_bytes = 0;     // their budget (BatchEngineOptions::prompt_cache_bytes; whole pages of it are used)
  int32_t entries = 0;       // pages the tree holds, shared with running sequences or not
  uint64_t hits = 0;         // prompts that mapped at least a page's worth of cached positions
  uint64_t hit_tokens = 0;   // prompt positions those hits did not prefill
  uint64_t stores = 0;       // pages cached
  uint64_t evictions = 0;    // cached pages dropped to free their memory
  int32_t pages_total = 0, pages_free = 0;
  // The window group's pool (sliding-window layers; zeros when the model keeps one group).
  int32_t window_pages_total = 0, window_pages_free = 0;
  // The disk tier (engine/disk_tier.h; zeros without a prefix-cache dir): pages read back into
  // the tree, pages written, and the bytes of this model's page files within their budget.
  uint64_t disk_reads = 0, disk_writes = 0;
  int64_t disk_bytes_used = 0, disk_max_bytes = 0;
};

class PrefixTree {
 public:
  PrefixTree() = default;
  // wpool: the window group's pool (null: the model has one group).
  explicit PrefixTree(PagePool* pool, PagePool* wpool = nullptr) : pool_(pool), wpool_(wpool) {}

  // The longest cached run of whole pages matching key[0, n) under lora: writes their pages to
  // pages[] (at most n / kKvPagePositions) and returns how many. *partial_page / *partial_len: the
  // child of the last matched node sharing the longest run 0 < k < P of the next key ids (-1 / 0
  // if none) — worth copying its first k positions. Touches the matched path; takes no references.
  // wpages (with a window pool): the same nodes' window pages (-1 where not held), and
  // *partial_wpage the partial child's.
  int32_t match(const int32_t* key, int32_t n, const LoraSet& lora, int32_t* pages, int32_t* partial_page,
                int32_t* partial_len, int32_t* wpages = nullptr, int32_t* partial_wpage = nullptr);
  // Caches the pages of a sequence's first n key ids: pages[j] holds key[j·P, min(n, (j+1)·P)).
  // Whole pages always; the partly filled last one only with `tail` (the sequence has ended and
  // writes it no more). Where the tree already holds an equal whole page, pages[j] is switched to
  // it (the caller's hold moves from its page to the cached one: same bits, and the invariant
  // above holds). New nodes take a reference. Returns the pages newly cached.
  // wpages (with a window pool): the window pages of the same positions, -1 where the sequence no
  // longer holds one; a node without a window page takes the caller's, and where it has one the
  // caller's entry is switched to it like pages[j].
  int32_t insert(const int32_t* key, int32_t n, int32_t* pages, const LoraSet& lora, bool tail,
                 int32_t* wpages = nullptr);
  // Frees the least recently used cached page no sequence maps (a leaf) and last used before
  // `before` (a clock() value); false when none.
  bool evict_one(uint64_t before = UINT64_MAX);
  int32_t evictable(uint64_t before = UINT64_MAX) const;  // pages only the tree holds, last used before `before`
  // The window group: drops the window page of the least recently used node whose window page
  // only the tree holds (its full page stays); false when none. window_evictable counts them.
  bool evict_window_one(uint64_t before = UINT64_MAX);
  int32_t window_evictable(uint64_t before = UINT64_MAX) const;
  uint64_t clock() const { return clock_; }  // the latest match or insert
  int32_t num_cached() const { return num_cached_; }
  uint64_t evictions() const { return evictions_; }
  uint64_t stores() const { return stores_; }

 private:
  struct Node {
    int32_t parent = -1, page = -1;  // root: page -1
    int32_t wpage = -1;              // its window-group page, -1 when not held
    int32_t n_key = 0;               // kKvPagePositions, or fewer for a finished sequence's last page
    int32_t key[kKvPagePositions];
    std::vector<int32_t> children;
    uint64_t last_used = 0;
    bool live = false;
  };
  int32_t root(const LoraSet& lora, bool create);
  int32_t child(int32_t node, const int32_t* key) const;  // the child holding exactly key[0, P), or -1
  int32_t new_node();

  PagePool* pool_ = nullptr;
  PagePool* wpool_ = nullptr;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  std::vector<std::pair<LoraSet, int32_t>> roots_;
  uint64_t clock_ = 0, evictions_ = 0, stores_ = 0;
  int32_t num_cached_ = 0;
};

}  // namespace ls
