"""SPSC ring: wrap/pad, full ring, header checks, single-writer claims, cross-process stress."""
import os
import select
import subprocess
import sys
import time
import zlib

import pytest

from lanes import _ring


def test_wrap_inserts_pad_and_preserves_records(make_segment):
    seg = make_segment(4096)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    sent = []
    # 300-byte payloads (312 B records) never divide 4096: every lap crosses the end with a PAD.
    for i in range(200):
        payload = bytes([i % 251]) * 300
        assert w.write(5, payload)
        sent.append(payload)
        if i % 3 == 2:
            got = r.read_batch(1000)
            assert [t for t, _ in got] == [5] * len(got)  # PAD never surfaces
            assert [p for _, p in got] == sent
            sent.clear()
    assert [p for _, p in r.read_batch(1000)] == sent


def test_full_ring_refuses_then_accepts(make_segment):
    seg = make_segment(4096)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    n = 0
    while w.write(1, b"x" * 100):
        n += 1
    assert n == 4096 // 112
    assert not w.write(1, b"y" * 100)  # 64 B left at the end: would need PAD + record
    assert len(r.read_batch(1)) == 1
    assert w.write(1, b"y" * 100)  # PAD fills the 64-byte tail, record lands at offset 0
    assert not w.write(1, b"z")
    got = r.read_batch(10_000)
    assert len(got) == n and got[-1][1] == b"y" * 100


def test_record_larger_than_max_is_refused(make_segment):
    seg = make_segment(4096)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    assert w.max_payload_bytes == 4096 // 4 - 8
    assert w.write(1, b"a" * w.max_payload_bytes)
    with pytest.raises(_ring.RingError, match="exceeds the ring maximum"):
        w.write(1, b"a" * (w.max_payload_bytes + 1))


def test_bad_magic_and_second_writer_are_refused(make_segment):
    seg = make_segment(4096)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    assert w is not None
    # Same process may re-attach (claims are by pid); another process may not.
    code = ("import os,sys; from lanes import _ring; fd=int(sys.argv[1]); "
            "_ring.RingWriter(fd, int(sys.argv[2]))")
    p = subprocess.run([sys.executable, "-c", code, str(seg.fd), str(seg.size_bytes)], pass_fds=(seg.fd,),
                       capture_output=True, text=True)
    assert p.returncode != 0 and "already has a writer" in p.stderr
    os.pwrite(seg.fd, b"\0\0\0\0", 0)
    with pytest.raises(_ring.RingError, match="bad magic"):
        _ring.RingReader(seg.fd, seg.size_bytes)


def test_capacity_must_be_power_of_two():
    with pytest.raises(_ring.RingError, match="power of two"):
        _ring.segment_bytes_for(5000)


def _expected_body(stream: int, seq: int) -> bytes:
    n = (stream * 7 + seq) % 193
    return bytes((stream * 31 + seq * 7 + i) & 0xFF for i in range(n))


def test_64_streams_x_2000_records_slow_reader_cross_process(make_segment):
    """R18 ring integrity: native producer in another process, deliberately slow Python reader
    that sleeps on the eventfd doorbell: nothing lost, duplicated, reordered or corrupted; no lost
    wake-up."""
    num_streams, per_stream = 64, 2000
    seg = make_segment(16384)
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    code = ("import sys; from lanes import _ring; a=[int(x) for x in sys.argv[1:]]; "
            "w=_ring.RingWriter(a[0], a[1], 'eventfd', a[2], ''); print(w.stress_produce(64, 2000, 12345))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(seg.fd), str(seg.size_bytes), str(efd)],
                            pass_fds=(seg.fd, efd), stdout=subprocess.PIPE, text=True)
    next_seq = [0] * num_streams
    total, batches, ended = 0, 0, False
    deadline = time.monotonic() + 120
    try:
        while not ended:
            assert time.monotonic() < deadline, "stress test did not finish"
            batch = r.read_batch(37)
            if not batch:
                if r.arm():
                    continue
                # Armed and empty: the producer must ring us if it writes anything.
                ready, _, _ = select.select([efd], [], [], 5.0)
                assert ready or proc.poll() is not None, "lost wake-up: armed reader never rung"
                try:
                    os.read(efd, 8)
                except BlockingIOError:
                    pass
                continue
            batches += 1
            if batches % 4 == 0:
                time.sleep(0.0005)  # slow reader: the ring fills and the producer must wait
            for rtype, payload in batch:
                if rtype == _ring.STRESS_END_TYPE:
                    ended = True
                    continue
                assert rtype == _ring.STRESS_TYPE
                stream = int.from_bytes(payload[0:4], "little")
                seq = int.from_bytes(payload[4:8], "little")
                crc = int.from_bytes(payload[8:12], "little")
                body = payload[12:]
                assert seq == next_seq[stream], f"stream {stream}: got {seq}, expected {next_seq[stream]}"
                assert body == _expected_body(stream, seq) and zlib.crc32(body) == crc
                next_seq[stream] += 1
                total += 1
        full_count = int(proc.communicate(timeout=30)[0])
    finally:
        proc.kill()
        proc.wait()
        os.close(efd)
    assert total == num_streams * per_stream
    assert next_seq == [per_stream] * num_streams
    assert full_count > 0, "the reader was not slow enough to fill the ring"


def test_reserved_pad_type_cannot_be_written(make_segment):
    seg = make_segment(4096)
    w = _ring.RingWriter(seg.fd, seg.size_bytes)
    r = _ring.RingReader(seg.fd, seg.size_bytes)
    with pytest.raises(_ring.RingError, match="reserved"):
        w.write(0, b"lost")
    assert w.write(3, b"kept")
    assert r.read_batch(10) == [(3, b"kept")]
