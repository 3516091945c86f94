// Checks ls::silu_mul (csrc/model/silu.cpp), the dispatched path, against the portable loop
// a / (1 + expf(−a)) · b bit for bit (NaN: any NaN), over every STRIDE-th float of [0, 200] with both
// signs (exp's argument crosses glibc's overflow and underflow limits) and the special values.
// Usage: silu_check STRIDE
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check_report.h"
#include "model/ops.h"

static float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static bool same(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

// Compares the two paths on xs for each multiplier; adds the mismatches to *mismatches (printing the first 5).
static void compare(const std::vector<float>& xs, float mul, long* mismatches) {
  std::vector<float> a = xs, b(xs.size(), mul), want = xs;
  ls::silu_mul(a.data(), b.data(), int64_t(a.size()));
  ls::silu_mul_portable(want.data(), b.data(), int64_t(want.size()));
  for (size_t i = 0; i < xs.size(); ++i)
    if (!same(a[i], want[i]) && ++*mismatches <= 5)
      std::printf("mismatch x=%a b=%a got %a want %a\n", xs[i], mul, a[i], want[i]);
}

int main(int argc, char** argv) {
  const uint32_t stride = argc > 1 ? uint32_t(std::atoi(argv[1])) : 101;
  const float specials[] = {88.0f, -88.0f, 0x1.62e42ep6f, -0x1.62e42ep6f, std::nextafter(0x1.62e42ep6f, 100.0f),
                            -std::nextafter(0x1.62e42ep6f, 100.0f), 0x1.9fe368p6f, 0x1.9d1d9ep6f, 1e30f, -1e30f,
                            1.0f / 0.0f, -1.0f / 0.0f, std::nanf(""), 0.0f, -0.0f, 1e-40f, -1e-40f};
  for (float mul : {1.0f, -0.37f, 3e38f}) {
    long mismatches = 0, n = 0;
    std::vector<float> xs;
    const uint32_t end = float_bits(200.0f);
    for (uint64_t u = 0; u <= end; u += stride) {  // in chunks, so stride 1 (every float) fits in memory
      xs.push_back(bits_to_float(uint32_t(u)));
      xs.push_back(-bits_to_float(uint32_t(u)));
      if (xs.size() >= (1u << 20) || u + stride > end) {
        n += long(xs.size());
        compare(xs, mul, &mismatches);
        xs.clear();
      }
    }
    xs.assign(std::begin(specials), std::end(specials));  // odd count: the vector path's scalar tail runs too
    n += long(xs.size());
    compare(xs, mul, &mismatches);
    report(mismatches == 0, "sweep b=" + std::to_string(mul), std::to_string(mismatches) + " of " + std::to_string(n) + " differ");
  }
  return g_failures ? 1 : 0;
}
