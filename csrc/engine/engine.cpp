#include "engine/engine.h"

#include <chrono>
#include <mutex>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/model.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    default: return "";
  }
}

struct Engine::Impl {
  std::mutex mu;  // one caller at a time: the KV cache, logits and thread pool are shared state
  GgufFile file;
  ModelRuntime model;
  std::unique_ptr<Tokenizer> tokenizer;
  Sampler sampler;
  StopMatcher stop;
  Utf8Stream utf8;
  std::vector<float> logits;  // [n_vocab], the row the sampler reads

  // Generation state (valid while active).
  GenerationRequest req;
  GenerationStats stats;
  bool active = false, prefilled = false;
  // Tokens whose K/V currently sit in cache positions [0, size): a new prompt sharing a prefix
  // with them skips that part of the prefill (multi-turn chats, n > 1 choices, repeated
  // prompts). Per-row results do not depend on the batch split, so reuse is bit-identical.
  std::vector<int32_t> kv_tokens;
  int32_t prefill_from = 0;
  int32_t pos = 0;           // next KV position to write
  int32_t last_token = -1;   // sampled, not yet fed
  std::string out;           // this step's emitted text; capacity kept across steps

  Impl(const std::string& path, int threads, int ctx_size, int max_batch)
      : file(path),
        model(file, ctx_size, max_batch, threads),
        tokenizer(Tokenizer::from_gguf(file)),
        sampler(model.config().n_vocab),
        logits(model.config().n_vocab) {
    if (tokenizer->n_vocab() > model.config().n_vocab)
      file.fail("tokenizer has more tokens than the output head");
    out.reserve(4096);
    kv_tokens.reserve(model.ctx_size());
  }

  // Releases held-back text at the end of a generation (dangling UTF-8, stop-string prefix).
  void flush_text() {
    std::string_view tail = utf8.finish();
    if (!tail.empty()) out.append(stop.push(tail));
    if (!stop.stopped()) out.append(stop.flush());
  }

  StepResult finish(FinishReason reason, int32_t token) {
    if (reason != FinishReason::Cancelled && reason != FinishReason::Stop) flush_text();
    active = false;
    return StepResult{out, token, true, reason};
  }
};

Engine::Engine(const std::string& path, int threads, int ctx_size, int max_batch)
    : impl_(std::make_unique<Impl>(path, threads, ctx_size, max_batch)) {}
Engine::~Engine() = default;

ModelRuntime& Engine::model() { return impl_->model; }
const GgufFile& Engine::gguf() const { return impl_->file; }
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
int32_t Engine::n_ctx() const { return impl_->model.ctx_size(); }
bool Engine::active() const { return impl_->active; }
const GenerationStats& Engine::stats() const { return impl_->stats; }

void Engine::start(const GenerationRequest& req) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const int32_t n_vocab = s.model.config().n_vocab;
  if (req.prompt_ids.empty()) throw std::invalid_argument("the prompt is empty");
  if (int64_t(req.prompt_ids.size()) >= s.model.ctx_size())
    throw std::invalid_argument("the prompt has " + std::to_string(req.prompt_ids.size()) +
                                " tokens; the context holds " + std::to_string(s.model.ctx_size()));
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= n_vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is out of range");
  if (req.max_tokens < 1) throw std::invalid_argument("max_tokens must be at least 1");
  for (const auto& [id, bias] : req.sampling.logit_bias)
    if (id < 0 || id >= n_vocab) throw std::invalid_argument("logit_bias token id " + std::to_string(id) + " is out of range");
  s.req = req;
  s.stats = GenerationStats{};
  s.stats.prompt_tokens = int32_t(req.prompt_ids.size());
  s.sampler.reset(req.sampling, req.prompt_ids, s.tokenizer->eog_ids());
  s.stop.reset(req.stop);
  s.utf8.reset();
  // Reuse the cached prefix, but always recompute the last prompt token (its logits are needed).
  const size_t n = req.prompt_ids.size();
  size_t same = 0;
  while (same < s.kv_tokens.size() && same + 1 < n && s.kv_tokens[same] == req.prompt_ids[same]) ++same;
  s.kv_tokens.resize(same);
  s.prefill_from = int32_t(same);
  s.stats.cached_tokens = int32_t(same);
  s.pos = 0;
  s.last_token = -1;
  s.prefilled = false;
  s.active = true;
}

StepResult Engine::step() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active) throw std::logic_error("step() without an active generation");
  s.out.clear();
  const int64_t t0 = now_ns();
  const bool prefill_step = !s.prefilled;

  // 1. Run the model: the prompt one batch (≤ max_batch tokens) per step, then the last
  //    sampled token. A long prompt thus spans several steps, between which the caller can
  //    heartbeat and take cancels; those steps return no token.
  if (!s.prefilled) {
    const auto& ids = s.req.prompt_ids;
    const int n = int(ids.size()), off = s.prefill_from;
    const int m = std::min(s.model.max_batch(), n - off);
    s.model.forward(ids.data() + off, m, off, off + m == n ? s.logits.data() : nullptr, false);
    s.prefill_from += m;
    s.kv_tokens.assign(ids.begin(), ids.begin() + s.prefill_from);  // within the reserved capacity
    if (s.prefill_from < n) {
      s.stats.prefill_ns += now_ns() - t0;
      return StepResult{s.out, -1, false, FinishReason::None};
    }
    s.pos = n;
    s.prefilled = true;
  } else {
    s.model.forward(&s.last_token, 1, s.pos, s.logits.data(), false);
    s.kv_tokens.push_back(s.last_token);
    s.pos += 1;
  }

  // 2. Sample.
  const int32_t token = s.sampler.sample(s.logits.data(), s.stats.completion_tokens);
  s.sampler.accept(token);
  const int64_t elapsed = now_ns() - t0;
  (prefill_step ? s.stats.prefill_ns : s.stats.decode_ns) += elapsed;

  // 3. Turn the token into emittable text and decide whether the generation ends.
  if (s.tokenizer->is_eog(token)) {
    s.flush_text();
    s.active = false;
    return StepResult{s.out, token, true, FinishReason::Stop};
  }
  s.stats.completion_tokens += 1;
  s.last_token = token;
  std::string_view text = s.utf8.push(s.tokenizer->piece(token, false));
  if (!text.empty()) s.out.append(s.stop.push(text));
  if (s.stop.stopped()) return s.finish(FinishReason::Stop, token);
  if (s.stats.completion_tokens >= s.req.max_tokens || s.pos >= s.model.ctx_size())
    return s.finish(FinishReason::Length, token);
  return StepResult{s.out, token, false, FinishReason::None};
}

void Engine::cancel() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->active = false;
}

void Engine::logits(const std::vector<int32_t>& ids, float* out) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const int32_t n_vocab = s.model.config().n_vocab;
  if (ids.empty()) throw std::invalid_argument("no tokens");
  if (int64_t(ids.size()) > s.model.ctx_size())
    throw std::invalid_argument("more tokens than the context holds");
  for (int32_t id : ids)
    if (id < 0 || id >= n_vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is out of range");
  s.active = false;
  s.kv_tokens.clear();
  const int n = int(ids.size()), B = s.model.max_batch();
  for (int off = 0; off < n; off += B) {
    const int m = std::min(B, n - off);
    s.model.forward(ids.data() + off, m, off, out + int64_t(off) * n_vocab, true);
  }
  s.kv_tokens.assign(ids.begin(), ids.end());
}

}  // namespace ls
