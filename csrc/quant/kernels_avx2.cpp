// AVX2 + FMA + F16C path (the portable fast baseline): the shared 256-bit kernels with
// maddubs/madd integer dots. Standard headers first, then the target pragma (no COMDAT leak).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/quant_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "quant/rows_driver.h"
#include "quant/il_driver.h"

namespace ls::quant {
namespace {
#define LS_VNNI 0
#include "quant/kernels_ymm.h"
#include "quant/kernels_lowbit_ymm.h"
#include "quant/il_ymm.h"
#include "quant/il_kquant_ymm.h"
#include "quant/il_lowbit_ymm.h"
#undef LS_VNNI
}  // namespace

void fill_avx2(KernelTable& t) {
  fill_ymm(t);
  fill_lowbit_ymm(t);
  fill_il_ymm(t);
  fill_kil_ymm(t);
  fill_lowbit_il_ymm(t);
}

}  // namespace ls::quant

#pragma GCC pop_options
