// Tokenizer loading from GGUF, special-token partition, encode driver, pieces and EOG set.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ls {

namespace {

using tok::BpeModel;
using tok::SpmModel;
using tok::Vocab;

// Texts the reference marks as end-of-generation (and forces to CONTROL).
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<eos>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "<|return|>", "<|call|>", "<|eom_id|>", "<|end_of_turn|>",
    "<end_of_utterance>", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
};
// FIM markers: pad / repo / file-separator tokens are EOG too; all are forced to CONTROL.
const char* const kFimPre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>",
                               "<|code_prefix|>"};
const char* const kFimSuf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>",
                               "<|code_suffix|>"};
const char* const kFimMid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>",
                               "<|code_middle|>"};
const char* const kFimPad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
const char* const kFimRep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char* const kFimSep[] = {"<|file_sep|>", "<fim-sep>", "<SEP>"};

enum class Model { Bpe, Spm };

struct Frag {
  int32_t token;     // >= 0: a special token; -1: raw text [off, off + len)
  uint32_t off, len;
};

struct EncodeScratch {
  std::vector<Frag> frags, next;
  std::vector<uint64_t> pair_bits = std::vector<uint64_t>(65536 / 64, 0);
  uint64_t byte_bits[4] = {0, 0, 0, 0};
  std::string esc;
};

class TokenizerImpl final : public Tokenizer {
 public:
  TokenizerImpl(const GgufFile& f, bool keep_text_index);
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string_view piece(int32_t id, bool special) const override {
    if (id < 0 || id >= n_vocab_) return {};
    if (!special && hidden_[id]) return {};
    return std::string_view(piece_arena_.data() + piece_off_[id], piece_off_[id + 1] - piece_off_[id]);
  }

 private:
  void partition(std::string_view text, bool parse_special, EncodeScratch& s) const;
  void setup_special(const GgufFile& f);
  void build_pieces();

  Model model_ = Model::Bpe;
  Vocab vocab_;
  BpeModel bpe_;
  SpmModel spm_;
  bool add_space_prefix_ = false;
  std::vector<int32_t> specials_;  // partition candidates, longest text first
  std::string piece_arena_;
  std::vector<uint32_t> piece_off_;
  std::vector<uint8_t> hidden_;    // CONTROL / UNKNOWN: no piece unless special
};

int32_t checked_id(const GgufFile& f, const char* key, int32_t n_vocab) {
  const int64_t v = f.get_int(key, -1);
  return (v >= 0 && v < n_vocab) ? static_cast<int32_t>(v) : -1;
}

TokenizerImpl::TokenizerImpl(const GgufFile& f, bool keep_text_index) {
  const std::string model = f.get_string("tokenizer.ggml.model", "");
  if (model == "gpt2") {
    model_ = Model::Bpe;
  } else if (model == "llama") {
    model_ = Model::Spm;
  } else {
    f.fail("unsupported tokenizer.ggml.model '" + model + "' (supported: gpt2, llama)");
  }
  tok::PreKind pre_kind = tok::PreKind::Gpt2;
  bool ignore_merges = false;
  if (model_ == Model::Bpe) {
    const std::string pre = f.get_string("tokenizer.ggml.pre", "");
    if (!tok::pre_kind_from_name(pre, &pre_kind, &ignore_merges))
      f.fail("unsupported tokenizer.ggml.pre '" + pre + "'");
  }

  const std::vector<std::string_view> texts = f.get_string_array("tokenizer.ggml.tokens");
  if (texts.empty()) f.fail("tokenizer.ggml.tokens missing or empty");
  if (texts.size() > (1u << 30)) f.fail("tokenizer.ggml.tokens: absurd vocabulary size");
  n_vocab_ = static_cast<int32_t>(texts.size());
  size_t bytes = 0;
  for (auto t : texts) bytes += t.size();
  if (bytes > 0xFFFFFFF0u) f.fail("tokenizer.ggml.tokens: vocabulary text too large");
  vocab_.reserve(texts.size(), bytes + 64);
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) {
      vocab_.add("[EMPTY_" + std::to_string(i) + "]");  // as the reference loader names them
    } else {
      vocab_.add(texts[i]);
    }
  }

  types_.assign(n_vocab_, TokenType::Normal);
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    const std::vector<int32_t> tt = f.get_int_array("tokenizer.ggml.token_type");
    if (tt.size() != texts.size()) f.fail("tokenizer.ggml.token_type has a different length than tokenizer.ggml.tokens");
    for (int32_t i = 0; i < n_vocab_; ++i)  // values no loader defines read as undefined (0)
      types_[i] = tt[i] >= 0 && tt[i] <= 255 ? static_cast<TokenType>(tt[i]) : TokenType(0);
  }

  bos_id_ = checked_id(f, "tokenizer.ggml.bos_token_id", n_vocab_);
  eos_id_ = checked_id(f, "tokenizer.ggml.eos_token_id", n_vocab_);
  if (model_ == Model::Spm) {  // the reference's SPM defaults when the keys are absent
    if (f.find("tokenizer.ggml.bos_token_id") == nullptr && n_vocab_ > 1) bos_id_ = 1;
    if (f.find("tokenizer.ggml.eos_token_id") == nullptr && n_vocab_ > 2) eos_id_ = 2;
  }
  const bool dflt_bos = model_ == Model::Spm || pre_kind == tok::PreKind::Llama3;
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", dflt_bos);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", model_ == Model::Spm);

  setup_special(f);
  if (model_ == Model::Bpe) {
    bpe_.load(f, vocab_, pre_kind, ignore_merges);
  } else {
    spm_.load(f, vocab_);
  }
  build_pieces();
  if (!keep_text_index) vocab_.drop_index();
}

void TokenizerImpl::setup_special(const GgufFile& f) {
  auto force_control = [&](int32_t id) {
    if (id >= 0) types_[id] = TokenType::Control;
  };
  auto first_of = [&](const char* key, const char* const* list, size_t n) {
    int32_t id = checked_id(f, key, n_vocab_);
    if (id < 0) {
      for (size_t i = 0; i < n; ++i) {
        const int32_t c = vocab_.find(list[i]);
        if (c >= 0 && (id < 0 || c < id)) id = c;
      }
    }
    force_control(id);
    return id;
  };
#define LS_LIST(a) a, sizeof(a) / sizeof(a[0])
  first_of("tokenizer.ggml.fim_pre_token_id", LS_LIST(kFimPre));
  first_of("tokenizer.ggml.fim_suf_token_id", LS_LIST(kFimSuf));
  first_of("tokenizer.ggml.fim_mid_token_id", LS_LIST(kFimMid));
  std::vector<int32_t> eog;
  eog.push_back(first_of("tokenizer.ggml.fim_pad_token_id", LS_LIST(kFimPad)));
  eog.push_back(first_of("tokenizer.ggml.fim_rep_token_id", LS_LIST(kFimRep)));
  eog.push_back(first_of("tokenizer.ggml.fim_sep_token_id", LS_LIST(kFimSep)));
#undef LS_LIST
  eog.push_back(eos_id_);
  eog.push_back(checked_id(f, "tokenizer.ggml.eot_token_id", n_vocab_));
  eog.push_back(checked_id(f, "tokenizer.ggml.eom_token_id", n_vocab_));
  for (const char* t : kEogTexts) {
    const int32_t id = vocab_.find(t);
    force_control(id);
    eog.push_back(id);
  }
  eog.erase(std::remove(eog.begin(), eog.end(), -1), eog.end());
  // o200k_harmony (gpt-oss): <|end|> closes one message of a turn (the reasoning before the answer), so
  // with <|return|> and <|call|> present it is no end of generation but a user-defined token (as llama.cpp).
  const int32_t end_id = vocab_.find("<|end|>");
  if (end_id >= 0 && vocab_.find("<|return|>") >= 0 && vocab_.find("<|call|>") >= 0) {
    eog.erase(std::remove(eog.begin(), eog.end(), end_id), eog.end());
    types_[end_id] = TokenType::UserDefined;
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ids_ = eog;

  for (int32_t id = 0; id < n_vocab_; ++id) {
    const TokenType t = types_[id];
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) specials_.push_back(id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return vocab_.text(a).size() > vocab_.text(b).size(); });
}

void TokenizerImpl::build_pieces() {
  static const std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581
  piece_off_.assign(1, 0);
  piece_off_.reserve(n_vocab_ + 1);
  hidden_.assign(n_vocab_, 0);
  std::string tmp;
  for (int32_t id = 0; id < n_vocab_; ++id) {
    const std::string_view text = vocab_.text(id);
    const TokenType t = types_[id];
    if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined) {
      hidden_[id] = t != TokenType::UserDefined;
      piece_arena_.append(text.data(), text.size());
    } else if (t == TokenType::Normal) {
      if (model_ == Model::Bpe) {
        piece_arena_ += BpeModel::decode_text(text);
      } else {
        for (size_t i = 0; i < text.size();) {
          if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
            piece_arena_.push_back(' ');
            i += kSpmSpace.size();
          } else {
            piece_arena_.push_back(text[i++]);
          }
        }
      }
    } else if (t == TokenType::Byte && model_ == Model::Spm) {
      // "<0xXX>" -> the byte
      unsigned v = 0;
      if (text.size() >= 5) {
        tmp.assign(text.substr(3, 2));
        v = static_cast<unsigned>(std::strtoul(tmp.c_str(), nullptr, 16)) & 0xFF;
      }
      piece_arena_.push_back(static_cast<char>(v));
    }  // UNUSED, undefined and BPE BYTE tokens have no piece
    piece_off_.push_back(static_cast<uint32_t>(piece_arena_.size()));
  }
  piece_arena_.shrink_to_fit();
}

void TokenizerImpl::partition(std::string_view text, bool parse_special, EncodeScratch& s) const {
  s.frags.clear();
  if (text.empty()) return;
  s.frags.push_back(Frag{-1, 0, static_cast<uint32_t>(text.size())});
  // Presence filter: a candidate whose first byte or first/last byte pair does not occur in the
  // text cannot match anywhere.
  const auto* u = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    s.byte_bits[u[i] >> 6] |= 1ull << (u[i] & 63);
    if (i + 1 < text.size()) {
      const uint32_t p = (uint32_t(u[i]) << 8) | u[i + 1];
      s.pair_bits[p >> 6] |= 1ull << (p & 63);
    }
  }
  auto has_pair = [&](uint8_t a, uint8_t b) {
    const uint32_t p = (uint32_t(a) << 8) | b;
    return (s.pair_bits[p >> 6] >> (p & 63)) & 1;
  };
  for (const int32_t id : specials_) {
    if (!parse_special && types_[id] != TokenType::UserDefined) continue;
    const std::string_view t = vocab_.text(id);
    if (t.size() > text.size()) continue;
    const auto* tu = reinterpret_cast<const uint8_t*>(t.data());
    if (!((s.byte_bits[tu[0] >> 6] >> (tu[0] & 63)) & 1)) continue;
    if (t.size() >= 2 && (!has_pair(tu[0], tu[1]) || !has_pair(tu[t.size() - 2], tu[t.size() - 1]))) continue;
    bool any = false;
    s.next.clear();
    for (const Frag& fr : s.frags) {
      if (fr.token >= 0) { s.next.push_back(fr); continue; }
      const std::string_view raw = text.substr(fr.off, fr.len);
      size_t base = 0, p;
      while ((p = raw.find(t, base)) != std::string_view::npos) {
        if (p > base) s.next.push_back(Frag{-1, static_cast<uint32_t>(fr.off + base), static_cast<uint32_t>(p - base)});
        s.next.push_back(Frag{id, 0, 0});
        base = p + t.size();
        any = true;
      }
      if (base < raw.size()) s.next.push_back(Frag{-1, static_cast<uint32_t>(fr.off + base), static_cast<uint32_t>(raw.size() - base)});
    }
    if (any) std::swap(s.frags, s.next);
  }
  // clear the filter bits we set (cheaper than wiping 8 KiB)
  s.byte_bits[0] = s.byte_bits[1] = s.byte_bits[2] = s.byte_bits[3] = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) s.pair_bits[((uint32_t(u[i]) << 8) | u[i + 1]) >> 6] = 0;
}

std::vector<int32_t> TokenizerImpl::encode(std::string_view text, bool add_special, bool parse_special) const {
  if (text.size() > 0xFFFFFFF0u) throw std::length_error("tokenizer: text too long");
  thread_local EncodeScratch s;
  partition(text, parse_special, s);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  bool prev_special = true;
  for (const Frag& fr : s.frags) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    const std::string_view raw = text.substr(fr.off, fr.len);
    if (model_ == Model::Bpe) {
      bpe_.encode(vocab_, raw, out);
    } else {
      s.esc.clear();
      if (add_space_prefix_ && prev_special) s.esc += "\xE2\x96\x81";
      for (char c : raw) {
        if (c == ' ') s.esc += "\xE2\x96\x81"; else s.esc.push_back(c);
      }
      spm_.encode(vocab_, s.esc, out);
    }
    prev_special = false;
  }
  if (add_special && add_eos_ && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file, bool keep_text_index) {
  return std::make_unique<TokenizerImpl>(file, keep_text_index);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  for (int32_t id : ids) {
    const std::string_view p = piece(id, special);
    out.append(p.data(), p.size());
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab_) throw std::out_of_range("token id " + std::to_string(id) + " out of range");
  return types_[id];
}

}  // namespace ls
