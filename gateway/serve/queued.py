"""Admission of a streamed request that may wait in the queue: keep its connection alive.

Sanic's RESPONSE_TIMEOUT is an inactivity timer that also runs while a handler waits: a streamed
request queued longer than --response-timeout-s was answered 503 "server error" by Sanic (found
by tests/reliability/test_streaming.py), and proxies with idle timeouts cut silent connections
too. So a streamed request still queued after one keep-alive interval gets its response opened
(200 and its headers) and keep-alive frames every interval until it holds a slot; the relay then
continues on the same ResponseStream. A request admitted within the interval — the usual case —
is answered as if it had never queued, so a full queue is still an immediate 429. Only a wait
that ends without a slot after the response was opened (queue timeout, POST /stop) ends in-band:
the protocol's error frames, with the code the status answer would carry.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from gateway.serve.response import ResponseStream


class QueuedStream:
    def __init__(self, open_response: Callable[[], Awaitable[ResponseStream]], keepalive_interval_s: float) -> None:
        self._open_response = open_response
        self._interval_s = keepalive_interval_s
        self.response: ResponseStream | None = None  # set once the response was opened while queued

    async def admit(self, generation) -> None:
        """generation.start(), opening the response if the wait passes one keep-alive interval.
        Raises what start() raises; self.response tells whether the response is already open."""
        start = asyncio.ensure_future(generation.start())
        try:
            done, _ = await asyncio.wait({start}, timeout=self._interval_s)
            if not done:
                self.response = await self._open_response()
            await start
        except BaseException:
            start.cancel()  # the client left (CancelledError): leave the queue too; a no-op once done
            if self.response is not None:
                self.response.close_direct()  # its dup of the socket: no relay will ever use it
                self.response.stop_keepalive()
            raise

    async def end_with(self, frames: bytes) -> None:
        """End an opened response in-band (the wait ended without a slot)."""
        try:
            await self.response.send(frames)
            await self.response.eof()
        finally:
            self.response.close_direct()
            self.response.stop_keepalive()
