"""R4 slowloris (short form: 60 connections for up to 6 s; benchmarks/battery_long.py r4 runs
500 for 30 s): header bytes trickled slowly enough that Sanic's per-byte timer never fires."""
from __future__ import annotations

import socket
import statistics
import time

import httpx

NUM_CONNECTIONS = 60
DEADLINE_S = 2.0


def test_tricklers_are_cut_by_the_absolute_deadline_and_do_not_slow_others(synthetic_factory):
    """R4: every trickler is closed by the absolute header deadline (--request-deadline-s 2,
    asserted ≤ deadline + 0.8 s); meanwhile /health/live stays fast (p99 < 0.5 s; battery target
    100 ms) and a real request completes; the fds return to their count at start (global
    invariant)."""
    srv = synthetic_factory("--request-deadline-s", str(DEADLINE_S), step_us=2000)
    port = int(srv.base_url.rsplit(":", 1)[1])
    socks = []
    for _ in range(NUM_CONNECTIONS):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        s.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        socks.append([s, time.monotonic(), None])
    health_s = []
    t0 = time.monotonic()
    with httpx.Client(base_url=srv.base_url, timeout=5) as client:
        while time.monotonic() - t0 < DEADLINE_S + 4 and any(closed is None for _, _, closed in socks):
            for entry in socks:
                s, opened, closed = entry
                if closed is not None:
                    continue
                try:
                    s.send(b"X")  # one header byte per round (~0.3 s)
                    if s.recv(4096) == b"":
                        entry[2] = time.monotonic() - opened
                except BlockingIOError:
                    pass
                except OSError:
                    entry[2] = time.monotonic() - opened
            h0 = time.monotonic()
            assert client.get("/health/live").status_code == 200
            health_s.append(time.monotonic() - h0)
            time.sleep(0.25)
        ok = client.post("/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 2})
        assert ok.status_code == 200
    for s, _, _ in socks:
        s.close()
    closed = [c for _, _, c in socks]
    assert all(c is not None for c in closed), f"{sum(c is None for c in closed)} tricklers still open"
    # Sanic alone checks every deadline / 2 (closing in [D, 1.5 D]); ours fires at D. The margin is
    # for the trickle loop's own round (~0.3 s) and a loaded machine.
    assert max(closed) <= DEADLINE_S + 0.8, max(closed)
    assert statistics.quantiles(health_s, n=100)[-1] < 0.5, max(health_s)
