#include "engine/sequence.h"

#include <cstring>
#include <stdexcept>

#include "engine/logprobs.h"

namespace ls {

void validate_request(const GenerationRequest& req, int32_t n_vocab, int32_t ctx_size) {
  if (req.prompt_ids.empty()) throw std::invalid_argument("the prompt is empty");
  if (int64_t(req.prompt_ids.size()) >= ctx_size)
    throw std::invalid_argument("the prompt has " + std::to_string(req.prompt_ids.size()) +
                                " tokens; the context holds " + std::to_string(ctx_size));
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= n_vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is out of range");
  if (req.max_tokens < (req.prompt_logprobs ? 0 : 1)) throw std::invalid_argument("max_tokens must be at least 1");
  if (req.num_top_logprobs > kMaxTopLogprobs || (req.prompt_logprobs && req.num_top_logprobs < 0))
    throw std::invalid_argument("top logprobs out of range");
  for (const auto& [id, bias] : req.sampling.logit_bias)
    if (id < 0 || id >= n_vocab)
      throw std::invalid_argument("logit_bias token id " + std::to_string(id) + " is out of range");
}

Sequence::Sequence(int32_t n_vocab, SamplerScratch* scratch) : sampler_(n_vocab, scratch) {
  out_.reserve(4096);
  reasoning_.reserve(4096);
  split_buf_.reserve(4096);
}

void Sequence::begin(const GenerationRequest& req, const Tokenizer& tok, int32_t cached_tokens, int64_t now_ns,
                     MatcherPtr grammar) {
  sampler_.reset(req.sampling, req.prompt_ids, tok.eog_ids());  // throws on bad params: state untouched
  if (grammar) raw_logits_.resize(size_t(sampler_.n_vocab()));  // once; capacity kept across requests
  grammar_.reset(std::move(grammar));
  req_ = req;
  stats_ = GenerationStats{};
  stats_.prompt_tokens = int32_t(req.prompt_ids.size());
  stats_.cached_tokens = cached_tokens;
  stop_.reset(req.stop);
  utf8_.reset();
  split_.reset(req.reasoning);
  last_token_ = -1;
  begin_ns_ = now_ns;
  first_token_ns_ = 0;
  active_ = true;
}

// Releases held-back text at the end of a generation (dangling UTF-8, stop-string prefix).
void Sequence::flush_text() {
  push_text(utf8_.finish());
  if (split_.enabled()) {
    split_buf_.clear();
    split_.flush(split_buf_, reasoning_);
    if (!split_buf_.empty()) out_.append(stop_.push(split_buf_));
  }
  if (!stop_.stopped()) out_.append(stop_.flush());
}

void Sequence::push_text(std::string_view text) {
  if (text.empty()) return;
  if (!split_.enabled()) {
    out_.append(stop_.push(text));
    return;
  }
  split_buf_.clear();
  split_.push(text, split_buf_, reasoning_);
  if (!split_buf_.empty()) out_.append(stop_.push(split_buf_));
}

StepResult Sequence::finish(FinishReason reason, int32_t token) {
  if (reason != FinishReason::Stop) flush_text();
  active_ = false;
  return StepResult{out_, token, true, reason, reasoning_};
}

int32_t Sequence::sample_constrained(float* logits) {
  const size_t row_bytes = raw_logits_.size() * sizeof(float);
  std::memcpy(raw_logits_.data(), logits, row_bytes);
  int32_t token = sampler_.sample(logits, stats_.completion_tokens);
  if (grammar_.allows(token)) return token;
  std::memcpy(logits, raw_logits_.data(), row_bytes);
  grammar_.mask(logits, sampler_.n_vocab());
  token = sampler_.sample(logits, stats_.completion_tokens);
  return grammar_.allows(token) ? token : -1;
}

StepResult Sequence::sample(float* logits, int32_t pos, int32_t ctx_size, const Tokenizer& tok, int64_t now_ns) {
  out_.clear();
  reasoning_.clear();
  // 1. Sample with this sequence's own RNG and penalty history (and its grammar, if any).
  const int32_t token = grammar_.active() ? sample_constrained(logits) : sampler_.sample(logits, stats_.completion_tokens);
  if (token < 0) {  // the grammar and the request's own masks (ignore_eos, min_tokens) leave nothing
    flush_text();
    active_ = false;
    return StepResult{out_, token, true, grammar_.accepting() ? FinishReason::Stop : FinishReason::Error, reasoning_};
  }
  sampler_.accept(token);
  if (first_token_ns_ == 0) {
    first_token_ns_ = now_ns;
    stats_.prefill_ns = now_ns - begin_ns_;
  } else {
    stats_.decode_ns = now_ns - first_token_ns_;
  }
  // 2. End of generation, or text: complete UTF-8, stop strings held back.
  if (tok.is_eog(token)) {
    flush_text();
    active_ = false;
    return StepResult{out_, token, true, FinishReason::Stop, reasoning_};
  }
  stats_.completion_tokens += 1;
  last_token_ = token;
  if (grammar_.active()) grammar_.accept(token);
  std::string_view piece = tok.piece(token, false);
  if (piece.empty() && req_.reasoning.harmony) piece = harmony_marker(tok.piece(token, true));
  push_text(utf8_.push(piece));
  if (grammar_.active() && grammar_.complete() && !stop_.stopped()) {  // nothing but the end may follow
    flush_text();
    active_ = false;
    return StepResult{out_, token, true, FinishReason::Stop, reasoning_};
  }
  if (stop_.stopped()) {
    active_ = false;
    return StepResult{out_, token, true, FinishReason::Stop, reasoning_};
  }
  if (stats_.completion_tokens >= req_.max_tokens || pos >= ctx_size) return finish(FinishReason::Length, token);
  return StepResult{out_, token, false, FinishReason::None, reasoning_};
}

}  // namespace ls
