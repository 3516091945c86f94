// Synthetic backend: spec "synthetic:step_us=N,prefill_us_per_token=N,load_ms=N,fail=MSG,
// n_ctx=N,n_vocab=N,slots=N,fail_if_exists=PATH". Same slot/queue semantics as BatchEngine: up to
// `slots` sequences run at once (one step_us sleep per step for all of them; prefill_us_per_token
// for each prompt token admitted in the step), the rest wait FIFO. Token i of a sequence is
// text_i = "<i> " with, every 7th token, characters that need JSON escaping ("\"\\\n\u2028é ");
// gateway/cli/bench/synthetic.py reproduces the text. Embedding inputs finish in the step that
// admits them with an 8-dimensional vector derived from the ids:
// raw_j = Σ_i ((id_i + 1)·(j + 1) mod 13 + 1), divided (in double) by its L2 norm, then rounded to
// float (tests/gateway/embeddings/test_embeddings.py reproduces it too).
#include <cmath>
#include <array>
#include <chrono>
#include <deque>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "lane/backend.h"

namespace ls::lane {
namespace {

class SyntheticBackend final : public Backend {
 public:
  SyntheticBackend(const std::string& spec, const BackendOptions& opts) : num_slots_(opts.num_slots) {
    size_t pos = 0;
    while (pos < spec.size()) {
      size_t end = spec.find(',', pos);
      if (end == std::string::npos) end = spec.size();
      const std::string item = spec.substr(pos, end - pos);
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key == "step_us") step_us_ = std::stoll(value);
      else if (key == "prefill_us_per_token") prefill_us_per_token_ = std::stoll(value);
      else if (key == "load_ms") std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(value)));
      else if (key == "fail") throw std::runtime_error("synthetic model failed to load: " + value);
      else if (key == "fail_if_exists") {
        if (access(value.c_str(), F_OK) == 0) throw std::runtime_error("synthetic model failed to load: " + value + " exists");
      }
      else if (key == "n_ctx") n_ctx_ = std::stoi(value);
      else if (key == "n_vocab") n_vocab_ = std::stoi(value);
      else if (key == "slots") num_slots_ = std::stoi(value);
      else if (!key.empty()) throw std::runtime_error("unknown synthetic backend option '" + key + "'");
      pos = end + 1;
    }
    if (num_slots_ < 1) throw std::runtime_error("synthetic backend needs at least one slot");
    if (opts.ctx_size > 0 && opts.ctx_size < n_ctx_) n_ctx_ = opts.ctx_size;
    max_batch_tokens_ = std::max(opts.max_batch_tokens, num_slots_);
    seqs_.resize(num_slots_);
    for (Seq& s : seqs_) s.text.reserve(64);
    events_.reserve(num_slots_);
  }
  int32_t n_ctx() const override { return n_ctx_; }
  int32_t n_vocab() const override { return n_vocab_; }
  int32_t num_slots() const override { return num_slots_; }
  int32_t max_batch_tokens() const override { return max_batch_tokens_; }
  size_t kv_cache_bytes() const override { return 0; }
  void add(uint64_t rid, uint32_t choice, const GenerationRequest& req) override {
    if (req.prompt_ids.empty()) throw std::invalid_argument("empty prompt");
    if (int64_t(req.prompt_ids.size()) >= n_ctx_) throw std::invalid_argument("prompt does not fit the context");
    if (req.max_tokens < 1) throw std::invalid_argument("max_tokens must be at least 1");
    waiting_.push_back(Waiting{rid, choice, int32_t(req.prompt_ids.size()), req.max_tokens});
  }
  void add_embedding(uint64_t rid, uint32_t choice, const std::vector<int32_t>& ids) override {
    if (ids.empty()) throw std::invalid_argument("the input is empty");
    if (int64_t(ids.size()) > n_ctx_) throw std::invalid_argument("the input does not fit the context");
    Waiting w{rid, choice, int32_t(ids.size()), 1, true, {}};
    double raw[kSyntheticEmbd] = {}, norm2 = 0.0;
    for (int j = 0; j < kSyntheticEmbd; ++j) {
      for (int32_t id : ids) raw[j] += double((int64_t(id) + 1) * (j + 1) % 13 + 1);
      norm2 += raw[j] * raw[j];
    }
    for (int j = 0; j < kSyntheticEmbd; ++j) w.embd[j] = float(raw[j] / std::sqrt(norm2));
    waiting_.push_back(w);
  }
  int32_t n_embd() const override { return kSyntheticEmbd; }
  int cancel(uint64_t rid, std::vector<DroppedSeq>* dropped) override {
    int n = 0;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->rid == rid) {
        if (dropped) dropped->push_back(DroppedSeq{it->choice, GenerationStats{}});
        it = waiting_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    for (Seq& s : seqs_)
      if (s.busy && s.rid == rid) {
        if (dropped) dropped->push_back(DroppedSeq{s.choice, s.stats});  // admitted sequences hold ≥ 1 token
        s.busy = false;
        ++n;
      }
    return n;
  }
  bool has_work() const override { return !waiting_.empty() || num_active() > 0; }
  size_t num_active() const override {
    size_t n = 0;
    for (const Seq& s : seqs_) n += s.busy;
    return n;
  }
  size_t num_waiting() const override { return waiting_.size(); }
  int32_t last_batch_tokens() const override { return last_batch_tokens_; }
  int32_t next_prefill_tokens() const override {
    int64_t n = 0;
    size_t free_slots = seqs_.size() - num_active();
    for (auto it = waiting_.begin(); it != waiting_.end() && free_slots > 0; ++it, --free_slots) n += it->prompt_tokens;
    return int32_t(n);
  }

  const std::vector<SeqEvent>& step() override {
    events_.clear();
    const int64_t t0 = steady_now_ns();
    // 1. Admission (FIFO into free slots); 2. "forward": one sleep for the whole batch.
    int64_t wait_us = 0;
    int32_t tokens = 0;
    for (Seq& s : seqs_) {
      if (s.busy) {
        wait_us = std::max(wait_us, step_us_);
        ++tokens;
      } else if (!waiting_.empty()) {
        const Waiting w = waiting_.front();
        waiting_.pop_front();
        s = Seq{true, w.rid, w.choice, w.max_tokens, GenerationStats{}, t0, 0, std::move(s.text), w.embed, w.embd};
        s.stats.prompt_tokens = w.prompt_tokens;
        wait_us += prefill_us_per_token_ * w.prompt_tokens;
        tokens += w.prompt_tokens;
      }
    }
    last_batch_tokens_ = tokens;
    if (wait_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait_us));
    // 3. One token per running sequence.
    const int64_t now = steady_now_ns();
    for (Seq& s : seqs_) {
      if (!s.busy) continue;
      if (s.embed) {  // prefill-only: done in the step that admitted it
        s.stats.prefill_ns = now - s.begin_ns;
        events_.push_back(SeqEvent{s.rid, s.choice, {}, true, FinishReason::Stop, s.stats, {}, s.embd.data()});
        s.busy = false;
        continue;
      }
      const int32_t i = s.stats.completion_tokens++;
      if (i == 0) {
        s.first_ns = now;
        s.stats.prefill_ns = now - s.begin_ns;
      } else {
        s.stats.decode_ns = now - s.first_ns;
      }
      s.text = std::to_string(i);
      s.text += (i % 7 == 6) ? "\"\\\n\xE2\x80\xA8\xC3\xA9 " : " ";
      const bool done = s.stats.completion_tokens >= s.max_tokens;
      events_.push_back(SeqEvent{s.rid, s.choice, s.text, done, done ? FinishReason::Length : FinishReason::None,
                                 s.stats});
      if (done) s.busy = false;
    }
    return events_;
  }

 private:
  struct Waiting {
    uint64_t rid;
    uint32_t choice;
    int32_t prompt_tokens, max_tokens;
    bool embed = false;
    std::array<float, 8> embd{};
  };
  struct Seq {
    bool busy = false;
    uint64_t rid = 0;
    uint32_t choice = 0;
    int32_t max_tokens = 0;
    GenerationStats stats;
    int64_t begin_ns = 0, first_ns = 0;
    std::string text;
    bool embed = false;
    std::array<float, 8> embd{};  // the finished embedding (stable until the next step)
  };
  static constexpr int kSyntheticEmbd = 8;
  int64_t step_us_ = 0, prefill_us_per_token_ = 0;
  int32_t n_ctx_ = 4096, n_vocab_ = 1000, num_slots_ = 8, max_batch_tokens_ = 256, last_batch_tokens_ = 0;
  std::deque<Waiting> waiting_;
  std::vector<Seq> seqs_;
  std::vector<SeqEvent> events_;
};

}  // namespace

std::unique_ptr<Backend> make_synthetic_backend(const std::string& spec, const BackendOptions& opts) {
  return std::make_unique<SyntheticBackend>(spec, opts);
}

}  // namespace ls::lane
