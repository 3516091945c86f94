"""Gateway cost, one source tree against another in the same run: gateway CPU per relayed token at
1 and at 16 concurrent streams, and TTFT over HTTP at concurrency 1.

    python benchmarks/gateway_bench.py --tree before=/work/wt-before --tree after=/work/main
    python benchmarks/gateway_bench.py                 # this checkout alone (label "after")

Starts one laneserve per `--tree LABEL=PATH` (`python -m gateway.cli serve` with PYTHONPATH and
the working directory set to PATH, so that tree's gateway/ and lanes/ run; its compiled lanes/*.so
must be there) on the lanes' synthetic backend, so lane compute is the same for every tree: one
step of `--step-us` per token for all slots, no prefill time, `--parallel 16` slots, one thread.
All servers stay up for the whole run and are measured one at a time, the trees taking turns
request by request (a wave of 16 at c16), the first of each turn alternating, so drift on a shared
machine falls on every tree alike; a gateway's CPU time is read just before its turn and 10 ms
after its last response ended, so the other trees' turns are not in it.

Per round and tree:
  cpu/token c1    CPU time (user + system, as /proc/PID/stat's utime + stime, read in ns) of the
                  gateway process only — its lanes are child processes and not counted — over its
                  `--c1-requests` streamed chat completions of `--tokens` tokens, one at a time,
                  divided by the completion tokens of their usage chunks
  cpu/token c16   the same over `--c16-waves` waves of 16 such requests at once
  TTFT c1 p50     request written → first SSE event with content, p50 of `--ttft-requests`
                  requests of 2 tokens, each after a `--idle-ms` pause (a request that reaches an
                  idle server, as in serve_bench.py)
  cpu/request     the gateway's CPU time per request of that TTFT phase (the request path: parse,
                  template, tokenize, admit, 2 tokens, end)
Every request uses ignore_eos and must get exactly the tokens it asked for, else the run stops.
Each phase's first turn per tree (connections opening) is not counted; a warm-up precedes round 1.
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
from gateway.cli.bench.launcher import free_port, serve_command  # noqa: E402
from gateway.cli.bench.server import ProcessServer  # noqa: E402

MODEL = "fake"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
REQUEST_TIMEOUT_S = 120.0
SETTLE_S = 0.01  # after a unit, before its CPU reading: the gateway's work after the last byte counts


class Tree:
    def __init__(self, label: str, path: str) -> None:
        self.label, self.path = label, os.path.abspath(path)
        if not os.path.isfile(os.path.join(self.path, "gateway", "__init__.py")):
            raise SystemExit(f"--tree {label}={path}: no gateway/ package there")
        self.rev = describe(self.path)
        self.server: ProcessServer | None = None
        self.cpu_us: dict[int, list[float]] = {1: [], 16: []}
        self.ttft_ms: list[float] = []
        self.ttft_cpu_us: list[float] = []  # gateway CPU per TTFT request (2 tokens): the request path

    def start(self, args: argparse.Namespace) -> None:
        port = free_port()
        model = f"{MODEL}=synthetic:step_us={args.step_us},prefill_us_per_token=0,n_ctx=4096"
        cmd = serve_command(port, "--model", model, "--threads", "1", "--parallel", "16", "--ctx-size", "4096",
                            "--log-level", "warning")
        # This tree's code, not this process's (so not launcher.source_env); cwd too: `python -m`
        # puts the working directory before PYTHONPATH on sys.path
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
                             timeout=30, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--", "gateway", "lanes"],
                               capture_output=True, text=True, timeout=30, check=False).stdout.strip()
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


async def warm_up(url: str, where: str) -> None:
    """Imports, first requests and slot buffers at full width, uncounted."""
    for concurrency in (16, 1, 1):
        conns = [Conn(url) for _ in range(concurrency)]
        try:
            records = await asyncio.gather(*(guarded_request(c, "/v1/chat/completions", body(32), REQUEST_TIMEOUT_S)
                                             for c in conns))
        finally:
            for c in conns:
                c.close()
        for record in records:
            checked(record, 32, where)


def alternate(trees: list[Tree], concurrency: int, units: int, max_tokens: int, round_index: int,
              pause_s: float = 0.0, settle_s: float = 0.0) -> dict[str, tuple[list[dict], float]]:
    """`units` times per tree: `concurrency` requests at once on kept-alive connections, the trees
    taking turns unit by unit (the first of each turn alternating), each unit after `pause_s` and
    its gateway's CPU time read `settle_s` after its last response ended. Unit 0 of each tree opens
    the connections and is not counted. Per tree: the counted records and the CPU seconds of its
    units."""
    async def run() -> dict[str, tuple[list[dict], float]]:
        conns = {t.label: [Conn(t.url) for _ in range(concurrency)] for t in trees}
        out: dict[str, tuple[list[dict], float]] = {t.label: ([], 0.0) for t in trees}
        try:
            for i in range(units + 1):
                for t in (trees if (i + round_index) % 2 == 0 else trees[::-1]):
                    await asyncio.sleep(pause_s)
                    cpu0 = cpu_seconds(t.server.pid)
                    records = await asyncio.gather(*(
                        guarded_request(c, "/v1/chat/completions", body(max_tokens), REQUEST_TIMEOUT_S)
                        for c in conns[t.label]))
                    await asyncio.sleep(settle_s)
                    cpu = cpu_seconds(t.server.pid) - cpu0
                    for record in records:
                        checked(record, max_tokens, f"{t.label} c{concurrency}")
                    if i:
                        kept, cpu_s = out[t.label]
                        out[t.label] = (kept + records, cpu_s + cpu)
        finally:
            for conn_list in conns.values():
                for conn in conn_list:
                    conn.close()
        return out

    return asyncio.run(run())


def ratio_text(values: list[float], reference: list[float]) -> str:
    per_round = [v / r for v, r in zip(values, reference)]
    return (f"{statistics.median(values) / statistics.median(reference):.2f}x "
            f"[{min(per_round):.2f}-{max(per_round):.2f}]")


def summary(trees: list[Tree], args: argparse.Namespace) -> str:
    ref = next((t for t in trees if t.label == "before"), trees[0])
    parts = [f"gateway_bench | {' '.join(f'{t.label}={t.rev}' for t in trees)}",
             f"synthetic step {args.step_us} us, {args.tokens} tok/request, {args.rounds} rounds, medians"]
    metrics = [("cpu/token c1", lambda t: t.cpu_us[1], "us", 1), ("cpu/token c16", lambda t: t.cpu_us[16], "us", 1),
               ("ttft c1 p50", lambda t: t.ttft_ms, "ms", 2),
               ("cpu/request (2 tok)", lambda t: t.ttft_cpu_us, "us", 0)]
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
    ap.add_argument("--c16-waves", type=int, default=4, help="waves of 16 concurrent requests per round for cpu/token c16")
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
        for t in trees:
            asyncio.run(warm_up(t.url, f"{t.label} warm-up"))
        for r in range(args.rounds):
            for concurrency, units in ((1, args.c1_requests), (16, args.c16_waves)):
                phase = alternate(trees, concurrency, units, args.tokens, r + concurrency, settle_s=SETTLE_S)
                for t in trees:
                    records, cpu_s = phase[t.label]
                    t.cpu_us[concurrency].append(cpu_s / sum(rec["output_tokens"] for rec in records) * 1e6)
            phase = alternate(trees, 1, args.ttft_requests, 2, r, pause_s=args.idle_ms / 1e3, settle_s=SETTLE_S)
            for t in trees:
                records, cpu_s = phase[t.label]
                t.ttft_ms.append(percentile([rec["ttft_s"] * 1e3 for rec in records], 50))
                t.ttft_cpu_us.append(cpu_s / len(records) * 1e6)
            print(f"round {r + 1}/{args.rounds} ({time.monotonic() - t_start:.0f} s, load {os.getloadavg()[0]:.1f}): "
                  + " | ".join(f"{t.label} cpu/token c1 {t.cpu_us[1][-1]:.1f} us, c16 {t.cpu_us[16][-1]:.1f} us, "
                               f"ttft p50 {t.ttft_ms[-1]:.2f} ms ({t.ttft_cpu_us[-1]:.0f} us cpu/request)"
                               for t in trees), file=sys.stderr, flush=True)
    finally:
        for t in trees:
            if t.server is not None:
                t.server.stop()
    print(summary(trees, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
