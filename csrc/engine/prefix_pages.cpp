#include "engine/prefix_pages.h"

#include <algorithm>

#include "model/repack_store.h"

namespace ls::batch {

namespace {
bool has_image(const int32_t* page_key) {
  return std::any_of(page_key, page_key + kKvPagePositions, [](int32_t id) { return id < 0; });
}
}  // namespace

void spill_pages(DiskTier& disk, const KvCache& kv, const int32_t* key, int32_t n, const int32_t* table,
                 const int32_t* wtable) {
  uint64_t h = DiskTier::prefix_hash(key, 0);
  for (int32_t j = 0; (j + 1) * kKvPagePositions <= n; ++j) {
    const int32_t* page_key = key + int64_t(j) * kKvPagePositions;
    if (has_image(page_key)) return;
    h = fnv1a64(page_key, sizeof(int32_t) * kKvPagePositions, h);
    if (disk.contains(h)) continue;
    const int32_t page[kMaxKvGroups] = {table[j], wtable ? wtable[j] : -1};
    if (wtable && page[kKvWindowGroup] < 0) return;
    disk.put(key, (j + 1) * kKvPagePositions, h, kv, page);
  }
}

bool load_pages_from_disk(DiskTier& disk, KvCache& kv, PagePool& pages, WindowPages& wpages, PrefixTree& tree,
                          uint8_t* buf, const int32_t* key, int32_t n_key, int32_t n_full, int32_t* table,
                          int32_t* wtable) {
  const uint64_t before = tree.clock();
  const uint64_t h0 = DiskTier::prefix_hash(key, n_full * kKvPagePositions);
  uint64_t h = h0;
  int32_t j_end = n_full;  // the disk holds pages [n_full, j_end)
  for (; (j_end + 1) * kKvPagePositions <= n_key; ++j_end) {
    const int32_t* page_key = key + int64_t(j_end) * kKvPagePositions;
    if (has_image(page_key)) break;
    h = fnv1a64(page_key, sizeof(int32_t) * kKvPagePositions, h);
    if (!disk.contains(h)) break;
  }
  if (j_end == n_full) return false;
  // Window parts only from the first page the prompt's first computed position reads: the window
  // pool holds a few windows, not a context.
  const int32_t w_from =
      wtable ? first_window_page(std::min(j_end * kKvPagePositions, n_key - 1), wpages.window) : j_end;
  h = h0;
  int32_t j = n_full;
  for (; j < j_end; ++j) {
    h = fnv1a64(key + int64_t(j) * kKvPagePositions, sizeof(int32_t) * kKvPagePositions, h);
    int32_t p = pages.alloc();
    while (p < 0 && tree.evict_one(before)) p = pages.alloc();
    if (p < 0) break;
    const bool windowed = j >= w_from;
    const int32_t wp = windowed ? wpages.alloc(tree, before) : -1;
    if ((windowed && wp < 0) || !disk.get(key, (j + 1) * kKvPagePositions, h, buf)) {
      pages.unref(p);
      if (wp >= 0) wpages.pool.unref(wp);
      break;
    }
    const int32_t page[kMaxKvGroups] = {p, wp};
    kv.write_page(page, buf);
    table[j] = p;
    if (wtable) wtable[j] = wp;
  }
  if (j == n_full) return false;
  tree.insert(key, j * kKvPagePositions, table, LoraSet{}, /*tail=*/false, wtable);  // new nodes take their reference
  for (int32_t k = n_full; k < j; ++k) {
    pages.unref(table[k]);
    if (wtable && wtable[k] >= 0) wpages.pool.unref(wtable[k]);
  }
  std::fill(table, table + j, -1);
  if (wtable) std::fill(wtable, wtable + j, -1);
  return true;
}

int32_t saveable_prefix(PrefixTree& tree, const WindowPages& wpages, const int32_t* key, int32_t n, const LoraSet& lora,
                        std::vector<int32_t>& table, std::vector<int32_t>& wtable) {
  table.assign(size_t(n / kKvPagePositions + 1), -1);
  wtable.assign(table.size(), -1);
  int32_t part_page = -1, part_len = 0, part_wpage = -1;
  const int32_t n_full = tree.match(key, n, lora, table.data(), &part_page, &part_len, wtable.data(), &part_wpage);
  table[size_t(n_full)] = part_page;
  wtable[size_t(n_full)] = part_wpage;
  const int32_t n_tokens = n_full * kKvPagePositions + part_len;
  if (!wpages.on()) return n_tokens;
  return usable_window_prefix(n_tokens, wpages.window, [&](int32_t j) { return wtable[size_t(j)] >= 0; });
}

bool restore_room(const PagePool& pages, const WindowPages& wpages, const PrefixTree& tree, int64_t reserved_full,
                  int64_t reserved_window, int32_t n_ids, int32_t n_pages) {
  if (int64_t(pages.num_free()) + tree.evictable() - reserved_full < n_pages) return false;
  if (!wpages.on()) return true;
  const int32_t n_window = n_pages - std::min(n_pages, first_window_page(n_ids, wpages.window));
  return int64_t(wpages.pool.num_free()) + tree.window_evictable() - reserved_window >= n_window;
}

void restore_pages(KvCache& kv, PagePool& pages, WindowPages& wpages, PrefixTree& tree, const std::vector<int32_t>& ids,
                   const uint8_t* data, int32_t n_pages, size_t page_bytes) {
  const int32_t n_ids = int32_t(ids.size());
  const int32_t w_lo = wpages.on() ? first_window_page(n_ids, wpages.window) : n_pages;  // window parts kept
  std::vector<int32_t> table(static_cast<size_t>(n_pages)), wtable(static_cast<size_t>(n_pages), -1);
  for (int32_t j = 0; j < n_pages; ++j) {
    table[size_t(j)] = pages.alloc();
    while (table[size_t(j)] < 0 && tree.evict_one()) table[size_t(j)] = pages.alloc();
    if (j >= w_lo) wtable[size_t(j)] = wpages.alloc(tree);
    const int32_t page[kMaxKvGroups] = {table[size_t(j)], wtable[size_t(j)]};
    kv.write_page(page, data + size_t(j) * page_bytes);
  }
  // The tree takes its references.
  tree.insert(ids.data(), n_ids, table.data(), LoraSet{}, /*tail=*/true, wtable.data());
  for (int32_t p : table) pages.unref(p);
  for (int32_t p : wtable)
    if (p >= 0) wpages.pool.unref(p);
}

}  // namespace ls::batch
