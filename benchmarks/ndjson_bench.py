"""Gateway CPU per relayed token: Ollama NDJSON (/api/chat) against OpenAI SSE (/v1/chat/completions).

Starts laneserve on the lanes' synthetic backend (no model competing for the CPU; one token per
stream every `--step-us`), runs the same concurrent streaming load through each protocol in
alternating rounds, and divides the gateway process's CPU time (the sum of its threads' schedstat
run time, in ns; the lane is another process) by the tokens relayed. Prints one summary line with
the NDJSON/SSE ratio measured in the same run.

    python benchmarks/ndjson_bench.py [--streams 4] [--tokens 5000] [--rounds 3] [--step-us 1000]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys

import httpx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.server import StartedServer  # noqa: E402


def cpu_s(pid: int) -> float:
    total_ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that just ended
            pass
    return total_ns / 1e9


def start(step_us: int, streams: int) -> StartedServer:
    return StartedServer(f"fake=synthetic:step_us={step_us},n_ctx=8192",
                         ["--log-level", "warning", "--ctx-size", "8192", "--parallel", str(max(streams, 1))],
                         startup_timeout_s=120).start()


async def one(client: httpx.AsyncClient, protocol: str, tokens: int) -> int:
    messages = [{"role": "user", "content": "x"}]
    if protocol == "sse":
        req = ("/v1/chat/completions", {"model": "fake", "messages": messages, "max_tokens": tokens, "stream": True})
    else:
        req = ("/api/chat", {"model": "fake", "messages": messages, "options": {"num_predict": tokens}})
    received = 0
    async with client.stream("POST", req[0], json=req[1]) as r:
        async for chunk in r.aiter_raw():
            received += len(chunk)
    return received


async def level(base: str, protocol: str, streams: int, tokens: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        await asyncio.gather(*[one(client, protocol, tokens) for _ in range(streams)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--step-us", type=int, default=1000)
    args = ap.parse_args()
    server = start(args.step_us, args.streams)
    base, pid = server.base_url, server.pid
    try:
        asyncio.run(level(base, "sse", args.streams, 50))  # warm-up
        asyncio.run(level(base, "ndjson", args.streams, 50))
        per_token: dict[str, list[float]] = {"sse": [], "ndjson": []}
        for r in range(args.rounds):
            for protocol in (("sse", "ndjson") if r % 2 == 0 else ("ndjson", "sse")):
                c0 = cpu_s(pid)
                asyncio.run(level(base, protocol, args.streams, args.tokens))
                per_token[protocol].append((cpu_s(pid) - c0) / (args.streams * args.tokens) * 1e6)
    finally:
        server.stop()
    sse, nd = (sorted(per_token[p])[len(per_token[p]) // 2] for p in ("sse", "ndjson"))
    print(f"ndjson_bench | {args.streams} streams x {args.tokens} tokens, step {args.step_us} us, median of "
          f"{args.rounds}: gateway cpu/token sse {sse:.1f} us, ndjson {nd:.1f} us, ndjson/sse {nd / sse:.2f}x "
          f"(rounds sse {', '.join(f'{v:.1f}' for v in per_token['sse'])}; "
          f"ndjson {', '.join(f'{v:.1f}' for v in per_token['ndjson'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
