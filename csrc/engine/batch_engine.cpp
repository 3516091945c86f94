#include "engine/batch_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "common/lazy_array.h"
#include "engine/batch_slots.h"
#include "engine/disk_tier.h"
#include "engine/page_pool.h"
#include "engine/prefix_pages.h"
#include "engine/prefix_tree.h"
#include "engine/sequence.h"
#include "engine/slot_file.h"
#include "engine/window_pages.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/repack_store.h"
#include "tokenizer/tokenizer.h"

namespace ls {

using namespace batch;

struct BatchEngine::Impl {
  GgufFile file;
  ModelRuntime model;
  std::unique_ptr<Tokenizer> tokenizer;
  // Built in the background on the first constrained request (if llguidance is loaded): its
  // tokenizer index costs 16 MB (SmolLM2) to 110 MB (Gemma 3) that a lane never asked to
  // constrain output should not pay; meanwhile that request waits and the others run.
  LazyGrammarCompiler grammar;
  int32_t max_batch_tokens;
  SamplerScratch sampler_scratch;  // every slot's sampler works in it (step() samples one slot at a time)
  std::vector<Slot> slots;
  PagePool pages;                    // holders of the model's K/V pages (the full group's)
  WindowPages wpages;                // and of the window group's (sliding-window layers), if any
  PrefixTree tree;                   // cached pages by key ids (finished, displaced and running prefixes)
  int64_t cache_budget_bytes = 0;    // BatchEngineOptions::prompt_cache_bytes
  int32_t max_cached_pages = 0;      // its whole pages: what only the tree may hold
  std::vector<uint64_t> recent_ends; // [num_slots] tree clock at the last num_slots sequence ends (0: none yet)
  size_t next_end = 0;
  uint64_t hits = 0, hit_tokens = 0; // admitted prompts that reused at least a page's worth, and those positions
  std::unique_ptr<DiskTier> disk;    // the prefix cache's disk tier (null: no prefix_cache_dir)
  std::vector<uint8_t> disk_page;    // [kv_bytes_per_page] a page read back from disk, before it enters the pool
  std::deque<Waiting> waiting;
  uint64_t counter = 0;
  int32_t last_batch_tokens = 0;

  // Per-step buffers, sized at construction.
  std::vector<BatchToken> batch;     // [max_batch_tokens]
  std::vector<const LoraSet*> batch_lora;  // [max_batch_tokens] each batch row's adapters
  std::vector<const float*> batch_embd;    // [max_batch_tokens] an image row's embedding, else null
  bool batch_has_images = false;
  std::unordered_map<int32_t, std::shared_ptr<const LoraAdapter>> adapters;  // the loaded table
  std::vector<int32_t> out_rows;     // [num_slots] batch rows whose logits are needed
  std::vector<int32_t> out_slots;    // [num_slots] the slot of each such row
  std::vector<int32_t> prefilling;   // [num_slots] slots still prefilling, in admission order
  // Lazily committed (common/lazy_array.h): rows are resident once a step has used them.
  LazyArray<float> logits;           // [num_slots + kMaxPromptLogitRows][n_vocab]; the extra rows
                                     // only for sequences that ask for prompt logprobs
  LazyArray<float> raw_row;          // [n_vocab] a logprobs sequence's row before the sampler changes it
  std::vector<SeqEvent> events;      // [num_slots]
  LazyArray<float> hidden;           // [max_batch_tokens][n_embd] final hidden rows of embedding chunks

  Impl(const std::string& path, const BatchEngineOptions& o)
      : file(path),
        model(file, o.ctx_size, o.max_batch_tokens, o.threads, o.num_slots, o.repack_cache_dir, o.kv_cache_bytes,
              o.prompt_cache_bytes, /*window_group=*/true),
        tokenizer(Tokenizer::from_gguf(file, /*keep_text_index=*/false)),  // lanes get token ids
        max_batch_tokens(model.max_batch()),
        sampler_scratch(model.config().n_vocab) {
    const int32_t n_vocab = model.config().n_vocab;
    if (tokenizer->n_vocab() > n_vocab) file.fail("tokenizer has more tokens than the output head");
    const bool windowed = model.n_kv_groups() > 1;
    if (model.n_pages() < model.pages_per_seq()) {
      const int64_t need = windowed ? model.kv_group_bytes_per_page(kKvFullGroup) * model.pages_per_seq() +
                                          model.kv_group_bytes_per_page(kKvWindowGroup) * model.n_pages(kKvWindowGroup)
                                    : model.kv_bytes_per_pos() * model.ctx_size();
      throw std::invalid_argument("the K/V cache must hold one whole context (" +
                                  std::to_string((need + (1 << 20) - 1) >> 20) + " MiB)");
    }
    pages = PagePool(model.n_pages(), o.page_shuffle_seed);
    if (windowed) {
      wpages.pool = PagePool(model.n_pages(kKvWindowGroup), o.page_shuffle_seed ? o.page_shuffle_seed + 1 : 0);
      wpages.window = model.config().sliding_window;
    }
    tree = PrefixTree(&pages, windowed ? &wpages.pool : nullptr);
    recent_ends.assign(size_t(o.num_slots), 0);
    cache_budget_bytes = std::max<int64_t>(o.prompt_cache_bytes, 0);
    max_cached_pages = int32_t(std::min<int64_t>(
        o.prompt_cache_bytes / model.kv_group_bytes_per_page(kKvFullGroup), model.n_pages()));
    slots.resize(o.num_slots);
    for (int i = 0; i < o.num_slots; ++i) {
      for (int g = 0; g < model.n_kv_groups(); ++g)
        std::fill(model.page_table(i, g), model.page_table(i, g) + model.pages_per_seq(), -1);
      Slot& s = slots[size_t(i)];
      s.seq = std::make_unique<Sequence>(n_vocab, &sampler_scratch);
      s.kv_tokens.reserve(model.ctx_size());
      s.embd_sum.resize(model.config().n_embd);
      s.embd_out.resize(model.config().n_embd);
      s.lp.resize(size_t(kMaxLogprobPositions) * (1 + kMaxTopLogprobs));
    }
    batch.resize(max_batch_tokens);
    batch_lora.resize(max_batch_tokens);
    batch_embd.resize(max_batch_tokens);
    out_rows.reserve(o.num_slots + kMaxPromptLogitRows);
    out_slots.reserve(o.num_slots + kMaxPromptLogitRows);
    raw_row = LazyArray<float>(n_vocab);
    prefilling.reserve(o.num_slots);
    logits = LazyArray<float>(size_t(o.num_slots + kMaxPromptLogitRows) * n_vocab);
    events.reserve(o.num_slots);
    hidden = LazyArray<float>(size_t(max_batch_tokens) * model.config().n_embd);
    if (!o.prefix_cache_dir.empty()) {
      std::string why;
      const std::string identity = model_file_identity(path, why);
      if (identity.empty()) throw std::runtime_error(path + ": " + why);
      disk = std::make_unique<DiskTier>(o.prefix_cache_dir, identity + ";" + model.kv_cache().layout_key(),
                                        size_t(model.kv_bytes_per_page()), o.prefix_cache_disk_bytes, model.ctx_size());
      disk_page.resize(size_t(model.kv_bytes_per_page()));
    }
  }

  // Slot i's whole pages of its first n key ids go to the disk tier (base model only;
  // engine/prefix_pages.h). With a window group this runs whenever a page fills (advance()),
  // while the slot still holds the page's window part.
  void spill(int i, int32_t n) {
    const Slot& s = slots[size_t(i)];
    if (!disk || s.kv_lora.n != 0) return;
    spill_pages(*disk, model.kv_cache(), s.kv_tokens.data(), n, model.page_table(i), window_table(i));
  }

  // Window pages running sequences may still take (admission counted them as available).
  int64_t window_reserved() const {
    int64_t n = 0;
    for (const Slot& s : slots) n += s.busy ? std::max(0, s.win.cap - s.win.held()) : 0;
    return n;
  }

  int32_t* window_table(int i) { return wpages.on() ? model.page_table(i, kKvWindowGroup) : nullptr; }

  // A free page, evicting the least recently used cached page no sequence maps if none is free;
  // -1 when the pool is exhausted (admission's reserve rules that out for running sequences).
  int32_t alloc_page() {
    int32_t p = pages.alloc();
    while (p < 0 && tree.evict_one()) p = pages.alloc();
    return p;
  }

  // Maps pages for slot i's positions [first_pos, last_pos] (the window group's: only the
  // window those positions read). False when a pool is exhausted.
  bool map_pages(int i, int32_t first_pos, int32_t last_pos) {
    Slot& s = slots[size_t(i)];
    if (wpages.on() && !wpages.map(s.win, model.page_table(i, kKvWindowGroup), first_pos, last_pos, tree)) return false;
    int32_t* table = model.page_table(i);
    while (s.n_mapped * kPage <= last_pos) {
      const int32_t p = alloc_page();
      if (p < 0) return false;
      table[s.n_mapped++] = p;
      if (s.reserve > 0) --s.reserve;
    }
    return true;
  }

  // Slot i's sequence ended: its whole pages go to the prefix tree (its next turn, or anyone
  // with the same prefix, maps them instead of prefilling), then it lets go of every page.
  void release(int i) {
    Slot& s = slots[size_t(i)];
    int32_t* table = model.page_table(i);
    const int32_t n_cached = std::min<int32_t>(int32_t(s.kv_tokens.size()), s.n_mapped * kPage);
    int32_t* wtable = window_table(i);
    tree.insert(s.kv_tokens.data(), n_cached, table, s.kv_lora, /*tail=*/true, wtable);
    spill(i, n_cached);
    for (int32_t j = 0; j < s.n_mapped; ++j) {
      pages.unref(table[j]);
      table[j] = -1;
    }
    if (wtable) wpages.release(s.win, wtable);
    s.n_mapped = s.reserve = 0;
    s.busy = false;
    // The pages of the last num_slots ended sequences stay (what free slots held before pages:
    // kept without a budget); older pages only the tree holds stay within the prompt cache
    // budget, least recently used first out.
    recent_ends[next_end++ % recent_ends.size()] = tree.clock();
    const uint64_t kept_from = cache_clock();
    while (tree.evictable(kept_from) > max_cached_pages && tree.evict_one(kept_from)) {
    }
  }

  // Tree pages last used before this clock value count against the prompt cache budget.
  uint64_t cache_clock() const { return *std::min_element(recent_ends.begin(), recent_ends.end()); }

  // A running sequence's page past w's n_full cached pages (a sibling's or a shared prompt's
  // page still being filled, not cached yet) may share more of w's next key ids than any cached
  // page: then *page / *len name it and the count (< P), for start() to copy.
  void partial_from_running(const Waiting& w, int32_t n_full, int32_t* page, int32_t* len, int32_t* wpage) {
    const int32_t base = n_full * kPage;
    for (int i = 0; i < int(slots.size()); ++i) {
      const Slot& s = slots[size_t(i)];
      if (!s.busy || s.n_mapped <= n_full || int32_t(s.kv_tokens.size()) <= base || !s.kv_lora.same_as(w.lora.set) ||
          !std::equal(w.key.begin(), w.key.begin() + base, s.kv_tokens.begin()))
        continue;
      const int32_t lim = std::min({kPage - 1, int32_t(s.kv_tokens.size()) - base, int32_t(w.key.size()) - base});
      int32_t k = 0;
      while (k < lim && s.kv_tokens[size_t(base + k)] == w.key[size_t(base + k)]) ++k;
      const int32_t wp = wpages.on() ? model.page_table(i, kKvWindowGroup)[n_full] : -1;
      if (k > *len && (!wpages.on() || wp >= 0)) {
        *len = k;
        *page = model.page_table(i)[n_full];
        *wpage = wp;
      }
    }
  }

  // Pages a choice may fill: its prompt and generated tokens' positions, up to the context.
  int32_t pages_for(const Waiting& w) const {
    int64_t extent = int64_t(w.req.prompt_ids.size()) + (w.embed ? 0 : int64_t(w.req.max_tokens));
    extent = std::min<int64_t>(extent, model.ctx_size());
    return int32_t((extent + kPage - 1) / kPage);
  }

  bool sibling_prefilling(uint64_t request_id) const {
    for (const Slot& s : slots)
      if (s.busy && s.request_id == request_id && !s.decoding()) return true;
    return false;
  }

  // Phase 1: FIFO admission. A choice whose sibling is still prefilling waits for it, so it can
  // map the sibling's prompt pages instead of computing them again (n > 1 choices).
  // A request whose grammar compiler is still being built waits without holding up the others;
  // one the page pool cannot take yet holds up those behind it (FIFO: a long prompt is not
  // starved by short ones).
  void admit() {
    for (auto it = waiting.begin(); it != waiting.end();) {
      const int dst = pick_free_slot();
      if (dst < 0) return;
      if (it->grammar_deferred) {
        if (!grammar.ready()) {
          ++it;
          continue;
        }
        it->grammar_deferred = false;
        try {
          it->grammar = grammar.compile(*tokenizer, it->req.grammar);
        } catch (const std::exception&) {  // the gateway validates grammars first: not expected
          GenerationStats st{};
          events.push_back(SeqEvent{it->request_id, it->choice, {}, true, FinishReason::Error, st});
          it = waiting.erase(it);
          continue;
        }
      }
      if (!it->embed && sibling_prefilling(it->request_id)) {
        ++it;
        continue;
      }
      if (!start(dst, *it)) return;
      it = waiting.erase(it);
    }
  }

  int pick_free_slot() const {
    for (int i = 0; i < int(slots.size()); ++i)
      if (!slots[size_t(i)].busy) return i;
    return -1;
  }

  // Maps w's longest cached prefix into slot dst by reference (the page its first computed
  // position falls in is copied: only the slot writes it) and starts it — when the pool can also
  // give it every further page it may fill beside what running sequences may still take. Else
  // false, nothing changed.
  bool start(int dst, Waiting& w) {
    Slot& d = slots[size_t(dst)];
    const auto& prompt = w.key;
    int32_t* table = model.page_table(dst);
    int32_t* wtable = window_table(dst);
    // An embedding needs every token's hidden state, prompt logprobs every prompt row's logits:
    // they start at position 0.
    const bool from_start = w.embed || w.req.prompt_logprobs;
    const int32_t n_key = int32_t(prompt.size());
    int32_t n_full = 0, part_page = -1, part_len = 0, part_wpage = -1;
    if (!from_start) {
      n_full = tree.match(prompt.data(), n_key, w.lora.set, table, &part_page, &part_len, wtable, &part_wpage);
      if (disk && w.lora.set.n == 0 &&
          load_pages_from_disk(*disk, model.kv_cache(), pages, wpages, tree, disk_page.data(), prompt.data(), n_key,
                               n_full, table, wtable))
        n_full = tree.match(prompt.data(), n_key, w.lora.set, table, &part_page, &part_len, wtable, &part_wpage);
      partial_from_running(w, n_full, &part_page, &part_len, &part_wpage);
    }
    // The last prompt token is always computed (its logits give the first sampled token).
    int32_t cached = std::max(0, std::min(n_full * kPage + part_len, n_key - 1));
    if (wtable)  // page n_full is the partial page
      cached = usable_window_prefix(cached, wpages.window,
                                    [&](int32_t j) { return (j < n_full ? wtable[j] : part_wpage) >= 0; });
    const int32_t n_shared = cached / kPage, cow_len = cached % kPage;
    const int32_t cow_src = cow_len == 0 ? -1 : n_shared < n_full ? table[n_shared] : part_page;
    const int32_t w_lo = wtable ? first_window_page(cached, wpages.window) : 0;
    const int32_t cow_wsrc = !wtable || cow_len == 0 ? -1 : n_shared < n_full ? wtable[n_shared] : part_wpage;
    for (int32_t j = 0; j < n_shared; ++j) pages.ref(table[j]);
    if (cow_src >= 0) pages.ref(cow_src);  // not evicted before it is copied
    for (int32_t j = w_lo; wtable && j < n_shared; ++j) wpages.pool.ref(wtable[j]);
    if (cow_wsrc >= 0) wpages.pool.ref(cow_wsrc);
    const int32_t need = pages_for(w) - n_shared;
    const int32_t w_cap = wtable ? std::min(pages_for(w), model.max_window_pages()) : 0;
    int64_t reserved = need;
    for (const Slot& s : slots) reserved += s.busy ? s.reserve : 0;
    const int64_t w_reserved = wtable ? w_cap - (n_shared - w_lo) + window_reserved() : 0;
    if (int64_t(pages.num_free()) + tree.evictable() < reserved ||
        (wtable && int64_t(wpages.pool.num_free()) + tree.window_evictable() < w_reserved)) {
      for (int32_t j = 0; j < n_shared; ++j) pages.unref(table[j]);
      if (cow_src >= 0) pages.unref(cow_src);
      std::fill(table, table + n_full, -1);
      if (wtable) {
        for (int32_t j = w_lo; j < n_shared; ++j) wpages.pool.unref(wtable[j]);
        if (cow_wsrc >= 0) wpages.pool.unref(cow_wsrc);
        std::fill(wtable, wtable + n_full, -1);
      }
      return false;
    }
    if (n_full > n_shared) std::fill(table + n_shared, table + n_full, -1);
    d.n_mapped = n_shared;
    d.reserve = need;
    if (wtable) {
      std::fill(wtable, wtable + w_lo, -1);
      if (n_full > n_shared) std::fill(wtable + n_shared, wtable + n_full, -1);
      d.win = WindowSpan{w_lo, n_shared, w_cap};
    }
    if (cow_src >= 0) {
      const int32_t page = alloc_page();  // available: counted in `reserved` above
      model.copy_kv_page(cow_src, page, cow_len);
      pages.unref(cow_src);
      table[d.n_mapped++] = page;
      --d.reserve;
      if (cow_wsrc >= 0) {
        const int32_t wpage = wpages.alloc(tree);  // counted in w_reserved
        model.copy_kv_page(cow_wsrc, wpage, cow_len, kKvWindowGroup);
        wpages.pool.unref(cow_wsrc);
        wtable[d.win.mapped++] = wpage;
      }
    }
    if (cached >= kPage) {  // not the chat template's opening every prompt shares
      ++hits;
      hit_tokens += uint64_t(cached);
    }
    d.kv_tokens.assign(prompt.begin(), prompt.begin() + cached);
    d.key.swap(w.key);
    d.lora = std::move(w.lora);
    d.kv_lora = d.lora.set;  // the K/V it adds (and the prefix it kept) are under these adapters
    d.seq->begin(w.req, *tokenizer, cached, steady_now_ns(), std::move(w.grammar));
    d.busy = true;
    d.request_id = w.request_id;
    d.choice = w.choice;
    d.prefilled = cached;
    d.pos = cached;
    d.admit_order = ++counter;
    d.embed = w.embed;
    d.num_top = w.req.num_top_logprobs;
    d.prompt_lp = w.req.prompt_logprobs;
    d.lp_n = d.lp_prompt_n = 0;
    d.begin_ns = steady_now_ns();
    if (w.embed) std::fill(d.embd_sum.begin(), d.embd_sum.end(), 0.0);
    return true;
  }

  // Prompt tokens of slot s to feed this step, at most m: a chunk never ends inside a non-causal
  // image (its positions attend to the whole image, so all of it is computed in one forward
  // pass) — it stops before the image, or is 0 when the image's rest does not fit this step
  // (add() checked that it fits a step beside every slot's decode token).
  static int32_t image_aligned_chunk(const Slot& s, int32_t m) {
    for (const PromptImage& im : s.seq->request().images) {
      const int32_t end = im.pos + im.n_tokens;
      if (!im.non_causal || end <= s.prefilled + m) continue;  // causal, done, or wholly in the chunk
      if (im.pos >= s.prefilled + m) break;
      return im.pos > s.prefilled ? im.pos - s.prefilled : 0;
    }
    return m;
  }

  // Batch rows [row0, row0 + m) feed slot s's prompt from position s.prefilled: its images' rows
  // take their embeddings (and a non-causal image's rows see the whole image).
  void place_images(const Slot& s, int row0, int32_t m) {
    const int64_t E = model.config().n_embd;
    for (const PromptImage& im : s.seq->request().images) {
      const int32_t lo = std::max(im.pos, s.prefilled), hi = std::min(im.pos + im.n_tokens, s.prefilled + m);
      for (int32_t p = lo; p < hi; ++p) {
        const int row = row0 + (p - s.prefilled);
        batch_embd[row] = im.embd->data() + int64_t(p - im.pos) * E;
        if (im.non_causal) batch[row].attend_to = im.pos + im.n_tokens - 1;
        batch_has_images = true;
      }
    }
  }

  // Slot i could not get a page. Admission reserves every page a sequence may fill, so this
  // means that reserve was wrong; the sequence ends with an error rather than the lane.
  void fail(int i) {
    Slot& s = slots[size_t(i)];
    events.push_back(SeqEvent{s.request_id, s.choice, {}, true, FinishReason::Error, s.seq->stats()});
    s.seq->end();
    release(i);
  }

  // Phase 2: the batch. Returns its size.
  int build_batch() {
    int n = 0;
    batch_has_images = false;
    out_rows.clear();
    out_slots.clear();
    prefilling.clear();
    for (int i = 0; i < int(slots.size()); ++i) {
      Slot& s = slots[i];
      s.chunk = 0;
      if (!s.busy) {
        if (s.lora.set.n) s.lora.release();  // an ended sequence lets unloaded adapters go
        s.lora.set.n = 0;
        continue;
      }
      if (s.decoding()) {
        if (!map_pages(i, s.pos, s.pos)) {
          fail(i);
          continue;
        }
        batch_lora[n] = &s.lora.set;
        batch_embd[n] = nullptr;
        batch[n] = BatchToken{s.seq->last_token(), s.pos, i};
        out_rows.push_back(n++);
        out_slots.push_back(i);
      } else {
        prefilling.push_back(i);
      }
    }
    std::sort(prefilling.begin(), prefilling.end(),
              [&](int a, int b) { return slots[a].admit_order < slots[b].admit_order; });
    int32_t prompt_rows_left = kMaxPromptLogitRows;  // LM-head rows for prompt logprobs this step
    for (int i : prefilling) {
      Slot& s = slots[i];
      int32_t m = std::min(max_batch_tokens - n, s.prompt_size() - s.prefilled);
      if (m <= 0) break;
      m = image_aligned_chunk(s, m);
      if (m == 0) continue;
      if (s.prompt_lp) {
        m = std::min(m, prompt_rows_left);
        if (m == 0) continue;
        prompt_rows_left -= m;
      }
      if (!map_pages(i, s.prefilled, s.prefilled + m - 1)) {
        fail(i);
        continue;
      }
      const int32_t* ids = s.seq->request().prompt_ids.data();
      for (int32_t j = 0; j < m; ++j) {
        batch_lora[n] = &s.lora.set;
        batch_embd[n] = nullptr;
        batch[n++] = BatchToken{ids[s.prefilled + j], s.prefilled + j, i};
      }
      s.chunk = m;
      s.row0 = n - m;
      place_images(s, s.row0, m);
      if (s.prompt_lp) {
        for (int32_t j = 0; j < m; ++j) {
          out_rows.push_back(s.row0 + j);
          out_slots.push_back(i);
        }
      } else if (!s.embed && s.prefilled + m == s.prompt_size()) {
        out_rows.push_back(n - 1);
        out_slots.push_back(i);
      }
    }
    return n;
  }

  // Slot files (save_slot, restore_slot, erase_slot): a free slot of a lane with a disk tier.
  void check_slot(int32_t slot) const {
    if (!disk) throw std::invalid_argument("slot files need a prefix cache dir (--prefix-cache-dir)");
    if (slot < 0 || slot >= int32_t(slots.size())) throw std::invalid_argument("slot " + std::to_string(slot) + " does not exist");
    if (slots[size_t(slot)].busy) throw std::invalid_argument("slot " + std::to_string(slot) + " is busy");
  }
  std::string slot_path(int32_t slot, const std::string& filename) const {
    check_slot(slot);
    if (!valid_slot_filename(filename)) throw std::invalid_argument("filename must be a plain file name");
    return disk->dir() + "/" + filename;
  }

  // After the forward pass: the fed tokens' K/V are valid.
  void advance() {
    for (Slot& s : slots) {
      if (!s.busy) continue;
      const size_t n_before = s.kv_tokens.size();
      if (s.chunk > 0) {
        const int32_t* ids = s.key.data();
        s.kv_tokens.insert(s.kv_tokens.end(), ids + s.prefilled, ids + s.prefilled + s.chunk);
        s.prefilled += s.chunk;
        s.pos = s.prefilled;
        // A finished prompt's whole pages are cached at once: its siblings (n > 1) and prompts
        // sharing its system prompt map them while it is still generating.
        if (s.prefilled == s.prompt_size()) {
          const int i = int(&s - slots.data());
          tree.insert(s.kv_tokens.data(), s.prefilled, model.page_table(i), s.kv_lora, /*tail=*/false, window_table(i));
          spill(i, s.prefilled);
        }
      } else if (s.decoding() && s.seq->last_token() >= 0) {
        s.kv_tokens.push_back(s.seq->last_token());
        s.pos += 1;
      }
      // Pages about to lose their window part go to disk now, whole (see spill()).
      if (disk && wpages.on() && s.kv_tokens.size() / kPage > n_before / kPage)
        spill(int(&s - slots.data()), int32_t(s.kv_tokens.size()));
    }
  }

  // An event carrying the positions the slot scored this step (and resetting them).
  SeqEvent logprob_event(Slot& slot, std::string_view text, bool finished, FinishReason reason,
                         const GenerationStats& st, std::string_view reasoning) {
    SeqEvent ev{slot.request_id, slot.choice, text, finished, reason, st, reasoning};
    ev.logprobs = slot.lp.data();
    ev.num_logprobs = slot.lp_n;
    ev.num_prompt_logprobs = slot.lp_prompt_n;
    ev.logprob_stride = uint32_t(1 + slot.num_top);
    slot.lp_n = slot.lp_prompt_n = 0;
    return ev;
  }

  // After the forward pass (before advance()): adds the final hidden rows of each embedding
  // chunk to its slot's sum, one token at a time in position order — the same additions in the
  // same order however the prompt was chunked, so the result does not depend on batchmates. At
  // the last chunk: mean, L2-normalise, event, slot free.
  void embed_chunks(int64_t now_ns) {
    const int64_t E = model.config().n_embd;
    for (Slot& s : slots) {
      if (!s.busy || !s.embed || s.chunk == 0) continue;
      model.final_hidden(s.row0, s.chunk, hidden.data());
      double* sum = s.embd_sum.data();
      for (int32_t r = 0; r < s.chunk; ++r) {
        const float* h = hidden.data() + r * E;
        for (int64_t j = 0; j < E; ++j) sum[j] += double(h[j]);
      }
      if (s.prefilled + s.chunk < s.prompt_size()) continue;
      double norm2 = 0.0;
      for (int64_t j = 0; j < E; ++j) norm2 += sum[j] * sum[j];  // mean's 1/n cancels in the norm
      const double inv = norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 0.0;
      for (int64_t j = 0; j < E; ++j) s.embd_out[j] = float(sum[j] * inv);
      GenerationStats st = s.seq->stats();
      st.prefill_ns = now_ns - s.begin_ns;
      events.push_back(SeqEvent{s.request_id, s.choice, {}, true, FinishReason::Stop, st, {}, s.embd_out.data()});
      s.seq->end();
      s.finished_embed = true;
    }
  }
};

BatchEngine::BatchEngine(const std::string& path, const BatchEngineOptions& opts) {
  if (opts.num_slots < 1 || opts.num_slots > 256) throw std::invalid_argument("num_slots must be between 1 and 256");
  if (opts.max_batch_tokens < opts.num_slots)
    throw std::invalid_argument("max_batch_tokens must be at least num_slots (one decode token per slot)");
  impl_ = std::make_unique<Impl>(path, opts);
}
BatchEngine::~BatchEngine() = default;

int32_t BatchEngine::n_ctx() const { return impl_->model.ctx_size(); }
int32_t BatchEngine::n_vocab() const { return impl_->tokenizer->n_vocab(); }
int32_t BatchEngine::num_slots() const { return int32_t(impl_->slots.size()); }
int32_t BatchEngine::max_batch_tokens() const { return impl_->max_batch_tokens; }
size_t BatchEngine::kv_cache_bytes() const { return impl_->model.kv_cache_bytes(); }
const std::string& BatchEngine::repack_status() const { return impl_->model.repack_status(); }
PromptCacheStats BatchEngine::prompt_cache_stats() const {
  const Impl& s = *impl_;
  PromptCacheStats st;
  st.entries = s.tree.num_cached();
  st.bytes_used = int64_t(s.tree.evictable(s.cache_clock())) * s.model.kv_group_bytes_per_page(kKvFullGroup);
  if (s.wpages.on())
    st.bytes_used += int64_t(s.tree.window_evictable(s.cache_clock())) * s.model.kv_group_bytes_per_page(kKvWindowGroup);
  st.max_bytes = s.cache_budget_bytes;
  st.hits = s.hits;
  st.hit_tokens = s.hit_tokens;
  st.stores = s.tree.stores();
  st.evictions = s.tree.evictions();
  st.pages_total = s.pages.num_pages();
  st.pages_free = s.pages.num_free();
  st.window_pages_total = s.wpages.pool.num_pages();
  st.window_pages_free = s.wpages.pool.num_free();
  if (s.disk) {
    const DiskTierStats d = s.disk->stats();
    st.disk_reads = d.reads;
    st.disk_writes = d.writes;
    st.disk_bytes_used = d.bytes_used;
    st.disk_max_bytes = d.max_bytes;
  }
  return st;
}
int32_t BatchEngine::last_batch_tokens() const { return impl_->last_batch_tokens; }
size_t BatchEngine::num_waiting() const { return impl_->waiting.size(); }

size_t BatchEngine::num_active() const {
  size_t n = 0;
  for (const Slot& s : impl_->slots) n += s.busy;
  return n;
}

int32_t BatchEngine::next_prefill_tokens() const {
  int64_t n = 0;
  for (const Slot& s : impl_->slots)
    if (s.busy && !s.decoding()) n += s.prompt_size() - s.prefilled;
  for (const Waiting& w : impl_->waiting) n += int64_t(w.req.prompt_ids.size());
  return int32_t(std::min<int64_t>(n, impl_->max_batch_tokens));
}

bool BatchEngine::has_work() const { return !impl_->waiting.empty() || num_active() > 0; }

void BatchEngine::add(uint64_t request_id, uint32_t choice, const GenerationRequest& req) {
  validate_request(req, impl_->model.config().n_vocab, impl_->model.ctx_size());
  Impl& s = *impl_;
  validate_images(req, s.model.config().n_embd, s.max_batch_tokens, int32_t(s.slots.size()));
  LoraHold lora = resolve_adapters(s.adapters, req.adapters);
  if (!req.grammar.empty()) {
    s.grammar.prefetch(*s.tokenizer);  // the first constrained request starts the build
    if (!s.grammar.ready()) {
      s.waiting.push_back(Waiting{request_id, choice, req, false, MatcherPtr{}, std::move(lora), true, prompt_key(req)});
      return;
    }
  }
  MatcherPtr grammar = s.grammar.compile(*s.tokenizer, req.grammar);  // throws on a bad grammar: not queued
  s.waiting.push_back(Waiting{request_id, choice, req, false, std::move(grammar), std::move(lora), false, prompt_key(req)});
}

void BatchEngine::add_embedding(uint64_t request_id, uint32_t choice, const std::vector<int32_t>& prompt_ids) {
  const int32_t n_vocab = impl_->model.config().n_vocab, ctx = impl_->model.ctx_size();
  if (prompt_ids.empty()) throw std::invalid_argument("the input is empty");
  if (int64_t(prompt_ids.size()) > ctx)
    throw std::invalid_argument("the input has " + std::to_string(prompt_ids.size()) +
                                " tokens; the context holds " + std::to_string(ctx));
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= n_vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is out of range");
  Waiting w{request_id, choice, GenerationRequest{}, true};
  w.req.prompt_ids = prompt_ids;
  w.req.max_tokens = 1;
  w.key = prompt_ids;
  impl_->waiting.push_back(std::move(w));
}

int32_t BatchEngine::n_embd() const { return impl_->model.config().n_embd; }

size_t BatchEngine::load_adapter(int32_t id, const std::string& path) {
  Impl& s = *impl_;
  if (s.adapters.count(id)) throw std::invalid_argument("LoRA adapter id " + std::to_string(id) + " is in use");
  auto adapter = std::make_shared<const LoraAdapter>(path, s.file, s.model.config());
  const size_t bytes = adapter->tensor_bytes();
  s.adapters.emplace(id, std::move(adapter));
  return bytes;
}

bool BatchEngine::unload_adapter(int32_t id) { return impl_->adapters.erase(id) > 0; }

std::vector<int32_t> BatchEngine::adapter_ids() const {
  std::vector<int32_t> ids;
  for (const auto& [id, a] : impl_->adapters) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

int BatchEngine::cancel(uint64_t request_id, std::vector<DroppedSeq>* out) {
  Impl& s = *impl_;
  int dropped = 0;
  const int64_t now = steady_now_ns();
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (it->request_id == request_id) {
      if (out) out->push_back(DroppedSeq{it->choice, GenerationStats{}});  // never started: nothing to count
      it = s.waiting.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  for (int i = 0; i < int(s.slots.size()); ++i) {
    Slot& slot = s.slots[size_t(i)];
    if (slot.busy && slot.request_id == request_id) {
      if (out) out->push_back(DroppedSeq{slot.choice, slot.work_so_far(now)});
      slot.seq->end();
      s.release(i);  // its K/V up to kv_tokens stay cached for prefix reuse
      ++dropped;
    }
  }
  return dropped;
}

SlotFileResult BatchEngine::save_slot(int32_t slot, const std::string& filename) {
  Impl& s = *impl_;
  const std::string path = s.slot_path(slot, filename);
  Slot& sl = s.slots[size_t(slot)];
  if (sl.kv_lora.n != 0) throw std::invalid_argument("only a base-model sequence (no LoRA adapters) can be saved");
  // Its pages left with it: the tree still holds what was not evicted since.
  std::vector<int32_t> table, wtable;
  const int32_t n_tokens =
      saveable_prefix(s.tree, s.wpages, sl.kv_tokens.data(), int32_t(sl.kv_tokens.size()), sl.kv_lora, table, wtable);
  if (n_tokens == 0) throw std::invalid_argument("slot " + std::to_string(slot) + " holds no cached tokens");
  const int64_t bytes = write_slot_file(path, s.disk->identity(), sl.kv_tokens.data(), n_tokens, s.model.kv_cache(),
                                        table.data(), s.wpages.on() ? wtable.data() : nullptr,
                                        (n_tokens + kPage - 1) / kPage, s.disk->page_bytes());
  return SlotFileResult{n_tokens, bytes};
}

SlotFileResult BatchEngine::restore_slot(int32_t slot, const std::string& filename) {
  Impl& s = *impl_;
  const std::string path = s.slot_path(slot, filename);
  const SlotFileData d = read_slot_file(path, s.disk->identity(), s.disk->page_bytes(), s.model.ctx_size());
  for (int32_t id : d.ids)
    if (id >= s.model.config().n_vocab) throw std::runtime_error(path + " holds token ids outside the vocabulary");
  int64_t reserved = 0;
  for (const Slot& o : s.slots) reserved += o.busy ? o.reserve : 0;  // what running sequences may still take
  if (!restore_room(s.pages, s.wpages, s.tree, reserved, s.window_reserved(), int32_t(d.ids.size()), d.n_pages))
    throw std::runtime_error("the K/V page pool has no room for " + path + " now");
  restore_pages(s.model.kv_cache(), s.pages, s.wpages, s.tree, d.ids, d.data.data(), d.n_pages, s.disk->page_bytes());
  const int32_t n_tokens = int32_t(d.ids.size());
  Slot& sl = s.slots[size_t(slot)];
  sl.kv_tokens.assign(d.ids.begin(), d.ids.end());
  sl.kv_lora = LoraSet{};
  return SlotFileResult{n_tokens, d.file_bytes};
}

int32_t BatchEngine::erase_slot(int32_t slot) {
  Impl& s = *impl_;
  s.check_slot(slot);
  Slot& sl = s.slots[size_t(slot)];
  const int32_t n = int32_t(sl.kv_tokens.size());
  sl.kv_tokens.clear();
  return n;
}

const std::vector<SeqEvent>& BatchEngine::step() {
  Impl& s = *impl_;
  s.events.clear();
  // 1. Admission.
  s.admit();
  // 2. Batch.
  const int n = s.build_batch();
  s.last_batch_tokens = n;
  if (n == 0) {
    // Only requests waiting for the grammar compiler: wait for it here rather than spin.
    if (!s.waiting.empty() && s.events.empty()) s.grammar.wait(5);
    return s.events;
  }
  // 3. One forward pass over every sequence's tokens.
  const size_t n_vocab_z = size_t(s.model.config().n_vocab);
  s.model.forward_batch(s.batch.data(), n, s.out_rows.data(), int(s.out_rows.size()), s.logits.data(),
                        s.batch_lora.data(), s.batch_has_images ? s.batch_embd.data() : nullptr);
  const int64_t now = steady_now_ns();
  s.embed_chunks(now);  // embedding sequences: pool their rows (and finish at the last chunk)
  s.advance();
  for (int i = 0; i < int(s.slots.size()); ++i) {
    if (!s.slots[size_t(i)].finished_embed) continue;
    s.slots[size_t(i)].finished_embed = false;
    s.release(i);  // its K/V stay cached for prefix reuse
  }
  // 4. Sample each sequence that produced logits (rows of a sequence's prompt that only score
  //    the next prompt token are scored, not sampled).
  const int32_t n_vocab = s.model.config().n_vocab;
  for (size_t k = 0; k < s.out_slots.size(); ++k) {
    Slot& slot = s.slots[s.out_slots[k]];
    float* row = s.logits.data() + k * n_vocab_z;
    const int32_t pos = s.batch[s.out_rows[k]].pos;
    const bool from_prompt = slot.prompt_lp && pos < slot.prompt_size();
    if (from_prompt) {
      const int32_t* prompt = slot.seq->request().prompt_ids.data();
      if (pos == 0) {
        null_logprobs(prompt[0], slot.num_top, slot.lp_next());
        slot.lp_prompt_n += 1;
      }
      if (pos + 1 < slot.prompt_size()) {
        score_logprobs(row, n_vocab, prompt[pos + 1], slot.num_top, slot.lp_next());
        slot.lp_prompt_n += 1;
        continue;
      }
      if (slot.seq->request().max_tokens == 0) {  // score the prompt only: over at its last row
        GenerationStats st = slot.seq->stats();
        st.prefill_ns = now - slot.begin_ns;
        slot.seq->end();
        s.events.push_back(s.logprob_event(slot, {}, true, FinishReason::Length, st, {}));
        s.release(s.out_slots[k]);
        continue;
      }
    }
    const bool scored = slot.num_top >= 0;
    if (scored) std::memcpy(s.raw_row.data(), row, n_vocab_z * sizeof(float));  // the sampler edits row
    const StepResult r = slot.seq->sample(row, slot.pos, s.model.ctx_size(), *s.tokenizer, now);
    if (!scored) {
      s.events.push_back(SeqEvent{slot.request_id, slot.choice, r.text, r.finished, r.reason, slot.seq->stats(),
                                  r.reasoning});
    } else {
      if (r.token >= 0 && !s.tokenizer->is_eog(r.token))
        score_logprobs(s.raw_row.data(), n_vocab, r.token, slot.num_top, slot.lp_next());
      s.events.push_back(s.logprob_event(slot, r.text, r.finished, r.reason, slot.seq->stats(), r.reasoning));
    }
    if (r.finished) s.release(s.out_slots[k]);
  }
  for (Slot& slot : s.slots)  // prompt chunks that sampled nothing: their scores alone
    if (slot.lp_n > 0) s.events.push_back(s.logprob_event(slot, {}, false, FinishReason::None, slot.seq->stats(), {}));
  return s.events;
}

}  // namespace ls
