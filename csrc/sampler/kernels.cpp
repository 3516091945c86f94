#include "sampler/kernels.h"

#include <atomic>
#include <cstring>
#include <limits>

#include "common/cpu_features.h"

namespace ls::sampler_kernels {

// Implemented in kernels_avx2.cpp (compiled with per-function target attributes).
float max_of_avx2(const float* x, size_t n);
size_t argmax_avx2(const float* x, size_t n);
double exp_sum_avx2(const float* x, size_t n, float shift, float scale, float* out);
size_t gather_avx2(const float* x, size_t n, float threshold, int32_t* ids, float* vals);
double block_sum_avx2(const float* w, size_t n);
size_t count_ge_avx2(const float* x, size_t n, float threshold);

namespace {

std::atomic<bool> g_force_portable{false};

bool avx2() {
  static const bool v = cpu_features().avx2;
  return v && !g_force_portable.load(std::memory_order_relaxed);
}

double block_sum_portable(const float* w, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += w[i];
  return s;
}

}  // namespace

// Cephes-style expf for x <= 0: Cody-Waite reduction by ln2 then a degree-5 polynomial
// (relative error ~2e-7, plenty for sampling). glibc expf costs ~1 ms at 262k vocab.
float exp_nonpos(float x) {
  if (!(x >= -87.0f)) return 0.0f;  // underflow, -inf and NaN all give weight 0
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to nearest integer
  float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

void force_portable(bool on) { g_force_portable.store(on); }
bool using_avx2() { return avx2(); }

float max_of(const float* x, size_t n) {
  if (avx2()) return max_of_avx2(x, n);
  float m = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

size_t argmax(const float* x, size_t n) {
  if (avx2()) return argmax_avx2(x, n);
  float m = -std::numeric_limits<float>::infinity();
  size_t best = n;
  for (size_t i = 0; i < n; ++i)
    if (x[i] > m || (best == n && x[i] == m)) m = x[i], best = i;
  return best == n ? 0 : best;
}

double exp_sum(const float* x, size_t n, float shift, float scale, float* out) {
  if (avx2()) return exp_sum_avx2(x, n, shift, scale, out);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += (out[i] = exp_nonpos((x[i] - shift) * scale));
  return total;
}

size_t gather(const float* x, size_t n, float threshold, int32_t* ids, float* vals) {
  if (avx2()) return gather_avx2(x, n, threshold, ids, vals);
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (x[i] >= threshold) ids[k] = static_cast<int32_t>(i), vals[k++] = x[i];
  return k;
}

size_t count_ge(const float* x, size_t n, float threshold) {
  if (avx2()) return count_ge_avx2(x, n, threshold);
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) k += x[i] >= threshold ? 1 : 0;
  return k;
}

size_t find_cumulative(const float* w, size_t n, double target) {
  // Skip whole blocks by their (vectorized) sum first: a running sum over 262k weights is a
  // serial dependency chain of ~1 ms.
  constexpr size_t kBlock = 512;
  const bool fast = avx2();
  double cum = 0.0;
  size_t i = 0;
  while (n - i > kBlock) {
    const double bs = fast ? block_sum_avx2(w + i, kBlock) : block_sum_portable(w + i, kBlock);
    if (cum + bs > target) break;  // the pick is inside this block (or rounding says so)
    cum += bs;
    i += kBlock;
  }
  // Element by element from here. Only elements with w > 0 can be picked.
  size_t last_nz = n;
  for (; i < n; ++i) {
    if (!(w[i] > 0.0f)) continue;
    last_nz = i;
    cum += w[i];
    if (cum > target) return i;
  }
  if (last_nz != n) return last_nz;
  for (size_t k = n; k-- > 0;)  // rounding skipped every block: last non-zero weight
    if (w[k] > 0.0f) return k;
  return 0;
}

}  // namespace ls::sampler_kernels
