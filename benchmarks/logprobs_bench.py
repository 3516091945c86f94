"""Logprobs cost per token: streamed chat decode tok/s with `logprobs` + `top_logprobs=20` vs
without, same server, same prompt, alternating rounds at each concurrency; plus prompt scoring
(completions `echo` + `max_tokens: 0` + `logprobs: 5`, what evaluation harnesses send) vs a plain
one-token completion of the same prompt.

    python benchmarks/logprobs_bench.py                 # starts laneserve (SmolLM2) itself
    python benchmarks/logprobs_bench.py --url http://127.0.0.1:8000/v1 --model smollm2

Decode tok/s of a request = (completion tokens - 1) / (last content chunk - first content chunk);
a level's figure is the sum over its concurrent requests of their mean; the median over rounds is
reported, and the cost per token is 1/tok/s with logprobs minus 1/tok/s without. The engine's own
scoring cost per token is also timed in-process (lanes._runtime.score_logprobs), which a busy
machine disturbs far less than end-to-end rates. Detail to stderr, ONE summary line to stdout.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

import httpx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serve_bench import start_laneserve  # noqa: E402  (benchmarks/ is not a package)

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
SCORE_TEXT = ("The lighthouse stood at the edge of the world, and every night its keeper climbed the stairs "
              "to light the lamp. ") * 4


async def decode_rate(client: httpx.AsyncClient, url: str, model: str, max_tokens: int, logprobs: bool) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "ignore_eos": True}
    if logprobs:
        body.update(logprobs=True, top_logprobs=20)
    first = last = None
    tokens = 0
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise SystemExit(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if not choices:
                continue
            if logprobs:
                n = len((choices[0].get("logprobs") or {}).get("content") or [])
            else:
                n = 1 if choices[0].get("delta", {}).get("content") else 0
            if n:
                now = time.perf_counter()
                first = first or now
                last = now
                tokens += n
    return (tokens - 1) / (last - first) if tokens > 1 and last > first else float("nan")


async def level(url: str, model: str, concurrency: int, max_tokens: int, logprobs: bool) -> float:
    async with httpx.AsyncClient(timeout=600) as client:
        rates = await asyncio.gather(*(decode_rate(client, url, model, max_tokens, logprobs)
                                       for _ in range(concurrency)))
    return statistics.mean(rates) * concurrency


def native_score_us(n_vocab: int, num_top: int = 20, calls: int = 400) -> float:
    """Median µs of the engine's per-token scoring (engine/logprobs.h: max + top-k pass and
    log-sum-exp pass over one raw logits row), in this process, one thread."""
    import numpy as np

    from lanes import _runtime

    row = (np.random.default_rng(0).standard_normal(n_vocab) * 4).astype(np.float32)
    times = []
    for i in range(calls):
        t0 = time.perf_counter_ns()
        _runtime.score_logprobs(row, i % n_vocab, num_top)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def gateway_format_us(num_top: int = 20, calls: int = 400) -> float:
    """Median µs the gateway spends framing one streamed chat token with its logprobs
    (gateway.openai.logprobs: token strings, entries, the SSE event), SmolLM2's tokenizer, warm cache."""
    import lanes
    from gateway.openai.frames import StreamFrames
    from gateway.openai.logprobs import RequestScores, TokenStrings
    from lanes import _runtime
    from lanes.api import ScoredChunk

    strings = TokenStrings(_runtime.Tokenizer(str(lanes.smollm2_path())))
    scores = RequestScores(StreamFrames("chatcmpl-x", 0, "m", True, False), strings, report=True, choices=[(None, 1)])
    alts = tuple((1000 + j, -1.0 - j) for j in range(num_top))
    chunk = ScoredChunk(0, (((1000, -1.0), alts),), 0, b" token")
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        scores.events(0, chunk)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times[calls // 4:]) / 1e3


def score_seconds(url: str, model: str, echo: bool, salt: int) -> float:
    # A distinct first word per request: the plain request must compute its whole prompt too
    # (echo never reuses a cached prefix; a plain request would).
    body = {"model": model, "prompt": f"{salt}. " + SCORE_TEXT, "temperature": 0}
    body.update(echo=True, max_tokens=0, logprobs=5) if echo else body.update(max_tokens=1)
    t0 = time.perf_counter()
    r = httpx.post(url + "/completions", json=body, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", default="1,8")
    args = ap.parse_args()
    server = None
    url = args.url
    if url is None:
        server = start_laneserve(args.model, 1, args.threads, 2048)
        url = server.base_url
    try:
        asyncio.run(level(url, args.model, 1, 8, True))  # warm-up
        parts = []
        for c in (int(x) for x in args.concurrency.split(",")):
            plain, scored = [], []
            for _ in range(args.rounds):  # alternating: drift hits both sides alike
                plain.append(asyncio.run(level(url, args.model, c, args.max_tokens, False)))
                scored.append(asyncio.run(level(url, args.model, c, args.max_tokens, True)))
            p, s = statistics.median(plain), statistics.median(scored)
            cost_us = (1 / s - 1 / p) * 1e6  # extra wall time per generated token (all sequences)
            print(f"concurrency {c}: decode tok/s plain {p:.1f}, top_logprobs=20 {s:.1f} "
                  f"(rounds {[round(x, 1) for x in plain]} vs {[round(x, 1) for x in scored]})", file=sys.stderr)
            parts.append(f"c={c} {p:.1f} vs {s:.1f} tok/s (x{s / p:.3f}, +{cost_us:.0f} us/token)")
        plain_s, echo_s = [], []
        for i in range(args.rounds):
            plain_s.append(score_seconds(url, args.model, False, 2 * i))
            echo_s.append(score_seconds(url, args.model, True, 2 * i + 1))
        ps, es = statistics.median(plain_s), statistics.median(echo_s)
        print(f"prompt scoring: plain 1-token completion {ps * 1e3:.0f} ms, echo+max_tokens 0+logprobs 5 "
              f"{es * 1e3:.0f} ms", file=sys.stderr)
        native = {n: native_score_us(n) for n in (49152, 262144)}  # SmolLM2's and Gemma 3's vocabularies
        framing = gateway_format_us()
        print(f"gateway framing of one streamed token with 20 alternatives: {framing:.0f} us", file=sys.stderr)
        print(f"native scoring of one token with 20 alternatives: {native[49152]:.0f} us at n_vocab 49152, "
              f"{native[262144]:.0f} us at 262144", file=sys.stderr)
        print(f"logprobs_bench: decode with top_logprobs=20 vs without: {'; '.join(parts)}; "
              f"native scoring {native[49152]:.0f} us/token (n_vocab 49152), {native[262144]:.0f} us (262144), "
              f"gateway framing {framing:.0f} us/token; "
              f"prompt scoring (echo, {len(SCORE_TEXT)} chars) x{es / ps:.2f} the time of a plain 1-token completion")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
