#include "engine/sequence.h"

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

Sequence::Sequence(int32_t n_vocab) : sampler_(n_vocab) {
  out_.reserve(4096);
  reasoning_.reserve(4096);
  split_buf_.reserve(4096);
}

void Sequence::begin(const GenerationRequest& req, const Tokenizer& tok, int32_t cached_tokens, int64_t now_ns) {
  sampler_.reset(req.sampling, req.prompt_ids, tok.eog_ids());  // throws on bad params: state untouched
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

StepResult Sequence::sample(float* logits, int32_t pos, int32_t ctx_size, const Tokenizer& tok, int64_t now_ns) {
  out_.clear();
  reasoning_.clear();
  // 1. Sample with this sequence's own RNG and penalty history.
  const int32_t token = sampler_.sample(logits, stats_.completion_tokens);
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
  push_text(utf8_.push(tok.piece(token, false)));
  if (stop_.stopped()) {
    active_ = false;
    return StepResult{out_, token, true, FinishReason::Stop, reasoning_};
  }
  if (stats_.completion_tokens >= req_.max_tokens || pos >= ctx_size) return finish(FinishReason::Length, token);
  return StepResult{out_, token, false, FinishReason::None, reasoning_};
}

}  // namespace ls
