// What a lane drives: many sequences, one step at a time. The real implementation is
// ls::BatchEngine (engine_backend.cpp); a synthetic one (synthetic_backend.cpp) produces numbered
// text at a set pace, with the same slots/queue semantics, so the ring, the lane loop, the relay
// and the supervisor can be tested and benchmarked without a model.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/batch_engine.h"

namespace ls::lane {

// A lane's backend takes the engine's options (the synthetic one reads the slot and batch fields).
using BackendOptions = BatchEngineOptions;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int32_t n_ctx() const = 0;
  virtual int32_t n_vocab() const = 0;
  virtual int32_t num_slots() const = 0;
  virtual int32_t max_batch_tokens() const = 0;
  virtual size_t kv_cache_bytes() const = 0;
  // Queue one choice; throws std::invalid_argument for a request the model cannot take.
  virtual void add(uint64_t request_id, uint32_t choice, const GenerationRequest& req) = 0;
  // Queue one embedding input (prefill-only; its final event carries `embedding` [n_embd()]).
  virtual void add_embedding(uint64_t request_id, uint32_t choice, const std::vector<int32_t>& prompt_ids) = 0;
  virtual int32_t n_embd() const = 0;
  // Returns the choices dropped; with `dropped`, appends each one's work so far (BatchEngine::cancel).
  virtual int cancel(uint64_t request_id, std::vector<DroppedSeq>* dropped = nullptr) = 0;
  virtual bool has_work() const = 0;
  virtual size_t num_active() const = 0;
  virtual size_t num_waiting() const = 0;
  virtual int32_t last_batch_tokens() const = 0;
  virtual int32_t next_prefill_tokens() const = 0;  // prompt tokens the next step feeds (0: decode only)
  virtual const std::vector<SeqEvent>& step() = 0;  // long-running; never called with the GIL
  // The prompt cache's figures (BatchEngine::prompt_cache_stats); a backend without one: zeros.
  virtual PromptCacheStats prompt_cache_stats() const { return {}; }
  // LoRA adapters (BatchEngine::load_adapter / unload_adapter): load returns the tensor bytes,
  // throws with a message naming the file and problem. Backends without adapters refuse.
  virtual size_t load_adapter(int32_t /*id*/, const std::string& /*path*/) {
    throw std::runtime_error("this lane's backend does not take LoRA adapters");
  }
  virtual bool unload_adapter(int32_t /*id*/) { return false; }
  // Slot files (BatchEngine::save_slot / restore_slot / erase_slot); erase's n_tokens: erased.
  // Throws like those; backends without them refuse.
  virtual SlotFileResult slot_file(uint32_t /*action*/, int32_t /*slot*/, const std::string& /*filename*/) {
    throw std::invalid_argument("this lane's backend has no slot files");
  }
};

// "synthetic:key=value,..." → synthetic backend; anything else is a GGUF path for the engine.
// Throws (any std::exception) with a message naming the path when loading fails.
std::unique_ptr<Backend> make_backend(const std::string& path, const BackendOptions& opts);
std::unique_ptr<Backend> make_synthetic_backend(const std::string& spec, const BackendOptions& opts);
std::unique_ptr<Backend> make_engine_backend(const std::string& path, const BackendOptions& opts);
std::vector<std::string> backend_names();

}  // namespace ls::lane
