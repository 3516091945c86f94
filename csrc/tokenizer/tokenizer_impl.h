// Internal pieces of the tokenizer (not part of the engine contract): vocabulary storage,
// hash indexes, pre-tokenizers and the BPE / SPM fragment encoders.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ls::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xD6E8FEB86659FD93ull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h;
}

// Token texts in one arena plus an open-addressing index text -> id (the last id wins when a
// text repeats, as in the reference loader).
//
// The index (4 MB for Gemma 3's 262k tokens) is needed to load and to encode text; a lane process
// receives token ids and encodes only for a grammar-constrained request, so its loader drops it
// (drop_index) and find() rebuilds it on first use, thread-safely.
class Vocab {
 public:
  void reserve(size_t n_tokens, size_t n_bytes);
  void add(std::string_view text);  // ids are assigned in order
  void drop_index();                // single-threaded (load time); find() rebuilds it
  size_t size() const { return off_.empty() ? 0 : off_.size() - 1; }
  std::string_view text(int32_t id) const {
    return std::string_view(arena_.data() + off_[id], off_[id + 1] - off_[id]);
  }
  int32_t find(std::string_view s) const;  // -1 if absent

 private:
  void build_index() const;

  std::string arena_;
  std::vector<uint32_t> off_{0};
  // Built under mu_; index_ready_ (release store after the build, acquire load in find) publishes it.
  mutable std::mutex mu_;
  mutable std::atomic<bool> index_ready_{false};
  mutable std::vector<uint64_t> slots_;  // (hash high 32 bits << 32) | (id + 1); 0 = empty
  mutable uint64_t mask_ = 0;
};

// Open-addressing map from a 64-bit key (never ~0) to a pair of int32 values.
class PairMap {
 public:
  void reserve(size_t n);
  // Keeps the first value inserted for a key.
  void insert(uint64_t key, int32_t a, int32_t b);
  // Returns pointer to {a, b} or nullptr.
  const int32_t* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    uint64_t i = mix(key) & mask_;
    while (true) {
      const uint64_t k = keys_[i];
      if (k == key) return &vals_[2 * i];
      if (k == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
  }
  std::vector<uint64_t> keys_;
  std::vector<int32_t> vals_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

// ---- pre-tokenizers (pretokenize.cpp) ----
enum class PreKind { Gpt2, NumThenGpt2, Llama3, Qwen2, Gpt4o };
// Maps a `tokenizer.ggml.pre` name; false if unknown. ignore_merges as the reference sets it.
bool pre_kind_from_name(std::string_view name, PreKind* kind, bool* ignore_merges);

struct PreScratch {
  std::string canon;                // canonical UTF-8 of the fragment (invalid bytes -> U+FFFD)
  std::vector<uint32_t> cpts;
  std::vector<uint8_t> flags;
  std::vector<uint32_t> offs;       // byte offset of each code point in the text; n+1 entries
  std::vector<std::pair<uint32_t, uint32_t>> a, b;  // code point ranges
};
// Splits `text` into pre-tokens. On return *text_out is the text the byte ranges in `out` refer
// to (either `text` itself or scratch.canon when invalid UTF-8 had to be replaced).
void pretokenize(PreKind kind, std::string_view text, PreScratch& s, std::string_view* text_out,
                 std::vector<std::pair<uint32_t, uint32_t>>& out);

// ---- byte-level BPE (bpe.cpp) ----
class BpeModel {
 public:
  void load(const GgufFile& file, const Vocab& vocab, PreKind kind, bool ignore_merges);
  void encode(const Vocab& vocab, std::string_view fragment, std::vector<int32_t>& out) const;
  // Raw bytes of a NORMAL token's text through the inverse GPT-2 byte map.
  static std::string decode_text(std::string_view text);

 private:
  PreKind kind_ = PreKind::Gpt2;
  bool ignore_merges_ = false;
  PairMap merges_;            // (left id, right id) -> (rank, merged id)
  int32_t byte_tok_[256];     // token of each byte's mapped character, -1 if absent
};

// ---- SentencePiece-style BPE (spm.cpp) ----
class SpmModel {
 public:
  void load(const GgufFile& file, const Vocab& vocab);
  // `fragment` must already have spaces escaped as U+2581.
  void encode(const Vocab& vocab, std::string_view fragment, std::vector<int32_t>& out) const;

 private:
  std::vector<float> scores_;
  int32_t byte_tok_[256];     // <0xXX> tokens (or the raw byte's token), -1 if absent
};

}  // namespace ls::tok
