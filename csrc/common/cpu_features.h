// Run-time CPU capability detection.
//
// "advertised" comes from cpuid + XGETBV (the OS must have enabled the register state);
// "usable" additionally requires that a representative instruction of that kind actually
// executed in this process without SIGILL. Some VMs advertise AMX and then fault on it,
// so nothing is trusted on cpuid alone. AMX tile data also needs the kernel's per-process
// permission (arch_prctl ARCH_REQ_XCOMP_PERM), requested here before its probe.
#pragma once

#include <string>

namespace ls {

struct CpuFeatures {
  // cpuid/XGETBV view
  bool adv_avx2 = false, adv_fma = false, adv_f16c = false;
  bool adv_avx512f = false, adv_avx512bw = false, adv_avx512vl = false, adv_avx512_vnni = false;
  bool adv_avx_vnni = false, adv_amx_int8 = false;
  // executed successfully
  bool avx2 = false;         // AVX2 + FMA + F16C together (the portable fast path)
  bool avx512 = false;       // AVX-512 F + BW + VL
  bool avx512_vnni = false;  // vpdpbusd on zmm
  bool avx_vnni = false;     // VEX-encoded vpdpbusd on ymm
  bool amx_int8 = false;     // tile permission granted, then ldtilecfg + tdpbssd + tilestored ran
};

// Detected once (thread-safe static init) and cached for the process lifetime.
const CpuFeatures& cpu_features();

// Executes an always-illegal instruction (ud2) under the probe harness; true when the
// SIGILL was caught and reported as "not usable" (the process survives).
bool sigill_probe_self_test();

// Human readable summary, e.g. "avx2 avx512 avx512_vnni avx_vnni".
std::string cpu_features_string();

}  // namespace ls
