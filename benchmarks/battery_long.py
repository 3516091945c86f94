"""Long forms of battery items R4 (slowloris), R9 (cancel storm) and R15 (overload burst), and the
measured figures behind the generous bounds of R5 (stalled reader) and R10 (lane SIGKILL); R24
is benchmarks/soak.py. Each starts its own server on synthetic lanes (the gateway is what these
measure; a fixed step keeps the load reproducible) and prints ONE line.

    python benchmarks/battery_long.py r4      # 500 tricklers for 30 s, --request-deadline-s 10
    python benchmarks/battery_long.py r5      # a bystander's ITL: alone, beside a reader, beside a stalled reader
    python benchmarks/battery_long.py r9      # 1000 streams, half abandoned after 0.5 s
    python benchmarks/battery_long.py r10     # lane B's ITL before and after lane A's SIGKILL
    python benchmarks/battery_long.py r15     # burst of 10 × (slots + queue)

The CI short forms are in tests/reliability/ and tests/gateway/.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import socket
import statistics
import sys
import time

import httpx
import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.cli.bench.metrics import percentile  # noqa: E402
from gateway.cli.bench.proc import proc_counts  # noqa: E402
from gateway.cli.bench.server import StartedServer  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "reliability"))
from harness import StreamGaps, lane_pids  # noqa: E402  (the battery's bystander recorder)

MODEL = "m"


def _counts(pid: int) -> tuple[int, int]:
    """(RSS kB, open fds)."""
    return proc_counts(pid)[:2]


def _pct(values: list[float], q: float) -> float:
    return percentile(values, q * 100) if values else float("nan")


async def _ttft(client: httpx.AsyncClient) -> float:
    t0 = time.monotonic()
    async with client.stream("POST", "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 4,
                                                             "stream": True}) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                return time.monotonic() - t0
    raise RuntimeError("no token")


async def r4(url: str, pid: int) -> str:
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        baseline = [await _ttft(client) for _ in range(20)]
        _, fds0 = _counts(pid)
        conns = []
        for _ in range(500):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            conns.append([reader, writer, time.monotonic(), None])

        async def trickle(entry) -> None:
            reader, writer, opened, _ = entry
            try:
                while time.monotonic() - opened < 30:
                    writer.write(b"X")
                    await writer.drain()
                    try:
                        if await asyncio.wait_for(reader.read(4096), 2.0) == b"":
                            break
                        break  # an answer (408): the server ended it
                    except asyncio.TimeoutError:
                        continue
            except OSError:
                pass
            entry[3] = time.monotonic() - opened
            writer.close()

        tasks = [asyncio.create_task(trickle(c)) for c in conns]
        health, loaded = [], []
        t0 = time.monotonic()
        while not all(t.done() for t in tasks) and time.monotonic() - t0 < 35:
            h0 = time.monotonic()
            await client.get("/health/live")
            health.append(time.monotonic() - h0)
            loaded.append(await _ttft(client))
            await asyncio.sleep(0.2)
        await asyncio.gather(*tasks)
        await asyncio.sleep(2.0)
        _, fds1 = _counts(pid)
    closed = [c[3] for c in conns]
    return (f"R4 slowloris: 500 tricklers closed after max {max(closed):.1f} s (deadline 10 s), /health p99 "
            f"{_pct(health, 0.99) * 1e3:.1f} ms, TTFT p50 {statistics.median(loaded) * 1e3:.1f} ms vs "
            f"{statistics.median(baseline) * 1e3:.1f} ms alone ({statistics.median(loaded) / statistics.median(baseline):.2f}x), "
            f"fds {fds0}→{fds1}")


async def r9(url: str, pid: int) -> str:
    rng = random.Random(9)
    errors, cancelled, done = [], 0, 0
    limits = httpx.Limits(max_connections=64)

    async def one(client: httpx.AsyncClient, sem: asyncio.Semaphore, i: int, cancel: bool) -> None:
        nonlocal cancelled, done
        async with sem:
            try:
                async with client.stream("POST", "/v1/completions", json={
                        "model": MODEL, "prompt": f"x {i}", "max_tokens": 200, "stream": True}) as r:
                    t0 = time.monotonic()
                    async for line in r.aiter_lines():
                        if cancel and time.monotonic() - t0 > 0.5:
                            cancelled += 1
                            return
                        if '"error"' in line:
                            errors.append(line[:120])
                            return
                    done += 1
            except httpx.HTTPError as exc:
                errors.append(repr(exc)[:120])

    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:  # warm-up, not counted
        sem = asyncio.Semaphore(32)
        await asyncio.gather(*(one(client, sem, i, i % 2 == 0) for i in range(64)))
    errors.clear()
    cancelled = done = 0
    await asyncio.sleep(1.0)
    rss0, fds0 = _counts(pid)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        sem = asyncio.Semaphore(32)
        t0 = time.monotonic()
        await asyncio.gather(*(one(client, sem, i, rng.random() < 0.5) for i in range(1000)))
        wall = time.monotonic() - t0
        t1 = time.monotonic()
        while True:
            body = (await client.get("/health/ready")).json()
            if all(m["slots_in_use"] == 0 and m["queued"] == 0 for m in body["models"].values()):
                break
            await asyncio.sleep(0.02)
        settle = time.monotonic() - t1
    await asyncio.sleep(1.0)  # client closed: its connections are gone from the server too
    rss1, fds1 = _counts(pid)
    for sample in sorted(set(errors))[:3]:
        print("error:", sample)
    return (f"R9 cancel storm: 1000 streams (after 64 warm-up) in {wall:.1f} s, {cancelled} cancelled, {done} "
            f"completed, {len(errors)} errors, in-flight 0 after {settle * 1e3:.0f} ms, RSS {rss0 / 1024:.1f}→"
            f"{rss1 / 1024:.1f} MB ({(rss1 - rss0) / rss0 * 100:+.1f}%), fds {fds0}→{fds1}")


def _timeouts(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(float(v) for v in re.findall(r'^laneserve_requests_total\{[^}]*outcome="timeout"[^}]*\} ([0-9.e+]+)$',
                                             text, re.M))


def r5(url: str) -> str:
    """A bystander stream (1 ms steps) alone, beside an 8-choice stream that is read, and beside
    the same stream never read (the last 2 s before its cut: the socket is full for the whole
    --write-stall-timeout-s)."""
    body = {"model": MODEL, "prompt": "x", "n": 8, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    with StreamGaps(url, {"model": MODEL, "prompt": "x", "max_tokens": 1000, "ignore_eos": True}) as bystander:
        time.sleep(3.0)
        t_reader = time.monotonic()
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            for _ in r.iter_bytes():
                pass
        t_staller = time.monotonic()
        timeouts = _timeouts(url)
        port = int(url.rsplit(":", 1)[1])
        payload = orjson.dumps(body)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
            while _timeouts(url) == timeouts:
                time.sleep(0.02)
            t_cut = time.monotonic()
    alone = bystander.gaps_s(t_reader - 2.5, t_reader)
    reader = bystander.gaps_s(t_reader + 0.2, t_staller)
    stalled = bystander.gaps_s(t_cut - 2.0, t_cut)
    p99 = [_pct(g, 0.99) * 1e3 for g in (alone, reader, stalled)]
    return (f"R5 stalled reader (cut {t_cut - t_staller:.1f} s after it connected): bystander ITL p99 "
            f"{p99[0]:.2f} ms alone, {p99[1]:.2f} ms beside a reading n=8 stream, {p99[2]:.2f} ms beside the same "
            f"stream stalled ({p99[2] / p99[1]:.2f}x the reading case, {p99[2] / p99[0]:.2f}x alone), max gap while "
            f"stalled {max(stalled) * 1e3:.1f} ms, bystander errors {len(bystander.errors)}")


def r10(url: str) -> str:
    """4 streams per lane (20 ms steps, 300 tokens); SIGKILL lane A 2 s in: B's ITL p99 before
    and after, A's error events and the respawn."""
    body = {"model": MODEL, "prompt": "x", "max_tokens": 300, "ignore_eos": True}
    clients = [StreamGaps(url, body, repeat=False) for _ in range(8)]
    for c in clients:
        c.__enter__()
    time.sleep(2.0)
    victim = lane_pids(url)[0]
    t_kill = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    while httpx.get(url + "/health/ready").json()["status"] != "ready":
        time.sleep(0.02)
    respawn_s = time.monotonic() - t_kill
    for c in clients:
        c.__exit__()
    clean = [c for c in clients if not c.errors]
    before = [g for c in clean for g in c.gaps_s(t_kill - 1.5, t_kill)]
    after = [g for c in clean for g in c.gaps_s(t_kill, t_kill + 60)]
    error_s = [t - t_kill for c in clients for _, t, _ in c.errors]
    return (f"R10 lane SIGKILL: {len(clients) - len(clean)} streams got the error event after max "
            f"{max(error_s, default=float('nan')) * 1e3:.0f} ms, lane respawned and ready after {respawn_s:.2f} s "
            f"(load 0.5 s); lane B's {len(clean)} streams: ITL p99 {_pct(before, 0.99) * 1e3:.1f} ms before, "
            f"{_pct(after, 0.99) * 1e3:.1f} ms after ({_pct(after, 0.99) / _pct(before, 0.99):.2f}x), "
            f"max gap after {max(after) * 1e3:.1f} ms")


def _server_refusal_ms(log_path: str) -> list[float]:
    """total_ms of the refused requests as the server logged them (request_finished lines)."""
    out = []
    with open(log_path, errors="replace") as log:
        for line in log:
            if '"request_finished"' in line and ('"status": 429' in line or '"status": 503' in line):
                m = re.search(r'"total_ms": ([0-9.]+)', line)
                if m:
                    out.append(float(m.group(1)))
    return out


async def r15(url: str, pid: int, slots: int, queue: int, log_path: str) -> str:
    burst = 10 * (slots + queue)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=burst + 8)) as client:
        rss0, _ = _counts(pid)
        metrics0 = (await client.get("/metrics")).text

        async def one() -> tuple[int, float, str | None]:
            t0 = time.monotonic()
            r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 50,
                                                          "ignore_eos": True})
            return r.status_code, time.monotonic() - t0, r.headers.get("retry-after")

        results = await asyncio.gather(*(one() for _ in range(burst)))
        rss1, _ = _counts(pid)
        metrics1 = (await client.get("/metrics")).text
    refused = [(s, t, ra) for s, t, ra in results if s in (429, 503)]
    accepted = [t for s, t, _ in results if s == 200]

    def rejected(text: str) -> float:
        return sum(float(v) for v in re.findall(r"^laneserve_rejected_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))

    server_ms = _server_refusal_ms(log_path)
    return (f"R15 overload: burst {burst} on {slots} slots + queue {queue}: {len(accepted)} served, {len(refused)} "
            f"refused (all with Retry-After: {all(ra for *_, ra in refused)}), refusal p99 "
            f"{_pct(server_ms, 0.99):.2f} ms in the server ({_pct([t for _, t, _ in refused], 0.99) * 1e3:.0f} ms "
            f"seen by the one-process client sending all {burst} at once), served p99 {_pct(accepted, 0.99):.2f} s, "
            f"other statuses {sorted({s for s, *_ in results} - {200, 429, 503})}, rejected_total "
            f"+{rejected(metrics1) - rejected(metrics0):.0f}, RSS {rss0 / 1024:.0f}→{rss1 / 1024:.0f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("item", choices=("r4", "r5", "r9", "r10", "r15"))
    args = parser.parse_args()
    slots, queue = 4, 8
    spec = {"r5": "step_us=1000,slots=10", "r10": "step_us=20000,slots=4,load_ms=500"}.get(
        args.item, f"step_us=5000,slots={slots}")
    extra = {"r4": ("--request-deadline-s", "10"), "r5": ("--write-stall-timeout-s", "2"),
             "r10": ("--replicas", "2"), "r15": ("--max-queue", str(queue))}.get(args.item, ())
    ctx_size = "4096" if args.item == "r5" else "1024"  # r5: 3000 tokens per choice
    server = StartedServer(f"{MODEL}=synthetic:{spec}", ["--threads", "1", "--ctx-size", ctx_size, *extra]).start()
    try:
        if args.item == "r4":
            line = asyncio.run(r4(server.base_url, server.pid))
        elif args.item == "r5":
            line = r5(server.base_url)
        elif args.item == "r9":
            line = asyncio.run(r9(server.base_url, server.pid))
        elif args.item == "r10":
            line = r10(server.base_url)
        else:
            line = asyncio.run(r15(server.base_url, server.pid, slots, queue, server.log_path))
    finally:
        code = server.stop()
    print(f"{line}, server exit {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
