// Sampling parameters of one generation (shared by the sampler, the engine and the wire format).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ls {

struct SamplingParams {
  float temperature = 1.0f;       // 0 → greedy argmax (ties: lowest id)
  int32_t top_k = 0;              // 0 → off
  float top_p = 1.0f;             // 1 → off
  float min_p = 0.0f;             // 0 → off
  uint64_t seed = 0;
  bool has_seed = false;          // false → seeded from a random device
  float presence_penalty = 0.0f;  // OpenAI semantics, over generated tokens
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // llama.cpp semantics, over prompt + generated (last repeat_last_n)
  int32_t repeat_last_n = 64;
  std::vector<std::pair<int32_t, float>> logit_bias;  // id → added to logit (-100 bans)
  int32_t min_tokens = 0;         // EOG tokens are masked until this many tokens were generated
  bool ignore_eos = false;        // mask every end-of-generation token
};

}  // namespace ls
