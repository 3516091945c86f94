// SentencePiece-style tokenization driven by token scores: start from UTF-8 characters, repeatedly
// merge the adjacent pair whose concatenation is the token with the highest score (ties ->
// left-most), then emit each final symbol as its token or, failing that, as <0xXX> byte tokens.
#include <algorithm>
#include <cstdio>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ls::tok {

namespace {

struct Sym {
  uint32_t off, len;
  int32_t prev, next;
  int32_t id;  // token of the symbol text when known (after a merge), else -2 = look up
};

struct Bigram {
  float score;
  int32_t left, right;
  uint32_t size;
  int32_t id;
};
struct BigramCmp {  // heap top = highest score, then left-most
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

struct SpmScratch {
  std::vector<Sym> syms;
  std::vector<Bigram> heap;
};

}  // namespace

void SpmModel::load(const GgufFile& file, const Vocab& vocab) {
  scores_ = file.get_float_array("tokenizer.ggml.scores");
  if (scores_.empty()) scores_.assign(vocab.size(), 0.0f);
  if (scores_.size() != vocab.size()) file.fail("tokenizer.ggml.scores has a different length than tokenizer.ggml.tokens");
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    int32_t id = vocab.find(buf);
    if (id < 0) {
      const char c = static_cast<char>(b);
      id = vocab.find(std::string_view(&c, 1));
    }
    byte_tok_[b] = id;
  }
}

void SpmModel::encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) const {
  thread_local SpmScratch s;
  s.syms.clear();
  s.heap.clear();
  const int32_t n_vocab = static_cast<int32_t>(vocab.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(utf8_len_from_lead(static_cast<uint8_t>(text[off])), text.size() - off);
    const int32_t idx = static_cast<int32_t>(s.syms.size());
    s.syms.push_back(Sym{static_cast<uint32_t>(off), static_cast<uint32_t>(len), idx - 1,
                         off + len == text.size() ? -1 : idx + 1, -2});
    off += len;
  }
  BigramCmp cmp;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Sym& L = s.syms[l];
    const uint32_t size = L.len + s.syms[r].len;
    const int32_t id = vocab.find(text.substr(L.off, size));
    if (id < 0 || id >= n_vocab) return;
    s.heap.push_back(Bigram{scores_[id], l, r, size, id});
    std::push_heap(s.heap.begin(), s.heap.end(), cmp);
  };
  for (int32_t i = 1; i < static_cast<int32_t>(s.syms.size()); ++i) try_add(i - 1, i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), cmp);
    const Bigram bg = s.heap.back();
    s.heap.pop_back();
    Sym& L = s.syms[bg.left];
    Sym& R = s.syms[bg.right];
    if (L.len == 0 || R.len == 0 || L.len + R.len != bg.size) continue;
    L.len += R.len;
    L.id = bg.id;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) s.syms[R.next].prev = bg.left;
    try_add(L.prev, bg.left);
    try_add(bg.left, L.next);
  }
  for (int32_t i = s.syms.empty() ? -1 : 0; i >= 0; i = s.syms[i].next) {
    const Sym& sym = s.syms[i];
    const int32_t id = sym.id != -2 ? sym.id : vocab.find(text.substr(sym.off, sym.len));
    if (id >= 0) { out.push_back(id); continue; }
    for (uint32_t k = 0; k < sym.len; ++k) {  // byte fallback
      const int32_t b = byte_tok_[static_cast<uint8_t>(text[sym.off + k])];
      if (b >= 0) out.push_back(b);
    }
  }
}

}  // namespace ls::tok
