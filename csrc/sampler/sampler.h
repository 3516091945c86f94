// Token sampling and stop-string handling. CONTRACT used by the engine; implementation in
// csrc/sampler/*.cpp. No allocation per token: buffers are sized at construction/reset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sampler/params.h"

namespace ls {

class Sampler {
 public:
  explicit Sampler(int32_t n_vocab);
  // New generation: params, the prompt (for repetition penalty history) and the EOG ids.
  void reset(const SamplingParams& params, const std::vector<int32_t>& prompt_ids,
             const std::vector<int32_t>& eog_ids);
  // Picks the next token from raw logits [n_vocab] (modified in place). n_generated = tokens
  // generated so far in this generation. Chain: logit_bias → EOG masking (ignore_eos /
  // min_tokens) → penalties → (temperature 0: argmax, lowest id on ties) → top_k → top_p →
  // min_p → temperature → sample with the generation's RNG (seeded: same seed → same picks).
  int32_t sample(float* logits, int32_t n_generated);
  // Records an accepted token (penalty history).
  void accept(int32_t token);
};

// Holds back emitted text that could be the start of a stop string.
class StopMatcher {
 public:
  void reset(const std::vector<std::string>& stops);
  // Appends text; returns what may be emitted now (view valid until the next call).
  // Sets stopped() when a stop string completed: the returned text then ends just before it.
  std::string_view push(std::string_view text);
  // End of generation without a stop: releases everything held back.
  std::string_view flush();
  bool stopped() const;
};

}  // namespace ls
