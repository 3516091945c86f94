#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "sampler/kernels.h"
#include "sampler/sampler.h"

namespace ls {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
namespace k = sampler_kernels;

// Total order used by every selection step: higher logit first, then lower id. Ties are thus
// resolved the same way as the greedy rule, and the selected sets never depend on the
// unspecified order std::nth_element leaves equal elements in.
template <class C>
inline bool better(const C& a, const C& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

int32_t argmax(const float* x, int32_t n) {
  return static_cast<int32_t>(k::argmax(x, static_cast<size_t>(n)));
}

}  // namespace

Sampler::Sampler(int32_t n_vocab) : n_vocab_(n_vocab) {
  if (n_vocab <= 0) throw std::invalid_argument("Sampler: n_vocab must be positive");
  const size_t n = static_cast<size_t>(n_vocab);
  cand_.resize(n);
  w_.resize(n);
  ids_.resize(n);
  vals_.resize(n);
  gen_count_.assign(n, 0);
  gen_distinct_.reserve(n);
  stamp_.assign(n, 0);
  history_.reserve(4096);
}

void Sampler::reset(const SamplingParams& params, const std::vector<int32_t>& prompt_ids,
                    const std::vector<int32_t>& eog_ids) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("sampling: " + what); };
  if (!(params.temperature >= 0.0f) || std::isinf(params.temperature))
    bad("temperature must be finite and >= 0");
  if (params.top_k < 0) bad("top_k must be >= 0");
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) bad("min_p must be in [0, 1]");
  if (!(params.repetition_penalty > 0.0f) || std::isinf(params.repetition_penalty))
    bad("repetition_penalty must be finite and > 0");
  if (!std::isfinite(params.presence_penalty) || !std::isfinite(params.frequency_penalty))
    bad("presence/frequency penalties must be finite");
  if (params.min_tokens < 0) bad("min_tokens must be >= 0");
  auto check_id = [&](int32_t id, const char* what) {
    if (id < 0 || id >= n_vocab_) bad(std::string(what) + " id " + std::to_string(id) + " out of range");
  };
  for (const auto& [id, bias] : params.logit_bias) {
    check_id(id, "logit_bias");
    if (std::isnan(bias)) bad("logit_bias value is NaN");
  }
  for (int32_t id : eog_ids) check_id(id, "eog");
  for (int32_t id : prompt_ids) check_id(id, "prompt");

  p_ = params;
  eog_ = eog_ids;
  for (int32_t id : gen_distinct_) gen_count_[id] = 0;  // O(distinct), not O(n_vocab)
  gen_distinct_.clear();
  // The repetition window only ever looks at the last repeat_last_n tokens (< 0: all of them).
  history_.clear();
  size_t keep = prompt_ids.size();
  if (p_.repeat_last_n >= 0) keep = std::min(keep, static_cast<size_t>(p_.repeat_last_n));
  history_.insert(history_.end(), prompt_ids.end() - static_cast<std::ptrdiff_t>(keep),
                  prompt_ids.end());
  history_.reserve(history_.size() + 4096);
  if (p_.has_seed) {
    rng_.seed_with(p_.seed);
  } else {
    std::random_device rd;
    rng_.seed_with((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_) throw std::out_of_range("Sampler::accept: token out of range");
  if (gen_count_[token]++ == 0) gen_distinct_.push_back(token);
  // Bound the history so a long generation with a small window does not grow it forever:
  // when it doubles past the window, drop the old half (amortized O(1), no allocation).
  history_.push_back(token);
  if (p_.repeat_last_n >= 0 && history_.size() >= 2 * static_cast<size_t>(p_.repeat_last_n) + 1024) {
    history_.erase(history_.begin(), history_.end() - p_.repeat_last_n);
  }
}

void Sampler::apply_bias_masks_penalties(float* logits, int32_t n_generated) {
  for (const auto& [id, bias] : p_.logit_bias) logits[id] += bias;  // -inf bias bans
  if (p_.ignore_eos || n_generated < p_.min_tokens)
    for (int32_t id : eog_) logits[id] = kNegInf;

  // Repetition penalty (llama.cpp): each distinct token of the window once; positive logits
  // are divided and the others multiplied, so the token always becomes less likely.
  if (p_.repetition_penalty != 1.0f && p_.repeat_last_n != 0 && !history_.empty()) {
    size_t n = history_.size();
    if (p_.repeat_last_n > 0) n = std::min(n, static_cast<size_t>(p_.repeat_last_n));
    if (++stamp_epoch_ == 0) {  // wrapped: clear the stamps once every 2^32 samples
      std::fill(stamp_.begin(), stamp_.end(), 0u);
      stamp_epoch_ = 1;
    }
    const float rp = p_.repetition_penalty;
    for (size_t i = history_.size() - n; i < history_.size(); ++i) {
      const int32_t id = history_[i];
      if (stamp_[id] == stamp_epoch_) continue;
      stamp_[id] = stamp_epoch_;
      float& l = logits[id];
      l = l <= 0.0f ? l * rp : l / rp;
    }
  }
  // Presence / frequency (OpenAI): over every generated token.
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (int32_t id : gen_distinct_)
      logits[id] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(gen_count_[id]);
  }
}

size_t Sampler::gather(const float* logits, float threshold) {
  const size_t n = k::gather(logits, static_cast<size_t>(n_vocab_), threshold, ids_.data(), vals_.data());
  for (size_t i = 0; i < n; ++i) cand_[i] = Cand{vals_[i], ids_[i]};
  return n;
}

size_t Sampler::top_p_prefix(size_t n, float max_logit, double target_mass) {
  // Sort lazily: bring the next chunk of best candidates to the front with nth_element, sort
  // only that chunk, accumulate; double the chunk while the mass is not reached. Typical
  // LLM distributions finish in the first chunk, so a 262k-entry sort never happens.
  auto cmp = [](const Cand& a, const Cand& b) { return better(a, b); };
  size_t sorted = 0;
  size_t chunk = 64;
  double cum = 0.0;
  while (sorted < n) {
    const size_t end = std::min(n, sorted + chunk);
    if (end < n) std::nth_element(cand_.begin() + sorted, cand_.begin() + end, cand_.begin() + n, cmp);
    std::sort(cand_.begin() + sorted, cand_.begin() + end, cmp);
    for (size_t i = sorted; i < end; ++i) w_[i] = cand_[i].logit;
    k::exp_sum(w_.data() + sorted, end - sorted, max_logit, 1.0f, w_.data() + sorted);
    for (size_t i = sorted; i < end; ++i) {
      cum += w_[i];
      if (cum >= target_mass) return i + 1;  // llama.cpp: keep the token that crosses p
    }
    sorted = end;
    chunk *= 2;
  }
  return n;
}

size_t Sampler::select_candidates(const float* logits, float max_logit) {
  const float m = max_logit;
  const float min_p_floor = p_.min_p > 0.0f ? m + std::log(p_.min_p) : kNegInf;
  const bool use_k = p_.top_k > 0 && p_.top_k < n_vocab_;
  const bool use_p = p_.top_p < 1.0f;
  auto cmp = [](const Cand& a, const Cand& b) { return better(a, b); };
  size_t n = 0;

  if (use_k) {
    // The top_k ids are all above some logit bound; find a bound that keeps >= top_k
    // candidates by widening a window below the max (usually one pass), then nth_element.
    // top_p and min_p then act inside the top_k set (llama.cpp renormalizes after top_k).
    const size_t kk = static_cast<size_t>(p_.top_k);
    for (float width = 8.0f;; width *= 4.0f) {
      const float t = width > 1e6f ? kNegInf : m - width;
      n = gather(logits, t);
      if (n >= kk || t == kNegInf) break;
    }
    if (n > kk) {
      std::nth_element(cand_.begin(), cand_.begin() + kk, cand_.begin() + n, cmp);
      n = kk;
    }
    // Drop -inf/NaN leftovers (fewer finite logits than top_k).
    n = static_cast<size_t>(std::remove_if(cand_.begin(), cand_.begin() + n,
                                           [](const Cand& c) { return !(c.logit > kNegInf); }) -
                            cand_.begin());
    if (use_p) {
      for (size_t i = 0; i < n; ++i) w_[i] = cand_[i].logit;
      const double z = k::exp_sum(w_.data(), n, m, 1.0f, w_.data());
      n = top_p_prefix(n, m, static_cast<double>(p_.top_p) * z);
    }
  } else if (use_p) {
    // top_p needs the whole distribution's mass Z (one vectorized exp pass), but only the
    // head has to be sorted: gather the tokens within a window below the max, widen it until
    // they hold top_p * Z (or reach the min_p floor, which cuts harder anyway).
    const double z = k::exp_sum(logits, static_cast<size_t>(n_vocab_), m, 1.0f, w_.data());
    const double target = static_cast<double>(p_.top_p) * z;
    for (float width = 8.0f;; width *= 4.0f) {
      float t = width > 1e6f ? kNegInf : m - width;
      const bool at_floor = t <= min_p_floor;
      if (at_floor) t = min_p_floor;
      n = gather(logits, t);
      if (at_floor || t == kNegInf) break;
      double mass = 0.0;
      for (size_t i = 0; i < n; ++i) mass += w_[static_cast<size_t>(cand_[i].id)];
      if (mass >= target) break;
    }
    n = top_p_prefix(n, m, target);
  } else if (min_p_floor > kNegInf) {
    n = gather(logits, min_p_floor);
  } else {
    return 0;  // no filter: the caller draws straight from the logits array
  }

  if (min_p_floor > kNegInf) {  // min_p: keep logit >= max + log(min_p), i.e. p >= min_p * p_max
    n = static_cast<size_t>(std::remove_if(cand_.begin(), cand_.begin() + n,
                                           [&](const Cand& c) { return !(c.logit >= min_p_floor); }) -
                            cand_.begin());
  }
  return n;
}

int32_t Sampler::sample(float* logits, int32_t n_generated) {
  apply_bias_masks_penalties(logits, n_generated);
  if (p_.temperature <= 0.0f) return argmax(logits, n_vocab_);

  const float m = k::max_of(logits, static_cast<size_t>(n_vocab_));
  if (!(m > kNegInf)) return argmax(logits, n_vocab_);  // nothing samplable: deterministic
  const float inv_t = 1.0f / p_.temperature;
  const double u = rng_.uniform();  // exactly one draw per sample keeps seeded runs aligned

  const size_t n = select_candidates(logits, m);
  if (n == 0) {  // no filters: weights over the whole vocabulary, ids are positions
    const double z = k::exp_sum(logits, static_cast<size_t>(n_vocab_), m, inv_t, w_.data());
    return static_cast<int32_t>(k::find_cumulative(w_.data(), static_cast<size_t>(n_vocab_), u * z));
  }
  if (n == 1) return cand_[0].id;
  for (size_t i = 0; i < n; ++i) w_[i] = cand_[i].logit;
  const double z = k::exp_sum(w_.data(), n, m, inv_t, w_.data());
  return cand_[k::find_cumulative(w_.data(), n, u * z)].id;
}

}  // namespace ls
