"""Direct relay through a stream's sink (lanes.stream): while the stream is in direct mode the
pump sends the lane's deltas ring → socket as HTTP chunks (framed natively); while it is not,
they queue in the stream; a socket that does not take a whole batch hands the tail back and
turns direct off. The bytes on the wire are exact and in order either way."""
import asyncio
import socket
import time

from lanes.api import ChoiceDone, Chunk, GenerationParams, LaneModelSpec

from .conftest import synthetic_events, unframe, wait_for

PREFIX, SUFFIX = b"", b"|"
FRAMINGS = [(0, 0, PREFIX, SUFFIX)]


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
    """What the gateway's SseSender does, over a socketpair: its own (chunk-framed) writes for
    queued items and for bytes the socket did not take go through a "transport buffer"; direct
    mode is on only while that buffer is empty (and, optionally, per a ready pattern)."""

    def __init__(self, sock: socket.socket, ready_pattern=None):
        self.sock = sock
        self.fd = sock.fileno()
        self.own_pending = bytearray()  # the "transport buffer"
        self.num_unsent = 0
        self.num_queued = 0
        self.stream = None
        self._pattern = ready_pattern
        self._calls = 0

    def attach(self, stream) -> None:
        self.stream = stream
        stream.attach_sink(self.fd, self.on_partial)
        stream.set_direct(self.ready())

    def ready(self) -> bool:
        self._calls += 1
        if self._pattern is not None and not self._pattern(self._calls):
            return False
        return not self.own_pending

    def on_partial(self, unsent, send_errno):
        assert send_errno == 0
        if unsent:
            self.num_unsent += 1
            self.own_pending += unsent

    def write_chunk(self, data: bytes):
        self.stream.set_direct(False)
        self.num_queued += 1
        self.own_pending += b"%x\r\n%s\r\n" % (len(data), data)

    def flush(self):
        while self.own_pending:
            try:
                sent = self.sock.send(self.own_pending)
            except BlockingIOError:
                return
            del self.own_pending[:sent]
        self.stream.set_direct(self.ready())


async def run_with_sink(pool, sink, n, rid=77):
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=n), rid, framings=FRAMINGS)
    sink.attach(stream)
    dones = []
    async for item in stream:
        if isinstance(item, Chunk):
            sink.write_chunk(item.data)
        else:
            assert isinstance(item, ChoiceDone)
            dones.append(item)
        sink.flush()
    stream.detach_sink()
    while sink.own_pending:
        sink.flush()
        await asyncio.sleep(0.001)
    return stream, dones


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
    stream, dones = await run_with_sink(pool, sink, n)
    await asyncio.sleep(0.05)
    stop.set()
    await reading
    a.close()
    b.close()
    assert [(d.finish_reason, d.completion_tokens) for d in dones] == [("length", n)]
    assert unframe(dechunk(bytes(received)), PREFIX, SUFFIX) == synthetic_events(n)
    return stream, sink


async def test_deltas_go_straight_to_the_socket(make_pool):
    stream, sink = await _exercise(make_pool, 200, step_us=200)
    assert stream.first_direct_ns > 0  # the direct path carried the deltas ...
    assert sink.num_queued == 0 and sink.num_unsent == 0  # ... all of them


async def test_sink_not_ready_queues_in_order(make_pool):
    # Direct on after every third flush only: direct batches and queued chunks interleave.
    stream, sink = await _exercise(make_pool, 500, ready_pattern=lambda k: k % 3 == 0, step_us=100)
    assert stream.first_direct_ns > 0 and sink.num_queued > 0


async def test_full_socket_hands_back_the_tail_in_order(make_pool):
    stream, sink = await _exercise(make_pool, 3000, sndbuf=4096, reader_delay_s=0.3)
    assert sink.num_unsent > 0


async def test_two_sinks_on_one_replica_get_only_their_own_bytes(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=300", num_slots=2)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    pairs = [socket.socketpair() for _ in range(2)]
    for a, b in pairs:
        a.setblocking(False)
        b.setblocking(False)
    sinks = [SocketSink(a) for a, _ in pairs]
    received = [bytearray(), bytearray()]
    stop = asyncio.Event()
    readers = [asyncio.ensure_future(drain_socket(b, received[i], stop)) for i, (_, b) in enumerate(pairs)]
    results = await asyncio.gather(run_with_sink(pool, sinks[0], 300, rid=1), run_with_sink(pool, sinks[1], 170, rid=2))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*readers)
    for a, b in pairs:
        a.close()
        b.close()
    for (stream, dones), data, n in zip(results, received, (300, 170)):
        assert stream.first_direct_ns > 0
        assert [d.completion_tokens for d in dones] == [n]
        assert unframe(dechunk(bytes(data)), PREFIX, SUFFIX) == synthetic_events(n)


class FailingSink(SocketSink):
    """A sink whose partial-send callback raises once (a transport closed under it): the pump
    must still come back for the rest and deliver the control records."""

    def __init__(self, sock):
        super().__init__(sock)
        self.calls = 0

    def on_partial(self, unsent, send_errno):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("transport closed under the sink")


async def test_failing_sink_does_not_wedge_the_lane(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=20")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # nobody reads b: sends are partial
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, _ctx: None)  # the sink's error is expected
    try:
        stream = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 91, framings=FRAMINGS)
        sink = FailingSink(a)
        sink.attach(stream)
        time.sleep(0.1)  # block the loop: the ring fills, so the first batch hits its limit (more=True)
        await wait_for(lambda: sink.calls >= 1, 3.0, "a partial send")
        stream.cancel()  # what the handler does when its client is gone
        await wait_for(lambda: all(s.state == "ready" and s.in_flight == 0 for s in pool.statuses()), 3.0,
                       "the lane to be freed")
    finally:
        a.close()
        b.close()
