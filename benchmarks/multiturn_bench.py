"""Multi-turn conversations on fewer slots than conversations: the prompt cache's benchmark, beside llama-server.

    python benchmarks/multiturn_bench.py                          # SmolLM2, 32 conversations x 4 turns
    python benchmarks/multiturn_bench.py --model gemma3 --conversations 16
    python benchmarks/multiturn_bench.py --servers cache,llama --rounds 3   # beside llama-server only

Load: CONVERSATIONS chat conversations, each with its own system prompt of 400-800 tokens (seeded
words; the first word differs, so no two share a prefix beyond the template's opening), TURNS
turns each. Turn t of every conversation is sent before turn t+1 of any, CONCURRENCY at a time
(streamed, temperature 0, MAX_TOKENS per answer), so with 8 slots each conversation's slot has
gone to others by its next turn. The same load runs, one server at a time, 8 slots, THREADS threads,
against each of --servers: laneserve with `--cache-ram-mib 1024` ("cache") and with `--cache-ram-mib 0`
("nocache"), and llama.cpp's llama-server ("llama": `--parallel 8 -t THREADS -c 8*LLAMA_SLOT_CTX`, its
default `--cache-ram`; -c is split among the slots). With --rounds N the servers alternate round by round
(machine noise hits each alike) and the figures are medians over rounds.

Per server: TTFT p50 of turns 2-TURNS (request sent -> first content delta), aggregate tok/s
(completion tokens / wall time of all turns) and the share of turns 2-TURNS prompt tokens the server
reported cached (usage.prompt_tokens_details.cached_tokens; llama-server's timings.cache_n when its usage
has none). Prints ONE summary line with the ratios cache/nocache and cache/llama.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from batch_bench import DEFAULT_LLAMA_SERVER  # noqa: E402
from gateway.cli.bench.launcher import free_port  # noqa: E402
from gateway.cli.bench.server import ProcessServer, StartedServer  # noqa: E402
from lanes import find_model_file  # noqa: E402

_WORDS = ("river stone lamp garden winter paper violin harbor lantern meadow copper signal orchard "
          "valley thunder marble candle window forest silver engine bridge castle ribbon").split()
QUESTIONS = ["Where are you right now?", "What do you see there?", "Why does it matter to you?",
             "What will you do next?", "Who else is with you?"]


def system_prompt(rng: random.Random, index: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randrange(390, 790))]  # 400-800 tokens (SmolLM2, Gemma 3)
    return f"Conversation {index}. You remember these words in order: " + " ".join(words) + "."


async def turn(client: httpx.AsyncClient, model: str, history: list, max_tokens: int) -> tuple[float, str, dict]:
    """(TTFT s, answer, usage) of one streamed chat turn."""
    body = {"model": model, "messages": history, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    ttft, text, usage = None, [], {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"status {r.status_code}: {(await r.aread())[:200]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            if event.get("timings"):  # llama-server: prompt_n computed, cache_n reused
                usage["_timings"] = event["timings"]
            for choice in event.get("choices", ()):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    ttft = time.monotonic() - t0 if ttft is None else ttft
                    text.append(piece)
    return (ttft if ttft is not None else time.monotonic() - t0), "".join(text), usage


def cached_tokens(usage: dict) -> int:
    details = usage.get("prompt_tokens_details") or {}
    if "cached_tokens" in details:
        return details["cached_tokens"]
    return (usage.get("_timings") or {}).get("cache_n", 0)


async def run_load(url: str, model: str, conversations: int, turns: int, concurrency: int, max_tokens: int) -> dict:
    rng = random.Random(11)
    histories = [[{"role": "system", "content": system_prompt(rng, i)}] for i in range(conversations)]
    later_ttfts, tokens, cached, prompt = [], 0, 0, 0
    turn_usage: list[tuple[int, int, int, int]] = []  # (conversation, turn, prompt tokens, cached tokens)
    sem = asyncio.Semaphore(concurrency)
    # A new connection per request: llama-server (cpp-httplib) drops reused keep-alive connections
    # under this load ("Server disconnected without sending a response"); loopback connects are cheap.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=600.0, limits=limits) as client:
        t0 = time.monotonic()
        for t in range(turns):
            async def one(index: int, history: list) -> None:
                nonlocal tokens, cached, prompt
                async with sem:
                    history.append({"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]})
                    ttft, answer, usage = await turn(client, model, history, max_tokens)
                    history.append({"role": "assistant", "content": answer})
                    tokens += usage.get("completion_tokens", 0)
                    turn_usage.append((index, t, usage.get("prompt_tokens", 0), cached_tokens(usage)))
                    if t > 0:
                        later_ttfts.append(ttft)
                        cached += cached_tokens(usage)
                        prompt += usage.get("prompt_tokens", 0)
            await asyncio.gather(*(one(i, h) for i, h in enumerate(histories)))
        wall_s = time.monotonic() - t0
    return {"ttft_p50_s": statistics.median(later_ttfts), "tok_s": tokens / wall_s, "wall_s": wall_s,
            "cached_share": cached / max(prompt, 1), "turn_usage": sorted(turn_usage)}


def start_server(kind: str, args: argparse.Namespace) -> ProcessServer:
    if kind == "llama":
        port = free_port()
        cmd = [args.llama_server, "-m", str(find_model_file(args.model)), "--parallel", "8", "-t", str(args.threads),
               "-c", str(8 * args.llama_slot_ctx), "--host", "127.0.0.1", "--port", str(port)]
        return ProcessServer("llama-server", cmd, port, "/health", startup_timeout_s=240).start()
    cache_mib = "1024" if kind == "cache" else "0"
    return StartedServer(args.model, ["--threads", str(args.threads), "--parallel", "8", "--ctx-size", "2048",
                                      "--cache-ram-mib", cache_mib]).start()


def ratios(a: dict, b: dict) -> str:
    return f"TTFT {a['ttft_p50_s'] / b['ttft_p50_s']:.2f}x, tok/s {a['tok_s'] / b['tok_s']:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--servers", default="cache,nocache,llama", help="any of cache, nocache, llama")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--llama-server", default=DEFAULT_LLAMA_SERVER, help="llama-server binary")
    parser.add_argument("--llama-slot-ctx", type=int, default=2048, help="llama-server -c is 8 times this")
    args = parser.parse_args()
    kinds = args.servers.split(",")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for rnd in range(args.rounds):
        for kind in kinds:
            server = start_server(kind, args)
            try:
                r = asyncio.run(run_load(server.base_url, args.model, args.conversations, args.turns,
                                         args.concurrency, args.max_tokens))
            finally:
                server.stop()
            r["load"] = os.getloadavg()[0]
            runs[kind].append(r)
            print(f"round {rnd + 1} {kind:>8}: turns 2-{args.turns} TTFT p50 {r['ttft_p50_s'] * 1000:.0f} ms, "
                  f"{r['tok_s']:.1f} tok/s, wall {r['wall_s']:.1f} s, cached {100 * r['cached_share']:.0f}% of turns "
                  f"2-{args.turns} prompt tokens, load average {r['load']:.1f}", flush=True)
    med = {k: {key: statistics.median(r[key] for r in rs) for key in ("ttft_p50_s", "tok_s", "cached_share")}
           for k, rs in runs.items()}
    parts = [f"{k}: TTFT p50 {m['ttft_p50_s'] * 1000:.0f} ms, {m['tok_s']:.1f} tok/s, cached "
             f"{100 * m['cached_share']:.0f}%" for k, m in med.items()]
    for a, b in (("cache", "nocache"), ("cache", "llama")):
        if a in med and b in med:
            parts.append(f"{a}/{b}: {ratios(med[a], med[b])}")
    print(f"multiturn {args.model}, {args.conversations} conversations x {args.turns} turns, c{args.concurrency}, "
          f"8 slots, {args.threads} threads, median of {args.rounds} round(s): " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
