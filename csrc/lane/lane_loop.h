// The lane's native loop: runs on a Python thread with the GIL released.
//
// Each pass: 1 drain the request ring (REQUEST / CANCEL / SHUTDOWN) → 2 step the active
// generation once → 3 write its delta (or DONE) into the output ring → 4 housekeeping
// (flush pending output, heartbeat, parent check, doorbell, idle wait on the wake semaphore).
// One request at a time; its choices run one after another (choice i seeded with seed + i).
// A full output ring never blocks the step: records go to a pending buffer (consecutive deltas
// of one choice merged into one record) that is flushed on later passes; past
// max_pending_bytes the request is cancelled with an ERROR(output_overflow).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lane/backend.h"
#include "ring/doorbell.h"
#include "ring/ring.h"
#include "ring/wire.h"

namespace ls::lane {

struct LaneOptions {
  int request_fd = -1;
  size_t request_segment_bytes = 0;
  int output_fd = -1;
  size_t output_segment_bytes = 0;
  std::string wake_semaphore;              // the gateway posts it after arming-aware writes
  std::string output_bell_kind = "none";   // "eventfd" | "semaphore" | "none"
  int output_bell_fd = -1;
  std::string output_bell_name;
  int expected_ppid = 0;                   // 0: no parent check
  size_t max_pending_bytes = 1 << 20;
  uint64_t prefill_budget_ns_per_token = 20'000'000;  // published as quiet_until for hang checks
  int64_t idle_wait_ns = 50'000'000;       // bounds stop-flag and heartbeat latency when idle
};

class LaneLoop {
 public:
  explicit LaneLoop(const LaneOptions& opts);  // attaches both rings; throws RingError
  // Loads the backend, completes the handshake (HELLO, or ERROR(load_failed) and return), then
  // loops until stop()/SHUTDOWN/parent death. Returns "shutdown", "stopped", "parent_died" or
  // "load_failed". Call without the GIL.
  std::string load_and_run(const std::string& path, int threads, int ctx_size);
  void stop() { stop_.store(true, std::memory_order_relaxed); }

 private:
  void drain_requests();                                  // phase 1
  void step_active(uint64_t now_ns);                      // phases 2 and 3
  void housekeeping(uint64_t now_ns);                     // phase 4
  void begin_request(const uint8_t* payload, size_t size_bytes);
  void start_choice(uint32_t choice);
  void finish_choice(wire::FinishCode reason);
  void fail_request(uint64_t request_id, wire::ErrorCode code, std::string_view message);
  void emit_delta(std::string_view text, uint64_t now_ns);
  void emit(wire::RecordType type, const ring::Piece* pieces, size_t num_pieces, bool mergeable_delta);
  void flush_pending();
  void ring_bell_if_armed();

  LaneOptions opts_;
  ring::Consumer requests_;
  ring::Producer output_;
  ring::Doorbell wake_;
  ring::Doorbell output_bell_;
  std::unique_ptr<Backend> backend_;
  std::atomic<bool> stop_{false};
  std::string exit_reason_ = "stopped";

  // Active request (one at a time).
  bool active_ = false;
  bool first_step_ = false;
  uint32_t choice_ = 0;
  wire::DecodedRequest req_;
  GenerationRequest gen_;
  std::string delta_bytes_;  // prefix + escaped text + suffix; reused, never shrinks

  // Pending output: records [u32 payload_bytes][u32 type][payload], unpadded, oldest first.
  std::vector<uint8_t> pending_;
  size_t pending_off_ = 0;          // first unflushed byte
  size_t request_pending_start_ = 0;  // where the active request's pending records begin
  size_t last_delta_off_ = SIZE_MAX;  // mergeable trailing DELTA of the active choice, if any
  uint64_t last_parent_check_ns_ = 0;
};

}  // namespace ls::lane
