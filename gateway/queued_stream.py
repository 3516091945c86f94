"""Admission of a streamed request that may wait in the queue: keep its connection alive.

Sanic's RESPONSE_TIMEOUT is an inactivity timer that also runs while a handler waits: a streamed
request queued longer than --response-timeout-s was answered 503 "server error" by Sanic (found
by tests/reliability/test_streaming.py), and proxies with idle timeouts cut silent connections
too. So a streamed request still queued after one keep-alive interval gets its response opened
(200 and its headers) and keep-alive frames (`: keep-alive` comments for SSE, empty progress
lines for NDJSON) every interval until it holds a slot; the relay then continues on the same
sender. A request admitted within the interval — the usual case — is answered exactly as before,
so a full queue is still an immediate 429. Only a wait that ends without a slot after the
response was opened (queue timeout, POST /stop) ends in-band: the protocol's error frame (with
the same code the status answer would carry) and the stream's end.
"""
from __future__ import annotations

import asyncio

from gateway.framing import KEEPALIVE_EVENT
from gateway.relay import SseSender


class QueuedStream:
    def __init__(self, request, headers: dict, content_type: str, keepalive_interval_s: float,
                 write_stall_timeout_s: float, keepalive: bytes = KEEPALIVE_EVENT) -> None:
        self._request = request
        self._headers = headers
        self._content_type = content_type
        self._interval_s = keepalive_interval_s
        self._stall_timeout_s = write_stall_timeout_s
        self._keepalive = keepalive
        self.sender: SseSender | None = None  # set once the response was opened while queued

    async def admit(self, generation) -> None:
        """generation.start(), opening the response if the wait passes one keep-alive interval.
        Raises what start() raises; self.sender tells whether the response is already open."""
        start = asyncio.ensure_future(generation.start())
        try:
            done, _ = await asyncio.wait({start}, timeout=self._interval_s)
            if not done:
                response = await self._request.respond(headers=self._headers, content_type=self._content_type)
                self.sender = SseSender(response, self._request.transport, self._interval_s, self._stall_timeout_s,
                                        keepalive=self._keepalive)
                self.sender.start_keepalive()
                await self.sender.send(b"")  # the headers go out now, not with the first frame
            await start
        except BaseException:
            start.cancel()  # the client left (CancelledError): leave the queue too; a no-op once done
            if self.sender is not None:
                self.sender.stop_keepalive()
            raise

    async def end_with(self, frames: bytes) -> None:
        """End an opened response in-band (the wait ended without a slot)."""
        try:
            await self.sender.send(frames)
            await self.sender.eof()
        finally:
            self.sender.stop_keepalive()
