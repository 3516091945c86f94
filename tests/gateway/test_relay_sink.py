"""SseSender as the lane stream's sink (gateway/relay.py), against a fake transport: when the
pump may write to the socket itself, and what happens to bytes the socket did not take."""
from __future__ import annotations

import asyncio
import os
import socket

import pytest

from gateway.relay import SseSender, WriteStalled


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


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def make_sender(sock, firsts=None, block=None):
    transport = FakeTransport(sock)
    sender = SseSender(FakeResponse(transport, block), transport, 10.0, 0.05,
                       on_first_delta=(lambda: firsts.append(1)) if firsts is not None else None)
    return sender, transport


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


def test_unsent_tail_goes_to_the_transport_and_first_delta_is_reported_once(pair):
    firsts = []
    sender, transport = make_sender(pair[0], firsts)
    sender.open_direct()
    sender.relayed(3, None, 0)
    sender.relayed(2, b"tail", 0)
    assert firsts == [1]
    assert transport.buffer == b"tail" and sender.num_socket_full == 1
    assert not sender.ready()
    sender.close_direct()


def test_send_error_or_closing_transport_aborts_and_stops_direct_writes(pair):
    sender, transport = make_sender(pair[0])
    sender.open_direct()
    sender.relayed(1, None, 32)  # EPIPE
    assert transport.aborted and sender.fd == -1
    sender, transport = make_sender(pair[0])
    sender.open_direct()
    transport.closing = True
    sender.relayed(1, b"tail", 0)  # must not raise: the pump would lose its wake-up
    assert transport.aborted and sender.fd == -1 and transport.buffer == b""


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
