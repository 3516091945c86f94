// LoRA adapters as llama.cpp writes them (GGUF), applied unmerged: at every adapted matmul
//   y = W·x + s·(B·(A·x)),   s = scale·alpha/rank (scale alone when alpha is 0),
// summed over the adapters a sequence uses. The base weights are never touched (they stay shared
// between replicas through the repack store); each sequence of a batch carries its own adapters.
//
// File rules (llama.cpp src/llama-adapter.cpp): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha (f32, absent = 0), general.architecture equal to the base's. Tensors
// `<base tensor>.lora_a` / `.lora_b`; `*_norm.weight` entries are skipped; any other suffix, a
// pair missing a half, a name not in the base or a shape that does not fit is an error.
// Shapes (ggml ne, ne0 innermost) for a base weight ne = [n_in, n_out]:
//   lora_a [n_in, rank] (rank rows of n_in), lora_b [rank, n_out] (n_out rows of rank).
// token_embd (ne [n_embd, n_vocab]) is the exception, A and B swapped: lora_a [rank, n_vocab]
// (one row of rank per token), lora_b [rank, n_embd]; the token's A row goes through B and is
// added to the looked-up embedding (before any embedding scale, as llama.cpp does).
// Halves may be any type our row kernels run (F32, F16, BF16, Q8_0, ...), mixed within a file;
// they are used in place in the adapter file's mapping: an adapter costs about its file size.
//
// Arithmetic per adapted matmul and adapter group (rows using that adapter, gathered):
//   t = A·x  [n_g][rank],  u = B·t  [n_g][n_out]  (the base kernels: int8 for Q8_0 halves,
//   fp32 activations for F32/F16/BF16), then per row y += s_row·u — the product rounded to
//   f32 first (llama.cpp's ggml_scale then ggml_add). A row's adapters are applied in ascending
//   load serial, so its result does not depend on its batchmates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/lazy_array.h"
#include "gguf/gguf.h"
#include "model/batch.h"

namespace ls {

struct ModelConfig;  // model/model.h
class ThreadPool;
struct MatmulScratch;

// The base matrices of a layer an adapter may target, in forward order.
enum class LoraTarget : uint8_t { Q, K, V, O, Gate, Up, Down };
constexpr int kLoraPerLayer = 7;
constexpr int kMaxLoraPerSeq = 8;      // adapters one sequence may use at once
constexpr int32_t kMaxLoraRank = 4096;

struct LoraHalf {                 // n_out rows of n_in elements, ggml blocks, in the file mapping
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
};

struct LoraPair {
  LoraHalf a;        // matrices: [rank][n_in];    token_embd: [n_vocab][rank]
  LoraHalf b;        // matrices: [n_out][rank];   token_embd: [n_embd][rank]
  int32_t rank = 0;  // lora_b ne[0] (llama.cpp's rank for the scale)
  bool present() const { return a.data != nullptr; }
};

class LoraAdapter {
 public:
  // Maps `path` and checks it against the base model (its file and config). Throws GgufError
  // whose message starts with the adapter path and names the problem.
  LoraAdapter(const std::string& path, const GgufFile& base, const ModelConfig& cfg);

  const std::string& path() const { return file_.path(); }
  float alpha() const { return alpha_; }
  uint64_t serial() const { return serial_; }  // unique per load in this process, increasing
  // s for a user scale (llama.cpp get_scale): scale·alpha/rank, or scale when alpha is 0.
  float scale(const LoraPair& p, float user_scale) const {
    return alpha_ != 0.f ? user_scale * alpha_ / float(p.rank) : user_scale;
  }
  const LoraPair* layer(int il, LoraTarget t) const;  // nullptr: not adapted
  const LoraPair* output() const { return output_.present() ? &output_ : nullptr; }
  const LoraPair* token_embd() const { return embd_.present() ? &embd_ : nullptr; }
  int32_t max_rank() const { return max_rank_; }
  int32_t num_pairs() const { return num_pairs_; }
  size_t tensor_bytes() const { return tensor_bytes_; }  // both halves of every pair
  // Activation scratch its matmuls need for n_rows rows (MatmulScratch).
  size_t scratch_bytes(int64_t n_rows) const;

 private:
  GgufFile file_;
  float alpha_ = 0.f;
  uint64_t serial_ = 0;
  std::vector<LoraPair> layers_;  // [n_layer][kLoraPerLayer]; absent pairs have no data
  LoraPair output_, embd_;
  int32_t max_rank_ = 0, num_pairs_ = 0;
  size_t tensor_bytes_ = 0;
};

// One adapter a sequence applies, at the user's scale (0 never appears: left out entirely).
struct LoraUse {
  const LoraAdapter* adapter = nullptr;
  float scale = 0.f;
  uint64_t serial = 0;  // adapter->serial(), kept so a set can be compared after the adapter is gone
};
// A sequence's adapters, sorted by load serial (the order their terms are added).
struct LoraSet {
  int32_t n = 0;
  LoraUse use[kMaxLoraPerSeq];
  // Same adapters (by serial, never dereferenced) at the same scales: K/V computed under one
  // set are reusable under the other (prefix cache).
  bool same_as(const LoraSet& o) const;
  void sort();  // by serial
};

// Applies the adapters of a batch inside ModelRuntime::forward_batch. Buffers are reserved
// address space sized at construction (pages commit on first use); nothing is allocated per
// step. Not thread-safe: the forward pass drives it.
class LoraRunner {
 public:
  LoraRunner() = default;
  // max_rows: the forward's max batch; max_in / max_out: the widest matmul input / output
  // (n_vocab included when the LM head may be adapted).
  LoraRunner(int32_t max_rows, int64_t max_in, int64_t max_out);

  // Groups the step's rows by adapter (row_sets[i]: row i's adapters; null or empty: base).
  // Returns false when no row uses an adapter (the pass is then exactly the base model's).
  bool begin(const LoraSet* const* row_sets, int n_rows);
  bool active() const { return !groups_.empty(); }

  // y[r] += s·B·(A·x[r]) for every batch row r of a group whose adapter adapts the matrix
  // (layer il, target t). x: [n_rows][x_stride]; y: [n_rows][y_stride].
  void apply(ThreadPool& pool, MatmulScratch& scratch, int il, LoraTarget t, const float* x, int64_t x_stride,
             float* y, int64_t y_stride);
  // LM head: x and y hold only the n_out rows out_rows[] (strictly increasing batch rows).
  void apply_output(ThreadPool& pool, MatmulScratch& scratch, const int32_t* out_rows, int n_out, const float* x,
                    int64_t x_stride, float* y, int64_t y_stride);
  // Embedding lookup: x[r] += s·B·A[token_r] (A's row of the row's token).
  void apply_embd(ThreadPool& pool, MatmulScratch& scratch, const BatchToken* tokens, float* x, int64_t x_stride);

 private:
  struct Group {
    const LoraAdapter* adapter;
    int32_t first, count;  // its rows: rows_[first, first + count), ascending
  };
  // The core: rows_[g.first..] mapped through `map` (batch row → row of x/y; -1 skips).
  void run(ThreadPool& pool, MatmulScratch& scratch, const Group& g, const LoraPair& p, const int32_t* map,
           const float* x, int64_t x_stride, float* y, int64_t y_stride);
  void finish(ThreadPool& pool, MatmulScratch& scratch, const LoraPair& p, int32_t n_g, float* y, int64_t y_stride);

  int32_t max_rows_ = 0;
  int64_t max_in_ = 0, max_out_ = 0;
  std::vector<Group> groups_;       // [≤ max_rows·kMaxLoraPerSeq] ascending adapter serial
  std::vector<int32_t> rows_;       // [max_rows·kMaxLoraPerSeq] batch rows per group
  std::vector<float> scales_;       // [max_rows·kMaxLoraPerSeq] the row's user scale
  std::vector<int32_t> gathered_;   // [max_rows] rows of y the current run writes (by gathered index)
  std::vector<float> row_s_;        // [max_rows] s per gathered row
  std::vector<int32_t> out_map_;    // [max_rows] batch row → LM-head row (-1: no logits)
  LazyArray<float> xg_;             // [max_rows][max_in] gathered inputs
  LazyArray<float> t_;              // [max_rows][kMaxLoraRank] A·x
  LazyArray<float> u_;              // [max_rows][max_out] B·t
};

}  // namespace ls
