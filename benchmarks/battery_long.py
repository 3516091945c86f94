"""Long forms of battery items R4 (slowloris), R9 (cancel storm) and R15 (overload burst); R24 is
benchmarks/soak.py. Each starts its own server on synthetic lanes (the gateway is what these
measure; a fixed 5 ms step keeps the load reproducible) and prints ONE line.

    python benchmarks/battery_long.py r4      # 500 tricklers for 30 s, --request-deadline-s 10
    python benchmarks/battery_long.py r9      # 1000 streams, half abandoned after 0.5 s
    python benchmarks/battery_long.py r15     # burst of 10 × (slots + queue)

The CI short forms are in tests/reliability/ and tests/gateway/.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from schemathesis_run import start_server, stop_server  # noqa: E402

MODEL = "m"


def _counts(pid: int) -> tuple[int, int]:
    """(RSS kB, open fds)."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


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
    parser.add_argument("item", choices=("r4", "r9", "r15"))
    args = parser.parse_args()
    slots, queue = 4, 8
    extra = {"r4": ("--request-deadline-s", "10"), "r9": (), "r15": ("--max-queue", str(queue))}[args.item]
    with tempfile.TemporaryDirectory(prefix="laneserve-battery-") as workdir:
        proc, url, log_path = start_server(workdir, "--model", f"{MODEL}=synthetic:step_us=5000,slots={slots}", *extra,
                                           ctx_size=1024)
        try:
            if args.item == "r4":
                line = asyncio.run(r4(url, proc.pid))
            elif args.item == "r9":
                line = asyncio.run(r9(url, proc.pid))
            else:
                line = asyncio.run(r15(url, proc.pid, slots, queue, log_path))
        finally:
            code = stop_server(proc)
        print(f"{line}, server exit {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
