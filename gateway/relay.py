"""Relaying a Generation to the client: SSE (bytes from the lane go straight to the socket)
or one JSON body (the lane's escaped text spliced into a pre-rendered envelope).

Outcome rules: a client disconnect arrives as CancelledError (Sanic cancels the handler) →
cancel through the lane protocol, outcome "disconnect". A lane failure after the stream
started → `data: {"error": …}` + `[DONE]`; before anything was sent → 5xx envelope.
"""
from __future__ import annotations

import asyncio
import time

from gateway.backend import ChoiceDone, LaneError
from gateway.errors import APIError, unavailable
from gateway.framing import DONE_EVENT, KEEPALIVE_EVENT, ChoiceResult, StreamFrames, non_stream_body
from gateway.generation import Generation, GenerationFailed


def _failure_error(code: str, message: str, retry_after_s: int) -> APIError:
    return unavailable(message, retry_after_s, code=code)


def _drained_error(retry_after_s: int) -> APIError:
    return unavailable("the server is shutting down; the request was cancelled", retry_after_s,
                       code="server_shutting_down")


class WriteStalled(Exception):
    """The client stopped reading: its socket buffer stayed full for the write-stall timeout."""


class SseSender:
    """Sends events and, from one watchdog task, `: keep-alive` comments whenever the stream
    has been silent for the interval (Sanic's RESPONSE_TIMEOUT kills silent streams).

    A client that stops reading must not hold its lane forever: when the transport already has
    unsent bytes, the send is bounded by the write-stall timeout (the fast path, an empty
    buffer, costs no timer)."""

    def __init__(self, response, transport, keepalive_interval_s: float, write_stall_timeout_s: float) -> None:
        self._response = response
        self._transport = transport
        self._interval_s = keepalive_interval_s
        self._stall_timeout_s = write_stall_timeout_s
        self._last_send_s = time.monotonic()
        self._sending = False
        self._watchdog: asyncio.Task | None = None

    async def send(self, data: bytes) -> None:
        self._sending = True
        try:
            if self._transport.get_write_buffer_size() == 0:
                await self._response.send(data)
            else:
                try:
                    await asyncio.wait_for(self._response.send(data), self._stall_timeout_s)
                except asyncio.TimeoutError:
                    raise WriteStalled() from None
        finally:
            self._sending = False
            self._last_send_s = time.monotonic()

    def start_keepalive(self) -> None:
        self._watchdog = asyncio.get_running_loop().create_task(self._keepalive())

    async def _keepalive(self) -> None:
        while True:
            due_s = self._last_send_s + self._interval_s - time.monotonic()
            if due_s > 0:
                await asyncio.sleep(due_s)
                continue
            if not self._sending:
                try:
                    await self.send(KEEPALIVE_EVENT)
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
                       retry_after_s: int) -> None:
    response = await request.respond(headers=headers, content_type="text/event-stream; charset=utf-8")
    sender = SseSender(response, request.transport, keepalive_interval_s, write_stall_timeout_s)
    sender.start_keepalive()
    role_sent: set[int] = set()
    chat = frames.chat
    first_pending = True
    try:
        try:
            async for offset, stream in generation.segments():
                async for item in stream:
                    choice = offset + item.choice
                    if type(item) is ChoiceDone:
                        if item.finish_reason == "cancelled":
                            await sender.send(_drained_error(retry_after_s).sse_event() + DONE_EVENT)
                            tracker.finish("error", 200, "server_shutting_down")
                            return
                        tracker.choice_done(choice // n_per_prompt, item)
                        event = frames.finish_event(choice, item.finish_reason)
                        if chat and choice not in role_sent:
                            role_sent.add(choice)
                            event = frames.role_event(choice) + event
                        await sender.send(event)
                        continue
                    data = item.data
                    if chat and choice not in role_sent:
                        # The role rides in the same write as the first token (TTFT counts either).
                        role_sent.add(choice)
                        data = frames.role_event(choice) + data
                    if first_pending:
                        first_pending = False
                        tracker.first_token()
                    await sender.send(data)
        except (GenerationFailed, LaneError) as exc:
            failure = Generation.failed(exc)
            await sender.send(_failure_error(failure.code, failure.message, retry_after_s).sse_event() + DONE_EVENT)
            tracker.finish("error", 200, failure.code)
            return
        tail = DONE_EVENT
        if frames.include_usage:
            tail = frames.usage_event(tracker.record.prompt_tokens, tracker.record.completion_tokens) + tail
        await sender.send(tail)
        await response.eof()
        tracker.finish("success", 200)
    except WriteStalled:
        tracker.finish("timeout", 200, "write_stalled")
        request.transport.abort()  # drop the unread bytes; the caller cancels the generation
        raise
    finally:
        sender.stop_keepalive()


async def collect(generation: Generation, num_choices: int, tracker, *, n_per_prompt: int,
                  retry_after_s: int) -> list[ChoiceResult]:
    """Run a non-stream request to the end; raises the APIError to answer with on failure."""
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
                else:
                    tracker.first_token()
                    results[choice].escaped.append(item.data)
    except (GenerationFailed, LaneError) as exc:
        failure = Generation.failed(exc)
        raise _failure_error(failure.code, failure.message, retry_after_s) from None
    return results


def non_stream_response_body(frames: StreamFrames, results: list[ChoiceResult], tracker) -> bytes:
    return non_stream_body(
        completion_id=frames.completion_id, created=frames.created, model=frames.model, chat=frames.chat,
        choices=results, prompt_tokens=tracker.record.prompt_tokens,
        completion_tokens=tracker.record.completion_tokens,
    )
