// Causal (and sliding-window) attention of a multi-sequence batch over the fp16 KV cache.
//
// Numerics follow llama.cpp's F16 cache: K and V are stored rounded to fp16, q is rounded to
// fp16 before q·k, and the softmax weights are rounded to fp16 before weighting V; products
// and sums are fp32.
//
// Long contexts are split over positions (flash-decoding style) in fixed chunks of
// kAttnChunkPositions counted from the token's first visible position: chunk c of a (token,
// head) covers [first + c·C, first + (c+1)·C). Per chunk: scores, the chunk maximum m_c,
// e_p = exp(s_p − m_c) and l_c = Σ e_p (increasing p). Then M = max_c m_c,
// L = Σ_c l_c·exp(m_c − M) (increasing c), w_p = fp16(e_p · (exp(m_c − M) / L)) and the chunk
// output o_c = Σ_p w_p·v_p (increasing p); the result is o_0 + o_1 + … (increasing c). With one
// chunk (n_pos ≤ C, every Gemma sliding-window layer) this is exactly plain softmax attention.
// Attention sinks (gpt-oss): head h's sink logit S_h joins the softmax without a value, so
// M = max(max_c m_c, S_h) and L gains exp(S_h − M) after the chunk terms.
// The chunk boundaries depend only on the token's positions, never on the thread count or on
// what else shares the batch, and every sum has one fixed order, so each (token, head) result
// is bit-identical whatever the batch, token order, thread count or scheduling mode (for a
// fixed kernel family: portable, or AVX2/AVX-512, which give identical bits).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "model/batch.h"

namespace ls {

constexpr int kMaxHeadDim = 512;          // attention keeps fp16-rounded query heads on the stack
constexpr int kAttnChunkPositions = 512;  // positions per softmax chunk (see above)
constexpr int kAttnKernelGroup = 4;       // query heads one kernel call handles together (share K/V reads)

// fp16 kernels of one attention task. Strides are in elements between rows. q holds g query
// heads (1 ≤ g ≤ kAttnKernelGroup) of hd floats each, row stride hd, all reading the same K/V.
struct AttentionKernels {
  // s[h·s_stride + p] = (q_h · fp32(k[p·stride .. +hd))) · scale for p < n_pos, h < g; the dot
  // product in 8 lane partial sums over hd in steps of 8, reduced ((0+1)+(2+3))+((4+5)+(6+7)).
  void (*scores)(const float* q, int g, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* s,
                 int64_t s_stride);
  // max of w[0..n) (n ≥ 1; exact, so any evaluation order).
  float (*max)(const float* w, int n);
  // For h < g: w[h·w_stride + p] ← exp(w[h·w_stride + p] − m[h]) for p < n, each exactly as
  // std::exp(float) returns it (glibc's expf; attention_exp.h), and l[h] = Σ_p of the results
  // summed in increasing p from 0.
  void (*exp_sum)(float* w, int g, int64_t w_stride, int n, const float* m, float* l);
  // w[p] = fp16_round(w[p] · f) for p < n (softmax normalisation, rounded as ggml does).
  void (*normalize)(float* w, int n, float f);
  // out[h·o_stride + j] += Σ_p w[h·w_stride + p] · fp32(v[p·stride + j]) for j < hd, h < g: one
  // fma chain per output element in increasing p, continuing from out's value (the caller zeroes
  // out before a chunk's first page, so a chunk read page by page is the same chain as one read
  // from contiguous rows).
  void (*weighted_sum)(const float* w, int g, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd,
                       float* out, int64_t o_stride);
  // dst[j] = fp16(src[j]) (round to nearest even) for j < n.
  void (*store)(const float* src, uint16_t* dst, int64_t n);
  const char* name;
};

// The fastest kernel family this process may use: AVX-512 when the matmul path is AVX-512,
// AVX2+FMA+F16C when the matmul path is not forced to scalar, else portable. The AVX-512 and
// AVX2 kernels give identical bits.
const AttentionKernels& attention_kernels();
const AttentionKernels& attention_kernels_portable();
const AttentionKernels* attention_kernels_avx2();    // nullptr when not usable here
const AttentionKernels* attention_kernels_avx512();  // nullptr when not usable here

// Everything one attention call reads, captured by a single reference so the std::function
// built per parallel_for stores its lambda inline (no allocation in the token loop).
struct AttentionJob {
  const float* q;              // [n][n_head·hd] queries after RoPE (gemma: already scaled)
  float* out;                  // [n][n_head·hd] attention output
  const BatchToken* tokens;    // [n] position and sequence of each row
  const uint16_t *k, *v;       // this layer's cache, fp16 each: pages (below) or [n_seq][ctx_size][kv_dim]
  // Paged cache (model/kv_cache.h): k/v hold [n_page][page_positions][kv_dim]; sequence s's
  // position p is in page page_table[s·pages_per_seq + p / page_positions]. null: contiguous,
  // sequence s at k + s·seq_stride.
  const int32_t* page_table = nullptr;
  int pages_per_seq = 0, page_positions = 0;
  int64_t seq_stride = 0;      // contiguous layout: elements between sequences in k/v
  int64_t q_dim, kv_dim;       // n_head·hd, n_head_kv·hd
  int hd, n_head, group;       // group = n_head / n_head_kv (GQA: query head h reads kv head h/group)
  int window;                  // > 0: a token at pos attends to [pos−window+1, pos]; 0: to [0, pos]
  int ctx_size;                // per-sequence positions (score row length)
  float scale;                 // multiplies q·k
  const float* sinks = nullptr;  // [n_head] or null: head h's softmax has one more logit sinks[h] (unscaled), no value
  const AttentionKernels* kern;
};

// Working memory of run_attention, sized once for a model shape (nothing is allocated per call).
// Rows for kMaxSplitTokens tokens whose chunks are spread over threads, plus one row per pool
// thread for tokens that one thread runs start to finish.
class AttentionScratch {
 public:
  static constexpr int kMaxSplitTokens = 4;  // batches up to this size split positions over threads

  AttentionScratch() = default;
  AttentionScratch(int n_threads, int n_head, int hd, int ctx_size);

  struct Row {    // one token's working set
    float* e;     // [n_head][ctx_size] scores, then exp(s − m_c)
    float* m;     // [n_head][max_chunks] chunk maxima
    float* l;     // [n_head][max_chunks] chunk sums of e
    float* o;     // [n_head][max_chunks][hd] chunk outputs (when a token has several chunks)
  };
  Row row(int r) const;
  int max_chunks() const { return max_chunks_; }
  int64_t e_stride() const { return ctx_size_; }
  // A per-thread row for the whole-token mode; at most n_threads are held at once.
  int acquire_thread_row();
  void release_thread_row(int r);
  int n_threads() const { return n_threads_; }
  // True when the rows hold this job's heads and positions for a pool of `pool_threads`.
  bool fits(const AttentionJob& job, int pool_threads) const {
    return pool_threads <= n_threads_ && job.n_head <= n_head_ && job.hd <= hd_ && job.ctx_size <= ctx_size_;
  }

 private:
  int n_threads_ = 0, n_head_ = 0, hd_ = 0, ctx_size_ = 0, max_chunks_ = 0;
  int64_t row_floats_ = 0;
  std::vector<float> buf_;
  std::unique_ptr<std::atomic<bool>[]> busy_;  // [n_threads] thread rows in use
};

// Runs the attention of the n batch tokens over the pool. Each token's K/V (and those of every
// earlier position of its sequence) must already be in the cache. Throws std::invalid_argument
// when the scratch was sized for a smaller shape or pool (AttentionScratch::fits). Batches of at most
// kMaxSplitTokens tokens split each token's chunks (and query heads) over threads; larger
// batches give each (token, kv head) to one thread. Both give identical bits.
void run_attention(ThreadPool& pool, const AttentionJob& job, int n, AttentionScratch& scratch);

}  // namespace ls
