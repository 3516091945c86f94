// PromptCache: the K/V of sequences that lost their slot, kept in host RAM under a byte budget,
// so a conversation whose slot went to someone else still skips its prefill on its next turn
// (llama-server's --cache-ram). A lane has `num_slots` K/V regions; with more live conversations
// than slots, every turn would otherwise start from scratch.
//
// An entry is one token sequence (prompt and generated tokens whose K/V were valid in the slot),
// the adapters its K/V were computed with (LoraSet serials: an entry serves only the same
// adapters at the same scales) and its K/V rows, laid out [n_layer][2 (K, V)][n_pos][kv_dim]
// fp16 (KvCache::save). A new prompt attaches to the entry sharing its longest prefix by
// copying those rows into its slot (ModelRuntime::load_kv), exactly the values a prefill would
// compute (kernels are batch-invariant), so a cached prompt gives the same tokens as a fresh one.
// An entry that is a prefix of a newer one is dropped (the newer serves both); the least
// recently used entries go first when the budget is reached.
//
// Lifetime: entries are created only when a slot is taken over (admission, not the token loop);
// their buffers are freed on eviction. Not thread-safe: the engine's one thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/lora.h"

namespace ls {

// Length of the common prefix of `cached` and `prompt`, capped so the last prompt token is
// always recomputed (its logits are needed to sample the first token).
int32_t reusable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt);

struct PromptCacheStats {
  int64_t bytes_used = 0;
  int64_t max_bytes = 0;
  int32_t entries = 0;
  uint64_t hits = 0;         // prompts that attached to an entry
  uint64_t hit_tokens = 0;   // prompt positions those hits did not prefill
  uint64_t stores = 0;       // entries stored
  uint64_t evictions = 0;    // entries dropped for the budget
};

class PromptCache {
 public:
  PromptCache() = default;
  // max_bytes 0: disabled. bytes_per_pos: one position's K and V over all layers.
  PromptCache(int64_t max_bytes, int64_t bytes_per_pos) : max_bytes_(max_bytes), bytes_per_pos_(bytes_per_pos) {}

  bool enabled() const { return max_bytes_ > 0; }

  // The entry (same adapters) whose tokens share the longest reusable prefix with `prompt`, and
  // that length in *len; -1 when none shares a position.
  int find(const std::vector<int32_t>& prompt, const LoraSet& lora, int32_t* len) const;
  // Entry `entry`'s K/V rows, for its first `len` positions being used now (counted as a hit).
  const uint16_t* take(int entry, int32_t len);
  int32_t entry_positions(int entry) const { return int32_t(entries_[size_t(entry)].tokens.size()); }

  // Keeps `tokens`' K/V unless an entry already holds them (or a longer sequence starting with
  // them); save(out) writes the rows into a buffer of tokens.size() * bytes_per_pos bytes.
  // Returns whether it stored them.
  template <class Save>
  bool put(const std::vector<int32_t>& tokens, const LoraSet& lora, Save&& save) {
    const int64_t n_bytes = int64_t(tokens.size()) * bytes_per_pos_;
    if (!enabled() || tokens.empty() || n_bytes > max_bytes_ || covered(tokens, lora)) return false;
    drop_prefixes_of(tokens, lora);
    while (bytes_used_ + n_bytes > max_bytes_) evict_oldest();
    Entry e;
    e.tokens = tokens;
    e.lora = lora;
    e.kv.resize(size_t(n_bytes) / sizeof(uint16_t));
    save(e.kv.data());
    e.last_used = ++clock_;
    bytes_used_ += n_bytes;
    entries_.push_back(std::move(e));
    ++stats_.stores;
    return true;
  }

  PromptCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    LoraSet lora;
    std::vector<uint16_t> kv;  // [n_layer][2][tokens.size()][kv_dim]
    uint64_t last_used = 0;
  };
  bool covered(const std::vector<int32_t>& tokens, const LoraSet& lora);
  void drop_prefixes_of(const std::vector<int32_t>& tokens, const LoraSet& lora);
  void evict_oldest();
  void erase(size_t i);

  int64_t max_bytes_ = 0, bytes_per_pos_ = 0, bytes_used_ = 0;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
  PromptCacheStats stats_;
};

}  // namespace ls
