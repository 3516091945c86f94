// One generation's own state: request, sampler (seed/RNG, penalties, logit bias), stop matcher,
// UTF-8 hold-back and counters. Nothing here is shared between sequences, so a sequence's tokens
// do not depend on what else runs in its batch. Engine drives one; BatchEngine one per slot.
//
// Life: begin() → [the caller feeds the prompt through the model] → sample() per forward pass that
// produced this sequence's logits → … → finished. sample() returns at most one token's worth of
// emittable text: complete UTF-8 only, with any suffix that could begin a stop string held back
// (and dropped if the stop completes). With GenerationRequest::reasoning the text is split first
// (ReasoningSplitter); stop strings then match the content only, max_tokens counts every token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ls {

// Throws std::invalid_argument naming the problem (empty prompt, prompt that leaves no room in
// ctx_size, ids or logit_bias ids outside the vocabulary, max_tokens < 1).
void validate_request(const GenerationRequest& req, int32_t n_vocab, int32_t ctx_size);

class Sequence {
 public:
  // scratch: the sampler's working buffers, shared by the sequences of one engine (nullptr: own).
  explicit Sequence(int32_t n_vocab, SamplerScratch* scratch = nullptr);

  // Starts a generation whose first `cached_tokens` prompt positions already hold valid K/V.
  // `grammar`: the compiled GenerationRequest::grammar (null: unconstrained).
  void begin(const GenerationRequest& req, const Tokenizer& tok, int32_t cached_tokens, int64_t now_ns,
             MatcherPtr grammar = {});
  // Samples from this sequence's logits row [n_vocab] (modified in place), detokenizes and decides
  // whether the generation ends. `pos` = the next K/V position after the fed token.
  StepResult sample(float* logits, int32_t pos, int32_t ctx_size, const Tokenizer& tok, int64_t now_ns);

  const GenerationRequest& request() const { return req_; }
  GenerationStats stats() const {
    GenerationStats out = stats_;
    out.stop_index = stop_.matched();
    return out;
  }
  int32_t last_token() const { return last_token_; }
  bool active() const { return active_; }
  void end() { active_ = false; }

 private:
  void flush_text();
  void push_text(std::string_view text);  // → reasoning_ / stop matcher → out_
  StepResult finish(FinishReason reason, int32_t token);
  // Samples a token the grammar allows: the free pick if allowed, else a resample from the
  // masked logits. -1 when nothing the grammar allows survives the sampler's own masks.
  int32_t sample_constrained(float* logits);

  GenerationRequest req_;
  GenerationStats stats_;
  Sampler sampler_;
  StopMatcher stop_;
  Utf8Stream utf8_;
  ReasoningSplitter split_;
  GrammarState grammar_;
  std::vector<float> raw_logits_;  // [n_vocab] the row before sampling, kept only under a grammar
  std::string out_;        // this step's emitted content; capacity kept across steps
  std::string reasoning_;  // this step's reasoning text
  std::string split_buf_;  // content the splitter released, before the stop matcher
  int32_t last_token_ = -1;
  int64_t begin_ns_ = 0, first_token_ns_ = 0;
  bool active_ = false;
};

}  // namespace ls
