#include "common/cpu_features.h"

#include <cpuid.h>
#include <setjmp.h>
#include <signal.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ls {
namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

// Probes: each executes one instruction of its class on data the compiler cannot fold away.
__attribute__((target("avx2,fma,f16c"), noinline)) int probe_avx2(const volatile int* seed) {
  __m256i a = _mm256_set1_epi32(*seed);
  __m256i b = _mm256_add_epi32(a, _mm256_set1_epi32(3));
  __m256 f = _mm256_fmadd_ps(_mm256_set1_ps(float(*seed)), _mm256_set1_ps(2.f), _mm256_set1_ps(1.f));
  __m128i h = _mm256_cvtps_ph(f, 0);
  __m256 back = _mm256_cvtph_ps(h);
  return _mm256_extract_epi32(b, 0) + int(_mm256_cvtss_f32(back));
}

__attribute__((target("avx512f,avx512bw,avx512vl"), noinline)) int probe_avx512(const volatile int* seed) {
  __m512i a = _mm512_set1_epi16(short(*seed));
  __m512i b = _mm512_adds_epi16(a, a);  // BW instruction on zmm
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(b));
}

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int probe_avx512_vnni(const volatile int* seed) {
  __m512i acc = _mm512_setzero_si512();
  __m512i u = _mm512_set1_epi8(char(*seed));
  __m512i s = _mm512_set1_epi8(2);
  acc = _mm512_dpbusd_epi32(acc, u, s);
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(acc));
}

__attribute__((target("avx2,avxvnni"), noinline)) int probe_avx_vnni(const volatile int* seed) {
  __m256i acc = _mm256_setzero_si256();
  __m256i u = _mm256_set1_epi8(char(*seed));
  __m256i s = _mm256_set1_epi8(2);
  acc = _mm256_dpbusd_avx_epi32(acc, u, s);
  return _mm256_extract_epi32(acc, 0);
}

// Linux's opt-in for the AMX tile data state (arch/x86/include/uapi/asm/prctl.h); once granted it
// holds for every thread of the process.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;
bool request_amx_permission() {
#ifdef SYS_arch_prctl
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

__attribute__((target("amx-tile,amx-int8"), noinline)) int probe_amx_int8(const volatile int* seed) {
  struct alignas(64) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg = {};
  cfg.palette = 1;
  for (int t = 0; t < 3; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  alignas(64) int8_t a[16 * 64], b[16 * 64];
  alignas(64) int32_t c[16 * 16];
  for (int i = 0; i < 16 * 64; ++i) a[i] = int8_t(*seed), b[i] = 2;
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbssd(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];  // 64 products of seed·2
}

// Always faults: proves the probe harness turns SIGILL into "not usable" instead of a crash.
__attribute__((noinline)) int probe_ud2(const volatile int*) {
  __asm__ volatile("ud2");
  return 0;
}

sigjmp_buf g_probe_jmp;
void on_sigill(int) { siglongjmp(g_probe_jmp, 1); }

// Runs `probe` with a temporary SIGILL handler; true if it executed and returned `expect`.
// Called only during the one-time static initialisation below (serialised by a mutex).
bool executes(int (*probe)(const volatile int*), int expect) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  struct sigaction sa = {}, old = {};
  sa.sa_handler = on_sigill;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGILL, &sa, &old);
  volatile bool ok = false;
  volatile int seed = 1;
  if (sigsetjmp(g_probe_jmp, 1) == 0) {
    ok = probe(&seed) == expect;
  }
  sigaction(SIGILL, &old, nullptr);
  return ok;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.adv_fma = c & (1u << 12);
  f.adv_f16c = c & (1u << 29);
  const bool avx = c & (1u << 28);
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  const bool amx_os = (xcr0 & 0x60000) == 0x60000;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.adv_avx2 = avx && ymm_os && (b & (1u << 5));
    f.adv_avx512f = zmm_os && (b & (1u << 16));
    f.adv_avx512bw = zmm_os && (b & (1u << 30));
    f.adv_avx512vl = zmm_os && (b & (1u << 31));
    f.adv_avx512_vnni = zmm_os && (c & (1u << 11));
    f.adv_amx_int8 = amx_os && (d & (1u << 25));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.adv_avx_vnni = ymm_os && (a & (1u << 4));
  f.adv_fma = f.adv_fma && ymm_os;
  f.adv_f16c = f.adv_f16c && ymm_os;

  // Expected results are computed by hand from the probe definitions with seed = 1.
  if (f.adv_avx2 && f.adv_fma && f.adv_f16c) f.avx2 = executes(probe_avx2, 4 + 3);
  if (f.avx2 && f.adv_avx512f && f.adv_avx512bw && f.adv_avx512vl)
    f.avx512 = executes(probe_avx512, (2 << 16) | 2);
  if (f.avx512 && f.adv_avx512_vnni) f.avx512_vnni = executes(probe_avx512_vnni, 8);
  if (f.avx2 && f.adv_avx_vnni) f.avx_vnni = executes(probe_avx_vnni, 8);
  // LANESERVE_AMX=0: the process never asks for the tile state nor runs a tile instruction.
  const char* amx_env = std::getenv("LANESERVE_AMX");
  const bool amx_allowed = !(amx_env && std::strcmp(amx_env, "0") == 0);
  if (amx_allowed && f.avx512_vnni && f.adv_amx_int8 && request_amx_permission())
    f.amx_int8 = executes(probe_amx_int8, 128);
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool sigill_probe_self_test() { return !executes(probe_ud2, 0); }

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.avx512, "avx512");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_int8, "amx_int8");
  return s.empty() ? "scalar" : s;
}

}  // namespace ls
