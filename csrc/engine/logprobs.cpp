#include "engine/logprobs.h"

#include <cmath>
#include <limits>
#include <vector>

#include "sampler/kernels.h"

namespace ls {

void score_logprobs(const float* logits, int32_t n_vocab, int32_t token, int32_t num_top, TokenLogprob* out) {
  // 1. Max and the running top-num_top (insertion into a short sorted list: almost every logit
  //    fails the comparison with the current worst; ids ascend, so a tie keeps the lower id).
  TokenLogprob* top = out + 1;
  int32_t num_kept = 0;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float x = logits[i];
    if (std::isnan(x)) continue;
    if (x > max_logit) max_logit = x;
    if (num_top == 0 || (num_kept == num_top && !(x > top[num_top - 1].logprob))) continue;
    int32_t j = num_kept < num_top ? num_kept++ : num_top - 1;
    while (j > 0 && x > top[j - 1].logprob) {
      top[j] = top[j - 1];
      --j;
    }
    top[j] = TokenLogprob{i, x};
  }
  // 2. log-sum-exp with the sampler's vectorised exp (sums in double; NaN logits count as
  //    impossible). Its per-element output goes to a scratch row, sized once per thread.
  thread_local std::vector<float> scratch;
  if (scratch.size() < size_t(n_vocab)) scratch.resize(size_t(n_vocab));
  const double sum = std::isfinite(max_logit)
                         ? sampler_kernels::exp_sum(logits, size_t(n_vocab), max_logit, 1.0f, scratch.data())
                         : 0.0;
  const double lse = std::isfinite(max_logit) ? double(max_logit) + std::log(sum) : double(max_logit);
  // 3. Logits → log-probabilities.
  out[0] = TokenLogprob{token, float(double(logits[token]) - lse)};
  for (int32_t j = 0; j < num_kept; ++j) top[j].logprob = float(double(top[j].logprob) - lse);
  for (int32_t j = num_kept; j < num_top; ++j) top[j] = TokenLogprob{-1, std::numeric_limits<float>::quiet_NaN()};
}

void null_logprobs(int32_t token, int32_t num_top, TokenLogprob* out) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  out[0] = TokenLogprob{token, nan};
  for (int32_t j = 1; j <= num_top; ++j) out[j] = TokenLogprob{-1, nan};
}

}  // namespace ls
