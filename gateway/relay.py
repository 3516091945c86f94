"""Relaying a Generation to the client: SSE (bytes from the lane go straight to the socket)
or one JSON body (the lane's escaped text spliced into a pre-rendered envelope).

Outcome rules: a client disconnect arrives as CancelledError (Sanic cancels the handler) →
cancel through the lane protocol, outcome "disconnect". A lane failure after the stream
started → `data: {"error": …}` + `[DONE]`; before anything was sent → 5xx envelope. A request
cancelled through gateway.control ends the same way with code `request_cancelled` (499 before
anything was sent), outcome "cancelled". The stream's last event before `[DONE]` carries
gateway.stream_stats' fields; a non-stream body carries `timings`.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import time

from gateway.backend import ChoiceDone, LaneError, ScoredChunk
from gateway.control import CANCELLED_CODE, cancelled_error, outcome_for
from gateway.errors import APIError, unavailable
from gateway.framing import DONE_EVENT, KEEPALIVE_EVENT, ChoiceResult, StreamFrames, non_stream_body
from gateway.generation import Generation, GenerationFailed
from gateway.stream_stats import RequestStats


SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"


def _failure_error(code: str, message: str, retry_after_s: int) -> APIError:
    if code == CANCELLED_CODE:
        return cancelled_error()
    return unavailable(message, retry_after_s, code=code)


def _drained_error(retry_after_s: int) -> APIError:
    return unavailable("the server is shutting down; the request was cancelled", retry_after_s,
                       code="server_shutting_down")


class WriteStalled(Exception):
    """The client stopped reading: its socket buffer stayed full for the write-stall timeout."""


@contextlib.contextmanager
def ending_stream(request, sender: "SseSender", tracker):
    """The end every streamed response shares, however its body ends: a client that stopped
    reading is cut off (unread bytes dropped; the caller cancels the generation) and recorded;
    the direct relay and keep-alives stop; socket-full counts go to the request record."""
    try:
        yield
    except WriteStalled:
        tracker.finish("timeout", 200, "write_stalled")
        request.transport.abort()
        raise
    finally:
        sender.close_direct()
        sender.stop_keepalive()
        tracker.socket_full(sender.num_socket_full)


class SseSender:
    """Sends events and, from one watchdog task, `: keep-alive` comments whenever the stream
    has been silent for the interval (Sanic's RESPONSE_TIMEOUT kills silent streams).

    A client that stops reading must not hold its slot forever: when the transport already has
    unsent bytes, the send is bounded by the write-stall timeout (the fast path, an empty
    buffer, costs no timer).

    It is also the lane stream's *sink* (lanes.stream): while the transport has nothing pending
    and no send of ours is in progress, the stream is in direct mode and the ring pump writes the
    lane's deltas as HTTP chunks to a dup of the socket itself (no Python per token). Every send
    of ours turns direct mode off first and back on when it completed with the transport empty;
    both run on the event-loop thread, so the two writers never interleave. Bytes the socket does
    not take come back (`_on_partial`) and go to the transport first. Direct writes do not count
    as activity for the watchdog, so a keep-alive comment still goes through Sanic every interval
    and keeps its RESPONSE_TIMEOUT timer fresh."""

    def __init__(self, response, transport, keepalive_interval_s: float, write_stall_timeout_s: float,
                 keepalive: bytes = KEEPALIVE_EVENT) -> None:
        self._response = response
        self._keepalive_bytes = keepalive  # valid in the stream's protocol (an SSE comment, an NDJSON line)
        self._transport = transport
        self._interval_s = keepalive_interval_s
        self._stall_timeout_s = write_stall_timeout_s
        self._last_send_s = time.monotonic()
        self._sends_in_flight = 0  # the handler's and the watchdog's sends can overlap
        self._watchdog: asyncio.Task | None = None
        self._stream = None
        self.fd = -1
        self.num_socket_full = 0  # direct batches the socket did not fully take (slow reader)

    # --- direct sink ------------------------------------------------------------------------
    def open_direct(self) -> None:
        """Dup the socket for the pump (a dup: the number stays ours even after the transport
        closes). Plain TCP only; anything else keeps the queued path."""
        transport = self._transport
        sock = transport.get_extra_info("socket")
        if sock is None or transport.get_extra_info("sslcontext") is not None or transport.is_closing():
            return
        self.fd = os.dup(sock.fileno())

    def attach(self, stream) -> None:
        self._stream = stream
        if self.fd >= 0:
            stream.attach_sink(self.fd, self._on_partial)
            stream.set_direct(self.ready())

    def detach(self) -> None:
        if self._stream is not None:
            self._stream.detach_sink()
            self._stream = None

    def close_direct(self) -> None:
        self.detach()  # the pump must never write to the number again
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def ready(self) -> bool:
        transport = self._transport
        return (self.fd >= 0 and not self._sends_in_flight and transport.get_write_buffer_size() == 0
                and not transport.is_closing())

    def _on_partial(self, unsent: bytes | None, send_errno: int) -> None:
        if not send_errno and not self._transport.is_closing():
            if not unsent:
                return
            self.num_socket_full += 1
            try:
                self._transport.write(unsent)
                return
            except Exception:  # closed under us: same as a gone peer
                pass
        # The peer is gone, or the transport is closing (its buffer takes nothing more). Sanic
        # sees the close and cancels the handler, which cancels the lane.
        self.close_direct()
        self._transport.abort()

    async def send(self, data: bytes) -> None:
        stream = self._stream
        if stream is not None:
            stream.set_direct(False)
        self._sends_in_flight += 1
        try:
            if self._transport.get_write_buffer_size() == 0:
                await self._response.send(data)
            else:
                try:
                    await asyncio.wait_for(self._response.send(data), self._stall_timeout_s)
                except asyncio.TimeoutError:
                    raise WriteStalled() from None
        finally:
            self._sends_in_flight -= 1
            self._last_send_s = time.monotonic()
            if stream is not None and stream is self._stream and self.ready():
                stream.set_direct(True)

    async def eof(self) -> None:
        await self._response.eof()

    def start_keepalive(self) -> None:
        self._watchdog = asyncio.get_running_loop().create_task(self._keepalive())

    async def _keepalive(self) -> None:
        while True:
            due_s = self._last_send_s + self._interval_s - time.monotonic()
            if due_s > 0:
                await asyncio.sleep(due_s)
                continue
            if not self._sends_in_flight:
                try:
                    await self.send(self._keepalive_bytes)
                except WriteStalled:
                    continue  # nothing was written; the handler's own sends enforce the stall limit
                except Exception:  # the connection is gone; the handler finds out on its own send
                    return
            else:
                self._last_send_s = time.monotonic()

    def stop_keepalive(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None


async def relay_stream(request, generation: Generation, frames: StreamFrames, tracker, *, n_per_prompt: int,
                       headers: dict, keepalive_interval_s: float, write_stall_timeout_s: float,
                       retry_after_s: int, rewrite=None, scores=None, sender: SseSender | None = None) -> None:
    """`rewrite` (e.g. gateway.tool_stream.ToolStreamRewriter): Python re-frames each chunk —
    `chunk(choice, data) -> bytes` and `finish(choice, reason) -> (bytes, reason)` — and the lane's
    bytes never go to the socket directly. `scores`: a gateway.logprobs.RequestScores for requests
    with logprobs/echo (their output arrives as ScoredChunks, framed in Python). With neither, the
    native relay frames the deltas. `sender`: the response was already opened while the request
    was queued (gateway.queued_stream)."""
    if sender is None:
        response = await request.respond(headers=headers, content_type=SSE_CONTENT_TYPE)
        sender = SseSender(response, request.transport, keepalive_interval_s, write_stall_timeout_s)
        sender.start_keepalive()
    if rewrite is None:
        sender.open_direct()
    chat = frames.chat
    choices_left = generation.num_choices
    with ending_stream(request, sender, tracker):
        try:
            async for offset, stream in generation.segments():
                # The headers (first segment) and, for chat, every choice's role chunk go out now,
                # while the lane prefills; then the lane's deltas may flow ring → socket.
                opening = b"".join(frames.role_event(offset + j) for j in range(stream.num_choices)) if chat else b""
                await sender.send(opening)
                sender.attach(stream)
                try:
                    async for item in stream:
                        choice = offset + item.choice
                        if type(item) is ChoiceDone:
                            tracker.first_token(stream.first_direct_ns or None)
                            if item.finish_reason == "cancelled":
                                await sender.send(_drained_error(retry_after_s).sse_event() + DONE_EVENT)
                                tracker.finish("error", 200, "server_shutting_down")
                                return
                            tracker.choice_done(choice // n_per_prompt, item)
                            choices_left -= 1
                            if scores is not None:
                                held = scores.final_events(choice)
                                if held:
                                    await sender.send(held)
                            # Without a usage chunk the last finish chunk is the last event: stats go there.
                            stats = None if choices_left or frames.include_usage else \
                                RequestStats.from_tracker(tracker).openai_stream_fields()
                            reason = item.finish_reason
                            if rewrite is not None:
                                tail, reason = rewrite.finish(choice, reason)
                                if tail:
                                    await sender.send(tail)
                            await sender.send(frames.finish_event(choice, reason, stats))
                            continue
                        tracker.first_token()  # queued path (the socket was busy when it arrived)
                        if type(item) is ScoredChunk:
                            data = scores.events(choice, item)
                        else:
                            data = item.data if rewrite is None else rewrite.chunk(choice, item.data)
                        if data:
                            await sender.send(data)
                finally:
                    sender.detach()
        except (GenerationFailed, LaneError) as exc:
            failure = Generation.failed(exc)
            await sender.send(_failure_error(failure.code, failure.message, retry_after_s).sse_event() + DONE_EVENT)
            tracker.finish(outcome_for(200, failure.code), 200, failure.code)
            return
        tail = DONE_EVENT
        if frames.include_usage:
            rec = tracker.record
            tail = frames.usage_event(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens,
                                      RequestStats.from_tracker(tracker).openai_stream_fields()) + tail
        await sender.send(tail)
        await sender.eof()
        tracker.finish("success", 200)


async def collect(generation: Generation, num_choices: int, tracker, *, n_per_prompt: int,
                  retry_after_s: int, scores=None) -> list[ChoiceResult]:
    """Run a non-stream request to the end; raises the APIError to answer with on failure.
    scores: as for relay_stream (then each choice's text and logprobs come from it)."""
    results = [ChoiceResult([]) for _ in range(num_choices)]
    try:
        async for offset, stream in generation.segments():
            async for item in stream:
                choice = offset + item.choice
                if type(item) is ChoiceDone:
                    if item.finish_reason == "cancelled":
                        raise _drained_error(retry_after_s)
                    tracker.choice_done(choice // n_per_prompt, item)
                    results[choice].finish_reason = item.finish_reason
                    results[choice].escaped.append(item.text)  # collected natively, already escaped
                    results[choice].reasoning.append(item.reasoning)
                elif type(item) is ScoredChunk:
                    scores.collect(choice, item)
    except (GenerationFailed, LaneError) as exc:
        failure = Generation.failed(exc)
        raise _failure_error(failure.code, failure.message, retry_after_s) from None
    if scores is not None:
        scores.fill(results)
    return results


def non_stream_response_body(frames: StreamFrames, results: list[ChoiceResult], tracker) -> bytes:
    return non_stream_body(
        completion_id=frames.completion_id, created=frames.created, model=frames.model, chat=frames.chat,
        choices=results, prompt_tokens=tracker.record.prompt_tokens,
        completion_tokens=tracker.record.completion_tokens, cached_tokens=tracker.record.cached_tokens,
        extra=RequestStats.from_tracker(tracker).openai_body_fields(),
    )
