"""The prefix cache's disk tier (--prefix-cache-dir): time to first token of a ~600-token prompt, cold,
read back from disk after a restart, and from RAM.

    python benchmarks/prefix_disk_bench.py                    # SmolLM2 and Gemma 3, 5 prompts each
    python benchmarks/prefix_disk_bench.py --models smollm2 --prompts 3

Per model: a server (THREADS threads, --parallel 2, an empty --prefix-cache-dir) gets PROMPTS distinct
~600-token prompts (seeded words; the first word differs, so they share no page), each twice: the first
is cold (nothing cached), the second a RAM hit (its pages are in the prefix tree). The server stops and
a new one starts on the same directory: each prompt once more is a disk hit (RAM empty, its whole pages
read back from the files the first server wrote). Streamed /v1/completions, max_tokens 1, temperature 0;
TTFT = request sent -> first token's event. Medians over the prompts. Also, in process (the first
model's BatchEngine, THREADS threads): the duration of the step that ends a ~600-token prompt's prefill
with and without a disk tier, alternating, median of 10 prompts — where the token loop copies the
prompt's whole pages out for the writer. Prints ONE summary line.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.cli.bench.server import StartedServer  # noqa: E402
from lanes import Model, _runtime, find_model_file  # noqa: E402

_WORDS = ("river stone lamp garden winter paper violin harbor lantern meadow copper signal orchard "
          "valley thunder marble candle window forest silver engine bridge castle ribbon").split()


def prompt_text(index: int) -> str:
    rng = random.Random(1000 + index)
    words = " ".join(rng.choice(_WORDS) for _ in range(560))  # ~600 tokens with both tokenizers
    return f"Story {index}. {words}\nThe next word is"


def ttft_s(client: httpx.Client, model: str, prompt: str) -> tuple[float, int, int]:
    """(TTFT s, prompt tokens, cached tokens) of one streamed completion."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    first, usage = None, {}
    with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("choices") and first is None:
                first = time.monotonic() - t0
            usage = event.get("usage") or usage
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return (first if first is not None else time.monotonic() - t0), usage.get("prompt_tokens", 0), cached


def serve_prompts(model: str, cache_dir: str, threads: int, texts: list[str], repeats: int) -> list[list[tuple]]:
    """A server on cache_dir (--parallel 2), each text sent `repeats` times in a row, stopped:
    [text][repeat] -> ttft_s()."""
    srv = StartedServer(model, ["--threads", str(threads), "--parallel", "2", "--ctx-size", "2048",
                                "--prefix-cache-dir", cache_dir]).start()
    try:
        with httpx.Client(base_url=srv.base_url, timeout=600.0) as client:
            ttft_s(client, model, "Warm up.")
            return [[ttft_s(client, model, text) for _ in range(repeats)] for text in texts]
    finally:
        srv.stop()


def measure(model: str, prompts: int, threads: int) -> dict:
    texts = [prompt_text(i) for i in range(prompts)]
    with tempfile.TemporaryDirectory(prefix="prefix-disk-bench-") as cache_dir:
        first = serve_prompts(model, cache_dir, threads, texts, 2)  # cold, then a RAM hit
        second = serve_prompts(model, cache_dir, threads, texts, 1)  # a restart: a disk hit
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return {"cold_ms": ms([r[0][0] for r in first]), "ram_ms": ms([r[1][0] for r in first]),
            "disk_ms": ms([r[0][0] for r in second]), "prompt_tokens": int(statistics.median(r[0][1] for r in first)),
            "disk_cached": int(statistics.median(r[0][2] for r in second))}


def last_prefill_step_ms(model: str, threads: int, rounds: int = 10) -> tuple[float, float]:
    """(without, with a disk tier) median duration of the step that ends a prompt's prefill."""
    path = str(find_model_file(model))
    tok = Model(path, threads=1, ctx_size=256)
    with tempfile.TemporaryDirectory(prefix="prefix-disk-bench-") as cache_dir:
        engines = {d: _runtime.BatchEngine(path, threads=threads, ctx_size=1024, num_slots=2, max_batch_tokens=128,
                                           prefix_cache_dir=d) for d in ("", cache_dir)}
        steps = {d: [] for d in engines}
        for i in range(rounds):
            ids = tok.tokenize(prompt_text(100 + i), True, True)[:600]
            for d in sorted(engines, reverse=bool(i % 2)):
                engines[d].add(i, 0, ids, 1, temperature=0.0)
                while engines[d].has_work():
                    t0 = time.perf_counter()
                    engines[d].step()
                    last = time.perf_counter() - t0
                steps[d].append(last * 1000)
        del engines
    return statistics.median(steps[""]), statistics.median(steps[cache_dir])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    parts = []
    for model in args.models.split(","):
        r = measure(model, args.prompts, args.threads)
        parts.append(f"{model} {r['prompt_tokens']}-token prompt TTFT p50 cold/disk/RAM {r['cold_ms']:.0f}/"
                     f"{r['disk_ms']:.0f}/{r['ram_ms']:.0f} ms (disk hit cached {r['disk_cached']})")
    off_ms, on_ms = last_prefill_step_ms(args.models.split(",")[0], args.threads)
    load = os.getloadavg()[0]
    print(f"prefix_disk_bench: {'; '.join(parts)}; last prefill step of a 600-token prompt without/with the disk "
          f"tier {off_ms:.0f}/{on_ms:.0f} ms; {args.threads} threads, load {load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
