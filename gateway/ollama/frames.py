"""Ollama NDJSON lines, pre-rendered per request: the native relay writes
`prefix + json_escaped(text) + suffix` for each delta; the few other lines (final, error,
keep-alive) are rendered here with orjson. Durations are integer nanoseconds; `created_at` is
RFC 3339 with fractional seconds (UTC)."""
from __future__ import annotations

import datetime

import orjson

NDJSON = "application/x-ndjson"
_MARK = "\x00laneserve-split\x00"


def rfc3339_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def rfc3339(epoch_s: float) -> str:
    return (datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc)
            .isoformat(timespec="microseconds").replace("+00:00", "Z"))


def line(obj: dict) -> bytes:
    return orjson.dumps(obj) + b"\n"


class OllamaFrames:
    """Lines of one /api/chat (chat=True) or /api/generate response."""

    def __init__(self, model: str, chat: bool) -> None:
        self.model = model
        self.chat = chat
        self.created_at = rfc3339_now()

    def _partial(self, text: str, thinking: str | None = None) -> dict:
        out = {"model": self.model, "created_at": self.created_at}
        if self.chat:
            out["message"] = {"role": "assistant", "content": text}
            if thinking:
                out["message"]["thinking"] = thinking
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        out["done"] = False
        return out

    @staticmethod
    def _split(obj: dict) -> tuple[bytes, bytes]:
        prefix, suffix = line(obj).split(orjson.dumps(_MARK)[1:-1], 1)
        return prefix, suffix

    def content_framing(self) -> tuple[bytes, bytes]:
        return self._split(self._partial(_MARK))

    def thinking_framing(self) -> tuple[bytes, bytes]:
        """A reasoning delta: `message.thinking` (chat) / `thinking` (generate), empty content."""
        return self._split(self._partial("", _MARK))

    def keepalive(self) -> bytes:
        """A valid progress line with no text (NDJSON has no comments)."""
        return line(self._partial(""))

    def final(self, text: str, done_reason: str, stats: dict, context: list[int] | None = None) -> bytes:
        return line(self.final_object(text, done_reason, stats, context))

    def final_object(self, text: str, done_reason: str, stats: dict, context: list[int] | None = None,
                     thinking: str | None = None) -> dict:
        out = self._partial(text, thinking)
        out["done"] = True
        out["done_reason"] = done_reason
        if context is not None:
            out["context"] = context
        out.update(stats)
        return out


def error_body(message: str) -> bytes:
    """Ollama's error object, as a whole response body and (with a newline) as a stream's last line."""
    return orjson.dumps({"error": message})


def error_line(message: str) -> bytes:
    return error_body(message) + b"\n"
