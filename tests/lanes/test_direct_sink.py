"""Direct relay through a stream's sink (lanes.stream): the pump sends a lane's deltas ring →
socket as HTTP chunks while the sink is ready, queues them in the stream while it is not, and
the bytes on the wire are exact and in order either way."""
import asyncio
import json
import socket

from lanes.api import ChoiceDone, Chunk, Framing, GenerationParams, LaneModelSpec

from .conftest import synthetic_text, wait_for

FRAMING = Framing(b"", b"|")


def expected_events(n: int) -> list[bytes]:
    return [(json.dumps(synthetic_text(i), ensure_ascii=False)[1:-1].replace("\u2028", "\\u2028") + "|").encode()
            for i in range(n)]


def dechunk(data: bytes) -> bytes:
    """Body of an HTTP/1.1 chunked stream (no terminating chunk expected)."""
    out, pos = [], 0
    while pos < len(data):
        eol = data.index(b"\r\n", pos)
        size = int(data[pos:eol], 16)
        assert size > 0, "a zero-size chunk would end the HTTP body"
        out.append(data[eol + 2:eol + 2 + size])
        assert data[eol + 2 + size:eol + 4 + size] == b"\r\n"
        pos = eol + 4 + size
    return b"".join(out)


class SocketSink:
    """What the gateway's SseSender does, over a socketpair: direct writes from the pump, its
    own (chunk-framed) writes for queued items and for bytes the socket did not take."""

    def __init__(self, sock: socket.socket, ready_pattern=None):
        self.sock = sock
        self.fd = sock.fileno()
        self.own_pending = bytearray()  # the "transport buffer"
        self.num_direct = 0
        self.num_unsent = 0
        self.num_queued = 0
        self._pattern = ready_pattern
        self._calls = 0

    def ready(self) -> bool:
        self._calls += 1
        if self._pattern is not None and not self._pattern(self._calls):
            return False
        return not self.own_pending

    def relayed(self, num_deltas, unsent, send_errno):
        assert send_errno == 0
        self.num_direct += num_deltas
        if unsent:
            self.num_unsent += 1
            self.own_pending += unsent

    def write_chunk(self, data: bytes):
        self.num_queued += 1
        self.own_pending += b"%x\r\n%s\r\n" % (len(data), data)

    def flush(self):
        while self.own_pending:
            try:
                sent = self.sock.send(self.own_pending)
            except BlockingIOError:
                return
            del self.own_pending[:sent]


async def run_with_sink(pool, sink, n):
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=n), [FRAMING], 77)
    stream.sink = sink
    dones = []
    async for item in stream:
        if isinstance(item, Chunk):
            sink.write_chunk(item.data)
        else:
            assert isinstance(item, ChoiceDone)
            dones.append(item)
        sink.flush()
    while sink.own_pending:
        sink.flush()
        await asyncio.sleep(0.001)
    stream.sink = None
    return dones


async def drain_socket(sock, received: bytearray, stop: asyncio.Event):
    while True:
        try:
            received += sock.recv(1 << 16)
        except BlockingIOError:
            if stop.is_set():
                return
            await asyncio.sleep(0.001)


async def _exercise(make_pool, n, ready_pattern=None, sndbuf=None, reader_delay_s=0.0, step_us=0):
    pool = make_pool([LaneModelSpec("syn", f"synthetic:step_us={step_us}")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    if sndbuf:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
    sink = SocketSink(a, ready_pattern)
    received = bytearray()
    stop = asyncio.Event()

    async def reader():
        await asyncio.sleep(reader_delay_s)
        await drain_socket(b, received, stop)

    reading = asyncio.ensure_future(reader())
    dones = await run_with_sink(pool, sink, n)
    await asyncio.sleep(0.05)
    stop.set()
    await reading
    a.close()
    b.close()
    assert [(d.finish_reason, d.completion_tokens) for d in dones] == [("length", n)]
    assert dechunk(bytes(received)) == b"".join(expected_events(n))
    return sink


async def test_deltas_go_straight_to_the_socket(make_pool):
    sink = await _exercise(make_pool, 200, step_us=200)
    assert sink.num_direct > 0  # the direct path carried the deltas (merged batches count once each)


async def test_sink_not_ready_queues_in_order(make_pool):
    # Ready on every third pump pass only: direct batches and queued chunks interleave.
    sink = await _exercise(make_pool, 500, ready_pattern=lambda k: k % 3 == 0, step_us=100)
    assert sink.num_direct > 0 and sink.num_queued > 0


async def test_full_socket_hands_back_the_tail_in_order(make_pool):
    sink = await _exercise(make_pool, 3000, sndbuf=4096, reader_delay_s=0.3)
    assert sink.num_unsent > 0


class FailingSink:
    """A sink whose relayed() raises once (a transport closed under it): the pump must still
    come back for the rest and deliver the control records."""

    def __init__(self, fd):
        self.fd = fd
        self.calls = 0

    def ready(self):
        return True

    def relayed(self, num_deltas, unsent, send_errno):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("transport closed under the sink")


async def test_failing_sink_does_not_wedge_the_lane(make_pool):
    import time

    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=20")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        stream = pool.submit("syn", [1], GenerationParams(max_tokens=5000), [FRAMING], 91)
        sink = FailingSink(a.fileno())
        stream.sink = sink
        time.sleep(0.1)  # block the loop: the ring fills, so the first batch hits its limit (more=True)
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, _ctx: None)  # the sink's error is expected
        await asyncio.sleep(0.2)
        assert sink.calls >= 1
        stream.cancel()  # what the handler does when its client is gone
        await wait_for(lambda: all(s.state == "ready" for s in pool.statuses()), 3.0, "the lane to be freed")
    finally:
        a.close()
        b.close()
