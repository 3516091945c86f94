#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "model/ops.h"

namespace ls {
ModelRuntime::ModelRuntime(const GgufFile& file, int ctx_size, int max_batch, int threads, int n_seq,
                           const std::string& repack_cache_dir, int64_t kv_bytes, int64_t extra_kv_bytes,
                           bool window_group)
    : ctx_size_(ctx_size), max_batch_(max_batch), n_seq_(n_seq) {
  load_config(file);
  if (threads < 0 || threads > 256) file.fail("threads must be between 0 (all cores) and 256");
  if (n_seq_ < 1 || n_seq_ > 4096) file.fail("n_seq must be between 1 and 4096");
  if (ctx_size_ > cfg_.n_ctx_max) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%g", double(cfg_.rope_scaling_factor));
    const std::string why = cfg_.n_ctx_max > cfg_.n_ctx_train
        ? ", which its " + cfg_.rope_scaling_type + " rope scaling (factor " + factor + ") extends to " +
              std::to_string(cfg_.n_ctx_max)
        : " and the file has no rope scaling that extends it (rope.scaling.type linear or yarn with a factor > 1)";
    file.fail("ctx_size " + std::to_string(ctx_size_) + " exceeds the model's training context " +
              std::to_string(cfg_.n_ctx_train) + why);
  }
  if (ctx_size_ <= 0) ctx_size_ = std::min<int32_t>(cfg_.n_ctx_train > 0 ? cfg_.n_ctx_train : 4096, 8192);
  if (max_batch_ <= 0) max_batch_ = 512;
  max_batch_ = int32_t(std::min<int64_t>(max_batch_, int64_t(ctx_size_) * n_seq_));
  load_weights(file);
  pool_ = std::make_unique<ThreadPool>(threads);
  repack_weights(repack_cache_dir, file.path());

  const int64_t B = max_batch_, E = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t q_dim = int64_t(cfg_.n_head) * hd, kv_dim = int64_t(cfg_.n_head_kv) * hd;
  x_ = LazyArray<float>(B * E);
  h_ = LazyArray<float>(B * E);
  q_ = LazyArray<float>(B * q_dim);
  k_ = LazyArray<float>(B * kv_dim);
  v_ = LazyArray<float>(B * kv_dim);
  attn_ = LazyArray<float>(B * q_dim);
  // MoE: every layer is MoE, and the FFN rows are the batch's (token, expert) pairs.
  const int64_t ffn_rows = cfg_.n_expert > 0 ? B * cfg_.n_expert_used : B;
  const int64_t ffn_width = cfg_.n_expert > 0 ? cfg_.n_ff_exp : cfg_.n_ff;
  ffn_a_ = LazyArray<float>(ffn_rows * ffn_width);
  ffn_b_ = LazyArray<float>(ffn_rows * ffn_width);
  if (cfg_.n_expert > 0) {
    const int64_t pairs = B * cfg_.n_expert_used;
    moe_logits_ = LazyArray<float>(B * cfg_.n_expert);
    moe_x_ = LazyArray<float>(pairs * E);
    moe_y_ = LazyArray<float>(pairs * E);
    moe_outs_.resize(size_t(2) * size_t(std::min<int64_t>(cfg_.n_expert, pairs)));
    moe_ids_.assign(pairs, 0);
    moe_weights_.assign(pairs, 0.0f);
    moe_row_.assign(pairs, 0);
    moe_pairs_.assign(pairs, 0);
    moe_first_.assign(cfg_.n_expert + 1, 0);
    moe_next_.assign(cfg_.n_expert, 0);
  }
  tmp_ = LazyArray<float>(B * std::max<int64_t>(E, q_dim));
  init_kv(kv_bytes, extra_kv_bytes, window_group, file);
  attn_kern_ = &attention_kernels();
  attn_scratch_ = AttentionScratch(pool_->num_threads(), cfg_.n_head, cfg_.head_dim, ctx_size_);
  fwd_tokens_.assign(B, BatchToken{0, 0, 0});
  fwd_rows_.assign(B, 0);
  fwd_lora_.assign(B, nullptr);
  lora_ = LoraRunner(int32_t(B), std::max({q_dim, int64_t(cfg_.n_head_kv) * cfg_.head_dim, E, int64_t(cfg_.n_ff)}));

  rope_ = RopeTable(cfg_.rope_base, cfg_.n_rot, ctx_size_, cfg_.rope_scaling, rope_freqs_);
  if (cfg_.sliding_window > 0) rope_local_ = RopeTable(cfg_.rope_base_local, cfg_.n_rot, ctx_size_, cfg_.rope_scaling_local);

  // Scratch for the quantized activations of the widest matmul at full batch.
  size_t scratch = 0;
  auto need = [&](const Weight& w, int64_t rows) {
    scratch = std::max(scratch, matmul_scratch_bytes(w.type, w.n_in, rows));
  };
  for (const LayerWeights& L : layers_) {
    for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) need(*w, B);
    if (cfg_.n_expert > 0) {  // the experts of a layer run over all (token, expert) pairs at once
      need(L.ffn_gate_inp, B);
      for (const ExpertWeights* x : {&L.gate_exps, &L.up_exps, &L.down_exps})
        need(x->expert(0), B * cfg_.n_expert_used);
    }
  }
  need(output_, B);
  mm_scratch_.reserve(scratch);
}

ModelRuntime::~ModelRuntime() = default;

// Pages: by default every sequence can hold a whole context at once (the reserve of a
// contiguous [n_seq][ctx_size] cache); page tables start as that identity partition. With a
// window group (kv_cache.h), the sliding layers' pool holds max_window_pages() for each running
// sequence plus a window's pages for each of the last n_seq ended ones (what a prefix hit on
// them needs); kv_bytes pays for that first and the full group gets the rest; extra_kv_bytes
// (cached prefixes) is split between the groups in the proportion of their bytes.
void ModelRuntime::init_kv(int64_t kv_bytes, int64_t extra_kv_bytes, bool window_group, const GgufFile& file) {
  const int64_t kv_dim = int64_t(cfg_.n_head_kv) * cfg_.head_dim;
  pages_per_seq_ = (ctx_size_ + kKvPagePositions - 1) / kKvPagePositions;
  std::vector<bool> local(size_t(cfg_.n_layer));
  int n_local = 0;
  for (int il = 0; il < cfg_.n_layer; ++il) n_local += (local[size_t(il)] = cfg_.is_local(il));
  const int64_t layer_page_bytes = 2 * kv_dim * kKvPagePositions * int64_t(sizeof(uint16_t));
  const bool grouped = window_group && n_local > 0 && n_local < cfg_.n_layer && cfg_.sliding_window < ctx_size_;
  const int64_t full_page_bytes = layer_page_bytes * (grouped ? cfg_.n_layer - n_local : cfg_.n_layer);
  const int64_t window_page_bytes = layer_page_bytes * n_local;
  int64_t n_window = 0, n_full;
  if (grouped) {
    max_window_pages_ = std::min<int32_t>(
        pages_per_seq_, (cfg_.sliding_window - 1 + max_batch_ + kKvPagePositions - 1) / kKvPagePositions + 1);
    const int32_t one_window = (cfg_.sliding_window - 1 + kKvPagePositions - 1) / kKvPagePositions + 1;
    n_window = int64_t(n_seq_) * (max_window_pages_ + one_window);
  }
  n_full = kv_bytes > 0 ? std::max<int64_t>(kv_bytes - n_window * window_page_bytes, 0) / full_page_bytes
                        : int64_t(n_seq_) * pages_per_seq_;
  if (extra_kv_bytes > 0) {
    const int64_t main_bytes = n_full * full_page_bytes + n_window * window_page_bytes;
    const double window_fraction = main_bytes > 0 ? double(n_window * window_page_bytes) / double(main_bytes) : 0.0;
    const int64_t window_share = int64_t(double(extra_kv_bytes) * window_fraction);
    n_window += window_share / std::max<int64_t>(window_page_bytes, 1);
    n_full += (extra_kv_bytes - window_share) / full_page_bytes;
  }
  if (n_full > INT32_MAX || n_window > INT32_MAX) file.fail("K/V cache too large");
  kv_ = KvCache(local, int32_t(n_full), grouped ? int32_t(n_window) : 0, kv_dim);
  for (int g = 0; g < kv_.n_groups(); ++g) {
    page_table_[g].assign(size_t(n_seq_) * pages_per_seq_, -1);
    for (size_t i = 0; i < page_table_[g].size() && int64_t(i) < kv_.n_page(g); ++i) page_table_[g][i] = int32_t(i);
  }
}

// Matrix × matrix speed (prefill, batched decode) comes from the row-interleaved layout, and
// decode reads it as fast; one copy is kept: the original's mapped pages are dropped from this
// process (they stay in the page cache and fault back in if ever touched), and the repacked
// copy is a shared cache file when a cache dir is given (model/repack_store.h).
void ModelRuntime::repack_weights(const std::string& cache_dir, const std::string& model_path) {
  std::vector<Weight*> ws;
  for (LayerWeights& L : layers_) {
    for (Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) ws.push_back(w);
    // An expert tensor repacks as one matrix when each expert is whole interleave groups.
    for (ExpertWeights* x : {&L.gate_exps, &L.up_exps, &L.down_exps})
      if (!x->empty() && x->rows % kInterleaveRows == 0) ws.push_back(&x->all);
  }
  const bool tied = output_.data == tok_embd_.data;
  ws.push_back(&tok_embd_);
  if (!tied) ws.push_back(&output_);
  std::vector<Weight*> todo;
  std::vector<size_t> offsets;
  size_t total = 0;
  // The layout part of the cache key: format version and every repacked tensor's type and shape.
  std::string layout_key = "layout=il" + std::to_string(kInterleaveRows) + "v1";
  for (Weight* w : ws) {
    if (!interleave_preferred(w->type, w->n_in, w->n_out)) continue;
    todo.push_back(w);
    offsets.push_back(total);
    total += (interleaved_bytes(w->type, w->n_in, w->n_out) + 63) & ~size_t(63);
    layout_key += ";" + std::to_string(int(w->type)) + ":" + std::to_string(w->n_in) + "x" + std::to_string(w->n_out);
  }
  auto fill = [&](uint8_t* dst) {
    for (size_t k = 0; k < todo.size(); ++k) {
      const Weight& src = *todo[k];
      uint8_t* out = dst + offsets[k];
      // Groups of 16 rows are independent: repack slices of whole groups in parallel.
      const size_t src_group = ggml_row_bytes(src.type, src.n_in) * kInterleaveRows;
      const size_t dst_group = interleaved_bytes(src.type, src.n_in, kInterleaveRows);
      pool_->parallel_for(src.n_out / kInterleaveRows, 1, [&](int64_t g0, int64_t g1) {
        interleave_weights(src.type, src.data + size_t(g0) * src_group, src.n_in, (g1 - g0) * kInterleaveRows,
                           out + size_t(g0) * dst_group);
      });
    }
  };
  repack_ = RepackStore::open(cache_dir, model_path, layout_key, total, fill);
  if (!cache_dir.empty() && repack_.source() == RepackStore::Source::Private)  // works, but a copy per lane
    std::fprintf(stderr, "laneserve: repack cache not used (%s)\n", repack_.status().c_str());
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t k = 0; k < todo.size(); ++k) {
    Weight* w = todo[k];
    const size_t bytes = ggml_row_bytes(w->type, w->n_in) * size_t(w->n_out);
    const uintptr_t b = (reinterpret_cast<uintptr_t>(w->data) + page - 1) & ~(page - 1);
    const uintptr_t e = (reinterpret_cast<uintptr_t>(w->data) + bytes) & ~(page - 1);
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
    w->data = repack_.data() + offsets[k];
    w->layout = WeightLayout::Interleaved16;
  }
  if (tied) output_ = tok_embd_;
}

void ModelRuntime::project(const Weight& w, const float* x, int n_rows, float* y, const SideTasks* side) {
  matmul(*pool_, mm_scratch_, w.type, w.data, w.n_in, w.n_out, x, n_rows, y, w.n_out, w.layout, side);
}

// Two or three projections of the same input: one activation quantization and one dispatch
// when the weight types agree (decode runs ~90 fewer thread-pool calls per SmolLM2 token).
void ModelRuntime::project3(const Weight& a, float* ya, const Weight& b, float* yb, const Weight* c, float* yc,
                            const float* x, int n_rows, const SideTasks* side) {
  if (a.type == b.type && a.n_in == b.n_in && a.layout == b.layout &&
      (!c || (c->type == a.type && c->n_in == a.n_in && c->layout == a.layout))) {
    const MatmulOut outs[3] = {{a.data, a.n_out, ya, a.n_out}, {b.data, b.n_out, yb, b.n_out},
                               {c ? c->data : nullptr, c ? c->n_out : 0, yc, c ? c->n_out : 0}};
    matmul_multi(*pool_, mm_scratch_, a.type, a.n_in, x, n_rows, outs, c ? 3 : 2, a.layout, side);
    return;
  }
  project(a, x, n_rows, ya);
  project(b, x, n_rows, yb, c ? nullptr : side);
  if (c) project(*c, x, n_rows, yc, side);
}

// Causal (and, on local layers, sliding-window) attention for the n batch tokens, whose K/V
// are already in the cache (model/attention.h: chunks of positions and query heads over threads).
void ModelRuntime::attention(int il, const BatchToken* tokens, int n) {
  const ModelConfig& c = cfg_;
  AttentionJob job;
  job.q = q_.data();
  job.out = attn_.data();
  job.tokens = tokens;
  job.k = kv_.k(il);
  job.v = kv_.v(il);
  job.page_table = page_table_[kv_.group(il)].data();
  job.pages_per_seq = pages_per_seq_;
  job.page_positions = kKvPagePositions;
  job.q_dim = int64_t(c.n_head) * c.head_dim;
  job.kv_dim = int64_t(c.n_head_kv) * c.head_dim;
  job.hd = c.head_dim;
  job.n_head = c.n_head;
  job.group = c.n_head / c.n_head_kv;
  job.window = c.is_local(il) ? c.sliding_window : 0;
  job.ctx_size = ctx_size_;
  job.scale = c.arch == Arch::Gemma3 ? 1.0f : c.attn_scale;  // gemma pre-scales q
  job.sinks = layers_[il].attn_sinks.empty() ? nullptr : layers_[il].attn_sinks.data();
  job.kern = attn_kern_;
  run_attention(*pool_, job, n, attn_scratch_);
}

void ModelRuntime::forward(const int32_t* tokens, int n, int pos0, float* logits, bool all_logits,
                           const LoraSet* lora) {
  if (n < 0 || n > max_batch_) throw std::invalid_argument("forward: batch of " + std::to_string(n) + " tokens");
  for (int i = 0; i < n; ++i) fwd_tokens_[i] = BatchToken{tokens[i], pos0 + i, 0};
  const int first = all_logits ? 0 : n - 1;
  for (int i = first; i < n; ++i) fwd_rows_[i - first] = i;
  std::fill(fwd_lora_.begin(), fwd_lora_.begin() + n, lora);
  forward_batch(fwd_tokens_.data(), n, fwd_rows_.data(), logits && n > 0 ? n - first : 0, logits, fwd_lora_.data());
}

void ModelRuntime::copy_kv(int src_seq, int dst_seq, int n_pos) {
  if (src_seq < 0 || src_seq >= n_seq_ || dst_seq < 0 || dst_seq >= n_seq_ || n_pos < 0 || n_pos > ctx_size_)
    throw std::invalid_argument("copy_kv: sequence or position out of range");
  if (src_seq == dst_seq) return;
  for (int j = 0; j * kKvPagePositions < n_pos; ++j) {
    for (int g = 0; g < kv_.n_groups(); ++g) {
      const int32_t src = page_table(src_seq, g)[j], dst = page_table(dst_seq, g)[j];
      if (src < 0 || dst < 0) throw std::invalid_argument("copy_kv: a position has no page");
      kv_.copy_page(g, src, dst, std::min(kKvPagePositions, n_pos - j * kKvPagePositions));
    }
  }
}

void ModelRuntime::copy_kv_page(int32_t src, int32_t dst, int n_pos, int group) {
  if (group < 0 || group >= kv_.n_groups() || src < 0 || src >= kv_.n_page(group) || dst < 0 ||
      dst >= kv_.n_page(group) || n_pos < 0 || n_pos > kKvPagePositions)
    throw std::invalid_argument("copy_kv_page: page or positions out of range");
  kv_.copy_page(group, src, dst, n_pos);
}

// Rejects input that would read or write outside the buffers (cheap next to one layer).
void ModelRuntime::check_batch(const BatchToken* tokens, int n, const int32_t* out_rows, int n_out) const {
  if (n < 0 || n > max_batch_) throw std::invalid_argument("forward_batch: batch of " + std::to_string(n) + " tokens");
  for (int i = 0; i < n; ++i) {
    const BatchToken& t = tokens[i];
    if (t.token < 0 || t.token >= cfg_.n_vocab || t.pos < 0 || t.pos >= ctx_size_ || t.seq < 0 || t.seq >= n_seq_ ||
        t.attend_to < 0 || t.attend_to >= ctx_size_)
      throw std::invalid_argument("forward_batch: token " + std::to_string(i) + " (id " + std::to_string(t.token) +
                                  ", pos " + std::to_string(t.pos) + ", seq " + std::to_string(t.seq) + ") out of range");
    for (int g = 0; g < kv_.n_groups(); ++g) {
      const int32_t* table = page_table_[g].data() + int64_t(t.seq) * pages_per_seq_;
      for (int32_t p : {t.pos, std::max(t.pos, t.attend_to)})
        if (table[p / kKvPagePositions] < 0 || table[p / kKvPagePositions] >= kv_.n_page(g))
          throw std::invalid_argument("forward_batch: position " + std::to_string(p) + " of seq " +
                                      std::to_string(t.seq) + " has no K/V page");
    }
  }
  if (n_out < 0 || n_out > n) throw std::invalid_argument("forward_batch: n_out out of range");
  for (int i = 0; i < n_out; ++i)
    if (out_rows[i] < 0 || out_rows[i] >= n || (i > 0 && out_rows[i] <= out_rows[i - 1]))
      throw std::invalid_argument("forward_batch: out_rows must be strictly increasing batch rows");
}

void ModelRuntime::forward_batch(const BatchToken* tokens, int n, const int32_t* out_rows, int n_out, float* logits,
                                 const LoraSet* const* row_lora, const float* const* row_embd) {
  if (logits == nullptr) n_out = 0;
  check_batch(tokens, n, out_rows, n_out);
  last_batch_ = n;
  if (n == 0) return;
  // LoRA (model/lora.h): rows grouped by adapter once; each adapted matmul then adds its
  // low-rank terms right after the base product (before biases and norms, as llama.cpp does).
  const bool lora = lora_.begin(row_lora, n);
  // The base product of matrices reading x, then their adapters' terms: as side tasks of the base
  // matmul's dispatch on decode-sized steps, else after it (bit-identical either way).
  auto adapted = [&](int il, const LoraTarget* targets, int n_targets, const float* x, int64_t x_stride,
                     float* const* ys, const int64_t* y_strides, auto&& base) {
    if (!lora) return base(nullptr);
    if (lora_.uses_side_tasks()) {
      const SideTasks side = lora_.side_tasks(il, targets, n_targets, x, x_stride);
      base(&side);
      lora_.add_side(ys, y_strides);
    } else {
      base(nullptr);
      lora_.apply_group(*pool_, il, targets, n_targets, x, x_stride, ys, y_strides);
    }
  };
  const ModelConfig& c = cfg_;
  const int64_t E = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = int64_t(c.n_head) * hd, kv_dim = int64_t(c.n_head_kv) * hd;
  const bool gemma = c.arch == Arch::Gemma3;

  // 1. Embeddings (and RoPE rows up to the furthest position).
  int max_pos = 0;
  for (int i = 0; i < n; ++i) max_pos = std::max(max_pos, tokens[i].pos);
  rope_.ensure(max_pos + 1);
  if (c.sliding_window > 0) rope_local_.ensure(max_pos + 1);
  for (int i = 0; i < n; ++i)
    dequantize_weight_row(tok_embd_.type, tok_embd_.layout, tok_embd_.data, E, tokens[i].token, x_.data() + i * E);
  if (lora) lora_.apply_embd(*pool_, tokens, x_.data(), E);  // before the scale (llama.cpp)
  if (c.embd_scale != 1.f)
    for (int i = 0; i < n; ++i) scale_f32(x_.data() + i * E, c.embd_scale, E);
  if (row_embd)
    for (int i = 0; i < n; ++i)
      if (row_embd[i]) std::memcpy(x_.data() + i * E, row_embd[i], sizeof(float) * size_t(E));

  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = layers_[il];
    const bool local = c.is_local(il);
    const RopeTable& rope = local ? rope_local_ : rope_;

    // 2. Attention block: norm → q/k/v → (bias, q/k norm) → RoPE → fp16 cache → attention → out.
    const float* attn_in = L.attn_norm.empty() ? x_.data() : h_.data();  // olmo2: no pre-norm
    if (!L.attn_norm.empty())
      pool_->parallel_for(n, 8, [&](int64_t i0, int64_t i1) {  // rows are independent: any split
        for (int64_t i = i0; i < i1; ++i) rmsnorm(x_.data() + i * E, L.attn_norm.data(), h_.data() + i * E, E, c.rms_eps);
      });
    {
      constexpr LoraTarget qkv[] = {LoraTarget::Q, LoraTarget::K, LoraTarget::V};
      float* const ys[] = {q_.data(), k_.data(), v_.data()};
      const int64_t strides[] = {q_dim, kv_dim, kv_dim};
      adapted(il, qkv, 3, attn_in, E, ys, strides, [&](const SideTasks* side) {
        project3(L.wq, q_.data(), L.wk, k_.data(), &L.wv, v_.data(), attn_in, n, side);
      });
    }
    for (int i = 0; i < n; ++i) {
      float* q = q_.data() + i * q_dim;
      float* k = k_.data() + i * kv_dim;
      float* v = v_.data() + i * kv_dim;
      if (!L.bq.empty()) add_f32(q, L.bq.data(), q_dim);
      if (!L.bk.empty()) add_f32(k, L.bk.data(), kv_dim);
      if (!L.bv.empty()) add_f32(v, L.bv.data(), kv_dim);
      if (c.arch == Arch::Olmo2) {
        rmsnorm(q, L.q_norm.data(), q, q_dim, c.rms_eps);
        rmsnorm(k, L.k_norm.data(), k, kv_dim, c.rms_eps);
      } else if (!L.q_norm.empty()) {
        for (int h = 0; h < c.n_head; ++h) rmsnorm(q + h * hd, L.q_norm.data(), q + h * hd, hd, c.rms_eps);
        for (int h = 0; h < c.n_head_kv; ++h) rmsnorm(k + h * hd, L.k_norm.data(), k + h * hd, hd, c.rms_eps);
      }
      const int pos = tokens[i].pos;
      const float* cs = rope.cos_row(pos);
      const float* sn = rope.sin_row(pos);
      if (c.uses_rope(il)) {
        for (int h = 0; h < c.n_head; ++h) rope_apply(q + h * hd, cs, sn, c.n_rot, c.rope == RopeStyle::Neox);
        for (int h = 0; h < c.n_head_kv; ++h) rope_apply(k + h * hd, cs, sn, c.n_rot, c.rope == RopeStyle::Neox);
      }
      if (gemma) scale_f32(q, c.attn_scale, q_dim);
      const int32_t page = page_table_[kv_.group(il)][int64_t(tokens[i].seq) * pages_per_seq_ + pos / kKvPagePositions];
      attn_kern_->store(k, kv_.k_row(il, page, pos % kKvPagePositions), kv_dim);
      attn_kern_->store(v, kv_.v_row(il, page, pos % kKvPagePositions), kv_dim);
    }
    attention(il, tokens, n);
    {
      constexpr LoraTarget o[] = {LoraTarget::O};
      float* const ys[] = {tmp_.data()};
      const int64_t strides[] = {E};
      adapted(il, o, 1, attn_.data(), q_dim, ys, strides,
              [&](const SideTasks* side) { project(L.wo, attn_.data(), n, tmp_.data(), side); });
    }
    for (int i = 0; i < n; ++i) {
      float* o = tmp_.data() + i * E;
      if (!L.bo.empty()) add_f32(o, L.bo.data(), E);
      if (!L.post_attn_norm.empty()) rmsnorm(o, L.post_attn_norm.data(), o, E, c.rms_eps);
      if (c.residual_scale != 1.f) scale_f32(o, c.residual_scale, E);
      add_f32(x_.data() + i * E, o, E);
    }

    // 3. Feed-forward block: norm → gate/up → act ⊙ → down (→ post norm) → residual.
    const float* ffn_in = L.ffn_norm.empty() ? x_.data() : h_.data();
    if (!L.ffn_norm.empty())
      pool_->parallel_for(n, 8, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) rmsnorm(x_.data() + i * E, L.ffn_norm.data(), h_.data() + i * E, E, c.rms_eps);
      });
    if (!L.gate_exps.empty()) {  // MoE (model/moe.cpp); LoRA adapters cannot target experts
      moe_ffn(L, ffn_in, n, tmp_.data());
    } else {
      {
        constexpr LoraTarget gate_up[] = {LoraTarget::Gate, LoraTarget::Up};
        float* const ys[] = {ffn_a_.data(), ffn_b_.data()};
        const int64_t strides[] = {c.n_ff, c.n_ff};
        adapted(il, gate_up, 2, ffn_in, E, ys, strides, [&](const SideTasks* side) {
          project3(L.w_gate, ffn_a_.data(), L.w_up, ffn_b_.data(), nullptr, nullptr, ffn_in, n, side);
        });
      }
      if (!L.b_gate.empty() || !L.b_up.empty()) {  // after the adapters' terms, as llama.cpp adds them
        for (int i = 0; i < n; ++i) {
          if (!L.b_gate.empty()) add_f32(ffn_a_.data() + int64_t(i) * c.n_ff, L.b_gate.data(), c.n_ff);
          if (!L.b_up.empty()) add_f32(ffn_b_.data() + int64_t(i) * c.n_ff, L.b_up.data(), c.n_ff);
        }
      }
      // Elementwise (tanh/exp per element: a third of Gemma's prefill on one thread), so split over
      // the pool: each element's result is the same on any thread.
      pool_->parallel_for(int64_t(n) * c.n_ff, 1024, [&](int64_t b, int64_t e) {
        if (gemma) gelu_tanh_mul(ffn_a_.data() + b, ffn_b_.data() + b, e - b);
        else silu_mul(ffn_a_.data() + b, ffn_b_.data() + b, e - b);
      });
      constexpr LoraTarget down[] = {LoraTarget::Down};
      float* const ys[] = {tmp_.data()};
      const int64_t strides[] = {E};
      adapted(il, down, 1, ffn_a_.data(), c.n_ff, ys, strides,
              [&](const SideTasks* side) { project(L.w_down, ffn_a_.data(), n, tmp_.data(), side); });
    }
    for (int i = 0; i < n; ++i) {
      float* o = tmp_.data() + i * E;
      if (!L.b_down.empty()) add_f32(o, L.b_down.data(), E);
      if (!L.post_ffw_norm.empty()) rmsnorm(o, L.post_ffw_norm.data(), o, E, c.rms_eps);
      if (c.residual_scale != 1.f) scale_f32(o, c.residual_scale, E);
      add_f32(x_.data() + i * E, o, E);
    }
  }

  // 4. Output head on the rows whose logits are wanted (prompt rows cost no LM head).
  if (n_out == 0) return;
  for (int r = 0; r < n_out; ++r)
    rmsnorm(x_.data() + int64_t(out_rows[r]) * E, output_norm_.data(), h_.data() + r * E, E, c.rms_eps);
  project(output_, h_.data(), n_out, logits);
  if (lora) lora_.apply_output(*pool_, out_rows, n_out, h_.data(), E, logits, c.n_vocab);
  if (!output_bias_.empty())
    for (int r = 0; r < n_out; ++r) add_f32(logits + int64_t(r) * c.n_vocab, output_bias_.data(), c.n_vocab);
  if (c.logit_scale != 1.f)
    for (int r = 0; r < n_out; ++r) scale_f32(logits + int64_t(r) * c.n_vocab, 1.0f / c.logit_scale, c.n_vocab);
}

void ModelRuntime::final_hidden(int first_row, int n_rows, float* out) const {
  if (first_row < 0 || n_rows < 0 || first_row + n_rows > last_batch_)
    throw std::invalid_argument("final_hidden: rows outside the last batch");
  const int64_t E = cfg_.n_embd;
  for (int r = 0; r < n_rows; ++r)
    rmsnorm(x_.data() + int64_t(first_row + r) * E, output_norm_.data(), out + r * E, E, cfg_.rms_eps);
}

}  // namespace ls
