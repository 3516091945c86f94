"""TTFT of a repeated image in a second turn against the first, through a real server: `laneserve serve`
with Gemma 3 270M and a random-weight gemma3 projector (vision_bench.py's Gemma-3-style SigLIP: 448 px,
1024 patches, --layers blocks, 64 embeddings per image). Per conversation (a new picture each): turn 1 is
the image and a question; turn 2 repeats turn 1, the answer and a new question. Both are streamed (OpenAI
chat completions, greedy) and timed to the first byte of content. The second turn should neither encode
the image again (the gateway's embedding LRU, keyed by the pixels' hash) nor prefill it again (the lane
reuses the slot's prefix / the prompt cache, whose image ids derive from that hash).

    python benchmarks/vision_ttft_bench.py [--conversations 5] [--layers 6] [--threads 2]

Prints one line per conversation and a summary with the median ratio, all from the same run.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "csrc" / "vision"))
import mmproj_gguf  # noqa: E402
from vision_bench import BENCH  # noqa: E402

from gateway.cli.bench.server import StartedServer  # noqa: E402

QUESTIONS = ("Describe this image.", "Which colours are in it?")


def png_data_uri(seed: int) -> str:
    """A different noise picture per conversation (640 × 480: letterboxed into the encoder's square)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def streamed_turn(client: httpx.Client, messages: list[dict], max_tokens: int) -> tuple[float, str, dict]:
    """(seconds to the first content byte, the whole answer, usage) of one streamed chat completion."""
    body = {"model": "g", "messages": messages, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, parts, usage = None, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            choices = chunk.get("choices") or []
            text = choices[0].get("delta", {}).get("content") if choices else None
            if text:
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                parts.append(text)
    if ttft is None:
        raise RuntimeError("the stream carried no content")
    return ttft, "".join(parts), usage


def cached(usage: dict) -> int | None:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    import lanes

    spec = dataclasses.replace(BENCH["gemma3"], n_layer=args.layers)
    with tempfile.TemporaryDirectory() as tmp:
        mmproj = mmproj_gguf.write_mmproj(Path(tmp) / "gemma3.gguf", spec)
        server = StartedServer(f"g={lanes.gemma3_path()}", ["--mmproj", f"g={mmproj}", "--threads", str(args.threads),
                                                             "--parallel", "2", "--log-level", "warning"]).start()
        try:
            firsts, seconds = [], []
            with httpx.Client(base_url=server.base_url, timeout=300) as client:
                streamed_turn(client, [{"role": "user", "content": "Hello"}], 4)  # warm-up: lanes and gateway
                for c in range(args.conversations):
                    turn1 = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_data_uri(c)}},
                                                          {"type": "text", "text": QUESTIONS[0]}]}]
                    t1, answer, _ = streamed_turn(client, turn1, args.max_tokens)
                    turn2 = turn1 + [{"role": "assistant", "content": answer}, {"role": "user", "content": QUESTIONS[1]}]
                    t2, _, usage = streamed_turn(client, turn2, args.max_tokens)
                    firsts.append(t1)
                    seconds.append(t2)
                    print(f"conversation {c + 1}: TTFT turn 1 {t1 * 1e3:7.1f} ms  turn 2 {t2 * 1e3:7.1f} ms  "
                          f"ratio {t2 / t1:.3f}  (turn 2: {cached(usage)} of {usage.get('prompt_tokens')} prompt tokens cached)",
                          flush=True)
        finally:
            server.stop()
    ratios = [b / a for a, b in zip(firsts, seconds)]
    print(f"vision TTFT gemma3 270M + {spec.image_size}px {spec.n_layer}-block projector, {args.threads} threads, "
          f"{args.conversations} conversations: turn 1 median {statistics.median(firsts) * 1e3:.0f} ms, repeated image "
          f"in turn 2 median {statistics.median(seconds) * 1e3:.0f} ms, ratio median {statistics.median(ratios):.3f}x "
          f"(max {max(ratios):.3f}x; target <= 0.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
