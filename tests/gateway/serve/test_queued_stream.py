"""gateway.serve.queued without a server: a stream admitted within one keep-alive interval is
not opened early; one still queued is opened and kept alive; a client gone while queued leaves
the queue. (Against a real server, past Sanic's response timeout: tests/reliability/
test_streaming.py::test_keepalive_while_queued_beyond_the_response_timeout.)"""
from __future__ import annotations

import asyncio

import pytest

from gateway.serve.admission import QueueTimeout
from gateway.serve.queued import QueuedStream
from gateway.serve.response import ResponseStream

INTERVAL_S = 0.05


class FakeTransport:
    def get_extra_info(self, name):
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


class FakeResponse:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.ended = False

    async def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def eof(self) -> None:
        self.ended = True


class FakeRequest:
    def __init__(self) -> None:
        self.transport = FakeTransport()
        self.response: FakeResponse | None = None

    async def respond(self, headers: dict, content_type: str) -> FakeResponse:
        self.response = FakeResponse()
        return self.response


class FakeGeneration:
    """start() waits `wait_s` in the 'queue', then succeeds or raises `error`."""

    def __init__(self, wait_s: float, error: Exception | None = None) -> None:
        self.wait_s, self.error = wait_s, error
        self.cancelled = False

    async def start(self) -> None:
        try:
            await asyncio.sleep(self.wait_s)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error


def _queued(request: FakeRequest) -> QueuedStream:
    return QueuedStream(lambda: ResponseStream.open(request, {"X-Request-ID": "r"}, "text/event-stream", b": ka\n\n",
                                                    INTERVAL_S, 1.0, relay_direct=True), INTERVAL_S)


def test_admitted_within_the_interval_is_not_opened_early():
    async def run():
        request = FakeRequest()
        queued = _queued(request)
        await queued.admit(FakeGeneration(0.0))
        return request, queued

    request, queued = asyncio.run(run())
    assert queued.response is None and request.response is None


def test_still_queued_after_the_interval_is_opened_and_kept_alive():
    async def run():
        request = FakeRequest()
        queued = _queued(request)
        await queued.admit(FakeGeneration(6 * INTERVAL_S))
        queued.response.stop_keepalive()
        return request, queued

    request, queued = asyncio.run(run())
    assert queued.response is not None and request.response is not None
    assert request.response.sent.count(b": ka\n\n") >= 3, request.response.sent


def test_a_wait_that_fails_after_opening_ends_in_band():
    async def run():
        request = FakeRequest()
        queued = _queued(request)
        with pytest.raises(QueueTimeout):
            await queued.admit(FakeGeneration(3 * INTERVAL_S, QueueTimeout()))
        await queued.end_with(b"data: {\"error\": {}}\n\ndata: [DONE]\n\n")
        return request

    request = asyncio.run(run())
    assert request.response.sent[-1].endswith(b"data: [DONE]\n\n") and request.response.ended


def test_client_gone_while_queued_leaves_the_queue():
    async def run():
        request = FakeRequest()
        generation = FakeGeneration(10.0)
        task = asyncio.ensure_future(_queued(request).admit(generation))
        await asyncio.sleep(3 * INTERVAL_S)  # opened and keeping alive by now
        task.cancel()  # what Sanic does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        return generation

    assert asyncio.run(run()).cancelled


def test_client_gone_after_the_response_opened_closes_its_socket_dup():
    """The opened response holds a dup of the socket for the relay; a client that leaves while
    still queued must not leak it."""
    import socket

    a, b = socket.socketpair()

    class SocketTransport(FakeTransport):
        def get_extra_info(self, name):
            return a if name == "socket" else None

    async def run():
        request = FakeRequest()
        request.transport = SocketTransport()
        queued = _queued(request)
        task = asyncio.ensure_future(queued.admit(FakeGeneration(10.0)))
        await asyncio.sleep(3 * INTERVAL_S)
        assert queued.response is not None and queued.response.fd >= 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return queued

    try:
        assert asyncio.run(run()).response.fd == -1
    finally:
        a.close()
        b.close()
