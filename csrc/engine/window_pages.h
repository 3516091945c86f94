// The window group of a lane's K/V pages (model/kv_cache.h): the pages of the sliding-window
// layers (Gemma 3's local layers), which read only the last `window` positions before a token.
// A sequence holds its window pages [lo, mapped) (WindowSpan; window page table entries, -1 elsewhere);
// before each step it lets go of the pages lying wholly before the window of that step's first
// token (a prefill chunk's tokens still read the window before the chunk), then maps the step's.
// So a long sequence holds at most ModelRuntime::max_window_pages() of them (admission reserves
// that many: WindowSpan::cap), while its full-group pages (the global layers) cover its whole context.
//
// The prefix tree keeps the window pages a sequence still held when it cached them (the end of a
// prompt, the end of a sequence); a cached prefix of length n is usable only where window pages
// cover the window before its first computed position (usable_window_prefix).
// Not thread-safe: the engine's one thread drives it; nothing here allocates memory.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/page_pool.h"
#include "engine/prefix_tree.h"
#include "model/kv_cache.h"

namespace ls::batch {

// A sequence's window pages: page table entries [lo, mapped) map pages it holds; it holds at
// most cap at once (admission counted them).
struct WindowSpan {
  int32_t lo = 0, mapped = 0, cap = 0;
  int32_t held() const { return mapped - lo; }
};

// The first page a token at pos reads in a layer of `window` positions.
inline int32_t first_window_page(int32_t pos, int32_t window) {
  return std::max(0, pos - window + 1) / kKvPagePositions;
}

// The longest prefix ≤ n whose next token (at position e, the first computed) finds the window
// pages it reads before itself, pages [first_window_page(e), (e − 1) / P], all held: has(j) says
// whether page j's window part is. Shortened to the page of the last missing one, and so on.
template <class Has>
int32_t usable_window_prefix(int32_t n, int32_t window, Has has) {
  int32_t e = n;
  while (e > 0) {
    int32_t miss = -1;
    for (int32_t j = (e - 1) / kKvPagePositions; j >= first_window_page(e, window); --j)
      if (!has(j)) {
        miss = j;
        break;
      }
    if (miss < 0) break;
    e = miss * kKvPagePositions;
  }
  return e;
}

struct WindowPages {
  PagePool pool;       // empty: the model keeps one group (then nothing here is used)
  int32_t window = 0;  // positions a sliding layer reads (ModelConfig::sliding_window)

  bool on() const { return pool.num_pages() > 0; }

  // A free window page, dropping the least recently used cached one no sequence maps (last used
  // before `before`) if none is free; -1 when none can be had.
  int32_t alloc(PrefixTree& tree, uint64_t before = UINT64_MAX) {
    int32_t p = pool.alloc();
    while (p < 0 && tree.evict_window_one(before)) p = pool.alloc();
    return p;
  }

  // A sequence (its span s, its window page table `table`) is about to feed positions
  // [first_pos, last_pos]: drops the pages before first_pos's window, maps those up to last_pos.
  // False when none is left.
  bool map(WindowSpan& s, int32_t* table, int32_t first_pos, int32_t last_pos, PrefixTree& tree) {
    const int32_t lo = first_window_page(first_pos, window);
    for (; s.lo < std::min(lo, s.mapped); ++s.lo) {
      pool.unref(table[s.lo]);
      table[s.lo] = -1;
    }
    if (s.mapped < lo) s.lo = s.mapped = lo;  // nothing held below the window
    while (s.mapped * kKvPagePositions <= last_pos) {
      const int32_t p = alloc(tree);
      if (p < 0) return false;
      table[s.mapped++] = p;
    }
    return true;
  }

  void release(WindowSpan& s, int32_t* table) {
    for (int32_t j = s.lo; j < s.mapped; ++j) {
      pool.unref(table[j]);
      table[j] = -1;
    }
    s = WindowSpan{};
  }
};

}  // namespace ls::batch
