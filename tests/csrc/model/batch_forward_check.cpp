// Standalone checks of ModelRuntime::forward_batch / copy_kv / the fp16 KV cache, built by
// test_batch_forward.py with g++ against the csrc sources (no Python binding needed).
//
//   batch_forward_check equivalence MODEL.gguf [portable]   (a) (b) (c) + kernel checks
//   batch_forward_check long MODEL.gguf                      bit-identity at 1100+ positions
//   batch_forward_check lazy MODEL.gguf CTX N_SEQ            reserved vs resident KV bytes
//   batch_forward_check bench MODEL.gguf CTX THREADS         decode tok/s at a long context
// Prints one line per check ("ok NAME" / "FAIL NAME: why"); exit status 1 if any failed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "gguf/gguf.h"
#include "model/attention.h"
#include "model/model.h"
#include "quant/quant.h"

#include "check_report.h"

using namespace ls;

namespace {

using Rows = std::vector<std::vector<float>>;  // [position][n_vocab]

std::vector<int32_t> make_ids(int n, uint32_t seed, int n_vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(std::min(n_vocab, 250)));
  return ids;
}

// The sequence alone on a fresh single-slot runtime through forward(), in chunks of `chunk`.
Rows reference(const GgufFile& f, const std::vector<int32_t>& ids, int ctx, int chunk, int threads) {
  ModelRuntime m(f, ctx, chunk, threads, 1);
  const int V = m.config().n_vocab, n = int(ids.size());
  std::vector<float> out(size_t(n) * V);
  for (int off = 0; off < n; off += chunk) {
    const int k = std::min(chunk, n - off);
    m.forward(ids.data() + off, k, off, out.data() + size_t(off) * V, true);
  }
  Rows rows(n);
  for (int p = 0; p < n; ++p) rows[p].assign(out.begin() + size_t(p) * V, out.begin() + size_t(p + 1) * V);
  return rows;
}

struct Lane {  // one sequence of a schedule
  int slot;
  std::vector<int32_t> ids;
  int start = 0;       // first position this schedule feeds (earlier ones already cached)
  Rows got;            // logits the batch run produced, by position
};

// Each step lists (lane index, token count). Tokens of a step are merged into one batch in a
// random interleaving (each lane's tokens stay in order) when shuffle_seed != 0. Logits are
// requested for every row.
void run_schedule(ModelRuntime& m, std::vector<Lane>& lanes, const std::vector<std::vector<std::pair<int, int>>>& steps,
                  uint32_t shuffle_seed) {
  const int V = m.config().n_vocab;
  std::vector<int> cur(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    cur[l] = lanes[l].start;
    lanes[l].got.assign(lanes[l].ids.size(), {});
  }
  std::mt19937 rng(shuffle_seed);
  for (const auto& step : steps) {
    std::vector<std::vector<BatchToken>> per_lane;
    std::vector<int> lane_of;
    for (auto [l, k] : step) {
      std::vector<BatchToken> toks;
      for (int j = 0; j < k; ++j, ++cur[l]) toks.push_back({lanes[l].ids[cur[l]], cur[l], lanes[l].slot});
      per_lane.push_back(toks);
      lane_of.push_back(l);
    }
    std::vector<BatchToken> batch;
    std::vector<int> batch_lane;
    std::vector<size_t> next(per_lane.size(), 0);
    for (;;) {  // merge: pick a random lane with tokens left (or in order when not shuffling)
      std::vector<size_t> open;
      for (size_t i = 0; i < per_lane.size(); ++i) if (next[i] < per_lane[i].size()) open.push_back(i);
      if (open.empty()) break;
      const size_t i = shuffle_seed ? open[rng() % open.size()] : open[0];
      batch.push_back(per_lane[i][next[i]++]);
      batch_lane.push_back(lane_of[i]);
    }
    const int n = int(batch.size());
    std::vector<int32_t> rows(n);
    for (int i = 0; i < n; ++i) rows[i] = i;
    std::vector<float> logits(size_t(n) * V);
    m.forward_batch(batch.data(), n, rows.data(), n, logits.data());
    for (int i = 0; i < n; ++i)
      lanes[batch_lane[i]].got[batch[i].pos].assign(logits.begin() + size_t(i) * V, logits.begin() + size_t(i + 1) * V);
  }
}

bool same_rows(const Rows& got, const Rows& ref, int from, int to, std::string& why) {
  for (int p = from; p < to; ++p) {
    if (got[p].size() != ref[p].size() || std::memcmp(got[p].data(), ref[p].data(), got[p].size() * 4) != 0) {
      float d = 0;
      for (size_t j = 0; j < std::min(got[p].size(), ref[p].size()); ++j) d = std::max(d, std::fabs(got[p][j] - ref[p][j]));
      why = "position " + std::to_string(p) + " differs (max abs diff " + std::to_string(d) + ")";
      return false;
    }
  }
  return true;
}

void check_kernels() {
  {  // The branchless widening the portable kernels use equals the reference one everywhere.
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float a = fp16_to_f32(uint16_t(h)), b = fp16_to_f32_branchless(uint16_t(h));
      if (std::memcmp(&a, &b, 4) != 0 && !(std::isnan(a) && std::isnan(b))) ++bad;
    }
    report(bad == 0, "fp16_to_f32_branchless_exact", std::to_string(bad) + " values differ");
  }
  // The store and softmax-normalise kernels round exactly as the scalar fp16 conversions do.
  std::vector<const AttentionKernels*> paths = {&attention_kernels_portable()};
  if (attention_kernels_avx2()) paths.push_back(attention_kernels_avx2());
  std::mt19937 rng(7);
  std::vector<float> x(4099);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t b = rng();
    std::memcpy(&x[i], &b, 4);
    if (i % 3 == 0) x[i] = std::ldexp(float(rng() % 2048) - 1024.f, int(rng() % 40) - 34);  // fp16 range incl. subnormals
  }
  x[0] = 65519.f; x[1] = 65520.f; x[2] = -0.f; x[3] = INFINITY; x[4] = 5.9604645e-08f; x[5] = 2.9802322e-08f;
  for (const AttentionKernels* k : paths) {
    std::vector<uint16_t> h(x.size());
    k->store(x.data(), h.data(), int64_t(x.size()));
    bool ok = true;
    for (size_t i = 0; i < x.size() && ok; ++i)
      if (!std::isnan(x[i]) && h[i] != f32_to_fp16(x[i])) ok = false;
    report(ok, std::string("store_rounds_like_f32_to_fp16/") + k->name);
    std::vector<float> w(1003);
    for (auto& v : w) v = float(rng() % 100000) / 1000.f;
    std::vector<float> expect(w.size());
    for (size_t i = 0; i < w.size(); ++i) expect[i] = fp16_round(w[i] * 0.013f);
    k->normalize(w.data(), int(w.size()), 0.013f);
    report(std::memcmp(w.data(), expect.data(), w.size() * 4) == 0, std::string("normalize_rounds_like_fp16_round/") + k->name);
  }
}

int equivalence(const char* path, bool portable) {
  if (portable && !set_isa(Isa::Scalar)) { report(false, "set_isa", "scalar path unusable"); return 1; }
  const std::string tag = portable ? "/portable" : "";
  check_kernels();
  GgufFile f(path);
  const int ctx = 64;
  int V;
  {
    ModelRuntime probe(f, ctx, 8, 1, 1);
    V = probe.config().n_vocab;
    report(std::string(probe.config().arch_name).size() > 0 && probe.n_seq() == 1, "probe" + tag);
  }
  const auto A = make_ids(29, 1, V), B = make_ids(17, 2, V), C = make_ids(11, 3, V);
  const Rows refA = reference(f, A, ctx, int(A.size()), 1), refB = reference(f, B, ctx, int(B.size()), 1),
             refC = reference(f, C, ctx, int(C.size()), 1);
  {  // The reference itself: one-token decode == one-shot prefill.
    std::string why;
    report(same_rows(reference(f, A, ctx, 1, 1), refA, 0, int(A.size()), why), "decode_equals_prefill" + tag, why);
  }
  // (a) A prefills in chunks of 5 while B and C (prefilled first) decode one token per step.
  std::vector<std::vector<std::pair<int, int>>> steps = {{{1, 6}, {2, 3}}};
  {
    int a = 0, b = 6, c = 3;
    while (a < int(A.size()) || b < int(B.size()) || c < int(C.size())) {
      std::vector<std::pair<int, int>> s;
      if (a < int(A.size())) { const int k = std::min(5, int(A.size()) - a); s.push_back({0, k}); a += k; }
      if (b < int(B.size())) { s.push_back({1, 1}); ++b; }
      if (c < int(C.size()) && (a % 2 == 0 || a >= int(A.size()))) { s.push_back({2, 1}); ++c; }  // C skips some steps
      steps.push_back(s);
    }
  }
  for (uint32_t shuffle : {0u, 11u, 12u}) {
    for (int threads : {1, 2}) {
      ModelRuntime m(f, ctx, 64, threads, 4);
      std::vector<Lane> lanes = {{3, A}, {0, B}, {2, C}};  // slots deliberately not 0,1,2
      run_schedule(m, lanes, steps, shuffle);
      std::string why;
      const bool ok = same_rows(lanes[0].got, refA, 0, int(A.size()), why) &&
                      same_rows(lanes[1].got, refB, 0, int(B.size()), why) &&
                      same_rows(lanes[2].got, refC, 0, int(C.size()), why);
      const std::string name = std::string(shuffle ? "(b)shuffled_batch" : "(a)interleaved_batch") + "_equals_alone/seed" +
                               std::to_string(shuffle) + "/threads" + std::to_string(threads) + tag;
      report(ok, name, why);
    }
  }
  {  // Only some rows' logits: the selected rows equal the all-rows run.
    ModelRuntime m(f, ctx, 64, 2, 2);
    std::vector<BatchToken> batch;
    for (int p = 0; p < 7; ++p) batch.push_back({A[p], p, 1});
    for (int p = 0; p < 4; ++p) batch.push_back({B[p], p, 0});
    const int32_t rows[2] = {6, 10};
    std::vector<float> logits(2 * size_t(V));
    m.forward_batch(batch.data(), int(batch.size()), rows, 2, logits.data());
    const bool ok = std::memcmp(logits.data(), refA[6].data(), size_t(V) * 4) == 0 &&
                    std::memcmp(logits.data() + V, refB[3].data(), size_t(V) * 4) == 0;
    report(ok, "out_rows_subset" + tag);
  }
  if (f.get_int(f.get_string("general.architecture") + ".expert_count", 0) > 0) {
    // MoE: the batches above only prove something if their rows chose different experts.
    ModelRuntime m(f, ctx, 64, 2, 2);
    std::vector<BatchToken> batch;
    for (int p = 0; p < 7; ++p) batch.push_back({A[p], p, 1});
    for (int p = 0; p < 4; ++p) batch.push_back({B[p], p, 0});
    m.forward_batch(batch.data(), int(batch.size()), nullptr, 0, nullptr);
    const int K = m.config().n_expert_used;
    std::set<std::vector<int32_t>> choices;
    std::set<int32_t> experts;
    for (int r = 0; r < int(batch.size()); ++r) {
      std::vector<int32_t> ids(K);
      m.last_experts(r, ids.data());
      std::sort(ids.begin(), ids.end());
      choices.insert(ids);
      experts.insert(ids.begin(), ids.end());
    }
    report(choices.size() >= 3 && int(experts.size()) > K, "moe_batch_rows_choose_different_experts" + tag,
           std::to_string(choices.size()) + " distinct choices over " + std::to_string(experts.size()) + " experts");
  }
  {  // (c) copy_kv: a prefix shared into another (stale) slot continues as if recomputed.
    const int P = 8;
    std::vector<int32_t> X = make_ids(6, 4, V), PX(A.begin(), A.begin() + P);
    PX.insert(PX.end(), X.begin(), X.end());
    const Rows refPX = reference(f, PX, ctx, int(PX.size()), 1);
    ModelRuntime m(f, ctx, 64, 2, 3);
    std::vector<Lane> warm = {{0, std::vector<int32_t>(A.begin(), A.begin() + 12)}, {2, make_ids(20, 9, V)}};
    run_schedule(m, warm, {{{0, 12}, {1, 20}}}, 0);  // slot 2 holds unrelated tokens up to pos 20
    m.copy_kv(0, 2, P);
    std::vector<Lane> lanes = {{2, PX}, {0, std::vector<int32_t>(A.begin(), A.begin() + 14)}};
    lanes[0].start = P;
    lanes[1].start = 12;
    run_schedule(m, lanes, {{{0, 3}, {1, 1}}, {{0, 3}, {1, 1}}}, 5);
    std::string why;
    const bool ok = same_rows(lanes[0].got, refPX, P, int(PX.size()), why) && same_rows(lanes[1].got, refA, 12, 14, why);
    report(ok, "(c)copy_kv_then_continue_equals_recompute" + tag, why);
  }
  {  // Bad input is rejected before anything is touched.
    ModelRuntime m(f, ctx, 8, 1, 2);
    int rejected = 0;
    const BatchToken bad[] = {{0, ctx, 0}, {0, 0, 2}, {-1, 0, 0}, {V, 0, 0}};
    for (const BatchToken& t : bad) {
      try { m.forward_batch(&t, 1, nullptr, 0, nullptr); } catch (const std::invalid_argument&) { ++rejected; }
    }
    const BatchToken two[] = {{0, 0, 0}, {1, 1, 0}};
    const int32_t rows[] = {1, 0};
    std::vector<float> lg(2 * size_t(V));
    try { m.forward_batch(two, 2, rows, 2, lg.data()); } catch (const std::invalid_argument&) { ++rejected; }
    try { m.copy_kv(0, 2, 1); } catch (const std::invalid_argument&) { ++rejected; }
    report(rejected == 6, "invalid_input_rejected" + tag, std::to_string(rejected) + " of 6");
  }
  return g_failures ? 1 : 0;
}

// Long context (several 512-position softmax chunks): a sequence prefilled to 1100 positions
// decodes 6 tokens with bit-identical logits whatever the thread count (1, 2, 3), the prefill
// chunking, and whatever shares its decode batches (1 to 5 tokens: both attention modes).
int long_context(const char* path) {
  GgufFile f(path);
  const int n_ctx = 1280, n_prefix = 1100, n_dec = 6;
  int V;
  { ModelRuntime probe(f, 64, 8, 1, 1); V = probe.config().n_vocab; }
  const auto A = make_ids(n_prefix + n_dec, 7, V), B = make_ids(40, 8, V), C = make_ids(30, 9, V);
  auto prefill = [&](ModelRuntime& m, const std::vector<int32_t>& ids, int n, int seq, int chunk) {
    for (int off = 0; off < n; off += chunk) {
      std::vector<BatchToken> batch;
      for (int p = off; p < std::min(n, off + chunk); ++p) batch.push_back({ids[p], p, seq});
      m.forward_batch(batch.data(), int(batch.size()), nullptr, 0, nullptr);
    }
  };
  auto alone = [&](int threads, int chunk) {
    ModelRuntime m(f, n_ctx, 512, threads, 1);
    prefill(m, A, n_prefix, 0, chunk);
    Rows rows(n_dec, std::vector<float>(V));
    for (int t = 0; t < n_dec; ++t) m.forward(&A[n_prefix + t], 1, n_prefix + t, rows[t].data(), false);
    return rows;
  };
  const Rows ref = alone(1, 512);
  std::string why;
  for (int threads : {2, 3}) {
    const bool ok = same_rows(alone(threads, threads == 2 ? 300 : 137), ref, 0, n_dec, why);
    report(ok, "long_decode_alone_threads" + std::to_string(threads), why);
  }
  for (int threads : {1, 2, 3}) {
    ModelRuntime m(f, n_ctx, 512, threads, 3);
    prefill(m, A, n_prefix, 2, 256);
    prefill(m, B, 20, 0, 20);
    prefill(m, C, 10, 1, 10);
    // Steps: {A, B} · {C, A, B} · {A} · {B, A, A, A, C}; A's rows collected by position.
    const std::vector<std::vector<std::pair<int, int>>> steps = {
        {{0, 0}, {1, 0}}, {{2, 0}, {0, 1}, {1, 1}}, {{0, 2}}, {{1, 2}, {0, 3}, {0, 4}, {0, 5}, {2, 1}}};
    Rows got(n_dec);
    for (const auto& step : steps) {
      std::vector<BatchToken> batch;
      std::vector<int32_t> rows;
      std::vector<int> a_pos;
      for (auto [who, k] : step) {
        if (who == 0) { batch.push_back({A[n_prefix + k], n_prefix + k, 2}); rows.push_back(int(batch.size()) - 1); a_pos.push_back(k); }
        if (who == 1) batch.push_back({B[20 + k], 20 + k, 0});
        if (who == 2) batch.push_back({C[10 + k], 10 + k, 1});
      }
      std::vector<float> logits(rows.size() * size_t(V));
      m.forward_batch(batch.data(), int(batch.size()), rows.data(), int(rows.size()), logits.data());
      for (size_t r = 0; r < rows.size(); ++r) got[a_pos[r]].assign(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    }
    report(same_rows(got, ref, 0, n_dec, why), "long_decode_in_batches_threads" + std::to_string(threads), why);
  }
  return g_failures ? 1 : 0;
}

long resident_bytes() {
  long pages = 0, rss = 0;
  FILE* fp = std::fopen("/proc/self/statm", "r");
  if (fp) { if (std::fscanf(fp, "%ld %ld", &pages, &rss) != 2) rss = 0; std::fclose(fp); }
  return rss * 4096;
}

int lazy(const char* path, int ctx, int n_seq) {
  GgufFile f(path);
  const long before = resident_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  ModelRuntime m(f, ctx, 8, 1, n_seq);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const long after = resident_bytes();
  const ModelConfig& c = m.config();
  const size_t expect = size_t(c.n_layer) * 2 * n_seq * size_t(ctx) * c.n_head_kv * c.head_dim * 2;
  std::printf("kv_cache_bytes %zu resident_growth %ld construct_ms %.1f\n", m.kv_cache_bytes(), after - before, ms);
  report(m.kv_cache_bytes() == expect && m.n_seq() == n_seq, "kv_cache_bytes_is_fp16_size");
  report(after - before < long(m.kv_cache_bytes() / 8), "kv_cache_not_resident_until_used",
         std::to_string(after - before) + " bytes resident");
  // Writing 8 positions of one slot commits only the pages they touch.
  std::vector<BatchToken> batch;
  for (int p = 0; p < 8; ++p) batch.push_back({1 + p, p, n_seq - 1});
  m.forward_batch(batch.data(), 8, nullptr, 0, nullptr);
  const long used = resident_bytes() - after;
  report(used < long(m.kv_cache_bytes() / 8), "kv_cache_commits_written_pages_only", std::to_string(used) + " bytes");
  return g_failures ? 1 : 0;
}

// Decode speed of one sequence at positions [ctx/2, ctx/2 + 64): fills the first half with a
// batched prefill, then times 64 single-token forwards.
int bench(const char* path, int ctx, int threads) {
  GgufFile f(path);
  ModelRuntime m(f, ctx, 256, threads, 1);
  const int V = m.config().n_vocab, start = ctx / 2;
  std::vector<float> logits(V);
  const auto ids = make_ids(start + 64, 5, V);
  for (int off = 0; off < start; off += 256) m.forward(ids.data() + off, std::min(256, start - off), off, nullptr, false);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 64; ++i) m.forward(&ids[start + i], 1, start + i, logits.data(), false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("decode_at_pos %d threads %d tok_per_s %.2f attention %s\n", start, threads, 64 / s, attention_kernels().name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) { std::fprintf(stderr, "usage: see the file header\n"); return 2; }
  const std::string mode = argv[1];
  try {
    if (mode == "equivalence") return equivalence(argv[2], argc > 3 && std::string(argv[3]) == "portable");
    if (mode == "long") return long_context(argv[2]);
    if (mode == "lazy" && argc == 5) return lazy(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    if (mode == "bench" && argc == 5) return bench(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "bad arguments\n");
  return 2;
}
