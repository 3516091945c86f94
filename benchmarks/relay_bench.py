"""Relay benchmark: native writer in a lane process → ring → asyncio reader in this process.

For each gateway doorbell (eventfd + loop.add_reader, semaphore + waiter thread) it runs a real
lane (synthetic backend: the real native loop, JSON escaping and framing, no model) through
LanePool and measures
  * sustained relay: a lane generating as fast as it can; deltas/s delivered (deltas merged by
    the lane when the ring is full count individually) and ring records/s read;
  * wake latency: one delta every `--pace-us`; emit_ns (stamped by the lane just before the
    ring write) → the pump's callback on the event loop, p50/p99.
Prints one summary line (plus details with -v).  Usage: python benchmarks/relay_bench.py [-v]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lanes import wire  # noqa: E402
from lanes.api import Framing, GenerationParams, LaneModelSpec  # noqa: E402
from lanes.config import PoolConfig  # noqa: E402
from lanes.pool import LanePool  # noqa: E402

FRAMING = Framing(b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"', b'"}]}\n\n')


def instrument(pool: LanePool, sink: dict) -> None:
    """Wrap the slot's dispatch to count records and stamp receive times (one clock read per batch)."""
    slot = pool._slots["bench"][0]
    original = slot.dispatch

    def dispatch(records):
        now = time.monotonic_ns()
        for rtype, payload in records:
            if rtype == wire.DELTA:
                _, _, num_tokens, emit_ns = wire.decode_delta_header(payload)
                sink["records"] += 1
                sink["deltas"] += num_tokens
                if num_tokens == 1 and sink["lat"] is not None:
                    sink["lat"].append(now - emit_ns)
        original(records)

    slot.dispatch = dispatch


async def run_one(doorbell: str, mode: str, args) -> dict:
    step_us = 0 if mode == "throughput" else args.pace_us
    pool = LanePool([LaneModelSpec("bench", f"synthetic:step_us={step_us}")],
                    # The synthetic lane outruns any reader: let its backlog grow instead of erroring.
                    config=PoolConfig(doorbell=doorbell, output_ring_bytes=args.ring_bytes,
                                      max_pending_bytes=1 << 30))
    try:
        pool.start()
        pool.attach(asyncio.get_running_loop())
        sink = {"records": 0, "deltas": 0, "lat": [] if mode == "latency" else None}
        instrument(pool, sink)
        n = args.throughput_tokens if mode == "throughput" else args.latency_tokens
        stream = pool.submit("bench", [1, 2, 3], GenerationParams(max_tokens=n), [FRAMING], 1)
        t0 = time.perf_counter()
        received_bytes = 0
        async for item in stream:
            if hasattr(item, "data"):
                received_bytes += len(item.data)
        elapsed = time.perf_counter() - t0
        out = {"doorbell": doorbell, "mode": mode, "elapsed_s": elapsed, "deltas": sink["deltas"],
               "records": sink["records"], "bytes": received_bytes}
        if mode == "latency":
            lat = sorted(sink["lat"][10:])  # skip warm-up
            out["p50_us"] = lat[len(lat) // 2] / 1e3
            out["p99_us"] = lat[int(len(lat) * 0.99)] / 1e3
            out["mean_us"] = statistics.fmean(lat) / 1e3
        return out
    finally:
        pool.close()


async def main_async(args) -> list[dict]:
    results = []
    for _ in range(args.repeats):
        for doorbell in ("eventfd", "semaphore"):
            for mode in ("throughput", "latency"):
                results.append(await run_one(doorbell, mode, args))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--throughput-tokens", type=int, default=1_000_000)
    ap.add_argument("--latency-tokens", type=int, default=3000)
    ap.add_argument("--pace-us", type=int, default=500)
    ap.add_argument("--ring-bytes", type=int, default=1 << 20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.loop == "uvloop":
        try:
            import uvloop
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            args.loop = "asyncio"
    results = asyncio.run(main_async(args))
    summary = []
    for doorbell in ("eventfd", "semaphore"):
        tp = [r for r in results if r["doorbell"] == doorbell and r["mode"] == "throughput"]
        lt = [r for r in results if r["doorbell"] == doorbell and r["mode"] == "latency"]
        best = max(tp, key=lambda r: r["deltas"] / r["elapsed_s"])
        p50 = statistics.median(r["p50_us"] for r in lt)
        p99 = statistics.median(r["p99_us"] for r in lt)
        summary.append(f"{doorbell}: {best['deltas'] / best['elapsed_s'] / 1e3:.0f}k deltas/s "
                       f"({best['records'] / best['elapsed_s'] / 1e3:.0f}k records/s, "
                       f"{best['bytes'] / best['elapsed_s'] / 2**20:.0f} MiB/s) "
                       f"wake p50 {p50:.1f} us p99 {p99:.1f} us")
        if args.verbose:
            for r in tp + lt:
                print(r, file=sys.stderr)
    print(f"relay_bench [{args.loop}, 1 lane, pace {args.pace_us} us]: " + " | ".join(summary))


if __name__ == "__main__":
    main()
