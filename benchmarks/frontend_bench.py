"""Frontend overhead (the battery's §2.1 test, model-free): what the gateway adds between a lane
emitting a token and the client receiving it, against a Sanic-only baseline in the same run.

    python benchmarks/frontend_bench.py                  # 64 streams x 50 tok/s, 500 tokens, 3 runs
    python benchmarks/frontend_bench.py --streams 32 --tokens 200 --runs 1

1. Paced: `--streams` concurrent streams of `--tokens` tokens at `--interval-us` each, once
   against laneserve (one synthetic lane, one slot per stream: every step emits one token of
   every stream at the same instant) and once against benchmarks/paced_server.py (bare Sanic: one
   clock ticking every interval, each tick sends one event on every stream; the same chunk shape
   and token text). The emit stamps stay inside laneserve (the ring's emit_ns is not sent over
   HTTP), and the lane's own step jitter (a step of 20 ms takes 20-24 ms here) is not the
   frontend's, so the client measures the *spread*: how much later each token arrived than the
   first delivery of the same emission step (all streams' tokens of a step left together). That
   is the latency the frontend adds by fanning one step out to N sockets (this one-process
   asyncio client reads the sockets one after another, so its own time is in both servers'
   figures alike); the constant part of emit -> receive (the wake-up through the ring's
   doorbell) is benchmarks/relay_bench.py's wake latency.
2. Saturated: the same streams on the server's second model `fast` (a 0 us step), as fast as the
   lane and the relay go, after a warm-up; events/s
   and tokens/s received (events may carry several tokens when the socket was busy; every
   stream's text is checked token by token in both modes: no loss, duplicate or reorder).

Prints ONE line: spread p50/p99, laneserve vs the Sanic-only baseline (ratio); saturated events/s.
tests/reliability/test_frontend_overhead.py runs a short form with generous bounds.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.cli.bench.client import Conn, body_parts  # noqa: E402
from gateway.cli.bench.metrics import percentile  # noqa: E402
from gateway.cli.bench.launcher import free_port  # noqa: E402
from gateway.cli.bench.server import ProcessServer, StartedServer  # noqa: E402
from gateway.cli.bench.synthetic import synthetic_text  # noqa: E402


def laneserve_server(num_slots: int, step_us: int, ctx_size: int = 2048) -> StartedServer:
    """Model `m` steps every step_us; model `fast` as fast as it goes (saturated mode)."""
    return StartedServer(f"m=synthetic:step_us={step_us},slots={num_slots}",
                         ["--model", f"fast=synthetic:step_us=0,slots={num_slots}", "--threads", "1",
                          "--ctx-size", str(ctx_size), "--max-queue", "0", "--log-level", "warning"])


def paced_server() -> ProcessServer:
    port = free_port()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paced_server.py")
    return ProcessServer("paced", [sys.executable, script, str(port)], port, "/health")


async def _one_stream(base_url: str, path: str, body: dict) -> list[tuple[float, str]]:
    """(arrival perf_counter, text) of every content event of one streamed request."""
    conn = Conn(base_url)
    await conn.open()
    payload = json.dumps(body).encode()
    conn.writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    reader = conn.reader
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    events, buf = [], b""
    async for data in body_parts(reader, headers):
        now = time.perf_counter()
        buf += data
        while (end := buf.find(b"\n\n")) >= 0:
            event, buf = buf[:end], buf[end + 2:]
            if event.startswith(b"data: {"):
                chunk = json.loads(event[6:])
                if "error" in chunk or status != 200:
                    raise RuntimeError(f"stream error: {event[:200]!r}")
                events.append((now, chunk["choices"][0]["text"]))
    conn.close()
    return events


def token_arrivals(events: list[tuple[float, str]], num_tokens: int) -> list[float]:
    """Per token, the arrival of the event that carried it; raises if any token is missing,
    repeated or out of order (each synthetic token's text ends with its only space)."""
    text = "".join(t for _, t in events)
    expected = synthetic_text(num_tokens)
    if text != expected:
        raise AssertionError(f"stream text differs from the lane's tokens at char "
                             f"{next((i for i, (a, b) in enumerate(zip(text, expected)) if a != b), min(len(text), len(expected)))}")
    return [t for t, piece in events for _ in range(piece.count(" "))]


def spread_s(streams: list[list[float]], period_s: float) -> list[float]:
    """Per token, how much later it arrived than the first delivery of the same emission step.
    Token i of stream s left in step i + o_s; o_s, relative to stream 0, is the median arrival
    difference in whole periods (robust to jitter far below a period)."""
    ref = streams[0]
    steps: dict[int, list[float]] = {}
    for arrivals in streams:
        n = min(len(ref), len(arrivals))
        offset = round(statistics.median(arrivals[i] - ref[i] for i in range(n)) / period_s)
        for i, r in enumerate(arrivals):
            steps.setdefault(i + offset, []).append(r)
    return [r - min(group) for group in steps.values() if len(group) > 1 for r in group]


async def run_streams(base_url: str, path: str, body: dict, num_streams: int, num_tokens: int,
                      period_s: float | None = None) -> dict:
    """All streams at once: events and tokens received, wall time, and with `period_s` the
    per-token spread (first tokens excluded: they carry each request's admission)."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_one_stream(base_url, path, body) for _ in range(num_streams)))
    wall_s = time.perf_counter() - t0
    arrivals = [token_arrivals(events, num_tokens)[1:] for events in results]
    return {"spread_s": spread_s(arrivals, period_s) if period_s else [], "events": sum(len(e) for e in results),
            "tokens": num_streams * num_tokens, "wall_s": wall_s}


def laneserve_body(num_tokens: int, model: str = "m") -> dict:
    return {"model": model, "prompt": "x", "max_tokens": num_tokens, "ignore_eos": True, "stream": True}


def paced_body(num_tokens: int, interval_us: int) -> dict:
    return {"tokens": num_tokens, "interval_us": interval_us}


def measure(ls_url: str, baseline_url: str, num_streams: int, num_tokens: int, interval_us: int, runs: int,
            saturated_tokens: int) -> dict:
    """Spread of laneserve and of the Sanic baseline (runs alternating), then the saturated run
    on laneserve's `fast` model (after a warm-up)."""
    period_s = interval_us / 1e6
    ls_spread, base_spread = [], []
    for _ in range(runs):
        ls_spread += asyncio.run(run_streams(ls_url, "/v1/completions", laneserve_body(num_tokens), num_streams,
                                             num_tokens, period_s))["spread_s"]
        base_spread += asyncio.run(run_streams(baseline_url, "/paced", paced_body(num_tokens, interval_us),
                                               num_streams, num_tokens, period_s))["spread_s"]
    asyncio.run(run_streams(ls_url, "/v1/completions", laneserve_body(32, "fast"), num_streams, 32))
    sat = asyncio.run(run_streams(ls_url, "/v1/completions", laneserve_body(saturated_tokens, "fast"), num_streams,
                                  saturated_tokens))
    return {"laneserve_s": ls_spread, "baseline_s": base_spread, "saturated_events_s": sat["events"] / sat["wall_s"],
            "saturated_tokens_s": sat["tokens"] / sat["wall_s"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=500, help="tokens per stream")
    parser.add_argument("--interval-us", type=int, default=20_000, help="emit interval (20 000 = 50 tok/s)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--saturated-tokens", type=int, default=1000, help="tokens per stream, saturated mode")
    args = parser.parse_args()
    ls, baseline = laneserve_server(args.streams, args.interval_us).start(), paced_server().start()
    try:
        m = measure(ls.base_url, baseline.base_url, args.streams, args.tokens, args.interval_us, args.runs,
                    args.saturated_tokens)
    finally:
        ls.stop()
        baseline.stop()
    ls_late, base_late = m["laneserve_s"], m["baseline_s"]
    ms = lambda values, q: percentile(values, q) * 1e3  # noqa: E731
    print(f"frontend overhead: {args.streams} streams x {1e6 / args.interval_us:g} tok/s x {args.tokens} tokens "
          f"x {args.runs} runs: added latency (spread within a step) p50 {ms(ls_late, 50):.2f} ms (Sanic-only {ms(base_late, 50):.2f}), p99 "
          f"{ms(ls_late, 99):.2f} ms (Sanic-only {ms(base_late, 99):.2f}, {ms(ls_late, 99) / ms(base_late, 99):.2f}x), "
          f"no token lost; saturated: {m['saturated_events_s']:.0f} events/s, "
          f"{m['saturated_tokens_s']:.0f} tokens/s over {args.streams} streams "
          f"(load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
