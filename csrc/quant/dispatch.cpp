// Run-time choice of the kernel path: a path is usable when its instructions executed in
// this process (common/cpu_features.h) AND its kernels agree with the scalar reference on a
// self-test over deterministic pseudo-random blocks of every type. LANESERVE_ISA forces a
// usable path.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/cpu_features.h"
#include "quant/quant_internal.h"

namespace ls {
namespace quant {
namespace {

constexpr int kNumIsa = 4;
constexpr GgmlType kTestTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                   GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                   GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K,
                                   GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

uint32_t lcg(uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return s >> 8;
}
float uniform(uint32_t& s) { return float(lcg(s) & 0xffff) / 32768.f - 1.f; }  // [-1, 1)

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Random weight rows of type t with small finite scales (random bytes everywhere else).
std::vector<uint8_t> test_weights(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  const size_t nbytes = ggml_row_bytes(t, n_in) * size_t(n_out);
  std::vector<uint8_t> w(nbytes);
  if (t == GgmlType::F32) {
    for (size_t i = 0; i < nbytes / 4; ++i) { const float f = uniform(seed); std::memcpy(&w[4 * i], &f, 4); }
    return w;
  }
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (size_t i = 0; i < nbytes / 2; ++i) {
      const float f = uniform(seed);
      uint16_t h;
      if (t == GgmlType::F16) {
        h = f32_to_fp16(f);
      } else {
        uint32_t b;
        std::memcpy(&b, &f, 4);
        h = uint16_t(b >> 16);
      }
      std::memcpy(&w[2 * i], &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = uint8_t(lcg(seed));
  for (size_t off = 0; off < nbytes; off += size_t(info.block_bytes)) {
    uint8_t* b = &w[off];
    switch (t) {
      case GgmlType::Q6_K: put_f16(b + 208, 0.01f * uniform(seed)); break;
      case GgmlType::Q3_K: put_f16(b + 108, 0.01f * uniform(seed)); break;
      case GgmlType::Q2_K:
        put_f16(b + 80, 0.05f * uniform(seed));
        put_f16(b + 82, 0.05f * uniform(seed));
        break;
      case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
        put_f16(b, 0.05f * uniform(seed));
        put_f16(b + 2, 0.05f * uniform(seed));
        break;
      case GgmlType::MXFP4:  // E8M0 scales around 2^-6, now and then a denormal one (e < 2)
        b[0] = (lcg(seed) & 15) == 0 ? uint8_t(lcg(seed) % 3) : uint8_t(116 + lcg(seed) % 12);
        break;
      default: put_f16(b, 0.05f * uniform(seed)); break;
    }
  }
  return w;
}

// Interleaved kernels must match the scalar reference bit for bit (same float operations).
// n_rows: 11 = a zmm tile of 8 + 3 rows; the AMX kernels get 37 = tiles of 16 + 16 + an overlapping last one.
bool il_self_test(const KernelTable& cand, const KernelTable& ref, int64_t n_rows) {
  MatmulScratch s1, s2;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                     GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::MXFP4}) {
    if (!cand.il_rows[slot(t)]) continue;
    const int64_t n_in = ggml_type_info(t).block_elems == 256 ? 512 : 224, n_out = 32;
    const std::vector<uint8_t> w = test_weights(t, n_in, n_out, 4242u + uint32_t(t));
    std::vector<uint8_t> il(interleaved_bytes(t, n_in, n_out));
    interleave_weights(t, w.data(), n_in, n_out, il.data());
    std::vector<float> x(size_t(n_in * n_rows)), y1(size_t(n_out * n_rows)), y2(y1.size());
    uint32_t seed = 99;
    for (auto& v : x) v = uniform(seed);
    const WeightLayout il16 = WeightLayout::Interleaved16;
    matmul_with(cand, nullptr, s1, t, il.data(), n_in, n_out, x.data(), n_rows, y1.data(), n_out, il16);
    matmul_with(ref, nullptr, s2, t, il.data(), n_in, n_out, x.data(), n_rows, y2.data(), n_out, il16);
    if (std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "laneserve quant self-test: interleaved %s differs from the scalar reference\n",
                   ggml_type_info(t).name);
      return false;
    }
  }
  return true;
}

bool self_test(const KernelTable& cand, const KernelTable& ref) {
  MatmulScratch s1, s2;
  for (GgmlType t : kTestTypes) {
    const int64_t n_in = ggml_type_info(t).block_elems == 256 ? 512 : 224;  // 224 = 7 blocks (odd tail)
    const int64_t n_out = 7, n_rows = 6;                                     // 4-row tile + 2-row rest
    const std::vector<uint8_t> w = test_weights(t, n_in, n_out, 12345u + uint32_t(t));
    std::vector<float> x(size_t(n_in * n_rows)), y1(size_t(n_out * n_rows)), y2(y1.size());
    uint32_t seed = 777;
    for (auto& v : x) v = uniform(seed);
    x[5] = 0.f;  // exercise exact zeros
    matmul_with(cand, nullptr, s1, t, w.data(), n_in, n_out, x.data(), n_rows, y1.data(), n_out);
    matmul_with(ref, nullptr, s2, t, w.data(), n_in, n_out, x.data(), n_rows, y2.data(), n_out);
    float mx = 0.f;
    for (float v : y2) mx = std::fmax(mx, std::fabs(v));
    for (size_t i = 0; i < y1.size(); ++i) {
      // Integer parts are exact on every path; only float summation order differs.
      if (!(std::fabs(y1[i] - y2[i]) <= 1e-4f * (mx + 1.f))) {
        std::fprintf(stderr, "laneserve quant self-test: %s mismatch at %zu: %g vs %g\n", ggml_type_info(t).name, i,
                     double(y1[i]), double(y2[i]));
        return false;
      }
    }
  }
  return il_self_test(cand, ref, 11);
}

struct Dispatch {
  KernelTable tables[kNumIsa];
  bool usable[kNumIsa] = {true, false, false, false};
  bool supported[kNumIsa] = {true, false, false, false};  // the CPU's features allow the path
  std::atomic<int> active{0};
  bool amx = false;  // tables[Avx512Vnni] holds the AMX kernels (kernels_amx.cpp)

  Dispatch() {
    fill_scalar(tables[0]);
    fill_il_scalar(tables[0]);
    const CpuFeatures& f = cpu_features();
    supported[1] = f.avx2;
    supported[2] = f.avx2 && f.avx512 && f.avx512_vnni;
    supported[3] = f.avx2 && f.avx_vnni;
    if (supported[1]) {
      tables[1] = tables[0];
      fill_avx2(tables[1]);
      usable[1] = self_test(tables[1], tables[0]);
    }
    if (supported[2]) {
      tables[2] = tables[0];
      fill_avx512_vnni(tables[2]);
      usable[2] = self_test(tables[2], tables[0]);
      if (usable[2] && f.amx_int8) {
        KernelTable with_amx = tables[2];
        fill_amx(with_amx);
        amx = il_self_test(with_amx, tables[0], 37);  // fill_amx changes only interleaved kernels
        if (amx) tables[2] = with_amx;
        else std::fprintf(stderr, "laneserve: AMX kernels differ from the scalar reference; not used\n");
      }
    }
    if (supported[3]) {
      tables[3] = tables[0];
      fill_avx_vnni(tables[3]);
      usable[3] = self_test(tables[3], tables[0]);
    }
    int best = 0;
    for (int i : {1, 3, 2})
      if (usable[i]) best = i;
    if (const char* env = std::getenv("LANESERVE_ISA")) {
      int forced = -1;
      for (int i = 0; i < kNumIsa; ++i)
        if (std::strcmp(env, isa_name(Isa(i))) == 0) forced = i;
      if (forced >= 0 && usable[forced])
        best = forced;
      else
        std::fprintf(stderr, "laneserve: LANESERVE_ISA=%s is not usable here; using %s\n", env,
                     isa_name(Isa(best)));
    }
    active.store(best);
  }
};

Dispatch& dispatch() {
  static Dispatch d;
  return d;
}

}  // namespace

const KernelTable& active_kernels() {
  Dispatch& d = dispatch();
  return d.tables[d.active.load(std::memory_order_relaxed)];
}

}  // namespace quant

bool interleave_preferred(GgmlType t, int64_t n_in, int64_t n_out) {
  if (!interleave_supported(t, n_in, n_out)) return false;
  quant::Dispatch& d = quant::dispatch();
  const int s = quant::slot(t);
  return d.tables[d.active.load()].il_rows[s] != d.tables[0].il_rows[s];
}

bool amx_available() { return quant::dispatch().amx; }
bool amx_active() { return amx_available() && quant::amx_enabled() && active_isa() == Isa::Avx512Vnni; }
bool set_amx(bool on) {
  if (amx_available()) quant::set_amx_enabled(on);
  return amx_active();
}

Isa active_isa() { return Isa(quant::dispatch().active.load()); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512Vnni: return "avx512_vnni";
    case Isa::AvxVnni: return "avx_vnni";
  }
  return "unknown";
}

bool isa_usable(Isa isa) {
  const int i = int(isa);
  return i >= 0 && i < quant::kNumIsa && quant::dispatch().usable[i];
}

bool isa_supported(Isa isa) {
  const int i = int(isa);
  return i >= 0 && i < quant::kNumIsa && quant::dispatch().supported[i];
}

bool set_isa(Isa isa) {
  quant::Dispatch& d = quant::dispatch();
  const int i = int(isa);
  if (i < 0 || i >= quant::kNumIsa || !d.usable[i]) return false;
  d.active.store(i);
  return true;
}

}  // namespace ls
