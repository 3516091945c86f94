// Wire format of laneserve rings: the ONE definition of record types and payload layouts.
// Python mirror: lanes/wire.py; tests/csrc/ring/test_wire_agreement.py checks they agree
// (the _ring extension exports every size and offset below).
//
// All fields little-endian, fixed width, read with memcpy (records are only 8-byte aligned and
// variable sections are unaligned). Version bumps go in ring.h kVersion.
//
// Request ring (gateway → lane):  REQUEST, CANCEL, SHUTDOWN
// Output ring  (lane → gateway):  HELLO, DELTA, DONE, ERROR
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ring/ring.h"
#include "sampler/params.h"

namespace ls::wire {

enum class RecordType : uint32_t {
  Pad = ring::kPadType,
  Request = 1,
  Cancel = 2,
  Shutdown = 3,
  Hello = 16,
  Delta = 17,
  Done = 18,
  Error = 19,
};

// REQUEST payload: RequestHeader, then in order
//   int32 prompt_ids[num_prompt_ids]
//   LogitBiasEntry[num_logit_bias]
//   num_stop × { u32 size_bytes; utf8 bytes }
//   num_choices × { u32 prefix_bytes; u32 suffix_bytes; prefix; suffix }   (framing per choice)
struct RequestHeader {
  uint64_t request_id;
  uint64_t seed;
  uint32_t num_choices;
  uint32_t flags;  // kRequestHasSeed | kRequestIgnoreEos
  float temperature;
  float top_p;
  float min_p;
  float presence_penalty;
  float frequency_penalty;
  float repetition_penalty;
  int32_t top_k;
  int32_t max_tokens;
  int32_t min_tokens;
  int32_t repeat_last_n;
  uint32_t num_prompt_ids;
  uint32_t num_logit_bias;
  uint32_t num_stop;
  uint32_t reserved;
};
constexpr uint32_t kRequestHasSeed = 1u;
constexpr uint32_t kRequestIgnoreEos = 2u;

struct LogitBiasEntry {
  int32_t token_id;
  float bias;
};

struct CancelRecord {
  uint64_t request_id;
};

// Readiness handshake: first record a lane writes after loading its model.
struct HelloRecord {
  uint32_t pid;
  int32_t n_ctx;
  int32_t n_vocab;
  uint32_t wire_version;
  uint64_t load_ns;
};

// DELTA payload: DeltaHeader + bytes ready to write to the HTTP response
// (framing prefix + JSON-string-escaped text + suffix; merged deltas are concatenated events).
struct DeltaHeader {
  uint64_t request_id;
  uint32_t choice;
  uint32_t num_tokens;  // deltas merged into this record (≥ 1)
  uint64_t emit_ns;     // CLOCK_MONOTONIC when the first merged delta was produced
};

constexpr uint32_t kDoneLastChoice = 1u;  // the request is over; the lane is free
struct DoneRecord {
  uint64_t request_id;
  uint32_t choice;
  uint32_t finish_reason;  // FinishCode
  uint32_t prompt_tokens;
  uint32_t completion_tokens;
  uint64_t prefill_ns;
  uint64_t decode_ns;
  uint32_t flags;  // kDoneLastChoice
  uint32_t reserved;
};

// ERROR payload: ErrorHeader + UTF-8 message. Always ends the request (request_id 0: the lane).
struct ErrorHeader {
  uint64_t request_id;
  uint32_t code;  // ErrorCode
  uint32_t reserved;
};

enum class FinishCode : uint32_t { None = 0, Stop = 1, Length = 2, Cancelled = 3, Error = 4 };
enum class ErrorCode : uint32_t {
  LoadFailed = 1,      // the lane could not load its model (handshake failure)
  BadRequest = 2,      // the engine refused the request (context, ids, ...)
  OutputOverflow = 3,  // the per-request pending output passed its cap (gateway not reading)
  EngineError = 4,     // the engine threw mid-generation
  ProtocolError = 5,   // undecodable record
};

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ChoiceFraming {
  std::string prefix, suffix;
};

// A decoded REQUEST (allocates: done once per request, never per token).
struct DecodedRequest {
  uint64_t request_id = 0;
  SamplingParams sampling;
  int32_t max_tokens = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> stop;
  std::vector<ChoiceFraming> framings;  // size = number of choices
};

// Throws WireError naming the problem if the payload is truncated or inconsistent.
void decode_request(const uint8_t* payload, size_t size_bytes, DecodedRequest& out);

// Appends `text` as JSON string content (no quotes): escapes ", \, control chars < 0x20 and
// U+2028/U+2029; invalid UTF-8 becomes \ufffd, so the result is always valid JSON.
void json_escape_append(std::string& out, std::string_view text);

}  // namespace ls::wire
