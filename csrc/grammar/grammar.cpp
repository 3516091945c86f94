#include "grammar/grammar.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace ls {

namespace {

constexpr uint8_t kSpecialMarker = 0xFF;  // llguidance: a token's bytes start with it = special

size_t tokenize_callback(const void* user_data, const uint8_t* bytes, size_t bytes_len, uint32_t* out,
                         size_t out_len) {
  const auto* tok = static_cast<const Tokenizer*>(user_data);
  const std::vector<int32_t> ids =
      tok->encode(std::string_view(reinterpret_cast<const char*>(bytes), bytes_len), false, false);
  for (size_t i = 0; i < ids.size() && i < out_len; ++i) out[i] = uint32_t(ids[i]);
  return ids.size();
}

const llg::Api& loaded_api() {
  const llg::Api* api = llg::Api::loaded();
  if (api == nullptr)
    throw std::runtime_error("grammar-constrained decoding needs llguidance (pip install llguidance)");
  return *api;
}

}  // namespace

GrammarCompiler::GrammarCompiler(const Tokenizer& tok) : api_(&loaded_api()) {
  const int32_t n = tok.n_vocab();
  std::vector<uint32_t> lens(size_t(n), 0);
  std::string bytes;
  for (int32_t id = 0; id < n; ++id) {
    std::string_view piece = tok.piece(id, false);
    const size_t before = bytes.size();
    if (!piece.empty()) {
      bytes.append(piece);
    } else if (!(piece = tok.piece(id, true)).empty()) {
      bytes.push_back(char(kSpecialMarker));
      bytes.append(piece);
    }
    lens[size_t(id)] = uint32_t(bytes.size() - before);
  }
  const std::vector<int32_t>& eog = tok.eog_ids();
  const int32_t eos = tok.eos_id() >= 0 ? tok.eos_id() : (eog.empty() ? 0 : eog.front());
  std::vector<uint32_t> extra;
  for (int32_t id : eog)
    if (id != eos) extra.push_back(uint32_t(id));

  llg::TokenizerInitV2 ti{};
  ti.struct_size = sizeof ti;
  ti.vocab_size = uint32_t(n);
  ti.tok_eos = uint32_t(eos);
  ti.token_lens = lens.data();
  ti.token_bytes = reinterpret_cast<const uint8_t*>(bytes.data());
  ti.tokenize_assumes_string = true;  // our encode takes text; llguidance handles invalid UTF-8
  ti.tokenize_fn = &tokenize_callback;
  ti.tokenize_user_data = &tok;
  ti.tok_eos_extra = extra.data();
  ti.tok_eos_extra_count = uint32_t(extra.size());
  char err[1024] = {0};
  tokenizer_ = api_->new_tokenizer_v2(&ti, err, sizeof err);  // copies lens/bytes
  if (tokenizer_ == nullptr) throw std::runtime_error(std::string("llguidance refused the vocabulary: ") + err);
  api_->constraint_init_set_defaults(&init_, tokenizer_);
  init_.log_buffer_level = 0;
  init_.log_stderr_level = 0;  // errors come back through compile()'s exception instead
}

GrammarCompiler::~GrammarCompiler() {
  cache_.clear();  // matchers before the tokenizer they use
  if (tokenizer_ != nullptr) api_->free_tokenizer(tokenizer_);
}

MatcherPtr GrammarCompiler::compile(const std::string& grammar) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(grammar);
  if (it == cache_.end()) {
    MatcherPtr m(api_->new_matcher(&init_, "llguidance", grammar.c_str()), MatcherFree{api_});
    if (!m) throw std::runtime_error("llguidance returned no matcher");
    if (api_->matcher_is_error(m.get())) {
      const char* e = api_->matcher_get_error(m.get());
      throw std::invalid_argument(std::string("grammar does not compile: ") + (e ? e : "unknown error"));
    }
    if (cache_.size() >= kMaxCached) {
      cache_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(grammar);
    it = cache_.emplace(grammar, std::move(m)).first;
  }
  MatcherPtr fresh(api_->clone_matcher(it->second.get()), MatcherFree{api_});
  if (!fresh) throw std::runtime_error("llguidance could not clone a matcher");
  return fresh;
}

LazyGrammarCompiler::~LazyGrammarCompiler() {
  if (pending_.valid()) pending_.wait();  // the thread reads the tokenizer: finish before it goes
}

void LazyGrammarCompiler::prefetch(const Tokenizer& tok) {
  if (compiler_ || pending_.valid() || llg::Api::loaded() == nullptr) return;
  pending_ = std::async(std::launch::async, [&tok] { return std::make_unique<GrammarCompiler>(tok); });
}

bool LazyGrammarCompiler::ready() const {
  return compiler_ || !pending_.valid() || pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void LazyGrammarCompiler::wait(int timeout_ms) const {
  if (!compiler_ && pending_.valid()) pending_.wait_for(std::chrono::milliseconds(timeout_ms));
}

MatcherPtr LazyGrammarCompiler::compile(const Tokenizer& tok, const std::string& grammar) {
  if (grammar.empty()) return MatcherPtr{};
  if (!compiler_ && pending_.valid()) compiler_ = pending_.get();  // rethrows a failed build
  if (!compiler_) compiler_ = std::make_unique<GrammarCompiler>(tok);
  return compiler_->compile(grammar);
}

void GrammarState::reset(MatcherPtr m) {
  matcher_ = std::move(m);
  if (matcher_) mask_.resize(matcher_.get_deleter().api->matcher_get_mask_byte_size(matcher_.get()) / 4);
}

bool GrammarState::allows(int32_t token) {
  const uint32_t t = uint32_t(token);
  return matcher_.get_deleter().api->matcher_validate_tokens(matcher_.get(), &t, 1) == 1;
}

void GrammarState::mask(float* logits, int32_t n_vocab) {
  const llg::Api& api = *matcher_.get_deleter().api;
  if (api.matcher_compute_mask_into(matcher_.get(), mask_.data(), mask_.size() * 4) != 0)
    throw std::runtime_error(std::string("grammar: ") + api.matcher_get_error(matcher_.get()));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t covered = int64_t(mask_.size()) * 32;
  for (int32_t id = 0; id < n_vocab; ++id) {
    const bool allowed = id < covered && ((mask_[size_t(id) >> 5] >> (uint32_t(id) & 31)) & 1u);
    if (!allowed) logits[id] = neg_inf;
  }
}

void GrammarState::accept(int32_t token) {
  const llg::Api& api = *matcher_.get_deleter().api;
  if (api.matcher_consume_token(matcher_.get(), uint32_t(token)) != 0)
    throw std::runtime_error(std::string("grammar: ") + api.matcher_get_error(matcher_.get()));
}

bool GrammarState::complete() const { return matcher_.get_deleter().api->matcher_is_stopped(matcher_.get()); }

bool GrammarState::accepting() { return matcher_.get_deleter().api->matcher_is_accepting(matcher_.get()); }

}  // namespace ls
