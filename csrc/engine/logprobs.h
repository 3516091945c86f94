// Log-probabilities reported to clients (OpenAI `logprobs` / `top_logprobs`, completions `echo`).
//
// Values are the log-softmax of a sequence's RAW logits row — before logit_bias, penalties,
// temperature and the top_k/top_p/min_p filters — as OpenAI and vLLM report them, computed from
// the same forward pass that produced the row (no second pass). A row's values depend only on
// that row (no batch state), so they are the same whatever shares the batch.
//
// A scored position is 1 + num_top entries: entry 0 the token that was taken (sampled, or the
// next prompt token for echo), then the num_top most likely tokens, best first (ties: lower id
// first). A position without a distribution (prompt position 0: nothing precedes it) has a NaN
// logprob and alternatives with token -1.
#pragma once

#include <cstdint>

namespace ls {

constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's cap on top_logprobs
// Prompt positions scored per step (their logits rows are the expensive part: n_vocab floats
// each, 262k for Gemma 3); a longer prompt is scored over several steps.
constexpr int32_t kMaxPromptLogitRows = 64;

struct TokenLogprob {  // wire layout: ring/wire.h LogprobEntry
  int32_t token;
  float logprob;
};

// Scores `token` against logits [n_vocab] and fills out[0, 1 + num_top).
void score_logprobs(const float* logits, int32_t n_vocab, int32_t token, int32_t num_top, TokenLogprob* out);
// A position without a distribution: out[0] = {token, NaN}, alternatives {-1, NaN}.
void null_logprobs(int32_t token, int32_t num_top, TokenLogprob* out);

}  // namespace ls
