"""Reading tool calls out of generated text (the format of gateway.tools), incrementally.

ToolCallParser takes the text in pieces as the lane produces it and returns events:
  ("content", text)                  text outside calls, minus any held-back suffix that could
                                     be the start of `<tool_call>`
  ("call", index, id, name)          a call began (its name is known)
  ("arguments", index, fragment)     the next piece of that call's arguments JSON
  ("end", index)                     the call's closing marker arrived (its arguments are whole)
Concatenating a call's fragments gives its arguments exactly as generated (compact JSON under
the grammar). The same parser serves non-stream answers (`parse_all`), so both agree.
"""
from __future__ import annotations

import json
import re
import uuid

from gateway.tools import CALL_CLOSE, CALL_OPEN

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')
_TAIL = "}\n" + CALL_CLOSE  # the outer object's brace, then the closing marker
_HOLD = len(_TAIL) + 8        # whitespace the model may put before the closing brace or marker


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _prefix_overlap(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ToolCallParser:
    def __init__(self) -> None:
        self._buf = ""
        self._state = "text"  # text | head | args
        self._index = -1      # index of the current / last call
        self.num_calls = 0

    def feed(self, text: str) -> list[tuple]:
        self._buf += text
        events: list[tuple] = []
        while True:
            if self._state == "text":
                at = self._buf.find(CALL_OPEN)
                if at < 0:
                    keep = _prefix_overlap(self._buf, CALL_OPEN)
                    emit, self._buf = self._buf[:len(self._buf) - keep], self._buf[len(self._buf) - keep:]
                    if emit:
                        events.append(("content", emit))
                    return events
                if at:
                    events.append(("content", self._buf[:at]))
                self._buf = self._buf[at + len(CALL_OPEN):]
                self._state = "head"
            elif self._state == "head":
                m = _HEAD.match(self._buf)
                if m is None:
                    return events
                self._index += 1
                self.num_calls += 1
                events.append(("call", self._index, new_call_id(), json.loads(m.group(1))))
                self._buf = self._buf[m.end():]
                self._state = "args"
            else:
                end = self._buf.find(CALL_CLOSE)
                if end < 0:
                    safe = len(self._buf) - _HOLD
                    if safe > 0:
                        events.append(("arguments", self._index, self._buf[:safe]))
                        self._buf = self._buf[safe:]
                    return events
                body = self._buf[:end].rstrip()
                if body.endswith("}"):
                    body = body[:-1].rstrip()  # the call object's own closing brace
                if body:
                    events.append(("arguments", self._index, body))
                events.append(("end", self._index))
                self._buf = self._buf[end + len(CALL_CLOSE):]
                self._state = "text"

    def finish(self) -> list[tuple]:
        """End of the text: whatever is held back goes out (a call cut short by the token limit
        keeps the arguments generated so far)."""
        rest, self._buf = self._buf, ""
        if not rest:
            return []
        if self._state == "text":
            return [("content", rest)]
        if self._state == "head":
            return [("content", CALL_OPEN + rest)]
        body = rest.rstrip()
        for n in range(len(_TAIL), 0, -1):  # a closing cut short by the token limit is not arguments
            if body.endswith(_TAIL[:n]):
                body = body[:-n]
                break
        return ([("arguments", self._index, body)] if body else []) + [("end", self._index)]


def parse_all(text: str) -> tuple[str | None, list[dict]]:
    """(content or None, OpenAI tool_calls) of a whole answer."""
    parser = ToolCallParser()
    content: list[str] = []
    calls: list[dict] = []
    for event in parser.feed(text) + parser.finish():
        if event[0] == "content":
            content.append(event[1])
        elif event[0] == "call":
            calls.append({"id": event[2], "type": "function", "function": {"name": event[3], "arguments": ""}})
        elif event[0] == "arguments":
            calls[event[1]]["function"]["arguments"] += event[2]
    joined = "".join(content).strip()
    return (joined or None) if calls else "".join(content), calls
