"""DeltaRelay and the reasoning channel: a framing that inserts one delta's escaped text twice
(OpenAI's "reasoning_content" + "reasoning"), and collect mode kept apart per (choice, channel)."""
import json
import socket

import pytest

from lanes import _ring, wire

SSE = (b'data: {"t":"', b'"}\n\n')


def _delta(rid: int, text: bytes, choice: int = 0, channel: int = wire.CONTENT) -> bytes:
    return _ring.encode_delta_header(rid, choice, channel, 1, 0) + text


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _event(text: bytes) -> bytes:
    return SSE[0] + _ring.json_escape(text) + SSE[1]


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


@pytest.fixture
def ring(make_segment):
    def make(capacity: int = 1 << 16):
        seg = make_segment(capacity)
        return _ring.RingWriter(seg.fd, seg.size_bytes), _ring.RingReader(seg.fd, seg.size_bytes)
    return make


REASONING = wire.CHANNELS["reasoning"]
TWICE = (b'data: {"rc":"', b'","r":"', b'"}\n\n')  # one delta fills two JSON fields


def test_twice_framing_inserts_the_escaped_text_twice_direct_and_queued(ring):
    w, r = ring()
    a, b = _pair()
    r.add_route(4, 1, [(0, wire.CONTENT, *SSE), (0, REASONING, *TWICE)])
    r.set_socket(4, a.fileno())
    r.set_direct(4, True)
    assert w.write(wire.DELTA, _delta(4, b'th"ink\n', channel=REASONING))
    assert w.write(wire.DELTA, _delta(4, b"answer"))
    assert r.pump(128)[0] is None
    esc = _ring.json_escape(b'th"ink\n')
    reasoning_event = TWICE[0] + esc + TWICE[1] + esc + TWICE[2]
    assert _recv_all(b) == _chunk(reasoning_event) + _chunk(_event(b"answer"))
    assert json.loads(reasoning_event[len(b"data: "):]) == {"rc": 'th"ink\n', "r": 'th"ink\n'}
    r.set_socket(4, -1)  # queued: same bytes
    assert w.write(wire.DELTA, _delta(4, b'th"ink\n', channel=REASONING))
    assert r.pump(128)[0] == [(4, 0, reasoning_event)]
    a.close()
    b.close()


def test_twice_framing_with_empty_middle_and_empty_text(ring):
    w, r = ring()
    r.add_route(8, 1, [(0, REASONING, b"[", b"", b"]")])
    assert w.write(wire.DELTA, _delta(8, b"ab", channel=REASONING))
    assert w.write(wire.DELTA, _delta(8, b"", channel=REASONING))
    assert r.pump(128)[0] == [(8, 0, b"[abab][]")]


def test_bad_framing_tuple_is_refused(ring):
    _, r = ring()
    with pytest.raises(ValueError):
        r.add_route(9, 1, [(0, wire.CONTENT, b"x")])


def test_collect_mode_keeps_channels_apart(ring):
    w, r = ring()
    r.add_route(6, 2, [], collect=True)
    records = [(0, REASONING, b"why "), (0, wire.CONTENT, b"so"), (1, REASONING, b'"q"'), (0, REASONING, b"not")]
    for choice, channel, text in records:
        assert w.write(wire.DELTA, _delta(6, text, choice, channel))
    assert r.pump(128)[0] is None
    assert r.take_text(6, 0, REASONING) == b"why not"
    assert r.take_text(6, 0) == b"so" and r.take_text(6, 0, wire.CONTENT) == b""
    assert r.take_text(6, 1, REASONING) == _ring.json_escape(b'"q"') and r.take_text(6, 1) == b""
    assert r.take_text(6, 0, 7) == b""  # no such channel
