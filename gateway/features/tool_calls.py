"""Reading tool calls out of generated text (the format of gateway.features.tools), incrementally.

ToolCallParser takes the text in pieces as the lane produces it and returns events:
  ("content", text)                  text outside calls, minus any held-back suffix that could
                                     be the start of `<tool_call>`
  ("call", index, id, name)          a call began (its name is known)
  ("arguments", index, fragment)     the next piece of that call's arguments JSON
  ("end", index)                     the call's closing marker arrived (its arguments are whole)
Concatenating a call's fragments gives its arguments exactly as generated (compact JSON under
the grammar). The same parser serves non-stream answers (`parse_all`), so both agree.
Formats (gateway.features.tools.CallFormat): HERMES finds `<tool_call>` blocks anywhere in the text;
LLAMA3 reads an answer whose first non-space character is "{" as one bare call, any other as text;
HARMONY finds the lane's `<|channel|>commentary to=functions.NAME<|message|>ARGS<|call|>` anywhere
(ARGS is the message body as the model wrote it, up to <|call|> or the end of the text).
"""
from __future__ import annotations

import json
import re
import uuid

from gateway.features.tools import CALL_CLOSE, CALL_OPEN, HARMONY, HARMONY_NAME_END, HERMES, LLAMA3, CallFormat


def _head(args_key: str) -> re.Pattern:
    return re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"' + args_key + r'"\s*:\s*')


_HEADS = {f.name: _head(f.args_key) for f in (HERMES, LLAMA3)}


def _call_name(literal: str) -> str | None:
    """The name in a call head's string literal, or None when it is no name a client can receive.
    The head pattern takes any backslash pair, so a model's `"a\\q"` or `"\\ud800"` reaches here: a
    bad escape, or a lone surrogate that no UTF-8 response can carry. Control characters inside
    the string are the model's own text and kept (strict=False), as llama.cpp's parser keeps them."""
    try:
        name = json.loads(literal, strict=False)
        name.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return None
    return name


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _prefix_overlap(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ToolCallParser:
    def __init__(self, fmt: CallFormat = HERMES) -> None:
        self._fmt = fmt
        self._head = _HEADS.get(fmt.name)
        self._open = HARMONY.open if fmt is HARMONY else CALL_OPEN  # where a call begins in text
        self._buf = ""
        self._state = "start" if fmt is LLAMA3 else "text"  # (start) text | head | args | tail
        self._index = -1      # index of the current / last call
        self.num_calls = 0
        self._depth = 0       # arguments scanner: nesting depth, inside a string, after a backslash
        self._in_string = False
        self._escaped = False

    def feed(self, text: str) -> list[tuple]:
        self._buf += text
        events: list[tuple] = []
        while True:
            if self._state == "start":  # LLAMA3: a call is the whole answer, from its first "{"
                stripped = self._buf.lstrip()
                if not stripped:
                    return events
                self._state = "head" if stripped[0] == "{" else "free"
            elif self._state == "free":
                if self._buf:
                    events.append(("content", self._buf))
                    self._buf = ""
                return events
            elif self._state == "text":
                at = self._buf.find(self._open)
                if at < 0:
                    keep = _prefix_overlap(self._buf, self._open)
                    emit, self._buf = self._buf[:len(self._buf) - keep], self._buf[len(self._buf) - keep:]
                    if emit:
                        events.append(("content", emit))
                    return events
                if at:
                    events.append(("content", self._buf[:at]))
                self._buf = self._buf[at + len(self._open):]
                self._state = "head"
            elif self._fmt is HARMONY:
                if not self._feed_harmony(events):
                    return events
            elif self._state == "head":
                m = self._head.match(self._buf)
                if m is None:
                    return events
                name = _call_name(m.group(1))
                if name is None:  # not a call after all: the marker is text, scanning goes on after it
                    if self._fmt is HERMES:
                        events.append(("content", CALL_OPEN))
                        self._state = "text"
                    else:
                        self._state = "free"
                    continue
                self._index += 1
                self.num_calls += 1
                events.append(("call", self._index, new_call_id(), name))
                self._buf = self._buf[m.end():]
                self._state = "args"
                self._depth, self._in_string, self._escaped = 0, False, False
            elif self._state == "args":
                end = self._scan_arguments()
                if end < 0:
                    if self._buf:
                        events.append(("arguments", self._index, self._buf))
                        self._buf = ""
                    return events
                if end:
                    events.append(("arguments", self._index, self._buf[:end]))
                self._buf = self._buf[end:]
                self._state = "tail"
            else:  # tail: the call object's closing brace, then (HERMES) the closing marker
                marker = CALL_CLOSE if self._fmt is HERMES else "}"
                at = self._buf.find(marker)
                if at < 0:
                    return events
                events.append(("end", self._index))
                self._buf = self._buf[at + len(marker):]
                self._state = "text" if self._fmt is HERMES else "free"

    def _feed_harmony(self, events: list) -> bool:
        """One step of a harmony call (head: the name up to <|message|>; args: the body up to
        <|call|>); False when the buffer holds too little to go on."""
        if self._state == "head":
            at = self._buf.find(HARMONY_NAME_END)
            if at < 0:
                return False
            self._index += 1
            self.num_calls += 1
            events.append(("call", self._index, new_call_id(), self._buf[:at]))
            self._buf = self._buf[at + len(HARMONY_NAME_END):]
            self._state = "args"
            return True
        at = self._buf.find(HARMONY.close)
        end = len(self._buf) - _prefix_overlap(self._buf, HARMONY.close) if at < 0 else at
        if end:
            events.append(("arguments", self._index, self._buf[:end]))
        self._buf = self._buf[end:]
        if at < 0:
            return False
        events.append(("end", self._index))
        self._buf = self._buf[len(HARMONY.close):]
        self._state = "text"
        return True

    def _scan_arguments(self) -> int:
        """Scans the arguments value (a JSON object) in the buffer, carrying string/escape/depth
        state across pieces; returns the buffer offset just past its end, or -1 if it goes on.
        Markers inside JSON strings are text, not the end of the call."""
        for i, ch in enumerate(self._buf):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        return -1

    @property
    def cut_short(self) -> bool:
        """The last call's arguments never closed (a stop string or the token limit ended the text
        inside them): that call is not one a client can run. Harmony calls end at <|call|>, an end
        token the text never holds, so theirs are closed by the end of the answer."""
        return self._state == "args" and self._fmt is not HARMONY

    def finish(self) -> list[tuple]:
        """End of the text: whatever is held back goes out (a call cut short by the token limit
        keeps the arguments generated so far)."""
        rest, self._buf = self._buf, ""
        if self._state in ("text", "start", "free"):
            return [("content", rest)] if rest else []
        if self._state == "head":
            return [("content", (self._open if self._fmt is not LLAMA3 else "") + rest)]
        events = [("arguments", self._index, rest)] if rest and self._state == "args" else []
        return events + [("end", self._index)]


def parse_all(text: str, fmt: CallFormat = HERMES, finish_reason: str = "stop") -> tuple[str | None, list[dict]]:
    """(content or None, OpenAI tool_calls) of a whole answer. An answer that ended inside a call's
    arguments for any reason but the token limit (OpenAI keeps such a call, with "length") is all
    content, no calls, as llama-server returns an answer its parser cannot read."""
    parser = ToolCallParser(fmt)
    content: list[str] = []
    calls: list[dict] = []
    events = parser.feed(text)
    if parser.cut_short and finish_reason != "length":
        return text, []
    for event in events + parser.finish():
        if event[0] == "content":
            content.append(event[1])
        elif event[0] == "call":
            calls.append({"id": event[2], "type": "function", "function": {"name": event[3], "arguments": ""}})
        elif event[0] == "arguments":
            calls[event[1]]["function"]["arguments"] += event[2]
    joined = "".join(content).strip()
    return (joined or None) if calls else "".join(content), calls
