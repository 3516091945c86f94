#include "model/ops.h"

#include <cmath>

// One clone for AVX2+FMA machines, one portable; the dynamic loader picks via ifunc.
// Not under ThreadSanitizer: gcc instruments the ifunc resolver too, and the resolver runs while
// the loader relocates this library, before the TSan hooks it calls are resolved — importing
// lanes._runtime jumped to an unrelocated address (found by .ci/sanitize, see docs/sanitizers.md).
#if defined(__SANITIZE_THREAD__)
#define LS_MULTIVERSION
#else
#define LS_MULTIVERSION __attribute__((target_clones("arch=haswell", "default")))
#endif

namespace ls {

LS_MULTIVERSION void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(sum / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

LS_MULTIVERSION void add_f32(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

LS_MULTIVERSION void scale_f32(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}


}  // namespace ls
