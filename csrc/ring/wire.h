// Wire format of laneserve rings: the ONE definition of record types and payload layouts.
// Python mirror: lanes/wire.py; tests/csrc/ring/test_wire_agreement.py checks they agree
// (the _ring extension exports every size and offset below).
//
// All fields little-endian, fixed width, read with memcpy (records are only 8-byte aligned and
// variable sections are unaligned). Version bumps go in ring.h kVersion.
//
// Request ring (gateway → lane):  REQUEST, CANCEL, SHUTDOWN; audio lanes: AUDIO_REQUEST
// Output ring  (lane → gateway):  HELLO, DELTA, DONE, ERROR, STATS, EMBEDDING, LOGPROBS; audio: TRANSCRIPT
//
// Output is protocol-neutral: a DELTA carries raw UTF-8 text of one (request, choice, channel);
// the gateway's native relay (ring/delta_relay.h) escapes and frames it per protocol. Records of
// many requests interleave in one output ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/reasoning_splitter.h"
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
  Stats = 20,
  Embedding = 21,
  Logprobs = 22,
  AudioRequest = 4,  // audio lanes only (see "Audio lanes" below)
  Transcript = 30,
};

// REQUEST payload: RequestHeader, then in order
//   int32 prompt_ids[num_prompt_ids]
//   u32 prompt_lengths[num_choices]   (kRequestEmbed only: choice i embeds the next
//                                      prompt_lengths[i] ids; each ≥ 1, summing to num_prompt_ids)
//   LogitBiasEntry[num_logit_bias]
//   num_stop × { u32 size_bytes; utf8 bytes }
//   only with kRequestSplitReasoning: 2 × { u32 size_bytes; utf8 bytes } (open, close marker)
//   only with kRequestLogprobs: u32 num_top_logprobs (0..20)
//   only with kRequestGrammar: { u32 size_bytes; utf8 bytes } (llguidance grammar, JSON)
struct RequestHeader {
  uint64_t request_id;
  uint64_t seed;
  uint32_t num_choices;
  uint32_t flags;  // kRequestHasSeed | kRequestIgnoreEos | kRequestEmbed
  int32_t max_tokens;
#define LS_WIRE_SAMPLING_FIELD(type, name, dflt) type name;
  LS_SAMPLING_SCALARS(LS_WIRE_SAMPLING_FIELD)  // sampler/params.h, in that order
#undef LS_WIRE_SAMPLING_FIELD
  uint32_t num_prompt_ids;
  uint32_t num_logit_bias;
  uint32_t num_stop;
  uint32_t reserved;  // explicit padding to the 8-byte size
};
constexpr uint32_t kRequestHasSeed = 1u;
constexpr uint32_t kRequestIgnoreEos = 2u;
// An embedding request: each choice is its own input (prompt_lengths), run prefill-only; the lane
// answers EMBEDDING then DONE per choice (sampling fields and stops are ignored).
constexpr uint32_t kRequestEmbed = 4u;
constexpr uint32_t kRequestSplitReasoning = 1u << 4;         // reasoning markers follow the stops
constexpr uint32_t kRequestReasoningStartsInside = 1u << 5;  // the prompt opened the block
constexpr uint32_t kRequestGrammar = 1u << 6;                // a grammar constrains the output
// Score each generated token (LOGPROBS records replace the request's DELTAs); with
// kRequestPromptLogprobs every prompt token too, and max_tokens may be 0 (score only).
constexpr uint32_t kRequestLogprobs = 1u << 8;
constexpr uint32_t kRequestPromptLogprobs = 1u << 9;
constexpr uint32_t kMaxChoices = 128;  // per REQUEST (n, or inputs of an embedding request)

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
  int32_t n_ctx;           // context per sequence slot
  int32_t n_vocab;
  uint32_t wire_version;
  uint64_t load_ns;
  uint64_t kv_cache_bytes;  // K/V cache reserved for all slots (pages commit as they fill)
  int32_t num_slots;        // sequences one forward pass serves at once
  int32_t max_batch_tokens;  // per-step token budget (decode tokens + prefill chunk)
  int32_t n_embd;            // width of EMBEDDING vectors
  uint32_t reserved;         // explicit padding to the 8-byte size
};

// Output channels of a choice: what part of the message a delta's text belongs to.
enum class Channel : uint32_t { Content = 0, Reasoning = 1, ToolArguments = 2 };
constexpr uint32_t kNumChannels = 3;

// DELTA payload: DeltaHeader + raw UTF-8 text (complete code points; merged deltas of the same
// request/choice/channel are concatenated text).
struct DeltaHeader {
  uint64_t request_id;
  uint32_t choice;
  uint32_t channel;     // Channel
  uint32_t num_tokens;  // deltas merged into this record (≥ 1)
  uint32_t reserved;
  uint64_t emit_ns;     // CLOCK_MONOTONIC when the first merged delta was produced
};

constexpr uint32_t kDoneLastChoice = 1u;  // the request is over (every choice ended)
struct DoneRecord {
  uint64_t request_id;
  uint32_t choice;
  uint32_t finish_reason;  // FinishCode
  uint32_t prompt_tokens;
  uint32_t completion_tokens;
  uint32_t cached_tokens;  // prompt tokens whose K/V were reused (prefix cache)
  uint32_t flags;          // kDoneLastChoice
  uint64_t prefill_ns;     // admission into a slot → first token
  uint64_t decode_ns;      // first token → end
};

// EMBEDDING payload: EmbeddingHeader + float32 vector[n_embd] (little-endian, L2 norm 1: the
// mean of the input's final hidden states). Precedes the choice's DONE.
struct EmbeddingHeader {
  uint64_t request_id;
  uint32_t choice;         // input index within the REQUEST
  uint32_t n_embd;
  uint32_t prompt_tokens;
  uint32_t reserved;
};

// LOGPROBS payload (requests with kRequestLogprobs, instead of DELTA): LogprobsHeader, then
// LogprobEntry[num_positions][1 + num_top] (engine/logprobs.h: the taken token, then the top
// alternatives; NaN logprob = no value, token -1 = no alternative), then content_bytes of content
// text and reasoning_bytes of reasoning text released at the same step. Carrying the text in the
// same record keeps a token's text and its logprobs in one client chunk; text released later
// (held-back UTF-8, stop-string prefixes) arrives with a later record. The first
// num_prompt_positions positions score prompt tokens (position 0 first, with no value).
struct LogprobsHeader {
  uint64_t request_id;
  uint32_t choice;
  uint32_t num_positions;
  uint32_t num_prompt_positions;
  uint32_t num_top;
  uint32_t content_bytes;
  uint32_t reasoning_bytes;
};
struct LogprobEntry {
  int32_t token;
  float logprob;
};

// STATS payload: cumulative engine counters, written about every kStatsIntervalNs while the lane
// works (and once when it goes idle). Bucket i counts steps with value ≤ the i-th bound; the
// last bucket is +Inf. The gateway exposes them as Prometheus histograms.
constexpr uint32_t kStepBuckets = 12;
constexpr uint64_t kStatsIntervalNs = 500'000'000;
inline constexpr uint64_t kStepTimeBoundsNs[kStepBuckets - 1] = {
    1'000'000, 2'500'000, 5'000'000, 10'000'000, 20'000'000, 50'000'000,
    100'000'000, 200'000'000, 500'000'000, 1'000'000'000, 5'000'000'000};
inline constexpr uint64_t kBatchTokenBounds[kStepBuckets - 1] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 256};
struct StatsRecord {
  uint64_t num_steps;
  uint64_t step_ns_sum;
  uint64_t batch_tokens_sum;
  uint64_t step_ns_buckets[kStepBuckets];     // non-cumulative counts per bucket
  uint64_t batch_tokens_buckets[kStepBuckets];
  uint32_t active_sequences;   // sequences holding a slot now
  uint32_t waiting_sequences;  // choices queued inside the lane for a slot
};

// ERROR payload: ErrorHeader + UTF-8 message. Always ends the request (request_id 0: the lane).
struct ErrorHeader {
  uint64_t request_id;
  uint32_t code;  // ErrorCode
  uint32_t reserved;
};

// --- Audio lanes (lanes/audio/: a Python process running a speech-to-text model) -------------
// AUDIO_REQUEST payload: AudioRequestHeader, then three UTF-8 strings back to back: the name of a
// POSIX shared-memory segment holding num_samples float32 mono 16 kHz samples (the gateway
// creates, fills and unlinks it; the lane only reads it), the language code (empty: detect) and
// the prompt. The lane answers DELTA (content text per decoded segment; the deltas concatenate to
// the whole transcript), TRANSCRIPT records, then one DONE (choice 0, last) or an ERROR.
struct AudioRequestHeader {
  uint64_t request_id;
  uint64_t num_samples;
  uint32_t flags;  // kAudioTranslate | kAudioWordTimestamps
  float temperature;  // < 0: the fallback schedule (0, 0.2, … 1.0, raised on a failed decode)
  uint32_t name_bytes;
  uint32_t language_bytes;
  uint32_t prompt_bytes;
  uint32_t reserved;  // explicit padding to the 8-byte size
};
constexpr uint32_t kAudioTranslate = 1u;       // translate to English instead of transcribing
constexpr uint32_t kAudioWordTimestamps = 2u;  // segments carry per-word timings

// TRANSCRIPT payload: TranscriptHeader + one UTF-8 JSON object: kind Info (sent once, before
// the first DELTA: language, language_probability, duration) or kind Segment (after the
// segment's DELTA: id, start, end, text, tokens, temperature, avg_logprob, compression_ratio,
// no_speech_prob, words). JSON keeps this variable, nested metadata out of fixed structs; it is
// never on a per-token path (one record per ~30 s window at most).
struct TranscriptHeader {
  uint64_t request_id;
  uint32_t kind;  // TranscriptKind
  uint32_t reserved;
};
enum class TranscriptKind : uint32_t { Info = 1, Segment = 2 };

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

// A decoded REQUEST (allocates: done once per request, never per token).
struct DecodedRequest {
  uint64_t request_id = 0;
  SamplingParams sampling;
  int32_t max_tokens = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> stop;
  ReasoningFormat reasoning;
  std::string grammar;  // kRequestGrammar: llguidance grammar; "" = unconstrained
  uint32_t num_choices = 1;
  bool embed = false;                   // kRequestEmbed
  std::vector<uint32_t> prompt_lengths;  // embed: [num_choices] ids per input
  int32_t num_top_logprobs = -1;         // kRequestLogprobs: 0..20, else -1
  bool prompt_logprobs = false;          // kRequestPromptLogprobs
};

// Throws WireError naming the problem if the payload is truncated or inconsistent.
void decode_request(const uint8_t* payload, size_t size_bytes, DecodedRequest& out);

}  // namespace ls::wire
