"""Gateway cost, one source tree against another in the same run: gateway CPU per relayed token at
1 and at 16 concurrent streams, and TTFT over HTTP at concurrency 1.

    python benchmarks/gateway_bench.py --tree before=/work/wt-before --tree after=/work/main
    python benchmarks/gateway_bench.py                 # this checkout alone (label "after")

Starts one laneserve per `--tree LABEL=PATH` (`python -m gateway.cli serve` with PYTHONPATH and
the working directory set to PATH, so that tree's gateway/ and lanes/ run; its compiled lanes/*.so
must be there) on the lanes' synthetic backend, so lane compute is the same for every tree: one
step of `--step-us` per token for all slots, no prefill time, `--parallel 16` slots, one thread.
All servers stay up for the whole run and are measured one at a time: each phase runs on every
tree back to back, in an order that alternates from phase to phase and round to round (AB BA, then
BA AB), so drift on a shared machine falls on every tree alike.

Per round and tree:
  cpu/token c1    CPU time (user + system) of the gateway process only — its lanes are child
                  processes and not counted — over `--c1-requests` streamed chat completions one
                  after another, divided by the completion tokens of their usage chunks
  cpu/token c16   the same with 16 streams at once (`--c16-waves` requests per stream)
  TTFT c1 p50     request written → first SSE event with content, `--ttft-requests` requests of
                  2 tokens per tree; trees alternate request by request and each request follows
                  a `--idle-ms` pause (a request that reaches an idle server, as in serve_bench.py)
Every request asks for `--tokens` (2 for TTFT) with ignore_eos and must get exactly that many.
Prints details per round to stderr and ONE summary line: the medians over rounds per tree and,
for each tree against the reference (the tree labelled "before", else the first), the ratio of
the medians with the range of the per-round ratios in brackets.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.client import Conn, guarded_request  # noqa: E402
from gateway.cli.bench.metrics import percentile  # noqa: E402
from gateway.cli.bench.proc import cpu_seconds  # noqa: E402
from gateway.cli.bench.server import ProcessServer, free_port  # noqa: E402

MODEL = "fake"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
REQUEST_TIMEOUT_S = 120.0


class Tree:
    def __init__(self, label: str, path: str) -> None:
        self.label, self.path = label, os.path.abspath(path)
        if not os.path.isfile(os.path.join(self.path, "gateway", "__init__.py")):
            raise SystemExit(f"--tree {label}={path}: no gateway/ package there")
        self.rev = describe(self.path)
        self.server: ProcessServer | None = None
        self.cpu_us: dict[int, list[float]] = {1: [], 16: []}
        self.ttft_ms: list[float] = []

    def start(self, args: argparse.Namespace) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--model", f"{MODEL}=synthetic:step_us={args.step_us},prefill_us_per_token=0,n_ctx=4096",
               "--threads", "1", "--parallel", "16", "--ctx-size", "4096", "--log-level", "warning"]
        # cwd too: `python -m` puts the working directory before PYTHONPATH on sys.path
        env = {**os.environ, "PYTHONPATH": self.path}
        self.server = ProcessServer(f"laneserve_{self.label}", cmd, port, "/health/ready", env=env,
                                    startup_timeout_s=180, cwd=self.path).start()
        mapped = mapped_lane_extensions(self.server.pid)
        if not mapped or any(not m.startswith(self.path + os.sep) for m in mapped):
            raise SystemExit(f"{self.label}: the gateway runs lanes extensions from {mapped}, not {self.path}")

    @property
    def url(self) -> str:
        return self.server.base_url


def describe(path: str) -> str:
    """Short commit of a checkout, +dirty when its gateway/ or lanes/ differ from it."""
    try:
        rev = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--", "gateway", "lanes"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (rev or "?") + ("+dirty" if dirty else "")


def mapped_lane_extensions(pid: int) -> set[str]:
    """The lanes/*.so files the process has mapped: proof of which tree it imported."""
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if "/lanes/_" in line and line.rstrip().endswith(".so")}


def body(max_tokens: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


def checked(record: dict, max_tokens: int, where: str) -> dict:
    if "error" in record:
        raise SystemExit(f"{where}: request failed: {record['error']}")
    if not record["usage"] or record["output_tokens"] != max_tokens:
        raise SystemExit(f"{where}: {record['output_tokens']} tokens (usage chunk: {record['usage']}), "
                         f"asked for {max_tokens}")
    return record


async def streams(url: str, concurrency: int, per_stream: int, max_tokens: int, where: str) -> int:
    """`concurrency` kept-alive connections, each sending `per_stream` requests one after another;
    the completion tokens of all of them."""
    async def one_stream() -> int:
        conn = Conn(url)
        try:
            tokens = 0
            for _ in range(per_stream):
                record = await guarded_request(conn, "/v1/chat/completions", body(max_tokens), REQUEST_TIMEOUT_S)
                tokens += checked(record, max_tokens, where)["output_tokens"]
            return tokens
        finally:
            conn.close()

    return sum(await asyncio.gather(*(one_stream() for _ in range(concurrency))))


def cpu_per_token_us(tree: Tree, concurrency: int, per_stream: int, max_tokens: int) -> float:
    pid = tree.server.pid
    cpu0 = cpu_seconds(pid)
    tokens = asyncio.run(streams(tree.url, concurrency, per_stream, max_tokens, f"{tree.label} c{concurrency}"))
    return (cpu_seconds(pid) - cpu0) / tokens * 1e6


def ttft_round(trees: list[Tree], requests: int, idle_s: float, round_index: int) -> dict[str, float]:
    """p50 TTFT (ms) per tree; the trees take turns request by request, the first of each pair
    alternating, every request after the same idle pause, one kept-alive connection per tree."""
    async def run() -> dict[str, float]:
        conns = {t.label: Conn(t.url) for t in trees}
        samples: dict[str, list[float]] = {t.label: [] for t in trees}
        try:
            for i in range(requests + 1):  # request 0 of each tree opens its connection, not counted
                order = trees if (i + round_index) % 2 == 0 else trees[::-1]
                for t in order:
                    await asyncio.sleep(idle_s)
                    record = await guarded_request(conns[t.label], "/v1/chat/completions", body(2), REQUEST_TIMEOUT_S)
                    checked(record, 2, f"{t.label} ttft")
                    if i:
                        samples[t.label].append(record["ttft_s"] * 1e3)
        finally:
            for conn in conns.values():
                conn.close()
        return {label: percentile(values, 50) for label, values in samples.items()}

    return asyncio.run(run())


def ratio_text(values: list[float], reference: list[float]) -> str:
    per_round = [v / r for v, r in zip(values, reference)]
    return (f"{statistics.median(values) / statistics.median(reference):.2f}x "
            f"[{min(per_round):.2f}-{max(per_round):.2f}]")


def summary(trees: list[Tree], args: argparse.Namespace) -> str:
    ref = next((t for t in trees if t.label == "before"), trees[0])
    parts = [f"gateway_bench | {' '.join(f'{t.label}={t.rev}' for t in trees)} | synthetic step {args.step_us} us, "
             f"{args.tokens} tok/request, {args.rounds} rounds, medians"]
    metrics = [("cpu/token c1", lambda t: t.cpu_us[1], "us", 1), ("cpu/token c16", lambda t: t.cpu_us[16], "us", 1),
               ("ttft c1 p50", lambda t: t.ttft_ms, "ms", 2)]
    for name, values_of, unit, digits in metrics:
        text = f"{name}: " + ", ".join(f"{t.label} {statistics.median(values_of(t)):.{digits}f} {unit}" for t in trees)
        ratios = [f"{t.label}/{ref.label} {ratio_text(values_of(t), values_of(ref))}" for t in trees if t is not ref]
        parts.append(text + (f" ({', '.join(ratios)})" if ratios else ""))
    return " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", metavar="LABEL=PATH",
                    help="a source tree to serve (repeatable); default: after=<the checkout of this script>")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256, help="max_tokens of the CPU phases (ignore_eos)")
    ap.add_argument("--c1-requests", type=int, default=12, help="requests per round for cpu/token c1")
    ap.add_argument("--c16-waves", type=int, default=3, help="requests per stream per round for cpu/token c16")
    ap.add_argument("--ttft-requests", type=int, default=50, help="TTFT requests per tree per round")
    ap.add_argument("--idle-ms", type=float, default=20.0, help="pause before each TTFT request")
    ap.add_argument("--step-us", type=int, default=1000, help="synthetic lane: time per decode step")
    args = ap.parse_args()
    specs = args.tree or [f"after={REPO_ROOT}"]
    trees = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            ap.error(f"--tree wants LABEL=PATH, not {spec!r}")
        trees.append(Tree(label, path))
    if len({t.label for t in trees}) != len(trees):
        ap.error("--tree labels must differ")
    t_start = time.monotonic()
    try:
        for t in trees:
            t.start(args)
            print(f"{t.label}: {t.path} ({t.rev}) pid {t.server.pid} on {t.url}", file=sys.stderr, flush=True)
        for t in trees:  # warm-up: imports, first requests, slot buffers at full width
            asyncio.run(streams(t.url, 16, 1, 32, f"{t.label} warm-up"))
            asyncio.run(streams(t.url, 1, 2, 32, f"{t.label} warm-up"))
        ttft_round(trees, 5, args.idle_ms / 1e3, 0)
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for concurrency, per_stream in ((1, args.c1_requests), (16, args.c16_waves)):
                for t in order:  # the trees back to back in each phase
                    t.cpu_us[concurrency].append(cpu_per_token_us(t, concurrency, per_stream, args.tokens))
                order = order[::-1]
            for label, p50 in ttft_round(trees, args.ttft_requests, args.idle_ms / 1e3, r).items():
                next(t for t in trees if t.label == label).ttft_ms.append(p50)
            print(f"round {r + 1}/{args.rounds} ({time.monotonic() - t_start:.0f} s, load {os.getloadavg()[0]:.1f}): "
                  + " | ".join(f"{t.label} cpu/token c1 {t.cpu_us[1][-1]:.1f} us, c16 {t.cpu_us[16][-1]:.1f} us, "
                               f"ttft p50 {t.ttft_ms[-1]:.2f} ms" for t in trees), file=sys.stderr, flush=True)
    finally:
        for t in trees:
            if t.server is not None:
                t.server.stop()
    print(summary(trees, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
