// Checks ls::gelu_tanh_mul and ls::gelu_tanh (csrc/model/gelu.cpp), the dispatched paths and the
// portable ones, against ggml's GeGLU / GELU recipe written out independently here: x rounded to
// fp16, gelu of that computed in fp32 with tanh and rounded to fp16, times b (GeGLU); 0 for x ≤ −10
// and x·b (x for the plain GELU) for x ≥ 10.
// Usage: gelu_check STRIDE  (every STRIDE-th float of [0, 12] with both signs, plus specials).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check_report.h"
#include "common/fp16.h"
#include "model/ops.h"

static float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static bool same(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

static float reference(float x, float b) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x * b;
  const float h = ls::fp16_round(x);
  const float g = 0.5f * h * (1.0f + std::tanh(0.7978845608028654f * h * (1.0f + 0.044715f * h * h)));
  return ls::fp16_round(g) * b;
}

// ggml's plain GELU (the vision encoder's): b = 1 without the multiply (x, not x·1, above 10: the same).
static float reference_plain(float x) { return reference(x, 1.0f); }

static void check_plain(const std::vector<float>& xs);

static void check_sweep(uint32_t stride) {
  std::vector<float> xs;
  for (uint32_t u = 0; u <= float_bits(12.0f); u += stride) {
    xs.push_back(bits_to_float(u));
    xs.push_back(-bits_to_float(u));
  }
  for (float s : {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f), 1e30f, -1e30f,
                  1.0f / 0.0f, -1.0f / 0.0f, std::nanf(""), 65519.0f, 65520.0f, 3.0f})
    xs.push_back(s);  // odd count: the vector path's scalar tail runs too
  using Fn = void (*)(float*, const float*, int64_t);
  const struct { const char* name; Fn fn; } paths[] = {{"dispatched", ls::gelu_tanh_mul},
                                                      {"portable", ls::gelu_tanh_mul_portable}};
  for (const auto& path : paths)
    for (float mul : {1.0f, -0.37f}) {
      std::vector<float> a = xs, b(xs.size(), mul);
      path.fn(a.data(), b.data(), int64_t(a.size()));
      long mismatches = 0;
      for (size_t i = 0; i < xs.size(); ++i)
        if (!same(a[i], reference(xs[i], mul)) && ++mismatches <= 5)
          std::printf("mismatch %s x=%a b=%a got %a want %a\n", path.name, xs[i], mul, a[i], reference(xs[i], mul));
      report(mismatches == 0, "sweep " + std::string(path.name) + " b=" + std::to_string(mul),
             std::to_string(mismatches) + " of " + std::to_string(xs.size()) + " differ");
    }
  check_plain(xs);
}

static void check_plain(const std::vector<float>& xs) {
  using Fn = void (*)(float*, int64_t);
  const struct { const char* name; Fn fn; } paths[] = {{"dispatched", ls::gelu_tanh}, {"portable", ls::gelu_tanh_portable}};
  for (const auto& path : paths) {
    std::vector<float> a = xs;
    path.fn(a.data(), int64_t(a.size()));
    long mismatches = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      if (!same(a[i], reference_plain(xs[i])) && ++mismatches <= 5)
        std::printf("mismatch plain %s x=%a got %a want %a\n", path.name, xs[i], a[i], reference_plain(xs[i]));
    report(mismatches == 0, "plain " + std::string(path.name),
           std::to_string(mismatches) + " of " + std::to_string(xs.size()) + " differ");
  }
}

int main(int argc, char** argv) {
  check_sweep(argc > 1 ? uint32_t(std::atoi(argv[1])) : 101);
  return g_failures ? 1 : 0;
}
