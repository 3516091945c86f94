#include "engine/prompt_cache.h"

#include <algorithm>

namespace ls {

int32_t reusable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) {
  if (prompt.empty()) return 0;
  const size_t cap = std::min(cached.size(), prompt.size() - 1);
  size_t n = 0;
  while (n < cap && cached[n] == prompt[n]) ++n;
  return int32_t(n);
}

namespace {

// `a` is a prefix of `b` (or equal).
bool starts(const std::vector<int32_t>& b, const std::vector<int32_t>& a) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

int PromptCache::find(const std::vector<int32_t>& prompt, const LoraSet& lora, int32_t* len) const {
  int best = -1;
  int32_t best_len = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.lora.same_as(lora)) continue;
    const int32_t n = reusable_prefix(e.tokens, prompt);
    if (n > best_len) {
      best = int(i);
      best_len = n;
    }
  }
  *len = best_len;
  return best;
}

const uint16_t* PromptCache::take(int entry, int32_t len) {
  Entry& e = entries_[size_t(entry)];
  e.last_used = ++clock_;
  ++stats_.hits;
  stats_.hit_tokens += uint64_t(len);
  return e.kv.data();
}

bool PromptCache::covered(const std::vector<int32_t>& tokens, const LoraSet& lora) {
  for (Entry& e : entries_) {
    if (e.lora.same_as(lora) && starts(e.tokens, tokens)) {
      e.last_used = ++clock_;  // still wanted: it would have been stored now
      return true;
    }
  }
  return false;
}

void PromptCache::drop_prefixes_of(const std::vector<int32_t>& tokens, const LoraSet& lora) {
  for (size_t i = entries_.size(); i-- > 0;)
    if (entries_[i].lora.same_as(lora) && starts(tokens, entries_[i].tokens)) erase(i);
}

void PromptCache::evict_oldest() {
  size_t oldest = 0;
  for (size_t i = 1; i < entries_.size(); ++i)
    if (entries_[i].last_used < entries_[oldest].last_used) oldest = i;
  erase(oldest);
  ++stats_.evictions;
}

void PromptCache::erase(size_t i) {
  bytes_used_ -= int64_t(entries_[i].tokens.size()) * bytes_per_pos_;
  entries_.erase(entries_.begin() + std::ptrdiff_t(i));
}

PromptCacheStats PromptCache::stats() const {
  PromptCacheStats s = stats_;
  s.bytes_used = bytes_used_;
  s.max_bytes = max_bytes_;
  s.entries = int32_t(entries_.size());
  return s;
}

}  // namespace ls
