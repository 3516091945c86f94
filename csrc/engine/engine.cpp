#include "engine/engine.h"

#include <mutex>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/model.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace ls {

const char* finish_reason_name(FinishReason r) {
  if (r == FinishReason::None) return "";  // not finished
  switch (r) {
#define LS_FINISH_NAME(cpp, py, value) \
    case FinishReason::cpp: return #py;
    LS_FINISH_REASONS(LS_FINISH_NAME)
#undef LS_FINISH_NAME
  }
  return "";
}

struct Engine::Impl {
  std::mutex mu;  // one caller at a time: the KV cache, logits and thread pool are shared state
  GgufFile file;
  ModelRuntime model;
  std::unique_ptr<Tokenizer> tokenizer;
  LazyGrammarCompiler grammar;  // built on the first constrained request
  Sequence seq;
  std::vector<float> logits;  // [n_vocab], the row the sampler reads

  // Tokens whose K/V currently sit in cache positions [0, size): a new prompt sharing a prefix
  // with them skips that part of the prefill (multi-turn chats, n > 1 choices, repeated
  // prompts). Per-row results do not depend on the batch split, so reuse is bit-identical.
  std::vector<int32_t> kv_tokens;
  int32_t prefill_from = 0;  // next prompt position to feed
  bool prefilled = false;
  int32_t pos = 0;           // next KV position to write
  // set_adapters(): the adapters every forward applies (lora.n == 0: base model), owned here.
  std::vector<std::unique_ptr<LoraAdapter>> adapters;
  LoraSet lora;
  const LoraSet* lora_or_null() const { return lora.n > 0 ? &lora : nullptr; }

  Impl(const std::string& path, int threads, int ctx_size, int max_batch, const std::string& repack_cache_dir)
      : file(path),
        model(file, ctx_size, max_batch, threads, 1, repack_cache_dir),
        tokenizer(Tokenizer::from_gguf(file)),
        seq(model.config().n_vocab),
        logits(model.config().n_vocab) {
    if (tokenizer->n_vocab() > model.config().n_vocab)
      file.fail("tokenizer has more tokens than the output head");
    kv_tokens.reserve(model.ctx_size());
  }

  // Teacher-forced pass over ids (one batch per max_batch tokens) from an empty cache:
  // per_batch(off, m) runs after each batch's forward. Leaves ids as the cached prefix.
  template <class PerBatch>
  void teacher_forced(const std::vector<int32_t>& ids, bool want_logits, float* logits_out, PerBatch&& per_batch) {
    const int32_t n_vocab = model.config().n_vocab;
    if (ids.empty()) throw std::invalid_argument("no tokens");
    if (int64_t(ids.size()) > model.ctx_size())
      throw std::invalid_argument("more tokens than the context holds");
    for (int32_t id : ids)
      if (id < 0 || id >= n_vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is out of range");
    seq.end();
    kv_tokens.clear();
    const int n = int(ids.size()), B = model.max_batch();
    for (int off = 0; off < n; off += B) {
      const int m = std::min(B, n - off);
      model.forward(ids.data() + off, m, off, want_logits ? logits_out + int64_t(off) * n_vocab : nullptr,
                      want_logits, lora_or_null());
      per_batch(off, m);
    }
    kv_tokens.assign(ids.begin(), ids.end());
  }
};

Engine::Engine(const std::string& path, int threads, int ctx_size, int max_batch, const std::string& repack_cache_dir)
    : impl_(std::make_unique<Impl>(path, threads, ctx_size, max_batch, repack_cache_dir)) {}
Engine::~Engine() = default;

ModelRuntime& Engine::model() { return impl_->model; }
const GgufFile& Engine::gguf() const { return impl_->file; }
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
int32_t Engine::n_ctx() const { return impl_->model.ctx_size(); }
bool Engine::active() const { return impl_->seq.active(); }
GenerationStats Engine::stats() const { return impl_->seq.stats(); }

void Engine::start(const GenerationRequest& req) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  validate_request(req, s.model.config().n_vocab, s.model.ctx_size());
  if (!req.images.empty()) throw std::invalid_argument("Engine generations take no images (BatchEngine does)");
  // Reuse the cached prefix, but always recompute the last prompt token (its logits are needed).
  const size_t n = req.prompt_ids.size();
  size_t same = 0;
  while (same < s.kv_tokens.size() && same + 1 < n && s.kv_tokens[same] == req.prompt_ids[same]) ++same;
  MatcherPtr grammar = s.grammar.compile(*s.tokenizer, req.grammar);
  s.seq.begin(req, *s.tokenizer, int32_t(same), steady_now_ns(), std::move(grammar));
  s.kv_tokens.resize(same);
  s.prefill_from = int32_t(same);
  s.pos = 0;
  s.prefilled = false;
}

StepResult Engine::step() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.seq.active()) throw std::logic_error("step() without an active generation");
  // 1. Run the model: the prompt one batch (≤ max_batch tokens) per step, then the last
  //    sampled token. A long prompt thus spans several steps, between which the caller can
  //    heartbeat and take cancels; those steps return no token.
  if (!s.prefilled) {
    const auto& ids = s.seq.request().prompt_ids;
    const int n = int(ids.size()), off = s.prefill_from;
    const int m = std::min(s.model.max_batch(), n - off);
    s.model.forward(ids.data() + off, m, off, off + m == n ? s.logits.data() : nullptr, false, s.lora_or_null());
    s.prefill_from += m;
    s.kv_tokens.assign(ids.begin(), ids.begin() + s.prefill_from);  // within the reserved capacity
    if (s.prefill_from < n) return StepResult{{}, -1, false, FinishReason::None};
    s.pos = n;
    s.prefilled = true;
  } else {
    const int32_t last = s.seq.last_token();
    s.model.forward(&last, 1, s.pos, s.logits.data(), false, s.lora_or_null());
    s.kv_tokens.push_back(last);
    s.pos += 1;
  }
  // 2. Sample, detokenize, decide the end.
  return s.seq.sample(s.logits.data(), s.pos, s.model.ctx_size(), *s.tokenizer, steady_now_ns());
}

void Engine::cancel() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->seq.end();
}

void Engine::logits(const std::vector<int32_t>& ids, float* out) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->teacher_forced(ids, true, out, [](int, int) {});
}

void Engine::last_logits_with_images(const std::vector<int32_t>& ids, const std::vector<ImageSpan>& images,
                                     float* out) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const int n = int(ids.size());
  if (n == 0 || n > s.model.max_batch()) throw std::invalid_argument("prompt must be 1..max_batch tokens");
  const int64_t E = s.model.config().n_embd;
  std::vector<BatchToken> batch(static_cast<size_t>(n));
  std::vector<const float*> rows(static_cast<size_t>(n), nullptr);
  for (int i = 0; i < n; ++i) batch[size_t(i)] = BatchToken{ids[size_t(i)], i, 0};
  for (const ImageSpan& im : images) {
    if (im.pos < 0 || im.n_tokens <= 0 || im.pos + im.n_tokens > n || !im.data)
      throw std::invalid_argument("image span outside the prompt");
    for (int j = 0; j < im.n_tokens; ++j) {
      rows[size_t(im.pos + j)] = im.data + j * E;
      if (im.non_causal) batch[size_t(im.pos + j)].attend_to = im.pos + im.n_tokens - 1;
    }
  }
  s.seq.end();
  s.kv_tokens.clear();  // the cache now holds image positions no token list describes
  const int32_t last = n - 1;
  s.model.forward_batch(batch.data(), n, &last, 1, out, nullptr, rows.data());
}

void Engine::set_adapters(const std::vector<std::pair<std::string, float>>& adapters) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (adapters.size() > size_t(kMaxLoraPerSeq))
    throw std::invalid_argument("at most " + std::to_string(kMaxLoraPerSeq) + " LoRA adapters at once");
  std::vector<std::unique_ptr<LoraAdapter>> loaded;
  LoraSet set;
  for (const auto& [path, scale] : adapters) {
    if (scale == 0.f) continue;  // left out entirely
    loaded.push_back(std::make_unique<LoraAdapter>(path, s.file, s.model.config()));
    set.use[set.n++] = LoraUse{loaded.back().get(), scale, loaded.back()->serial()};
  }
  set.sort();
  s.seq.end();
  s.kv_tokens.clear();  // K/V computed under other adapters
  s.adapters = std::move(loaded);
  s.lora = set;
}

void Engine::hidden_states(const std::vector<int32_t>& ids, float* out) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const int64_t E = s.model.config().n_embd;
  s.teacher_forced(ids, false, nullptr, [&](int off, int m) { s.model.final_hidden(0, m, out + off * E); });
}

}  // namespace ls
