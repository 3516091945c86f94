// Moves of cached K/V pages between a lane's pools, its prefix tree and files (the disk tier,
// slot files), for engine/batch_engine.cpp. Every function takes the page tables of both groups:
// wtable is the window group's (engine/window_pages.h), null when the model keeps one group.
// Control paths (admission, a sequence's end, slot files), not the token loop.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/disk_tier.h"
#include "engine/page_pool.h"
#include "engine/prefix_tree.h"
#include "engine/window_pages.h"
#include "model/kv_cache.h"

namespace ls::batch {

// The whole pages of key[0, n) (held in table / wtable) not on disk yet go there, up to the first
// page holding an image position (negative ids) or whose window part is no longer held. The
// hash of each page's prefix grows page by page (fnv1a64 streams: it equals DiskTier::prefix_hash).
void spill_pages(DiskTier& disk, const KvCache& kv, const int32_t* key, int32_t n, const int32_t* table,
                 const int32_t* wtable);

// A base-model prompt's cached prefix ends after n_full whole pages: the following whole pages
// the disk tier holds are read into fresh pages (through buf, page_bytes) and cached in the tree
// (as if computed here). Only pages last used before this call are evicted for room, so the
// matched ones stay. table / wtable: scratch past n_full, left -1. Returns whether any page loaded.
bool load_pages_from_disk(DiskTier& disk, KvCache& kv, PagePool& pages, WindowPages& wpages, PrefixTree& tree,
                          uint8_t* buf, const int32_t* key, int32_t n_key, int32_t n_full, int32_t* table,
                          int32_t* wtable);

// The cached prefix of key[0, n) a slot file can carry: its pages to table / wtable (sized n / P
// + 1) and its length; with a window group only as far as the window before the end is held
// (earlier window parts are written as zeros; restore_pages() maps only that last window's).
int32_t saveable_prefix(PrefixTree& tree, const WindowPages& wpages, const int32_t* key, int32_t n, const LoraSet& lora,
                        std::vector<int32_t>& table, std::vector<int32_t>& wtable);

// A slot file's pages (data: n_pages × page_bytes) into fresh pages cached in the tree under
// ids. The caller checked there is room (restore_room).
void restore_pages(KvCache& kv, PagePool& pages, WindowPages& wpages, PrefixTree& tree, const std::vector<int32_t>& ids,
                   const uint8_t* data, int32_t n_pages, size_t page_bytes);
// Whether both pools can give restore_pages() its pages beside what running sequences may still
// take (reserved_full, and the window pages window_reserved counts).
bool restore_room(const PagePool& pages, const WindowPages& wpages, const PrefixTree& tree, int64_t reserved_full,
                  int64_t reserved_window, int32_t n_ids, int32_t n_pages);

}  // namespace ls::batch
