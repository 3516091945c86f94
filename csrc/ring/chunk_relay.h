// ChunkRelay: moves one request's DELTA records from a lane's output ring straight into its
// client's socket as HTTP/1.1 chunks — the gateway's per-token path with no Python objects.
//
// Each DELTA payload is already a complete SSE event (the lane wrote prefix + escaped text +
// suffix), so relaying is framing only: `<hex size>\r\n` + event + `\r\n`. The iovecs point
// into the ring's shared memory, which is released (Consumer::commit) only after sendmsg has
// copied it into the socket buffer: no copy and no allocation per token.
//
// Lifetimes: `headers_` and `iov_` belong to the relay and are rebuilt on every call; `control`
// in Result points into ring memory and is valid until finish() commits.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "ring/ring.h"

namespace ls::ring {

class ChunkRelay {
 public:
  static constexpr size_t kMaxDeltas = 64;     // deltas per sendmsg (3 iovecs each, far below IOV_MAX)
  static constexpr size_t kChunkHeaderBytes = 20;  // 16 hex digits + "\r\n", with room to spare

  struct Result {
    uint32_t num_deltas = 0;        // deltas of the request in this batch (sent or left unsent)
    size_t unsent_bytes = 0;        // bytes it did not take (socket buffer full): copy_unsent()
    int send_errno = 0;             // a send failure other than EAGAIN: the connection is unusable
    uint32_t control_type = 0;      // 0, or the non-DELTA record that ended the batch ...
    const uint8_t* control = nullptr;  // ... its payload (valid until finish())
    size_t control_bytes = 0;
    bool full = false;              // the batch stopped at a limit: more records may be waiting
  };

  // Phases: 1 drain the doorbell eventfd (bell_fd ≥ 0); 2 collect DELTA records of request_id
  // (other requests' deltas are stale and dropped) up to the first non-DELTA record, kMaxDeltas
  // or max_records; 3 one non-blocking sendmsg(MSG_NOSIGNAL) of the chunks. The caller then
  // copies what it needs (copy_unsent, control) and calls finish().
  Result relay(Consumer& consumer, int bell_fd, int sock_fd, uint64_t request_id, size_t max_records);
  // Copies the unsent tail of the last relay() into dst (Result::unsent_bytes bytes).
  void copy_unsent(uint8_t* dst) const;
  // Phase 4: release the visited records to the producer.
  void finish(Consumer& consumer) { consumer.commit(end_pos_); }

 private:
  char headers_[kMaxDeltas][kChunkHeaderBytes];
  iovec iov_[kMaxDeltas * 3];
  size_t num_iov_ = 0;
  size_t sent_bytes_ = 0;
  uint64_t end_pos_ = 0;
};

}  // namespace ls::ring
