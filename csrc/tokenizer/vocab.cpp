// Vocabulary text index and the (left, right) -> merge map.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"

namespace ls::tok {

namespace {
uint64_t pow2_at_least(uint64_t n) {
  uint64_t c = 16;
  while (c < n) c <<= 1;
  return c;
}
}  // namespace

void Vocab::reserve(size_t n_tokens, size_t n_bytes) {
  off_.reserve(n_tokens + 1);
  arena_.reserve(n_bytes);
}

void Vocab::add(std::string_view text) {
  arena_.append(text.data(), text.size());
  off_.push_back(static_cast<uint32_t>(arena_.size()));
}

void Vocab::drop_index() {
  std::vector<uint64_t>().swap(slots_);
  mask_ = 0;
  index_ready_.store(false, std::memory_order_relaxed);
}

void Vocab::build_index() const {
  // Load factor 1/3 … 2/3 (linear probing stays short): 4 MB for Gemma 3's 262144 tokens.
  const uint64_t cap = pow2_at_least(size() + size() / 2 + 1);
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  for (int32_t id = 0; id < static_cast<int32_t>(size()); ++id) {
    const std::string_view t = text(id);
    const uint64_t h = hash_bytes(t.data(), t.size());
    const uint64_t tag = h & 0xFFFFFFFF00000000ull;
    uint64_t i = h & mask_;
    while (slots_[i] != 0 &&
           !((slots_[i] & 0xFFFFFFFF00000000ull) == tag && text(int32_t(slots_[i] & 0xFFFFFFFFu) - 1) == t))
      i = (i + 1) & mask_;
    slots_[i] = tag | static_cast<uint32_t>(id + 1);  // a repeated text maps to the last id
  }
}

int32_t Vocab::find(std::string_view s) const {
  if (!index_ready_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!index_ready_.load(std::memory_order_relaxed)) {
      build_index();
      index_ready_.store(true, std::memory_order_release);
    }
  }
  if (slots_.empty()) return -1;
  const uint64_t h = hash_bytes(s.data(), s.size());
  const uint64_t tag = h & 0xFFFFFFFF00000000ull;
  uint64_t i = h & mask_;
  while (true) {
    const uint64_t e = slots_[i];
    if (e == 0) return -1;
    if ((e & 0xFFFFFFFF00000000ull) == tag) {
      const int32_t id = static_cast<int32_t>(e & 0xFFFFFFFFu) - 1;
      if (off_[id + 1] - off_[id] == s.size() && std::memcmp(arena_.data() + off_[id], s.data(), s.size()) == 0)
        return id;
    }
    i = (i + 1) & mask_;
  }
}

void PairMap::reserve(size_t n) {
  const uint64_t cap = pow2_at_least(2 * n + 1);
  keys_.assign(cap, kEmpty);
  vals_.assign(2 * cap, 0);
  mask_ = cap - 1;
  count_ = 0;
}

void PairMap::insert(uint64_t key, int32_t a, int32_t b) {
  if (keys_.empty() || 2 * (count_ + 1) > keys_.size()) {
    // grow: rehash into a table twice as large
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<int32_t> old_vals = std::move(vals_);
    reserve(std::max<size_t>(16, old_keys.size()));
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty) insert(old_keys[i], old_vals[2 * i], old_vals[2 * i + 1]);
  }
  uint64_t i = mix(key) & mask_;
  while (keys_[i] != kEmpty) {
    if (keys_[i] == key) return;  // keep the first (lowest rank)
    i = (i + 1) & mask_;
  }
  keys_[i] = key;
  vals_[2 * i] = a;
  vals_[2 * i + 1] = b;
  ++count_;
}

}  // namespace ls::tok
