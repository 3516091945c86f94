"""Serving benchmark: TTFT, inter-token latency (p50/p99) and tokens/s at several concurrencies
against any OpenAI-compatible URL, plus gateway CPU µs per relayed token and HTTP TTFT minus
in-process TTFT when it starts laneserve itself.

    python benchmarks/serve_bench.py                      # starts laneserve (1 and 2 replicas)
    python benchmarks/serve_bench.py --url http://127.0.0.1:8080/v1 --model NAME   # any server

Definitions (as vLLM bench and AIPerf use them): TTFT = request sent → first SSE chunk with content; ITL = every
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
import select
import socket
import statistics
import subprocess
import sys
import time

import httpx

# Run from a checkout (like relay_bench.py): the repository root holds gateway/ and lanes/.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.server import StartedServer  # noqa: E402

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

_RINGER = """
import os, sys, time
fd, gap_s, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    time.sleep(gap_s)
    os.eventfd_write(fd, 1)
"""


def bare_relay_floor_us(gap_s: float, num_wakes: int = 300) -> float:
    """CPU per iteration of a minimal Python relay: sleep in epoll until another process rings
    an eventfd (every `gap_s`, the pace tokens arrive at), then send one ~220-byte event over
    loopback TCP to a reading process. On a VM most of it is the wake-up itself (an idle vCPU
    costs tens of µs to wake), which no relay that sleeps between tokens avoids."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(listener.getsockname()[1])])
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    bell = os.eventfd(0)
    ringer = subprocess.Popen([sys.executable, "-c", _RINGER, str(bell), str(gap_s), str(num_wakes)],
                              pass_fds=(bell,))
    poller = select.epoll()
    poller.register(bell, select.EPOLLIN)
    event = b"x" * 220
    rung = iterations = 0
    try:
        start_ns = time.thread_time_ns()
        while rung < num_wakes:
            poller.poll()
            rung += os.eventfd_read(bell)  # rings that coalesced count once: one wake, one send
            conn.send(event)
            iterations += 1
        busy_ns = time.thread_time_ns() - start_ns
    finally:
        ringer.wait(10)
        poller.close()
        os.close(bell)
        conn.close()
        reader.wait(10)
        listener.close()
    return busy_ns / 1e3 / iterations


def start_laneserve(model: str, replicas: int, threads: int, ctx_size: int) -> StartedServer:
    return StartedServer(model, ["--replicas", str(replicas), "--threads", str(threads), "--ctx-size", str(ctx_size),
                                 "--log-level", "warning"], startup_timeout_s=180).start()


class RawHttpClient:
    """The leanest HTTP/1.1 client: one kept-alive socket, a request body serialised before the
    clock starts, chunked SSE read with a few byte searches. Its TTFT is the server's latency
    rather than a client library's (httpx adds about 2 ms of its own here)."""

    def __init__(self, base_url: str) -> None:
        hostport, _, prefix = base_url.removeprefix("http://").partition("/")
        host, _, port = hostport.partition(":")
        self.prefix = "/" + prefix
        self.sock = socket.create_connection((host, int(port or 80)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self.sock.close()

    def ttft_ms(self, path: str, body: dict) -> float:
        payload = json.dumps(body).encode()
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        t0 = time.perf_counter()
        self.sock.sendall(request)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self._recv()
        head, buf = buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
        body_bytes, first = b"", None
        while True:  # chunks until the terminating one, so the connection can be reused
            while b"\r\n" not in buf:
                buf += self._recv()
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(buf) < size + 2:
                buf += self._recv()
            if size == 0:
                if first is None:
                    raise RuntimeError("the stream ended without a content chunk")
                return (first - t0) * 1e3
            body_bytes += buf[:size]
            buf = buf[size + 2:]
            if first is None:
                *events, body_bytes = body_bytes.split(b"\n\n")
                for event in events:
                    if event.startswith(b"data: {") and _has_content(json.loads(event[6:])):
                        first = time.perf_counter()
                        break

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("connection closed")
        return data


def _has_content(chunk: dict) -> bool:
    choices = chunk.get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content") or choices[0].get("text"))


# Every TTFT sample starts from the same idle machine, as a request reaching an idle server does:
# on a VM, code that runs right after other work runs several times faster than after a pause
# (measured here: Sanic's request path takes 73 µs back to back, 414 µs after 20 ms idle), so
# without the pause whichever path ran last would be favoured.
IDLE_BEFORE_S = 0.02


def paired_ttft_ms(url: str, model: str, threads: int, ctx_size: int, rounds: int) -> dict | None:
    """HTTP TTFT and in-process TTFT (lanes.Model: the runtime without HTTP or lanes) of the same
    chat prompt, in rotating order each round, each after the same idle pause; medians
    of TTFT per path and of the per-round differences HTTP − in-process, for the lean client
    ("raw") and for httpx. Both HTTP clients keep their connection alive, as real ones do."""
    try:
        from gateway.text.model_text import ModelText
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

    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2, "temperature": 0,
            "stream": True, "ignore_eos": True}
    raw = RawHttpClient(url)
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(timeout=300)
    paths = {
        "inproc": in_process,
        "raw": lambda: raw.ttft_ms("/chat/completions", body),
        "httpx": lambda: loop.run_until_complete(one_request(client, url, model, 2))["ttft_s"] * 1e3,
    }
    samples: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for i in range(rounds + 1):
            names = list(paths)
            names = names[i % 3:] + names[:i % 3]
            measured = {}
            for name in names:
                time.sleep(IDLE_BEFORE_S)
                measured[name] = paths[name]()
            if i:  # round 0 warms every path up
                for name, value in measured.items():
                    samples[name].append(value)
    finally:
        raw.close()
        loop.run_until_complete(client.aclose())
        loop.close()
    out = {name: statistics.median(values) for name, values in samples.items()}
    for name in ("raw", "httpx"):
        out[name + "_diff"] = statistics.median(h - l for h, l in zip(samples[name], samples["inproc"]))
    return out


def idle_cpu_rate(pid: int, seconds: float = 3.0) -> float:
    """The gateway's CPU use while idle (timers, supervision), in CPU-seconds per second."""
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0)


def cpu_per_token_us(url: str, model: str, pid: int, short: int, long: int, concurrency: int,
                     idle_rate: float) -> tuple[float, float]:
    """Marginal gateway CPU per relayed token: the CPU-time slope between short and long
    generations, so per-request work (HTTP parsing, templating, tokenizing) cancels out, after
    removing the idle background (timers run for as long as a phase lasts, tokens or not).
    Returns (µs per token, seconds between relayed tokens in the long phase)."""
    def measure(max_tokens: int) -> tuple[float, int, float]:
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        r = asyncio.run(run_level(url, model, concurrency, 2 * concurrency, max_tokens))
        wall_s = time.perf_counter() - t0
        busy_s = cpu_seconds(pid) - cpu0 - idle_rate * wall_s
        return busy_s, r["tokens"], wall_s

    cpu_short, tokens_short, _ = measure(short)
    cpu_long, tokens_long, wall_long_s = measure(long)
    return (cpu_long - cpu_short) * 1e6 / max(1, tokens_long - tokens_short), wall_long_s / max(1, tokens_long)


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
            proc = start_laneserve(model_arg, replicas, args.threads, args.ctx_size)
            url = proc.base_url + "/v1"
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
                    us, gap_s = cpu_per_token_us(url, args.model, pid, 8, 8 + args.cpu_tokens, c, idle_rate)
                    cpu_us_per_token[c] = (us, bare_relay_floor_us(gap_s))
            if proc and position == 0 and "synthetic:" not in model_arg:
                ttft_pair = paired_ttft_ms(url, args.model, args.threads, args.ctx_size, 40)
        finally:
            if proc:
                proc.stop()
    extra = []
    if cpu_us_per_token:
        extra.append("gateway cpu/token " + " ".join(
            f"c{c}: {us:.1f}us (bare relay loop at that pace {floor:.1f}us, above it {us - floor:+.1f}us)"
            for c, (us, floor) in sorted(cpu_us_per_token.items())))
    if ttft_pair is not None:
        p = ttft_pair
        extra.append(f"http-inproc ttft p50 {p['raw_diff']:+.2f}ms (http {p['raw']:.1f}, inproc {p['inproc']:.1f}; "
                     f"through httpx {p['httpx_diff']:+.2f}ms)")
    print("serve_bench " + args.model + " | " + " | ".join(summary + extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
