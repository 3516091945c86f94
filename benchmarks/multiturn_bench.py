"""Multi-turn conversations on fewer slots than conversations: the prompt cache's benchmark.

    python benchmarks/multiturn_bench.py                          # SmolLM2, 32 conversations x 4 turns
    python benchmarks/multiturn_bench.py --model gemma3 --conversations 16

Load: CONVERSATIONS chat conversations, each with its own system prompt of 400-800 tokens (seeded
words; the first word differs, so no two share a prefix beyond the template's opening), TURNS
turns each. Turn t of every conversation is sent before turn t+1 of any, CONCURRENCY at a time
(streamed, temperature 0, MAX_TOKENS per answer), so with 8 slots each conversation's slot has
gone to others by its next turn. The same load runs against laneserve with `--cache-ram-mib 1024`
and with `--cache-ram-mib 0` (one server at a time, 8 slots, 2 threads).

Per server: TTFT p50 of turns 2-TURNS (request sent -> first content delta), aggregate tok/s
(completion tokens / wall time of all turns) and the cached_tokens the server reported for turns
2-TURNS over their prompt tokens. Prints ONE summary line with the cache-on / cache-off ratios.
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
from gateway.cli.bench.server import StartedServer  # noqa: E402

_WORDS = ("river stone lamp garden winter paper violin harbor lantern meadow copper signal orchard "
          "valley thunder marble candle window forest silver engine bridge castle ribbon").split()
QUESTIONS = ["Where are you right now?", "What do you see there?", "Why does it matter to you?",
             "What will you do next?", "Who else is with you?"]


def system_prompt(rng: random.Random, index: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randrange(300, 600))]  # ~400-800 tokens
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
            for choice in event.get("choices", ()):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    ttft = time.monotonic() - t0 if ttft is None else ttft
                    text.append(piece)
    return (ttft if ttft is not None else time.monotonic() - t0), "".join(text), usage


async def run_load(url: str, model: str, conversations: int, turns: int, concurrency: int, max_tokens: int) -> dict:
    rng = random.Random(11)
    histories = [[{"role": "system", "content": system_prompt(rng, i)}] for i in range(conversations)]
    later_ttfts, tokens, cached, prompt = [], 0, 0, 0
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600.0) as client:
        t0 = time.monotonic()
        for t in range(turns):
            async def one(history: list) -> None:
                nonlocal tokens, cached, prompt
                async with sem:
                    history.append({"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]})
                    ttft, answer, usage = await turn(client, model, history, max_tokens)
                    history.append({"role": "assistant", "content": answer})
                    tokens += usage.get("completion_tokens", 0)
                    if t > 0:
                        later_ttfts.append(ttft)
                        cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                        prompt += usage.get("prompt_tokens", 0)
            await asyncio.gather(*(one(h) for h in histories))
        wall_s = time.monotonic() - t0
    return {"ttft_p50_s": statistics.median(later_ttfts), "tok_s": tokens / wall_s, "wall_s": wall_s,
            "cached_share": cached / max(prompt, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    results = {}
    for label, cache_mib in (("cache", "1024"), ("no cache", "0")):
        server = StartedServer(args.model, ["--threads", str(args.threads), "--parallel", "8", "--ctx-size", "2048",
                                            "--cache-ram-mib", cache_mib]).start()
        try:
            results[label] = asyncio.run(run_load(server.base_url, args.model, args.conversations, args.turns,
                                                  args.concurrency, args.max_tokens))
        finally:
            server.stop()
        r = results[label]
        print(f"{label:>8}: turns 2-{args.turns} TTFT p50 {r['ttft_p50_s'] * 1000:.0f} ms, {r['tok_s']:.1f} tok/s, "
              f"wall {r['wall_s']:.1f} s, cached {100 * r['cached_share']:.0f}% of turns 2-{args.turns} prompt tokens")
    on, off = results["cache"], results["no cache"]
    print(f"multiturn {args.model}, {args.conversations} conversations x {args.turns} turns, c{args.concurrency}, "
          f"8 slots, {args.threads} threads: TTFT p50 turns 2-{args.turns} {on['ttft_p50_s'] * 1000:.0f} ms vs "
          f"{off['ttft_p50_s'] * 1000:.0f} ms without the prompt cache ({on['ttft_p50_s'] / off['ttft_p50_s']:.2f}x), "
          f"{on['tok_s']:.1f} vs {off['tok_s']:.1f} tok/s ({on['tok_s'] / off['tok_s']:.2f}x), "
          f"cached {100 * on['cached_share']:.0f}% vs {100 * off['cached_share']:.0f}% of later prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
