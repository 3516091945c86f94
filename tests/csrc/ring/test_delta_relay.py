"""DeltaRelay (RingReader.add_route/pump/...): the protocol-neutral DELTA records of every
request in flight on a lane are demultiplexed by request id, JSON-escaped and framed per
(choice, channel); routes in direct mode go ring → socket as HTTP/1.1 chunks, the others come
back to Python (queued) or accumulate natively (collect). Control records stop the walk."""
import errno
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from lanes import _ring, wire

SSE = (b'data: {"t":"', b'"}\n\n')


def _delta(rid: int, text: bytes, choice: int = 0, channel: int = wire.CONTENT) -> bytes:
    return _ring.encode_delta_header(rid, choice, channel, 1, 0) + text


def _done(rid: int, choice: int = 0, last: bool = True) -> bytes:
    return _ring.encode_done(rid, choice, wire.FINISH_CODES["length"], 1, 1, 0,
                             wire.DONE_LAST_CHOICE if last else 0, 0, 0)


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _event(text: bytes, framing=SSE) -> bytes:
    return framing[0] + _ring.json_escape(text) + framing[1]


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


def _dechunk(data: bytes) -> bytes:
    out, pos = [], 0
    while pos < len(data):
        eol = data.index(b"\r\n", pos)
        size = int(data[pos:eol], 16)
        assert size > 0, "a zero-size chunk would end the HTTP body"
        out.append(data[eol + 2:eol + 2 + size])
        assert data[eol + 2 + size:eol + 4 + size] == b"\r\n"
        pos = eol + 4 + size
    return b"".join(out)


@pytest.fixture
def ring(make_segment):
    def make(capacity: int = 1 << 16, bell_fd: int = -1):
        seg = make_segment(capacity)
        if bell_fd >= 0:
            w = _ring.RingWriter(seg.fd, seg.size_bytes, "eventfd", bell_fd)
        else:
            w = _ring.RingWriter(seg.fd, seg.size_bytes)
        return w, _ring.RingReader(seg.fd, seg.size_bytes)
    return make


def _direct(r, rid: int, sock: socket.socket, num_choices: int = 1, framing=SSE):
    r.add_route(rid, num_choices, [(c, wire.CONTENT, *framing) for c in range(num_choices)])
    r.set_socket(rid, sock.fileno())
    r.set_direct(rid, True)


def test_direct_deltas_become_chunks_and_stop_at_a_control_record(ring):
    w, r = ring()
    a, b = _pair()
    _direct(r, 7, a)
    texts = [b"tok%d " % i for i in range(5)]
    for t in texts[:3]:
        assert w.write(wire.DELTA, _delta(7, t))
    assert w.write(wire.DELTA, _delta(6, b"not ours"))  # unknown request: dropped
    done = _done(7)
    assert w.write(wire.DONE, done)
    for t in texts[3:]:
        assert w.write(wire.DELTA, _delta(7, t))

    queued, partial, control, more = r.pump(128)
    assert (queued, partial) == (None, None)
    assert control == (wire.DONE, done)
    assert more  # stopped at the control record: the caller comes back
    assert _recv_all(b) == b"".join(_chunk(_event(t)) for t in texts[:3])
    sent, first_ns, _ = r.route_stats(7)
    assert sent == 3 and first_ns > 0

    assert r.pump(128) == (None, None, None, False)  # drained: the doorbell is armed
    assert _recv_all(b) == b"".join(_chunk(_event(t)) for t in texts[3:])
    assert r.route_stats(7) == (5, first_ns, 0)  # the time of the FIRST direct send stays
    assert r.pump(128) == (None, None, None, False)
    a.close()
    b.close()


def test_queued_events_are_framed_per_choice_and_channel_and_merged_in_order(ring):
    w, r = ring()
    framings = [(0, wire.CONTENT, b"<0:", b">"), (1, wire.CONTENT, b"<1:", b">"),
                (1, wire.CHANNELS["reasoning"], b"<1r:", b">")]
    r.add_route(3, 2, framings)
    records = [(0, 0, b"a"), (0, 0, b"b"), (1, 0, b"c"), (1, 1, b"d"), (0, 1, b"e"), (0, 0, b"f")]
    for choice, channel, text in records:
        assert w.write(wire.DELTA, _delta(3, text, choice, channel))
    queued, partial, control, more = r.pump(128)
    assert partial is None and control is None and not more
    # Consecutive events of one choice are merged; a channel without its own framing (choice 0's
    # reasoning) takes the choice's content framing.
    assert queued == [(3, 0, b"<0:a><0:b>"), (3, 1, b"<1:c><1r:d>"), (3, 0, b"<0:e><0:f>")]
    assert r.route_stats(3) == (0, 0, 0)


def test_direct_needs_a_socket_and_detaching_turns_it_off(ring):
    w, r = ring()
    a, b = _pair()
    r.add_route(1, 1, [(0, wire.CONTENT, *SSE)])
    r.set_direct(1, True)  # no socket yet: stays queued
    assert w.write(wire.DELTA, _delta(1, b"x"))
    assert r.pump(128)[0] == [(1, 0, _event(b"x"))]
    r.set_socket(1, a.fileno())
    r.set_direct(1, True)
    assert w.write(wire.DELTA, _delta(1, b"y"))
    assert r.pump(128)[0] is None
    assert _recv_all(b) == _chunk(_event(b"y"))
    r.set_socket(1, -1)  # detach (the sink's fd is about to close): direct off at once
    assert w.write(wire.DELTA, _delta(1, b"z"))
    assert r.pump(128)[0] == [(1, 0, _event(b"z"))]
    assert _recv_all(b) == b""
    r.set_direct(1, False)
    a.close()
    b.close()


def test_collect_mode_accumulates_escaped_text_until_taken(ring):
    w, r = ring()
    a, b = _pair()
    r.add_route(5, 2, [], collect=True)
    r.set_socket(5, a.fileno())
    r.set_direct(5, True)  # never direct in collect mode
    parts = {0: [b"He said \"hi\"\n", b"\xe2\x80\xa8ok"], 1: [b"tab\there", b" \\ end"]}
    for i in range(2):
        for choice in (0, 1):
            assert w.write(wire.DELTA, _delta(5, parts[choice][i], choice))
    assert w.write(wire.DONE, _done(5, 0, last=False))
    queued, partial, control, more = r.pump(128)
    assert (queued, partial) == (None, None) and control[0] == wire.DONE
    assert _recv_all(b) == b""
    for choice in (0, 1):
        text = r.take_text(5, choice)
        assert text == _ring.json_escape(b"".join(parts[choice]))
        assert json.loads(b'"' + text + b'"') == b"".join(parts[choice]).decode()
        assert r.take_text(5, choice) == b""  # taken: cleared
    assert r.take_text(5, 2) == b"" and r.take_text(99, 0) == b""
    a.close()
    b.close()


HOSTILE = [
    b'"quoted" \\backslash\\ /slash',
    bytes(range(0, 32)) + b"\x7f",
    "line\u2028sep\u2029para é 漢字 🎉".encode(),
    b"bad \xff\xfe utf8 \xc3",       # invalid and truncated sequences
    b"\xed\xa0\x80 surrogate, \xc0\xaf overlong",
    b"</script><script>alert(1)</script>",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_escaped_into_valid_json(ring, text):
    w, r = ring()
    a, b = _pair()
    _direct(r, 1, a)
    r.add_route(2, 1, [(0, wire.CONTENT, *SSE)])
    r.add_route(3, 1, [], collect=True)
    for rid in (1, 2, 3):
        assert w.write(wire.DELTA, _delta(rid, text))
    queued, _, _, _ = r.pump(128)
    expected = text.decode("utf-8", "replace")
    for event in (_dechunk(_recv_all(b)), queued[0][2]):
        assert event.startswith(b"data: ") and event.endswith(b"\n\n")
        body = event[len(b"data: "):-2]
        assert b"\n" not in body and b"\r" not in body  # one SSE line
        assert json.loads(body)["t"].replace("\ufffd", "") == expected.replace("\ufffd", "")
    collected = r.take_text(3, 0)
    assert json.loads(b'"' + collected + b'"').replace("\ufffd", "") == expected.replace("\ufffd", "")
    assert "\u2028".encode() not in collected and "\u2029".encode() not in collected
    a.close()
    b.close()


def test_interleaved_records_of_two_requests_reach_their_own_sockets(ring):
    w, r = ring(1 << 18)
    a1, b1 = _pair()
    a2, b2 = _pair()
    _direct(r, 11, a1, framing=(b"[11:", b"]"))
    _direct(r, 22, a2, framing=(b"[22:", b"]"))
    expected = {11: [], 22: []}
    for i in range(300):
        rid = 11 if i % 3 else 22  # uneven interleaving, as a batch of sequences emits it
        text = b"%d-%d " % (rid, i)
        assert w.write(wire.DELTA, _delta(rid, text))
        expected[rid].append(b"[%d:%s]" % (rid, text))
    while True:
        queued, partial, control, more = r.pump(64)
        assert (queued, partial, control) == (None, None, None)
        if not more:
            break
    assert _dechunk(_recv_all(b1)) == b"".join(expected[11])
    assert _dechunk(_recv_all(b2)) == b"".join(expected[22])
    assert r.route_stats(11)[0] == 200 and r.route_stats(22)[0] == 100
    for s in (a1, b1, a2, b2):
        s.close()


def test_records_of_unknown_or_removed_requests_are_dropped(ring):
    w, r = ring()
    a, b = _pair()
    _direct(r, 1, a)
    r.add_route(2, 1, [(0, wire.CONTENT, *SSE)])
    assert r.num_routes == 2
    assert w.write(wire.DELTA, _delta(1, b"one"))
    assert w.write(wire.DELTA, _delta(2, b"two"))
    assert w.write(wire.DELTA, _delta(3, b"never registered"))
    assert r.pump(128)[0] == [(2, 0, _event(b"two"))]
    assert _recv_all(b) == _chunk(_event(b"one"))
    # Cancelled/finished: the route goes, and the lane's late records for it go nowhere.
    assert r.remove_route(1) and r.remove_route(2)
    assert not r.remove_route(2)
    assert r.num_routes == 0
    r.set_socket(1, a.fileno())  # no route: ignored
    r.set_direct(1, True)
    for rid in (1, 2):
        assert w.write(wire.DELTA, _delta(rid, b"late"))
    assert r.pump(128) == (None, None, None, False)
    assert _recv_all(b) == b""
    assert r.route_stats(1) == (0, 0, 0) and r.take_text(1, 0) == b""
    # The same id registered again (a new request) starts clean.
    r.add_route(1, 1, [(0, wire.CONTENT, *SSE)])
    assert w.write(wire.DELTA, _delta(1, b"new"))
    assert r.pump(128)[0] == [(1, 0, _event(b"new"))]
    a.close()
    b.close()


def test_batch_limit_reports_more(ring):
    w, r = ring()
    a, b = _pair()
    _direct(r, 1, a)
    for i in range(10):
        assert w.write(wire.DELTA, _delta(1, b"%d" % i))
    queued, partial, control, more = r.pump(4)
    assert more and r.route_stats(1)[0] == 4
    queued, partial, control, more = r.pump(100)
    assert not more and r.route_stats(1)[0] == 10
    assert _recv_all(b) == b"".join(_chunk(_event(b"%d" % i)) for i in range(10))
    a.close()
    b.close()


def test_partial_send_hands_back_the_tail_in_order_and_turns_direct_off(ring):
    w, r = ring(1 << 20)
    a, b = _pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    _direct(r, 3, a)
    texts = [bytes([65 + i % 26]) * 3000 for i in range(40)]
    for t in texts:
        assert w.write(wire.DELTA, _delta(3, t))
    queued, partial, control, more = r.pump(128)
    assert queued is None and control is None
    assert len(partial) == 1
    rid, unsent, send_errno = partial[0]
    assert rid == 3 and send_errno == 0 and unsent  # the socket took only part of ~120 kB
    # Direct is off now: later deltas queue behind the tail (the caller turns direct on again
    # once its own writes drained).
    later = [b"after %d" % i for i in range(3)]
    for t in later:
        assert w.write(wire.DELTA, _delta(3, t))
    queued, partial, control, more = r.pump(128)
    assert partial is None and queued == [(3, 0, b"".join(_event(t) for t in later))]
    # The caller writes the tail, then the queued events as its own chunks: the stream is intact.
    received = []
    b.setblocking(True)
    reader = threading.Thread(target=lambda: received.extend(iter(lambda: b.recv(1 << 20), b"")))
    reader.start()
    a.setblocking(True)
    a.sendall(unsent)
    a.sendall(_chunk(queued[0][2]))
    a.close()
    reader.join(10)
    assert not reader.is_alive()
    assert _dechunk(b"".join(received)) == b"".join(_event(t) for t in texts + later)
    b.close()


EPIPE_CHILD = r"""
import os, secrets, signal, socket, sys
import posix_ipc
from lanes import _ring, wire
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a SIGPIPE would kill this process
name = "/laneserve-epipe-%s" % secrets.token_hex(4)
size = _ring.segment_bytes_for(1 << 16)
shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=size)
fd = os.dup(shm.fd)
shm.close_fd()
posix_ipc.unlink_shared_memory(name)
_ring.format_segment(fd, size)
w, r = _ring.RingWriter(fd, size), _ring.RingReader(fd, size)
a, b = socket.socketpair()
a.setblocking(False)
b.close()
r.add_route(2, 1, [(0, 0, b"data: ", b"\n\n")])
r.set_socket(2, a.fileno())
r.set_direct(2, True)
assert w.write(wire.DELTA, _ring.encode_delta_header(2, 0, 0, 1, 0) + b"x")
queued, partial, control, more = r.pump(128)
assert w.write(wire.DELTA, _ring.encode_delta_header(2, 0, 0, 1, 0) + b"y")
queued2, partial2, _, _ = r.pump(128)
print(repr((queued, partial, control, more, r.read_batch(10), queued2, partial2)))
"""


def test_closed_peer_reports_epipe_without_sigpipe_and_still_consumes():
    import lanes

    root = os.path.dirname(os.path.dirname(os.path.abspath(lanes.__file__)))
    p = subprocess.run([sys.executable, "-c", EPIPE_CHILD], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 0, f"child died (rc {p.returncode}): {p.stderr}"
    queued, partial, control, more, left, queued2, partial2 = eval(p.stdout)
    assert queued is None and control is None and not more
    assert partial == [(2, None, errno.EPIPE)]  # no tail after an error: the connection is unusable
    assert left == []  # the record was consumed
    assert partial2 is None and queued2 == [(2, 0, b"data: y\n\n")]  # direct was turned off


def test_framed_empty_delta_is_never_a_terminating_zero_chunk(ring):
    w, r = ring()
    a, b = _pair()
    _direct(r, 4, a)
    assert w.write(wire.DELTA, _delta(4, b""))
    assert w.write(wire.DELTA, _delta(4, b"y"))
    r.pump(128)
    data = _recv_all(b)
    assert not data.startswith(b"0\r\n")
    assert _dechunk(data) == _event(b"") + _event(b"y")
    a.close()
    b.close()


def test_unframed_empty_delta_is_never_a_terminating_zero_chunk(ring):
    w, r = ring()
    a, b = _pair()
    _direct(r, 4, a, framing=(b"", b""))
    assert w.write(wire.DELTA, _delta(4, b""))
    assert w.write(wire.DELTA, _delta(4, b"y"))
    r.pump(128)
    assert _recv_all(b) == _chunk(b"y")
    a.close()
    b.close()


def test_doorbell_is_reset(ring):
    bell = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        w, r = ring(bell_fd=bell)
        r.add_route(5, 1, [(0, wire.CONTENT, *SSE)])
        assert not r.arm()
        assert w.write(wire.DELTA, _delta(5, b"z"))  # armed reader: rings
        queued, _, _, more = r.pump(128, bell)
        assert queued == [(5, 0, _event(b"z"))] and not more
        with pytest.raises(BlockingIOError):
            os.read(bell, 8)  # reset by the pump (and re-armed, so the next record rings again)
        assert w.write(wire.DELTA, _delta(5, b"again"))
        assert os.read(bell, 8)
    finally:
        os.close(bell)


def test_numbered_events_count_across_channels_and_modes_from_the_first_number(ring):
    """The Responses API numbers every event of a response: the relay's count continues from
    the framing's first number, over direct and queued events of every channel, and
    route_stats tells the gateway where it stands."""
    w, r = ring()
    a, b = _pair()
    framings = [(0, wire.CONTENT, b'{"n":', b',"t":"', b'"}', 4),
                (0, wire.CHANNELS["reasoning"], b'{"r":', b',"t":"', b'"}', 4)]
    r.add_route(5, 1, framings, False)
    assert r.route_stats(5)[2] == 4
    for text, channel in ((b"a", wire.CONTENT), (b'"q"', wire.CHANNELS["reasoning"])):
        assert w.write(wire.DELTA, _delta(5, text, channel=channel))
    queued, partial, control, more = r.pump(128)  # no socket yet: queued
    assert queued == [(5, 0, b'{"n":4,"t":"a"}{"r":5,"t":"\\"q\\""}')]
    r.set_socket(5, a.fileno())
    r.set_direct(5, True)
    for text in (b"b", b"c"):
        assert w.write(wire.DELTA, _delta(5, text))
    r.pump(128)
    assert _recv_all(b) == _chunk(b'{"n":6,"t":"b"}') + _chunk(b'{"n":7,"t":"c"}')
    assert r.route_stats(5)[2] == 8
    a.close()
    b.close()
