"""How a Messages answer leaves: SSE events (gateway.anthropic.frames) or one message object.

Plain text streams are framed by the native relay (one `text` block, index 0: this Output only
opens and closes it). Answers with thinking, tools or stop_sequences reach Python: the lane marks
each delta's channel (content NUL, reasoning SOH: bytes that never occur in JSON-escaped text) or,
with stop_sequences, sends ScoredChunks carrying the generated token ids (gateway.anthropic.stops),
and gateway.anthropic.blocks turns the text into blocks. A non-stream answer is built by the same
blocks from the collected text, so both agree.
"""
from __future__ import annotations

import re

import orjson

from gateway.anthropic import frames
from gateway.anthropic.blocks import Blocks
from gateway.anthropic.errors import error_event
from gateway.anthropic.stops import matched_stop, token_ids
from gateway.openai.tool_stream import TOOL_TEXT_FRAMING
from gateway.serve.lanes import ScoredChunk
from gateway.serve.output import Output, unescape

CONTENT_MARK = TOOL_TEXT_FRAMING  # (prefix, suffix) of a content delta framed for Python
REASONING_MARK = (b"\x01", b"")
_MARKS = re.compile(rb"([\x00\x01])")


def marked_pieces(data: bytes) -> list[tuple[bool, str]]:
    """(is_reasoning, text) runs of one or more marked deltas, in order."""
    parts = _MARKS.split(data)
    out: list[tuple[bool, str]] = []
    for mark, escaped in zip(parts[1::2], parts[2::2]):
        reasoning = mark == b"\x01"
        if out and out[-1][0] == reasoning:
            out[-1] = (reasoning, out[-1][1] + unescape(escaped))
        else:
            out.append((reasoning, unescape(escaped)))
    return out


class MessagesOutput(Output):
    keepalive = frames.PING_EVENT

    def __init__(self, retry_after_s: int, model: str, prompt_tokens: int, *, stream: bool, direct: bool,
                 model_text, tool_format=None, stops: tuple[str, ...] = ()) -> None:
        super().__init__(retry_after_s)
        self.message_id = frames.new_message_id()
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.direct = direct
        self.blocks = Blocks(stream, tool_format)
        self.model_text = model_text
        self.stops = stops
        self.token_ids: list[int] = []  # generated tokens (with stop_sequences)
        self.finish_reason = "stop"

    def _stop(self, tracker) -> tuple[str, str | None, dict]:
        rec = tracker.record
        usage = frames.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens)
        if self.finish_reason == "length":
            return "max_tokens", None, usage
        if self.blocks.num_calls:
            return "tool_use", None, usage
        stop = matched_stop(self.model_text, self.token_ids, self.stops)
        return ("end_turn" if stop is None else "stop_sequence"), stop, usage

    def _feed(self, item) -> None:
        if type(item) is ScoredChunk:
            self.token_ids += token_ids(item)
            self.blocks.thinking(item.reasoning.decode("utf-8", errors="replace"))
            self.blocks.text(item.content.decode("utf-8", errors="replace"))
            return
        for reasoning, text in marked_pieces(item.data):
            (self.blocks.thinking if reasoning else self.blocks.text)(text)

    # --- stream --------------------------------------------------------------------------------
    def opening(self, first_choice: int, num_choices: int) -> bytes:
        start = frames.message_start(self.message_id, self.model, self.prompt_tokens)
        return start + frames.block_start(0, {"type": "text", "text": ""}) if self.direct else start

    def chunk(self, choice: int, item) -> bytes:
        if self.direct:
            return item.data  # natively framed deltas that came the queued way
        self._feed(item)
        return self.blocks.take()

    def choice_done(self, choice: int, done, tracker, last: bool) -> bytes:
        self.finish_reason = done.finish_reason
        tail = frames.block_stop(0) if self.direct else self.blocks.finish()
        return tail + frames.message_end(*self._stop(tracker))

    def error_frames(self, error) -> bytes:
        return error_event(error)

    # --- whole body ----------------------------------------------------------------------------
    def collect(self, choice: int, item) -> None:
        if type(item) is ScoredChunk:
            self._feed(item)

    def collect_done(self, choice: int, done) -> None:
        self.finish_reason = done.finish_reason
        if not self.stops:  # else the text came with the ScoredChunks
            self.blocks.thinking(unescape(done.reasoning))
            self.blocks.text(unescape(done.text))

    def body(self, tracker) -> tuple[bytes, str]:
        self.blocks.finish()
        reason, stop, usage = self._stop(tracker)
        return orjson.dumps(frames.message(self.message_id, self.model, self.blocks.content, reason, stop,
                                           usage)), "application/json"


class CountOutput(Output):
    """count_tokens: answered without a lane."""

    def __init__(self, input_tokens: int) -> None:
        super().__init__(0)
        self.input_tokens = input_tokens

    def body(self, tracker) -> tuple[bytes, str]:
        return orjson.dumps({"input_tokens": self.input_tokens}), "application/json"
