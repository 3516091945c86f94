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
// At load each matrix's halves are stored again for the kernels of lora_kernels.cpp (LoraT): A as
// AT [n_in][rank], row-major; B as BT [rank][n_out] in panels of kLoraPanel outputs (each panel's
// [rank][width] block contiguous, so a kernel streams it front to back). The values: a Q8_0 (or
// other quantized) half becomes int8 with one f32 scale per rank-long vector (a row of AT, a column
// of BT: absmax / 127), half its F16 size; F16, BF16 and F32 halves keep their values exactly (F16
// as IEEE halves, the others as f32): int8 for them too cut the kernels' time by only ~10% once
// each half is read once per chunk of rows (docs/lora.md), not worth a rounding llama.cpp does
// not do. The file's own pages are then released, except token_embd's A, whose rows are read in
// place (lookup by token).
//
// Arithmetic per adapted matmul and per row using adapters:
//   t = A·x [rank] (fp32 activations, the halves widened to f32), then y += s·(B·t) — s·(B·t)
//   rounded to f32 first (llama.cpp's ggml_scale then ggml_add). A row's adapters are applied in
//   ascending load serial, and each row's arithmetic is the same whichever rows share a kernel
//   call, so its result does not depend on its batchmates.
// Lifetimes: a LoraAdapter is immutable after construction and shared (BatchEngine's table and
// every sequence using it hold a shared_ptr); a LoraSet's raw pointers are valid while those
// references are held, i.e. for the forward passes of its sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/huge_alloc.h"
#include "common/lazy_array.h"
#include "gguf/gguf.h"
#include "model/batch.h"
#include "quant/quant.h"

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

// A half as the kernels read it (see the file comment): AT [rows = n_in][cols = rank] row-major, or
// BT [rows = rank][cols = n_out] in panels (lora_panel_index). int8 values carry scale[] (AT: one
// per row, [n_in]; BT: one per column, [n_out]); exact values have none.
enum class LoraElem : uint8_t { I8, F16, F32 };
struct LoraT {
  LoraElem elem = LoraElem::F32;
  const void* data = nullptr;    // int8_t, IEEE-half uint16_t or float elements, in the adapter's own storage
  const float* scale = nullptr;  // I8 only; likewise
  int64_t rows = 0, cols = 0;
};

// BT's panels: outputs [p, p + kLoraPanel) stored as one [rank][width] block (the last panel
// narrower), panel after panel. The index of element (k, o).
constexpr int64_t kLoraPanel = 32;
inline int64_t lora_panel_index(int64_t k, int64_t o, int64_t rank, int64_t n_out) {
  const int64_t p0 = o / kLoraPanel * kLoraPanel;
  const int64_t width = n_out - p0 < kLoraPanel ? n_out - p0 : kLoraPanel;
  return p0 * rank + k * width + (o - p0);
}

struct LoraPair {
  LoraHalf a;        // matrices: [rank][n_in];    token_embd: [n_vocab][rank] (read in place)
  LoraHalf b;        // matrices: [n_out][rank];   token_embd: [n_embd][rank]
  LoraT at;          // matrices: A transposed, [n_in][rank]; token_embd: unused
  LoraT bt;          // B transposed, [rank][n_out] (token_embd: [rank][n_embd])
  int32_t rank = 0;  // lora_b ne[0] (llama.cpp's rank for the scale)
  bool present() const { return a.data != nullptr; }
};

// The kernels (lora_kernels.cpp), over n_rows ≤ kLoraRowChunk rows that share one read of the half
// (w: the half's values widened to f32; int8 scales as in LoraT):
//   down:   t_r[k] = Σ_i (x_r[i]·scale[i])·w[i][k]                    (at: AT)
//   up_add: y_r[o] += s_r·(scale[o]·Σ_k t_r[k]·w[k][o])  for o in [o0, o1)  (bt: BT)
// (without the scale factors for exact values). Each row's result is the same for any n_rows, any
// companions and any split of outputs.
//   up:     u_r[o] = scale[o]·Σ_k t_r[k]·w[k][o]     (up_add's u, stored for a later lora_add)
//   add:    y[o] += s·u[o]                          (up_add's last step: multiply, then add)
constexpr int kLoraRowChunk = 4;
void lora_down(const LoraT& at, const float* const* xs, float* const* ts, int n_rows);
void lora_up_add(const LoraT& bt, const float* const* ts, const float* ss, float* const* ys, int n_rows, int64_t o0,
                 int64_t o1);
void lora_up(const LoraT& bt, const float* const* ts, float* const* us, int n_rows, int64_t o0, int64_t o1);
void lora_add(float* y, const float* u, float s, int64_t n);

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
  size_t resident_bytes() const { return store_bytes_; }  // the stored halves and scales it keeps

 private:
  GgufFile file_;
  float alpha_ = 0.f;
  uint64_t serial_ = 0;
  std::vector<LoraPair> layers_;  // [n_layer][kLoraPerLayer]; absent pairs have no data
  LoraPair output_, embd_;
  int32_t max_rank_ = 0, num_pairs_ = 0;
  size_t tensor_bytes_ = 0, store_bytes_ = 0;
  FreeBuffer store_;  // every stored half and scale array, in forward order (store_halves)
  void store_halves();
  // h as the kernels read it: A ([rank][n_in] in the file) as AT, or B ([n_out][rank]) as BT,
  // written at cursor (advanced by stored_bytes(h, is_a), cache-line aligned).
  static size_t stored_bytes(const LoraHalf& h, bool is_a);
  LoraT stored(const LoraHalf& h, bool is_a, uint8_t*& cursor);
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
// ascending serial. Rows using the same adapters (by serial) are ordered together and cut into
// chunks of ≤ kLoraRowChunk rows: one kernel call per chunk and half reads the half once for all
// its rows (a rank-16 term's halves, 9–66 KB, then stay in that thread's cache), and the pool
// takes whole chunks. Each row's arithmetic is independent of its chunk, so any batch and any
// split give the same bits. The matrices sharing an input (q/k/v, gate/up) go to the pool
// together, one task per (chunk, matrix), so even one row's terms use every thread; a lone matrix
// of one chunk runs on the calling thread, except the LM head's B product, split over the pool by
// outputs. Small work runs on the calling thread (a pool dispatch is ~1 µs).
// Buffers are sized at construction; nothing is allocated per step. Not thread-safe: the
// forward pass drives it.
class LoraRunner {
 public:
  LoraRunner() = default;
  // max_rows: the forward's max batch; max_out: the widest adapted layer matrix (n_out).
  LoraRunner(int32_t max_rows, int64_t max_out);

  // Notes the step's rows with adapters (row_sets[i]: row i's adapters; null or empty: base).
  // Returns false when no row uses an adapter (the pass is then exactly the base model's).
  bool begin(const LoraSet* const* row_sets, int n_rows);

  // y[r] += s·B·(A·x[r]) for every row r whose adapters adapt the matrix (layer il, target t).
  // x: [n_rows][x_stride]; y: [n_rows][y_stride].
  void apply(ThreadPool& pool, int il, LoraTarget t, const float* x, int64_t x_stride, float* y, int64_t y_stride);
  // The matrices of layer il that read the same x (q/k/v, gate/up: n_targets ≤ kMaxLoraGroup)
  // in one pool dispatch, one task per (chunk of rows of one adapter set, matrix): a layer's seven
  // terms cost four dispatches, and at one row the group's matrices run side by side.
  // ys[j], y_strides[j]: targets[j]'s output. Each row's term is computed exactly as by apply.
  void apply_group(ThreadPool& pool, int il, const LoraTarget* targets, int n_targets, const float* x,
                   int64_t x_stride, float* const* ys, const int64_t* y_strides);
  // Decode-sized steps (≤ kLoraSideRows rows with adapters) run a layer matrix group's terms inside
  // the base matmul's own dispatch instead (quant's SideTasks): side_tasks(...) returns the
  // tasks, one per (chunk, matrix) as apply_group's, each writing u = B·(A·x) per row and adapter
  // (lora_up) into u_; after the matmul, add_side(...) adds s·u to each row's y in the order apply
  // adds its terms. The bits equal apply_group's; a step saves a dispatch per group, and a lone
  // matrix's terms (o, down) run beside base rows instead of while the other threads wait.
  static constexpr int kLoraSideRows = 16;
  bool uses_side_tasks() const { return !active_.empty() && active_.size() <= size_t(kLoraSideRows); }
  SideTasks side_tasks(int il, const LoraTarget* targets, int n_targets, const float* x, int64_t x_stride);
  void add_side(float* const* ys, const int64_t* y_strides);

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
  // The terms of chunk c (active rows chunks_[c] .. chunks_[c+1]) for one matrix: every adapter of
  // the chunk's set in ascending serial, down then up over the chunk's rows. slot: which of the
  // group's t_ slots the chunk's A·x use. split_pool: when set, a one-row chunk's B products big
  // enough to split (the LM head's) run over it by outputs.
  template <class PairOf, class Row>
  void chunk_terms(int64_t c, int slot, PairOf pair_of, Row io_row, const float* x, int64_t x_stride, float* y,
                   int64_t y_stride, const BatchToken* tokens, ThreadPool* split_pool);

  const LoraSet* const* sets_ = nullptr;  // the step's row_sets
  std::vector<int32_t> active_;           // [max_rows] batch rows with adapters, rows of one set together
  std::vector<int32_t> chunks_;           // [max_rows + 1] starts of chunks of active_ (one set, ≤ kLoraRowChunk)
  int64_t row_macs_ = 0;                  // rough multiply-adds per active row and matrix (serial or pool)
  std::vector<int32_t> out_map_;          // [max_rows] batch row → LM-head row (-1: no logits)
  LazyArray<float> t_;                    // [max_rows][kMaxLoraGroup][kMaxLoraRank] A·x of each active row
                                          // and group matrix (pages touched only as used)
  // side_tasks' group, kept for its tasks and add_side.
  int side_il_ = 0, side_n_targets_ = 0;
  LoraTarget side_targets_[kMaxLoraGroup] = {};
  const float* side_x_ = nullptr;
  int64_t side_x_stride_ = 0, max_out_ = 0;
  LazyArray<float> u_;  // [kLoraSideRows][kMaxLoraGroup][kMaxLoraPerSeq][max_out] (pages touched as used)
  float* u_at(int64_t active, int slot, int use) {
    return u_.data() + ((active * kMaxLoraGroup + slot) * kMaxLoraPerSeq + use) * max_out_;
  }
  static void run_side_task(void* self, int64_t k);
};

}  // namespace ls
