"""Public types of the lane pool (the gateway codes against these; re-exported by lanes.pool)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from lanes import _ring
from lanes.wire import MAX_REQUEST_ADAPTERS, MAX_REQUEST_IMAGES
from lanes.config import LANE_KINDS, LaneModelSpec  # noqa: F401  (re-exported: the lanes' API)

# Lane replica states (one definition: metrics, health and admission import these).
LANE_STATES = ("starting", "ready", "busy", "restarting", "failed", "stopped")
SERVING_STATES = ("ready", "busy")  # handshaken and alive: ready = idle, busy = serving requests


class Framing(NamedTuple):
    """How the native relay frames one (choice, channel) of a streamed request's deltas:
    event bytes = prefix + json_escaped(text) + suffix. A tuple: RingReader.add_route takes it as is."""
    choice: int
    channel: int         # lanes.wire.CHANNELS
    prefix: bytes
    suffix: bytes


class RepeatedFraming(NamedTuple):
    """Like Framing, with the escaped text inserted twice: prefix + text + middle + text + suffix
    (one delta as two JSON fields, e.g. `reasoning_content` and `reasoning`)."""
    choice: int
    channel: int
    prefix: bytes
    middle: bytes
    suffix: bytes


class NumberedFraming(NamedTuple):
    """Numbered events: prefix + N + middle + json_escaped(text) + suffix, where N counts the
    request's numbered events from `first_number` (the Responses API's sequence_number);
    ChoiceDone.next_number says where the count stands when a choice ends."""
    choice: int
    channel: int
    prefix: bytes
    middle: bytes
    suffix: bytes
    first_number: int


@dataclass(frozen=True)
class ReasoningMarkers:
    """How the lane splits a model's reasoning out of its text (csrc/engine/reasoning_splitter.h):
    text between `open` and `close` goes to the reasoning channel; starts_inside: the prompt already
    opened the block. harmony: gpt-oss channels instead (open/close empty): the analysis channel is
    reasoning (content too when as_content), the other channels content, harmony's control text neither;
    calls: messages to functions.NAME reach content as calls (gateway.features.tools.HARMONY reads them)."""
    open: str
    close: str
    starts_inside: bool = False
    harmony: bool = False
    as_content: bool = False
    calls: bool = False

    def __post_init__(self) -> None:
        if self.harmony and (self.open or self.close or self.starts_inside):
            raise ValueError("harmony reasoning takes no markers")
        if not self.harmony and (not self.close or self.as_content or self.calls):
            raise ValueError("the reasoning close marker must be non-empty")


# Defaults of the scalar sampling fields, from their one definition (LS_SAMPLING_SCALARS in
# csrc/sampler/params.h); lanes/wire.py packs the same names in the exported wire order.
_SAMPLING = _ring.sampling_defaults()


@dataclass(frozen=True)
class AdapterInfo:
    """A LoRA adapter loaded on a model's lanes (LanePool.adapters): `id` is what
    GenerationParams.lora names; tensor_bytes what it adds to each lane's memory."""
    id: int
    name: str
    path: str
    tensor_bytes: int = 0


class AdapterError(Exception):
    """A LoRA adapter could not be loaded (bad file, wrong base model, unknown name): the message
    names the adapter and the problem."""


@dataclass(frozen=True, eq=False)
class PromptImage:
    """An image in a prompt: positions [pos, pos + len(embeddings)) take the rows of `embeddings`
    (float32 [n_tokens, n_embd], the vision encoder's output) in place of their placeholder ids;
    non_causal: those positions see the whole image (gemma3); content_hash (64-bit, of the image
    and the projector) tells images apart for prefix reuse and the prompt cache."""
    pos: int
    embeddings: Any
    non_causal: bool
    content_hash: int


@dataclass(frozen=True)
class GenerationParams:
    """The ONE Python definition of a generation's parameters (the C++ one is
    csrc/sampler/params.h, whose defaults the sampling scalars take). The gateway fills it from
    request fields of the same names and takes the defaults it needs from its fields."""
    max_tokens: int
    temperature: float = _SAMPLING["temperature"]
    top_p: float = _SAMPLING["top_p"]
    top_k: int = _SAMPLING["top_k"]
    min_p: float = _SAMPLING["min_p"]
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = _SAMPLING["presence_penalty"]
    frequency_penalty: float = _SAMPLING["frequency_penalty"]
    repetition_penalty: float = _SAMPLING["repetition_penalty"]
    repeat_last_n: int = _SAMPLING["repeat_last_n"]
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_tokens: int = _SAMPLING["min_tokens"]
    ignore_eos: bool = False
    reasoning: ReasoningMarkers | None = None  # None: all text is content
    grammar: str | None = None  # llguidance grammar the output must follow (gateway.features.structured)
    # None: no logprobs; else every generated token is scored with this many alternatives (0..20)
    # and the output arrives as ScoredChunks. prompt_logprobs scores the prompt tokens too (echo)
    # and allows max_tokens 0 (score the prompt without generating).
    logprobs: int | None = None
    prompt_logprobs: bool = False
    # LoRA adapters applied to this request: (adapter id, scale) pairs, ids from
    # LanePool.adapters(model) (llama-server's request "lora": [{"id", "scale"}]); adapters left
    # out, or at scale 0, are not applied. () = the base model.
    lora: tuple[tuple[int, float], ...] = ()
    images: tuple[PromptImage, ...] = ()  # in position order (the lane checks spans and sizes)

    def __post_init__(self) -> None:
        if not (0 if self.prompt_logprobs else 1) <= self.max_tokens < 2**31:
            raise ValueError(f"max_tokens must be in [1, 2^31), got {self.max_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be in [0, 20], got {self.logprobs}")
        if self.prompt_logprobs and self.logprobs is None:
            raise ValueError("prompt_logprobs needs logprobs")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError("seed must fit in 64 bits unsigned")
        if not 0 <= self.min_tokens < 2**31 or not -2**31 <= self.top_k < 2**31:
            raise ValueError("min_tokens/top_k out of range")
        ids = [i for i, _ in self.lora]
        if len(ids) > MAX_REQUEST_ADAPTERS or len(set(ids)) != len(ids) or any(not 0 < i < 2**32 for i in ids):
            raise ValueError(f"lora takes at most {MAX_REQUEST_ADAPTERS} distinct adapter ids, got {ids}")
        if len(self.images) > MAX_REQUEST_IMAGES:
            raise ValueError(f"at most {MAX_REQUEST_IMAGES} image inputs per request, got {len(self.images)}")


def param_default(name: str):
    """The default of a GenerationParams field: what the gateway's parsers fall back to."""
    return GenerationParams.__dataclass_fields__[name].default


@dataclass(frozen=True)
class Chunk:
    choice: int
    data: bytes          # one or more complete framed deltas, concatenated


@dataclass(frozen=True)
class ScoredChunk:
    """Output of a request with logprobs, one per lane step and choice: the positions scored at
    that step and the text released with them (text of a token may come with a later chunk when
    the lane held it back: split UTF-8, a possible stop-string prefix).
    positions[i] = ((token, logprob), ((alt_token, alt_logprob), ...) best first); logprob None:
    no value (prompt position 0). The first num_prompt positions score prompt tokens."""
    choice: int
    positions: tuple
    num_prompt: int
    content: bytes       # raw UTF-8
    reasoning: bytes = b""


@dataclass(frozen=True)
class ChoiceDone:
    choice: int
    finish_reason: str   # lanes.wire.FINISH_CODES: "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    prefill_ns: int
    decode_ns: int
    cached_tokens: int = 0
    text: bytes = b""    # collect mode (non-stream): the choice's JSON-escaped content
    reasoning: bytes = b""  # collect mode: its JSON-escaped reasoning (channel "reasoning")
    next_number: int = 0  # NumberedFraming: the number the request's next event carries
    stop_index: int = -1  # finish "stop" by a stop string: its index in the request's `stop`; else -1


@dataclass(frozen=True)
class Embedding:
    """One input's embedding (an embedding request's choice); its ChoiceDone follows."""
    choice: int
    vector: bytes        # float32 little-endian [n_embd], L2 norm 1
    prompt_tokens: int


@dataclass(frozen=True)
class TranscriptPart:
    """Metadata of an audio request (lanes.audio.records TRANSCRIPT): kind "info" (language,
    language_probability, duration) once, then one "segment" per decoded segment."""
    kind: str
    value: dict
    choice: int = 0  # an audio request has one choice; consumers index every item by choice


class LaneBusy(Exception):
    """Every lane of that model is busy (or the pool is draining) → the gateway answers 429."""


class LaneError(Exception):
    """A lane died, hung or failed mid-request. .code: 'lane_died', 'lane_hung', 'shutdown',
    'bad_request', 'engine_error', 'output_overflow', 'protocol_error'."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class LaneStartupError(Exception):
    """A lane could not start; everything was torn down."""


@dataclass(frozen=True)
class LaneStatus:
    model: str
    index: int
    state: str           # one of LANE_STATES
    pid: int | None
    restarts: int
    in_flight: int = 0   # requests on this replica
    num_slots: int = 0   # from its handshake (0 before)
    kv_cache_bytes: int = 0
