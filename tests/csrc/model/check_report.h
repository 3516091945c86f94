// Result lines of the standalone checkers (*_check.cpp): "ok NAME" or "FAIL NAME: why", which
// native_build.run_checker reads; the checker's exit status is g_failures != 0.
#pragma once

#include <cstdio>
#include <string>

inline int g_failures = 0;

inline void report(bool ok, const std::string& name, const std::string& why = "") {
  if (ok) std::printf("ok %s\n", name.c_str());
  else std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
  if (!ok) ++g_failures;
  std::fflush(stdout);
}
