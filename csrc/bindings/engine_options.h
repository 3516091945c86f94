// The engine options both Python entry points take (BatchEngine(...) in engine_bind.cpp and
// LaneLoop.load_and_run in lane_bind.cpp): checked and filled in one place, so a new option
// or a new check reaches both.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/batch_engine.h"

namespace ls {

// Sizes arrive in MiB from Python (the CLI's unit) and leave as bytes.
inline BatchEngineOptions engine_options(int threads, int ctx_size, int num_slots, int max_batch_tokens,
                                         const std::string& repack_cache_dir, int64_t prompt_cache_mib,
                                         int64_t kv_cache_mib, const std::string& prefix_cache_dir = "",
                                         int64_t prefix_cache_disk_mib = 4096) {
  if (prompt_cache_mib < 0) throw std::invalid_argument("prompt_cache_mib must be >= 0");
  if (kv_cache_mib < 0) throw std::invalid_argument("kv_cache_mib must be >= 0");
  if (prefix_cache_disk_mib < 0) throw std::invalid_argument("prefix_cache_disk_mib must be >= 0");
  BatchEngineOptions o;
  o.threads = threads;
  o.ctx_size = ctx_size;
  o.num_slots = num_slots;
  o.max_batch_tokens = max_batch_tokens;
  o.repack_cache_dir = repack_cache_dir;
  o.kv_cache_bytes = kv_cache_mib << 20;
  o.prompt_cache_bytes = prompt_cache_mib << 20;
  o.prefix_cache_dir = prefix_cache_dir;
  o.prefix_cache_disk_bytes = prefix_cache_disk_mib << 20;
  return o;
}

}  // namespace ls
