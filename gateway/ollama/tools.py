"""Tool calls in the Ollama protocol: `message.tool_calls = [{"function": {"name", "arguments":
{...}}}]` with arguments as an object, one whole call per streamed line (Ollama never streams a
call in pieces), content lines in between. The calls are found by gateway.features.tool_calls."""
from __future__ import annotations

import json

from gateway.ollama.frames import line
from gateway.features.tool_calls import ToolCallParser, parse_all
from gateway.serve.output import marked_pieces, unescape
from gateway.features.tools import HERMES, CallFormat


def _arguments(text: str):
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text  # cut short by the token limit: what was generated


def ollama_calls(calls: list[dict]) -> list[dict]:
    return [{"function": {"index": i, "name": c["function"]["name"],
                          "arguments": _arguments(c["function"]["arguments"])}} for i, c in enumerate(calls)]


def final_message(escaped: bytes, fmt: CallFormat = HERMES) -> tuple[str, list[dict]]:
    """(content, Ollama tool_calls) of a whole answer."""
    content, calls = parse_all(unescape(escaped), fmt)
    return content or "", ollama_calls(calls)


class OllamaToolStream:
    """The NDJSON relay's `rewrite` hook for /api/chat streams with tools."""

    def __init__(self, frames, fmt: CallFormat = HERMES) -> None:
        self._frames = frames
        self._parser = ToolCallParser(fmt)
        self._calls: dict[int, dict] = {}

    def _lines(self, events: list[tuple]) -> bytes:
        out = []
        for event in events:
            kind = event[0]
            if kind == "content":
                out.append(line(self._frames._partial(event[1])))
            elif kind == "call":
                self._calls[event[1]] = {"id": event[2], "type": "function",
                                         "function": {"name": event[3], "arguments": ""}}
            elif kind == "arguments":
                self._calls[event[1]]["function"]["arguments"] += event[2]
            elif kind == "end":
                obj = self._frames._partial("")
                obj["message"]["tool_calls"] = ollama_calls([self._calls[event[1]]])
                obj["message"]["tool_calls"][0]["function"]["index"] = event[1]
                out.append(line(obj))
        return b"".join(out)

    def chunk(self, data: bytes) -> bytes:
        """Marked deltas (gateway.openai.tool_stream): thinking lines as they come, calls found in the content."""
        return b"".join(line(self._frames._partial("", text)) if reasoning else self._lines(self._parser.feed(text))
                        for reasoning, text in marked_pieces(data))

    def finish(self) -> bytes:
        return self._lines(self._parser.finish())
