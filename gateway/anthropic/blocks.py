"""An answer's content blocks, built from its text in order, for answers Python frames itself
(thinking, tools, stop sequences) and for every non-stream answer.

Thinking text opens a `thinking` block, content text a `text` block, a tool call (found in the
content by gateway.features.tool_calls) a `tool_use` block whose input arrives as
`input_json_delta` fragments; a new kind of text closes the open block, so one block is open at a
time, in index order. A thinking block ends with a `signature_delta` (an opaque digest of its
text: laneserve does not sign; clients send it back and it is dropped). Whitespace between tool
calls opens no text block (as the OpenAI answers strip it).
"""
from __future__ import annotations

import hashlib
import json

from gateway.anthropic import frames
from gateway.features.tool_calls import ToolCallParser


def signature(thinking: str) -> str:
    return "laneserve-" + hashlib.sha256(thinking.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class Blocks:
    def __init__(self, stream: bool, tool_format=None) -> None:
        self.stream = stream
        self.content: list[dict] = []  # the blocks so far (tool_use input: the arguments text until finish)
        self.parser = None if tool_format is None else ToolCallParser(tool_format)
        self._open: str | None = None   # the open block's type
        self._out: list[bytes] = []

    @property
    def num_calls(self) -> int:
        return 0 if self.parser is None else self.parser.num_calls

    @property
    def cut_short(self) -> bool:
        return self.parser is not None and self.parser.cut_short

    def _emit(self, obj_or_bytes) -> None:
        if self.stream:
            self._out.append(obj_or_bytes if type(obj_or_bytes) is bytes else frames.event(obj_or_bytes))

    def _close(self) -> None:
        if self._open is None:
            return
        index, block = len(self.content) - 1, self.content[-1]
        if self._open == "thinking":
            block["signature"] = signature(block["thinking"])
            self._emit(frames.delta_event(index, "signature_delta", "signature", block["signature"]))
        self._emit(frames.block_stop(index))
        self._open = None

    def _start(self, block: dict) -> int:
        self._close()
        self.content.append(block)
        self._open = block["type"]
        start = dict(block, input={}) if block["type"] == "tool_use" else block
        self._emit(frames.block_start(len(self.content) - 1, start))
        return len(self.content) - 1

    def _delta(self, kind: str, key: str, delta_type: str, piece: str) -> None:
        if self._open != kind:
            self._start({"type": kind, kind: "", **({"signature": ""} if kind == "thinking" else {})})
        self.content[-1][kind] += piece
        self._emit(frames.delta_event(len(self.content) - 1, delta_type, key, piece))

    def thinking(self, piece: str) -> None:
        if piece:
            self._delta("thinking", "thinking", "thinking_delta", piece)

    def _text(self, piece: str) -> None:
        if piece and (self._open == "text" or self.parser is None or piece.strip()):
            self._delta("text", "text", "text_delta", piece)

    def text(self, piece: str) -> None:
        """Content text: through the tool-call parser when the request has tools."""
        if self.parser is None:
            self._text(piece)
        else:
            self._events(self.parser.feed(piece))

    def _events(self, events: list[tuple]) -> None:
        for kind, *rest in events:
            if kind == "content":
                self._text(rest[0])
            elif kind == "call":
                self._start({"type": "tool_use", "id": frames.tool_use_id(rest[1]), "name": rest[2], "input": ""})
            elif kind == "arguments" and self._open == "tool_use":
                self.content[-1]["input"] += rest[1]
                self._emit(frames.delta_event(len(self.content) - 1, "input_json_delta", "partial_json", rest[1]))

    def take(self) -> bytes:
        """The events produced since the last take (stream)."""
        out, self._out = b"".join(self._out), []
        return out

    def finish(self) -> bytes:
        """The end of the answer: held-back text out, the open block closed; tool inputs as objects."""
        if self.parser is not None:
            self._events(self.parser.finish())
        self._close()
        for block in self.content:
            if block["type"] == "tool_use":
                block["input"] = _input(block["input"])
        return self.take()


def _input(arguments: str) -> dict:
    """A call's arguments (compact JSON under the tool grammar); cut short by max_tokens: {}."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return value if type(value) is dict else {}
