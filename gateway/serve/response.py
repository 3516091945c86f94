"""The one writer of a streamed response's bytes, and the only way to open one.

A streamed response has several writers: Sanic (status line, headers, our own frames), the
native relay (framed deltas written to a dup of the socket by the ring pump), the transport (a
direct batch's unsent tail) and the keep-alive watchdog. Their order is a property of this class,
not of the routes: the response is opened only by `ResponseStream.open`, which sends the status
line and headers (with the first frames) before it returns, and the pump may write only while
`ready()` — which is false until that first send completed, while a send of ours is in
progress and whenever bytes of ours wait in the transport.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import time


class WriteStalled(Exception):
    """The client stopped reading: its socket buffer stayed full for the write-stall timeout."""


@contextlib.contextmanager
def ending_stream(request, sender: "ResponseStream", tracker):
    """The end every streamed response shares, however its body ends: a client that stopped
    reading is cut off (unread bytes dropped; the caller cancels the generation) and recorded;
    the direct relay and keep-alives stop. Socket-full writes are counted as they happen, so a
    long stream's stalls show on /metrics while it still runs."""
    sender.on_socket_full = tracker.socket_full
    try:
        yield
    except WriteStalled:
        tracker.finish("timeout", 200, "write_stalled")
        request.transport.abort()
        raise
    finally:
        sender.close_direct()
        sender.stop_keepalive()
        sender.on_socket_full = None


class ResponseStream:
    """Sends a stream's frames and, from one watchdog task, a keep-alive frame (an SSE comment,
    an empty NDJSON progress line) whenever the stream has been silent for the interval
    (Sanic's RESPONSE_TIMEOUT kills silent streams; proxies cut silent connections).

    A client that stops reading must not hold its slot forever: when the transport already has
    unsent bytes, a send is bounded by the write-stall timeout (the fast path, an empty buffer,
    costs no timer).

    It is also the lane stream's *sink* (lanes.stream): while the status line is out, the
    transport has nothing pending and no send of ours is in progress, the stream is in direct
    mode and the ring pump writes the lane's deltas as HTTP chunks to a dup of the socket itself
    (no Python per token). Every send of ours turns direct mode off first and back on when it
    completed with the transport empty; both run on the event-loop thread, so the writers never
    interleave. Bytes the socket does not take come back (`_on_partial`) and go to the transport
    first. Direct writes do not count as activity for the watchdog, so a keep-alive still goes
    through Sanic every interval and keeps its RESPONSE_TIMEOUT timer fresh."""

    def __init__(self, response, transport, keepalive: bytes, keepalive_interval_s: float,
                 write_stall_timeout_s: float) -> None:
        self._response = response
        self._keepalive_bytes = keepalive  # valid in the stream's protocol
        self._transport = transport
        self._interval_s = keepalive_interval_s
        self._stall_timeout_s = write_stall_timeout_s
        self._last_send_s = time.monotonic()
        self._sends_in_flight = 0  # the handler's and the watchdog's sends can overlap
        self._status_sent = False  # our first send (status line + headers) completed
        self._watchdog: asyncio.Task | None = None
        self._stream = None
        self.fd = -1
        self.num_socket_full = 0  # direct batches the socket did not fully take (slow reader)
        self.on_socket_full = None  # called with 1 per such batch (the metric), set by ending_stream

    @classmethod
    async def open(cls, request, headers: dict, content_type: str, keepalive: bytes, keepalive_interval_s: float,
                   write_stall_timeout_s: float, *, relay_direct: bool, first: bytes = b"") -> "ResponseStream":
        """Start the response: the status line and headers (in one write with `first`, the
        stream's opening frames) are written before this returns; then keep-alives run and, with
        `relay_direct` (the lane's deltas are framed natively), the socket is dup'd for the pump."""
        response = await request.respond(headers=headers, content_type=content_type)
        stream = cls(response, request.transport, keepalive, keepalive_interval_s, write_stall_timeout_s)
        await stream.send(first)
        stream.start_keepalive()
        if relay_direct:
            stream.open_direct()
        return stream

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
        return (self._status_sent and self.fd >= 0 and not self._sends_in_flight
                and transport.get_write_buffer_size() == 0 and not transport.is_closing())

    def _on_partial(self, unsent: bytes | None, send_errno: int) -> None:
        if not send_errno and not self._transport.is_closing():
            if not unsent:
                return
            self.num_socket_full += 1
            if self.on_socket_full is not None:
                self.on_socket_full(1)
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
            self._status_sent = True  # Sanic writes the status line and headers with the first send
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


