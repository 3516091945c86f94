"""How an /api/chat or /api/generate answer leaves: NDJSON lines (gateway.ollama.frames) or one
JSON object. The final line carries done_reason and the statistics in integer nanoseconds, and
for /api/generate the `context` (prompt + answer token ids); a failure after the first line is an
`{"error": ...}` line."""
from __future__ import annotations

import orjson

from gateway.ollama.errors import message
from gateway.ollama.frames import NDJSON, OllamaFrames, error_line
from gateway.ollama.requests import OllamaError
from gateway.ollama.tools import OllamaToolStream, final_message
from gateway.serve.control import CANCELLED_CODE, CANCELLED_STATUS
from gateway.serve.lanes import ScoredChunk
from gateway.serve.output import Output, unescape
from gateway.serve.stats import RequestStats

CANCELLED_MESSAGE = "the request was cancelled (POST /stop or DELETE /v1/requests/{id})"


class OllamaOutput(Output):
    content_type = NDJSON

    def __init__(self, retry_after_s: int, frames: OllamaFrames, context_of, *, tool_format=None,
                 scores=None) -> None:
        """context_of(text) → the `context` ids of /api/generate (None for chat)."""
        super().__init__(retry_after_s)
        self.frames = frames
        self.keepalive = frames.keepalive()
        self.context_of = context_of
        self.tool_format = tool_format
        self.scores = scores  # gateway.ollama.logprobs.OllamaScores
        self.rewrite = None if tool_format is None else OllamaToolStream(frames, tool_format)
        self.direct = tool_format is None and scores is None
        self.done = None

    def _text(self, done) -> str:
        return self.scores.text() if self.scores is not None else unescape(done.text)

    # --- stream --------------------------------------------------------------------------------
    def chunk(self, choice: int, item) -> bytes:
        if type(item) is ScoredChunk:
            return self.scores.line(item)
        return item.data if self.rewrite is None else self.rewrite.chunk(item.data)

    def choice_done(self, choice: int, done, tracker, last: bool) -> bytes:
        held = self.scores.held_line() if self.scores is not None else \
            self.rewrite.finish() if self.rewrite is not None else b""
        stats = RequestStats.from_tracker(tracker).ollama_fields()
        return held + self.frames.final("", done.finish_reason, stats, self.context_of(self._text(done)))

    def error_frames(self, error) -> bytes:
        return error_line(message(error))

    # --- whole body ----------------------------------------------------------------------------
    def collect(self, choice: int, item) -> None:
        if type(item) is ScoredChunk:
            self.scores.collect(item)

    def collect_done(self, choice: int, done) -> None:
        self.done = done

    def body(self, tracker) -> tuple[bytes, str]:
        done, scores = self.done, self.scores
        if done is None:
            raise OllamaError(500, "the lane ended the request without a result")
        text = self._text(done)
        thinking = scores.thinking() if scores is not None else unescape(done.reasoning)
        context = self.context_of(text)
        calls = None
        if self.tool_format is not None:
            text, calls = final_message(done.text, self.tool_format)
        stats = RequestStats.from_tracker(tracker).ollama_fields()
        obj = self.frames.final_object(text, done.finish_reason, stats, context, thinking or None)
        if calls:
            obj["message"]["tool_calls"] = calls
        if scores is not None:
            obj["logprobs"] = scores.all_entries()
        return orjson.dumps(obj), "application/json; charset=utf-8"

    def failure(self, code: str, message: str) -> OllamaError:
        if code == CANCELLED_CODE:
            return OllamaError(CANCELLED_STATUS, CANCELLED_MESSAGE, code=code)
        status = 503 if code in ("lane_died", "lane_hung", "shutdown") else 500
        return OllamaError(status, f"{code}: {message}", code=code)
