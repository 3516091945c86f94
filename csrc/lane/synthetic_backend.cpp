// Synthetic backend: spec "synthetic:step_us=N,prefill_us_per_token=N,load_ms=N,fail=MSG,
// n_ctx=N,n_vocab=N,fail_if_exists=PATH". Step i emits text_i = "<i> " with, every 7th step, characters that need
// JSON escaping ("\"\\\n\u2028é "); tests/lanes/synthetic.py reproduces the text.
#include <chrono>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "lane/backend.h"
#include "ring/ring.h"

namespace ls::lane {
namespace {

class SyntheticBackend final : public Backend {
 public:
  explicit SyntheticBackend(const std::string& spec) {
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
      else if (!key.empty()) throw std::runtime_error("unknown synthetic backend option '" + key + "'");
      pos = end + 1;
    }
    text_.reserve(64);
  }
  int32_t n_ctx() const override { return n_ctx_; }
  int32_t n_vocab() const override { return n_vocab_; }
  void start(const GenerationRequest& req) override {
    if (req.prompt_ids.empty()) throw std::invalid_argument("empty prompt");
    if (int64_t(req.prompt_ids.size()) >= n_ctx_) throw std::invalid_argument("prompt does not fit the context");
    max_tokens_ = req.max_tokens;
    stats_ = GenerationStats{};
    stats_.prompt_tokens = int32_t(req.prompt_ids.size());
    active_ = true;
  }
  StepResult step() override {
    const uint64_t t0 = ring::monotonic_ns();
    const bool prefill = stats_.completion_tokens == 0;
    const int64_t wait_us = prefill ? prefill_us_per_token_ * stats_.prompt_tokens : step_us_;
    if (wait_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait_us));
    const int32_t i = stats_.completion_tokens++;
    text_ = std::to_string(i);
    text_ += (i % 7 == 6) ? "\"\\\n\xE2\x80\xA8\xC3\xA9 " : " ";
    StepResult r;
    r.text = text_;
    r.token = i;
    if (stats_.completion_tokens >= max_tokens_) {
      r.finished = true;
      r.reason = FinishReason::Length;
      active_ = false;
    }
    (prefill ? stats_.prefill_ns : stats_.decode_ns) += int64_t(ring::monotonic_ns() - t0);
    return r;
  }
  void cancel() override { active_ = false; }
  GenerationStats stats() const override { return stats_; }

 private:
  int64_t step_us_ = 0, prefill_us_per_token_ = 0;
  int32_t n_ctx_ = 4096, n_vocab_ = 1000, max_tokens_ = 0;
  bool active_ = false;
  GenerationStats stats_;
  std::string text_;
};

}  // namespace

std::unique_ptr<Backend> make_synthetic_backend(const std::string& spec) {
  return std::make_unique<SyntheticBackend>(spec);
}

}  // namespace ls::lane
