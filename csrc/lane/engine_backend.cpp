// The real backend: ls::Engine (csrc/engine) over a GGUF file.
#include "engine/engine.h"
#include "lane/backend.h"
#include "tokenizer/tokenizer.h"

namespace ls::lane {
namespace {

class EngineBackend final : public Backend {
 public:
  EngineBackend(const std::string& path, int threads, int ctx_size) : engine_(path, threads, ctx_size) {}
  int32_t n_ctx() const override { return engine_.n_ctx(); }
  int32_t n_vocab() const override { return engine_.tokenizer().n_vocab(); }
  void start(const GenerationRequest& req) override { engine_.start(req); }
  StepResult step() override { return engine_.step(); }
  void cancel() override {
    if (engine_.active()) engine_.cancel();
  }
  GenerationStats stats() const override { return engine_.stats(); }

 private:
  Engine engine_;
};

}  // namespace

std::unique_ptr<Backend> make_engine_backend(const std::string& path, int threads, int ctx_size) {
  return std::make_unique<EngineBackend>(path, threads, ctx_size);
}

}  // namespace ls::lane
