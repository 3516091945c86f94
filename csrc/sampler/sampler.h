// Token sampling and stop-string handling. CONTRACT used by the engine; implementation in
// csrc/sampler/*.cpp. No allocation per token: buffers are sized at construction/reset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/lazy_array.h"
#include "sampler/params.h"
#include "sampler/rng.h"

namespace ls {

struct SamplerCand {
  float logit;
  int32_t id;
};

// Working buffers of one Sampler::sample() call, [n_vocab] each: nothing in them outlives the
// call, so the sequences of an engine, which sample one after another, share one set and a
// sequence slot costs no vocabulary-sized memory of its own (8 MB per slot at Gemma's 262k).
// The [n_vocab] arrays are LazyArrays: a lane that only decodes greedily never commits them,
// and a sampling chain commits the parts it writes.
struct SamplerScratch {
  explicit SamplerScratch(int32_t n_vocab);
  static constexpr size_t kBins = 2048;  // histogram buckets (the last one = overflow)
  LazyArray<SamplerCand> cand;    // candidate buffer
  LazyArray<float> w;             // weights aligned with cand
  LazyArray<int32_t> ids;         // gather output (ids)
  LazyArray<float> vals;          // gather output (logits)
  LazyArray<uint16_t> bin;        // histogram bucket per id
  std::vector<uint32_t> hcount;   // [kBins]
  std::vector<double> hmass;      // [kBins]
  LazyArray<uint32_t> stamp;      // de-duplicates the repetition window; == stamp_epoch: seen
  uint32_t stamp_epoch = 0;
};

class Sampler {
 public:
  // scratch: shared working buffers (must outlive the sampler and have the same n_vocab);
  // nullptr: the sampler owns a set.
  explicit Sampler(int32_t n_vocab, SamplerScratch* scratch = nullptr);
  // New generation: params, the prompt (for repetition penalty history) and the EOG ids.
  // Throws std::invalid_argument for out-of-range params or ids.
  void reset(const SamplingParams& params, const std::vector<int32_t>& prompt_ids,
             const std::vector<int32_t>& eog_ids);
  // Picks the next token from raw logits [n_vocab] (modified in place). n_generated = tokens
  // generated so far in this generation. Chain: logit_bias → EOG masking (ignore_eos /
  // min_tokens) → penalties → (temperature 0: argmax, lowest id on ties) → top_k → top_p →
  // min_p → temperature → sample with the generation's RNG (seeded: same seed → same picks).
  // top_p and min_p see temperature-1 probabilities (as in llama.cpp, where temperature is the
  // last step before the draw). If every logit is -inf/NaN the lowest id is returned.
  int32_t sample(float* logits, int32_t n_generated);
  // Records an accepted token (penalty history).
  void accept(int32_t token);

  int32_t n_vocab() const { return n_vocab_; }

 private:
  using Cand = SamplerCand;
  void apply_bias_masks_penalties(float* logits, int32_t n_generated);
  // Fills cand_[0, n) with the survivors of top_k → top_p → min_p; returns n (>= 1).
  size_t select_candidates(const float* logits, float max_logit);
  size_t gather(const float* logits, float threshold);
  // Shortest prefix of cand_[begin, end) (ordered best-first, lazily) whose mass added to
  // cum reaches target_mass; returns the absolute end index of the kept range.
  size_t top_p_prefix(size_t begin, size_t end, float max_logit, double cum, double target_mass);
  // O(n_vocab) top_k (top_k > 0) or top_p (target_mass, needs w_[id] = exp(l - max)) for flat
  // distributions whose kept set is too large to sort.
  size_t histogram_select(const float* logits, float max_logit, size_t top_k, double target_mass);

  static constexpr size_t kBins = SamplerScratch::kBins;
  static constexpr float kRange = 32.0f;  // logit span below the max covered by the buckets
  static constexpr size_t kSmallSet = 8192;  // candidate sets up to this size are just sorted

  int32_t n_vocab_;
  SamplingParams p_;
  std::vector<int32_t> eog_;
  std::unique_ptr<SamplerScratch> own_;  // when no shared scratch was given
  SamplerScratch* s_;
  std::vector<int32_t> history_;  // prompt + accepted tokens (repetition window source)
  // Occurrences among generated tokens, kept only for generations with presence/frequency
  // penalties ([n_vocab], sized on the first such generation; capacity kept).
  bool count_generated_ = false;
  std::vector<int32_t> gen_count_;
  std::vector<int32_t> gen_distinct_;  // ids with gen_count_ > 0
  Xoshiro256ss rng_;
};

// Holds back emitted text that could be the start of a stop string.
//
// "First stop occurrence" = the occurrence that ENDS earliest in the full text (ties: the one
// that starts earliest, i.e. the longest). That is the first point at which a streaming
// matcher can know a stop happened, so the output is identical however the text is split into
// pushes. For non-overlapping stops this is simply the earliest one.
class StopMatcher {
 public:
  StopMatcher() = default;
  explicit StopMatcher(const std::vector<std::string>& stops) { reset(stops); }
  // Empty stop strings are ignored (they would match before any text).
  void reset(const std::vector<std::string>& stops);
  // Appends text; returns what may be emitted now (view valid until the next call).
  // Sets stopped() when a stop string completed: the returned text then ends just before it.
  // After stopped(), push() returns empty views.
  std::string_view push(std::string_view text);
  // End of generation without a stop: releases everything held back.
  std::string_view flush();
  bool stopped() const { return stopped_; }
  // After stopped(): which stop string completed, as its index in reset()'s list; else -1.
  int32_t matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::vector<int32_t> index_;  // stops_[i] is reset()'s stops[index_[i]] (empty ones skipped)
  int32_t matched_ = -1;
  size_t max_len_ = 0;
  std::string held_;  // suffix that is a proper prefix of some stop string
  std::string work_;  // held_ + pushed text; returned views point into it
  bool stopped_ = false;
};

}  // namespace ls
