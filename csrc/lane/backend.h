// What a lane drives: one generation at a time. The real implementation wraps ls::Engine
// (engine_backend.cpp); a synthetic one (synthetic_backend.cpp) produces numbered text at a set
// pace so the ring, the lane loop and the supervisor can be tested and benchmarked without a model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ls::lane {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int32_t n_ctx() const = 0;
  virtual int32_t n_vocab() const = 0;
  virtual void start(const GenerationRequest& req) = 0;  // throws std::invalid_argument
  virtual StepResult step() = 0;                          // long-running; never called with the GIL
  virtual void cancel() = 0;
  virtual GenerationStats stats() const = 0;
};

// "synthetic:key=value,..." → synthetic backend; anything else is a GGUF path for the engine.
// Throws (any std::exception) with a message naming the path when loading fails.
std::unique_ptr<Backend> make_backend(const std::string& path, int threads, int ctx_size);
std::unique_ptr<Backend> make_synthetic_backend(const std::string& spec);
std::unique_ptr<Backend> make_engine_backend(const std::string& path, int threads, int ctx_size);
std::vector<std::string> backend_names();

}  // namespace ls::lane
