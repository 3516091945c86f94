// Sampling parameters of one generation: the ONE C++ definition. The scalar knobs are listed once
// in LS_SAMPLING_SCALARS (and max_tokens in LS_GENERATION_LIMITS); the SamplingParams fields, the
// GenerationRequest limits (engine/engine.h), the REQUEST wire header (ring/wire.h), its decoder,
// its layout export and the Python keyword bindings are all generated from those lists.
// Python: lanes.api.GenerationParams takes its sampling defaults from the exported list
// (lanes._ring.sampling_defaults()) and lanes/wire.py packs the fields in the exported wire order;
// the gateway maps request fields onto GenerationParams by name.
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

// X(type, name, default): per-generation limits beside the sampler, in wire order (the REQUEST
// header carries them just before the sampling scalars); engine/engine.h GenerationRequest declares
// its fields from this list.
#define LS_GENERATION_LIMITS(X) \
  X(int32_t, max_tokens, 16) /* ≥ 1 (0 only when scoring the prompt); also capped by the context */

// Declares `type name = default;` for each entry of the lists above.
#define LS_DECLARE_WITH_DEFAULT(type, name, dflt) type name = dflt;

struct SamplingParams {
  LS_SAMPLING_SCALARS(LS_DECLARE_WITH_DEFAULT)
  uint64_t seed = 0;
  bool has_seed = false;          // false → seeded from a random device
  bool ignore_eos = false;        // mask every end-of-generation token
  std::vector<std::pair<int32_t, float>> logit_bias;  // id → added to logit (-100 bans)
};

}  // namespace ls
