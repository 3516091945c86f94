// Grammar-constrained decoding through llguidance (grammar/llg_api.h).
//
// GrammarCompiler: one per loaded model. Builds llguidance's tokenizer once from our vocabulary
// (each token's raw bytes; control tokens prefixed with byte 0xFF as llguidance expects) with our
// own tokenizer as its tokenize callback, and compiles grammars — llguidance's JSON grammar
// format, which the gateway produces from JSON schemas, regexes, Lark and GBNF — caching each
// compiled grammar by its text, so a repeated schema costs a clone.
//
// GrammarState: one per sequence (sequences never share one, so constrained and free sequences
// share a batch). Per sampled token (Sequence::sample): the token is checked alone (cheap); only
// if the grammar rejects it is the full mask computed and the token resampled from the masked
// logits — as llama.cpp does — so a well-behaved model pays little for the constraint.
#pragma once

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/llg_api.h"

namespace ls {

class Tokenizer;

struct MatcherFree {
  const llg::Api* api = nullptr;
  void operator()(llg::Matcher* m) const {
    if (m != nullptr) api->free_matcher(m);
  }
};
using MatcherPtr = std::unique_ptr<llg::Matcher, MatcherFree>;

class GrammarCompiler {
 public:
  // Throws std::runtime_error if llguidance was not loaded in this process (llg::Api::load) or
  // refuses the vocabulary. `tok` must outlive the compiler (the tokenize callback reads it).
  explicit GrammarCompiler(const Tokenizer& tok);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // A fresh matcher at the grammar's start. Throws std::invalid_argument with llguidance's
  // message when the grammar does not compile. Thread-safe.
  MatcherPtr compile(const std::string& grammar);
  const llg::Api& api() const { return *api_; }

 private:
  static constexpr size_t kMaxCached = 64;  // compiled grammars kept (oldest dropped first)
  const llg::Api* api_;
  llg::Tokenizer* tokenizer_ = nullptr;
  llg::ConstraintInit init_{};
  mutable std::mutex mu_;
  std::unordered_map<std::string, MatcherPtr> cache_;
  std::deque<std::string> order_;  // insertion order of cache_ keys
};

// An engine's compiler, built on first use — or on a background thread (prefetch; building
// llguidance's view of a large vocabulary takes 0.2-1.2 s and 16-110 MB, so a BatchEngine starts it
// on its first constrained request and admits that request once ready(), not inside a step).
class LazyGrammarCompiler {
 public:
  ~LazyGrammarCompiler();
  // Starts building on a background thread if llguidance is loaded; no-op otherwise.
  void prefetch(const Tokenizer& tok);
  // compile() would not wait for the build (built, or no build started).
  bool ready() const;
  // Waits up to timeout_ms for a started build.
  void wait(int timeout_ms) const;
  // The matcher for `grammar` ("" → null); throws as GrammarCompiler::compile.
  MatcherPtr compile(const Tokenizer& tok, const std::string& grammar);

 private:
  std::unique_ptr<GrammarCompiler> compiler_;
  std::future<std::unique_ptr<GrammarCompiler>> pending_;
};

class GrammarState {
 public:
  // Starts constraining with `m` (nullptr: unconstrained). The mask buffer is sized here, once
  // per request, never in the token loop.
  void reset(MatcherPtr m);
  bool active() const { return matcher_ != nullptr; }
  // The grammar accepts `token` next (end-of-generation ids: the grammar may end here).
  bool allows(int32_t token);
  // Sets every logit the grammar forbids to -inf. logits: [n_vocab].
  void mask(float* logits, int32_t n_vocab);
  // Advances past an allowed token. Throws std::runtime_error if llguidance fails.
  void accept(int32_t token);
  // Nothing but the end of generation can follow: the constrained output is complete.
  bool complete() const;
  bool accepting();

 private:
  MatcherPtr matcher_;
  std::vector<uint32_t> mask_;  // one bit per token id, llguidance's layout
};

}  // namespace ls
