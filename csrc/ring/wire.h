// Wire format of laneserve rings: the ONE definition of record types and payload layouts.
// Every record struct, enum and flag set below is generated from a list macro (LS_WIRE_*); the
// same lists generate the _ring extension's layout export (bindings/ring_module.cpp
// wire_layout()), from which lanes/wire.py builds its constants and struct formats at import.
// Nothing of the layout is written a second time.
//
// All fields little-endian, fixed width, read with memcpy (records are only 8-byte aligned and
// variable sections are unaligned). Version bumps go in ring.h kVersion.
//
// Request ring (gateway → lane):  REQUEST, CANCEL, SHUTDOWN, LOAD_ADAPTER, UNLOAD_ADAPTER,
//                                 SLOT_FILE; audio lanes: AUDIO_REQUEST
// Output ring  (lane → gateway):  HELLO, DELTA, DONE, ERROR, STATS, EMBEDDING, LOGPROBS, ADAPTER,
//                                 SLOT_FILE_DONE;
//                                 audio: TRANSCRIPT
//
// Output is protocol-neutral: a DELTA carries raw UTF-8 text of one (request, choice, channel);
// the gateway's native relay (ring/delta_relay.h) escapes and frames it per protocol. Records of
// many requests interleave in one output ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/reasoning_splitter.h"
#include "ring/ring.h"
#include "sampler/params.h"

namespace ls::wire {

// Lists of fields: X(type, name) per field, in layout order (array fields have an array type).
// X is variadic so that LS_SAMPLING_SCALARS' X(type, name, default) entries fit in a list.
#define LS_WIRE_DECLARE_FIELD(type, name, ...) type name;
// Lists of named values: X(CppName, python_name, value).
#define LS_WIRE_DECLARE_ENUMERATOR(cpp, py, value) cpp = value,
#define LS_WIRE_DECLARE_CONSTANT(cpp, py, value) constexpr uint32_t cpp = value;

#define LS_WIRE_RECORD_TYPES(X)                                                 \
  X(Pad, PAD, ring::kPadType)                                                   \
  X(Request, REQUEST, 1)                                                        \
  X(Cancel, CANCEL, 2)                                                          \
  X(Shutdown, SHUTDOWN, 3)                                                      \
  X(LoadAdapter, LOAD_ADAPTER, 5)                                               \
  X(UnloadAdapter, UNLOAD_ADAPTER, 6)                                           \
  X(SlotFile, SLOT_FILE, 7)                                                     \
  X(Hello, HELLO, 16)                                                           \
  X(Delta, DELTA, 17)                                                           \
  X(Done, DONE, 18)                                                             \
  X(Error, ERROR, 19)                                                           \
  X(Stats, STATS, 20)                                                           \
  X(Embedding, EMBEDDING, 21)                                                   \
  X(Logprobs, LOGPROBS, 22)                                                     \
  X(Adapter, ADAPTER, 23)                                                       \
  X(SlotFileDone, SLOT_FILE_DONE, 24)                                           \
  X(AudioRequest, AUDIO_REQUEST, 4) /* audio lanes only ("Audio lanes" below) */ \
  X(Transcript, TRANSCRIPT, 30)
enum class RecordType : uint32_t { LS_WIRE_RECORD_TYPES(LS_WIRE_DECLARE_ENUMERATOR) };

// REQUEST payload: RequestHeader, then in order
//   int32 prompt_ids[num_prompt_ids]
//   u32 prompt_lengths[num_choices]   (kRequestEmbed only: choice i embeds the next
//                                      prompt_lengths[i] ids; each ≥ 1, summing to num_prompt_ids)
//   LogitBiasEntry[num_logit_bias]
//   num_stop × { u32 size_bytes; utf8 bytes }
//   only with kRequestSplitReasoning: 2 × { u32 size_bytes; utf8 bytes } (open, close marker)
//   only with kRequestLogprobs: u32 num_top_logprobs (0..20)
//   only with kRequestGrammar: { u32 size_bytes; utf8 bytes } (llguidance grammar, JSON)
//   only with kRequestAdapters: u32 count (1..8); AdapterEntry[count] (LoRA adapters by lane id)
//   only with kRequestImages: u32 count (1..kMaxRequestImages); ImageEntry[count]; then each
//     image's float32 embeddings [n_tokens][n_embd], in entry order (engine.h PromptImage)
#define LS_WIRE_REQUEST_HEADER(X)                                                          \
  X(uint64_t, request_id)                                                                  \
  X(uint64_t, seed)                                                                        \
  X(uint32_t, num_choices)                                                                 \
  X(uint32_t, flags) /* REQUEST_* flags below */                                           \
  LS_GENERATION_LIMITS(X)  /* max_tokens (sampler/params.h) */                              \
  LS_SAMPLING_SCALARS(X)   /* sampler/params.h, in that order */                            \
  X(uint32_t, num_prompt_ids)                                                              \
  X(uint32_t, num_logit_bias)                                                              \
  X(uint32_t, num_stop)                                                                    \
  X(uint32_t, reserved) /* explicit padding to the 8-byte size */
struct RequestHeader { LS_WIRE_REQUEST_HEADER(LS_WIRE_DECLARE_FIELD) };

// Flag bits: X(kCppName, PYTHON_NAME, value) (REQUEST flags, DONE flags, AUDIO_REQUEST flags).
#define LS_WIRE_FLAGS(X)                                                                       \
  X(kRequestHasSeed, REQUEST_HAS_SEED, 1u)                                                     \
  X(kRequestIgnoreEos, REQUEST_IGNORE_EOS, 2u)                                                 \
  /* An embedding request: each choice is its own input (prompt_lengths), run prefill-only; */ \
  /* the lane answers EMBEDDING then DONE per choice (sampling fields and stops ignored). */   \
  X(kRequestEmbed, REQUEST_EMBED, 4u)                                                          \
  X(kRequestSplitReasoning, REQUEST_SPLIT_REASONING, 1u << 4) /* markers follow the stops */   \
  X(kRequestReasoningStartsInside, REQUEST_REASONING_STARTS_INSIDE, 1u << 5) /* prompt opened it */ \
  X(kRequestGrammar, REQUEST_GRAMMAR, 1u << 6) /* a grammar constrains the output */           \
  /* Score each generated token (LOGPROBS records replace the request's DELTAs); with */       \
  /* kRequestPromptLogprobs every prompt token too, and max_tokens may be 0 (score only). */   \
  X(kRequestLogprobs, REQUEST_LOGPROBS, 1u << 8)                                               \
  X(kRequestPromptLogprobs, REQUEST_PROMPT_LOGPROBS, 1u << 9)                                  \
  X(kRequestAdapters, REQUEST_ADAPTERS, 1u << 10) /* LoRA adapters follow the grammar */          \
  X(kRequestImages, REQUEST_IMAGES, 1u << 11) /* image embeddings follow the adapters */         \
  /* Split gpt-oss harmony channels (no markers on the wire; not with kRequestSplitReasoning); */ \
  /* with kRequestReasoningAsContent the analysis channel is content too. */                    \
  X(kRequestReasoningHarmony, REQUEST_REASONING_HARMONY, 1u << 12)                             \
  X(kRequestReasoningAsContent, REQUEST_REASONING_AS_CONTENT, 1u << 13)                        \
  /* Harmony: messages to functions.NAME reach content as calls (reasoning_splitter.h). */      \
  X(kRequestHarmonyCalls, REQUEST_HARMONY_CALLS, 1u << 14)                                     \
  X(kDoneLastChoice, DONE_LAST_CHOICE, 1u) /* DONE: the request is over (every choice ended) */ \
  X(kAudioTranslate, AUDIO_TRANSLATE, 1u) /* translate to English instead of transcribing */  \
  X(kAudioWordTimestamps, AUDIO_WORD_TIMESTAMPS, 2u) /* segments carry per-word timings */
LS_WIRE_FLAGS(LS_WIRE_DECLARE_CONSTANT)
constexpr uint32_t kMaxChoices = 128;  // per REQUEST (n, or inputs of an embedding request)

#define LS_WIRE_LOGIT_BIAS_ENTRY(X) X(int32_t, token_id) X(float, bias)
struct LogitBiasEntry { LS_WIRE_LOGIT_BIAS_ENTRY(LS_WIRE_DECLARE_FIELD) };

// A LoRA adapter a request applies: the id the pool gave it (LOAD_ADAPTER) and its scale.
#define LS_WIRE_ADAPTER_ENTRY(X) X(uint32_t, adapter_id) X(float, scale)
struct AdapterEntry { LS_WIRE_ADAPTER_ENTRY(LS_WIRE_DECLARE_FIELD) };
constexpr uint32_t kMaxRequestAdapters = 8;  // = kMaxLoraPerSeq (model/lora.h)

// An image in a REQUEST's prompt: positions [pos, pos + n_tokens) take its embeddings; non_causal
// (0/1): gemma3's image attends to itself both ways; content_hash keys its positions for prefix reuse.
#define LS_WIRE_IMAGE_ENTRY(X) \
  X(uint32_t, pos) X(uint32_t, n_tokens) X(uint32_t, n_embd) X(uint32_t, non_causal) X(uint64_t, content_hash)
struct ImageEntry { LS_WIRE_IMAGE_ENTRY(LS_WIRE_DECLARE_FIELD) };
constexpr uint32_t kMaxRequestImages = 64;

// LOAD_ADAPTER payload: LoadAdapterHeader, then name_bytes of UTF-8 name and path_bytes of
// UTF-8 GGUF path. The lane loads it between steps and answers ADAPTER (loaded or failed).
// Ids are the pool's, never reused for another file.
#define LS_WIRE_LOAD_ADAPTER_HEADER(X)                                               \
  X(uint32_t, adapter_id)                                                            \
  X(uint32_t, name_bytes)                                                            \
  X(uint32_t, path_bytes)                                                            \
  X(uint32_t, reserved)
struct LoadAdapterHeader { LS_WIRE_LOAD_ADAPTER_HEADER(LS_WIRE_DECLARE_FIELD) };
// UNLOAD_ADAPTER: the adapter leaves the lane's table at once; sequences using it keep it until
// they end. Answered by ADAPTER (unloaded, or failed when the id is unknown).
#define LS_WIRE_UNLOAD_ADAPTER_RECORD(X) X(uint32_t, adapter_id) X(uint32_t, reserved)
struct UnloadAdapterRecord { LS_WIRE_UNLOAD_ADAPTER_RECORD(LS_WIRE_DECLARE_FIELD) };
// ADAPTER payload: AdapterStatusHeader + UTF-8 message (failed: why, naming the file).
#define LS_WIRE_ADAPTER_STATUS_HEADER(X)                                             \
  X(uint32_t, adapter_id)                                                            \
  X(uint32_t, status)       /* AdapterStatus */                                      \
  X(uint64_t, tensor_bytes) /* loaded: bytes of its tensors (mapped from its file) */ \
  X(uint64_t, load_ns)      /* loaded: time to map and check it */
struct AdapterStatusHeader { LS_WIRE_ADAPTER_STATUS_HEADER(LS_WIRE_DECLARE_FIELD) };
#define LS_WIRE_ADAPTER_STATUSES(X) X(Loaded, loaded, 1) X(Failed, failed, 2) X(Unloaded, unloaded, 3)
enum class AdapterStatus : uint32_t { LS_WIRE_ADAPTER_STATUSES(LS_WIRE_DECLARE_ENUMERATOR) };

// SLOT_FILE payload: SlotFileHeader + name_bytes of a plain file name in the lane's prefix-cache
// dir (BatchEngine::save_slot / restore_slot / erase_slot). The lane runs it between steps and
// answers SLOT_FILE_DONE with the same op_id.
#define LS_WIRE_SLOT_FILE_HEADER(X)                                                  \
  X(uint64_t, op_id)                                                                 \
  X(uint32_t, action) /* SlotAction */                                               \
  X(uint32_t, slot)   /* the lane's slot index */                                    \
  X(uint32_t, name_bytes)                                                            \
  X(uint32_t, reserved)
struct SlotFileHeader { LS_WIRE_SLOT_FILE_HEADER(LS_WIRE_DECLARE_FIELD) };
#define LS_WIRE_SLOT_ACTIONS(X) X(Save, save, 1) X(Restore, restore, 2) X(Erase, erase, 3)
enum class SlotAction : uint32_t { LS_WIRE_SLOT_ACTIONS(LS_WIRE_DECLARE_ENUMERATOR) };
// SLOT_FILE_DONE payload: SlotFileDoneHeader + UTF-8 message (failed: why).
#define LS_WIRE_SLOT_FILE_DONE_HEADER(X)                                             \
  X(uint64_t, op_id)                                                                 \
  X(uint32_t, ok)         /* 1 done, 0 failed */                                     \
  X(uint32_t, bad_request) /* failed: 1 the request was wrong (slot, name, the file to restore) */ \
  X(uint64_t, n_tokens)   /* saved, restored or erased positions */                  \
  X(uint64_t, n_bytes)    /* file bytes written or read */                           \
  X(uint64_t, elapsed_ns)
struct SlotFileDoneHeader { LS_WIRE_SLOT_FILE_DONE_HEADER(LS_WIRE_DECLARE_FIELD) };

#define LS_WIRE_CANCEL_RECORD(X) X(uint64_t, request_id)
struct CancelRecord { LS_WIRE_CANCEL_RECORD(LS_WIRE_DECLARE_FIELD) };

// Readiness handshake: first record a lane writes after loading its model.
#define LS_WIRE_HELLO_RECORD(X)                                                                \
  X(uint32_t, pid)                                                                             \
  X(int32_t, n_ctx) /* context per sequence slot */                                            \
  X(int32_t, n_vocab)                                                                          \
  X(uint32_t, wire_version)                                                                    \
  X(uint64_t, load_ns)                                                                         \
  X(uint64_t, kv_cache_bytes)  /* K/V cache reserved for all slots (pages commit as they fill) */ \
  X(int32_t, num_slots)        /* sequences one forward pass serves at once */                 \
  X(int32_t, max_batch_tokens) /* per-step token budget (decode tokens + prefill chunk) */     \
  X(int32_t, n_embd)           /* width of EMBEDDING vectors */                                \
  X(uint32_t, reserved)        /* explicit padding to the 8-byte size */
struct HelloRecord { LS_WIRE_HELLO_RECORD(LS_WIRE_DECLARE_FIELD) };

// Output channels of a choice: what part of the message a delta's text belongs to.
#define LS_WIRE_CHANNELS(X) X(Content, content, 0) X(Reasoning, reasoning, 1) X(ToolArguments, tool_arguments, 2)
enum class Channel : uint32_t { LS_WIRE_CHANNELS(LS_WIRE_DECLARE_ENUMERATOR) };
constexpr uint32_t kNumChannels = 3;

// DELTA payload: DeltaHeader + raw UTF-8 text (complete code points; merged deltas of the same
// request/choice/channel are concatenated text).
#define LS_WIRE_DELTA_HEADER(X)                                                      \
  X(uint64_t, request_id)                                                            \
  X(uint32_t, choice)                                                                \
  X(uint32_t, channel)    /* Channel */                                              \
  X(uint32_t, num_tokens) /* deltas merged into this record (≥ 1) */                 \
  X(uint32_t, reserved)                                                              \
  X(uint64_t, emit_ns) /* CLOCK_MONOTONIC when the first merged delta was produced */
struct DeltaHeader { LS_WIRE_DELTA_HEADER(LS_WIRE_DECLARE_FIELD) };

#define LS_WIRE_DONE_RECORD(X)                                                       \
  X(uint64_t, request_id)                                                            \
  X(uint32_t, choice)                                                                \
  X(uint32_t, finish_reason) /* FinishCode */                                        \
  X(uint32_t, prompt_tokens)                                                         \
  X(uint32_t, completion_tokens)                                                     \
  X(uint32_t, cached_tokens) /* prompt tokens whose K/V were reused (prefix cache) */ \
  X(uint32_t, flags)         /* kDoneLastChoice */                                   \
  X(uint64_t, prefill_ns)    /* admission into a slot → first token */               \
  X(uint64_t, decode_ns)     /* first token → end */                                 \
  X(uint32_t, stop_string)   /* finish stop by a stop string: its index + 1; else 0 */ \
  X(uint32_t, reserved)
struct DoneRecord { LS_WIRE_DONE_RECORD(LS_WIRE_DECLARE_FIELD) };

// EMBEDDING payload: EmbeddingHeader + float32 vector[n_embd] (little-endian, L2 norm 1: the
// mean of the input's final hidden states). Precedes the choice's DONE.
#define LS_WIRE_EMBEDDING_HEADER(X)                                                  \
  X(uint64_t, request_id)                                                            \
  X(uint32_t, choice) /* input index within the REQUEST */                           \
  X(uint32_t, n_embd)                                                                \
  X(uint32_t, prompt_tokens)                                                         \
  X(uint32_t, reserved)
struct EmbeddingHeader { LS_WIRE_EMBEDDING_HEADER(LS_WIRE_DECLARE_FIELD) };

// LOGPROBS payload (requests with kRequestLogprobs, instead of DELTA): LogprobsHeader, then
// LogprobEntry[num_positions][1 + num_top] (engine/logprobs.h: the taken token, then the top
// alternatives; NaN logprob = no value, token -1 = no alternative), then content_bytes of content
// text and reasoning_bytes of reasoning text released at the same step. Carrying the text in the
// same record keeps a token's text and its logprobs in one client chunk; text released later
// (held-back UTF-8, stop-string prefixes) arrives with a later record. The first
// num_prompt_positions positions score prompt tokens (position 0 first, with no value).
#define LS_WIRE_LOGPROBS_HEADER(X)                                                   \
  X(uint64_t, request_id)                                                            \
  X(uint32_t, choice)                                                                \
  X(uint32_t, num_positions)                                                         \
  X(uint32_t, num_prompt_positions)                                                  \
  X(uint32_t, num_top)                                                               \
  X(uint32_t, content_bytes)                                                         \
  X(uint32_t, reasoning_bytes)
struct LogprobsHeader { LS_WIRE_LOGPROBS_HEADER(LS_WIRE_DECLARE_FIELD) };
#define LS_WIRE_LOGPROB_ENTRY(X) X(int32_t, token) X(float, logprob)
struct LogprobEntry { LS_WIRE_LOGPROB_ENTRY(LS_WIRE_DECLARE_FIELD) };

// STATS payload: cumulative engine counters and the prompt cache's figures, written once after
// HELLO, then about every kStatsIntervalNs while the lane works (and once when it goes idle).
// Bucket i counts steps with value ≤ the i-th bound; the last bucket is +Inf. The gateway
// exposes them as Prometheus histograms.
constexpr uint32_t kStepBuckets = 12;
constexpr uint64_t kStatsIntervalNs = 500'000'000;
inline constexpr uint64_t kStepTimeBoundsNs[kStepBuckets - 1] = {
    1'000'000, 2'500'000, 5'000'000, 10'000'000, 20'000'000, 50'000'000,
    100'000'000, 200'000'000, 500'000'000, 1'000'000'000, 5'000'000'000};
inline constexpr uint64_t kBatchTokenBounds[kStepBuckets - 1] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 256};
using StepBucketCounts = uint64_t[kStepBuckets];  // non-cumulative counts per bucket
// The lane's prompt cache (engine/prefix_tree.h PromptCacheStats, in whole K/V pages): bytes, budget,
// entries, pages and disk bytes / budget are its state now; hits, hit tokens, stores, evictions and disk
// reads / writes are cumulative over the lane process.
#define LS_WIRE_PROMPT_CACHE_STATS(X)                                                \
  X(uint64_t, prompt_cache_bytes)        /* cached pages no sequence maps */         \
  X(uint64_t, prompt_cache_budget_bytes) /* its byte budget (0: the cache is off) */ \
  X(uint64_t, prompt_cache_hits)         /* prompts reusing >= a page of it */       \
  X(uint64_t, prompt_cache_hit_tokens)   /* prompt positions those hits skipped */   \
  X(uint64_t, prompt_cache_stores)       /* pages cached */                          \
  X(uint64_t, prompt_cache_evictions)    /* pages dropped for room or the budget */  \
  X(uint32_t, prompt_cache_entries)                                                  \
  X(uint32_t, kv_pages_free)             /* K/V pool pages nobody holds now */       \
  X(uint32_t, kv_pages_total)            /* K/V pool pages of the lane */            \
  X(uint32_t, kv_window_pages_free)      /* sliding-window layers' pool: free */     \
  X(uint32_t, kv_window_pages_total)     /* its pages (0: the model has none) */     \
  X(uint32_t, prompt_cache_reserved)     /* explicit padding to the 8-byte size */  \
  X(uint64_t, prompt_cache_disk_reads)   /* pages read back from the disk tier */    \
  X(uint64_t, prompt_cache_disk_writes)  /* pages written to it */                   \
  X(uint64_t, prompt_cache_disk_bytes)   /* its page files now */                    \
  X(uint64_t, prompt_cache_disk_budget_bytes) /* their budget (0: no disk tier) */
#define LS_WIRE_STATS_RECORD(X)                                                      \
  X(uint64_t, num_steps)                                                             \
  X(uint64_t, step_ns_sum)                                                           \
  X(uint64_t, batch_tokens_sum)                                                      \
  X(StepBucketCounts, step_ns_buckets)                                               \
  X(StepBucketCounts, batch_tokens_buckets)                                          \
  X(uint32_t, active_sequences)  /* sequences holding a slot now */                  \
  X(uint32_t, waiting_sequences) /* choices queued inside the lane for a slot */     \
  LS_WIRE_PROMPT_CACHE_STATS(X)
struct StatsRecord { LS_WIRE_STATS_RECORD(LS_WIRE_DECLARE_FIELD) };

// ERROR payload: ErrorHeader + UTF-8 message. Always ends the request (request_id 0: the lane).
#define LS_WIRE_ERROR_HEADER(X) X(uint64_t, request_id) X(uint32_t, code) /* ErrorCode */ X(uint32_t, reserved)
struct ErrorHeader { LS_WIRE_ERROR_HEADER(LS_WIRE_DECLARE_FIELD) };

// --- Audio lanes (lanes/audio/: a Python process running a speech-to-text model) -------------
// AUDIO_REQUEST payload: AudioRequestHeader, then three UTF-8 strings back to back: the name of a
// POSIX shared-memory segment holding num_samples float32 mono 16 kHz samples (the gateway
// creates, fills and unlinks it; the lane only reads it), the language code (empty: detect) and
// the prompt. The lane answers DELTA (content text per decoded segment; the deltas concatenate to
// the whole transcript), TRANSCRIPT records, then one DONE (choice 0, last) or an ERROR.
#define LS_WIRE_AUDIO_REQUEST_HEADER(X)                                                        \
  X(uint64_t, request_id)                                                                      \
  X(uint64_t, num_samples)                                                                     \
  X(uint32_t, flags) /* kAudioTranslate | kAudioWordTimestamps */                              \
  X(float, temperature) /* < 0: the fallback schedule (0, 0.2, … 1.0, raised on a failed decode) */ \
  X(uint32_t, name_bytes)                                                                      \
  X(uint32_t, language_bytes)                                                                  \
  X(uint32_t, prompt_bytes)                                                                    \
  X(uint32_t, reserved) /* explicit padding to the 8-byte size */
struct AudioRequestHeader { LS_WIRE_AUDIO_REQUEST_HEADER(LS_WIRE_DECLARE_FIELD) };

// TRANSCRIPT payload: TranscriptHeader + one UTF-8 JSON object: kind Info (sent once, before
// the first DELTA: language, language_probability, duration) or kind Segment (after the
// segment's DELTA: id, start, end, text, tokens, temperature, avg_logprob, compression_ratio,
// no_speech_prob, words). JSON keeps this variable, nested metadata out of fixed structs; it is
// never on a per-token path (one record per ~30 s window at most).
#define LS_WIRE_TRANSCRIPT_HEADER(X) X(uint64_t, request_id) X(uint32_t, kind) /* TranscriptKind */ X(uint32_t, reserved)
struct TranscriptHeader { LS_WIRE_TRANSCRIPT_HEADER(LS_WIRE_DECLARE_FIELD) };
#define LS_WIRE_TRANSCRIPT_KINDS(X) X(Info, info, 1) X(Segment, segment, 2)
enum class TranscriptKind : uint32_t { LS_WIRE_TRANSCRIPT_KINDS(LS_WIRE_DECLARE_ENUMERATOR) };

#define LS_WIRE_FINISH_CODES(X) LS_FINISH_REASONS(X)  // engine/finish_reason.h
using FinishCode = ::ls::FinishReason;
#define LS_WIRE_ERROR_CODES(X)                                                                         \
  X(LoadFailed, load_failed, 1)         /* the lane could not load its model (handshake failure) */    \
  X(BadRequest, bad_request, 2)         /* the engine refused the request (context, ids, ...) */        \
  X(OutputOverflow, output_overflow, 3) /* pending output passed its cap (gateway not reading) */ \
  X(EngineError, engine_error, 4)       /* the engine threw mid-generation */                         \
  X(ProtocolError, protocol_error, 5)   /* undecodable record */
enum class ErrorCode : uint32_t { LS_WIRE_ERROR_CODES(LS_WIRE_DECLARE_ENUMERATOR) };

// Every record struct with its field list (the layout export walks this).
#define LS_WIRE_STRUCTS(X)                                                           \
  X(RequestHeader, LS_WIRE_REQUEST_HEADER)                                           \
  X(LogitBiasEntry, LS_WIRE_LOGIT_BIAS_ENTRY)                                        \
  X(AdapterEntry, LS_WIRE_ADAPTER_ENTRY)                                             \
  X(ImageEntry, LS_WIRE_IMAGE_ENTRY)                                                 \
  X(LoadAdapterHeader, LS_WIRE_LOAD_ADAPTER_HEADER)                                  \
  X(UnloadAdapterRecord, LS_WIRE_UNLOAD_ADAPTER_RECORD)                              \
  X(AdapterStatusHeader, LS_WIRE_ADAPTER_STATUS_HEADER)                              \
  X(SlotFileHeader, LS_WIRE_SLOT_FILE_HEADER)                                        \
  X(SlotFileDoneHeader, LS_WIRE_SLOT_FILE_DONE_HEADER)                               \
  X(CancelRecord, LS_WIRE_CANCEL_RECORD)                                             \
  X(HelloRecord, LS_WIRE_HELLO_RECORD)                                               \
  X(DeltaHeader, LS_WIRE_DELTA_HEADER)                                               \
  X(DoneRecord, LS_WIRE_DONE_RECORD)                                                 \
  X(StatsRecord, LS_WIRE_STATS_RECORD)                                               \
  X(EmbeddingHeader, LS_WIRE_EMBEDDING_HEADER)                                       \
  X(ErrorHeader, LS_WIRE_ERROR_HEADER)                                               \
  X(LogprobsHeader, LS_WIRE_LOGPROBS_HEADER)                                         \
  X(LogprobEntry, LS_WIRE_LOGPROB_ENTRY)                                             \
  X(AudioRequestHeader, LS_WIRE_AUDIO_REQUEST_HEADER)                                \
  X(TranscriptHeader, LS_WIRE_TRANSCRIPT_HEADER)

// No implicit padding anywhere: a struct's size is the sum of its fields' sizes, so a packed
// little-endian format of the fields in order (lanes/wire.py's struct formats) is its layout.
#define LS_WIRE_FIELD_SIZE(type, name, ...) +sizeof(type)
#define LS_WIRE_ASSERT_PACKED(S, FIELDS) \
  static_assert(sizeof(S) == 0 FIELDS(LS_WIRE_FIELD_SIZE), #S " has implicit padding");
LS_WIRE_STRUCTS(LS_WIRE_ASSERT_PACKED)
#undef LS_WIRE_ASSERT_PACKED
#undef LS_WIRE_FIELD_SIZE

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
  std::vector<AdapterEntry> adapters;    // kRequestAdapters
  struct Image {
    ImageEntry entry;
    std::shared_ptr<const std::vector<float>> embd;  // [n_tokens * n_embd]; shared by the choices
  };
  std::vector<Image> images;             // kRequestImages
};

// Throws WireError naming the problem if the payload is truncated or inconsistent.
void decode_request(const uint8_t* payload, size_t size_bytes, DecodedRequest& out);

// A decoded LOAD_ADAPTER.
struct DecodedLoadAdapter {
  uint32_t adapter_id = 0;
  std::string name, path;
};
void decode_load_adapter(const uint8_t* payload, size_t size_bytes, DecodedLoadAdapter& out);  // throws WireError

}  // namespace ls::wire
