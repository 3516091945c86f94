#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/fp16.h"
#include "model/attention_exp.h"
#include "quant/quant.h"

namespace ls {
namespace {

// Portable kernels (the pre-fp16-cache operation order): q·k in 8 lane partial sums reduced
// pairwise, V accumulated position by position.
void scores_portable(const float* q, int g, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* s,
                     int64_t s_stride) {
  for (int h = 0; h < g; ++h) {
    const float* qh = q + int64_t(h) * hd;
    for (int p = 0; p < n_pos; ++p) {
      const uint16_t* kr = k + p * stride;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int i = 0;
      for (; i + 8 <= hd; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += qh[i + j] * fp16_to_f32_branchless(kr[i + j]);
      float d = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; i < hd; ++i) d += qh[i] * fp16_to_f32_branchless(kr[i]);
      s[h * s_stride + p] = d * scale;
    }
  }
}

void exp_sum_portable(float* w, int g, int64_t w_stride, int n, const float* m, float* l) {
  for (int h = 0; h < g; ++h) {
    float* row = w + h * w_stride;
    float sum = 0.f;
    for (int p = 0; p < n; ++p) {
      const float e = std::exp(row[p] - m[h]);
      row[p] = e;
      sum += e;
    }
    l[h] = sum;
  }
}

float max_portable(const float* w, int n) {
  float m = w[0];
  for (int p = 1; p < n; ++p) m = std::max(m, w[p]);
  return m;
}

void normalize_portable(float* w, int n, float f) {
  for (int p = 0; p < n; ++p) w[p] = fp16_round(w[p] * f);
}

void weighted_sum_portable(const float* w, int g, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos,
                           int hd, float* out, int64_t o_stride) {
  for (int h = 0; h < g; ++h) {
    float* o = out + h * o_stride;
    const float* wh = w + h * w_stride;
    for (int p = 0; p < n_pos; ++p) {
      const uint16_t* vr = v + p * stride;
      const float a = wh[p];
      for (int j = 0; j < hd; ++j) o[j] += a * fp16_to_f32_branchless(vr[j]);
    }
  }
}

void store_portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = f32_to_fp16(src[j]);
}

const AttentionKernels kPortable = {scores_portable,       max_portable,   exp_sum_portable, normalize_portable,
                                    weighted_sum_portable, store_portable, "portable"};

// ---- One token's chunks (the arithmetic of attention.h; shared by both scheduling modes) ----

struct TokenView {  // where token i's chunks live
  int i, seq, first, n_pos, n_chunks;
};

TokenView token_view(const AttentionJob& job, int i) {
  const BatchToken& t = job.tokens[i];
  TokenView tv;
  tv.i = i;
  tv.first = job.window > 0 ? std::max(0, t.pos - job.window + 1) : 0;
  tv.n_pos = std::max(t.pos, t.attend_to) - tv.first + 1;
  tv.n_chunks = (tv.n_pos + kAttnChunkPositions - 1) / kAttnChunkPositions;
  tv.seq = t.seq;
  return tv;
}

// Element offset in job.k / job.v of position p of the token's sequence (kv head 0), and in *run
// how many positions from p on (at most max_run) are contiguous in memory: to the end of p's page,
// and on through the following pages while the table maps them to the next page ids (a pool hands
// a growing sequence ascending pages), so a chunk usually takes one kernel call, not one per page.
// Results do not depend on the split (attention.h), only the call overhead does.
int64_t kv_offset(const AttentionJob& job, const TokenView& tv, int p, int max_run, int* run) {
  if (!job.page_table) {
    *run = max_run;
    return int64_t(tv.seq) * job.seq_stride + int64_t(p) * job.kv_dim;
  }
  const int P = job.page_positions;
  const int32_t* table = job.page_table + int64_t(tv.seq) * job.pages_per_seq;
  const int first = p / P;
  const int32_t page = table[first];
  int n = P - p % P;
  for (int j = first + 1; n < max_run && j < job.pages_per_seq && table[j] == page + (j - first); ++j) n += P;
  *run = std::min(n, max_run);
  return (int64_t(page) * P + p % P) * job.kv_dim;
}

int chunk_len(const TokenView& tv, int c) { return std::min(kAttnChunkPositions, tv.n_pos - c * kAttnChunkPositions); }

// Phase 1 of chunk c for query heads [h0, h1) (one kv head): scores, m_c, e = exp(s − m_c), l_c.
void chunk_scores(const AttentionJob& job, const TokenView& tv, int h0, int h1, int c, const AttentionScratch::Row& row,
                  int64_t e_stride, int max_chunks) {
  const int hd = job.hd, n_c = chunk_len(tv, c), p0 = c * kAttnChunkPositions;
  const AttentionKernels& kern = *job.kern;
  const int64_t head_off = int64_t(h0 / job.group) * hd;
  // llama.cpp keeps K/V in fp16 and multiplies them in fp16 (q and the softmax weights are
  // rounded to fp16 on the way in); these small models are rounding-sensitive enough that
  // matching this moves agreement measurably (Gemma top-1 94.96% → 95.25%, KL 0.0072 → 0.0058).
  float q[kAttnKernelGroup * kMaxHeadDim];
  for (int hb = h0; hb < h1; hb += kAttnKernelGroup) {
    const int g = std::min(kAttnKernelGroup, h1 - hb);
    const float* q0 = job.q + int64_t(tv.i) * job.q_dim + int64_t(hb) * hd;
    for (int j = 0; j < g * hd; ++j) q[j] = fp16_round(q0[j]);
    // Each score depends on its own position only: page by page gives the same values.
    for (int p = 0, run; p < n_c; p += run) {
      const int64_t off = kv_offset(job, tv, tv.first + p0 + p, n_c - p, &run) + head_off;
      kern.scores(q, g, job.k + off, job.kv_dim, run, hd, job.scale, row.e + hb * e_stride + p0 + p, e_stride);
    }
  }
  for (int hb = h0; hb < h1; hb += kAttnKernelGroup) {
    const int g = std::min(kAttnKernelGroup, h1 - hb);
    float m[kAttnKernelGroup], l[kAttnKernelGroup];
    for (int h = 0; h < g; ++h) m[h] = kern.max(row.e + (hb + h) * e_stride + p0, n_c);
    kern.exp_sum(row.e + hb * e_stride + p0, g, e_stride, n_c, m, l);
    for (int h = 0; h < g; ++h) {
      row.m[(hb + h) * max_chunks + c] = m[h];
      row.l[(hb + h) * max_chunks + c] = l[h];
    }
  }
}

// Phase 2 of chunk c for query heads [h0, h1): weights of chunk c from every chunk's (m, l),
// then o_c (straight into the output when the token has one chunk).
void chunk_output(const AttentionJob& job, const TokenView& tv, int h0, int h1, int c,
                  const AttentionScratch::Row& row, int64_t e_stride, int max_chunks) {
  const int hd = job.hd, n_c = chunk_len(tv, c), p0 = c * kAttnChunkPositions;
  const AttentionKernels& kern = *job.kern;
  for (int h = h0; h < h1; ++h) {
    const float* m = row.m + h * max_chunks;
    const float* l = row.l + h * max_chunks;
    float mx = m[0];
    for (int cc = 1; cc < tv.n_chunks; ++cc) mx = std::max(mx, m[cc]);
    if (job.sinks) mx = std::max(mx, job.sinks[h]);  // ggml's soft_max with sinks: in the max and the sum
    float sum = 0.f;
    for (int cc = 0; cc < tv.n_chunks; ++cc) sum += l[cc] * std::exp(m[cc] - mx);
    if (job.sinks) sum += std::exp(job.sinks[h] - mx);
    kern.normalize(row.e + h * e_stride + p0, n_c, std::exp(m[c] - mx) * (1.0f / sum));
  }
  const int64_t head_off = int64_t(h0 / job.group) * hd;
  for (int hb = h0; hb < h1; hb += kAttnKernelGroup) {
    const int g = std::min(kAttnKernelGroup, h1 - hb);
    float* out;
    int64_t o_stride;
    if (tv.n_chunks == 1) {
      out = job.out + int64_t(tv.i) * job.q_dim + int64_t(hb) * hd;
      o_stride = hd;
    } else {
      out = row.o + (int64_t(hb) * max_chunks + c) * hd;
      o_stride = int64_t(max_chunks) * hd;
    }
    for (int h = 0; h < g; ++h) std::fill(out + h * o_stride, out + h * o_stride + hd, 0.f);
    // One fma chain per output element over the chunk in increasing p, continued page by page.
    for (int p = 0, run; p < n_c; p += run) {
      const int64_t off = kv_offset(job, tv, tv.first + p0 + p, n_c - p, &run) + head_off;
      kern.weighted_sum(row.e + hb * e_stride + p0 + p, g, e_stride, job.v + off, job.kv_dim, run, hd, out, o_stride);
    }
  }
}

// out_h = o_0 + o_1 + … in chunk order (tokens with several chunks only).
void merge_chunks(const AttentionJob& job, const TokenView& tv, int h0, int h1, const AttentionScratch::Row& row,
                  int max_chunks) {
  const int hd = job.hd;
  for (int h = h0; h < h1; ++h) {
    float* out = job.out + int64_t(tv.i) * job.q_dim + int64_t(h) * hd;
    const float* o = row.o + int64_t(h) * max_chunks * hd;
    std::memcpy(out, o, sizeof(float) * hd);
    for (int c = 1; c < tv.n_chunks; ++c)
      for (int j = 0; j < hd; ++j) out[j] += o[int64_t(c) * hd + j];
  }
}

// Query heads [h0, h1) of subgroup `sub` of kv head `kvh` when a kv head's group is cut in n_sub.
void sub_heads(const AttentionJob& job, int kvh, int sub, int n_sub, int& h0, int& h1) {
  h0 = kvh * job.group + sub * job.group / n_sub;
  h1 = kvh * job.group + (sub + 1) * job.group / n_sub;
}

// Subgroups per kv head so that about 4 tasks per thread exist (dynamic claiming then balances).
int pick_n_sub(int n_threads, int64_t base_tasks, int group) {
  const int64_t want = 4 * int64_t(n_threads);
  if (n_threads == 1 || base_tasks >= want) return 1;
  return int(std::min<int64_t>(group, (want + base_tasks - 1) / base_tasks));
}

// Split mode: tasks (token, kv heads, subgroup, chunk) in two passes and a merge. With chunks
// enough to occupy the threads, a task takes every kv head of its chunk: the chunk's K/V rows
// (kv heads interleaved in each) then stream through one core once, instead of each kv head's
// slice being fetched separately, possibly on another core.
struct SplitPlan {
  const AttentionJob* job;
  AttentionScratch* scratch;
  int n, n_sub, n_kv, kv_per_task;
  TokenView tv[AttentionScratch::kMaxSplitTokens];
  int64_t task_end[AttentionScratch::kMaxSplitTokens];  // prefix sums of tasks per token

  void locate(int64_t task, int& i, int& kvh, int& sub, int& c) const {
    i = 0;
    while (task >= task_end[i]) ++i;
    int64_t t = task - (i ? task_end[i - 1] : 0);
    c = int(t % tv[i].n_chunks);
    t /= tv[i].n_chunks;
    sub = int(t % n_sub);
    kvh = int(t / n_sub) * kv_per_task;
  }
};

void run_split(ThreadPool& pool, const AttentionJob& job, int n, AttentionScratch& scratch) {
  SplitPlan plan;
  plan.job = &job;
  plan.scratch = &scratch;
  plan.n = n;
  plan.n_kv = job.n_head / job.group;
  int64_t n_chunks = 0;
  for (int i = 0; i < n; ++i) {
    plan.tv[i] = token_view(job, i);
    n_chunks += plan.tv[i].n_chunks;
  }
  plan.kv_per_task = n_chunks >= 2 * pool.num_threads() ? plan.n_kv : 1;
  plan.n_sub = plan.kv_per_task > 1 ? 1 : pick_n_sub(pool.num_threads(), n_chunks * plan.n_kv, job.group);
  const int kv_tasks = plan.n_kv / plan.kv_per_task;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) plan.task_end[i] = total += int64_t(kv_tasks) * plan.n_sub * plan.tv[i].n_chunks;

  const SplitPlan& pl = plan;
  // Pass 1 scores every chunk, pass 2 forms its weighted V sum: the same task list both times.
  for (auto* pass : {&chunk_scores, &chunk_output}) {
    pool.parallel_for(total, 1, [&pl, pass](int64_t b, int64_t e) {
      const AttentionScratch& s = *pl.scratch;
      for (int64_t task = b; task < e; ++task) {
        int i, kv0, sub, c, h0, h1;
        pl.locate(task, i, kv0, sub, c);
        for (int kvh = kv0; kvh < kv0 + pl.kv_per_task; ++kvh) {
          sub_heads(*pl.job, kvh, sub, pl.n_sub, h0, h1);
          (*pass)(*pl.job, pl.tv[i], h0, h1, c, s.row(i), s.e_stride(), s.max_chunks());
        }
      }
    });
  }
  pool.parallel_for(int64_t(n) * job.n_head, 1, [&pl](int64_t b, int64_t e) {
    const AttentionScratch& s = *pl.scratch;
    for (int64_t task = b; task < e; ++task) {
      const int i = int(task / pl.job->n_head), h = int(task % pl.job->n_head);
      if (pl.tv[i].n_chunks > 1) merge_chunks(*pl.job, pl.tv[i], h, h + 1, s.row(i), s.max_chunks());
    }
  });
}

// Whole-token mode: tasks (token, kv head, subgroup), each run start to finish by one thread
// in a per-thread scratch row.
void run_whole(ThreadPool& pool, const AttentionJob& job, int n, AttentionScratch& scratch) {
  const int n_kv = job.n_head / job.group;
  const int n_sub = pick_n_sub(pool.num_threads(), int64_t(n) * n_kv, job.group);
  struct Ctx {
    const AttentionJob* job;
    AttentionScratch* scratch;
    int n_kv, n_sub;
  } ctx{&job, &scratch, n_kv, n_sub};
  const Ctx& cx = ctx;
  pool.parallel_for(int64_t(n) * n_kv * n_sub, 1, [&cx](int64_t b, int64_t e) {
    AttentionScratch& s = *cx.scratch;
    const int r = s.acquire_thread_row();
    const AttentionScratch::Row row = s.row(r);
    for (int64_t task = b; task < e; ++task) {
      const int i = int(task / (int64_t(cx.n_kv) * cx.n_sub));
      const int rest = int(task % (int64_t(cx.n_kv) * cx.n_sub));
      int h0, h1;
      sub_heads(*cx.job, rest / cx.n_sub, rest % cx.n_sub, cx.n_sub, h0, h1);
      const TokenView tv = token_view(*cx.job, i);
      for (int c = 0; c < tv.n_chunks; ++c) chunk_scores(*cx.job, tv, h0, h1, c, row, s.e_stride(), s.max_chunks());
      for (int c = 0; c < tv.n_chunks; ++c) chunk_output(*cx.job, tv, h0, h1, c, row, s.e_stride(), s.max_chunks());
      if (tv.n_chunks > 1) merge_chunks(*cx.job, tv, h0, h1, row, s.max_chunks());
    }
    s.release_thread_row(r);
  });
}

}  // namespace

namespace expf_glibc {
const int64_t* table() {
  static const struct Table {
    int64_t t[32];
    Table() {
      for (int i = 0; i < 32; ++i) {
        // exp2l is accurate to far below a double ulp, so rounding it gives the correctly
        // rounded 2^(i/32) (the exhaustive exp test in attention_check.cpp would show otherwise).
        const double v = double(std::exp2l((long double)i / 32));
        int64_t bits;
        std::memcpy(&bits, &v, 8);
        t[i] = bits - (int64_t(i) << 47);
      }
    }
  } tab;
  return tab.t;
}
}  // namespace expf_glibc

const AttentionKernels& attention_kernels_portable() { return kPortable; }

const AttentionKernels& attention_kernels() {
  const Isa isa = active_isa();
  if (isa == Isa::Scalar) return kPortable;
  if (isa == Isa::Avx512Vnni && attention_kernels_avx512()) return *attention_kernels_avx512();
  const AttentionKernels* avx2 = attention_kernels_avx2();
  return avx2 ? *avx2 : kPortable;
}

AttentionScratch::AttentionScratch(int n_threads, int n_head, int hd, int ctx_size)
    : n_threads_(std::max(n_threads, 1)), n_head_(n_head), hd_(hd), ctx_size_(ctx_size) {
  max_chunks_ = (ctx_size + kAttnChunkPositions - 1) / kAttnChunkPositions;
  const int64_t per_head = int64_t(ctx_size) + 2 * max_chunks_ + int64_t(max_chunks_) * hd;
  row_floats_ = int64_t(n_head) * per_head;
  buf_.assign(size_t(row_floats_) * size_t(kMaxSplitTokens + n_threads_), 0.f);
  busy_.reset(new std::atomic<bool>[n_threads_]);
  for (int t = 0; t < n_threads_; ++t) busy_[t].store(false, std::memory_order_relaxed);
}

AttentionScratch::Row AttentionScratch::row(int r) const {
  float* base = const_cast<float*>(buf_.data()) + int64_t(r) * row_floats_;
  Row out;
  out.e = base;
  out.m = out.e + int64_t(n_head_) * ctx_size_;
  out.l = out.m + int64_t(n_head_) * max_chunks_;
  out.o = out.l + int64_t(n_head_) * max_chunks_;
  return out;
}

int AttentionScratch::acquire_thread_row() {
  // At most n_threads callers run at once (the pool's threads), so one of the flags is free.
  for (;;) {
    for (int t = 0; t < n_threads_; ++t)
      if (!busy_[t].load(std::memory_order_relaxed) && !busy_[t].exchange(true, std::memory_order_acquire))
        return kMaxSplitTokens + t;
  }
}

void AttentionScratch::release_thread_row(int r) { busy_[r - kMaxSplitTokens].store(false, std::memory_order_release); }

void run_attention(ThreadPool& pool, const AttentionJob& job, int n, AttentionScratch& scratch) {
  if (n <= 0) return;
  if (!scratch.fits(job, pool.num_threads()))
    throw std::invalid_argument("run_attention: scratch sized for a smaller model shape or thread pool");
  // Splitting a token's chunks over threads costs two extra pool calls; worth it only when a
  // few tokens have several chunks (long-context decode).
  bool any_multi = false;
  for (int i = 0; i < n && n <= AttentionScratch::kMaxSplitTokens && !any_multi; ++i)
    any_multi = token_view(job, i).n_chunks > 1;
  if (any_multi && pool.num_threads() > 1) run_split(pool, job, n, scratch);
  else run_whole(pool, job, n, scratch);
}

}  // namespace ls
