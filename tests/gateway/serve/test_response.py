"""ResponseStream as the lane stream's sink (gateway/serve/response.py), against a fake transport and
a fake stream: when the stream is put in direct mode (the pump writes to the socket itself) — never
before the status line went out — and what happens to bytes the socket did not take."""
from __future__ import annotations

import asyncio
import os
import socket

import pytest

from gateway.serve.response import ResponseStream, WriteStalled


class FakeTransport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.closing = False
        self.aborted = False

    def get_extra_info(self, name):
        return {"socket": self.sock, "sslcontext": None}.get(name)

    def get_write_buffer_size(self) -> int:
        return len(self.buffer)

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        if self.closing:
            raise RuntimeError("handler is closed")
        self.buffer += data

    def abort(self) -> None:
        self.aborted = self.closing = True


class FakeResponse:
    def __init__(self, transport: FakeTransport, block: asyncio.Event | None = None) -> None:
        self.transport = transport
        self.block = block

    async def send(self, data: bytes) -> None:
        if self.block is not None:
            await self.block.wait()
        self.transport.write(data)


class FakeStream:
    """lanes.stream.RequestStream's sink controls, recorded."""

    def __init__(self) -> None:
        self.fd = None
        self.on_partial = None
        self.direct = False
        self.calls = []

    def attach_sink(self, fd, on_partial) -> None:
        self.fd, self.on_partial = fd, on_partial
        self.calls.append(("attach", fd))

    def detach_sink(self) -> None:
        self.fd, self.on_partial, self.direct = None, None, False
        self.calls.append(("detach",))

    def set_direct(self, on: bool) -> None:
        self.direct = on
        self.calls.append(("direct", on))


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def make_sender(sock, block=None, status_sent=True):
    transport = FakeTransport(sock)
    sender = ResponseStream(FakeResponse(transport, block), transport, b": ka\n\n", 10.0, 0.05)
    sender._status_sent = status_sent  # as after ResponseStream.open's first send
    return sender, transport


async def test_never_direct_before_the_status_line(pair):
    """The pump must not write a delta before Sanic wrote the status line and headers, which go
    out with our first send: until it completed, the stream stays in queued mode."""
    block = asyncio.Event()
    sender, transport = make_sender(pair[0], block=block, status_sent=False)
    sender.open_direct()
    stream = FakeStream()
    sender.attach(stream)
    assert not sender.ready() and stream.calls == [("attach", sender.fd), ("direct", False)]
    first = asyncio.ensure_future(sender.send(b""))
    await asyncio.sleep(0)
    assert not sender.ready() and not stream.direct  # the status line is still on its way
    block.set()
    await first
    assert sender.ready() and stream.calls[-1] == ("direct", True)
    sender.close_direct()


class FakeRequest:
    def __init__(self, sock) -> None:
        self.transport = FakeTransport(sock)
        self.responded = None

    async def respond(self, headers: dict, content_type: str) -> FakeResponse:
        self.responded = (headers, content_type)
        return FakeResponse(self.transport)


@pytest.mark.parametrize("relay_direct", [True, False])
async def test_open_sends_the_status_line_before_it_returns(pair, relay_direct):
    request = FakeRequest(pair[0])
    sender = await ResponseStream.open(request, {"X-Request-ID": "r"}, "text/event-stream", b": ka\n\n", 10.0, 1.0,
                                       relay_direct=relay_direct)
    assert request.responded == ({"X-Request-ID": "r"}, "text/event-stream")
    assert sender._status_sent and (sender.fd >= 0) == relay_direct  # Python-framed streams get no dup
    transport_empty = request.transport.buffer == b""
    request.transport.buffer.clear()
    assert transport_empty and sender.ready() == relay_direct
    sender.stop_keepalive()
    sender.close_direct()


def test_ready_only_with_a_dup_and_nothing_pending(pair):
    sender, transport = make_sender(pair[0])
    assert not sender.ready()  # no dup yet
    sender.open_direct()
    assert sender.fd >= 0 and sender.fd != pair[0].fileno() and sender.ready()
    transport.buffer += b"x"
    assert not sender.ready()  # bytes of ours wait in the transport: a direct write would overtake them
    transport.buffer.clear()
    transport.closing = True
    assert not sender.ready()
    fd = sender.fd
    sender.close_direct()
    assert sender.fd == -1 and not sender.ready()
    with pytest.raises(OSError):
        os.fstat(fd)


async def test_not_ready_while_a_send_is_in_flight(pair):
    block = asyncio.Event()
    sender, transport = make_sender(pair[0], block=block)
    sender.open_direct()
    first = asyncio.ensure_future(sender.send(b"a"))
    second = asyncio.ensure_future(sender.send(b"b"))  # e.g. the handler and the keep-alive watchdog
    await asyncio.sleep(0)
    assert not sender.ready()
    block.set()
    await first
    await second
    assert transport.buffer == b"ab"
    transport.buffer.clear()
    assert sender.ready()
    sender.close_direct()


async def test_attach_puts_the_stream_in_direct_mode_only_between_our_sends(pair):
    block = asyncio.Event()
    sender, transport = make_sender(pair[0], block=block)
    sender.open_direct()
    stream = FakeStream()
    sender.attach(stream)
    assert stream.calls == [("attach", sender.fd), ("direct", True)]
    assert stream.on_partial == sender._on_partial
    stream.calls.clear()
    sending = asyncio.ensure_future(sender.send(b"role event"))
    await asyncio.sleep(0)
    assert stream.calls == [("direct", False)]  # off before our bytes go anywhere
    block.set()
    await sending
    assert transport.buffer == b"role event"
    assert stream.calls == [("direct", False)]  # our bytes still wait in the transport: stays off
    transport.buffer.clear()
    await sender.send(b"finish event")
    transport.buffer.clear()
    stream.calls.clear()
    await sender.send(b"")  # completes with the transport empty: direct again
    assert stream.calls[-1] == ("direct", True)
    sender.detach()
    assert stream.calls[-1] == ("detach",) and stream.fd is None
    stream.calls.clear()
    await sender.send(b"x")  # detached: our sends no longer touch the stream
    assert stream.calls == []
    other = FakeStream()
    sender.attach(other)
    sender.close_direct()  # closing the dup detaches first: the pump never writes to the number again
    assert other.calls[-1] == ("detach",) and sender.fd == -1


def test_attach_without_a_dup_stays_queued(pair):
    sender, transport = make_sender(pair[0])
    stream = FakeStream()
    sender.attach(stream)  # e.g. TLS: no dup was opened
    assert stream.calls == []
    sender.detach()
    assert stream.calls == [("detach",)]


def test_unsent_tail_goes_to_the_transport(pair):
    sender, transport = make_sender(pair[0])
    sender.open_direct()
    stream = FakeStream()
    sender.attach(stream)
    sender._on_partial(None, 0)  # nothing unsent: nothing to do
    assert transport.buffer == b"" and sender.num_socket_full == 0
    sender._on_partial(b"tail", 0)
    assert transport.buffer == b"tail" and sender.num_socket_full == 1
    assert not sender.ready()  # later events must queue behind the tail
    assert not transport.aborted and sender.fd >= 0
    sender.close_direct()


def test_send_error_or_closing_transport_aborts_and_stops_direct_writes(pair):
    sender, transport = make_sender(pair[0])
    sender.open_direct()
    stream = FakeStream()
    sender.attach(stream)
    sender._on_partial(None, 32)  # EPIPE
    assert transport.aborted and sender.fd == -1
    assert stream.calls[-1] == ("detach",)
    sender, transport = make_sender(pair[0])
    sender.open_direct()
    stream = FakeStream()
    sender.attach(stream)
    transport.closing = True
    sender._on_partial(b"tail", 0)  # must not raise: the pump would lose its wake-up
    assert transport.aborted and sender.fd == -1 and transport.buffer == b""
    assert stream.calls[-1] == ("detach",)


async def test_stalled_send_raises_write_stalled(pair):
    block = asyncio.Event()
    sender, transport = make_sender(pair[0], block=block)
    transport.buffer += b"unsent"
    with pytest.raises(WriteStalled):
        await sender.send(b"x")
    transport.buffer.clear()
    assert not sender.ready()  # no dup was opened; the in-flight count went back to zero
    sender.open_direct()
    assert sender.ready()
    sender.close_direct()
