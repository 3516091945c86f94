// The part of llguidance's C API that laneserve calls, declared here (ABI of llguidance ≥ 1.x) and
// resolved at run time with dlopen/dlsym from the llguidance wheel's shared library. The wheel is
// a Python extension: its library needs the Python runtime in the process, which every lane (a
// Python process) and every in-process Engine user has. Nothing links against it at build time, so
// a build without llguidance installed still works; grammar requests then fail with a clear error.
//
// Struct layouts must match the library's exactly (C, natural alignment). LlgConstraintInit must be
// zero-initialised before llg_constraint_init_set_defaults; LlgTokenizerInitV2 carries its own size
// so a newer library reads only the fields we know.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ls::llg {

struct Tokenizer;  // opaque LlgTokenizer
struct Matcher;    // opaque LlgMatcher

struct ParserLimits {
  size_t max_items_in_row;
  uint64_t initial_lexer_fuel;
  uint64_t step_lexer_fuel;
  size_t step_max_items;
  size_t max_lexer_states;
  size_t max_grammar_size;
  bool precompute_large_lexemes;
  bool verbose_errors;
};

struct ConstraintInit {
  const Tokenizer* tokenizer;
  uint32_t log_buffer_level;
  uint32_t log_stderr_level;
  bool ff_tokens_ok;
  bool backtrack_ok;
  ParserLimits limits;
};

// Must be thread-safe: llguidance may call it from its own threads. Returns the total number of
// tokens, writing at most output_len of them.
using TokenizeFn = size_t (*)(const void* user_data, const uint8_t* bytes, size_t bytes_len,
                              uint32_t* output_tokens, size_t output_len);

struct TokenizerInitV2 {
  size_t struct_size;  // = sizeof(TokenizerInitV2)
  uint32_t vocab_size;
  uint32_t tok_eos;
  const uint32_t* token_lens;  // [vocab_size]
  const uint8_t* token_bytes;  // concatenated; special tokens prefixed with byte 0xFF
  const char* tokenizer_json;  // unused (nullptr)
  bool tokenize_assumes_string;
  TokenizeFn tokenize_fn;
  bool use_approximate_greedy_tokenize_fn;
  const void* tokenize_user_data;
  const char* const* slices;  // nullptr: llguidance's default slices
  const uint32_t* tok_eos_extra;
  uint32_t tok_eos_extra_count;
};

// Function table, filled once per process by Api::load.
struct Api {
  void (*constraint_init_set_defaults)(ConstraintInit*, const Tokenizer*);
  Tokenizer* (*new_tokenizer_v2)(const TokenizerInitV2*, char* error, size_t error_len);
  void (*free_tokenizer)(Tokenizer*);
  Matcher* (*new_matcher)(const ConstraintInit*, const char* type, const char* data);
  Matcher* (*clone_matcher)(const Matcher*);
  void (*free_matcher)(Matcher*);
  const char* (*matcher_get_error)(Matcher*);
  bool (*matcher_is_error)(const Matcher*);
  int32_t (*matcher_compute_mask_into)(Matcher*, uint32_t* mask, size_t mask_bytes);
  size_t (*matcher_get_mask_byte_size)(const Matcher*);
  int32_t (*matcher_consume_token)(Matcher*, uint32_t token);
  int32_t (*matcher_validate_tokens)(Matcher*, const uint32_t* tokens, size_t n);
  bool (*matcher_is_stopped)(const Matcher*);
  bool (*matcher_is_accepting)(Matcher*);
  const char* (*get_version)();

  // Loads the library at `path` (idempotent for the same path; the library is never unloaded).
  // Throws std::runtime_error naming the path and the missing symbol.
  static const Api& load(const std::string& path);
  // Names the library without loading it: loaded() loads it on first call. A lane that never
  // constrains output then never maps it (its relocated data is ~0.5 MB per process).
  static void defer(const std::string& path);
  // The loaded table, or nullptr when no library is (or, deferred, could be) loaded here.
  static const Api* loaded();
};

}  // namespace ls::llg
