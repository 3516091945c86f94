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
// Halves may be any type our kernels dequantize (F32, F16, BF16, Q8_0, ...), mixed within a file.
// At load each matrix's halves are copied transposed (AT [n_in][rank], BT [rank][n_out]) for the
// axpy kernels of lora_kernels.cpp: F16 halves stay F16 (an F16 adapter costs its file size),
// others become f32 (a Q8_0 or BF16 half costs 3.8× / 2× its bytes). The file's own pages are
// then released, except token_embd's A, whose rows are read in place (lookup by token).
//
// Arithmetic per adapted matmul and per row using adapters:
//   t = A·x [rank] (fp32 activations), then y += s·(B·t) — s·(B·t) rounded to f32 first
//   (llama.cpp's ggml_scale then ggml_add). A row's adapters are applied in ascending load
//   serial, and each row is computed on its own, so its result does not depend on its batchmates.
// Lifetimes: a LoraAdapter is immutable after construction and shared (BatchEngine's table and
// every sequence using it hold a shared_ptr); a LoraSet's raw pointers are valid while those
// references are held, i.e. for the forward passes of its sequence.
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

// The base matrices of a layer an adapter may target, in forward order.
enum class LoraTarget : uint8_t { Q, K, V, O, Gate, Up, Down };
constexpr int kLoraPerLayer = 7;
constexpr int kMaxLoraPerSeq = 8;      // adapters one sequence may use at once
constexpr int32_t kMaxLoraRank = 4096;
constexpr int kMaxLoraGroup = 3;       // matrices sharing an input: q/k/v

struct LoraHalf {                 // n_out rows of n_in elements, ggml blocks, in the file mapping
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
};

// A half transposed for the axpy kernels: rows × cols, row-major, f32 or IEEE half.
struct LoraT {
  bool f16 = false;
  const void* data = nullptr;  // into the adapter's own storage
  int64_t rows = 0, cols = 0;
};

struct LoraPair {
  LoraHalf a;        // matrices: [rank][n_in];    token_embd: [n_vocab][rank] (read in place)
  LoraHalf b;        // matrices: [n_out][rank];   token_embd: [n_embd][rank]
  LoraT at;          // matrices: A transposed, [n_in][rank]; token_embd: unused
  LoraT bt;          // B transposed, [rank][n_out] (token_embd: [rank][n_embd])
  int32_t rank = 0;  // lora_b ne[0] (llama.cpp's rank for the scale)
  bool present() const { return a.data != nullptr; }
};

// The kernels (lora_kernels.cpp), one row at a time: t[rank] = x[n_in]·AT, and
// y[o] += s·(t·BT)[o] for o in [o0, o1). Results are the same for any split of rows or outputs.
void lora_down(const LoraT& at, const float* x, float* t);
void lora_up_add(const LoraT& bt, const float* t, float s, float* y, int64_t o0, int64_t o1);

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
  size_t tensor_bytes() const { return tensor_bytes_; }  // both halves of every pair, as in the file
  size_t resident_bytes() const { return store_bytes_; }  // the transposed copies it keeps

 private:
  GgufFile file_;
  float alpha_ = 0.f;
  uint64_t serial_ = 0;
  std::vector<LoraPair> layers_;  // [n_layer][kLoraPerLayer]; absent pairs have no data
  LoraPair output_, embd_;
  int32_t max_rank_ = 0, num_pairs_ = 0;
  size_t tensor_bytes_ = 0, store_bytes_ = 0;
  std::vector<std::vector<uint8_t>> store_;  // the transposed halves (each buffer never moves)
  LoraT transposed(const LoraHalf& h);      // copies h ([n_out][n_in]) as [n_in][n_out]
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

// Applies the adapters of a batch inside ModelRuntime::forward_batch. The base product runs
// once for all rows; then each row with adapters adds its low-rank terms, its adapters in
// ascending serial. Rows are independent and computed one by one, so any split gives the same
// bits. Rows are ordered by adapter and the pool takes whole runs of rows of one adapter (a
// term's transposed halves, 18–66 KB at rank 16, are then read from memory by one thread and
// stay in its cache for the run's other rows). The matrices sharing an input (q/k/v, gate/up)
// go to the pool together, one task per (run, matrix), so even one row's terms use every thread;
// a lone matrix of one row runs on the calling thread, except the LM head's B product, split
// over the pool by outputs. Small work runs on the calling thread (a pool dispatch is ~1 µs).
// Buffers are sized at construction; nothing is allocated per step. Not thread-safe: the
// forward pass drives it.
class LoraRunner {
 public:
  LoraRunner() = default;
  explicit LoraRunner(int32_t max_rows);  // max_rows: the forward's max batch

  // Notes the step's rows with adapters (row_sets[i]: row i's adapters; null or empty: base).
  // Returns false when no row uses an adapter (the pass is then exactly the base model's).
  bool begin(const LoraSet* const* row_sets, int n_rows);

  // y[r] += s·B·(A·x[r]) for every row r whose adapters adapt the matrix (layer il, target t).
  // x: [n_rows][x_stride]; y: [n_rows][y_stride].
  void apply(ThreadPool& pool, int il, LoraTarget t, const float* x, int64_t x_stride, float* y, int64_t y_stride);
  // The matrices of layer il that read the same x (q/k/v, gate/up: n_targets ≤ kMaxLoraGroup)
  // in one pool dispatch, one task per (run of rows of one adapter, matrix): a layer's seven
  // terms cost four dispatches, and at one row the group's matrices run side by side.
  // ys[j], y_strides[j]: targets[j]'s output. Each row's term is computed exactly as by apply.
  void apply_group(ThreadPool& pool, int il, const LoraTarget* targets, int n_targets, const float* x,
                   int64_t x_stride, float* const* ys, const int64_t* y_strides);
  // LM head: x and y hold only the n_out rows out_rows[] (strictly increasing batch rows).
  void apply_output(ThreadPool& pool, const int32_t* out_rows, int n_out, const float* x, int64_t x_stride, float* y,
                    int64_t y_stride);
  // Embedding lookup: x[r] += s·B·A[token_r] (A's row of the row's token).
  void apply_embd(ThreadPool& pool, const BatchToken* tokens, float* x, int64_t x_stride);

 private:
  // Runs pair_of(adapter) for every active row (a nullptr pair: that adapter leaves the matrix
  // alone); io_row maps an active row's index to its row of x and y (-1: skip).
  template <class PairOf, class Row>
  void each_row(ThreadPool& pool, PairOf pair_of, Row io_row, const float* x, int64_t x_stride, float* y,
                int64_t y_stride, const BatchToken* tokens);

  const LoraSet* const* sets_ = nullptr;  // the step's row_sets
  std::vector<int32_t> active_;           // [max_rows] batch rows with adapters, by first adapter
  std::vector<int32_t> runs_;             // [max_rows + 1] starts of runs of active_ with one first adapter
  int64_t row_macs_ = 0;                  // rough multiply-adds per active row and matrix (serial or pool)
  std::vector<int32_t> out_map_;          // [max_rows] batch row → LM-head row (-1: no logits)
  LazyArray<float> t_;                    // [max_rows][kMaxLoraGroup][kMaxLoraRank] A·x of each active row
                                          // and group matrix (pages touched only as used)
};

}  // namespace ls
