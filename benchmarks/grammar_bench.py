"""Grammar benchmark: constrained vs free decoding on the lane's engine, in the same run.

    python benchmarks/grammar_bench.py [--model PATH] [--threads 2] [--tokens 128] [--rounds 3]

1. Compile time of the structured-output battery (tests/data/json_schemas.py): the gateway's side
   (schema → llguidance grammar, validated) and the lane's side (first add() of each grammar:
   llguidance builds the parser for our vocabulary; a repeat is a cached clone), ms per schema.
2. Decode tok/s at concurrency 1 and 8 on one BatchEngine (the lane's engine, no HTTP): free
   sequences (ignore_eos, `--tokens` each) against constrained ones of the same length. Two
   grammars: a regex most tokens satisfy (the cheap path: each sampled token checked alone) and a
   JSON schema whose structure rejects many free picks (the full mask computed, then a resample).
   Rounds alternate free/constrained; the best round of each counts (the machine may be shared).

Prints one summary line: constrained/free decode ratios (target ≥ 0.90) and compile times.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.features.structured import compile_grammar, json_schema_grammar  # noqa: E402
from lanes import _runtime, grammar  # noqa: E402
from lanes.model_files import smollm2_path  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "data"))
from json_schemas import SCHEMAS  # noqa: E402

PROMPT = "<|im_start|>user\nWrite a long list of facts about the ocean.<|im_end|>\n<|im_start|>assistant\n"


def grammars(tokens: int) -> dict[str, str]:
    # Both allow at least `tokens` tokens, so each sequence runs to max_tokens like the free one.
    words = compile_grammar("regex", r"[A-Za-z ,.'\n]{%d,%d}" % (tokens * 2, tokens * 8), "bench")
    facts = json_schema_grammar({"type": "array", "minItems": tokens, "maxItems": tokens,
                                 "items": {"type": "object", "properties": {"fact": {"type": "string", "maxLength": 12},
                                                                            "n": {"type": "integer", "minimum": 0,
                                                                                  "maximum": 99}},
                                           "required": ["fact", "n"]}}, "bench")
    return {"regex": words, "json": facts}


def run(engine, prompt_ids, n_seqs: int, tokens: int, g: str | None, rid0: int) -> tuple[float, int]:
    """Decode tok/s of n_seqs sequences (prefill excluded: timing starts at the first token)."""
    kw = {"grammar": g} if g else {"ignore_eos": True}
    for i in range(n_seqs):
        # Different seeds and first tokens: no two sequences are identical.
        engine.add(rid0 + i, 0, prompt_ids, tokens, [], temperature=0.8, seed=rid0 + i, **kw)
    done_tokens = 0
    t_first = None
    while engine.has_work():
        events = engine.step()
        now = time.perf_counter()
        for rid, _, _, finished, _, stats in events:
            t_first = t_first or now
            if finished:
                done_tokens += stats["completion_tokens"]
    elapsed = time.perf_counter() - t_first
    return (done_tokens - n_seqs) / elapsed, done_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    grammar.load()
    path = args.model or str(smollm2_path())

    t0 = time.perf_counter()
    gateway_ms = []
    compiled = []
    for _, _, schema in SCHEMAS:
        t = time.perf_counter()
        compiled.append(json_schema_grammar(schema, "bench"))
        gateway_ms.append((time.perf_counter() - t) * 1e3)
    engine = _runtime.BatchEngine(path, threads=args.threads, num_slots=8, max_batch_tokens=256)
    ids = list(_runtime.Tokenizer(path).encode(PROMPT, True, True))
    lane_ms, clone_ms = [], []
    for i, g in enumerate(compiled):
        t = time.perf_counter()
        engine.add(10_000 + i, 0, ids, 1, [], grammar=g)
        lane_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        engine.add(20_000 + i, 0, ids, 1, [], grammar=g)
        clone_ms.append((time.perf_counter() - t) * 1e3)
    while engine.has_work():
        engine.step()
    print(f"compile ({len(SCHEMAS)} schemas): gateway median {statistics.median(gateway_ms):.2f} ms "
          f"(max {max(gateway_ms):.1f}), lane first use median {statistics.median(lane_ms):.2f} ms "
          f"(max {max(lane_ms):.1f}), repeat (cached) median {statistics.median(clone_ms):.3f} ms")

    gs = grammars(args.tokens)
    best: dict[tuple[str, int], float] = {}
    rid = 1
    for r in range(args.rounds):
        for conc in (1, 8):
            for name in ("free", "regex", "json"):
                tps, _ = run(engine, ids, conc, args.tokens, gs.get(name), rid)
                rid += conc
                best[(name, conc)] = max(best.get((name, conc), 0.0), tps)
                print(f"round {r} c{conc} {name:5s} {tps:7.1f} tok/s", flush=True)
    ratios = {f"{n}_c{c}": best[(n, c)] / best[("free", c)] for n in ("regex", "json") for c in (1, 8)}
    print(json.dumps({k: round(v, 3) for k, v in ratios.items()}))
    print(f"SUMMARY grammar_bench: constrained/free decode c1 regex {ratios['regex_c1']:.2f} json {ratios['json_c1']:.2f}; "
          f"c8 regex {ratios['regex_c8']:.2f} json {ratios['json_c8']:.2f} (target >= 0.90); "
          f"free c1 {best[('free', 1)]:.0f} c8 {best[('free', 8)]:.0f} tok/s; compile median gateway "
          f"{statistics.median(gateway_ms):.1f} ms + lane {statistics.median(lane_ms):.1f} ms, cached "
          f"{statistics.median(clone_ms):.2f} ms; total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
