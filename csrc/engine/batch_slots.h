// The engine's per-slot and queued-choice records (private to engine/batch_engine.cpp and the
// files it delegates to): what a slot holds and what a waiting choice carries.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/logprobs.h"
#include "engine/sequence.h"
#include "engine/window_pages.h"
#include "model/kv_cache.h"
#include "model/lora.h"

namespace ls::batch {

// A sequence's adapters and the references that keep them loaded until it ends.
struct LoraHold {
  LoraSet set;
  std::shared_ptr<const LoraAdapter> refs[kMaxLoraPerSeq];
  void release() {
    for (auto& r : refs) r.reset();
  }
};

constexpr int32_t kPage = kKvPagePositions;

// A request's adapters among the loaded ones, checked and referenced (throws
// std::invalid_argument before queuing).
inline LoraHold resolve_adapters(const std::unordered_map<int32_t, std::shared_ptr<const LoraAdapter>>& adapters,
                                 const std::vector<AdapterScale>& wanted) {
  LoraHold h;
  for (const AdapterScale& a : wanted) {
    if (a.scale == 0.f) continue;  // left out entirely
    const auto it = adapters.find(a.id);
    if (it == adapters.end()) throw std::invalid_argument("LoRA adapter " + std::to_string(a.id) + " is not loaded");
    for (int32_t k = 0; k < h.set.n; ++k)
      if (h.set.use[k].adapter == it->second.get())
        throw std::invalid_argument("LoRA adapter " + std::to_string(a.id) + " is named twice");
    if (h.set.n == kMaxLoraPerSeq)
      throw std::invalid_argument("at most " + std::to_string(kMaxLoraPerSeq) + " LoRA adapters per request");
    h.refs[h.set.n] = it->second;
    h.set.use[h.set.n++] = LoraUse{it->second.get(), a.scale, it->second->serial()};
  }
  // refs only keep the adapters alive: their order need not follow the sorted uses.
  h.set.sort();
  return h;
}

// One sequence slot: a running sequence and its page tables (the model's sequence index = slot
// index). A free slot maps no page.
struct Slot {
  std::unique_ptr<Sequence> seq;
  std::vector<int32_t> kv_tokens;  // key ids (prompt_key) whose K/V are valid at positions [0, size); capacity ctx_size
  int32_t n_mapped = 0;            // page table entries [0, n_mapped) map pages it holds
  int32_t reserve = 0;             // pages it may still take (admission counted them as available)
  WindowSpan win;                  // its window-group pages (engine/window_pages.h)
  std::vector<int32_t> key;        // the running prompt's key ids (prompt_key)
  bool busy = false;
  uint64_t request_id = 0;
  uint32_t choice = 0;
  int32_t prefilled = 0;    // prompt positions fed so far
  int32_t pos = 0;          // next K/V position once prefilled
  int32_t chunk = 0;        // prompt tokens fed in the current step
  uint64_t admit_order = 0; // FIFO order of prefills
  bool embed = false;       // prefill-only embedding sequence
  bool finished_embed = false;  // its embedding went out this step: free after advance()
  int32_t row0 = 0;         // batch row of its first token in the current step
  int64_t begin_ns = 0;     // admission into the slot
  std::vector<double> embd_sum;  // [n_embd] sum of its tokens' final hidden rows, position order
  std::vector<float> embd_out;   // [n_embd] the finished embedding
  LoraHold lora;                 // adapters of the running sequence (released once it ends)
  LoraSet kv_lora;               // adapters kv_tokens' K/V were computed with (serials only)
  int32_t num_top = -1;          // logprobs: alternatives per scored position; -1 off
  bool prompt_lp = false;        // scores its prompt tokens too (echo)
  std::vector<TokenLogprob> lp;  // [kMaxLogprobPositions][1 + kMaxTopLogprobs] positions scored this step
  uint32_t lp_n = 0, lp_prompt_n = 0;

  TokenLogprob* lp_next() { return lp.data() + size_t(lp_n++) * size_t(1 + num_top); }

  int32_t prompt_size() const { return int32_t(seq->request().prompt_ids.size()); }
  bool decoding() const { return busy && !embed && prefilled == prompt_size(); }
  // A running sequence's stats at `now_ns` (BatchEngine::cancel reports them): mid-prompt, only
  // the positions fed count, and before its first token the prompt has been running until now.
  GenerationStats work_so_far(int64_t now_ns) const {
    GenerationStats st = seq->stats();
    st.stop_index = -1;
    st.prompt_tokens = std::min(st.prompt_tokens, prefilled);
    st.cached_tokens = std::min(st.cached_tokens, prefilled);
    if (st.completion_tokens == 0) st.prefill_ns = now_ns - begin_ns;
    return st;
  }
};

struct Waiting {
  uint64_t request_id;
  uint32_t choice;
  GenerationRequest req;
  bool embed = false;
  MatcherPtr grammar;  // compiled req.grammar (null: unconstrained)
  LoraHold lora;       // req.adapters, resolved at add()
  // req.grammar waits for the model's grammar compiler, still being built (compiled at admission).
  bool grammar_deferred = false;
  std::vector<int32_t> key;  // prompt_key(req)
};

// The ids prefix reuse and the prompt cache compare: the prompt's, except that an image's
// positions (which share one placeholder id) become negative ids derived from the image's content
// hash and the position within the image — never a vocabulary id, and equal only for the same image.
inline std::vector<int32_t> prompt_key(const GenerationRequest& req) {
  std::vector<int32_t> key = req.prompt_ids;
  for (const PromptImage& im : req.images)
    for (int32_t j = 0; j < im.n_tokens; ++j) {
      uint64_t h = im.content_hash + 0x9e3779b97f4a7c15ull * uint64_t(j + 1);  // splitmix64 finaliser
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
      h ^= h >> 31;
      key[size_t(im.pos + j)] = -1 - int32_t(h & 0x3fffffffu);
    }
  return key;
}

// Positions a sequence can have scored in one step: its prompt rows, position 0's null entry and
// the sampled token.
constexpr int32_t kMaxLogprobPositions = kMaxPromptLogitRows + 2;

// Throws std::invalid_argument for images outside the prompt, overlapping or out of order, of the
// wrong embedding size, with prompt logprobs, or non-causal and larger than a step can hold beside
// every slot's decode token.
inline void validate_images(const GenerationRequest& req, int64_t n_embd, int32_t max_batch_tokens, int32_t num_slots) {
  int32_t next = 0;
  for (const PromptImage& im : req.images) {
    if (im.n_tokens <= 0 || im.pos < next || int64_t(im.pos) + im.n_tokens > int64_t(req.prompt_ids.size()))
      throw std::invalid_argument("image span outside the prompt or overlapping another");
    if (!im.embd || int64_t(im.embd->size()) != int64_t(im.n_tokens) * n_embd)
      throw std::invalid_argument("image embeddings must be n_tokens x " + std::to_string(n_embd) + " floats");
    if (im.non_causal && im.n_tokens > max_batch_tokens - num_slots)
      throw std::invalid_argument("an image of " + std::to_string(im.n_tokens) + " tokens needs max_batch_tokens >= " +
                                  std::to_string(im.n_tokens + num_slots));
    next = im.pos + im.n_tokens;
  }
  if (!req.images.empty() && req.prompt_logprobs) throw std::invalid_argument("prompt logprobs over images are not supported");
}

}  // namespace ls::batch
