// Causal (and sliding-window) attention of a multi-sequence batch over the fp16 KV cache.
//
// Numerics follow llama.cpp's F16 cache: K and V are stored rounded to fp16, q is rounded to
// fp16 before q·k, and the softmax weights are rounded to fp16 before weighting V; products
// and sums are fp32. Each (token, head) result is computed by one thread, by one fixed
// sequence of operations that reads only that token's own sequence, so it is bit-identical
// whatever else shares the batch, whatever the token order and whatever the thread count
// (for a fixed kernel path: AVX2+FMA+F16C or portable, chosen when the runtime is built).
#pragma once

#include <cstdint>

#include "common/thread_pool.h"
#include "model/batch.h"

namespace ls {

constexpr int kMaxHeadDim = 512;  // attention keeps one fp16-rounded query head on the stack

// fp16 kernels of one attention task. Strides are in uint16_t elements between positions.
struct AttentionKernels {
  // scores[p] = (q · fp32(k[p·stride .. +hd))) · scale for p < n_pos. q holds hd floats.
  void (*scores)(const float* q, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* scores);
  // w[p] = fp16_round(w[p] · inv) for p < n_pos (softmax normalisation, rounded as ggml does).
  void (*normalize)(float* w, int n_pos, float inv);
  // out[j] = Σ_p w[p] · fp32(v[p·stride + j]) for j < hd, summed in increasing p.
  void (*weighted_sum)(const float* w, const uint16_t* v, int64_t stride, int n_pos, int hd, float* out);
  // dst[j] = fp16(src[j]) (round to nearest even) for j < n.
  void (*store)(const float* src, uint16_t* dst, int64_t n);
  const char* name;
};

// The AVX2+FMA+F16C kernels when this process may use them (cpu_features().avx2 and the
// matmul path is not forced to scalar), else the portable ones.
const AttentionKernels& attention_kernels();
const AttentionKernels& attention_kernels_portable();
const AttentionKernels* attention_kernels_avx2();  // nullptr when not usable here

// Everything one attention call reads, captured by a single reference so the std::function
// built per parallel_for stores its lambda inline (no allocation in the token loop).
struct AttentionJob {
  const float* q;              // [n][n_head·hd] queries after RoPE (gemma: already scaled)
  float* out;                  // [n][n_head·hd] attention output
  const BatchToken* tokens;    // [n] position and sequence of each row
  const uint16_t *k, *v;       // this layer's cache: [n_seq][ctx_size][kv_dim] fp16 each
  int64_t seq_stride;          // elements between sequences in k/v (ctx_size·kv_dim)
  int64_t q_dim, kv_dim;       // n_head·hd, n_head_kv·hd
  int hd, n_head, group;       // group = n_head / n_head_kv (GQA: query head h reads kv head h/group)
  int window;                  // > 0: a token at pos attends to [pos−window+1, pos]; 0: to [0, pos]
  int ctx_size;                // per-sequence positions (score row length)
  float scale;                 // multiplies q·k
  const AttentionKernels* kern;
};

// Runs the n·n_head (token, head) tasks of a batch over the pool. Each token's K/V (and those
// of every earlier position of its sequence) must already be in the cache.
void run_attention(ThreadPool& pool, const AttentionJob& job, int n);

}  // namespace ls
