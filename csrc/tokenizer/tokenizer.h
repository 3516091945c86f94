// Tokenizers built from GGUF metadata, exactly as llama.cpp tokenizes:
// GPT-2 byte-level BPE (`tokenizer.ggml.model = gpt2`, pre-tokenizer by `tokenizer.ggml.pre`)
// and SentencePiece-style SPM (`llama`), with special-token partitioning first.
// CONTRACT used by the engine; implementation in csrc/tokenizer/*.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace ls {

// One byte per token (a quarter of Gemma 3's 1 MB as int32); 0 = undefined.
enum class TokenType : uint8_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file; throws GgufError on missing/unsupported data
  // (unknown model or `pre` names are named in the message). Everything needed is copied out:
  // the tokenizer does not keep the GgufFile alive. encode/piece/decode are const and thread-safe.
  // keep_text_index = false: for a process that mostly receives token ids (a lane), the
  // text → id index is dropped after loading (4 MB at 262k tokens) and rebuilt by the first
  // encode that needs it (~16 ms at 262k tokens).
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file, bool keep_text_index = true);
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // Raw bytes of one token (may be partial UTF-8). Control/unknown tokens give "" unless special.
  virtual std::string_view piece(int32_t id, bool special) const = 0;
  // Concatenated pieces (bytes; may be invalid UTF-8 at the end). No space stripping or
  // "clean up tokenization spaces" (neither supported model uses them). Out-of-range ids give "".
  std::string decode(const std::vector<int32_t>& ids, bool special) const;

  int32_t n_vocab() const { return n_vocab_; }
  int32_t bos_id() const { return bos_id_; }   // -1 if none
  int32_t eos_id() const { return eos_id_; }   // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End-of-generation ids (eos, eot, and tokens whose text is a known end marker), sorted.
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool is_eog(int32_t id) const;
  // Effective type: end-marker / FIM tokens the reference forces to CONTROL report Control
  // (e.g. Gemma's USER_DEFINED 212 "</s>"). Throws std::out_of_range for a bad id.
  TokenType token_type(int32_t id) const;

 protected:
  int32_t n_vocab_ = 0, bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::vector<int32_t> eog_ids_;
  std::vector<TokenType> types_;
};

// Streams token pieces as complete UTF-8: bytes of a character split across tokens are held
// until the character is complete. Allocation-free after construction (reserve()).
class Utf8Stream {
 public:
  // Appends the piece's bytes; returns the newly completed UTF-8 text (view valid until the
  // next call). Invalid sequences are replaced by U+FFFD deterministically.
  std::string_view push(std::string_view piece_bytes);
  // End of stream: dangling incomplete bytes become U+FFFD (returned), state is cleared.
  std::string_view finish();
  void reset();

 private:
  std::string pending_;
  std::string out_;
};

}  // namespace ls
