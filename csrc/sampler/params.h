// Sampling parameters of one generation: the ONE C++ definition. The scalar knobs are listed once
// in LS_SAMPLING_SCALARS; the SamplingParams fields, the REQUEST wire header (ring/wire.h), its
// decoder, its layout export and the Python keyword bindings are all generated from that list.
// Python mirror: lanes.api.GenerationParams (tests/csrc/ring/test_wire_agreement.py checks the wire
// layout; the gateway maps request fields onto GenerationParams by name).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ls {

// X(type, name, default): fixed-width scalars, in wire order.
#define LS_SAMPLING_SCALARS(X)                                                                  \
  X(float, temperature, 1.0f)       /* 0 → greedy argmax (ties: lowest id) */                  \
  X(float, top_p, 1.0f)             /* 1 → off */                                              \
  X(float, min_p, 0.0f)             /* 0 → off */                                              \
  X(float, presence_penalty, 0.0f)  /* OpenAI semantics, over generated tokens */              \
  X(float, frequency_penalty, 0.0f)                                                            \
  X(float, repetition_penalty, 1.0f) /* llama.cpp semantics, prompt + generated, last n */     \
  X(int32_t, top_k, 0)              /* 0 → off */                                              \
  X(int32_t, repeat_last_n, 64)     /* window of the repetition penalty */                     \
  X(int32_t, min_tokens, 0)         /* EOG tokens are masked until this many were generated */

struct SamplingParams {
#define LS_SAMPLING_FIELD(type, name, dflt) type name = dflt;
  LS_SAMPLING_SCALARS(LS_SAMPLING_FIELD)
#undef LS_SAMPLING_FIELD
  uint64_t seed = 0;
  bool has_seed = false;          // false → seeded from a random device
  bool ignore_eos = false;        // mask every end-of-generation token
  std::vector<std::pair<int32_t, float>> logit_bias;  // id → added to logit (-100 bans)
};

}  // namespace ls
