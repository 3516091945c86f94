"""Relay benchmark: native writer in a lane process → ring → asyncio reader in this process.

For each gateway doorbell (eventfd + loop.add_reader, semaphore + waiter thread) it runs a real
lane (synthetic backend: the real native loop, no model) through LanePool and measures
  * sustained relay: one request generating as fast as the lane can; the gateway's native
    DeltaRelay (RingReader.pump) demultiplexes, JSON-escapes and frames every delta and hands the
    events back (queued mode); deltas/s delivered (deltas the lane merged while the ring was full
    count individually), pump calls/s and framed MiB/s;
  * batched relay: `--batch` requests at once on the one replica (continuous batching), each
    framed by its own route; total deltas/s;
  * wake latency: one delta every `--pace-us`; emit_ns (stamped by the lane just before the ring
    write) → the moment the loop's drain callback reads it, p50/p99. The native pump does not
    expose per-delta emit times, so this mode reads the ring with RingReader.read_batch through
    the same doorbell and drain path (what it measures is the wake-up, not the framing).
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
from lanes.api import ChoiceDone, GenerationParams, LaneModelSpec  # noqa: E402
from lanes.config import PoolConfig  # noqa: E402
from lanes.pool import LanePool  # noqa: E402

PREFIX = b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"'
SUFFIX = b'"}]}\n\n'
FRAMINGS = [(0, wire.CONTENT, PREFIX, SUFFIX)]


class CountingReader:
    """Wraps a replica's native RingReader: counts pump calls (throughput modes)."""

    def __init__(self, reader, sink: dict) -> None:
        self._reader = reader
        self._sink = sink

    def __getattr__(self, name):
        return getattr(self._reader, name)

    def pump(self, max_records=128, bell_fd=-1):
        self._sink["pumps"] += 1
        return self._reader.pump(max_records, bell_fd)


class LatencyReader(CountingReader):
    """Reads raw records (read_batch) to see each DELTA's emit_ns; deltas go to their streams
    unframed, control records to the replica's dispatch, in ring order."""

    def __init__(self, reader, sink: dict, replica) -> None:
        super().__init__(reader, sink)
        self._replica = replica

    def pump(self, max_records=128, bell_fd=-1):
        self._sink["pumps"] += 1
        if bell_fd >= 0:
            try:
                os.read(bell_fd, 8)  # level-triggered doorbell: reset before reading
            except BlockingIOError:
                pass
        records = self._reader.read_batch(max_records)
        now = time.monotonic_ns()
        streams = self._replica.streams
        for rtype, payload in records:
            if rtype == wire.DELTA:
                rid, choice, _, num_tokens, _, emit_ns = wire.decode_delta_header(payload)
                self._sink["deltas"] += num_tokens
                if num_tokens == 1:
                    self._sink["lat"].append(now - emit_ns)
                stream = streams.get(rid)
                if stream is not None:
                    stream.push_chunk(choice, payload[wire.DELTA_HEADER_BYTES:])
            else:
                self._replica.dispatch((rtype, payload))
        more = len(records) == max_records or self._reader.arm()
        return None, None, None, more


async def run_one(doorbell: str, mode: str, args) -> dict:
    step_us = args.pace_us if mode == "latency" else 0
    num_requests = args.batch if mode == "batched" else 1
    pool = LanePool([LaneModelSpec("bench", f"synthetic:step_us={step_us}", num_slots=max(8, num_requests))],
                    # The synthetic lane outruns any reader: let its backlog grow instead of erroring.
                    config=PoolConfig(doorbell=doorbell, output_ring_bytes=args.ring_bytes,
                                      max_pending_bytes=1 << 30))
    try:
        pool.start()
        pool.attach(asyncio.get_running_loop())
        replica = pool._replicas["bench"][0]
        sink = {"pumps": 0, "deltas": 0, "lat": []}
        native = replica.channels.reader
        replica.channels.reader = (LatencyReader(native, sink, replica) if mode == "latency"
                                   else CountingReader(native, sink))
        n = {"throughput": args.throughput_tokens, "batched": args.throughput_tokens // num_requests,
             "latency": args.latency_tokens}[mode]
        streams = [pool.submit("bench", [1, 2, 3], GenerationParams(max_tokens=n), rid + 1, framings=FRAMINGS)
                   for rid in range(num_requests)]
        t0 = time.perf_counter()

        async def consume(stream) -> tuple[int, int]:
            received, tokens = 0, 0
            async for item in stream:
                if type(item) is ChoiceDone:
                    tokens += item.completion_tokens
                else:
                    received += len(item.data)
            return received, tokens

        counts = await asyncio.gather(*(consume(s) for s in streams))
        elapsed = time.perf_counter() - t0
        out = {"doorbell": doorbell, "mode": mode, "requests": num_requests, "elapsed_s": elapsed,
               "deltas": sum(t for _, t in counts), "pumps": sink["pumps"], "bytes": sum(b for b, _ in counts)}
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
            for mode in ("throughput", "batched", "latency"):
                results.append(await run_one(doorbell, mode, args))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--throughput-tokens", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=8, help="requests at once in the batched mode")
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
        def best(mode):
            runs = [r for r in results if r["doorbell"] == doorbell and r["mode"] == mode]
            return max(runs, key=lambda r: r["deltas"] / r["elapsed_s"]), runs
        tp, tp_runs = best("throughput")
        bt, bt_runs = best("batched")
        lt = [r for r in results if r["doorbell"] == doorbell and r["mode"] == "latency"]
        p50 = statistics.median(r["p50_us"] for r in lt)
        p99 = statistics.median(r["p99_us"] for r in lt)
        summary.append(f"{doorbell}: {tp['deltas'] / tp['elapsed_s'] / 1e3:.0f}k deltas/s "
                       f"({tp['pumps'] / tp['elapsed_s'] / 1e3:.1f}k pumps/s, "
                       f"{tp['bytes'] / tp['elapsed_s'] / 2**20:.0f} MiB/s), "
                       f"x{bt['requests']} batched {bt['deltas'] / bt['elapsed_s'] / 1e3:.0f}k deltas/s, "
                       f"wake p50 {p50:.1f} us p99 {p99:.1f} us")
        if args.verbose:
            for r in tp_runs + bt_runs + lt:
                print(r, file=sys.stderr)
    print(f"relay_bench [{args.loop}, 1 lane, pace {args.pace_us} us]: " + " | ".join(summary))


if __name__ == "__main__":
    main()
