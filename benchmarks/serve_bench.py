"""Serving benchmark: TTFT, inter-token latency (p50/p99) and tokens/s at several concurrencies
against any OpenAI-compatible URL, plus gateway CPU µs per relayed token and HTTP TTFT minus
in-process TTFT when it starts laneserve itself.

    python benchmarks/serve_bench.py                      # starts laneserve (1 and 2 replicas)
    python benchmarks/serve_bench.py --url http://127.0.0.1:8080/v1 --model NAME   # any server

Definitions (reliability.md §3): TTFT = request sent → first SSE chunk with content; ITL = every
gap between consecutive content chunks; tok/s = completion tokens (server usage) / wall time of
the level. Gateway CPU = user+system time of the gateway process only (lanes are separate
processes) over the run, divided by relayed tokens. Prints detail lines to stderr and ONE
summary line to stdout.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

import httpx

# Run from a checkout (like relay_bench.py): the repository root holds gateway/ and lanes/.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


async def one_request(client: httpx.AsyncClient, url: str, model: str, max_tokens: int) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    t0 = time.perf_counter()
    first = None
    last = None
    gaps = []
    tokens = 0
    chunks = 0
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return {"error": response.status_code}
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if not chunk.get("choices"):
                continue
            if chunk["choices"][0].get("delta", {}).get("content"):
                now = time.perf_counter()
                chunks += 1
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
    return {"ttft_s": (first or time.perf_counter()) - t0, "gaps_s": gaps, "tokens": tokens or chunks}


async def run_level(url: str, model: str, concurrency: int, num_requests: int, max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        await one_request(client, url, model, 4)  # warm-up
        queue = list(range(num_requests))
        results = []

        async def worker():
            while queue:
                queue.pop()
                while True:
                    result = await one_request(client, url, model, max_tokens)
                    if result.get("error") == 429:  # closed loop: a busy server is retried, not counted
                        await asyncio.sleep(0.02)
                        continue
                    results.append(result)
                    break

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    ttfts = [r["ttft_s"] * 1e3 for r in ok]
    gaps = [g * 1e3 for r in ok for g in r["gaps_s"]]
    tokens = sum(r["tokens"] for r in ok)
    return {"concurrency": concurrency, "requests": len(ok), "errors": len(results) - len(ok), "tokens": tokens,
            "ttft_p50_ms": percentile(ttfts, 50), "ttft_p99_ms": percentile(ttfts, 99),
            "itl_p50_ms": percentile(gaps, 50), "itl_p99_ms": percentile(gaps, 99), "tok_s": tokens / wall_s}


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of this process only (the lanes are other processes), from
    schedstat in nanoseconds: /proc/PID/stat's clock ticks (10 ms) are too coarse here."""
    total_ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that just exited
    return total_ns / 1e9


_READER = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while c.recv(65536):
    pass
"""


async def _paced_writes(num_writes: int, gap_s: float) -> float:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(listener.getsockname()[1])])
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setblocking(False)
    transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, sock=conn)
    event = b"x" * 220  # about one framed SSE chunk
    busy_s = 0.0
    for _ in range(num_writes):
        await asyncio.sleep(gap_s)
        t0 = cpu_seconds(os.getpid())
        transport.write(event)
        busy_s += cpu_seconds(os.getpid()) - t0
    transport.close()
    await asyncio.sleep(0.05)  # let the loop actually close it, so the reader sees EOF
    reader.wait(10)
    listener.close()
    return busy_s * 1e6 / num_writes


def loopback_write_floor_us() -> float:
    """CPU of ONE paced ~220-byte loopback TCP write that wakes a sleeping reader — the floor of
    any per-token SSE relay on this machine (mostly kernel wake-up work, charged to the writer)."""
    try:
        import uvloop

        return uvloop.run(_paced_writes(200, 0.01))
    except ImportError:
        return asyncio.run(_paced_writes(200, 0.01))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_laneserve(model: str, replicas: int, threads: int, ctx_size: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--model", model, "--port", str(port),
                             "--replicas", str(replicas), "--threads", str(threads), "--ctx-size", str(ctx_size),
                             "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT}, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"laneserve exited with {proc.returncode}")
        try:
            if httpx.get(base + "/health/ready", timeout=2).status_code == 200:
                return proc, base + "/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("laneserve did not become ready")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def paired_ttft_ms(url: str, model: str, threads: int, ctx_size: int,
                   rounds: int) -> tuple[float, float, float] | None:
    """HTTP TTFT and in-process TTFT (lanes.Model: the runtime without HTTP or lanes) of the same
    chat prompt, alternated so both see the same machine load; (http p50, inproc p50, p50 of
    the per-round differences)."""
    try:
        from gateway.model_text import ModelText
        from lanes import Model, find_model_file
    except ImportError as exc:
        print(f"in-process TTFT unavailable: {exc}", file=sys.stderr)
        return None
    path = str(find_model_file(model))
    text = ModelText(path)
    m = Model(path, threads=threads, ctx_size=ctx_size)  # the same engine settings as the lane

    def in_process() -> float:
        t0 = time.perf_counter()  # like the server: template + tokenize + prefill + first token
        ids = text.encode_chat([{"role": "user", "content": PROMPT}])
        gen = m.generate(ids, max_tokens=2, temperature=0.0, ignore_eos=True)
        for delta in gen:
            if delta:
                break
        elapsed_ms = (time.perf_counter() - t0) * 1e3
        for _ in gen:
            pass
        return elapsed_ms

    # One client and one keep-alive connection for every HTTP round, as a real client holds
    # them (a fresh connection per request would add the TCP handshake to HTTP TTFT).
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(timeout=300)

    def over_http() -> float:
        return loop.run_until_complete(one_request(client, url, model, 2))["ttft_s"] * 1e3

    http_ms, local_ms = [], []
    try:
        for i in range(rounds + 1):
            if i % 2:  # alternate which path goes first
                h = over_http()
                local = in_process()
            else:
                local = in_process()
                h = over_http()
            if i:  # round 0 warms both paths up
                http_ms.append(h)
                local_ms.append(local)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    diffs = [h - l for h, l in zip(http_ms, local_ms)]
    return statistics.median(http_ms), statistics.median(local_ms), statistics.median(diffs)


def idle_cpu_rate(pid: int, seconds: float = 3.0) -> float:
    """The gateway's CPU use while idle (timers, supervision), in CPU-seconds per second."""
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0)


def cpu_per_token_us(url: str, model: str, pid: int, short: int, long: int, concurrency: int,
                     idle_rate: float) -> float:
    """Marginal gateway CPU per relayed token: the CPU-time slope between short and long
    generations, so per-request work (HTTP parsing, templating, tokenizing) cancels out, after
    removing the idle background (timers run for as long as a phase lasts, tokens or not)."""
    def measure(max_tokens: int) -> tuple[float, int]:
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        r = asyncio.run(run_level(url, model, concurrency, 2 * concurrency, max_tokens))
        busy_s = cpu_seconds(pid) - cpu0 - idle_rate * (time.perf_counter() - t0)
        return busy_s, r["tokens"]

    cpu_short, tokens_short = measure(short)
    cpu_long, tokens_long = measure(long)
    return (cpu_long - cpu_short) * 1e6 / max(1, tokens_long - tokens_short)


def detail(label: str, r: dict) -> str:
    return (f"{label} c={r['concurrency']}: ttft p50 {r['ttft_p50_ms']:.1f} / p99 {r['ttft_p99_ms']:.1f} ms, "
            f"itl p50 {r['itl_p50_ms']:.2f} / p99 {r['itl_p99_ms']:.2f} ms, {r['tok_s']:.1f} tok/s "
            f"({r['requests']} req, {r['errors']} errors)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="OpenAI-compatible base URL (…/v1); default: start laneserve")
    parser.add_argument("--model", default="smollm2",
                        help="model name; when starting laneserve also NAME=PATH_OR_ALIAS or NAME=synthetic:…")
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--replicas", default="1,2", help="replica counts when starting laneserve")
    parser.add_argument("--threads", type=int, default=1, help="threads per lane when starting laneserve")
    parser.add_argument("--ctx-size", type=int, default=4096, help="context per lane when starting laneserve")
    parser.add_argument("--requests-per-level", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cpu-tokens", type=int, default=1000, help="extra tokens for the CPU-slope phase")
    parser.add_argument("--gateway-pid", type=int, help="with --url: the server pid whose CPU time to measure")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    model_arg = args.model
    args.model = model_arg.split("=", 1)[0]  # the name requests use
    runs = [(None, args.url)] if args.url else [(int(r), None) for r in args.replicas.split(",")]
    summary = []
    cpu_us_per_token = {}
    ttft_pair = None
    for position, (replicas, url) in enumerate(runs):
        proc = None
        if url is None:
            proc, url = start_laneserve(model_arg, replicas, args.threads, args.ctx_size)
        pid = proc.pid if proc else args.gateway_pid
        try:
            label = f"r={replicas}" if replicas else "url"
            for c in levels:
                r = asyncio.run(run_level(url, args.model, c, max(args.requests_per_level, c), args.max_tokens))
                print(detail(label, r), file=sys.stderr, flush=True)
                summary.append(f"{label}/c{c}: ttft {r['ttft_p50_ms']:.1f}/{r['ttft_p99_ms']:.1f}ms "
                               f"itl {r['itl_p50_ms']:.2f}/{r['itl_p99_ms']:.2f}ms {r['tok_s']:.0f}tok/s")
            if pid and position == len(runs) - 1:  # CPU on the last (largest) configuration
                # One stream (every token its own wake-up and write) and every lane busy; never
                # more clients than lanes here, so no 429 retries are counted as relay work.
                idle_rate = idle_cpu_rate(pid)
                for c in sorted({1, replicas or max(levels)}):
                    cpu_us_per_token[c] = cpu_per_token_us(url, args.model, pid, 8, 8 + args.cpu_tokens, c,
                                                           idle_rate)
            if proc and position == 0 and "synthetic:" not in model_arg:
                ttft_pair = paired_ttft_ms(url, args.model, args.threads, args.ctx_size, 10)
        finally:
            if proc:
                stop(proc)
    extra = []
    if cpu_us_per_token:
        extra.append("gateway cpu " + " ".join(f"c{c}:{us:.1f}" for c, us in sorted(cpu_us_per_token.items()))
                     + f"us/token (floor: one paced loopback write {loopback_write_floor_us():.1f}us)")
    if ttft_pair is not None:
        http_p50, local_p50, diff_p50 = ttft_pair
        extra.append(f"http-inproc ttft p50 {diff_p50:+.2f}ms (http {http_p50:.1f}, inproc {local_p50:.1f})")
    print("serve_bench " + args.model + " | " + " | ".join(summary + extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
