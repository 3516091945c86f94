// DeltaRelay: the gateway side of a lane's output ring — demultiplexes the protocol-neutral DELTA
// records of every in-flight request and frames them per protocol, with no Python per token.
//
// The gateway registers a *route* per request: per (choice, channel) a framing prefix and suffix
// (an OpenAI SSE event around a JSON string, an Ollama NDJSON line, …; empty for collect mode).
// A DELTA's text is JSON-escaped here and becomes, by the framing's kind:
//   kPlain     prefix + escaped + suffix;
//   kTwice     prefix + escaped + middle + escaped + suffix (one delta filling two JSON fields,
//              e.g. OpenAI's "reasoning_content" and "reasoning");
//   kNumbered  prefix + N + middle + escaped + suffix, N the route's event counter in decimal,
//              incremented per event (the Responses API's `sequence_number`, which counts every
//              event of a response: the gateway numbers its own events around the relay's from
//              route_stats().next_number).
// A channel without framing uses channel 0's. Per route mode:
//   direct  — a socket is attached and nothing of the gateway's own is pending on it: events go
//             out as HTTP/1.1 chunks (`<hex>\r\n` event `\r\n`), one non-blocking send per
//             route per pump; a partial send turns direct off and hands the tail back;
//   queued  — events are handed to Python (merged per request/choice) for the request's stream;
//   collect — escaped text accumulates per (choice, channel) until take_text() (non-stream).
// Records of unknown requests (cancelled or finished) are dropped by request id.
//
// Phases of pump(): 1 drain the doorbell eventfd; 2 walk records up to the first non-DELTA record
// (returned to the caller, so a DONE is handled only after every earlier delta) or max_records;
// 3 send each touched direct route's buffer. The caller copies what it needs, then finish()
// releases the walked records (control points into ring memory until then).
// Lifetimes: route buffers are reserved at add_route and reused; queued_/scratch_ grow to their
// high-water mark once. Not thread-safe: the gateway's event-loop thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ring/ring.h"
#include "ring/wire.h"

namespace ls::ring {

class DeltaRelay {
 public:
  enum Kind : uint8_t { kPlain = 0, kTwice = 1, kNumbered = 2 };
  struct Framing {
    uint32_t choice, channel;
    std::string prefix, suffix;
    std::string middle;  // kTwice: between the two copies of the text; kNumbered: after the number
    Kind kind = kPlain;
    uint64_t first_number = 0;  // kNumbered: the route's counter starts here
  };
  struct RouteStats {
    uint64_t num_direct_deltas = 0;
    uint64_t first_send_ns = 0;  // CLOCK_MONOTONIC of the first direct send, 0: none
    uint64_t next_number = 0;    // the number the route's next numbered event would carry
  };
  struct Queued {  // framed events for a queued route: queued_bytes()[offset, offset + size)
    uint64_t request_id;
    uint32_t choice;
    size_t offset, size;
  };
  struct Partial {  // a direct send that did not complete: partial_bytes()[offset, offset + size)
    uint64_t request_id;
    size_t offset, size;  // the unsent tail (empty after an error)
    int send_errno;       // 0: the socket was full (EAGAIN); else the connection is unusable
  };
  struct Result {
    uint32_t control_type = 0;         // 0, or the non-DELTA record that ended the walk ...
    const uint8_t* control = nullptr;  // ... its payload (valid until finish())
    size_t control_bytes = 0;
    bool full = false;                 // stopped at max_records: more may be waiting
  };

  // keep_text: a streamed route also keeps each choice's escaped content text for take_text()
  // (Ollama's /api/generate returns the conversation's tokens at the end).
  void add_route(uint64_t request_id, uint32_t num_choices, const std::vector<Framing>& framings, bool collect,
                 bool keep_text = false);
  bool remove_route(uint64_t request_id);
  void set_socket(uint64_t request_id, int fd);     // -1: detach (direct off)
  void set_direct(uint64_t request_id, bool direct);  // only with a socket attached
  // Collect mode: escaped text of (choice, channel) so far; clears it.
  std::string take_text(uint64_t request_id, uint32_t choice, uint32_t channel = 0);
  RouteStats route_stats(uint64_t request_id) const;

  Result pump(Consumer& consumer, int bell_fd, size_t max_records);
  void finish(Consumer& consumer) { consumer.commit(end_pos_); }

  const std::vector<Queued>& queued() const { return queued_; }
  const std::string& queued_bytes() const { return queued_bytes_; }
  const std::vector<Partial>& partials() const { return partials_; }
  const std::string& partial_bytes() const { return partial_bytes_; }
  size_t num_routes() const { return routes_.size(); }

 private:
  struct Route {
    uint32_t num_choices = 0;
    bool collect = false;
    bool keep_text = false;
    bool direct = false;
    int fd = -1;
    bool touched = false;
    std::vector<std::string> prefix, suffix;  // [num_choices * kNumChannels]
    std::vector<std::string> middle;          // [num_choices * kNumChannels], used by kTwice / kNumbered
    std::vector<Kind> kind;                   // [num_choices * kNumChannels]
    std::vector<std::string> collected;       // collect / keep_text, [num_choices * kNumChannels]
    std::string out;                          // direct mode: chunks of this pump
    uint64_t num_direct_deltas = 0, first_send_ns = 0;
    uint64_t next_number = 0;  // kNumbered events framed so far + the first framing's first_number
  };
  void frame(Route& route, uint64_t request_id, uint32_t choice, uint32_t channel, std::string_view text);
  void send(uint64_t request_id, Route& route);

  std::unordered_map<uint64_t, Route> routes_;
  std::vector<std::pair<uint64_t, Route*>> touched_;
  std::vector<Queued> queued_;
  std::string queued_bytes_;
  std::vector<Partial> partials_;
  std::string partial_bytes_;
  std::string scratch_;  // escaped text of one delta
  char number_[24];      // kNumbered: the decimal event number of one delta
  uint64_t end_pos_ = 0;
};

}  // namespace ls::ring
