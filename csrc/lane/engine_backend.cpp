// The real backend: ls::BatchEngine (csrc/engine) over a GGUF file.
#include "lane/backend.h"
#include "ring/wire.h"

namespace ls::lane {
namespace {

class EngineBackend final : public Backend {
 public:
  EngineBackend(const std::string& path, const BackendOptions& o)
      : engine_(path, o) {}
  int32_t n_ctx() const override { return engine_.n_ctx(); }
  int32_t n_vocab() const override { return engine_.n_vocab(); }
  int32_t num_slots() const override { return engine_.num_slots(); }
  int32_t max_batch_tokens() const override { return engine_.max_batch_tokens(); }
  size_t kv_cache_bytes() const override { return engine_.kv_cache_bytes(); }
  void add(uint64_t rid, uint32_t choice, const GenerationRequest& req) override { engine_.add(rid, choice, req); }
  void add_embedding(uint64_t rid, uint32_t choice, const std::vector<int32_t>& ids) override {
    engine_.add_embedding(rid, choice, ids);
  }
  int32_t n_embd() const override { return engine_.n_embd(); }
  int cancel(uint64_t rid, std::vector<DroppedSeq>* dropped) override { return engine_.cancel(rid, dropped); }
  bool has_work() const override { return engine_.has_work(); }
  size_t num_active() const override { return engine_.num_active(); }
  size_t num_waiting() const override { return engine_.num_waiting(); }
  int32_t last_batch_tokens() const override { return engine_.last_batch_tokens(); }
  int32_t next_prefill_tokens() const override { return engine_.next_prefill_tokens(); }
  const std::vector<SeqEvent>& step() override { return engine_.step(); }
  PromptCacheStats prompt_cache_stats() const override { return engine_.prompt_cache_stats(); }
  size_t load_adapter(int32_t id, const std::string& path) override { return engine_.load_adapter(id, path); }
  bool unload_adapter(int32_t id) override { return engine_.unload_adapter(id); }
  SlotFileResult slot_file(uint32_t action, int32_t slot, const std::string& filename) override {
    switch (wire::SlotAction(action)) {
      case wire::SlotAction::Save:
        return engine_.save_slot(slot, filename);
      case wire::SlotAction::Restore:
        return engine_.restore_slot(slot, filename);
      case wire::SlotAction::Erase:
        return SlotFileResult{engine_.erase_slot(slot), 0};
    }
    throw std::invalid_argument("unknown slot action " + std::to_string(action));
  }

 private:
  BatchEngine engine_;
};

}  // namespace

std::unique_ptr<Backend> make_engine_backend(const std::string& path, const BackendOptions& opts) {
  return std::make_unique<EngineBackend>(path, opts);
}

}  // namespace ls::lane
