#include "model/lora.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>

#include "common/fp16.h"
#include "common/huge_alloc.h"
#include "model/model.h"
#include "common/thread_pool.h"
#include "quant/quant.h"

namespace ls {
namespace {

std::atomic<uint64_t> g_next_serial{1};

// Base tensor names of a layer's targets, in LoraTarget order.
const char* const kTargetNames[kLoraPerLayer] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                 "ffn_gate", "ffn_up", "ffn_down"};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string shape(const GgufTensor& t) {
  std::string s = "[" + std::to_string(t.ne[0]);
  for (uint32_t d = 1; d < t.n_dims; ++d) s += ", " + std::to_string(t.ne[d]);
  return s + "]";
}

// Below this many multiply-adds a matrix's terms run on the calling thread: a pool dispatch
// (~1 µs) would cost more than the work. Results are the same on any number of threads, so the
// choice never changes a bit.
constexpr int64_t kSerialMacs = 1 << 16;
// A single row's B product worth splitting over the pool: the LM head's (n_vocab × rank), not a
// layer's (≤ 1536 × 64 here, ~2 µs on one core): splitting those at rank 16 measured 0.79× base
// decode at c1 against 0.84× on the calling thread (medians of 5 alternating runs each).
constexpr int64_t kSplitMacs = 1 << 18;

// How a half of this type is stored (lora.h).
LoraElem stored_elem(GgmlType type) {
  if (type == GgmlType::F16) return LoraElem::F16;
  return type == GgmlType::F32 || type == GgmlType::BF16 ? LoraElem::F32 : LoraElem::I8;
}

// The pages of [p, p + n) of a read-only file mapping, dropped from this process (they stay in
// the page cache): a half copied transposed is never read again.
void release_pages(const uint8_t* p, size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace

LoraAdapter::LoraAdapter(const std::string& path, const GgufFile& base, const ModelConfig& cfg)
    : file_(path), serial_(g_next_serial.fetch_add(1, std::memory_order_relaxed)) {
  const GgufFile& f = file_;
  // Metadata checks in llama.cpp's order.
  const std::string general_type = f.get_string("general.type", "");
  if (general_type != "adapter")
    f.fail("general.type is '" + general_type + "', expected 'adapter' (not a LoRA adapter file)");
  const std::string arch = f.get_string("general.architecture", "");
  if (arch != cfg.arch_name)
    f.fail("adapter architecture '" + arch + "' does not match the base model's '" + cfg.arch_name + "'");
  const std::string adapter_type = f.get_string("adapter.type", "");
  if (adapter_type != "lora") f.fail("adapter.type is '" + adapter_type + "', expected 'lora'");
  alpha_ = float(f.get_float("adapter.lora.alpha", 0.0));

  // Pair the halves by base tensor name.
  std::map<std::string, std::pair<const GgufTensor*, const GgufTensor*>> pairs;
  for (const GgufTensor& t : f.tensors()) {
    if (ends_with(t.name, ".lora_a")) {
      pairs[t.name.substr(0, t.name.size() - 7)].first = &t;
    } else if (ends_with(t.name, ".lora_b")) {
      pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
    } else if (!ends_with(t.name, "_norm.weight")) {  // norm entries: skipped, as llama.cpp does
      f.fail("tensor '" + t.name + "' has an unexpected suffix (expected .lora_a, .lora_b or _norm.weight)");
    }
  }

  layers_.assign(size_t(cfg.n_layer) * kLoraPerLayer, LoraPair{});
  for (const auto& [name, ab] : pairs) {
    if (!ab.first || !ab.second)
      f.fail("LoRA pair for '" + name + "' is missing its " + (ab.first ? "lora_b" : "lora_a") + " half");
    const GgufTensor& a = *ab.first;
    const GgufTensor& b = *ab.second;
    const GgufTensor* w = base.tensor(name);
    if (!w) f.fail("'" + name + "' is not a tensor of the base model (adapter made for another model?)");
    if (a.n_dims != 2 || b.n_dims != 2 || w->n_dims != 2)
      f.fail("LoRA pair for '" + name + "': halves and base tensor must be 2-D");
    for (const GgufTensor* h : {&a, &b})
      if (!ggml_type_supported(h->type))
        f.fail("tensor '" + h->name + "' has type " + ggml_type_info(h->type).name + ", which the runtime cannot run");
    const bool embd = name == "token_embd.weight";
    // llama.cpp's shape rules; A and B are swapped for token_embd.
    const bool fits = embd ? (b.ne[1] == w->ne[0] && a.ne[1] == w->ne[1] && a.ne[0] == b.ne[0])
                           : (a.ne[0] == w->ne[0] && b.ne[1] == w->ne[1] && a.ne[1] == b.ne[0]);
    if (!fits) {
      const std::string want = embd ? "lora_a [r, " + std::to_string(w->ne[1]) + "] and lora_b [r, " +
                                          std::to_string(w->ne[0]) + "]"
                                    : "lora_a [" + std::to_string(w->ne[0]) + ", r] and lora_b [r, " +
                                          std::to_string(w->ne[1]) + "]";
      f.fail("LoRA pair for '" + name + "' has lora_a " + shape(a) + " and lora_b " + shape(b) +
             ", which do not fit the base tensor " + shape(*w) + ": expected " + want);
    }
    LoraPair p;
    p.rank = int32_t(b.ne[0]);
    if (p.rank < 1 || p.rank > kMaxLoraRank)
      f.fail("LoRA pair for '" + name + "' has rank " + std::to_string(b.ne[0]) + " (1.." +
             std::to_string(kMaxLoraRank) + " supported)");
    p.a = LoraHalf{a.type, a.data, a.ne[0], a.ne[1]};
    p.b = LoraHalf{b.type, b.data, b.ne[0], b.ne[1]};
    if (embd) {
      embd_ = p;
    } else if (name == "output.weight") {
      output_ = p;
    } else {
      int il = -1, k = -1;
      for (int t = 0; t < kLoraPerLayer && k < 0; ++t) {
        const std::string suffix = std::string(".") + kTargetNames[t] + ".weight";
        if (name.rfind("blk.", 0) == 0 && ends_with(name, suffix.c_str())) {
          const std::string num = name.substr(4, name.size() - 4 - suffix.size());
          if (!num.empty() && num.size() < 6 && num.find_first_not_of("0123456789") == std::string::npos) {
            il = std::stoi(num);
            k = t;
          }
        }
      }
      if (k < 0 || il >= cfg.n_layer)
        f.fail("adapting '" + name + "' is not supported (targets: attention q/k/v/output, FFN gate/up/down, "
               "output, token_embd)");
      layers_[size_t(il) * kLoraPerLayer + k] = p;
    }
    max_rank_ = std::max(max_rank_, p.rank);
    num_pairs_ += 1;
    tensor_bytes_ += a.size_bytes + b.size_bytes;
  }
  store_halves();
}

void LoraAdapter::store_halves() {
  // Forward order (layer by layer, q k v o gate up down, A then B; then the LM head, then
  // token_embd's B): the kernels of a step read the arena front to back, so each half's stream
  // runs on into the next and a prefetch ahead of the current half fetches the next one.
  std::vector<LoraPair*> order;
  for (LoraPair& p : layers_)
    if (p.present()) order.push_back(&p);
  for (LoraPair* p : {&output_, &embd_})
    if (p->present()) order.push_back(p);
  size_t bytes = 0;
  for (LoraPair* p : order) bytes += (p != &embd_ ? stored_bytes(p->a, true) : 0) + stored_bytes(p->b, false);
  // Cache-line aligned, not on huge pages: with THP that measured no faster here and made a load
  // 4-5x slower (18 -> 70-100 ms for 9.3 MiB: the kernel compacting memory for the pages).
  store_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes ? bytes : 64)));  // bytes: multiple of 64
  if (!store_) throw std::bad_alloc();
  uint8_t* cursor = store_.get();
  for (LoraPair* p : order) {
    if (p != &embd_) p->at = stored(p->a, true, cursor);  // token_embd's A rows are looked up in place
    p->bt = stored(p->b, false, cursor);
  }
  store_bytes_ = size_t(cursor - store_.get());
}

const LoraPair* LoraAdapter::layer(int il, LoraTarget t) const {
  const LoraPair& p = layers_[size_t(il) * kLoraPerLayer + size_t(t)];
  return p.present() ? &p : nullptr;
}

namespace {
// Each stored array starts on a cache line.
size_t line_up(size_t n) { return (n + 63) & ~size_t(63); }
}  // namespace

size_t LoraAdapter::stored_bytes(const LoraHalf& h, bool is_a) {
  const size_t n = size_t(h.n_in) * size_t(h.n_out);
  switch (stored_elem(h.type)) {
    case LoraElem::F16: return line_up(n * sizeof(uint16_t));
    case LoraElem::F32: return line_up(n * sizeof(float));
    case LoraElem::I8: return line_up(n) + line_up(size_t(is_a ? h.n_in : h.n_out) * sizeof(float));  // + scales
  }
  return 0;
}

LoraT LoraAdapter::stored(const LoraHalf& h, bool is_a, uint8_t*& cursor) {
  // The file's half is [n_out][n_in] (A: n_out = rank; B: n_in = rank). Kernel rows × cols:
  // AT [n_in][rank] (element (i, k) from file (k, i)); BT [rank][n_out] in panels (from (o, k)).
  const int64_t rank = is_a ? h.n_out : h.n_in, n_vec = is_a ? h.n_in : h.n_out;  // n_vec rank-long vectors
  auto index = [&](int64_t o, int64_t i) -> size_t {  // file element (o, i) → stored element
    return is_a ? size_t(i) * size_t(rank) + size_t(o) : size_t(lora_panel_index(i, o, rank, h.n_out));
  };
  std::vector<float> f(size_t(h.n_in) * size_t(h.n_out));  // the half in f32, as the file lays it out
  const size_t row_bytes = ggml_row_bytes(h.type, h.n_in);
  for (int64_t o = 0; o < h.n_out; ++o)
    dequantize_row(h.type, h.data + size_t(o) * row_bytes, f.data() + size_t(o) * size_t(h.n_in), h.n_in);
  release_pages(h.data, row_bytes * size_t(h.n_out));
  LoraT t;
  t.rows = is_a ? h.n_in : rank;
  t.cols = is_a ? rank : h.n_out;
  t.elem = stored_elem(h.type);
  if (t.elem == LoraElem::F16) {  // exact: the file's F16 values moved
    uint16_t* dst = reinterpret_cast<uint16_t*>(cursor);
    cursor += line_up(f.size() * sizeof(uint16_t));
    for (int64_t o = 0; o < h.n_out; ++o)
      for (int64_t i = 0; i < h.n_in; ++i) dst[index(o, i)] = f32_to_fp16(f[size_t(o) * size_t(h.n_in) + size_t(i)]);
    t.data = dst;
  } else if (t.elem == LoraElem::F32) {
    float* dst = reinterpret_cast<float*>(cursor);
    cursor += line_up(f.size() * sizeof(float));
    for (int64_t o = 0; o < h.n_out; ++o)
      for (int64_t i = 0; i < h.n_in; ++i) dst[index(o, i)] = f[size_t(o) * size_t(h.n_in) + size_t(i)];
    t.data = dst;
  } else {  // each rank-long vector: absmax / 127, rounded to nearest
    int8_t* q = reinterpret_cast<int8_t*>(cursor);
    cursor += line_up(f.size());
    float* scale = reinterpret_cast<float*>(cursor);
    cursor += line_up(size_t(n_vec) * sizeof(float));
    auto at = [&](int64_t v, int64_t k) -> float& {  // element k of vector v, in the file's layout
      return is_a ? f[size_t(k) * size_t(h.n_in) + size_t(v)] : f[size_t(v) * size_t(h.n_in) + size_t(k)];
    };
    for (int64_t v = 0; v < n_vec; ++v) {
      float amax = 0.f;
      for (int64_t k = 0; k < rank; ++k) amax = std::max(amax, std::fabs(at(v, k)));
      scale[v] = amax / 127.f;
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      for (int64_t k = 0; k < rank; ++k) {
        const int8_t qv = int8_t(std::lrintf(std::clamp(at(v, k) * inv, -127.f, 127.f)));
        q[is_a ? index(k, v) : index(v, k)] = qv;
      }
    }
    t.data = q;
    t.scale = scale;
  }
  return t;
}

bool LoraSet::same_as(const LoraSet& o) const {
  if (n != o.n) return false;
  for (int32_t k = 0; k < n; ++k)
    if (use[k].serial != o.use[k].serial || use[k].scale != o.use[k].scale) return false;
  return true;
}

void LoraSet::sort() {
  std::sort(use, use + n, [](const LoraUse& a, const LoraUse& b) { return a.serial < b.serial; });
}

LoraRunner::LoraRunner(int32_t max_rows, int64_t max_out) : max_out_(max_out) {
  active_.reserve(max_rows);
  chunks_.reserve(size_t(max_rows) + 1);
  out_map_.assign(max_rows, -1);
  t_ = LazyArray<float>(size_t(max_rows) * kMaxLoraGroup * kMaxLoraRank);
  u_ = LazyArray<float>(size_t(kLoraSideRows) * kMaxLoraGroup * kMaxLoraPerSeq * size_t(max_out));
}

namespace {

// Orders sets by their adapters' serials (lexicographically, a prefix first); scales are ignored:
// rows at different scales of the same adapters share every read.
int compare_sets(const LoraSet& a, const LoraSet& b) {
  for (int32_t k = 0; k < a.n && k < b.n; ++k)
    if (a.use[k].serial != b.use[k].serial) return a.use[k].serial < b.use[k].serial ? -1 : 1;
  return a.n == b.n ? 0 : (a.n < b.n ? -1 : 1);
}

}  // namespace

bool LoraRunner::begin(const LoraSet* const* row_sets, int n_rows) {
  active_.clear();
  sets_ = row_sets;
  row_macs_ = 0;
  if (row_sets == nullptr) return false;
  for (int r = 0; r < n_rows; ++r) {
    const LoraSet* set = row_sets[r];
    if (!set || set->n == 0) continue;
    active_.push_back(r);  // within capacity
    for (int32_t k = 0; k < set->n; ++k) row_macs_ = std::max<int64_t>(row_macs_, set->use[k].adapter->max_rank());
  }
  row_macs_ *= 2048;  // rank × a typical n_in + n_out: only decides serial vs pool
  // Rows of one set together, ascending rows within it: an insertion sort (std::stable_sort may
  // allocate; rows arrive mostly grouped, sequence by sequence).
  for (size_t i = 1; i < active_.size(); ++i) {
    const int32_t row = active_[i];
    size_t j = i;
    for (; j > 0 && compare_sets(*row_sets[active_[j - 1]], *row_sets[row]) > 0; --j) active_[j] = active_[j - 1];
    active_[j] = row;
  }
  chunks_.clear();
  for (size_t a = 0; a < active_.size(); ++a)
    if (a == 0 || a - size_t(chunks_.back()) == size_t(kLoraRowChunk) ||
        compare_sets(*row_sets[active_[a]], *row_sets[active_[a - 1]]) != 0)
      chunks_.push_back(int32_t(a));
  chunks_.push_back(int32_t(active_.size()));
  return !active_.empty();
}

template <class PairOf, class Row>
void LoraRunner::chunk_terms(int64_t c, int slot, PairOf pair_of, Row io_row, const float* x, int64_t x_stride,
                             float* y, int64_t y_stride, const BatchToken* tokens, ThreadPool* split_pool) {
  const float* xs[kLoraRowChunk];
  float* ts[kLoraRowChunk];
  float* ys[kLoraRowChunk];
  float ss[kLoraRowChunk];
  int32_t rows[kLoraRowChunk];  // active indexes of the chunk's rows that have an output
  int n = 0;
  for (int64_t a = chunks_[c]; a < chunks_[c + 1]; ++a) {
    const int32_t row = io_row(a);
    if (row < 0) continue;
    rows[n] = int32_t(a);
    xs[n] = x ? x + int64_t(row) * x_stride : nullptr;
    ts[n] = t_.data() + (a * kMaxLoraGroup + slot) * kMaxLoraRank;
    ys[n] = y + int64_t(row) * y_stride;
    ++n;
  }
  if (n == 0) return;
  const LoraSet& set = *sets_[active_[rows[0]]];  // every row of the chunk uses the same adapters
  for (int32_t k = 0; k < set.n; ++k) {            // ascending serial: the order the terms are added
    const LoraAdapter& adapter = *set.use[k].adapter;
    const LoraPair* p = pair_of(adapter);
    if (!p) continue;
    for (int j = 0; j < n; ++j) ss[j] = adapter.scale(*p, sets_[active_[rows[j]]]->use[k].scale);
    if (tokens) {  // token_embd: t = A's row of the token (llama.cpp's get_rows)
      const size_t a_row = ggml_row_bytes(p->a.type, p->a.n_in);
      for (int j = 0; j < n; ++j)
        dequantize_row(p->a.type, p->a.data + size_t(tokens[active_[rows[j]]].token) * a_row, ts[j], p->rank);
    } else {
      lora_down(p->at, xs, ts, n);
    }
    if (split_pool && n == 1 && p->bt.cols * p->rank >= kSplitMacs) {  // one row: B's outputs over the pool
      auto slice = [&](int64_t o0, int64_t o1) { lora_up_add(p->bt, ts, ss, ys, 1, o0, o1); };
      // One captured reference: the std::function parallel_for builds stays allocation-free.
      split_pool->parallel_for(p->bt.cols, 64, [&slice](int64_t o0, int64_t o1) { slice(o0, o1); });
    } else {
      lora_up_add(p->bt, ts, ss, ys, n, 0, p->bt.cols);
    }
  }
}

template <class PairOf, class Row>
void LoraRunner::each_row(ThreadPool& pool, PairOf pair_of, Row io_row, const float* x, int64_t x_stride, float* y,
                          int64_t y_stride, const BatchToken* tokens) {
  const int64_t n = int64_t(active_.size()), n_chunks = int64_t(chunks_.size()) - 1;
  if (n * row_macs_ < kSerialMacs || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c)
      chunk_terms(c, 0, pair_of, io_row, x, x_stride, y, y_stride, tokens, n == 1 ? &pool : nullptr);
    return;
  }
  auto chunks = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) chunk_terms(c, 0, pair_of, io_row, x, x_stride, y, y_stride, tokens, nullptr);
  };
  // One captured reference: the std::function parallel_for builds stays allocation-free.
  pool.parallel_for(n_chunks, 1, [&chunks](int64_t c0, int64_t c1) { chunks(c0, c1); });
}

void LoraRunner::apply(ThreadPool& pool, int il, LoraTarget t, const float* x, int64_t x_stride, float* y,
                       int64_t y_stride) {
  each_row(pool, [&](const LoraAdapter& a) { return a.layer(il, t); }, [&](int64_t a) { return active_[a]; }, x,
           x_stride, y, y_stride, nullptr);
}

void LoraRunner::apply_group(ThreadPool& pool, int il, const LoraTarget* targets, int n_targets, const float* x,
                             int64_t x_stride, float* const* ys, const int64_t* y_strides) {
  const int64_t n = int64_t(active_.size()), n_chunks = int64_t(chunks_.size()) - 1;
  if (n * row_macs_ * n_targets < kSerialMacs || n_targets == 1) {
    for (int j = 0; j < n_targets; ++j) apply(pool, il, targets[j], x, x_stride, ys[j], y_strides[j]);
    return;
  }
  // Task k: chunk k / n_targets, matrix k % n_targets; its rows' A·x go to the matrix's own slot
  // of t_, so tasks of one row on different threads never share a buffer.
  auto task = [&](int64_t k) {
    const int j = int(k % n_targets);
    const LoraTarget target = targets[j];
    chunk_terms(k / n_targets, j, [&](const LoraAdapter& a) { return a.layer(il, target); },
                [&](int64_t a) { return active_[a]; }, x, x_stride, ys[j], y_strides[j], nullptr, nullptr);
  };
  // One captured reference: the std::function parallel_for builds stays allocation-free.
  pool.parallel_for(n_chunks * n_targets, 1, [&task](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) task(k);
  });
}

SideTasks LoraRunner::side_tasks(int il, const LoraTarget* targets, int n_targets, const float* x, int64_t x_stride) {
  side_il_ = il;
  side_n_targets_ = n_targets;
  std::copy(targets, targets + n_targets, side_targets_);
  side_x_ = x;
  side_x_stride_ = x_stride;
  SideTasks tasks;
  tasks.n = (int64_t(chunks_.size()) - 1) * n_targets;  // task k: chunk k / n_targets, matrix k % n_targets
  tasks.run = &LoraRunner::run_side_task;
  tasks.ctx = this;
  return tasks;
}

void LoraRunner::run_side_task(void* self, int64_t k) {
  LoraRunner& r = *static_cast<LoraRunner*>(self);
  const int slot = int(k % r.side_n_targets_);
  const int64_t a0 = r.chunks_[k / r.side_n_targets_], a1 = r.chunks_[k / r.side_n_targets_ + 1];
  const float* xs[kLoraRowChunk];
  float* ts[kLoraRowChunk];
  float* us[kLoraRowChunk];
  const int n = int(a1 - a0);
  for (int j = 0; j < n; ++j) {
    xs[j] = r.side_x_ + int64_t(r.active_[a0 + j]) * r.side_x_stride_;
    ts[j] = r.t_.data() + ((a0 + j) * kMaxLoraGroup + slot) * kMaxLoraRank;
  }
  const LoraSet& set = *r.sets_[r.active_[a0]];  // every row of the chunk uses the same adapters
  for (int32_t use = 0; use < set.n; ++use) {
    const LoraPair* p = set.use[use].adapter->layer(r.side_il_, r.side_targets_[slot]);
    if (!p) continue;
    lora_down(p->at, xs, ts, n);
    for (int j = 0; j < n; ++j) us[j] = r.u_at(a0 + j, slot, use);
    lora_up(p->bt, ts, us, n, 0, p->bt.cols);
  }
}

void LoraRunner::add_side(float* const* ys, const int64_t* y_strides) {
  for (int slot = 0; slot < side_n_targets_; ++slot)
    for (size_t a = 0; a < active_.size(); ++a) {
      const int32_t row = active_[a];
      const LoraSet& set = *sets_[row];
      for (int32_t use = 0; use < set.n; ++use) {  // ascending serial, as chunk_terms adds them
        const LoraAdapter& adapter = *set.use[use].adapter;
        const LoraPair* p = adapter.layer(side_il_, side_targets_[slot]);
        if (p)
          lora_add(ys[slot] + int64_t(row) * y_strides[slot], u_at(int64_t(a), slot, use),
                   adapter.scale(*p, set.use[use].scale), p->bt.cols);
      }
    }
}

void LoraRunner::apply_output(ThreadPool& pool, const int32_t* out_rows, int n_out, const float* x, int64_t x_stride,
                              float* y, int64_t y_stride) {
  if (n_out == 0) return;
  for (int r = 0; r < n_out; ++r) out_map_[out_rows[r]] = r;
  each_row(pool, [](const LoraAdapter& a) { return a.output(); }, [&](int64_t a) { return out_map_[active_[a]]; }, x,
           x_stride, y, y_stride, nullptr);
  for (int r = 0; r < n_out; ++r) out_map_[out_rows[r]] = -1;
}

void LoraRunner::apply_embd(ThreadPool& pool, const BatchToken* tokens, float* x, int64_t x_stride) {
  each_row(pool, [](const LoraAdapter& a) { return a.token_embd(); }, [&](int64_t a) { return active_[a]; }, nullptr,
           0, x, x_stride, tokens);
}

}  // namespace ls
