"""Python mirror of csrc/ring/wire.h (the ONE wire-format definition) — keep the two in step.

tests/csrc/ring/test_wire_agreement.py compares every constant, struct size and field offset
here with what the `_ring` extension reports from the C++ header. No pickle crosses processes:
the gateway encodes REQUEST/CANCEL/SHUTDOWN and decodes HELLO/DELTA/DONE/ERROR/LOGPROBS with `struct`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = 0x474E524C
VERSION = 2
RECORD_HEADER_BYTES = 8
RECORD_ALIGN_BYTES = 8
SEGMENT_HEADER_BYTES = 512

# RecordType
PAD = 0
REQUEST = 1
CANCEL = 2
SHUTDOWN = 3
HELLO = 16
DELTA = 17
DONE = 18
ERROR = 19
STATS = 20
EMBEDDING = 21
LOGPROBS = 22
AUDIO_REQUEST = 4   # audio lanes only (lanes/audio/)
TRANSCRIPT = 30
RECORD_TYPES = {"PAD": PAD, "REQUEST": REQUEST, "CANCEL": CANCEL, "SHUTDOWN": SHUTDOWN,
                "HELLO": HELLO, "DELTA": DELTA, "DONE": DONE, "ERROR": ERROR, "STATS": STATS,
                "EMBEDDING": EMBEDDING, "LOGPROBS": LOGPROBS, "AUDIO_REQUEST": AUDIO_REQUEST,
                "TRANSCRIPT": TRANSCRIPT}
CHANNELS = {"content": 0, "reasoning": 1, "tool_arguments": 2}
CONTENT = CHANNELS["content"]
# STATS histograms: bucket i counts steps whose value is <= bound i; the last bucket is +Inf.
STEP_BUCKETS = 12
STEP_TIME_BOUNDS_NS = (1_000_000, 2_500_000, 5_000_000, 10_000_000, 20_000_000, 50_000_000, 100_000_000,
                       200_000_000, 500_000_000, 1_000_000_000, 5_000_000_000)
BATCH_TOKEN_BOUNDS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 256)

FINISH_CODES = {"none": 0, "stop": 1, "length": 2, "cancelled": 3, "error": 4}
FINISH_NAMES = {v: k for k, v in FINISH_CODES.items()}
ERROR_CODES = {"load_failed": 1, "bad_request": 2, "output_overflow": 3, "engine_error": 4,
               "protocol_error": 5}
ERROR_NAMES = {v: k for k, v in ERROR_CODES.items()}

REQUEST_HAS_SEED = 1
REQUEST_IGNORE_EOS = 2
REQUEST_EMBED = 4
REQUEST_SPLIT_REASONING = 1 << 4          # open/close reasoning markers follow the stop strings
REQUEST_REASONING_STARTS_INSIDE = 1 << 5  # the prompt already opened the reasoning block
REQUEST_GRAMMAR = 1 << 6                  # an llguidance grammar (last section) constrains the output
REQUEST_LOGPROBS = 1 << 8          # u32 num_top_logprobs follows; LOGPROBS records replace DELTAs
REQUEST_PROMPT_LOGPROBS = 1 << 9   # score the prompt tokens too (echo); max_tokens may be 0
DONE_LAST_CHOICE = 1
AUDIO_TRANSLATE = 1
AUDIO_WORD_TIMESTAMPS = 2
TRANSCRIPT_KINDS = {"info": 1, "segment": 2}
FLAGS = {"AUDIO_TRANSLATE": AUDIO_TRANSLATE, "AUDIO_WORD_TIMESTAMPS": AUDIO_WORD_TIMESTAMPS,
         "REQUEST_HAS_SEED": REQUEST_HAS_SEED, "REQUEST_IGNORE_EOS": REQUEST_IGNORE_EOS,
         "REQUEST_EMBED": REQUEST_EMBED, "REQUEST_SPLIT_REASONING": REQUEST_SPLIT_REASONING,
         "REQUEST_REASONING_STARTS_INSIDE": REQUEST_REASONING_STARTS_INSIDE, "REQUEST_GRAMMAR": REQUEST_GRAMMAR,
         "REQUEST_LOGPROBS": REQUEST_LOGPROBS, "REQUEST_PROMPT_LOGPROBS": REQUEST_PROMPT_LOGPROBS,
         "DONE_LAST_CHOICE": DONE_LAST_CHOICE}
MAX_CHOICES = 128  # per REQUEST: n choices, or the inputs of an embedding request


@dataclass(frozen=True)
class StructSpec:
    """A fixed-width little-endian struct: field names in order with their struct codes."""
    name: str
    fields: tuple[tuple[str, str], ...]

    @property
    def format(self) -> str:
        return "<" + "".join(code for _, code in self.fields)

    @property
    def size(self) -> int:
        return struct.calcsize(self.format)

    def offsets(self) -> dict[str, int]:
        out, fmt = {}, "<"
        for name, code in self.fields:
            out[name] = struct.calcsize(fmt)
            fmt += code
        return out


# The scalar sampling fields in wire order (C++: LS_SAMPLING_SCALARS in csrc/sampler/params.h); their
# names, meanings and defaults are lanes.api.GenerationParams fields.
SAMPLING_SCALARS = (
    ("temperature", "f"), ("top_p", "f"), ("min_p", "f"), ("presence_penalty", "f"),
    ("frequency_penalty", "f"), ("repetition_penalty", "f"), ("top_k", "i"), ("repeat_last_n", "i"),
    ("min_tokens", "i"),
)
REQUEST_HEADER = StructSpec("RequestHeader", (
    ("request_id", "Q"), ("seed", "Q"), ("num_choices", "I"), ("flags", "I"), ("max_tokens", "i"),
    *SAMPLING_SCALARS,
    ("num_prompt_ids", "I"), ("num_logit_bias", "I"), ("num_stop", "I"), ("reserved", "I"),
))
LOGIT_BIAS_ENTRY = StructSpec("LogitBiasEntry", (("token_id", "i"), ("bias", "f")))
CANCEL_RECORD = StructSpec("CancelRecord", (("request_id", "Q"),))
HELLO_RECORD = StructSpec("HelloRecord", (
    ("pid", "I"), ("n_ctx", "i"), ("n_vocab", "i"), ("wire_version", "I"), ("load_ns", "Q"),
    ("kv_cache_bytes", "Q"), ("num_slots", "i"), ("max_batch_tokens", "i"), ("n_embd", "i"), ("reserved", "I"),
))
DELTA_HEADER = StructSpec("DeltaHeader", (
    ("request_id", "Q"), ("choice", "I"), ("channel", "I"), ("num_tokens", "I"), ("reserved", "I"),
    ("emit_ns", "Q"),
))
DONE_RECORD = StructSpec("DoneRecord", (
    ("request_id", "Q"), ("choice", "I"), ("finish_reason", "I"), ("prompt_tokens", "I"),
    ("completion_tokens", "I"), ("cached_tokens", "I"), ("flags", "I"), ("prefill_ns", "Q"),
    ("decode_ns", "Q"),
))
STATS_RECORD = StructSpec("StatsRecord", (
    ("num_steps", "Q"), ("step_ns_sum", "Q"), ("batch_tokens_sum", "Q"),
    ("step_ns_buckets", f"{STEP_BUCKETS}Q"), ("batch_tokens_buckets", f"{STEP_BUCKETS}Q"),
    ("active_sequences", "I"), ("waiting_sequences", "I"),
))
EMBEDDING_HEADER = StructSpec("EmbeddingHeader", (
    ("request_id", "Q"), ("choice", "I"), ("n_embd", "I"), ("prompt_tokens", "I"), ("reserved", "I"),
))
ERROR_HEADER = StructSpec("ErrorHeader", (("request_id", "Q"), ("code", "I"), ("reserved", "I")))
LOGPROBS_HEADER = StructSpec("LogprobsHeader", (
    ("request_id", "Q"), ("choice", "I"), ("num_positions", "I"), ("num_prompt_positions", "I"), ("num_top", "I"),
    ("content_bytes", "I"), ("reasoning_bytes", "I"),
))
LOGPROB_ENTRY = StructSpec("LogprobEntry", (("token", "i"), ("logprob", "f")))
AUDIO_REQUEST_HEADER = StructSpec("AudioRequestHeader", (
    ("request_id", "Q"), ("num_samples", "Q"), ("flags", "I"), ("temperature", "f"), ("name_bytes", "I"),
    ("language_bytes", "I"), ("prompt_bytes", "I"), ("reserved", "I"),
))
TRANSCRIPT_HEADER = StructSpec("TranscriptHeader", (("request_id", "Q"), ("kind", "I"), ("reserved", "I")))
# Only sizes/offsets are mirrored for the segment header: Python never reads or writes it.
SEGMENT_HEADER_OFFSETS = {
    "magic": 0, "version": 4, "capacity_bytes": 8, "max_record_bytes": 16, "creator_pid": 24,
    "tail": 128, "head": 256, "reader_waiting": 384, "closed": 388, "heartbeat_ns": 392,
    "quiet_until_ns": 400, "writer_pid": 408, "reader_pid": 412,
}
STRUCTS = (REQUEST_HEADER, LOGIT_BIAS_ENTRY, CANCEL_RECORD, HELLO_RECORD, DELTA_HEADER,
           DONE_RECORD, STATS_RECORD, EMBEDDING_HEADER, ERROR_HEADER, LOGPROBS_HEADER, LOGPROB_ENTRY,
           AUDIO_REQUEST_HEADER, TRANSCRIPT_HEADER)

_REQUEST = struct.Struct(REQUEST_HEADER.format)
_CANCEL = struct.Struct(CANCEL_RECORD.format)
_HELLO = struct.Struct(HELLO_RECORD.format)
_DELTA = struct.Struct(DELTA_HEADER.format)
_DONE = struct.Struct(DONE_RECORD.format)
_ERROR = struct.Struct(ERROR_HEADER.format)
_STATS = struct.Struct(STATS_RECORD.format)
_EMBEDDING = struct.Struct(EMBEDDING_HEADER.format)
_LOGPROBS = struct.Struct(LOGPROBS_HEADER.format)
_U32 = struct.Struct("<I")
_FLAGS_OFFSET = REQUEST_HEADER.offsets()["flags"]
DELTA_HEADER_BYTES = _DELTA.size
ERROR_HEADER_BYTES = _ERROR.size


def encode_request(request_id: int, prompt_ids, params, num_choices: int) -> bytes:
    """REQUEST payload. `params` is a lanes.api.GenerationParams; each of the num_choices choices
    becomes its own sequence in the lane (choice i seeded with seed + i)."""
    seed = params.seed
    flags = (REQUEST_HAS_SEED if seed is not None else 0) | (REQUEST_IGNORE_EOS if params.ignore_eos else 0)
    reasoning = params.reasoning
    if reasoning is not None:
        flags |= REQUEST_SPLIT_REASONING | (REQUEST_REASONING_STARTS_INSIDE if reasoning.starts_inside else 0)
    grammar = [params.grammar.encode("utf-8")] if params.grammar else []
    if grammar:
        flags |= REQUEST_GRAMMAR
    if params.logprobs is not None:
        flags |= REQUEST_LOGPROBS | (REQUEST_PROMPT_LOGPROBS if params.prompt_logprobs else 0)
    stops = [s.encode("utf-8") for s in params.stop]
    parts = [
        _REQUEST.pack(
            request_id, (seed or 0) & 0xFFFFFFFFFFFFFFFF, num_choices, flags, params.max_tokens,
            *(getattr(params, name) for name, _ in SAMPLING_SCALARS),
            len(prompt_ids), len(params.logit_bias), len(stops), 0),
        struct.pack(f"<{len(prompt_ids)}i", *prompt_ids),
    ]
    for token_id, bias in params.logit_bias:
        parts.append(struct.pack("<if", token_id, bias))
    markers = [reasoning.open.encode("utf-8"), reasoning.close.encode("utf-8")] if reasoning is not None else []
    for s in stops + markers:
        parts.append(_U32.pack(len(s)))
        parts.append(s)
    if params.logprobs is not None:
        parts.append(_U32.pack(params.logprobs))
    for s in grammar:  # last section (wire.h order)
        parts.append(_U32.pack(len(s)))
        parts.append(s)
    return b"".join(parts)


def encode_embed_request(request_id: int, inputs: list[list[int]]) -> bytes:
    """REQUEST payload of an embedding request: input i (non-empty token ids) becomes choice i,
    a prefill-only sequence answered by EMBEDDING + DONE. Sampling fields are unused (defaults)."""
    if not 1 <= len(inputs) <= MAX_CHOICES:
        raise ValueError(f"an embedding request carries 1..{MAX_CHOICES} inputs, got {len(inputs)}")
    if any(not ids for ids in inputs):
        raise ValueError("embedding inputs must be non-empty")
    from lanes.api import GenerationParams

    flat = [t for ids in inputs for t in ids]
    payload = bytearray(encode_request(request_id, flat, GenerationParams(max_tokens=1), len(inputs)))
    _U32.pack_into(payload, _FLAGS_OFFSET, REQUEST_EMBED)
    return bytes(payload) + struct.pack(f"<{len(inputs)}I", *(len(ids) for ids in inputs))


def decode_embedding(payload: bytes) -> tuple[int, int, int, bytes]:
    """EMBEDDING → (request_id, choice, prompt_tokens, float32 little-endian vector bytes)."""
    request_id, choice, n_embd, prompt_tokens, _ = _EMBEDDING.unpack_from(payload)
    vector = bytes(payload[_EMBEDDING.size:_EMBEDDING.size + 4 * n_embd])
    if len(vector) != 4 * n_embd:
        raise ValueError("EMBEDDING record truncated")
    return request_id, choice, prompt_tokens, vector


def decode_logprobs(payload: bytes) -> tuple[int, int, tuple, int, bytes, bytes]:
    """LOGPROBS → (request_id, choice, positions, num_prompt, content, reasoning): positions[i] =
    ((token, logprob), ((alt_token, alt_logprob), ...) best first), logprob None = no value
    (prompt position 0); the first num_prompt positions score prompt tokens; content and
    reasoning are the UTF-8 text released at the same step."""
    request_id, choice, n, num_prompt, num_top, content_bytes, reasoning_bytes = _LOGPROBS.unpack_from(payload)
    stride = 1 + num_top
    off = _LOGPROBS.size
    flat = struct.unpack_from("<" + "if" * (n * stride), payload, off)
    off += 8 * n * stride
    content = bytes(payload[off:off + content_bytes])
    reasoning = bytes(payload[off + content_bytes:off + content_bytes + reasoning_bytes])
    if len(content) + len(reasoning) != content_bytes + reasoning_bytes:
        raise ValueError("LOGPROBS record truncated")
    positions = []
    for p in range(n):
        base = 2 * p * stride
        logprob = flat[base + 1]
        taken = (flat[base], None if logprob != logprob else logprob)  # NaN: no value
        alts = tuple((flat[base + 2 * j], flat[base + 2 * j + 1]) for j in range(1, stride) if flat[base + 2 * j] >= 0)
        positions.append((taken, alts))
    return request_id, choice, tuple(positions), num_prompt, content, reasoning


def encode_cancel(request_id: int) -> bytes:
    return _CANCEL.pack(request_id)


@dataclass(frozen=True)
class Hello:
    pid: int
    n_ctx: int            # per sequence slot
    n_vocab: int
    wire_version: int
    load_ns: int
    kv_cache_bytes: int   # reserved for all slots
    num_slots: int
    max_batch_tokens: int
    n_embd: int = 0       # width of EMBEDDING vectors


def decode_hello(payload: bytes) -> Hello:
    return Hello(*_HELLO.unpack_from(payload)[:-1])  # without the padding field


# DELTA: (request_id, choice, channel, num_tokens, reserved, emit_ns); text = payload[DELTA_HEADER_BYTES:]
decode_delta_header = _DELTA.unpack_from
# DONE: (request_id, choice, finish_reason, prompt_tokens, completion_tokens, cached_tokens, flags,
#        prefill_ns, decode_ns)
decode_done = _DONE.unpack_from


@dataclass(frozen=True)
class Stats:
    """Cumulative engine counters of one lane (non-cumulative bucket counts)."""
    num_steps: int
    step_ns_sum: int
    batch_tokens_sum: int
    step_ns_buckets: tuple[int, ...]
    batch_tokens_buckets: tuple[int, ...]
    active_sequences: int
    waiting_sequences: int


def decode_stats(payload: bytes) -> Stats:
    v = _STATS.unpack_from(payload)
    n = STEP_BUCKETS
    return Stats(v[0], v[1], v[2], tuple(v[3:3 + n]), tuple(v[3 + n:3 + 2 * n]), v[3 + 2 * n], v[4 + 2 * n])


def decode_error(payload: bytes) -> tuple[int, str, str]:
    """→ (request_id, code name, message)."""
    request_id, code, _ = _ERROR.unpack_from(payload)
    message = payload[ERROR_HEADER_BYTES:].decode("utf-8", "replace")
    return request_id, ERROR_NAMES.get(code, f"error_{code}"), message
