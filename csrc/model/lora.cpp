#include "model/lora.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <stdexcept>

#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_internal.h"  // matmul_with without a pool: the small low-rank products

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

// Below this many multiply-adds a low-rank product runs on the calling thread: a pool dispatch
// (~1 µs) would cost more than the product (decode: 16 × 576 = 9 k). Results are the same on any
// number of threads, so the choice never changes a bit.
constexpr int64_t kSerialMacs = 1 << 18;

void low_rank_matmul(ThreadPool& pool, MatmulScratch& scratch, const LoraHalf& w, const float* x, int64_t n_rows,
                     float* y) {
  if (n_rows * w.n_in * w.n_out < kSerialMacs)
    quant::matmul_with(quant::active_kernels(), nullptr, scratch, w.type, w.data, w.n_in, w.n_out, x, n_rows, y,
                       w.n_out, WeightLayout::Rows);
  else
    matmul(pool, scratch, w.type, w.data, w.n_in, w.n_out, x, n_rows, y, w.n_out, WeightLayout::Rows);
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
}

const LoraPair* LoraAdapter::layer(int il, LoraTarget t) const {
  const LoraPair& p = layers_[size_t(il) * kLoraPerLayer + size_t(t)];
  return p.present() ? &p : nullptr;
}

size_t LoraAdapter::scratch_bytes(int64_t n_rows) const {
  size_t most = 0;
  auto need = [&](const LoraPair& p) {
    if (!p.present()) return;
    most = std::max(most, matmul_scratch_bytes(p.a.type, p.a.n_in, n_rows));
    most = std::max(most, matmul_scratch_bytes(p.b.type, p.b.n_in, n_rows));
  };
  for (const LoraPair& p : layers_) need(p);
  need(output_);
  need(embd_);
  return most;
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

LoraRunner::LoraRunner(int32_t max_rows, int64_t max_in, int64_t max_out)
    : max_rows_(max_rows), max_in_(max_in), max_out_(max_out) {
  const size_t uses = size_t(max_rows) * kMaxLoraPerSeq;
  groups_.reserve(uses);
  rows_.resize(uses);
  scales_.resize(uses);
  gathered_.resize(max_rows);
  row_s_.resize(max_rows);
  out_map_.assign(max_rows, -1);
  xg_ = LazyArray<float>(size_t(max_rows) * max_in);
  t_ = LazyArray<float>(size_t(max_rows) * kMaxLoraRank);
  u_ = LazyArray<float>(size_t(max_rows) * max_out);
}

bool LoraRunner::begin(const LoraSet* const* row_sets, int n_rows) {
  groups_.clear();
  if (row_sets == nullptr) return false;
  // 1. Distinct adapters in ascending serial, with their row counts (few: a linear scan).
  for (int r = 0; r < n_rows; ++r) {
    const LoraSet* set = row_sets[r];
    for (int32_t k = 0; set && k < set->n; ++k) {
      const LoraAdapter* a = set->use[k].adapter;
      auto it = std::find_if(groups_.begin(), groups_.end(),
                             [&](const Group& g) { return g.adapter->serial() >= a->serial(); });
      if (it == groups_.end() || it->adapter != a) it = groups_.insert(it, Group{a, 0, 0});  // within capacity
      it->count += 1;
    }
  }
  // 2. Each group's slice of rows_, then its rows in ascending batch order.
  int32_t off = 0;
  for (Group& g : groups_) {
    g.first = off;
    off += g.count;
    g.count = 0;
  }
  for (int r = 0; r < n_rows; ++r) {
    const LoraSet* set = row_sets[r];
    for (int32_t k = 0; set && k < set->n; ++k) {
      Group& g = *std::find_if(groups_.begin(), groups_.end(),
                               [&](const Group& x) { return x.adapter == set->use[k].adapter; });
      rows_[g.first + g.count] = r;
      scales_[g.first + g.count] = set->use[k].scale;
      g.count += 1;
    }
  }
  return !groups_.empty();
}

void LoraRunner::run(ThreadPool& pool, MatmulScratch& scratch, const Group& g, const LoraPair& p,
                     const int32_t* map, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  const int64_t n_in = p.a.n_in;
  int32_t n_g = 0;
  for (int32_t j = 0; j < g.count; ++j) {
    const int32_t row = map ? map[rows_[g.first + j]] : rows_[g.first + j];
    if (row < 0) continue;
    std::memcpy(xg_.data() + int64_t(n_g) * n_in, x + int64_t(row) * x_stride, size_t(n_in) * sizeof(float));
    gathered_[n_g] = row;
    row_s_[n_g] = g.adapter->scale(p, scales_[g.first + j]);
    n_g += 1;
  }
  if (n_g == 0) return;
  low_rank_matmul(pool, scratch, p.a, xg_.data(), n_g, t_.data());  // t [n_g][rank]
  finish(pool, scratch, p, n_g, y, y_stride);
}

// u = B·t, then y[gathered row] += s·u, the product rounded first (ggml_scale, then ggml_add).
void LoraRunner::finish(ThreadPool& pool, MatmulScratch& scratch, const LoraPair& p, int32_t n_g, float* y,
                        int64_t y_stride) {
  const int64_t n_out = p.b.n_out;
  low_rank_matmul(pool, scratch, p.b, t_.data(), n_g, u_.data());  // u [n_g][n_out]
  for (int32_t j = 0; j < n_g; ++j) {
    const float s = row_s_[j];
    const float* u = u_.data() + int64_t(j) * n_out;
    float* yr = y + int64_t(gathered_[j]) * y_stride;
    for (int64_t o = 0; o < n_out; ++o) {
      const float d = s * u[o];
      yr[o] += d;
    }
  }
}

void LoraRunner::apply(ThreadPool& pool, MatmulScratch& scratch, int il, LoraTarget t, const float* x,
                       int64_t x_stride, float* y, int64_t y_stride) {
  for (const Group& g : groups_)
    if (const LoraPair* p = g.adapter->layer(il, t)) run(pool, scratch, g, *p, nullptr, x, x_stride, y, y_stride);
}

void LoraRunner::apply_output(ThreadPool& pool, MatmulScratch& scratch, const int32_t* out_rows, int n_out,
                              const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  bool any = false;
  for (const Group& g : groups_) any = any || g.adapter->output();
  if (!any || n_out == 0) return;
  for (int r = 0; r < n_out; ++r) out_map_[out_rows[r]] = r;
  for (const Group& g : groups_)
    if (const LoraPair* p = g.adapter->output()) run(pool, scratch, g, *p, out_map_.data(), x, x_stride, y, y_stride);
  for (int r = 0; r < n_out; ++r) out_map_[out_rows[r]] = -1;
}

void LoraRunner::apply_embd(ThreadPool& pool, MatmulScratch& scratch, const BatchToken* tokens, float* x,
                            int64_t x_stride) {
  for (const Group& g : groups_) {
    const LoraPair* p = g.adapter->token_embd();
    if (!p) continue;
    const size_t a_row = ggml_row_bytes(p->a.type, p->a.n_in);
    for (int32_t j = 0; j < g.count; ++j) {  // t[j] = A's row of the token (llama.cpp's get_rows)
      const int32_t row = rows_[g.first + j];
      const int64_t token = tokens[row].token;
      dequantize_row(p->a.type, p->a.data + size_t(token) * a_row, t_.data() + int64_t(j) * p->rank, p->rank);
      gathered_[j] = row;
      row_s_[j] = g.adapter->scale(*p, scales_[g.first + j]);
    }
    finish(pool, scratch, *p, g.count, x, x_stride);
  }
}

}  // namespace ls
