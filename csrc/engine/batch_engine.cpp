#include "engine/batch_engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/sequence.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ls {

namespace {

// One sequence slot: its K/V region in the model's cache is sequence index = slot index.
struct Slot {
  std::unique_ptr<Sequence> seq;
  std::vector<int32_t> kv_tokens;  // tokens whose K/V are valid at positions [0, size); capacity ctx_size
  bool busy = false;
  uint64_t request_id = 0;
  uint32_t choice = 0;
  int32_t prefilled = 0;    // prompt positions fed so far
  int32_t pos = 0;          // next K/V position once prefilled
  int32_t chunk = 0;        // prompt tokens fed in the current step
  uint64_t admit_order = 0; // FIFO order of prefills
  uint64_t last_used = 0;   // LRU among free slots with equal prefixes
  bool embed = false;       // prefill-only embedding sequence
  bool finished_embed = false;  // its embedding went out this step: free after advance()
  int32_t row0 = 0;         // batch row of its first token in the current step
  int64_t begin_ns = 0;     // admission into the slot
  std::vector<double> embd_sum;  // [n_embd] sum of its tokens' final hidden rows, position order
  std::vector<float> embd_out;   // [n_embd] the finished embedding

  int32_t prompt_size() const { return int32_t(seq->request().prompt_ids.size()); }
  bool decoding() const { return busy && !embed && prefilled == prompt_size(); }
};

struct Waiting {
  uint64_t request_id;
  uint32_t choice;
  GenerationRequest req;
  bool embed = false;
  MatcherPtr grammar;  // compiled req.grammar (null: unconstrained)
};

// Length of the common prefix, capped so the last prompt token is always recomputed (its
// logits are needed to sample the first token).
int32_t reusable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) {
  const size_t cap = std::min(cached.size(), prompt.size() - 1);
  size_t n = 0;
  while (n < cap && cached[n] == prompt[n]) ++n;
  return int32_t(n);
}

}  // namespace

struct BatchEngine::Impl {
  GgufFile file;
  ModelRuntime model;
  std::unique_ptr<Tokenizer> tokenizer;
  LazyGrammarCompiler grammar;  // built in the background from construction (if llguidance is loaded)
  int32_t max_batch_tokens;
  std::vector<Slot> slots;
  std::deque<Waiting> waiting;
  uint64_t counter = 0;
  int32_t last_batch_tokens = 0;

  // Per-step buffers, sized at construction.
  std::vector<BatchToken> batch;     // [max_batch_tokens]
  std::vector<int32_t> out_rows;     // [num_slots] batch rows whose logits are needed
  std::vector<int32_t> out_slots;    // [num_slots] the slot of each such row
  std::vector<int32_t> prefilling;   // [num_slots] slots still prefilling, in admission order
  std::vector<float> logits;         // [num_slots][n_vocab]
  std::vector<SeqEvent> events;      // [num_slots]
  std::vector<float> hidden;         // [max_batch_tokens][n_embd] final hidden rows of embedding chunks

  Impl(const std::string& path, const BatchEngineOptions& o)
      : file(path),
        model(file, o.ctx_size, o.max_batch_tokens, o.threads, o.num_slots),
        tokenizer(Tokenizer::from_gguf(file)),
        max_batch_tokens(model.max_batch()) {
    const int32_t n_vocab = model.config().n_vocab;
    if (tokenizer->n_vocab() > n_vocab) file.fail("tokenizer has more tokens than the output head");
    slots.resize(o.num_slots);
    for (Slot& s : slots) {
      s.seq = std::make_unique<Sequence>(n_vocab);
      s.kv_tokens.reserve(model.ctx_size());
      s.embd_sum.resize(model.config().n_embd);
      s.embd_out.resize(model.config().n_embd);
    }
    batch.resize(max_batch_tokens);
    out_rows.reserve(o.num_slots);
    out_slots.reserve(o.num_slots);
    prefilling.reserve(o.num_slots);
    logits.resize(size_t(o.num_slots) * n_vocab);
    events.reserve(o.num_slots);
    hidden.resize(size_t(max_batch_tokens) * model.config().n_embd);
    grammar.prefetch(*tokenizer);
  }

  bool sibling_prefilling(uint64_t request_id) const {
    for (const Slot& s : slots)
      if (s.busy && s.request_id == request_id && !s.decoding()) return true;
    return false;
  }

  // Phase 1: FIFO admission. A choice whose sibling is still prefilling waits for it, so it can
  // copy the sibling's prompt K/V instead of computing it again (n > 1 choices).
  void admit() {
    for (auto it = waiting.begin(); it != waiting.end();) {
      const int dst = pick_free_slot(it->req.prompt_ids);
      if (dst < 0) return;
      if (!it->embed && sibling_prefilling(it->request_id)) {
        ++it;
        continue;
      }
      start(dst, *it);
      it = waiting.erase(it);
    }
  }

  // The free slot whose cached tokens share the longest prefix with the prompt (ties: least
  // recently used), or -1.
  int pick_free_slot(const std::vector<int32_t>& prompt) const {
    int best = -1;
    int32_t best_len = -1;
    for (int i = 0; i < int(slots.size()); ++i) {
      const Slot& s = slots[i];
      if (s.busy) continue;
      const int32_t len = reusable_prefix(s.kv_tokens, prompt);
      if (len > best_len || (len == best_len && s.last_used < slots[best].last_used)) {
        best = i;
        best_len = len;
      }
    }
    return best;
  }

  void start(int dst, Waiting& w) {
    Slot& d = slots[dst];
    const auto& prompt = w.req.prompt_ids;
    // An embedding needs every token's hidden state: it starts at position 0.
    int32_t cached = w.embed ? 0 : reusable_prefix(d.kv_tokens, prompt);
    // A longer prefix in another slot (busy or not: positions below its fill never change) is
    // copied over: shared system prompts and sibling choices skip that part of the prefill.
    int src = -1;
    for (int i = 0; i < int(slots.size()) && !w.embed; ++i) {
      if (i == dst) continue;
      const int32_t len = reusable_prefix(slots[i].kv_tokens, prompt);
      if (len > cached) {
        cached = len;
        src = i;
      }
    }
    if (src >= 0) model.copy_kv(src, dst, cached);
    d.kv_tokens.assign(prompt.begin(), prompt.begin() + cached);
    d.seq->begin(w.req, *tokenizer, cached, steady_now_ns(), std::move(w.grammar));
    d.busy = true;
    d.request_id = w.request_id;
    d.choice = w.choice;
    d.prefilled = cached;
    d.pos = cached;
    d.admit_order = ++counter;
    d.embed = w.embed;
    d.begin_ns = steady_now_ns();
    if (w.embed) std::fill(d.embd_sum.begin(), d.embd_sum.end(), 0.0);
  }

  // Phase 2: the batch. Returns its size.
  int build_batch() {
    int n = 0;
    out_rows.clear();
    out_slots.clear();
    prefilling.clear();
    for (int i = 0; i < int(slots.size()); ++i) {
      Slot& s = slots[i];
      s.chunk = 0;
      if (!s.busy) continue;
      if (s.decoding()) {
        batch[n] = BatchToken{s.seq->last_token(), s.pos, i};
        out_rows.push_back(n++);
        out_slots.push_back(i);
      } else {
        prefilling.push_back(i);
      }
    }
    std::sort(prefilling.begin(), prefilling.end(),
              [&](int a, int b) { return slots[a].admit_order < slots[b].admit_order; });
    for (int i : prefilling) {
      Slot& s = slots[i];
      const int32_t m = std::min(max_batch_tokens - n, s.prompt_size() - s.prefilled);
      if (m <= 0) break;
      const int32_t* ids = s.seq->request().prompt_ids.data();
      for (int32_t j = 0; j < m; ++j) batch[n++] = BatchToken{ids[s.prefilled + j], s.prefilled + j, i};
      s.chunk = m;
      s.row0 = n - m;
      if (!s.embed && s.prefilled + m == s.prompt_size()) {
        out_rows.push_back(n - 1);
        out_slots.push_back(i);
      }
    }
    return n;
  }

  // After the forward pass: the fed tokens' K/V are valid.
  void advance() {
    for (Slot& s : slots) {
      if (!s.busy) continue;
      if (s.chunk > 0) {
        const int32_t* ids = s.seq->request().prompt_ids.data();
        s.kv_tokens.insert(s.kv_tokens.end(), ids + s.prefilled, ids + s.prefilled + s.chunk);
        s.prefilled += s.chunk;
        s.pos = s.prefilled;
      } else if (s.decoding() && s.seq->last_token() >= 0) {
        s.kv_tokens.push_back(s.seq->last_token());
        s.pos += 1;
      }
    }
  }

  // After the forward pass (before advance()): adds the final hidden rows of each embedding
  // chunk to its slot's sum, one token at a time in position order — the same additions in the
  // same order however the prompt was chunked, so the result does not depend on batchmates. At
  // the last chunk: mean, L2-normalise, event, slot free.
  void embed_chunks(int64_t now_ns) {
    const int64_t E = model.config().n_embd;
    for (Slot& s : slots) {
      if (!s.busy || !s.embed || s.chunk == 0) continue;
      model.final_hidden(s.row0, s.chunk, hidden.data());
      double* sum = s.embd_sum.data();
      for (int32_t r = 0; r < s.chunk; ++r) {
        const float* h = hidden.data() + r * E;
        for (int64_t j = 0; j < E; ++j) sum[j] += double(h[j]);
      }
      if (s.prefilled + s.chunk < s.prompt_size()) continue;
      double norm2 = 0.0;
      for (int64_t j = 0; j < E; ++j) norm2 += sum[j] * sum[j];  // mean's 1/n cancels in the norm
      const double inv = norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 0.0;
      for (int64_t j = 0; j < E; ++j) s.embd_out[j] = float(sum[j] * inv);
      GenerationStats st = s.seq->stats();
      st.prefill_ns = now_ns - s.begin_ns;
      events.push_back(SeqEvent{s.request_id, s.choice, {}, true, FinishReason::Stop, st, {}, s.embd_out.data()});
      s.seq->end();
      s.finished_embed = true;
    }
  }
};

BatchEngine::BatchEngine(const std::string& path, const BatchEngineOptions& opts) {
  if (opts.num_slots < 1 || opts.num_slots > 256) throw std::invalid_argument("num_slots must be between 1 and 256");
  if (opts.max_batch_tokens < opts.num_slots)
    throw std::invalid_argument("max_batch_tokens must be at least num_slots (one decode token per slot)");
  impl_ = std::make_unique<Impl>(path, opts);
}
BatchEngine::~BatchEngine() = default;

int32_t BatchEngine::n_ctx() const { return impl_->model.ctx_size(); }
int32_t BatchEngine::n_vocab() const { return impl_->tokenizer->n_vocab(); }
int32_t BatchEngine::num_slots() const { return int32_t(impl_->slots.size()); }
int32_t BatchEngine::max_batch_tokens() const { return impl_->max_batch_tokens; }
size_t BatchEngine::kv_cache_bytes() const { return impl_->model.kv_cache_bytes(); }
int32_t BatchEngine::last_batch_tokens() const { return impl_->last_batch_tokens; }
size_t BatchEngine::num_waiting() const { return impl_->waiting.size(); }

size_t BatchEngine::num_active() const {
  size_t n = 0;
  for (const Slot& s : impl_->slots) n += s.busy;
  return n;
}

int32_t BatchEngine::next_prefill_tokens() const {
  int64_t n = 0;
  for (const Slot& s : impl_->slots)
    if (s.busy && !s.decoding()) n += s.prompt_size() - s.prefilled;
  for (const Waiting& w : impl_->waiting) n += int64_t(w.req.prompt_ids.size());
  return int32_t(std::min<int64_t>(n, impl_->max_batch_tokens));
}

bool BatchEngine::has_work() const { return !impl_->waiting.empty() || num_active() > 0; }

void BatchEngine::add(uint64_t request_id, uint32_t choice, const GenerationRequest& req) {
  validate_request(req, impl_->model.config().n_vocab, impl_->model.ctx_size());
  MatcherPtr grammar = impl_->grammar.compile(*impl_->tokenizer, req.grammar);
  impl_->waiting.push_back(Waiting{request_id, choice, req, false, std::move(grammar)});
}

void BatchEngine::add_embedding(uint64_t request_id, uint32_t choice, const std::vector<int32_t>& prompt_ids) {
  const int32_t n_vocab = impl_->model.config().n_vocab, ctx = impl_->model.ctx_size();
  if (prompt_ids.empty()) throw std::invalid_argument("the input is empty");
  if (int64_t(prompt_ids.size()) > ctx)
    throw std::invalid_argument("the input has " + std::to_string(prompt_ids.size()) +
                                " tokens; the context holds " + std::to_string(ctx));
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= n_vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is out of range");
  Waiting w{request_id, choice, GenerationRequest{}, true};
  w.req.prompt_ids = prompt_ids;
  w.req.max_tokens = 1;
  impl_->waiting.push_back(std::move(w));
}

int32_t BatchEngine::n_embd() const { return impl_->model.config().n_embd; }

int BatchEngine::cancel(uint64_t request_id) {
  Impl& s = *impl_;
  int dropped = 0;
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (it->request_id == request_id) {
      it = s.waiting.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  for (Slot& slot : s.slots) {
    if (slot.busy && slot.request_id == request_id) {
      slot.seq->end();
      slot.busy = false;  // its K/V up to kv_tokens stay valid for prefix reuse
      slot.last_used = ++s.counter;
      ++dropped;
    }
  }
  return dropped;
}

const std::vector<SeqEvent>& BatchEngine::step() {
  Impl& s = *impl_;
  s.events.clear();
  // 1. Admission.
  s.admit();
  // 2. Batch.
  const int n = s.build_batch();
  s.last_batch_tokens = n;
  if (n == 0) return s.events;
  // 3. One forward pass over every sequence's tokens.
  s.model.forward_batch(s.batch.data(), n, s.out_rows.data(), int(s.out_rows.size()), s.logits.data());
  const int64_t now = steady_now_ns();
  s.embed_chunks(now);  // embedding sequences: pool their rows (and finish at the last chunk)
  s.advance();
  for (Slot& slot : s.slots) {
    if (!slot.finished_embed) continue;
    slot.finished_embed = false;
    slot.busy = false;  // its K/V stay valid for prefix reuse
    slot.last_used = ++s.counter;
  }
  // 4. Sample each sequence that produced logits.
  const int32_t n_vocab = s.model.config().n_vocab;
  for (size_t k = 0; k < s.out_slots.size(); ++k) {
    Slot& slot = s.slots[s.out_slots[k]];
    const StepResult r = slot.seq->sample(s.logits.data() + k * size_t(n_vocab), slot.pos, s.model.ctx_size(),
                                          *s.tokenizer, now);
    s.events.push_back(SeqEvent{slot.request_id, slot.choice, r.text, r.finished, r.reason, slot.seq->stats(),
                                r.reasoning});
    if (r.finished) {
      slot.busy = false;
      slot.last_used = ++s.counter;
    }
  }
  return s.events;
}

}  // namespace ls
