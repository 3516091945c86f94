"""Tool-call answers in the OpenAI protocol: streamed `delta.tool_calls` and the non-stream body.

Streams with tools take the lane's text through Python (the lane marks each delta, content and
reasoning apart: gateway.serve.output.marked_pieces; one relay chunk may hold deltas of both):
gateway.features.tool_calls finds the calls in the content, and each event becomes a chunk as
openai-python accumulates them — a call's `index` counts from 0 within its choice, its `id`,
`type` and `name` come once in its first chunk, then `arguments` arrive in fragments.
A choice that made calls finishes with "tool_calls" (unless it ran out of tokens: "length", or a stop
string ended it inside a call's arguments: "stop").
"""
from __future__ import annotations

import orjson

from gateway.openai.frames import SYSTEM_FINGERPRINT, ChoiceResult, StreamFrames, usage
from gateway.features.tool_calls import ToolCallParser, parse_all
from gateway.features.tools import HERMES, CallFormat
from gateway.serve.lanes import TOOL_CALLS_FINISH
from gateway.serve.output import CONTENT_MARK, REASONING_MARK, marked_pieces, unescape

# A tools stream's framings of content and reasoning (the rewriters frame both in Python).
TOOL_TEXT_FRAMING = CONTENT_MARK
TOOL_REASONING_FRAMING = REASONING_MARK


def finish_reason(reason: str, num_calls: int) -> str:
    return TOOL_CALLS_FINISH if num_calls and reason == "stop" else reason


class ToolStreamRewriter:
    """The relay's `rewrite` hook for chat streams with tools (gateway.serve.relay.relay_stream)."""

    def __init__(self, frames: StreamFrames, fmt: CallFormat = HERMES) -> None:
        self._frames = frames
        self._fmt = fmt
        self._parsers: dict[int, ToolCallParser] = {}

    def _events(self, choice: int, events: list[tuple]) -> bytes:
        out = []
        for event in events:
            if event[0] == "content":
                if self._parser(choice).num_calls and not event[1].strip():
                    continue  # whitespace between calls (the non-stream answer strips it too)
                delta = {"content": event[1]}
            elif event[0] == "call":
                delta = {"tool_calls": [{"index": event[1], "id": event[2], "type": "function",
                                         "function": {"name": event[3], "arguments": ""}}]}
            elif event[0] == "arguments":
                delta = {"tool_calls": [{"index": event[1], "function": {"arguments": event[2]}}]}
            else:
                continue
            out.append(self._frames.delta_event(choice, delta))
        return b"".join(out)

    def _parser(self, choice: int) -> ToolCallParser:
        parser = self._parsers.get(choice)
        if parser is None:
            parser = self._parsers[choice] = ToolCallParser(self._fmt)
        return parser

    def chunk(self, choice: int, data: bytes) -> bytes:
        out = []
        for reasoning, text in marked_pieces(data):
            if reasoning:
                out.append(self._frames.delta_event(choice, {"reasoning_content": text, "reasoning": text}))
            else:
                out.append(self._events(choice, self._parser(choice).feed(text)))
        return b"".join(out)

    def finish(self, choice: int, reason: str) -> tuple[bytes, str]:
        parser = self._parser(choice)
        # A call cut short by a stop string was streamed but cannot run: the finish says why it ended.
        return self._events(choice, parser.finish()), finish_reason(reason, 0 if parser.cut_short else parser.num_calls)


def tool_response_body(frames: StreamFrames, results: list[ChoiceResult], prompt_tokens: int,
                       completion_tokens: int, cached_tokens: int, extra: dict | None = None,
                       fmt: CallFormat = HERMES) -> bytes:
    choices = []
    for i, result in enumerate(results):
        content, calls = parse_all(unescape(b"".join(result.escaped)), fmt, result.finish_reason)
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        if any(result.reasoning):
            reasoning = unescape(b"".join(result.reasoning))
            message.update(reasoning_content=reasoning, reasoning=reasoning)
        choices.append({"index": i, "message": message, "logprobs": None,
                        "finish_reason": finish_reason(result.finish_reason, len(calls))})
    return orjson.dumps({
        "id": frames.completion_id, "object": "chat.completion", "created": frames.created, "model": frames.model,
        "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens, cached_tokens), **(extra or {}),
    })
