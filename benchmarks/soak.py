"""Soak (R24): hours-long traffic in miniature — mixed load at ~70% of capacity with induced faults.

    python benchmarks/soak.py 5                 # 5 minutes (the CI-sized run)
    python benchmarks/soak.py 30 --kill-every-s 300

Starts laneserve (SmolLM2, 2 replicas, 1 thread each, loopback) and:
1. measures capacity: closed loop at --concurrency for 15 s → completed requests/s;
2. sends an open-loop Poisson stream at 70% of that rate for MINUTES, each request one of
   OpenAI chat (SSE), OpenAI completion (JSON), Ollama chat (NDJSON), Ollama generate (JSON),
   16 tokens each; 5% of them are streams the client abandons after 0.1–0.5 s;
3. SIGKILLs one lane (alternating) every --kill-every-s.

Errors are any non-200 answer, an error event or line in a stream, a stream without its end, a
broken connection or a timeout. Induced: a failure of a request that was in flight when a lane was
killed or started within the recovery window after it (kill → every lane ready again + 2 s);
the rest are counted against the server. Gateway RSS is sampled every 5 s; the slope is a least-
squares fit over the samples after the first 20% of the run (warm-up). fds and threads are the
gateway process's (/proc), /dev/shm counts the prefixed names the gateway created (lanes.names);
each is taken idle after the capacity probe (the warm-up) and idle at the end.

Prints ONE line: requests, error rate excluding induced faults, induced, cancels, kills and
restarts, RSS slope, and start→end fd / thread / /dev/shm counts.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.cli.bench.proc import proc_counts  # noqa: E402
from gateway.cli.bench.server import StartedServer  # noqa: E402
from lanes.names import list_names  # noqa: E402

MAX_TOKENS = 16
CANCEL_FRACTION = 0.05
KINDS = ("openai_chat_stream", "openai_completion", "ollama_chat_stream", "ollama_generate")
_WORDS = "river stone lamp garden winter paper violin harbor lantern meadow copper signal".split()


def _prompt(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(12))


def _request(kind: str, rng: random.Random, model: str) -> tuple[str, dict, bool]:
    text = _prompt(rng)
    if kind == "openai_chat_stream":
        return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": text}],
                                        "max_tokens": MAX_TOKENS, "stream": True}, True
    if kind == "openai_completion":
        return "/v1/completions", {"model": model, "prompt": text, "max_tokens": MAX_TOKENS}, False
    if kind == "ollama_chat_stream":
        return "/api/chat", {"model": model, "messages": [{"role": "user", "content": text}],
                             "options": {"num_predict": MAX_TOKENS}}, True
    return "/api/generate", {"model": model, "prompt": text, "stream": False,
                             "options": {"num_predict": MAX_TOKENS}}, False


class Tally:
    def __init__(self) -> None:
        self.ok = self.cancelled = 0
        self.failures: list[tuple[float, float, str]] = []  # (start, end, what)


async def _one(client: httpx.AsyncClient, kind: str, rng: random.Random, tally: Tally, cancel: bool,
               model: str) -> None:
    path, body, stream = _request(kind, rng, model)
    t0 = time.monotonic()
    try:
        if not stream:
            r = await client.post(path, json=body)
            if r.status_code != 200:
                raise RuntimeError(f"status {r.status_code}")
            tally.ok += 1
            return
        async with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"status {r.status_code}")
            deadline = t0 + rng.uniform(0.1, 0.5) if cancel else None
            ended = False
            async for line in r.aiter_lines():
                if deadline is not None and time.monotonic() > deadline:
                    tally.cancelled += 1
                    return  # leaving the block closes the connection: the server must cancel
                if '"error"' in line:
                    raise RuntimeError("error event")
                if line == "data: [DONE]" or '"done":true' in line.replace(" ", ""):
                    ended = True
            if cancel and not ended:
                tally.cancelled += 1
                return
            if not ended:
                raise RuntimeError("stream ended without its end marker")
            if cancel:
                tally.cancelled += 1  # finished before the client gave up: still a cancel attempt
                return
            tally.ok += 1
    except Exception as exc:  # noqa: BLE001  (every failure is counted, by kind)
        tally.failures.append((t0, time.monotonic(), f"{kind}: {type(exc).__name__}: {exc}"[:160]))


async def _ready(client: httpx.AsyncClient) -> dict:
    return (await client.get("/health/ready")).json()


async def _lane_pids(client: httpx.AsyncClient) -> list[int]:
    body = await _ready(client)
    return [lane["pid"] for m in body["models"].values() for lane in m["lanes"] if lane.get("pid")]


async def _restarts(client: httpx.AsyncClient) -> int:
    body = await _ready(client)
    return sum(lane["restarts"] for m in body["models"].values() for lane in m["lanes"])


async def _wait_all_ready(client: httpx.AsyncClient, timeout_s: float = 60.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            body = await _ready(client)
            if body["status"] == "ready":
                return time.monotonic()
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("lanes did not come back within 60 s")


async def _capacity(client: httpx.AsyncClient, concurrency: int, seconds: float, model: str) -> float:
    rng = random.Random(1)
    tally = Tally()
    stop_at = time.monotonic() + seconds

    async def worker(i: int) -> None:
        while time.monotonic() < stop_at:
            await _one(client, KINDS[i % len(KINDS)], rng, tally, cancel=False, model=model)

    t0 = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return tally.ok / (time.monotonic() - t0)


async def soak(url: str, server_pid: int, minutes: float, kill_every_s: float, concurrency: int,
               model: str = "smollm2", probe_s: float = 15.0, settle_s: float = 3.0) -> dict:
    """Run the soak; returns its figures and the summary `line`."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as client:
        capacity = await _capacity(client, concurrency, probe_s, model)  # doubles as the warm-up for the counts
        await asyncio.sleep(settle_s)  # probe connections closed, slots freed
        _, fds0, threads0 = proc_counts(server_pid)
        baseline = (fds0, threads0, len(list_names(pid=server_pid)))
        rate = 0.7 * capacity
        duration_s = minutes * 60.0
        warmup_s = 0.2 * duration_s
        rng = random.Random(42)
        tally = Tally()
        kills: list[tuple[float, float]] = []  # (kill time, all ready again)
        samples: list[tuple[float, int]] = []
        start = time.monotonic()
        tasks: set[asyncio.Task] = set()

        async def killer() -> None:
            index = 0
            while time.monotonic() - start + kill_every_s < duration_s:
                await asyncio.sleep(kill_every_s)
                pids = await _lane_pids(client)
                if not pids:
                    continue
                t_kill = time.monotonic()
                os.kill(pids[index % len(pids)], signal.SIGKILL)
                index += 1
                await asyncio.sleep(0.5)
                kills.append((t_kill, await _wait_all_ready(client)))

        async def sampler() -> None:
            while time.monotonic() - start < duration_s:
                samples.append((time.monotonic() - start, proc_counts(server_pid)[0]))
                await asyncio.sleep(5.0)

        background = [asyncio.create_task(killer()), asyncio.create_task(sampler())]
        i = 0
        while time.monotonic() - start < duration_s:
            await asyncio.sleep(rng.expovariate(rate))
            cancel = rng.random() < CANCEL_FRACTION
            kind = KINDS[i % len(KINDS)] if not cancel else rng.choice((KINDS[0], KINDS[2]))
            i += 1
            task = asyncio.create_task(_one(client, kind, rng, tally, cancel, model))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        for task in background:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*background, return_exceptions=True)
        await _wait_all_ready(client)
        await asyncio.sleep(settle_s)  # connections closed, slots freed
        restarts = await _restarts(client)
    rss, fds, threads = proc_counts(server_pid)
    shm = len(list_names(pid=server_pid))

    def induced(f: tuple[float, float, str]) -> bool:
        return any(f[0] <= back + 2.0 and f[1] >= kill for kill, back in kills)

    induced_n = sum(1 for f in tally.failures if induced(f))
    other = [f for f in tally.failures if not induced(f)]
    total = tally.ok + tally.cancelled + len(tally.failures)
    counted = total - induced_n - tally.cancelled
    rate_pct = 100.0 * len(other) / max(counted, 1)
    after = [(t, kb) for t, kb in samples if t >= warmup_s]
    slope = _slope_mb_per_min(after)
    for f in other[:10]:
        print("error:", f[2])
    base = baseline
    line = (f"soak {minutes:g} min: {total} requests at {rate:.1f}/s (70% of {capacity:.1f}/s), "
            f"errors {len(other)} ({rate_pct:.3f}% excluding induced), induced {induced_n}, cancels {tally.cancelled}, "
            f"lane kills {len(kills)}, restarts {restarts}, recovered {len(kills)}/{len(kills)}, "
            f"RSS slope {slope:+.2f} MB/min after warm-up (gateway {rss / 1024:.0f} MB), "
            f"fds {base[0]}→{fds}, threads {base[1]}→{threads}, /dev/shm {base[2]}→{shm}")
    return {"line": line, "total": total, "errors": len(other), "error_rate_pct": rate_pct, "induced": induced_n,
            "kills": len(kills), "restarts": restarts, "rss_slope_mb_per_min": slope, "fds": (base[0], fds),
            "threads": (base[1], threads), "shm": (base[2], shm), "error_samples": [f[2] for f in other[:10]]}


def _slope_mb_per_min(points: list[tuple[float, int]]) -> float:
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    num = sum((t - mt) * (v - mv) for t, v in points)
    den = sum((t - mt) ** 2 for t, _ in points) or 1.0
    return num / den * 60.0 / 1024.0  # kB/s → MB/min


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("minutes", type=float)
    parser.add_argument("--kill-every-s", type=float, default=120.0, help="SIGKILL a lane this often")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop clients for the capacity probe")
    args = parser.parse_args()
    server = StartedServer("smollm2", ["--replicas", "2", "--threads", "1", "--ctx-size", "256"]).start()
    try:
        line = asyncio.run(soak(server.base_url, server.pid, args.minutes, args.kill_every_s, args.concurrency))["line"]
    except BaseException:
        print("server log (without per-request lines):",
              *[ln for ln in server.log_text().splitlines() if "request_finished" not in ln][-30:], sep="\n")
        raise
    finally:
        code = server.stop()
    print(f"{line}, server exit {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
