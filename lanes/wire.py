"""The ring wire format in Python, built at import from csrc/ring/wire.h (the ONE definition).

Every constant, record type, struct size, field offset and field type comes from the layout the
`_ring` extension exports (`_ring.wire_layout()`, generated from wire.h's field lists); the struct
formats here are built from it, so nothing of the layout is written a second time.
tests/csrc/ring/test_wire_agreement.py round-trips records between these codecs and the native ones.
No pickle crosses processes: the gateway encodes REQUEST/CANCEL/SHUTDOWN and decodes
HELLO/DELTA/DONE/ERROR/LOGPROBS with `struct`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from lanes import _ring

LAYOUT = _ring.wire_layout()

MAGIC = LAYOUT["magic"]
VERSION = LAYOUT["version"]
RECORD_HEADER_BYTES = LAYOUT["record_header_bytes"]
RECORD_ALIGN_BYTES = LAYOUT["record_align_bytes"]
SEGMENT_HEADER_BYTES = LAYOUT["structs"]["SegmentHeader"]["size"]
# Only offsets of the segment header: Python never reads or writes it.
SEGMENT_HEADER_OFFSETS: dict[str, int] = LAYOUT["structs"]["SegmentHeader"]["offsets"]

# Record types (AUDIO_REQUEST: audio lanes only, lanes/audio/). Names are bound here so that readers
# and linters see them; a name the native layout lacks fails the import.
RECORD_TYPES: dict[str, int] = LAYOUT["record_types"]
(PAD, REQUEST, CANCEL, SHUTDOWN, HELLO, DELTA, DONE, ERROR, STATS, EMBEDDING, LOGPROBS, AUDIO_REQUEST,
 TRANSCRIPT, LOAD_ADAPTER, UNLOAD_ADAPTER, ADAPTER, SLOT_FILE, SLOT_FILE_DONE) = (
    RECORD_TYPES[n] for n in ("PAD", "REQUEST", "CANCEL", "SHUTDOWN", "HELLO", "DELTA", "DONE", "ERROR", "STATS",
                              "EMBEDDING", "LOGPROBS", "AUDIO_REQUEST", "TRANSCRIPT", "LOAD_ADAPTER",
                              "UNLOAD_ADAPTER", "ADAPTER", "SLOT_FILE", "SLOT_FILE_DONE"))
CHANNELS: dict[str, int] = LAYOUT["channels"]  # content, reasoning, tool_arguments
CONTENT = CHANNELS["content"]
# STATS histograms: bucket i counts steps whose value is <= bound i; the last bucket is +Inf.
STEP_BUCKETS: int = LAYOUT["step_buckets"]
STEP_TIME_BOUNDS_NS = tuple(LAYOUT["step_time_bounds_ns"])
BATCH_TOKEN_BOUNDS = tuple(LAYOUT["batch_token_bounds"])

FINISH_CODES: dict[str, int] = LAYOUT["finish_codes"]
FINISH_NAMES = {v: k for k, v in FINISH_CODES.items()}
ERROR_CODES: dict[str, int] = LAYOUT["error_codes"]
ERROR_NAMES = {v: k for k, v in ERROR_CODES.items()}
TRANSCRIPT_KINDS: dict[str, int] = LAYOUT["transcript_kinds"]
ADAPTER_STATUSES: dict[str, int] = LAYOUT["adapter_statuses"]  # ADAPTER records: loaded, failed, unloaded
ADAPTER_STATUS_NAMES = {v: k for k, v in ADAPTER_STATUSES.items()}
SLOT_ACTIONS: dict[str, int] = LAYOUT["slot_actions"]  # SLOT_FILE records: save, restore, erase
MAX_REQUEST_ADAPTERS: int = LAYOUT["max_request_adapters"]  # LoRA adapters one request may apply
MAX_REQUEST_IMAGES: int = LAYOUT["max_request_images"]  # image inputs (encoder outputs) per request

# Flag bits (meanings in wire.h).
FLAGS: dict[str, int] = LAYOUT["flags"]
(REQUEST_HAS_SEED, REQUEST_IGNORE_EOS, REQUEST_EMBED, REQUEST_SPLIT_REASONING, REQUEST_REASONING_STARTS_INSIDE,
 REQUEST_REASONING_HARMONY, REQUEST_REASONING_AS_CONTENT, REQUEST_HARMONY_CALLS,
 REQUEST_GRAMMAR, REQUEST_LOGPROBS, REQUEST_PROMPT_LOGPROBS, REQUEST_ADAPTERS, REQUEST_IMAGES, DONE_LAST_CHOICE,
 AUDIO_TRANSLATE, AUDIO_WORD_TIMESTAMPS) = (FLAGS[n] for n in (
    "REQUEST_HAS_SEED", "REQUEST_IGNORE_EOS", "REQUEST_EMBED", "REQUEST_SPLIT_REASONING",
    "REQUEST_REASONING_STARTS_INSIDE", "REQUEST_REASONING_HARMONY", "REQUEST_REASONING_AS_CONTENT",
    "REQUEST_HARMONY_CALLS", "REQUEST_GRAMMAR", "REQUEST_LOGPROBS", "REQUEST_PROMPT_LOGPROBS",
    "REQUEST_ADAPTERS", "REQUEST_IMAGES", "DONE_LAST_CHOICE", "AUDIO_TRANSLATE", "AUDIO_WORD_TIMESTAMPS"))
MAX_CHOICES: int = LAYOUT["max_choices"]  # per REQUEST: n choices, or the inputs of an embedding request


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

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)

    def offsets(self) -> dict[str, int]:
        out, fmt = {}, "<"
        for name, code in self.fields:
            out[name] = struct.calcsize(fmt)
            fmt += code
        return out

    @cached_property
    def codec(self) -> struct.Struct:
        return struct.Struct(self.format)

    def pack(self, **values) -> bytes:
        """Every field by name (a missing one raises KeyError); array fields take a sequence."""
        flat: list = []
        for name, code in self.fields:
            if len(code) == 1:
                flat.append(values[name])
            else:
                flat.extend(values[name])
        return self.codec.pack(*flat)

    def unpack(self, payload, offset: int = 0) -> dict:
        """Field name → value (a tuple for array fields)."""
        flat = self.codec.unpack_from(payload, offset)
        out, i = {}, 0
        for name, code in self.fields:
            if len(code) == 1:
                out[name] = flat[i]
                i += 1
            else:
                n = int(code[:-1])
                out[name] = tuple(flat[i:i + n])
                i += n
        return out


def _spec(name: str) -> StructSpec:
    """The StructSpec of a wire.h struct, from its exported fields (wire.h asserts there is no
    implicit padding, so the packed format's offsets are the C++ ones; checked again here)."""
    native = LAYOUT["structs"][name]
    fields = sorted(native["fields"], key=lambda f: f[1])
    spec = StructSpec(name, tuple((f, code if count == 1 else f"{count}{code}") for f, _, code, count in fields))
    if spec.size != native["size"] or spec.offsets() != {f: offset for f, offset, _, _ in fields}:
        raise ImportError(f"lanes.wire: no packed format matches the native layout of {name}")
    return spec


# The scalar sampling fields in wire order (C++: LS_SAMPLING_SCALARS in csrc/sampler/params.h); their
# names, meanings and defaults are lanes.api.GenerationParams fields.
SAMPLING_SCALARS: tuple[str, ...] = tuple(LAYOUT["sampling_scalars"])
# Every wire.h record struct.
STRUCTS = tuple(_spec(name) for name in LAYOUT["structs"] if name != "SegmentHeader")
_BY_NAME = {spec.name: spec for spec in STRUCTS}
(REQUEST_HEADER, LOGIT_BIAS_ENTRY, CANCEL_RECORD, HELLO_RECORD, DELTA_HEADER, DONE_RECORD, STATS_RECORD,
 EMBEDDING_HEADER, ERROR_HEADER, LOGPROBS_HEADER, LOGPROB_ENTRY, AUDIO_REQUEST_HEADER, TRANSCRIPT_HEADER,
 ADAPTER_ENTRY, LOAD_ADAPTER_HEADER, UNLOAD_ADAPTER_RECORD, ADAPTER_STATUS_HEADER, IMAGE_ENTRY, SLOT_FILE_HEADER,
 SLOT_FILE_DONE_HEADER) = (
    _BY_NAME[n] for n in ("RequestHeader", "LogitBiasEntry", "CancelRecord", "HelloRecord", "DeltaHeader",
                          "DoneRecord", "StatsRecord", "EmbeddingHeader", "ErrorHeader", "LogprobsHeader",
                          "LogprobEntry", "AudioRequestHeader", "TranscriptHeader", "AdapterEntry",
                          "LoadAdapterHeader", "UnloadAdapterRecord", "AdapterStatusHeader", "ImageEntry",
                          "SlotFileHeader", "SlotFileDoneHeader"))

_U32 = struct.Struct("<I")
_FLAGS_OFFSET = REQUEST_HEADER.offsets()["flags"]
DELTA_HEADER_BYTES = DELTA_HEADER.size
ERROR_HEADER_BYTES = ERROR_HEADER.size


def encode_request(request_id: int, prompt_ids, params, num_choices: int) -> bytes:
    """REQUEST payload. `params` is a lanes.api.GenerationParams; each of the num_choices choices
    becomes its own sequence in the lane (choice i seeded with seed + i)."""
    seed = params.seed
    flags = (REQUEST_HAS_SEED if seed is not None else 0) | (REQUEST_IGNORE_EOS if params.ignore_eos else 0)
    reasoning = params.reasoning
    if reasoning is not None and reasoning.harmony:
        flags |= REQUEST_REASONING_HARMONY | (REQUEST_REASONING_AS_CONTENT if reasoning.as_content else 0)
        flags |= REQUEST_HARMONY_CALLS if reasoning.calls else 0
    elif reasoning is not None:
        flags |= REQUEST_SPLIT_REASONING | (REQUEST_REASONING_STARTS_INSIDE if reasoning.starts_inside else 0)
    grammar = [params.grammar.encode("utf-8")] if params.grammar else []
    if grammar:
        flags |= REQUEST_GRAMMAR
    if params.logprobs is not None:
        flags |= REQUEST_LOGPROBS | (REQUEST_PROMPT_LOGPROBS if params.prompt_logprobs else 0)
    if params.lora:
        flags |= REQUEST_ADAPTERS
    if params.images:
        flags |= REQUEST_IMAGES
    stops = [s.encode("utf-8") for s in params.stop]
    parts = [
        REQUEST_HEADER.pack(
            request_id=request_id, seed=(seed or 0) & 0xFFFFFFFFFFFFFFFF, num_choices=num_choices, flags=flags,
            max_tokens=params.max_tokens, **{name: getattr(params, name) for name in SAMPLING_SCALARS},
            num_prompt_ids=len(prompt_ids), num_logit_bias=len(params.logit_bias), num_stop=len(stops), reserved=0),
        struct.pack(f"<{len(prompt_ids)}i", *prompt_ids),
    ]
    for token_id, bias in params.logit_bias:
        parts.append(LOGIT_BIAS_ENTRY.pack(token_id=token_id, bias=bias))
    markers = [reasoning.open.encode("utf-8"), reasoning.close.encode("utf-8")] \
        if flags & REQUEST_SPLIT_REASONING else []
    for s in stops + markers:
        parts.append(_U32.pack(len(s)))
        parts.append(s)
    if params.logprobs is not None:
        parts.append(_U32.pack(params.logprobs))
    for s in grammar:
        parts.append(_U32.pack(len(s)))
        parts.append(s)
    if params.lora:  # last section (wire.h order)
        parts.append(_U32.pack(len(params.lora)))
        parts.extend(ADAPTER_ENTRY.pack(adapter_id=i, scale=s) for i, s in params.lora)
    if params.images:  # after the adapters (wire.h order): entries, then each one's float32 rows
        parts.append(_U32.pack(len(params.images)))
        rows = [np.ascontiguousarray(im.embeddings, dtype="<f4") for im in params.images]
        for im, r in zip(params.images, rows):
            if r.ndim != 2:
                raise ValueError("image embeddings must be 2-D (n_tokens, n_embd)")
            parts.append(IMAGE_ENTRY.pack(pos=im.pos, n_tokens=r.shape[0], n_embd=r.shape[1],
                                          non_causal=int(im.non_causal), content_hash=im.content_hash))
        parts.extend(r.tobytes() for r in rows)
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
    h = EMBEDDING_HEADER.unpack(payload)
    start = EMBEDDING_HEADER.size
    vector = bytes(payload[start:start + 4 * h["n_embd"]])
    if len(vector) != 4 * h["n_embd"]:
        raise ValueError("EMBEDDING record truncated")
    return h["request_id"], h["choice"], h["prompt_tokens"], vector


def decode_logprobs(payload: bytes) -> tuple[int, int, tuple, int, bytes, bytes]:
    """LOGPROBS → (request_id, choice, positions, num_prompt, content, reasoning): positions[i] =
    ((token, logprob), ((alt_token, alt_logprob), ...) best first), logprob None = no value
    (prompt position 0); the first num_prompt positions score prompt tokens; content and
    reasoning are the UTF-8 text released at the same step."""
    h = LOGPROBS_HEADER.unpack(payload)
    n, num_prompt, content_bytes, reasoning_bytes = (h["num_positions"], h["num_prompt_positions"],
                                                    h["content_bytes"], h["reasoning_bytes"])
    stride = 1 + h["num_top"]
    off = LOGPROBS_HEADER.size
    flat = struct.unpack_from("<" + LOGPROB_ENTRY.format[1:] * (n * stride), payload, off)  # (token, logprob) pairs
    off += LOGPROB_ENTRY.size * n * stride
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
    return h["request_id"], h["choice"], tuple(positions), num_prompt, content, reasoning


def encode_cancel(request_id: int) -> bytes:
    return CANCEL_RECORD.pack(request_id=request_id)


def encode_load_adapter(adapter_id: int, name: str, path: str) -> bytes:
    """LOAD_ADAPTER payload: the lane loads the GGUF LoRA adapter at path under adapter_id."""
    n, p = name.encode("utf-8"), path.encode("utf-8")
    return LOAD_ADAPTER_HEADER.pack(adapter_id=adapter_id, name_bytes=len(n), path_bytes=len(p), reserved=0) + n + p


def encode_unload_adapter(adapter_id: int) -> bytes:
    return UNLOAD_ADAPTER_RECORD.pack(adapter_id=adapter_id, reserved=0)


def decode_adapter_status(payload: bytes) -> tuple[int, str, int, int, str]:
    """ADAPTER → (adapter_id, status name, tensor_bytes, load_ns, message)."""
    h = ADAPTER_STATUS_HEADER.unpack(payload)
    message = bytes(payload[ADAPTER_STATUS_HEADER.size:]).decode("utf-8", "replace")
    return (h["adapter_id"], ADAPTER_STATUS_NAMES.get(h["status"], f"status_{h['status']}"), h["tensor_bytes"],
            h["load_ns"], message)


def encode_slot_file(op_id: int, action: str, slot: int, filename: str) -> bytes:
    """SLOT_FILE payload: the lane saves, restores or erases slot `slot` (filename in its prefix-cache dir)."""
    n = filename.encode("utf-8")
    return SLOT_FILE_HEADER.pack(op_id=op_id, action=SLOT_ACTIONS[action], slot=slot, name_bytes=len(n), reserved=0) + n


def decode_slot_file_done(payload: bytes) -> tuple[int, dict, str]:
    """SLOT_FILE_DONE → (op_id, {ok, bad_request, n_tokens, n_bytes, elapsed_ns}, message)."""
    h = SLOT_FILE_DONE_HEADER.unpack(payload)
    return h.pop("op_id"), h, bytes(payload[SLOT_FILE_DONE_HEADER.size:]).decode("utf-8", "replace")


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
    fields = HELLO_RECORD.unpack(payload)
    del fields["reserved"]  # padding
    return Hello(**fields)


# Tuples in wire.h field order. DELTA: (request_id, choice, channel, num_tokens, reserved, emit_ns);
# text = payload[DELTA_HEADER_BYTES:]
decode_delta_header = DELTA_HEADER.codec.unpack_from
# DONE: (request_id, choice, finish_reason, prompt_tokens, completion_tokens, cached_tokens, flags,
#        prefill_ns, decode_ns)
decode_done = DONE_RECORD.codec.unpack_from


@dataclass(frozen=True)
class Stats:
    """Cumulative engine counters of one lane (non-cumulative bucket counts), its sequences now and
    its prompt cache (wire.h LS_WIRE_PROMPT_CACHE_STATS: bytes, budget and entries now; the rest
    cumulative). Which fields are gauges: lanes.lane_stats.GAUGE_FIELDS."""
    num_steps: int
    step_ns_sum: int
    batch_tokens_sum: int
    step_ns_buckets: tuple[int, ...]
    batch_tokens_buckets: tuple[int, ...]
    active_sequences: int
    waiting_sequences: int
    prompt_cache_bytes: int = 0
    prompt_cache_budget_bytes: int = 0  # 0: the lane has no prompt cache
    prompt_cache_hits: int = 0
    prompt_cache_hit_tokens: int = 0
    prompt_cache_stores: int = 0
    prompt_cache_evictions: int = 0
    prompt_cache_entries: int = 0
    kv_pages_free: int = 0
    kv_pages_total: int = 0
    kv_window_pages_free: int = 0
    kv_window_pages_total: int = 0  # the sliding-window layers' pool (0: the model has none)
    prompt_cache_disk_reads: int = 0
    prompt_cache_disk_writes: int = 0
    prompt_cache_disk_bytes: int = 0
    prompt_cache_disk_budget_bytes: int = 0  # 0: no disk tier


def decode_stats(payload: bytes) -> Stats:
    fields = STATS_RECORD.unpack(payload)
    del fields["prompt_cache_reserved"]  # padding
    return Stats(**fields)


def decode_error(payload: bytes) -> tuple[int, str, str]:
    """→ (request_id, code name, message)."""
    h = ERROR_HEADER.unpack(payload)
    message = payload[ERROR_HEADER_BYTES:].decode("utf-8", "replace")
    return h["request_id"], ERROR_NAMES.get(h["code"], f"error_{h['code']}"), message
