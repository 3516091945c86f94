// The lane's native loop: runs on a Python thread with the GIL released.
//
// Each pass: 1 drain the request ring (REQUEST → one queued sequence per choice, CANCEL,
// SHUTDOWN, LOAD_ADAPTER / UNLOAD_ADAPTER → ADAPTER) → 2 one backend step over every running sequence (continuous batching) → 3 write
// each sequence's text as a protocol-neutral DELTA (request, choice, channel, raw text) and each
// ended choice as DONE → 4 housekeeping (flush pending output, heartbeat, STATS, parent check,
// doorbell, idle wait on the wake semaphore).
// Records of all in-flight requests interleave in the output ring. A full output ring never
// blocks the step: records go to a pending buffer (consecutive deltas of one request/choice/
// channel merged into one record) that is flushed on later passes; requests asking for logprobs
// get LOGPROBS records (text and its scores together) instead of DELTAs; a request whose pending
// output passes max_pending_bytes is cancelled with ERROR(output_overflow).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lane/backend.h"
#include "ring/doorbell.h"
#include "ring/ring.h"
#include "ring/wire.h"

namespace ls::lane {

// A LoRA adapter the lane loads before its HELLO (the pool's current set, also after a respawn).
struct StartupAdapter {
  uint32_t id;
  std::string name, path;
};

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
  size_t max_pending_bytes = 1 << 20;      // per request
  uint64_t prefill_budget_ns_per_token = 20'000'000;  // published as quiet_until for hang checks
  int64_t idle_wait_ns = 50'000'000;       // bounds stop-flag and heartbeat latency when idle
};

class LaneLoop {
 public:
  explicit LaneLoop(const LaneOptions& opts);  // attaches both rings; throws RingError
  // Loads the backend and then each adapter (one ADAPTER record each: a bad file fails only that
  // adapter), completes the handshake (HELLO, or ERROR(load_failed) and return), then loops
  // until stop()/SHUTDOWN/parent death. Returns "shutdown", "stopped", "parent_died" or
  // "load_failed". Call without the GIL.
  std::string load_and_run(const std::string& path, const BackendOptions& backend_opts,
                           const std::vector<StartupAdapter>& adapters = {});
  void stop() { stop_.store(true, std::memory_order_relaxed); }

 private:
  struct RequestState {
    uint32_t num_choices = 0;
    uint32_t num_done = 0;
    size_t pending_bytes = 0;  // this request's bytes in pending_ (an upper bound once flushing)
    bool logprobs = false;     // its text goes out in LOGPROBS records (lane_logprobs.cpp), not DELTAs
  };

  void drain_requests();                                  // phase 1
  void step_backend(uint64_t now_ns);                     // phases 2 and 3
  void housekeeping(uint64_t now_ns);                     // phase 4
  void begin_request(const uint8_t* payload, size_t size_bytes);
  void cancel_request(uint64_t request_id);
  void load_adapter(uint32_t id, const std::string& name, const std::string& path);  // → ADAPTER
  void unload_adapter(uint32_t id);                                                  // → ADAPTER
  void slot_file(const uint8_t* payload, size_t size_bytes);                        // → SLOT_FILE_DONE
  void emit_adapter(uint32_t id, wire::AdapterStatus status, uint64_t bytes, uint64_t load_ns, std::string_view message);
  void finish_choice(const SeqEvent& ev);
  void fail_request(uint64_t request_id, wire::ErrorCode code, std::string_view message);
  void emit_delta(uint64_t request_id, uint32_t choice, wire::Channel channel, std::string_view text, uint64_t now_ns);
  void emit_done(const wire::DoneRecord& done);
  void emit_logprobs(const SeqEvent& ev);  // lane_logprobs.cpp
  // Counts bytes that went to the pending buffer against the request's cap; false: it was failed.
  bool account_pending(uint64_t request_id, size_t queued_bytes);
  // Returns the bytes that went to the pending buffer (0: written to the ring).
  size_t emit(wire::RecordType type, const ring::Piece* pieces, size_t num_pieces, bool mergeable_delta);
  void flush_pending();
  void publish_stats(uint64_t now_ns);
  void ring_bell_if_armed();

  LaneOptions opts_;
  ring::Consumer requests_;
  ring::Producer output_;
  ring::Doorbell wake_;
  ring::Doorbell output_bell_;
  std::unique_ptr<Backend> backend_;
  std::atomic<bool> stop_{false};
  std::string exit_reason_ = "stopped";

  std::unordered_map<uint64_t, RequestState> in_flight_;  // requests with a choice not yet ended
  wire::DecodedRequest req_;   // decode buffer, reused
  GenerationRequest gen_;      // per-choice copy, reused
  std::vector<DroppedSeq> dropped_;  // cancel_request's buffer, reserved: a cancel allocates nothing

  // Pending output: records [u32 payload_bytes][u32 type][payload], unpadded, oldest first.
  std::vector<uint8_t> pending_;
  size_t pending_off_ = 0;            // first unflushed byte
  size_t last_delta_off_ = SIZE_MAX;  // trailing pending DELTA that later deltas may merge into
  uint64_t last_parent_check_ns_ = 0;

  wire::StatsRecord stats_{};
  uint64_t last_stats_ns_ = 0;
  bool stats_dirty_ = false;
};

}  // namespace ls::lane
