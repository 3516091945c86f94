// One generation at a time over a loaded model: what `lanes.Model` (in-process use, golden tests)
// wraps. Lanes serve many sequences at once through BatchEngine (batch_engine.h).
//
// Phases of a generation: start() (validate, reuse the cached prefix) → step()s that prefill
// the prompt one batch of ≤ max_batch tokens each (the last one also samples the first token;
// the others return token -1 and no text) → step() per further token → finished.
// step() returns at most one token's worth of *emittable* text: complete UTF-8 only, with any
// suffix that could begin a stop string held back (and dropped if the stop completes).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/reasoning_splitter.h"
#include "sampler/params.h"

namespace ls {

class ModelRuntime;  // model/model.h
class Tokenizer;     // tokenizer/tokenizer.h
class GgufFile;      // gguf/gguf.h


// A LoRA adapter a request applies: its id in the engine's adapter table
// (BatchEngine::load_adapter) and its scale (0: left out entirely).
struct AdapterScale {
  int32_t id;
  float scale;
};

// An image in a prompt (BatchEngine only): positions [pos, pos + n_tokens) take the rows of `embd`
// ([n_tokens][n_embd], the vision encoder's output) in place of their token ids. non_causal: those
// positions attend to the whole image (gemma3, as llama.cpp decodes it), so the image is fed in one
// step. content_hash (of the image's pixels and the projector) keys those positions for prefix reuse
// and the prompt cache: they all share one placeholder id, so the ids alone cannot tell two images apart.
struct PromptImage {
  int32_t pos = 0, n_tokens = 0;
  std::shared_ptr<const std::vector<float>> embd;  // shared by a request's choices
  bool non_causal = false;
  uint64_t content_hash = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;   // non-empty
  SamplingParams sampling;
  LS_GENERATION_LIMITS(LS_DECLARE_WITH_DEFAULT)  // max_tokens (sampler/params.h)
  std::vector<std::string> stop;     // stop strings (matched on emitted content, not reasoning)
  ReasoningFormat reasoning;         // markers to split reasoning out of the text (none: all content)
  std::string grammar;               // llguidance grammar (JSON) constraining the output; "" = none
  // Log-probabilities (engine/logprobs.h; BatchEngine only): -1 off, else each generated token is
  // scored with this many alternatives (0..kMaxTopLogprobs). prompt_logprobs also scores every
  // prompt token (completions `echo`); it allows max_tokens 0 (score the prompt, generate nothing).
  int32_t num_top_logprobs = -1;
  bool prompt_logprobs = false;
  std::vector<AdapterScale> adapters;  // BatchEngine only (Engine: set_adapters); ≤ kMaxLoraPerSeq, distinct ids
  std::vector<PromptImage> images;     // BatchEngine only: in position order, not overlapping
};

struct StepResult {
  std::string_view text;   // emittable UTF-8 delta (may be empty); valid until the next call
  int32_t token = -1;      // sampled token id (-1 if none)
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string_view reasoning;  // reasoning UTF-8 delta (split by GenerationRequest::reasoning)
};

struct GenerationStats {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose K/V were reused (prefix cache)
  int32_t completion_tokens = 0;
  int64_t prefill_ns = 0;     // start (slot taken) → first token sampled
  int64_t decode_ns = 0;      // first token → last token sampled
  int32_t stop_index = -1;    // finish reason Stop by a stop string: its index in the request's list; else -1
};

// CLOCK_MONOTONIC (steady_clock) in ns: the one clock of engine timings.
inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Thread safety: start/step/cancel/logits serialise on an internal mutex (callers release the
// GIL around them, so two Python threads may enter at once); the lane drives it from one thread.
class Engine {
 public:
  // Loads the model (mmap) and tokenizer; threads <= 0 → all cores; ctx_size <= 0 → the
  // model's training context capped at 8192. Throws GgufError/runtime_error.
  // repack_cache_dir: see ModelRuntime (empty: repacked weights in this process's memory).
  Engine(const std::string& path, int threads, int ctx_size = 0, int max_batch = 512,
         const std::string& repack_cache_dir = "");
  ~Engine();

  ModelRuntime& model();
  const GgufFile& gguf() const;
  const Tokenizer& tokenizer() const;
  int32_t n_ctx() const;

  // Begins a new generation (drops any previous one). Throws std::invalid_argument on an
  // empty prompt, a prompt that leaves no room in the context, or out-of-range ids.
  void start(const GenerationRequest& req);
  bool active() const;
  StepResult step();          // requires active(); long-running: call without the GIL
  void cancel();              // ends the active generation with FinishReason::Cancelled
  GenerationStats stats() const;

  // Teacher-forced logits of every position of ids (one batch per max_batch tokens), written
  // to out [ids.size()][n_vocab]. Resets the KV cache. Long-running: call without the GIL.
  void logits(const std::vector<int32_t>& ids, float* out);
  // Same pass, but writes each position's final hidden state (after the output norm, what the
  // LM head reads) to out [ids.size()][n_embd]: the reference for BatchEngine embeddings.
  void hidden_states(const std::vector<int32_t>& ids, float* out);

  // An image's embeddings in a prompt: positions [pos, pos + n_tokens) take the rows of data
  // ([n_tokens][n_embd], from the vision encoder) in place of their token ids; non_causal: those
  // positions attend to the whole image (gemma3, as llama.cpp decodes it).
  struct ImageSpan {
    int32_t pos = 0, n_tokens = 0;
    const float* data = nullptr;
    bool non_causal = false;
  };
  // Logits [n_vocab] of the last position of ids, every position teacher-forced in ONE batch
  // (ids.size() ≤ max_batch, so a non-causal image is never split), with the images' embeddings
  // injected. Resets the KV cache. Long-running: call without the GIL.
  void last_logits_with_images(const std::vector<int32_t>& ids, const std::vector<ImageSpan>& images, float* out);

  // LoRA adapters (model/lora.h) applied to every later forward: (GGUF path, scale) pairs,
  // scale 0 left out; an empty list returns to the base model. Loads and checks every file
  // before replacing the current set (throws GgufError naming the file and problem); drops the
  // cached prefix. Long-running: call without the GIL.
  void set_adapters(const std::vector<std::pair<std::string, float>>& adapters);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls
