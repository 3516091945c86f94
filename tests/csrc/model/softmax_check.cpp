// Checks ls::softmax_rows (csrc/model/softmax.h) on every attention kernel family usable here
// (portable, AVX2, AVX-512) against the contract written out in scalar code: x·scale, max,
// std::exp(x − max), fp32 sum in increasing index, times 1/sum — bit for bit — and against a
// float64 softmax within fp32 rounding. Row lengths around the vector widths (tails), row counts
// around the 4-row groups, ordinary / large / tiny scores, −inf entries and all-−inf rows, and
// the padding between rows left untouched.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check_report.h"
#include "model/softmax.h"

namespace {

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

// The contract, one row at a time.
void reference(float* row, int n, float scale) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::fmax(m, row[i] *= scale);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += (row[i] = std::exp(row[i] - m));
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) row[i] *= inv;
}

enum class Kind { Ordinary, Large, Tiny, WithNegInf, AllNegInf };

float draw(Kind kind, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  switch (kind) {
    case Kind::Large: return nd(rng) * 3e4f;   // most exps underflow to 0 (and the subnormal cases)
    case Kind::Tiny: return nd(rng) * 1e-30f;  // every exp rounds to 1
    case Kind::WithNegInf: return rng() % 5 == 0 ? -INFINITY : nd(rng) * 4.0f;
    case Kind::AllNegInf: return -INFINITY;
    default: return nd(rng) * 4.0f;
  }
}

void check(const ls::AttentionKernels& kern) {
  const int lengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1024, 1031};
  const int64_t row_counts[] = {1, 3, 4, 5, 9};
  const struct { Kind kind; const char* name; } kinds[] = {{Kind::Ordinary, "ordinary"}, {Kind::Large, "large"},
                                                           {Kind::Tiny, "tiny"}, {Kind::WithNegInf, "with_neg_inf"},
                                                           {Kind::AllNegInf, "all_neg_inf"}};
  for (const auto& k : kinds)
    for (float scale : {1.0f, 0.125f}) {
      long differ = 0, far = 0, cases = 0, padding = 0;
      std::mt19937 rng(1234);
      for (int n : lengths)
        for (int64_t rows : row_counts) {
          const int64_t stride = n + 5;
          std::vector<float> x(size_t(rows * stride));
          for (float& v : x) v = draw(k.kind, rng);
          if (k.kind == Kind::WithNegInf)
            for (int64_t r = 0; r < rows; ++r) x[size_t(r * stride)] = 1.0f;  // a finite maximum in every row
          std::vector<float> got = x, want = x;
          ls::softmax_rows(got.data(), rows, stride, n, scale, kern);
          for (int64_t r = 0; r < rows; ++r) {
            float* w = &want[size_t(r * stride)];
            reference(w, n, scale);
            // float64 softmax of the scaled row.
            const float* xr = &x[size_t(r * stride)];
            double m = -INFINITY, sum = 0.0;
            std::vector<double> e(static_cast<size_t>(n));
            for (int i = 0; i < n; ++i) m = std::fmax(m, double(xr[i] * scale));
            for (int i = 0; i < n; ++i) sum += (e[size_t(i)] = std::exp(double(xr[i] * scale) - m));
            for (int i = 0; i < n; ++i) {
              const float g = got[size_t(r * stride + i)];
              differ += !same(g, w[i]);
              if (k.kind != Kind::AllNegInf) far += !(std::fabs(double(g) - e[size_t(i)] / sum) <= 2e-6 + 1e-5 * e[size_t(i)] / sum);
              else far += !std::isnan(g);  // 0/0, as ggml
              ++cases;
            }
            for (int64_t i = n; i < stride; ++i) padding += !same(got[size_t(r * stride + i)], x[size_t(r * stride + i)]);
          }
        }
      const std::string name = std::string(kern.name) + "/" + k.name + "/scale_" + std::to_string(scale);
      report(differ == 0 && padding == 0, "equals_scalar_contract/" + name,
             std::to_string(differ) + " of " + std::to_string(cases) + " differ, padding touched " + std::to_string(padding));
      report(far == 0, "matches_float64/" + name, std::to_string(far) + " of " + std::to_string(cases) + " off");
    }
}

}  // namespace

int main() {
  check(ls::attention_kernels_portable());
  if (const ls::AttentionKernels* k = ls::attention_kernels_avx2()) check(*k);
  if (const ls::AttentionKernels* k = ls::attention_kernels_avx512()) check(*k);
  return g_failures ? 1 : 0;
}
