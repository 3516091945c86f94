"""What a protocol supplies for the answer of one request: its stream frames and its whole body.

The pipeline (gateway.serve.handler) and the relay (gateway.serve.relay) drive a request's lane
stream and call these hooks; a protocol overrides what its answer needs and nothing else. Frames
are bytes in the protocol's own framing (SSE events, NDJSON lines). Lane deltas that the native
relay frames never pass through here; `chunk` sees only what came the queued way (the socket was
busy) or what Python frames itself (tool calls, logprobs, transcript metadata).
"""
from __future__ import annotations

import re

import orjson

from gateway.http.errors import APIError, unavailable
from gateway.serve.control import CANCELLED_CODE, cancelled_error


SSE_KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it


def unescape(escaped: bytes) -> str:
    """Text the lane sent JSON-escaped (collected choices, marked tool text) as a str."""
    return orjson.loads(b'"' + escaped + b'"')


# Deltas framed for Python (tools, thinking blocks and items): a mark byte per channel, then the
# escaped text; neither byte occurs in JSON-escaped text, so marked deltas are told apart from each
# other and from events the relay framed itself.
CONTENT_MARK = (b"\x00", b"")   # (prefix, suffix): a lanes Framing's
REASONING_MARK = (b"\x01", b"")
_MARKS = re.compile(rb"([\x00\x01])")


def marked_pieces(data: bytes) -> list[tuple[bool, str]]:
    """(is reasoning, text) runs of one or more marked deltas, in order."""
    parts = _MARKS.split(data)
    out: list[tuple[bool, str]] = []
    for mark, escaped in zip(parts[1::2], parts[2::2]):
        reasoning = mark == REASONING_MARK[0]
        if out and out[-1][0] == reasoning:
            out[-1] = (reasoning, out[-1][1] + unescape(escaped))
        else:
            out.append((reasoning, unescape(escaped)))
    return out


def drained_error(retry_after_s: int) -> APIError:
    """A lane ended the request because the server is shutting down (finish reason `cancelled`)."""
    return unavailable("the server is shutting down; the request was cancelled", retry_after_s,
                       code="server_shutting_down")


class Output:
    content_type = "text/event-stream; charset=utf-8"  # of the stream
    keepalive = SSE_KEEPALIVE  # a frame that says nothing, valid in the stream's protocol
    direct = True  # the lane's deltas are framed natively and may go straight to the socket
    n_per_prompt = 1  # choices per prompt: the tracker counts each prompt's tokens once
    headers: dict = {}  # response headers of the protocol's own

    def __init__(self, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s

    # --- stream --------------------------------------------------------------------------------
    def segment(self, offset: int, stream) -> None:
        """A submission's lane stream (lanes.stream.RequestStream) begins, before its opening."""

    def opening(self, first_choice: int, num_choices: int) -> bytes:
        """Frames before a submission's first delta (sent while its lane prefills)."""
        return b""

    def chunk(self, choice: int, item) -> bytes:
        """A lane item that reached Python (lanes.api Chunk, ScoredChunk, TranscriptPart)."""
        return item.data

    def choice_done(self, choice: int, done, tracker, last: bool) -> bytes:
        """A choice's end (after tracker.choice_done); `last`: no choice of the request is left."""
        return b""

    def end(self, tracker) -> bytes:
        """After every choice ended."""
        return b""

    def error_frames(self, error: APIError) -> bytes:
        """The stream's end after a failure: the protocol's in-band error (and terminator)."""
        return error.sse_event()

    # --- whole body ----------------------------------------------------------------------------
    def collect(self, choice: int, item) -> None:
        """A non-stream request's lane item other than ChoiceDone."""

    def collect_done(self, choice: int, done) -> None:
        """A non-stream choice's end (after tracker.choice_done)."""

    def body(self, tracker) -> tuple[bytes, str]:
        """(body, content type) once every choice ended."""
        raise NotImplementedError

    # --- failures ------------------------------------------------------------------------------
    def failure(self, code: str, message: str) -> APIError:
        """The error for a lane failure (lane died or hung, a cancel, a later prompt not admitted)."""
        if code == CANCELLED_CODE:
            return cancelled_error()
        if code == "server_busy":  # a later prompt or input group found no slot in time
            return APIError(429, message, type="rate_limit_error", code=code,
                            headers={"Retry-After": str(self.retry_after_s)})
        return unavailable(message, self.retry_after_s, code=code)
