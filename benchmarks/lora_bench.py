"""LoRA benchmark: decode speed with adapters vs the base model, adapter load time and memory.

    python benchmarks/lora_bench.py [--model smollm2|gemma3] [--rounds 3] [--threads 2]

In-process BatchEngine (what a lane runs), greedy, ignore_eos, 64 tokens per sequence after a short
distinct prompt. Per round, base and adapter runs alternate (the VM is noisy: ratios come from
side-by-side runs, medians over rounds):
  c1  one sequence, base vs a rank-16 all-matrix adapter (F16 halves)     target ≥ 0.85×
  c8  eight sequences, base vs four different rank-16 adapters, two sequences each   target ≥ 0.80×
Decode tok/s = generated tokens / time of the steps after every sequence's first token.
Adapter load: time of BatchEngine.load_adapter (map + check), its tensor bytes, and the lane's
RSS growth after its first use. Ends with ONE summary line.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests" / "csrc" / "model"))

import lanes  # noqa: E402
from lanes import _runtime  # noqa: E402
from lora_gguf import AdapterSpec, Q, cached_adapter  # noqa: E402

TOKENS = 64


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def decode_rate(engine, tok, n_seq: int, adapters_of) -> float:
    """Generated tokens per second over the steps where every sequence decodes."""
    for i in range(n_seq):
        ids = tok.encode(f"Item {i}: a short note about the number {i * 7 + 3}.", True, False)
        engine.add(i + 1, 0, ids, TOKENS, temperature=0.0, ignore_eos=True, adapters=adapters_of(i))
    first = set()
    t0 = None
    tokens = 0
    while engine.has_work():
        events = engine.step()
        if t0 is None and len(first) == n_seq:
            t0 = time.perf_counter()
        for rid, *_ in events:
            if rid in first and t0 is not None:
                tokens += 1
            first.add(rid)
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "gemma3"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    path = Path(lanes.smollm2_path() if args.model == "smollm2" else lanes.gemma3_path())
    files = [cached_adapter(path, AdapterSpec(rank=16, a_type=Q.F16, b_type=Q.F16, seed=60 + k)) for k in range(4)]
    tok = _runtime.Tokenizer(str(path))
    engine = _runtime.BatchEngine(str(path), threads=args.threads, ctx_size=512, num_slots=8, max_batch_tokens=256)
    rss0 = rss_bytes()
    t = time.perf_counter()
    tensor_bytes = engine.load_adapter(1, str(files[0]))
    load_ms = (time.perf_counter() - t) * 1e3
    for k in range(1, 4):
        engine.load_adapter(k + 1, str(files[k]))
    decode_rate(engine, tok, 1, lambda i: [(1, 1.0)])  # warm-up; touches adapter 1's pages
    rss1_mib = (rss_bytes() - rss0) / 2**20

    ratios = {"c1": [], "c8": []}
    rates = {k: [] for k in ("c1 base", "c1 lora", "c8 base", "c8 lora")}
    for r in range(args.rounds):
        for level, n, lora in (("c1", 1, lambda i: [(1, 1.0)]), ("c8", 8, lambda i: [(1 + i % 4, 1.0)])):
            order = ("base", "lora") if r % 2 == 0 else ("lora", "base")
            got = {}
            for kind in order:
                got[kind] = decode_rate(engine, tok, n, (lambda i: []) if kind == "base" else lora)
                rates[f"{level} {kind}"].append(got[kind])
            ratios[level].append(got["lora"] / got["base"])
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"model {args.model}, threads {args.threads}, {args.rounds} rounds, {TOKENS} tokens per sequence")
    for k in rates:
        print(f"  {k:8s} decode tok/s median {med[k]:7.1f}  rounds {', '.join(f'{x:.1f}' for x in rates[k])}")
    print(f"  adapter: rank 16 all matrices F16, file {files[0].stat().st_size / 2**20:.2f} MiB, tensors "
          f"{tensor_bytes / 2**20:.2f} MiB, load {load_ms:.1f} ms, RSS +{rss1_mib:.1f} MiB after 4 loads and first use")
    c1, c8 = statistics.median(ratios["c1"]), statistics.median(ratios["c8"])
    print(f"SUMMARY lora/base decode c1 {c1:.2f}x (target 0.85) c8 4 adapters {c8:.2f}x (target 0.80); "
          f"load {load_ms:.0f} ms; file {files[0].stat().st_size / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
