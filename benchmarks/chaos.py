"""Chaos at 32 in flight: every protocol and feature at once, under faults, for MINUTES.

    python benchmarks/chaos.py 30          # the README's run
    python benchmarks/chaos.py 2           # a quick look

Starts laneserve (SmolLM2, 2 replicas, 1 thread each, 8 slots each, a 48-request queue) and runs
32 closed-loop clients, each sending requests of every kind in benchmarks/chaos_kinds.py (OpenAI
chat streams seeded and sampled, n = 2, completions with logprobs, tools, JSON-schema output,
embeddings, Ollama chat and generate, Anthropic Messages and Responses streams). Of the streams,
10% are abandoned by the client at a random point and 5% are cancelled by id
(DELETE /v1/requests/{id}) after a random delay. Every minute: a lane SIGKILL at 0:15, a burst of
96 extra requests at 0:30 (beyond slots + queue, so some get 429), a lane SIGSTOP (a hang the
heartbeat must catch) at 0:45; after each fault, every lane must be ready again within 60 s.

Checks: every answer that was read to its end is exactly one well-formed terminal outcome
(chaos_kinds.check: the protocol's end, its error shape, or 429 + Retry-After); up to 40 completed
seeded chat streams are replayed alone at the end and must give the same text (batch, fault and
cache independence); the gateway's fds, threads and /dev/shm names are back to their warm-up
counts when idle at the end, and its RSS slope after warm-up stays under 1 MB/min.

Prints ONE line: requests by outcome, faults injected and recovered, violations, token
mismatches, leaks.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import signal
import sys
import time
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos_kinds import KINDS, Violation, check, make  # noqa: E402
from soak import _lane_pids, _slope_mb_per_min, _wait_all_ready  # noqa: E402
from gateway.cli.bench.proc import proc_counts  # noqa: E402
from gateway.cli.bench.server import StartedServer  # noqa: E402
from lanes.names import list_names  # noqa: E402

CLIENTS = 32
DISCONNECT_FRACTION = 0.10
CANCEL_FRACTION = 0.05
BURST_REQUESTS = 96
MAX_REPLAYS = 40
RECOVERY_TIMEOUT_S = 60.0
MAX_RSS_SLOPE_MB_PER_MIN = 1.0
SERVE_ARGS = ["--replicas", "2", "--threads", "1", "--parallel", "8", "--ctx-size", "512", "--max-queue", "48",
              "--queue-timeout-s", "20", "--heartbeat-timeout-s", "5"]


class Tally:
    def __init__(self) -> None:
        self.outcomes: collections.Counter = collections.Counter()
        self.violations: list[str] = []
        self.replayable: list[tuple[dict, str]] = []  # (body, text) of completed seeded chat streams
        self.examples: dict[str, bytes] = {}  # outcome → the end of its first answer, for the log

    def add(self, outcome: str) -> None:
        self.outcomes[outcome] += 1


async def _read(client: httpx.AsyncClient, path: str, body: dict, stream: bool, rng: random.Random,
                headers: dict, abandon: bool) -> tuple[int, dict, bytes] | None:
    """The whole answer, or None when the client left on purpose."""
    async with client.stream("POST", path, json=body, headers=headers) as r:
        cut_after = rng.randrange(1, 400) if abandon and stream else None
        parts, size = [], 0
        async for part in r.aiter_raw():
            parts.append(part)
            size += len(part)
            if cut_after is not None and size >= cut_after:
                return None  # leaving the block closes the connection: the server must cancel
        return r.status_code, dict(r.headers), b"".join(parts)


async def _cancel_later(client: httpx.AsyncClient, request_id: str, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    r = await client.delete(f"/v1/requests/{request_id}")
    if r.status_code not in (200, 404):
        raise Violation(f"DELETE /v1/requests: {r.status_code} {r.content[:120]!r}")


async def one(client: httpx.AsyncClient, kind: str, rng: random.Random, tally: Tally, model: str,
              chaos: bool = True) -> None:
    path, body, stream = make(kind, model, rng)
    abandon = chaos and stream and rng.random() < DISCONNECT_FRACTION
    cancel = chaos and not abandon and rng.random() < CANCEL_FRACTION
    request_id = uuid.uuid4().hex
    canceller = (asyncio.create_task(_cancel_later(client, request_id, rng.uniform(0.05, 1.0)))
                 if cancel else None)
    try:
        answer = await _read(client, path, body, stream, rng, {"X-Request-ID": request_id}, abandon)
        if answer is None:
            tally.add("abandoned")
            return
        outcome, text = check(path, stream, *answer)
        tally.add(("cancel→" if cancel else "") + outcome)
        tally.examples.setdefault(outcome, answer[2][-200:])
        if outcome == "refused" and chaos:
            await asyncio.sleep(rng.uniform(0.2, 1.0))  # a client backs off (Retry-After is whole seconds)
        if kind == "chat_stream" and outcome == "ok" and not cancel:
            tally.replayable.append((body, text))
    except Violation as exc:
        tally.violations.append(f"{kind}: {exc}")
    except httpx.HTTPError as exc:  # a broken connection or framing is a violation too
        tally.violations.append(f"{kind}: {type(exc).__name__}: {exc}"[:200])
    finally:
        if canceller is not None:
            try:
                await canceller
            except Violation as exc:
                tally.violations.append(str(exc))
            except httpx.HTTPError:
                pass


async def _faults(client: httpx.AsyncClient, tally: Tally, model: str, start: float, duration_s: float,
                  log: list) -> None:
    """Every minute: SIGKILL at :15, a burst at :30, SIGSTOP at :45; each must be recovered."""
    rng = random.Random(7)
    schedule = [(m * 60 + s, what) for m in range(int(duration_s // 60) + 1)
                for s, what in ((15, "kill"), (30, "burst"), (45, "hang"))]
    for at_s, what in schedule:
        if at_s >= duration_s - 5:
            break
        await asyncio.sleep(max(0.0, start + at_s - time.monotonic()))
        if what == "burst":
            await asyncio.gather(*(one(client, rng.choice(("chat_n", "ollama_generate", "structured")), rng,
                                       tally, model, chaos=False) for _ in range(BURST_REQUESTS)))
            log.append(("burst", True, 0.0))
            continue
        pids = await _lane_pids(client)
        victim = pids[rng.randrange(len(pids))]
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL if what == "kill" else signal.SIGSTOP)
        log.append((what, await _replaced(client, victim, t0), time.monotonic() - t0))
        if what == "hang":
            try:
                os.kill(victim, signal.SIGKILL)  # the gateway should have; never leave a stopped process
            except ProcessLookupError:
                pass


async def _replaced(client: httpx.AsyncClient, victim: int, t0: float) -> bool:
    """True once the victim lane is gone from /health/ready and every lane is ready again."""
    while time.monotonic() - t0 < RECOVERY_TIMEOUT_S:
        await asyncio.sleep(0.2)
        try:
            body = (await client.get("/health/ready")).json()
        except httpx.HTTPError:
            continue
        pids = [lane.get("pid") for m in body["models"].values() for lane in m["lanes"]]
        if body["status"] == "ready" and victim not in pids:
            return True
    return False


async def _replay(client: httpx.AsyncClient, tally: Tally) -> tuple[int, int]:
    """(mismatches, replayed): seeded streams sent again, alone, must give the same text."""
    sample = random.Random(3).sample(tally.replayable, min(MAX_REPLAYS, len(tally.replayable)))
    mismatches = 0
    for body, text in sample:
        answer = await _read(client, "/v1/chat/completions", body, True, random.Random(), {}, False)
        outcome, again = check("/v1/chat/completions", True, *answer)
        if outcome != "ok" or again != text:
            mismatches += 1
            print(f"mismatch: seed {body['seed']}: {text!r} vs alone {again!r}")
    return mismatches, len(sample)


async def chaos(url: str, server_pid: int, minutes: float, model: str = "smollm2") -> dict:
    """Run it; its figures and the summary `line`."""
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
    timeout = httpx.Timeout(120.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        warm = Tally()
        await asyncio.gather(*(one(client, KINDS[i % len(KINDS)], random.Random(i), warm, model, chaos=False)
                               for i in range(2 * len(KINDS))))
        if warm.violations:
            raise SystemExit(f"warm-up answers are not well-formed: {warm.violations[:3]}")
    await asyncio.sleep(2.0)
    _, fds0, threads0 = proc_counts(server_pid)
    shm0 = len(list_names(pid=server_pid))
    tally, faults, samples = Tally(), [], []
    duration_s = minutes * 60.0
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        start = time.monotonic()

        async def client_loop(i: int) -> None:
            rng = random.Random(1000 + i)
            while time.monotonic() - start < duration_s:
                await one(client, rng.choice(KINDS), rng, tally, model)

        async def sampler() -> None:
            while time.monotonic() - start < duration_s:
                samples.append((time.monotonic() - start, proc_counts(server_pid)[0]))
                await asyncio.sleep(5.0)

        await asyncio.gather(*(client_loop(i) for i in range(CLIENTS)), sampler(),
                             _faults(client, tally, model, start, duration_s, faults))
        await _wait_all_ready(client, RECOVERY_TIMEOUT_S)
        mismatches, replayed = await _replay(client, tally)
    await asyncio.sleep(3.0)  # connections closed, slots freed
    rss_kb, fds, threads = proc_counts(server_pid)
    shm = len(list_names(pid=server_pid))
    slope = _slope_mb_per_min([(t, kb) for t, kb in samples if t >= 0.2 * duration_s])
    leaks = (fds > fds0) + (threads > threads0) + (shm != shm0) + (slope > MAX_RSS_SLOPE_MB_PER_MIN)
    for v in tally.violations[:10]:
        print("violation:", v)
    for f in faults:
        print("fault:", *f)
    for outcome, example in sorted(tally.examples.items()):
        print(f"{outcome}: ...{example!r}")
    injected = [f for f in faults if f[0] != "burst"]
    recovered = sum(1 for f in injected if f[1])
    worst_s = max((f[2] for f in injected), default=0.0)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(tally.outcomes.items()))
    line = (f"chaos {minutes:g} min, {CLIENTS} clients: {sum(tally.outcomes.values())} requests ({outcomes}); "
            f"faults {sum(f[0] == 'kill' for f in faults)} SIGKILL + {sum(f[0] == 'hang' for f in faults)} SIGSTOP "
            f"+ {sum(f[0] == 'burst' for f in faults)} bursts, recovered {recovered}/{len(injected)} "
            f"(slowest {worst_s:.1f} s); terminal-outcome violations {len(tally.violations)}; token mismatches "
            f"{mismatches}/{replayed} replayed; leaks {leaks} (fds {fds0}→{fds}, threads {threads0}→{threads}, "
            f"/dev/shm {shm0}→{shm}, RSS slope {slope:+.2f} MB/min, gateway {rss_kb / 1024:.0f} MB)")
    return {"line": line, "outcomes": dict(tally.outcomes), "violations": tally.violations, "faults": faults,
            "recovered": recovered, "injected": len(injected), "mismatches": mismatches, "replayed": replayed,
            "fds": (fds0, fds), "threads": (threads0, threads), "shm": (shm0, shm), "rss_slope_mb_per_min": slope}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("minutes", type=float)
    args = parser.parse_args()
    server = StartedServer("smollm2", SERVE_ARGS).start()
    try:
        line = asyncio.run(chaos(server.base_url, server.pid, args.minutes))["line"]
    except BaseException:
        print("server log (without per-request lines):",
              *[ln for ln in server.log_text().splitlines() if "request_finished" not in ln][-30:], sep="\n")
        raise
    finally:
        code = server.stop()
    print(f"{line}; server exit {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
