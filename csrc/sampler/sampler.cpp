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

SamplerScratch::SamplerScratch(int32_t n_vocab) {
  if (n_vocab <= 0) throw std::invalid_argument("Sampler: n_vocab must be positive");
  const size_t n = static_cast<size_t>(n_vocab);
  cand = LazyArray<SamplerCand>(n);
  w = LazyArray<float>(n);
  ids = LazyArray<int32_t>(n);
  vals = LazyArray<float>(n);
  bin = LazyArray<uint16_t>(n);
  hcount.resize(kBins);
  hmass.resize(kBins);
  stamp = LazyArray<uint32_t>(n);  // zero
}

Sampler::Sampler(int32_t n_vocab, SamplerScratch* scratch) : n_vocab_(n_vocab), s_(scratch) {
  if (n_vocab <= 0) throw std::invalid_argument("Sampler: n_vocab must be positive");
  if (!s_) {
    own_ = std::make_unique<SamplerScratch>(n_vocab);
    s_ = own_.get();
  } else if (s_->cand.size() != static_cast<size_t>(n_vocab)) {
    throw std::invalid_argument("Sampler: scratch sized for another vocabulary");
  }
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
  count_generated_ = params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  if (count_generated_ && gen_count_.empty()) {
    gen_count_.assign(static_cast<size_t>(n_vocab_), 0);
    gen_distinct_.reserve(static_cast<size_t>(n_vocab_));
  }
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
  if (count_generated_ && gen_count_[token]++ == 0) gen_distinct_.push_back(token);
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
    if (++s_->stamp_epoch == 0) {  // wrapped: clear the stamps once every 2^32 samples
      std::fill(s_->stamp.begin(), s_->stamp.end(), 0u);
      s_->stamp_epoch = 1;
    }
    const float rp = p_.repetition_penalty;
    for (size_t i = history_.size() - n; i < history_.size(); ++i) {
      const int32_t id = history_[i];
      if (s_->stamp[id] == s_->stamp_epoch) continue;
      s_->stamp[id] = s_->stamp_epoch;
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
  const size_t n = k::gather(logits, static_cast<size_t>(n_vocab_), threshold, s_->ids.data(), s_->vals.data());
  for (size_t i = 0; i < n; ++i) s_->cand[i] = Cand{s_->vals[i], s_->ids[i]};
  return n;
}

size_t Sampler::top_p_prefix(size_t begin, size_t end, float max_logit, double cum,
                             double target_mass) {
  // Sort lazily: bring the next chunk of best candidates to the front with nth_element, sort
  // only that chunk, accumulate; double the chunk while the mass is not reached. Typical
  // LLM distributions finish in the first chunk, so a 262k-entry sort never happens.
  auto cmp = [](const Cand& a, const Cand& b) { return better(a, b); };
  size_t sorted = begin;
  size_t chunk = 64;
  while (sorted < end) {
    const size_t stop = std::min(end, sorted + chunk);
    if (stop < end) std::nth_element(s_->cand.begin() + sorted, s_->cand.begin() + stop, s_->cand.begin() + end, cmp);
    std::sort(s_->cand.begin() + sorted, s_->cand.begin() + stop, cmp);
    for (size_t i = sorted; i < stop; ++i) s_->w[i] = s_->cand[i].logit;
    k::exp_sum(s_->w.data() + sorted, stop - sorted, max_logit, 1.0f, s_->w.data() + sorted);
    for (size_t i = sorted; i < stop; ++i) {
      cum += s_->w[i];
      if (cum >= target_mass) return i + 1;  // llama.cpp: keep the token that crosses p
    }
    sorted = stop;
    chunk *= 2;
  }
  return end;
}

size_t Sampler::histogram_select(const float* logits, float m, size_t top_k, double target_mass) {
  // For flat distributions the top_k / top_p set can be most of the vocabulary; sorting it
  // costs tens of ms at 262k. Instead bucket the logits by distance below the max (fine bins
  // over kRange, one overflow bin for the rest and for -inf/NaN), find the bucket where the
  // count (top_k) or the temperature-1 mass (top_p, weights already in s_->w by id) crosses the
  // need, take every bucket above it whole and resolve only that boundary bucket exactly.
  // The same float expression assigns every bin, so membership is consistent between passes.
  const size_t n_v = static_cast<size_t>(n_vocab_);
  const float inv_w = static_cast<float>(kBins - 1) / kRange;
  std::fill(s_->hcount.begin(), s_->hcount.end(), 0u);
  std::fill(s_->hmass.begin(), s_->hmass.end(), 0.0);
  const bool by_mass = top_k == 0;
  for (size_t i = 0; i < n_v; ++i) {
    const float d = (m - logits[i]) * inv_w;
    const uint16_t b = d < static_cast<float>(kBins - 1) ? static_cast<uint16_t>(d) : kBins - 1;
    s_->bin[i] = b;
    ++s_->hcount[b];
    if (by_mass) s_->hmass[b] += s_->w[i];
  }
  size_t bnd = kBins - 1;
  double cum = 0.0;
  size_t cum_n = 0;
  for (size_t b = 0; b < kBins; ++b) {
    if (by_mass ? cum + s_->hmass[b] >= target_mass : cum_n + s_->hcount[b] >= top_k) {
      bnd = b;
      break;
    }
    cum += s_->hmass[b];
    cum_n += s_->hcount[b];
  }
  // Buckets above the boundary go to s_->cand (vocab order); the boundary bucket's finite
  // entries are staged in s_->ids and appended after them.
  // Branch-free: with flat logits in/out is a coin flip and mispredictions dominated.
  size_t n_in = 0, n_b = 0;
  Cand* c = s_->cand.data();
  int32_t* staged = s_->ids.data();
  for (size_t i = 0; i < n_v; ++i) {
    const uint16_t b = s_->bin[i];
    const float l = logits[i];
    c[n_in] = Cand{l, static_cast<int32_t>(i)};
    n_in += b < bnd ? 1 : 0;
    staged[n_b] = static_cast<int32_t>(i);
    n_b += (b == bnd) & (l > kNegInf) ? 1 : 0;
  }
  for (size_t j = 0; j < n_b; ++j) s_->cand[n_in + j] = Cand{logits[s_->ids[j]], s_->ids[j]};
  if (by_mass) return top_p_prefix(n_in, n_in + n_b, m, cum, target_mass);
  const size_t need = top_k - n_in;  // > 0: the boundary bucket is where the count crossed k
  if (n_b > need) {
    auto cmp = [](const Cand& a, const Cand& b) { return better(a, b); };
    std::nth_element(s_->cand.begin() + n_in, s_->cand.begin() + n_in + need, s_->cand.begin() + n_in + n_b, cmp);
    return n_in + need;
  }
  return n_in + n_b;
}

size_t Sampler::select_candidates(const float* logits, float max_logit) {
  const float m = max_logit;
  const size_t n_v = static_cast<size_t>(n_vocab_);
  const float min_p_floor = p_.min_p > 0.0f ? m + std::log(p_.min_p) : kNegInf;
  const bool use_k = p_.top_k > 0 && p_.top_k < n_vocab_;
  const bool use_p = p_.top_p < 1.0f;
  auto cmp = [](const Cand& a, const Cand& b) { return better(a, b); };
  size_t n = 0;

  if (use_k) {
    // The top_k ids lie above some logit bound. Cheap vectorized counts find a window below
    // the max holding >= top_k (usually the first one); gather it and nth_element. If the
    // window would be large (flat logits), the histogram does it in O(n_vocab) instead.
    // top_p and min_p then act inside the top_k set (llama.cpp renormalizes after top_k).
    const size_t kk = static_cast<size_t>(p_.top_k);
    const size_t limit = std::max<size_t>(4 * kk, kSmallSet);
    bool done = false;
    for (float width : {8.0f, 32.0f}) {
      const size_t c = k::count_ge(logits, n_v, m - width);
      if (c < kk) continue;
      if (c > limit) break;
      n = gather(logits, m - width);
      std::nth_element(s_->cand.begin(), s_->cand.begin() + kk, s_->cand.begin() + n, cmp);
      n = kk;
      done = true;
      break;
    }
    if (!done) n = histogram_select(logits, m, kk, 0.0);
    if (use_p) {
      for (size_t i = 0; i < n; ++i) s_->w[i] = s_->cand[i].logit;
      const double z = k::exp_sum(s_->w.data(), n, m, 1.0f, s_->w.data());
      n = top_p_prefix(0, n, m, 0.0, static_cast<double>(p_.top_p) * z);
    }
  } else if (use_p) {
    // top_p needs the whole distribution's mass Z (one vectorized exp pass), but only the
    // head has to be sorted: gather the tokens within a window below the max if it holds
    // top_p * Z (or reaches the min_p floor, which cuts harder anyway); else the histogram.
    const double z = k::exp_sum(logits, n_v, m, 1.0f, s_->w.data());
    const double target = static_cast<double>(p_.top_p) * z;
    bool done = false;
    for (float width : {8.0f, 32.0f}) {
      const float t = std::max(m - width, min_p_floor);
      if (k::count_ge(logits, n_v, t) > kSmallSet) break;
      n = gather(logits, t);
      double mass = 0.0;
      for (size_t i = 0; i < n; ++i) mass += s_->w[static_cast<size_t>(s_->cand[i].id)];
      if (mass >= target || t == min_p_floor) {
        n = top_p_prefix(0, n, m, 0.0, target);
        done = true;
        break;
      }
    }
    if (!done) n = histogram_select(logits, m, 0, target);
  } else if (min_p_floor > kNegInf) {
    n = gather(logits, min_p_floor);
  } else {
    return 0;  // no filter: the caller draws straight from the logits array
  }

  if (min_p_floor > kNegInf) {  // min_p: keep logit >= max + log(min_p), i.e. p >= min_p * p_max
    n = static_cast<size_t>(std::remove_if(s_->cand.begin(), s_->cand.begin() + n,
                                           [&](const Cand& c) { return !(c.logit >= min_p_floor); }) -
                            s_->cand.begin());
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
    const double z = k::exp_sum(logits, static_cast<size_t>(n_vocab_), m, inv_t, s_->w.data());
    return static_cast<int32_t>(k::find_cumulative(s_->w.data(), static_cast<size_t>(n_vocab_), u * z));
  }
  if (n == 1) return s_->cand[0].id;
  for (size_t i = 0; i < n; ++i) s_->w[i] = s_->cand[i].logit;
  const double z = k::exp_sum(s_->w.data(), n, m, inv_t, s_->w.data());
  return s_->cand[k::find_cumulative(s_->w.data(), n, u * z)].id;
}

}  // namespace ls
