// exp(x) of fp32 values vectorised, returning exactly what glibc's expf (its FMA build, used on
// every CPU with AVX2+FMA) returns, so the vector attention kernels give the same softmax bits as
// the scalar std::exp loop they replace (tests/csrc/model/attention_check.cpp compares every
// float in [−104, 0] and the special values).
//
// The algorithm (ARM optimized-routines' expf, which glibc ships): in double precision,
// k = round(x·32/ln2) via the 1.5·2^52 shift trick, r = x·32/ln2 − k (one fused multiply-add),
// 2^(k/32) = table[k mod 32] with k div 32 added to its exponent bits, and
// exp(x) ≈ 2^(k/32) · (C0·r³ + C1·r² + C2·r + 1), evaluated as fma(fma(C0, r, C1), r², fma(C2, r, 1))
// and rounded once to float. Inputs with |x| ≥ 88 take glibc's special cases: x < −0x1.9fe368p6
// (and −inf) → 0; x < −0x1.9d1d9ep6 → the smallest subnormal (glibc's "may underflow" value);
// x > 0x1.62e42ep6 → +inf; NaN → NaN.
#pragma once

#include <cstdint>

namespace ls {
namespace expf_glibc {

constexpr double kInvLn2x32 = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kShift = 0x1.8p+52;                 // rounds to an integer in the low mantissa bits
constexpr double kC0 = 0x1.c6af84b912394p-20;        // minimax 2^(r/32) coefficients (r³, r², r)
constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
constexpr float kUnderflow = -0x1.9fe368p6f;         // below: 0
constexpr float kMayUnderflow = -0x1.9d1d9ep6f;      // below: the smallest subnormal
constexpr float kOverflow = 0x1.62e42ep6f;           // above: +inf

// table[i] = bits(2^(i/32), correctly rounded) − (i << 47), i < 32 (built once, thread-safe).
const int64_t* table();

}  // namespace expf_glibc
}  // namespace ls
