// Standalone checks of the window page group's bookkeeping (csrc/engine/window_pages.h and the
// window pages of csrc/engine/prefix_tree.h), no model: which cached prefixes are usable, how many
// pages a sequence holds as it advances, and that the tree's window pages come and go apart from
// its full pages. Built by tests/csrc/model/native_build.py (the engine's two sources are
// included here: the checker build compiles the runtime's model directories only).
#include <string>
#include <vector>

#include "../model/check_report.h"
#include "engine/page_pool.cpp"
#include "engine/prefix_tree.cpp"
#include "engine/window_pages.h"

using namespace ls;
using namespace ls::batch;

namespace {
constexpr int32_t P = kKvPagePositions, W = 512;

// A full pool, a window pool and a tree over both.
struct Pools {
  PagePool full;
  WindowPages wp;
  PrefixTree tree;
  Pools(int32_t n_full, int32_t n_window) : full(n_full), tree() {
    wp.pool = PagePool(n_window);
    wp.window = W;
    tree = PrefixTree(&full, &wp.pool);
  }
};

void check_usable_prefix() {
  auto held_but = [](int32_t missing) { return [missing](int32_t j) { return j != missing; }; };
  report(usable_window_prefix(600, W, held_but(-1)) == 600, "usable/all_held");
  // 600's next token reads positions 89..599: pages 1..9; page 0 is not needed.
  report(usable_window_prefix(600, W, held_but(0)) == 600, "usable/page_before_window_not_needed");
  report(usable_window_prefix(500, W, held_but(0)) == 0, "usable/first_page_needed_below_window");
  // 1000 reads pages 7..15; page 10 missing: back to 640 (reads pages 2..9).
  report(usable_window_prefix(1000, W, held_but(10)) == 640, "usable/shortened_to_missing_page",
         std::to_string(usable_window_prefix(1000, W, held_but(10))));
  report(usable_window_prefix(1000, W, held_but(5)) == 1000, "usable/hole_before_window");
  report(usable_window_prefix(0, W, held_but(-1)) == 0, "usable/empty");
}

void check_sequence_holds_a_window() {
  Pools pools(1, 64);
  WindowPages& wp = pools.wp;
  PrefixTree& tree = pools.tree;
  std::vector<int32_t> table(3000 / P + 2, -1);
  WindowSpan span;
  int32_t peak = 0;
  bool ok = true;
  const int32_t chunk = 128;
  for (int32_t pos = 0; pos < 2048; pos += chunk) {  // prefill in chunks
    ok &= wp.map(span, table.data(), pos, pos + chunk - 1, tree);
    peak = std::max(peak, span.held());
  }
  for (int32_t pos = 2048; pos < 3000; ++pos) {  // then decode
    ok &= wp.map(span, table.data(), pos, pos, tree);
    peak = std::max(peak, span.held());
  }
  const int32_t bound = (W - 1 + chunk + P - 1) / P + 1;
  report(ok && peak <= bound && wp.pool.num_free() == 64 - span.held(), "span/holds_at_most_a_window",
         "peak " + std::to_string(peak) + " bound " + std::to_string(bound));
  int32_t mapped = 0;
  for (int32_t j = 0; j < int32_t(table.size()); ++j) mapped += table[size_t(j)] >= 0;
  report(mapped == span.held() && span.lo == first_window_page(2999, W), "span/table_maps_only_the_window");
  wp.release(span, table.data());
  report(wp.pool.num_free() == 64 && span.held() == 0, "span/release_frees_every_page");
}

void check_tree_window_pages() {
  Pools pools(8, 8);
  PagePool& full = pools.full;
  WindowPages& wp = pools.wp;
  PrefixTree& tree = pools.tree;
  std::vector<int32_t> key(3 * P);
  for (int32_t i = 0; i < 3 * P; ++i) key[size_t(i)] = 100 + i;
  int32_t pages[3], wpages[3] = {-1, wp.pool.alloc(), wp.pool.alloc()};  // page 0's window part let go
  for (int32_t& p : pages) p = full.alloc();
  const LoraSet base{};
  tree.insert(key.data(), 3 * P, pages, base, /*tail=*/false, wpages);
  for (int32_t j = 0; j < 3; ++j) {
    full.unref(pages[j]);
    if (wpages[j] >= 0) wp.pool.unref(wpages[j]);
  }
  int32_t got[3], wgot[3], part = -1, part_len = 0, part_w = -1;
  const int32_t n = tree.match(key.data(), 3 * P, base, got, &part, &part_len, wgot, &part_w);
  report(n == 3 && wgot[0] == -1 && wgot[1] >= 0 && wgot[2] >= 0, "tree/match_returns_held_window_pages");
  report(tree.window_evictable() == 2 && tree.evictable() == 3, "tree/counts_window_pages_apart");
  const bool dropped = tree.evict_window_one();
  tree.match(key.data(), 3 * P, base, got, &part, &part_len, wgot, &part_w);
  report(dropped && tree.num_cached() == 3 && wp.pool.num_free() == 7 && (wgot[1] < 0) != (wgot[2] < 0),
         "tree/window_page_dropped_alone");
  // A second insert of the same positions hands its window page to a node without one.
  int32_t again[3] = {got[0], got[1], got[2]}, wagain[3] = {wp.pool.alloc(), -1, -1};
  for (int32_t p : again) full.ref(p);
  tree.insert(key.data(), 3 * P, again, base, false, wagain);
  for (int32_t p : again) full.unref(p);
  wp.pool.unref(wagain[0]);
  tree.match(key.data(), 3 * P, base, got, &part, &part_len, wgot, &part_w);
  report(wgot[0] == wagain[0] && wp.pool.refs(wgot[0]) == 1, "tree/node_takes_a_window_page");
  while (tree.evict_one()) {
  }
  report(full.num_free() == 8 && wp.pool.num_free() == 8 && tree.num_cached() == 0, "tree/evicting_nodes_frees_both");
}
}  // namespace

int main() {
  check_usable_prefix();
  check_sequence_holds_a_window();
  check_tree_window_pages();
  return g_failures != 0;
}
