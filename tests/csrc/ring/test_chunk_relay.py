"""ChunkRelay (RingReader.relay): deltas of one request go from the ring to a socket as
HTTP/1.1 chunks, uncopied; everything else comes back to Python in order."""
import errno
import os
import socket
import threading

from lanes import _ring, wire


def _delta(rid: int, event: bytes, choice: int = 0) -> bytes:
    return _ring.encode_delta_header(rid, choice, 1, 0) + event


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _recv_all(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        if not data:
            return out
        out += data


def test_deltas_become_chunks_and_stop_at_a_control_record(make_segment):
    seg = make_segment(1 << 16)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    a, b = _pair()
    events = [b'data: {"x":%d}\n\n' % i for i in range(5)]
    for e in events[:3]:
        assert w.write(wire.DELTA, _delta(7, e))
    assert w.write(wire.DELTA, _delta(6, b"stale: dropped\n\n"))  # an earlier request's leftovers
    done = _ring.encode_done(7, 0, 1, 3, 5, 0, 0, wire.DONE_LAST_CHOICE)
    assert w.write(wire.DONE, done)
    for e in events[3:]:
        assert w.write(wire.DELTA, _delta(7, e))

    n, err, unsent, control, more = r.relay(a.fileno(), 7, 128)
    assert (n, err, unsent) == (3, 0, None)
    assert control == (wire.DONE, done)
    assert more  # stopped at the control record: the caller comes back
    assert _recv_all(b) == b"".join(_chunk(e) for e in events[:3])

    n, err, unsent, control, more = r.relay(a.fileno(), 7, 128)
    assert (n, err, unsent, control, more) == (2, 0, None, None, False)  # drained: armed
    assert _recv_all(b) == b"".join(_chunk(e) for e in events[3:])
    assert r.relay(a.fileno(), 7, 128) == (0, 0, None, None, False)


def test_batch_limit_reports_more(make_segment):
    seg = make_segment(1 << 16)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    a, b = _pair()
    for i in range(10):
        assert w.write(wire.DELTA, _delta(1, b"data: %d\n\n" % i))
    n, _, _, _, more = r.relay(a.fileno(), 1, 4)
    assert (n, more) == (4, True)
    n, _, _, _, more = r.relay(a.fileno(), 1, 100)
    assert (n, more) == (6, False)
    assert _recv_all(b) == b"".join(_chunk(b"data: %d\n\n" % i) for i in range(10))


def test_full_socket_returns_the_unsent_tail_in_order(make_segment):
    seg = make_segment(1 << 20)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    a, b = _pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    events = [bytes([65 + i % 26]) * 3000 + b"\n\n" for i in range(40)]
    for e in events:
        assert w.write(wire.DELTA, _delta(3, e))
    n, err, unsent, control, more = r.relay(a.fileno(), 3, 128)
    assert n == 40 and err == 0 and control is None
    assert unsent  # the socket took only part of ~120 kB
    # The caller writes the tail itself (the transport buffers it): the stream is intact.
    received = []
    b.setblocking(True)
    reader = threading.Thread(target=lambda: received.extend(iter(lambda: b.recv(1 << 20), b"")))
    reader.start()
    a.setblocking(True)
    a.sendall(unsent)
    a.close()
    reader.join(10)
    assert b"".join(received) == b"".join(_chunk(e) for e in events)


def test_closed_peer_reports_errno_and_still_consumes(make_segment):
    seg = make_segment(1 << 16)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    a, b = _pair()
    b.close()
    assert w.write(wire.DELTA, _delta(2, b"data: x\n\n"))
    n, err, unsent, control, more = r.relay(a.fileno(), 2, 128)  # no SIGPIPE (MSG_NOSIGNAL)
    assert n == 1 and err == errno.EPIPE and unsent is None and not more
    assert r.read_batch(10) == []


def test_empty_event_is_never_a_terminating_zero_chunk(make_segment):
    seg = make_segment(1 << 16)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    a, b = _pair()
    assert w.write(wire.DELTA, _delta(4, b""))
    assert w.write(wire.DELTA, _delta(4, b"data: y\n\n"))
    assert r.relay(a.fileno(), 4, 128)[0] == 1
    assert _recv_all(b) == _chunk(b"data: y\n\n")


def test_doorbell_is_reset(make_segment):
    seg = make_segment(1 << 16)
    bell = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        w = _ring.RingWriter(seg.fd, seg.size_bytes, "eventfd", bell)
        r = _ring.RingReader(seg.fd, seg.size_bytes)
        a, b = _pair()
        assert not r.arm()
        assert w.write(wire.DELTA, _delta(5, b"data: z\n\n"))  # armed reader: rings
        r.relay(a.fileno(), 5, 128, bell)
        try:
            os.read(bell, 8)
            raise AssertionError("the doorbell was not reset")
        except BlockingIOError:
            pass
    finally:
        os.close(bell)
