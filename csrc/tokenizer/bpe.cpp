// GPT-2 byte-level BPE: pre-tokenize, then merge adjacent symbols by merge rank (lowest rank
// first, ties -> left-most) inside each pre-token. Symbols start as single raw bytes (each byte's
// mapped character is one symbol) and are identified by token id, so merges are looked up by
// (left id, right id) without building strings.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ls::tok {

namespace {

inline uint64_t pair_key(int32_t l, int32_t r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
}

struct Sym {
  int32_t id;     // token id of the symbol's text, -1 if not a token
  uint32_t off;   // byte range in the pre-token
  uint32_t len;
  int32_t prev, next;
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  int32_t left_id, right_id;
  int32_t merged;
};
struct BigramCmp {  // priority_queue top = lowest rank, then left-most
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

struct BpeScratch {
  PreScratch pre;
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  std::vector<Sym> syms;
  std::vector<Bigram> heap;
  std::string mapped;
};

}  // namespace

std::string BpeModel::decode_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = utf8_next_lenient(text, &pos);
    const int b = gpt2_cpt_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {  // same marker as the reference implementation
      static const char* hex = "0123456789abcdef";
      out += "[UNK_BYTE_0x";
      for (size_t k = start; k < pos; ++k) {
        const uint8_t c = static_cast<uint8_t>(text[k]);
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 15]);
      }
      out += text;
      out += "]";
    }
  }
  return out;
}

void BpeModel::load(const GgufFile& file, const Vocab& vocab, PreKind kind, bool ignore_merges) {
  kind_ = kind;
  ignore_merges_ = ignore_merges;
  std::string tmp;
  for (int b = 0; b < 256; ++b) {
    tmp.clear();
    utf8_append(tmp, gpt2_byte_to_cpt(static_cast<uint8_t>(b)));
    byte_tok_[b] = vocab.find(tmp);
  }
  const GgufValue* v = file.find("tokenizer.ggml.merges");
  if (v == nullptr) file.fail("tokenizer.ggml.merges missing for a gpt2 (BPE) tokenizer");
  const std::vector<std::string_view> merges = file.get_string_array("tokenizer.ggml.merges");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view m = merges[rank];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos) file.fail("malformed BPE merge #" + std::to_string(rank) + ": '" + std::string(m) + "'");
    const std::string_view l = m.substr(0, sp), r = m.substr(sp + 1);
    const int32_t lid = vocab.find(l), rid = vocab.find(r);
    tmp.assign(l);
    tmp.append(r);
    const int32_t mid = vocab.find(tmp);
    // A merge whose parts or result are not tokens can never apply to id-identified symbols.
    if (lid < 0 || rid < 0 || mid < 0) continue;
    merges_.insert(pair_key(lid, rid), static_cast<int32_t>(rank), mid);
  }
}

void BpeModel::encode(const Vocab& vocab, std::string_view fragment, std::vector<int32_t>& out) const {
  thread_local BpeScratch s;
  std::string_view text;
  pretokenize(kind_, fragment, s.pre, &text, s.pieces);
  for (const auto& pc : s.pieces) {
    const std::string_view word = text.substr(pc.first, pc.second - pc.first);
    if (ignore_merges_) {
      s.mapped.clear();
      for (char ch : word) utf8_append(s.mapped, gpt2_byte_to_cpt(static_cast<uint8_t>(ch)));
      const int32_t id = vocab.find(s.mapped);
      if (id >= 0) { out.push_back(id); continue; }
    }
    const int32_t n = static_cast<int32_t>(word.size());
    if (n == 1) {  // fast path: a single byte
      const int32_t id = byte_tok_[static_cast<uint8_t>(word[0])];
      if (id >= 0) { out.push_back(id); continue; }
    }
    s.syms.clear();
    s.heap.clear();
    for (int32_t i = 0; i < n; ++i) {
      s.syms.push_back(Sym{byte_tok_[static_cast<uint8_t>(word[i])], static_cast<uint32_t>(i), 1u, i - 1,
                           i + 1 < n ? i + 1 : -1});
    }
    BigramCmp cmp;
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const int32_t li = s.syms[l].id, ri = s.syms[r].id;
      if (li < 0 || ri < 0) return;
      const int32_t* m = merges_.find(pair_key(li, ri));
      if (m == nullptr) return;
      s.heap.push_back(Bigram{m[0], l, r, li, ri, m[1]});
      std::push_heap(s.heap.begin(), s.heap.end(), cmp);
    };
    for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);
    while (!s.heap.empty()) {
      std::pop_heap(s.heap.begin(), s.heap.end(), cmp);
      const Bigram bg = s.heap.back();
      s.heap.pop_back();
      Sym& L = s.syms[bg.left];
      Sym& R = s.syms[bg.right];
      if (L.len == 0 || R.len == 0 || L.next != bg.right || L.id != bg.left_id || R.id != bg.right_id) continue;
      L.id = bg.merged;
      L.len += R.len;
      R.len = 0;
      L.next = R.next;
      if (R.next >= 0) s.syms[R.next].prev = bg.left;
      try_add(L.prev, bg.left);
      try_add(bg.left, L.next);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = s.syms[i].next) {
      const Sym& sym = s.syms[i];
      if (sym.id >= 0) { out.push_back(sym.id); continue; }
      // Not a token (vocab without some byte character): try each byte of the mapped text alone.
      for (uint32_t k = 0; k < sym.len; ++k) {
        s.mapped.clear();
        utf8_append(s.mapped, gpt2_byte_to_cpt(static_cast<uint8_t>(word[sym.off + k])));
        for (char ch : s.mapped) {
          const int32_t id = vocab.find(std::string_view(&ch, 1));
          if (id >= 0) out.push_back(id);
        }
      }
    }
  }
}

}  // namespace ls::tok
