"""Memory per replica and launch-to-ready time, with the shared repack cache and without it.

For each model and each cache mode (`--repack-cache-dir DIR` in a fresh directory, and `off`),
starts `laneserve serve` with 1 and then 2 replicas, times launch → /health/ready answering 200
with every lane ready, sends one short chat request to every lane (so each has run a forward
pass), and reads each lane's PSS from /proc/PID/smaps_rollup. The first launch with a fresh cache
directory builds the cache; the launches after it map it (both times are printed).

    python benchmarks/memory_bench.py [--models smollm2,gemma3] [--parallel 8] [--ctx-size 4096]

Target (issue: a second replica costs no second copy of the weights): the second replica adds at
most its K/V cache + 20 MB of PSS. Prints detail lines to stderr and ONE summary line to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import httpx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.launcher import free_port, start_laneserve  # noqa: E402

MB = 1024 * 1024


def pss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Pss for {pid}")


def launch(workdir: str, model: str, replicas: int, cache: str, args) -> dict:
    """Starts a server, waits for every lane (20 ms polls: finer than the launcher's default,
    whose 0.2 s polls would blur a ~1 s launch), measures, stops it."""
    port = free_port()
    lanes: list[dict] = []

    def every_lane_ready(body: bytes) -> bool:
        lanes[:] = [lane for m in json.loads(body)["models"].values() for lane in m["lanes"]]
        return len(lanes) == replicas and all(lane["state"] == "ready" and lane["pid"] for lane in lanes)

    t0 = time.perf_counter()
    srv = start_laneserve("--model", model, "--replicas", str(replicas), "--threads", "1", "--parallel",
                          str(args.parallel), "--ctx-size", str(args.ctx_size), "--repack-cache-dir", cache, port=port,
                          log_path=os.path.join(workdir, f"server-{port}.log"), cwd=workdir)
    try:
        srv.wait_ready(180, poll_s=0.02, check=every_lane_ready)
        ready_s = time.perf_counter() - t0
        # A greedy and a sampled request per lane (one at a time: the gateway spreads them), so
        # each lane has run a forward pass and its sampler's buffers.
        greedy = {"model": model, "max_tokens": 4, "temperature": 0,
                  "messages": [{"role": "user", "content": "Hello"}]}
        sampled = {**greedy, "temperature": 0.8, "top_p": 0.9, "top_k": 0, "seed": 1}
        with httpx.Client(timeout=120.0) as c:
            for _ in range(2 * replicas):
                for body in (greedy, sampled):
                    c.post(srv.base_url + "/v1/chat/completions", json=body).raise_for_status()
        pss = [pss_bytes(lane["pid"]) for lane in lanes]
        kv = [lane["kv_cache_bytes"] for lane in lanes]
        return {"ready_s": ready_s, "pss": pss, "kv": kv}
    finally:
        srv.stop_group(wait_s=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--ctx-size", type=int, default=4096)
    args = ap.parse_args()
    summary = []
    workdir = tempfile.mkdtemp(prefix="memory-bench-")
    try:
        for model in args.models.split(","):
            cache = os.path.join(workdir, f"cache-{model}")
            build = launch(workdir, model, 1, cache, args)  # fresh directory: builds the cache
            print(f"{model} cache build: launch to ready {build['ready_s']:.2f} s", file=sys.stderr)
            row = {}
            for mode, where in (("shared", cache), ("off", "off")):
                one = launch(workdir, model, 1, where, args)
                two = launch(workdir, model, 2, where, args)
                added = sum(two["pss"]) - sum(one["pss"])
                kv_mb = two["kv"][1] / MB
                print(f"{model} {mode}: 1 replica PSS {one['pss'][0] / MB:.1f} MB, ready {one['ready_s']:.2f} s; "
                      f"2 replicas PSS {' + '.join(f'{p / MB:.1f}' for p in two['pss'])} MB, ready "
                      f"{two['ready_s']:.2f} s; second replica adds {added / MB:.1f} MB "
                      f"(its K/V cache reserves {kv_mb:.0f} MB, resident only as used)", file=sys.stderr)
                row[mode] = (one, added)
            summary.append(f"{model}: 2nd replica +{row['shared'][1] / MB:.1f} MB PSS shared vs "
                           f"+{row['off'][1] / MB:.1f} MB off; ready {row['shared'][0]['ready_s']:.2f} s "
                           f"(cache build {build['ready_s']:.2f} s, off {row['off'][0]['ready_s']:.2f} s)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("memory_bench: " + "; ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
