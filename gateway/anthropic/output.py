"""How a Messages answer leaves: SSE events (gateway.anthropic.frames) or one message object.

Plain text streams are framed by the native relay (one `text` block, index 0: this Output only
opens and closes it). Answers with thinking or tools reach Python: the lane marks each delta's
channel (gateway.serve.output.marked_pieces) and gateway.anthropic.blocks turns the text into
blocks. A non-stream answer is built by the same blocks from the collected text, so both agree.
Which stop sequence ended an answer the lane says itself (ChoiceDone.stop_index).
"""
from __future__ import annotations

import orjson

from gateway.anthropic import frames
from gateway.anthropic.blocks import Blocks
from gateway.anthropic.errors import error_event
from gateway.serve.output import Output, marked_pieces, unescape

class MessagesOutput(Output):
    keepalive = frames.PING_EVENT

    def __init__(self, retry_after_s: int, model: str, prompt_tokens: int, *, stream: bool, direct: bool,
                 tool_format=None, stops: tuple[str, ...] = ()) -> None:
        super().__init__(retry_after_s)
        self.message_id = frames.new_message_id()
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.direct = direct
        self.blocks = Blocks(stream, tool_format)
        self.stops = stops  # the lane's `stop` list: ChoiceDone.stop_index points into it
        self.finish_reason = "stop"
        self.stop_index = -1

    def _stop(self, tracker) -> tuple[str, str | None, dict]:
        rec = tracker.record
        usage = frames.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens)
        if self.finish_reason == "length":
            return "max_tokens", None, usage
        if self.blocks.num_calls and not self.blocks.cut_short:  # a call cut short by a stop sequence cannot run
            return "tool_use", None, usage
        if self.stop_index < 0:
            return "end_turn", None, usage
        return "stop_sequence", self.stops[self.stop_index], usage

    def _feed(self, item) -> None:
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
        self.finish_reason, self.stop_index = done.finish_reason, done.stop_index
        tail = frames.block_stop(0) if self.direct else self.blocks.finish()
        return tail + frames.message_end(*self._stop(tracker))

    def error_frames(self, error) -> bytes:
        return error_event(error)

    # --- whole body ----------------------------------------------------------------------------
    def collect_done(self, choice: int, done) -> None:
        self.finish_reason, self.stop_index = done.finish_reason, done.stop_index
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
