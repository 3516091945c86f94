"""Regenerates the llama.cpp reference outputs of tests/csrc/model/test_lora_golden.py.

Needs llama-cpp-python 0.3.36 (llama.cpp 0c1e57098, the tree the golden data come from), numpy and gguf in
the running interpreter, plus the two real models (lanes.smollm2_path(), lanes.gemma3_path()):

    /path/to/llama-venv/bin/python tests/data/lora/make_reference.py --smollm2 FILE --gemma3 FILE

The prompts are the golden tests' own (tests/data/golden/<model>/dev): the 12 logits prompts (>1000
positions per model) and the 10 greedy prompts, fed as the golden token ids, so each adapter case is gated
over as many positions as the base model's golden tests. For every case of lora_gguf.REAL_CASES it writes
the adapter (deterministic from its spec and seed) and runs llama.cpp with
`Llama(model, lora_path=adapter, lora_scale=scale, logits_all=True)` as the golden data were made
(n_ctx 1024, n_batch 1024, 2 threads, no flash attention, full SWA cache): each logits prompt in one
batch, keeping per position the top-20 log-probabilities (6 decimals); each greedy prompt in one batch then
one token per decode, up to 64 tokens or an end-of-generation token (kept as the last id), with the top-1 -
top-2 logit margin of each step. Output: <case>.jsonl next to this script, logits records first.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "golden"
GOLDEN_DIRS = {"smollm2": "smollm2-135m-instruct-q4_1", "gemma3": "gemma3-270m-q4_k_m"}
sys.path.insert(0, str(HERE.parents[1] / "csrc" / "model"))
from lora_gguf import REAL_CASES, write_adapter  # noqa: E402

TOP = 20
GREEDY_MAX = 64


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def golden_prompts(model: str, kind: str) -> list[dict]:
    path = GOLDEN / GOLDEN_DIRS[model] / "dev" / f"{kind}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def logits_record(llm, rec: dict) -> dict:
    ids = rec["ids"]
    llm.reset()
    llm.eval(ids)
    lp = log_softmax(np.array(llm.scores[: len(ids)]))
    positions = []
    for pos in range(len(ids)):
        top = np.argsort(-lp[pos], kind="stable")[:TOP]
        positions.append({"pos": pos, "top": [[int(t), round(float(lp[pos, t]), 6)] for t in top]})
    return {"kind": "logits", "name": rec["name"], "ids": ids, "positions": positions}


def greedy_record(llm, rec: dict, is_eog) -> dict:
    ids = rec["ids"]
    llm.reset()
    llm.eval(ids)
    greedy, margins = [], []
    raw = np.array(llm.scores[len(ids) - 1], dtype=np.float64)
    while len(greedy) < GREEDY_MAX:
        order = np.argsort(-raw, kind="stable")[:2]  # a tie goes to the lower id, as llama.cpp's argmax
        token = int(order[0])
        greedy.append(token)
        margins.append(round(float(raw[order[0]] - raw[order[1]]), 5))
        if is_eog(token):
            break
        llm.eval([token])
        raw = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    return {"kind": "greedy", "name": rec["name"], "ids": ids, "greedy_ids": greedy, "margins": margins}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", required=True)
    ap.add_argument("--gemma3", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--case", action="append", help="only these cases (default: all)")
    args = ap.parse_args()
    import llama_cpp
    from llama_cpp import Llama

    bases = {"smollm2": args.smollm2, "gemma3": args.gemma3}
    for case, (model, spec, scale) in REAL_CASES.items():
        if args.case and case not in args.case:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            adapter = Path(tmp) / f"{case}.gguf"
            write_adapter(adapter, Path(bases[model]), spec)
            llm = Llama(bases[model], lora_path=str(adapter), lora_scale=scale, logits_all=True, n_ctx=1024,
                        n_batch=1024, n_ubatch=512, n_threads=args.threads, n_threads_batch=args.threads,
                        flash_attn=False, swa_full=True, verbose=False, seed=0)
            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            is_eog = lambda t: bool(llama_cpp.llama_vocab_is_eog(vocab, t))  # noqa: E731
            lines = [logits_record(llm, rec) for rec in golden_prompts(model, "logits")]
            lines += [greedy_record(llm, rec, is_eog) for rec in golden_prompts(model, "greedy")]
            del llm
        out = HERE / f"{case}.jsonl"
        out.write_text("".join(json.dumps(rec) + "\n" for rec in lines), encoding="utf-8")
        n_pos = sum(len(r["positions"]) for r in lines if r["kind"] == "logits")
        n_steps = sum(len(r["greedy_ids"]) for r in lines if r["kind"] == "greedy")
        print(f"{case}: {n_pos} positions, {n_steps} greedy steps -> {out.name}")


if __name__ == "__main__":
    main()
