"""Pre-rendered OpenAI stream frames and non-stream bodies.

Per request we JSON-encode the envelope once, split around the content string, and hand the
lane a (prefix, suffix) pair per choice; the lane writes `prefix + json_escaped(text) + suffix`
for every delta, so Python never encodes a token. The few frames that are not content deltas
(role, finish, usage, [DONE]) are rendered here with orjson.

`id`, `created`, `model` and `system_fingerprint` are identical on every chunk (llama.cpp PR
#5880); `finish_reason` is null until the final choice chunk (Ollama #4357); `usage: null` is on
every chunk only when include_usage asked for the usage chunk (vLLM #7262, llama.cpp #16048).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import orjson

SYSTEM_FINGERPRINT = "laneserve-0.1.0"
DONE_EVENT = b"data: [DONE]\n\n"
_MARK = "\x00laneserve-split\x00"  # cannot occur in an encoded envelope except where we put it


def _split(envelope: dict) -> tuple[bytes, bytes]:
    encoded = orjson.dumps(envelope)
    prefix, suffix = encoded.split(orjson.dumps(_MARK)[1:-1], 1)
    return prefix, suffix


@dataclass(frozen=True)
class StreamFrames:
    """Frames of one streamed request; `chat` selects chat.completion.chunk vs text_completion."""

    completion_id: str
    created: int
    model: str
    chat: bool
    include_usage: bool

    @property
    def object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _chunk(self, choices: list) -> dict:
        chunk = {
            "id": self.completion_id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _event(self, chunk: dict) -> bytes:
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def content_framing(self, index: int) -> tuple[bytes, bytes]:
        """(prefix, suffix) around the JSON-escaped delta text of choice `index`."""
        if self.chat:
            choice = {"index": index, "delta": {"content": _MARK}, "logprobs": None, "finish_reason": None}
        else:
            choice = {"index": index, "text": _MARK, "logprobs": None, "finish_reason": None}
        prefix, suffix = _split(self._chunk([choice]))
        return b"data: " + prefix, suffix + b"\n\n"

    def reasoning_framing(self, index: int) -> tuple[bytes, bytes, bytes]:
        """Chat only: (prefix, middle, suffix) — the relay inserts the escaped reasoning twice,
        as `reasoning_content` (vLLM, llama-server, DeepSeek) and `reasoning` (OpenRouter, vLLM)."""
        choice = {"index": index, "delta": {"reasoning_content": _MARK, "reasoning": _MARK}, "logprobs": None,
                  "finish_reason": None}
        prefix, middle, suffix = orjson.dumps(self._chunk([choice])).split(orjson.dumps(_MARK)[1:-1])
        return b"data: " + prefix, middle, suffix + b"\n\n"

    def choice_event(self, choice: dict) -> bytes:
        """One chunk around a choice rendered elsewhere (gateway.openai.logprobs: chunks framed in Python)."""
        return self._event(self._chunk([choice]))

    def role_event(self, index: int) -> bytes:
        """Chat only: the first delta of a choice carries the role (openai: 'missing role')."""
        choice = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return self._event(self._chunk([choice]))

    def delta_event(self, index: int, delta: dict) -> bytes:
        """Chat only: one choice chunk with this delta (tool calls; content rendered by Python)."""
        return self._event(self._chunk([{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]))

    def finish_event(self, index: int, finish_reason: str, extra: dict | None = None) -> bytes:
        """`extra`: top-level fields added after the OpenAI ones (gateway.serve.stats)."""
        if self.chat:
            choice = {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": index, "text": "", "logprobs": None, "finish_reason": finish_reason}
        return self._event({**self._chunk([choice]), **(extra or {})})

    def usage_event(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
                    extra: dict | None = None) -> bytes:
        chunk = self._chunk([])
        chunk["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return self._event({**chunk, **(extra or {})})


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def new_completion_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def now_s() -> int:
    return int(time.time())


@dataclass
class ChoiceResult:
    """A non-stream choice: the lane's escaped text pieces, joined without decoding."""

    escaped: list
    finish_reason: str | None = None
    reasoning: list = field(default_factory=list)  # escaped reasoning pieces (chat); omitted when empty
    logprobs: dict | None = None  # gateway.openai.logprobs' object for the choice


def non_stream_body(
    *, completion_id: str, created: int, model: str, chat: bool, choices: list[ChoiceResult],
    prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, extra: dict | None = None,
) -> bytes:
    """The full JSON body; each choice's text is spliced in as already-escaped bytes. `extra`:
    top-level fields after the OpenAI ones (gateway.serve.stats)."""
    rendered = []
    for i, choice in enumerate(choices):
        if chat:
            message = {"role": "assistant", "content": _MARK}
            if any(choice.reasoning):
                message.update(reasoning_content=_MARK, reasoning=_MARK)
            rendered.append({"index": i, "message": message, "logprobs": choice.logprobs,
                             "finish_reason": choice.finish_reason})
        else:
            rendered.append({"index": i, "text": _MARK, "logprobs": choice.logprobs,
                             "finish_reason": choice.finish_reason})
    skeleton = orjson.dumps({
        "id": completion_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": rendered,
        "usage": usage(prompt_tokens, completion_tokens, cached_tokens),
        **(extra or {}),
    })
    # Split the skeleton once and interleave: generated text is never searched for markers.
    parts = skeleton.split(orjson.dumps(_MARK)[1:-1])
    inserts = []
    for choice in choices:
        inserts.append(choice.escaped)
        if chat and any(choice.reasoning):
            inserts += [choice.reasoning, choice.reasoning]
    out = [parts[0]]
    for pieces, tail in zip(inserts, parts[1:]):
        out.extend(pieces)
        out.append(tail)
    return b"".join(out)
