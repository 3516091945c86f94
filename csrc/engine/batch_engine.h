// BatchEngine: continuous batching over one loaded model — many sequences, one forward pass per
// step. What a lane runs.
//
// Sequences and pages: at most `num_slots` sequences run at once, their K/V in pages of one pool
// (engine/page_pool.h) mapped by each one's page table, so a lane holds many short sequences or
// a few long ones in the same memory; more choices wait in a FIFO inside the engine. Each step
// (numbered phases in step()):
//   1 admit waiting choices into free slots while the pool can give each every page it may fill
//     (prompt + max_tokens, up to the context) beside what running ones may still take; a choice
//     first maps the longest cached prefix of its key ids by reference (engine/prefix_tree.h:
//     prompts of running sequences, and finished or cancelled sequences' pages until evicted);
//   2 build one batch: one token per decoding sequence, then prompt chunks of prefilling ones in
//     admission order, up to max_batch_tokens (chunked prefill: a long prompt delays the running
//     streams by at most one chunk per step);
//   3 one forward pass (every weight matrix read once for the whole batch); the LM head only for
//     rows whose logits are needed;
//   4 sample each of those sequences with its own state → events.
// Logprobs (engine/logprobs.h): a sequence that asks for them is scored from its raw logits row
// before sampling changes it. One that also asks for prompt logprobs (echo) starts at position 0
// (no cached prefix: every prompt row's logits are needed), feeds at most kMaxPromptLogitRows
// prompt tokens per step, and gets the LM head on each of those rows — only such sequences pay
// for prompt rows; the logits buffer grows to hold them the first time one arrives.
// Embedding sequences (add_embedding) are prefill-only: their chunks ride in the same batches,
// need no LM head, and after the forward pass the engine adds each of their tokens' final hidden
// states (after the output norm) to the slot's sum; at the last chunk the mean, L2-normalised,
// is the event's `embedding`. They always start at position 0 (every token's hidden state is
// needed, so no cached prefix is reused) but leave their K/V for later prefix reuse.
// LoRA adapters (model/lora.h): a table of loaded adapters by id; each sequence applies the
// adapters its request names (GenerationRequest::adapters), so one step mixes sequences of
// different adapters and of the base model — the base matmuls run once for all rows, the
// low-rank terms per adapter group. A sequence holds a reference to its adapters from add() to
// its end, so unloading never waits and never disturbs it. Cached pages are reused only
// by a request with the same adapters at the same scales.
// Determinism: a row's result does not depend on its batchmates or the thread count (kernels
// and attention are row-independent), and sampling state is per sequence, so a seeded request
// gives the same tokens alone or amid others.
// Not thread-safe: one thread (the lane loop) drives it. Nothing is allocated in step() except
// when a request is added (its copy) — buffers are sized at construction.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/logprobs.h"
#include "engine/prefix_tree.h"

namespace ls {

class Sequence;

// One sequence's outcome of a step. `text` points into engine memory valid until the next step().
struct SeqEvent {
  uint64_t request_id;
  uint32_t choice;
  std::string_view text;
  bool finished;
  FinishReason reason;
  GenerationStats stats;  // final when finished
  std::string_view reasoning{};  // reasoning text of this step (channel Reasoning)
  const float* embedding = nullptr;  // embedding sequences, when finished: [n_embd], L2 norm 1;
                                     // engine memory valid until the next step()
  // Sequences asking for logprobs (GenerationRequest::num_top_logprobs ≥ 0): positions scored
  // this step, each logprob_stride = 1 + num_top entries (engine/logprobs.h); the first
  // num_prompt_logprobs score prompt tokens, the rest the generated token (an end-of-generation
  // token is not scored: it produces no text). Engine memory valid until the next step().
  const TokenLogprob* logprobs = nullptr;
  uint32_t num_logprobs = 0;
  uint32_t num_prompt_logprobs = 0;
  uint32_t logprob_stride = 0;
};

struct BatchEngineOptions {
  int threads = 0;            // ≤ 0: all cores
  int ctx_size = 0;           // per slot; ≤ 0: training context capped at 8192
  int num_slots = 8;          // sequences served at once
  int max_batch_tokens = 256; // per-step token budget (≥ num_slots)
  std::string repack_cache_dir;  // shared repacked weights (model/repack_store.h); empty = private
  // The K/V page pool (engine/page_pool.h) is kv_cache_bytes + prompt_cache_bytes: running
  // sequences and cached prefixes (engine/prefix_tree.h) share it. Cached pages no running
  // sequence maps are kept for the last num_slots ended sequences (as free slots kept their K/V)
  // and, older ones, up to prompt_cache_bytes; all of them go, least recently used first, when a
  // sequence needs room.
  int64_t kv_cache_bytes = 0;      // ≤ 0: num_slots whole contexts (the reserve of one region per slot)
  int64_t prompt_cache_bytes = 0;  // pages for finished conversations' prefixes
  uint64_t page_shuffle_seed = 0;  // ≠ 0: pages handed out in a seeded random order (tests)
  // The prefix cache's disk tier (engine/disk_tier.h): whole pages of base-model prefixes are also
  // written to files in this directory and read back when a prompt's RAM-cached prefix ends
  // before them; at most prefix_cache_disk_bytes of files (and half the filesystem's free space
  // at start). Empty: off. Also where save_slot / restore_slot keep their files.
  std::string prefix_cache_dir;
  int64_t prefix_cache_disk_bytes = int64_t(4096) << 20;
};

// A choice BatchEngine::cancel dropped: prompt tokens fed so far (cached ones included, as in a
// finished choice's stats), tokens generated, and its prefill/decode time up to the cancel.
// A choice still waiting for a slot: zeros.
struct DroppedSeq {
  uint32_t choice = 0;
  GenerationStats stats;
};

// What a slot-file operation moved: token positions and file bytes.
struct SlotFileResult {
  int32_t n_tokens = 0;
  int64_t n_bytes = 0;
};

class BatchEngine {
 public:
  BatchEngine(const std::string& path, const BatchEngineOptions& opts);  // throws GgufError/runtime_error
  ~BatchEngine();

  int32_t n_ctx() const;
  int32_t n_vocab() const;
  int32_t num_slots() const;
  int32_t max_batch_tokens() const;
  size_t kv_cache_bytes() const;
  const std::string& repack_status() const;  // RepackStore::status()
  PromptCacheStats prompt_cache_stats() const;

  // Queues one choice of a request. Throws std::invalid_argument (prompt/params) before queuing.
  void add(uint64_t request_id, uint32_t choice, const GenerationRequest& req);
  // Queues one embedding sequence (1 ≤ size ≤ n_ctx, ids in the vocabulary; else throws
  // std::invalid_argument before queuing). It ends with one event carrying `embedding`.
  void add_embedding(uint64_t request_id, uint32_t choice, const std::vector<int32_t>& prompt_ids);
  int32_t n_embd() const;
  // Loads a LoRA adapter under `id` (checked against the model: throws GgufError naming the path
  // and problem; std::invalid_argument when id is taken). Long-running: call without the GIL.
  // Returns the bytes of its tensors (what it adds to the lane's memory, mapped from the file).
  size_t load_adapter(int32_t id, const std::string& path);
  // Removes id from the table (false if absent); sequences using it keep it until they end.
  bool unload_adapter(int32_t id);
  std::vector<int32_t> adapter_ids() const;
  // Drops every choice of request_id, waiting or running (its slot is free at the next step);
  // returns how many were dropped. With `dropped`, appends each dropped choice's work so far
  // (DroppedSeq) so the lane can report what a cancelled request cost; pass a vector with
  // capacity reserved to keep the call allocation-free.
  int cancel(uint64_t request_id, std::vector<DroppedSeq>* dropped = nullptr);
  bool has_work() const;
  size_t num_active() const;
  size_t num_waiting() const;
  int32_t last_batch_tokens() const;  // tokens of the most recent step's forward pass
  // Prompt tokens the next step will feed (≤ max_batch_tokens): 0 means a pure decode step, whose
  // duration needs no allowance in the lane's hang detection.
  int32_t next_prefill_tokens() const;

  // llama-server's slot files (engine/slot_file.h), `filename` a plain name inside
  // prefix_cache_dir, on a free slot. save: the slot's last base-model sequence's K/V pages still
  // cached and their key ids; restore: such a file's pages into the prefix tree, where any prompt
  // starting with its ids maps them; erase: the slot forgets its last sequence (its pages stay
  // cached for others).
  // Throws std::invalid_argument (no dir, bad slot or name, busy slot, adapters) or
  // std::runtime_error (file missing, unwritable, corrupt or of another model or layout).
  SlotFileResult save_slot(int32_t slot, const std::string& filename);
  SlotFileResult restore_slot(int32_t slot, const std::string& filename);
  int32_t erase_slot(int32_t slot);

  // One step (phases above). Long-running: call without the GIL.
  const std::vector<SeqEvent>& step();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls
