"""What HAProxy adds: TTFT and inter-token latency through the shipped deploy/haproxy/haproxy.cfg
versus straight to laneserve, at concurrency 1 and 8, alternating request by request in one run.

One laneserve instance (SmolLM2) and one HAProxy whose two `server` lines both point at it, so
both paths reach the same lane and differ only by the balancer hop. Streamed completions with a
prompt that opens with its own number (little prefix-cache sharing), `--output-tokens` tokens
each (`ignore_eos`), temperature 0, through `gateway.cli.bench.client` (per worker one kept-alive
connection per path, the worker alternating paths request by request, so both paths meet the same
lane batches and the same machine load; TTFT = request written → first text event; ITL = (E2E − TTFT) / (tokens − 1) per
request). Also the round trip of `GET /health/live` (no lane work) on each path: the hop's own
cost, without generation noise. At concurrency 1 the worker alternates direct, haproxy, direct, …: the median of each pair's
difference follows the balancer's cost through the machine's load drift better than the
difference of two medians. Prints one summary line; target: +0.5 ms p50 TTFT or less.

    python benchmarks/lb_bench.py [--rounds 4] [--requests 12] [--threads 1]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import httpx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.launcher import free_port  # noqa: E402
from gateway.cli.bench.server import ProcessServer, StartedServer  # noqa: E402
from gateway.cli.bench.client import Conn, guarded_request  # noqa: E402
from gateway.cli.bench.metrics import percentile  # noqa: E402

HAPROXY_CFG = os.path.join(REPO_ROOT, "deploy", "haproxy", "haproxy.cfg")
LEVELS = (1, 8)


def start_laneserve(threads: int) -> StartedServer:
    return StartedServer("smollm2", ["--threads", str(threads), "--ctx-size", "1024", "--parallel", str(max(LEVELS)),
                                     "--log-level", "warning"], startup_timeout_s=120).start()


def start_haproxy(backend: str) -> ProcessServer:
    binary = next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.path.exists(p)), "haproxy")
    port, stats_port = free_port(), free_port()
    env = {**os.environ, "LB_BIND": f"127.0.0.1:{port}", "LB_STATS_BIND": f"127.0.0.1:{stats_port}",
           "LB_SERVER1": backend, "LB_SERVER2": backend}
    env.pop("LB_SESSION_AFFINITY", None)
    return ProcessServer("haproxy", [binary, "-db", "-f", HAPROXY_CFG], port, "/health/ready", env=env,
                         startup_timeout_s=120).start()


async def run_level(paths: dict[str, str], concurrency: int, count: int, first_index: int,
                    output_tokens: int) -> list[tuple[str, dict]]:
    """`concurrency` workers, each with a kept-alive connection per path, alternating paths request
    by request (half the workers start on each), so both paths share the same lane batches and the
    same moment's machine load; `count` requests per path."""
    names = list(paths)
    indices = iter(range(first_index, first_index + count * len(names)))
    records: list[tuple[str, dict]] = []

    async def worker(w: int) -> None:
        conns = {name: Conn(base) for name, base in paths.items()}
        turn = w
        for index in indices:
            name = names[turn % len(names)]
            turn += 1
            body = {"model": "smollm2", "prompt": f"{index}. Write a short story about a lighthouse keeper.",
                    "max_tokens": output_tokens, "ignore_eos": True, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            records.append((name, await guarded_request(conns[name], "/v1/completions", body, 120.0)))
        for conn in conns.values():
            conn.close()

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return records


def health_rtts_ms(base: str, count: int) -> list[float]:
    out = []
    with httpx.Client(base_url=base, timeout=5) as client:
        client.get("/health/live")
        for _ in range(count):
            t0 = time.perf_counter()
            client.get("/health/live")
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=12, help="requests per path, level and round")
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="laneserve compute threads (the rest: HAProxy, client)")
    args = parser.parse_args()
    server = start_laneserve(args.threads)
    try:
        balancer = start_haproxy(f"127.0.0.1:{server.port}")
    except BaseException:
        server.stop()
        raise
    paths = {"direct": server.base_url, "haproxy": balancer.base_url}
    ttft = {(p, c): [] for p in paths for c in LEVELS}
    paired_ms: list[float] = []  # c=1: haproxy TTFT − the direct TTFT just before or after it
    itl = {(p, c): [] for p in paths for c in LEVELS}
    rtt = {p: [] for p in paths}
    errors = 0
    index = 0
    try:
        asyncio.run(run_level(paths, 2, 4, 10_000_000, args.output_tokens))  # warm-up: connections, caches
        for r in range(args.rounds):
            for concurrency in LEVELS:
                records = asyncio.run(run_level(paths, concurrency, args.requests, index, args.output_tokens))
                index += args.requests * len(paths)
                if concurrency == 1:  # one worker: records alternate direct, haproxy, direct, …
                    for (a, ra), (b, rb) in zip(records[0::2], records[1::2]):
                        if "error" not in ra and "error" not in rb:
                            paired_ms.append((rb["ttft_s"] - ra["ttft_s"]) * 1e3 * (1 if b == "haproxy" else -1))
                for name, rec in records:
                    if "error" in rec:
                        errors += 1
                        continue
                    ttft[name, concurrency].append(rec["ttft_s"] * 1e3)
                    if rec["itl_s"] is not None:
                        itl[name, concurrency].append(rec["itl_s"] * 1e3)
            order = list(paths) if r % 2 == 0 else list(reversed(paths))
            for name in order:
                rtt[name] += health_rtts_ms(paths[name], 50)
        load = os.getloadavg()[0]
    finally:
        balancer.stop()
        server.stop()

    def p(values, q):
        return percentile(values, q)

    parts = []
    for c in LEVELS:
        d_t, h_t = ttft["direct", c], ttft["haproxy", c]
        d_i, h_i = itl["direct", c], itl["haproxy", c]
        parts.append(
            f"c={c}: TTFT p50 {p(d_t, 50):.2f}→{p(h_t, 50):.2f} ms ({p(h_t, 50) - p(d_t, 50):+.2f}), "
            f"p99 {p(d_t, 99):.2f}→{p(h_t, 99):.2f} ms; ITL p50 {p(d_i, 50):.2f}→{p(h_i, 50):.2f} ms "
            f"({p(h_i, 50) / p(d_i, 50):.3f}x), p99 {p(d_i, 99):.2f}→{p(h_i, 99):.2f} ms")
    added_p50 = p(ttft["haproxy", 1], 50) - p(ttft["direct", 1], 50)
    paired = p(paired_ms, 50)
    hop = p(rtt["haproxy"], 50) - p(rtt["direct"], 50)
    n = len(ttft["direct", 1])
    print(f"lb_bench (direct→haproxy, {n} requests per path and level, {args.rounds} rounds, "
          f"{args.output_tokens} tokens, load avg {load:.1f}): " + "; ".join(parts)
          + f"; c=1 paired TTFT difference p50 {paired:+.2f} ms ({len(paired_ms)} pairs)"
          + f"; /health/live RTT p50 {p(rtt['direct'], 50):.3f}→{p(rtt['haproxy'], 50):.3f} ms ({hop:+.3f}); "
          f"errors {errors}; target +0.5 ms p50 TTFT at c=1: {'met' if paired <= 0.5 else 'NOT met'} by the "
          f"paired difference ({paired:+.2f} ms; difference of the medians {added_p50:+.2f} ms)")
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
