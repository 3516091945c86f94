// Standalone checks of the attention kernels and run_attention (model/attention.h), built by
// test_attention.py with g++ against the csrc sources; needs no model file.
//
//   attention_check kernels [EXP_STRIDE]        exp vs std::exp; every kernel family vs float64
//   attention_check identity                    bit-identity across threads, batch splits, modes, ISA
//   attention_check paged                       page tables (random layouts, 16–128 positions) = contiguous
//   attention_check bench LAYOUT DEPTH THREADS [PAGE]  µs per layer call at one decode position (30
//                                               layers); PAGE > 0: through shuffled pages of PAGE positions
// Prints one line per check ("ok NAME" / "FAIL NAME: why"); exit status 1 if any failed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <time.h>

#include "common/fp16.h"
#include "common/thread_pool.h"
#include "model/attention.h"

#include "check_report.h"

using namespace ls;

namespace {

struct Layout {
  const char* name;
  int n_head, n_kv, hd, window;
};

// SmolLM2 (GQA 3:1), Gemma 3 local (MQA, window 512) and global, a group of 7 (cut into
// kernel groups of ≤ 4), MHA with a head size that is not a multiple of 8.
const Layout kLayouts[] = {
    {"smollm2", 9, 3, 64, 0},      {"gemma_local", 4, 1, 256, 512}, {"gemma_global", 4, 1, 256, 0},
    {"group7", 14, 2, 64, 0},      {"mha_hd36", 3, 3, 36, 0},
};

const Layout& layout(const std::string& name) {
  for (const Layout& l : kLayouts)
    if (name == l.name) return l;
  std::fprintf(stderr, "unknown layout %s\n", name.c_str());
  std::exit(2);
}

// One layer's cache and queries for n_seq sequences of ctx positions, random but reproducible.
struct Setup {
  Layout L;
  int ctx, n_seq;
  int64_t q_dim, kv_dim;
  std::vector<uint16_t> k, v;
  std::vector<float> q;  // [max tokens][q_dim], row i for the i-th token of a batch
  float scale;

  Setup(const Layout& l, int ctx_, int n_seq_, int max_tokens, uint32_t seed) : L(l), ctx(ctx_), n_seq(n_seq_) {
    q_dim = int64_t(L.n_head) * L.hd;
    kv_dim = int64_t(L.n_kv) * L.hd;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    k.resize(size_t(n_seq) * ctx * kv_dim);
    v.resize(k.size());
    // Some positions get a large key so that softmax is peaked somewhere (chunk maxima differ).
    for (size_t i = 0; i < k.size(); ++i) k[i] = f32_to_fp16(nd(rng) * ((i / kv_dim) % 97 == 5 ? 3.f : 1.f));
    for (auto& x : v) x = f32_to_fp16(nd(rng));
    q.resize(size_t(max_tokens) * q_dim);
    for (auto& x : q) x = nd(rng);
    scale = 1.0f / std::sqrt(float(L.hd));
  }

  AttentionJob job(const std::vector<BatchToken>& toks, float* out, const AttentionKernels& kern) const {
    AttentionJob j;
    j.q = q.data();
    j.out = out;
    j.tokens = toks.data();
    j.k = k.data();
    j.v = v.data();
    j.seq_stride = int64_t(ctx) * kv_dim;
    j.q_dim = q_dim;
    j.kv_dim = kv_dim;
    j.hd = L.hd;
    j.n_head = L.n_head;
    j.group = L.n_head / L.n_kv;
    j.window = L.window;
    j.ctx_size = ctx;
    j.scale = scale;
    j.kern = &kern;
    return j;
  }
};

std::vector<const AttentionKernels*> families() {
  std::vector<const AttentionKernels*> f = {&attention_kernels_portable()};
  if (attention_kernels_avx2()) f.push_back(attention_kernels_avx2());
  if (attention_kernels_avx512()) f.push_back(attention_kernels_avx512());
  return f;
}

// Runs toks (q row i = toks[i]'s query) through run_attention; out [n][q_dim].
std::vector<float> run(const Setup& s, const std::vector<BatchToken>& toks, const AttentionKernels& kern, int threads,
                       const std::vector<int>* q_rows = nullptr) {
  ThreadPool pool(threads);
  AttentionScratch scratch(pool.num_threads(), s.L.n_head, s.L.hd, s.ctx);
  std::vector<float> out(toks.size() * size_t(s.q_dim), NAN);
  AttentionJob j = s.job(toks, out.data(), kern);
  std::vector<float> q;
  if (q_rows) {  // gather the rows these tokens use
    q.resize(toks.size() * size_t(s.q_dim));
    for (size_t i = 0; i < toks.size(); ++i)
      std::memcpy(&q[i * s.q_dim], &s.q[size_t((*q_rows)[i]) * s.q_dim], sizeof(float) * s.q_dim);
    j.q = q.data();
  }
  run_attention(pool, j, int(toks.size()), scratch);
  return out;
}

// float64 softmax attention of one (token, head) with q rounded to fp16 as the contract says.
void reference(const Setup& s, const BatchToken& t, const float* q_row, int h, double* out) {
  const int hd = s.L.hd, first = s.L.window > 0 ? std::max(0, t.pos - s.L.window + 1) : 0;
  const int kvh = h / (s.L.n_head / s.L.n_kv);
  std::vector<double> sc(t.pos - first + 1);
  double mx = -INFINITY;
  for (int p = first; p <= t.pos; ++p) {
    const uint16_t* kr = &s.k[(size_t(t.seq) * s.ctx + p) * s.kv_dim + size_t(kvh) * hd];
    double d = 0;
    for (int j = 0; j < hd; ++j) d += double(fp16_round(q_row[h * hd + j])) * fp16_to_f32(kr[j]);
    sc[p - first] = d * s.scale;
    mx = std::max(mx, sc[p - first]);
  }
  double sum = 0;
  for (double& x : sc) sum += (x = std::exp(x - mx));
  std::fill(out, out + hd, 0.0);
  for (int p = first; p <= t.pos; ++p) {
    const uint16_t* vr = &s.v[(size_t(t.seq) * s.ctx + p) * s.kv_dim + size_t(kvh) * hd];
    for (int j = 0; j < hd; ++j) out[j] += sc[p - first] / sum * fp16_to_f32(vr[j]);
  }
}

// Every family vs float64 at several depths; the bound covers fp16-rounded softmax weights
// (relative 2^-11 each) and fp32 sums over up to a few thousand positions.
void check_kernels() {
  const int depths[] = {1, 2, 7, 64, 511, 512, 513, 1000, 1537, 2051};
  for (const Layout& L : kLayouts) {
    Setup s(L, 2304, 2, 2, 11);
    std::vector<BatchToken> toks;
    for (int d : depths) toks.push_back({0, d - 1, int(toks.size()) % 2});
    std::vector<int> q_rows(toks.size(), 0);
    for (size_t i = 0; i < toks.size(); ++i) q_rows[i] = int(i % 2);
    for (const AttentionKernels* kern : families()) {
      const std::vector<float> got = run(s, toks, *kern, 2, &q_rows);
      double worst = 0;
      std::string where;
      std::vector<double> ref(L.hd);
      for (size_t i = 0; i < toks.size(); ++i)
        for (int h = 0; h < L.n_head; ++h) {
          reference(s, toks[i], &s.q[size_t(q_rows[i]) * s.q_dim], h, ref.data());
          for (int j = 0; j < L.hd; ++j) {
            const double e = std::fabs(got[i * s.q_dim + h * L.hd + j] - ref[j]);
            if (!(e <= worst)) { worst = e; where = "depth " + std::to_string(toks[i].pos + 1) + " head " + std::to_string(h); }
          }
        }
      char err[64];
      std::snprintf(err, sizeof err, " (max abs error %.2e)", worst);
      report(worst < 2e-3, std::string("matches_float64/") + L.name + "/" + kern->name + err, "at " + where);
    }
  }
}

// exp_sum's exponentials equal std::exp (glibc's expf) bit for bit on every `stride`-th float of
// [−104.5, 0] (softmax exponents are ≤ 0; this spans glibc's underflow cases) and on special
// values; its sums equal the sequential float sum.
void check_exp(uint32_t stride) {
  std::vector<float> x, special = {0.f, -0.f, -INFINITY, INFINITY, NAN, -NAN, 1.f, 88.f, 88.7f, 88.73f, 100.f,
                                   -88.f, -103.2f, -103.3f, -103.9f, -103.98f, -104.f, -1e30f, 1e-30f, -1e-45f};
  const uint32_t lo = 0x80000000u, hi = 0xC2D10000u;  // −0 … −104.5
  for (uint32_t b = lo; b <= hi && b >= lo; b += stride) {
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  x.insert(x.end(), special.begin(), special.end());
  for (const AttentionKernels* kern : families()) {
    int64_t bad = 0;
    std::string first_bad;
    const size_t block = 1 << 16;
    for (size_t off = 0; off < x.size(); off += block) {
      const int n = int(std::min(block, x.size() - off));
      std::vector<float> w(x.begin() + off, x.begin() + off + n);
      const float zero = 0.f;
      float l;
      kern->exp_sum(w.data(), 1, 0, n, &zero, &l);
      float sum = 0.f;
      for (int i = 0; i < n; ++i) {
        const float e = std::exp(x[off + i]);
        sum += w[i];
        if (std::memcmp(&e, &w[i], 4) != 0 && !(std::isnan(e) && std::isnan(w[i]))) {
          if (bad++ == 0) first_bad = std::to_string(x[off + i]);
        }
      }
      if (std::memcmp(&sum, &l, 4) != 0 && !std::isnan(sum)) { ++bad; first_bad = "sum of block " + std::to_string(off); }
    }
    report(bad == 0, std::string("exp_equals_std_exp/") + kern->name + "/" + std::to_string(x.size()) + "_values",
           std::to_string(bad) + " differ, first at " + first_bad);
  }
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The pre-chunking algorithm (one softmax over all visible positions, kernel for kernel):
// single-chunk tokens must give exactly its bits.
std::vector<float> plain_softmax(const Setup& s, const std::vector<BatchToken>& toks, const AttentionKernels& kern) {
  const int hd = s.L.hd, group = s.L.n_head / s.L.n_kv;
  std::vector<float> out(toks.size() * size_t(s.q_dim)), sc(s.ctx), q(hd);
  for (size_t i = 0; i < toks.size(); ++i) {
    const BatchToken& t = toks[i];
    const int first = s.L.window > 0 ? std::max(0, t.pos - s.L.window + 1) : 0, n = t.pos - first + 1;
    for (int h = 0; h < s.L.n_head; ++h) {
      for (int j = 0; j < hd; ++j) q[j] = fp16_round(s.q[i * s.q_dim + h * hd + j]);
      const size_t off = (size_t(t.seq) * s.ctx + first) * s.kv_dim + size_t(h / group) * hd;
      kern.scores(q.data(), 1, &s.k[off], s.kv_dim, n, hd, s.scale, sc.data(), 0);
      float mx = -INFINITY, sum = 0.f;
      for (int p = 0; p < n; ++p) mx = std::max(mx, sc[p]);
      for (int p = 0; p < n; ++p) sum += (sc[p] = std::exp(sc[p] - mx));
      kern.normalize(sc.data(), n, 1.0f / sum);
      kern.weighted_sum(sc.data(), 1, 0, &s.v[off], s.kv_dim, n, hd, &out[i * s.q_dim + h * hd], 0);
    }
  }
  return out;
}

// The same tokens read through page tables (pages of `page_positions` in a random order, some
// left unused) give the contiguous cache's bits: chunk by chunk, page by page.
void check_paged() {
  for (const Layout& L : kLayouts) {
    Setup s(L, 1300, 3, 16, 33);
    const int depth[3] = {37, 700, 1300};
    for (const AttentionKernels* kern : families())
      for (int P : {16, 64, 128}) {
        const std::string tag = std::string("/") + L.name + "/" + kern->name + "/p" + std::to_string(P);
        const int pps = (s.ctx + P - 1) / P, n_page = 3 * pps + 5;
        std::vector<int32_t> order(n_page), table(size_t(3) * pps);
        for (int i = 0; i < n_page; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), std::mt19937(P));
        for (size_t i = 0; i < table.size(); ++i) table[i] = order[i];
        std::vector<uint16_t> pk(size_t(n_page) * P * s.kv_dim, 0x7e00), pv(pk.size(), 0x7e00);  // unused: NaN
        for (int sq = 0; sq < 3; ++sq)
          for (int p = 0; p < s.ctx; ++p) {
            const size_t src = (size_t(sq) * s.ctx + p) * s.kv_dim;
            const size_t dst = (size_t(table[size_t(sq) * pps + p / P]) * P + p % P) * s.kv_dim;
            std::memcpy(&pk[dst], &s.k[src], sizeof(uint16_t) * s.kv_dim);
            std::memcpy(&pv[dst], &s.v[src], sizeof(uint16_t) * s.kv_dim);
          }
        std::vector<BatchToken> toks;
        for (int sq = 0; sq < 3; ++sq)
          for (int back = 0; back < 3; ++back) toks.push_back({0, depth[sq] - 1 - back, sq});
        for (int threads : {1, 3})
          for (int bs : {1, 9}) {
            bool ok = true;
            for (size_t b = 0; b < toks.size(); b += bs) {
              const std::vector<BatchToken> part(toks.begin() + b, toks.begin() + std::min(toks.size(), b + bs));
              std::vector<int> rows;
              for (size_t i = 0; i < part.size(); ++i) rows.push_back(int(b + i));
              const std::vector<float> want = run(s, part, *kern, threads, &rows);
              ThreadPool pool(threads);
              AttentionScratch scratch(pool.num_threads(), s.L.n_head, s.L.hd, s.ctx);
              std::vector<float> got(want.size(), NAN), q(part.size() * size_t(s.q_dim));
              for (size_t i = 0; i < part.size(); ++i)
                std::memcpy(&q[i * s.q_dim], &s.q[size_t(rows[i]) * s.q_dim], sizeof(float) * s.q_dim);
              AttentionJob j = s.job(part, got.data(), *kern);
              j.q = q.data();
              j.k = pk.data();
              j.v = pv.data();
              j.page_table = table.data();
              j.pages_per_seq = pps;
              j.page_positions = P;
              run_attention(pool, j, int(part.size()), scratch);
              ok = ok && same(got, want);
            }
            report(ok, "paged_equals_contiguous_threads" + std::to_string(threads) + "_batch" + std::to_string(bs) + tag);
          }
      }
  }
}

void check_identity() {
  for (const Layout& L : kLayouts) {
    // Five sequences at depths spanning one to five chunks (600+ positions: several chunks).
    Setup s(L, 2600, 5, 16, 21);
    const int depth[5] = {37, 613, 1100, 2048, 2600};
    for (const AttentionKernels* kern : families()) {
      const std::string tag = std::string("/") + L.name + "/" + kern->name;
      // Reference: each token alone on one thread.
      std::vector<BatchToken> all;
      std::vector<int> rows;
      for (int sq = 0; sq < 5; ++sq)
        for (int back = 0; back < 3; ++back) {  // the last three positions of each sequence
          all.push_back({0, depth[sq] - 1 - back, sq});
          rows.push_back(int(all.size()) - 1);
        }
      std::vector<float> alone(all.size() * size_t(s.q_dim));
      for (size_t i = 0; i < all.size(); ++i) {
        const std::vector<BatchToken> one = {all[i]};
        const std::vector<int> r = {rows[i]};
        const std::vector<float> o = run(s, one, *kern, 1, &r);
        std::memcpy(&alone[i * s.q_dim], o.data(), sizeof(float) * s.q_dim);
      }
      for (int threads : {1, 2, 3}) {
        // Alone (split mode when the pool has threads) …
        std::vector<float> got(alone.size());
        for (size_t i = 0; i < all.size(); ++i) {
          const std::vector<BatchToken> one = {all[i]};
          const std::vector<int> r = {rows[i]};
          const std::vector<float> o = run(s, one, *kern, threads, &r);
          std::memcpy(&got[i * s.q_dim], o.data(), sizeof(float) * s.q_dim);
        }
        report(same(got, alone), "alone_threads" + std::to_string(threads) + tag);
        // … in one batch of 15 (whole-token mode), in a shuffled order …
        std::vector<int> perm(all.size());
        for (size_t i = 0; i < perm.size(); ++i) perm[i] = int(i);
        std::shuffle(perm.begin(), perm.end(), std::mt19937(threads));
        std::vector<BatchToken> batch;
        std::vector<int> brows;
        for (int p : perm) { batch.push_back(all[p]); brows.push_back(rows[p]); }
        std::vector<float> o = run(s, batch, *kern, threads, &brows);
        for (size_t i = 0; i < perm.size(); ++i) std::memcpy(&got[perm[i] * s.q_dim], &o[i * s.q_dim], sizeof(float) * s.q_dim);
        report(same(got, alone), "one_batch_shuffled_threads" + std::to_string(threads) + tag);
        // … and in batches of 2 and 4 (split mode over several tokens).
        for (int bs : {2, 4}) {
          for (size_t b = 0; b < perm.size(); b += bs) {
            std::vector<BatchToken> part(batch.begin() + b, batch.begin() + std::min(perm.size(), b + bs));
            std::vector<int> prow(brows.begin() + b, brows.begin() + std::min(perm.size(), b + bs));
            o = run(s, part, *kern, threads, &prow);
            for (size_t i = 0; i < part.size(); ++i)
              std::memcpy(&got[perm[b + i] * s.q_dim], &o[i * s.q_dim], sizeof(float) * s.q_dim);
          }
          report(same(got, alone), "batches_of" + std::to_string(bs) + "_threads" + std::to_string(threads) + tag);
        }
      }
      // Tokens within one chunk equal the plain one-softmax algorithm bit for bit.
      std::vector<BatchToken> short_toks;
      for (int p : {0, 1, 100, 300, 511}) short_toks.push_back({0, p, 1});
      if (L.window > 0) short_toks.push_back({0, 2599, 4});  // a window is one chunk at any depth
      report(same(run(s, short_toks, *kern, 2), plain_softmax(s, short_toks, *kern)), "one_chunk_is_plain_softmax" + tag);
    }
  }
  {  // A scratch sized for fewer threads or a shorter context is refused, not overrun.
    Setup s(kLayouts[0], 700, 1, 1, 9);
    ThreadPool pool(2);
    std::vector<float> out(s.q_dim);
    const std::vector<BatchToken> t = {{0, 699, 0}};
    int refused = 0;
    for (AttentionScratch* bad : {new AttentionScratch(1, s.L.n_head, s.L.hd, 700), new AttentionScratch(2, s.L.n_head, s.L.hd, 512)}) {
      try { run_attention(pool, s.job(t, out.data(), attention_kernels()), 1, *bad); } catch (const std::invalid_argument&) { ++refused; }
      delete bad;
    }
    report(refused == 2, "undersized_scratch_refused", std::to_string(refused) + " of 2");
  }
  // The AVX-512 kernels reproduce the AVX2 ones exactly.
  if (attention_kernels_avx2() && attention_kernels_avx512()) {
    for (const Layout& L : kLayouts) {
      Setup s(L, 2600, 1, 1, 5);
      std::vector<float> a, b;
      for (int d : {1, 3, 9, 512, 1023, 2600}) {
        const std::vector<BatchToken> t = {{0, d - 1, 0}};
        const std::vector<float> x = run(s, t, *attention_kernels_avx2(), 2), y = run(s, t, *attention_kernels_avx512(), 2);
        a.insert(a.end(), x.begin(), x.end());
        b.insert(b.end(), y.begin(), y.end());
      }
      report(same(a, b), std::string("avx512_equals_avx2/") + L.name);
    }
  }
}

// One decode token per call, cycling over kBenchLayers caches (sequence slots standing in for
// layers) so that K/V stream from memory as in a real model, not from a cache-resident layer.
// page_positions > 0: the K/V are read through page tables of pages that size, in shuffled order.
int bench(const std::string& name, int depth, int threads, int page_positions) {
  constexpr int kBenchLayers = 30;
  const Layout& L = layout(name);
  Setup s(L, depth, kBenchLayers, 1, 3);
  std::vector<std::vector<BatchToken>> t;
  for (int l = 0; l < kBenchLayers; ++l) t.push_back({{0, depth - 1, l}});
  ThreadPool pool(threads);
  AttentionScratch scratch(pool.num_threads(), L.n_head, L.hd, depth);
  std::vector<float> out(s.q_dim);
  std::vector<AttentionJob> jobs;
  for (int l = 0; l < kBenchLayers; ++l) jobs.push_back(s.job(t[l], out.data(), attention_kernels()));
  const int P = page_positions, pps = P > 0 ? (depth + P - 1) / P : 0;
  std::vector<int32_t> table(size_t(kBenchLayers) * pps);
  std::vector<uint16_t> pk, pv;
  if (P > 0) {
    for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
    std::shuffle(table.begin(), table.end(), std::mt19937(5));
    pk.assign(table.size() * P * s.kv_dim, 0);
    pv.assign(pk.size(), 0);
    for (int l = 0; l < kBenchLayers; ++l)
      for (int p = 0; p < depth; ++p) {
        const size_t src = (size_t(l) * depth + p) * s.kv_dim;
        const size_t dst = (size_t(table[size_t(l) * pps + p / P]) * P + p % P) * s.kv_dim;
        std::memcpy(&pk[dst], &s.k[src], sizeof(uint16_t) * s.kv_dim);
        std::memcpy(&pv[dst], &s.v[src], sizeof(uint16_t) * s.kv_dim);
      }
    for (AttentionJob& j : jobs) {
      j.k = pk.data();
      j.v = pv.data();
      j.page_table = table.data();
      j.pages_per_seq = pps;
      j.page_positions = P;
    }
  }
  for (int i = 0; i < 2 * kBenchLayers; ++i) run_attention(pool, jobs[i % kBenchLayers], 1, scratch);
  // Best of 7 rounds; with one thread, CPU time of this thread (the machine may be shared).
  auto now_us = [threads] {
    timespec ts;
    clock_gettime(threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
  };
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const int iters = 2 * kBenchLayers;
    const double t0 = now_us();
    for (int i = 0; i < iters; ++i) run_attention(pool, jobs[i % kBenchLayers], 1, scratch);
    best = std::min(best, (now_us() - t0) / iters);
  }
  const int n_pos = L.window > 0 ? std::min(depth, L.window) : depth;
  const double macs = 2.0 * L.n_head * L.hd * n_pos;
  std::printf("attention %s depth %d threads %d kernels %s pages %d: %.1f us per layer call, %.2f GMAC/s\n", L.name,
              depth, threads, attention_kernels().name, P, best, macs / best / 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: see the file header\n"); return 2; }
  const std::string mode = argv[1];
  if (mode == "kernels") {
    check_exp(argc > 2 ? uint32_t(std::atoi(argv[2])) : 7);
    check_kernels();
  }
  else if (mode == "identity") check_identity();
  else if (mode == "paged") check_paged();
  else if (mode == "bench" && (argc == 5 || argc == 6))
    return bench(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), argc == 6 ? std::atoi(argv[5]) : 0);
  else { std::fprintf(stderr, "bad arguments\n"); return 2; }
  return g_failures ? 1 : 0;
}
