// Transformer forward pass over GGUF weights used in place (llama, qwen2, qwen3, gemma3, granite, olmo2,
// smollm3, phi3; qwen3moe, gpt-oss and llama files with experts run the mixture-of-experts FFN of model/moe.cpp).
//
// Continuous batching: one forward_batch() runs tokens of many sequences (slots) together, so
// every weight matrix is read once per step for the whole batch; each token attends only to
// its own sequence's cache.
//
// Buffers: every activation/scratch buffer is sized at construction for max_batch tokens and
// reused; forward_batch() allocates nothing. They are LazyArrays: pages are committed as rows
// are first used. KV cache (model/kv_cache.h): a pool of fixed-size pages of K and V rows, IEEE
// fp16 (llama.cpp's F16 cache); each sequence reads and writes its positions through its page
// table, which the caller maps (engine/page_pool.h) — or leaves at the identity partition it
// starts with (sequence s owns pages [s·pages_per_seq, (s+1)·pages_per_seq)).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "model/attention.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/ops.h"
#include "model/repack_store.h"
#include "model/rope.h"
#include "quant/quant.h"

namespace ls {

enum class Arch { Llama, Qwen2, Qwen3, Gemma3, Granite, Olmo2, SmolLM3, Phi3, Qwen3Moe, GptOss };
enum class RopeStyle { Norm, Neox };  // adjacent pairs (llama, granite, smollm3) vs halves (qwen2/3, gemma3, olmo2, phi3)

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;
  int32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  int32_t n_vocab = 0, n_ctx_train = 0;
  int32_t n_ctx_max = 0;         // tokens: the longest ctx_size allowed (n_ctx_train, or what rope scaling extends it to)
  float rms_eps = 1e-5f;
  float rope_base = 10000.f, rope_base_local = 10000.f;
  int32_t n_rot = 0;
  RopeStyle rope = RopeStyle::Norm;
  std::string rope_scaling_type = "none";  // "none" | "linear" | "yarn" (as llama.cpp resolves the keys)
  float rope_scaling_factor = 1.f;        // context extension factor (1/freq_scale) for linear and yarn
  RopeScaling rope_scaling;               // global layers
  RopeScaling rope_scaling_local;         // SWA layers: llama.cpp keeps their freq_scale at 1
  float attn_scale = 0.f;        // multiplies q·k (1/sqrt(head_dim) unless the model says otherwise)
  float embd_scale = 1.f;        // gemma: sqrt(n_embd); granite: granite.embedding_scale
  float residual_scale = 1.f;    // granite: multiplies each block's output before the residual add
  float logit_scale = 1.f;       // granite: logits are multiplied by 1/logit_scale (llama.cpp's order)
  int32_t sliding_window = 0;    // gemma3 / gpt-oss local layers; 0 = none
  int32_t swa_pattern = 0;       // layer il is local iff swa_pattern > 0 && il % swa_pattern != swa_pattern-1
  // Mixture of experts (0 = dense FFN): every layer routes each token to its n_expert_used best of
  // n_expert expert FFNs of n_ff_exp rows (qwen3moe: expert_feed_forward_length; llama: feed_forward_length).
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  // gpt-oss (llama.cpp's SOFTMAX_WEIGHT gating and LLM_FFN_SWIGLU_OAI_MOE): the top k of the raw router
  // logits, then a softmax over those k (no renormalisation); experts run swiglu_oai (moe.h), with biases.
  bool moe_oai = false;
  int32_t no_rope_step = 0;      // smollm3: layer il skips RoPE iff (il + 1) % no_rope_step == 0 (llama.cpp: 4)
  bool uses_rope(int il) const { return no_rope_step <= 0 || (il + 1) % no_rope_step != 0; }
  bool is_local(int il) const { return sliding_window > 0 && swa_pattern > 0 && il % swa_pattern != swa_pattern - 1; }
};

struct Weight {  // a 2-D weight: n_out rows of n_in, in the mapping or repacked (layout)
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
  WeightLayout layout = WeightLayout::Rows;
};

// A 3-D GGUF expert tensor [n_in, rows, n_expert]: n_expert matrices of `rows` rows, stored one after
// the other, so `all` is the 2-D matrix of n_expert·rows rows (repacked as one when rows is a whole
// number of interleave groups, so no group straddles two experts).
struct ExpertWeights {
  Weight all;
  int64_t rows = 0;  // output rows of one expert
  bool empty() const { return all.data == nullptr; }
  Weight expert(int e) const;  // expert e's rows, in all's layout
};

struct LayerWeights {
  // Empty when the architecture lacks them (olmo2: no pre-norms; q/k norms span the whole projection).
  std::vector<float> attn_norm, ffn_norm, post_attn_norm, post_ffw_norm, q_norm, k_norm;
  // Biases (empty if absent): q/k/v on every arch (qwen2 has them); output and FFN ones on llama.
  std::vector<float> bq, bk, bv, bo, b_gate, b_up, b_down;
  std::vector<float> attn_sinks;                    // gpt-oss: [n_head] one extra softmax logit per head
  Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  Weight ffn_gate_inp;                              // MoE router [n_embd → n_expert]; else empty
  ExpertWeights gate_exps, up_exps, down_exps;      // MoE experts; else empty
  // gpt-oss biases (empty if absent): router [n_expert]; experts [n_expert][n_ff_exp] (gate, up), [n_expert][n_embd] (down).
  std::vector<float> b_router, b_gate_exps, b_up_exps, b_down_exps;
};

class ModelRuntime {
 public:
  // file must outlive the runtime. Throws GgufError naming the file and problem.
  // ctx_size is per sequence, at most ModelConfig::n_ctx_max (the training context, or what the
  // file's rope scaling extends it to; ≤ 0: the training context capped at 8192); max_batch tokens
  // per forward (≤ 0: 512; capped at n_seq·ctx_size); n_seq sequence slots in the KV cache.
  // repack_cache_dir: where repacked weights are shared between processes (model/repack_store.h);
  // empty = repack into this process's memory. K/V page pool: kv_bytes (≤ 0: n_seq whole
  // contexts) plus extra_kv_bytes, in pages of kKvPagePositions positions. window_group: a model
  // with sliding-window layers keeps them in a page group of their own (kv_cache.h), sized for a
  // window per sequence (the caller then maps, and releases, each sequence's window pages).
  ModelRuntime(const GgufFile& file, int ctx_size, int max_batch, int threads, int n_seq = 1,
               const std::string& repack_cache_dir = "", int64_t kv_bytes = 0, int64_t extra_kv_bytes = 0,
               bool window_group = false);
  ~ModelRuntime();

  const ModelConfig& config() const { return cfg_; }
  int32_t ctx_size() const { return ctx_size_; }
  int32_t max_batch() const { return max_batch_; }
  int32_t n_seq() const { return n_seq_; }
  size_t kv_cache_bytes() const { return kv_.bytes(); }  // reserved, not resident
  int32_t n_pages(int group = kKvFullGroup) const { return kv_.n_page(group); }
  int n_kv_groups() const { return kv_.n_groups(); }  // 2: sliding layers in the window group
  // Window group: the most pages one sequence holds at once there (a step's tokens and the
  // window before the first of them), 0 without the group.
  int32_t max_window_pages() const { return max_window_pages_; }
  int32_t pages_per_seq() const { return pages_per_seq_; }  // ceil(ctx_size / kKvPagePositions)
  // Sequence seq's page table [pages_per_seq]: entry j is the page holding positions
  // [j·P, (j+1)·P), or -1 (unmapped). The caller may remap it between forward calls; a forward
  // pass reads every position a token attends to and writes each token's own.
  // Each group has its own table (the window group's maps only a window's pages).
  int32_t* page_table(int seq, int group = kKvFullGroup) {
    return page_table_[group].data() + int64_t(seq) * pages_per_seq_;
  }
  const std::string& repack_status() const { return repack_.status(); }  // RepackStore::status()
  ThreadPool& pool() { return *pool_; }

  // Runs n ≤ max_batch tokens in one pass. Token i is at position tokens[i].pos of sequence
  // tokens[i].seq; its K/V are written to that sequence's cache at pos (overwriting: rewinding
  // is just a smaller pos), and it attends to positions [0, pos] (local/SWA layers: the window)
  // of its own sequence only. Tokens of one sequence appear in increasing pos order at
  // contiguous positions; positions below a sequence's first token in the batch must already
  // be in its cache. For i < n_out, row i of logits [n_out][n_vocab] = output of batch token
  // out_rows[i] (strictly increasing). n_out == 0 or logits == nullptr skips the LM head.
  // A token's results are bit-identical whatever else shares the batch, in whatever order,
  // with any thread count. Throws std::invalid_argument on out-of-range input.
  // row_lora[i] (optional): the LoRA adapters of token i (model/lora.h; null or empty: base
  // model). Adapters must have been checked against this model and outlive the call.
  // row_embd[i] (optional): n_embd floats that replace token i's embedding (an image embedding
  // from the vision encoder; not scaled by embd_scale, as llama.cpp feeds raw embeddings); null
  // entries (or a null array) look the token id up as usual.
  void forward_batch(const BatchToken* tokens, int n, const int32_t* out_rows, int n_out, float* logits,
                     const LoraSet* const* row_lora = nullptr, const float* const* row_embd = nullptr);

  // Final hidden states of the most recent forward_batch(): rows [first_row, first_row + n_rows)
  // of its batch after the output RMSNorm (what the LM head would read), written to out
  // [n_rows][n_embd]. Reads the residual stream the pass left behind, so generation results are
  // untouched. Valid until the next forward call. Throws std::invalid_argument on a bad range.
  void final_hidden(int first_row, int n_rows, float* out) const;

  // MoE models: the experts the last layer chose for row `row` of the most recent forward_batch(),
  // best first (n_expert_used ids to out). For tests and diagnostics; throws std::invalid_argument
  // on a dense model or a bad row.
  void last_experts(int row, int32_t* out) const;

  // Sequence 0 only: tokens[0..n) at positions pos0.. (n ≤ max_batch, pos0 + n ≤ ctx_size).
  // If all_logits, writes n rows of n_vocab to logits; else only the last token's row;
  // logits == nullptr skips the output head. lora: adapters of every token (null: base model).
  void forward(const int32_t* tokens, int n, int pos0, float* logits, bool all_logits,
               const LoraSet* lora = nullptr);

  // Copies positions [0, n_pos) of every layer's K and V from sequence src_seq's pages to
  // dst_seq's (both mapped). Throws std::invalid_argument on out-of-range input.
  void copy_kv(int src_seq, int dst_seq, int n_pos);
  // Copies the first n_pos positions of page src to page dst of a group (copy-on-write of a shared page).
  void copy_kv_page(int32_t src, int32_t dst, int n_pos, int group = kKvFullGroup);
  int64_t kv_bytes_per_pos() const { return kv_.bytes_per_pos(); }
  int64_t kv_bytes_per_page() const { return kv_.bytes_per_page(); }  // every group's part of a page
  int64_t kv_group_bytes_per_page(int group) const { return kv_.group_bytes_per_page(group); }
  KvCache& kv_cache() { return kv_; }  // page bytes in and out (KvCache::read_page / write_page)

 private:
  void load_config(const GgufFile& f);
  void load_weights(const GgufFile& f);
  void repack_weights(const std::string& cache_dir, const std::string& model_path);
  void attention(int il, const BatchToken* tokens, int n);
  void init_kv(int64_t kv_bytes, int64_t extra_kv_bytes, bool window_group, const GgufFile& file);
  void check_batch(const BatchToken* tokens, int n, const int32_t* out_rows, int n_out) const;
  // side: tasks sharing the matmul's dispatch (quant.h), run once whatever the path.
  void project(const Weight& w, const float* x, int n_rows, float* y, const SideTasks* side = nullptr);
  void project3(const Weight& a, float* ya, const Weight& b, float* yb, const Weight* c, float* yc,
                const float* x, int n_rows, const SideTasks* side = nullptr);
  // Mixture-of-experts FFN (model/moe.cpp): y [n][n_embd] from the normed input x [n][n_embd].
  void moe_ffn(const LayerWeights& L, const float* x, int n, float* y);

  ModelConfig cfg_;
  int32_t ctx_size_, max_batch_, n_seq_;
  std::unique_ptr<ThreadPool> pool_;
  MatmulScratch mm_scratch_;

  Weight tok_embd_, output_;
  // Interleaved copies of the weights the active kernel path prefers repacked (quant.h); each
  // replaces its original, whose mapped pages are released.
  RepackStore repack_;
  std::vector<float> output_norm_;
  std::vector<float> output_bias_;       // [n_vocab] qwen2's LM head bias (empty if absent)
  std::vector<float> rope_freqs_;        // [n_rot/2] llama 3 frequency divisors (empty if absent)
  std::vector<LayerWeights> layers_;

  KvCache kv_;                          // per layer [K,V][n_page(group)][kKvPagePositions][kv_dim] fp16
  int32_t pages_per_seq_ = 0, max_window_pages_ = 0;
  // Per group [n_seq][pages_per_seq]: the page of each P positions, -1 unmapped.
  std::vector<int32_t> page_table_[kMaxKvGroups];
  const AttentionKernels* attn_kern_;   // chosen at construction (AVX-512, AVX2+F16C or portable)
  AttentionScratch attn_scratch_;       // softmax rows and chunk partials, sized for ctx_size
  // Activations, [max_batch][...]; rows beyond the largest batch run so far are never committed.
  LazyArray<float> x_, h_, q_, k_, v_, attn_, ffn_a_, ffn_b_, tmp_;
  // MoE: router logits [max_batch][n_expert], inputs gathered per expert [max_batch][n_embd], and the
  // down output of every (token, chosen expert) pair [max_batch·n_expert_used][n_embd].
  LazyArray<float> moe_logits_, moe_x_, moe_y_;
  std::vector<int32_t> moe_ids_;        // [max_batch·n_expert_used] chosen experts, token-major, best first
  std::vector<float> moe_weights_;      // their normalised router weights
  std::vector<int32_t> moe_row_;        // row of moe_y_ holding each pair's output
  std::vector<int32_t> moe_pairs_;      // pair indices grouped by expert
  std::vector<int32_t> moe_first_;      // [n_expert + 1] start of each expert's group in moe_pairs_
  std::vector<int32_t> moe_next_;       // [n_expert] fill cursors while grouping
  std::vector<MatmulOut> moe_outs_;     // [2·min(n_expert, pairs)] the chosen experts' matmul outputs
  RopeTable rope_, rope_local_;                   // global base; local (SWA) base
  std::vector<BatchToken> fwd_tokens_;            // [max_batch] forward()'s batch, seq 0
  std::vector<int32_t> fwd_rows_;                 // [max_batch] forward()'s out_rows
  std::vector<const LoraSet*> fwd_lora_;          // [max_batch] forward()'s per-row adapters
  LoraRunner lora_;                               // low-rank terms of the batch's adapters
  int32_t last_batch_ = 0;                        // rows of x_ the last forward_batch() left
};

}  // namespace ls
