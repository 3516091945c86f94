// Transformer forward pass over GGUF weights used in place (llama, qwen2, qwen3, gemma3).
//
// Buffers: every activation/scratch buffer is sized at construction for max_batch tokens and
// reused; forward() allocates nothing. KV cache: per layer [ctx_size][n_head_kv*head_dim] for K
// and for V, allocated once; stored as fp32 holding fp16-rounded values (llama.cpp's F16 cache).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace ls {

enum class Arch { Llama, Qwen2, Qwen3, Gemma3 };
enum class RopeStyle { Norm, Neox };  // adjacent pairs vs halves (runtime.md §5)

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;
  int32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  int32_t n_vocab = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.f, rope_base_local = 10000.f;
  int32_t n_rot = 0;
  RopeStyle rope = RopeStyle::Norm;
  float attn_scale = 0.f;        // multiplies q·k (1/sqrt(head_dim) unless the model says otherwise)
  float embd_scale = 1.f;        // gemma: sqrt(n_embd)
  int32_t sliding_window = 0;    // gemma3 local layers; 0 = none
  int32_t swa_pattern = 0;       // layer il is local iff swa_pattern > 0 && il % swa_pattern != swa_pattern-1
  bool is_local(int il) const { return sliding_window > 0 && swa_pattern > 0 && il % swa_pattern != swa_pattern - 1; }
};

struct Weight {  // a 2-D weight in the mapping: n_out rows of n_in
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm, post_attn_norm, post_ffw_norm, q_norm, k_norm;
  std::vector<float> bq, bk, bv;  // qwen2 biases (empty if absent)
  Weight wq, wk, wv, wo, w_gate, w_up, w_down;
};

class ModelRuntime {
 public:
  // file must outlive the runtime. Throws GgufError naming the file and problem.
  ModelRuntime(const GgufFile& file, int ctx_size, int max_batch, int threads);
  ~ModelRuntime();

  const ModelConfig& config() const { return cfg_; }
  int32_t ctx_size() const { return ctx_size_; }
  int32_t max_batch() const { return max_batch_; }
  ThreadPool& pool() { return *pool_; }

  // Runs tokens[0..n) at positions pos0.. (n ≤ max_batch, pos0 + n ≤ ctx_size), appending
  // to the KV cache. If all_logits, writes n rows of n_vocab to logits; else only the last
  // token's row; logits == nullptr skips the output head. Positions ≥ pos0 in the cache are overwritten (rewinding is just a smaller pos0).
  void forward(const int32_t* tokens, int n, int pos0, float* logits, bool all_logits);

 private:
  void load_config(const GgufFile& f);
  void load_weights(const GgufFile& f);
  void attention(int il, int n, int pos0);
  void project(const Weight& w, const float* x, int n_rows, float* y);
  void project3(const Weight& a, float* ya, const Weight& b, float* yb, const Weight* c, float* yc,
                const float* x, int n_rows);

  ModelConfig cfg_;
  int32_t ctx_size_, max_batch_;
  std::unique_ptr<ThreadPool> pool_;
  MatmulScratch mm_scratch_;

  Weight tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;

  // KV cache per layer: [ctx_size][kv_dim]
  std::vector<std::vector<float>> k_cache_, v_cache_;
  // Activations, [max_batch][...]
  std::vector<float> x_, h_, q_, k_, v_, attn_, ffn_a_, ffn_b_, tmp_;
  std::vector<float> rope_cos_, rope_sin_;        // [ctx_size][n_rot/2] for the global base
  std::vector<float> rope_cos_l_, rope_sin_l_;    // local (SWA) base
};

}  // namespace ls
