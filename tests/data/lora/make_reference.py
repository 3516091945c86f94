"""Regenerates the llama.cpp reference outputs of tests/csrc/model/test_lora_golden.py.

Needs llama-cpp-python 0.3.36 (llama.cpp 0c1e57098, the tree the golden data come from), numpy and gguf in
the running interpreter, plus the two real models (lanes.smollm2_path(), lanes.gemma3_path()):

    /path/to/llama-venv/bin/python tests/data/lora/make_reference.py --smollm2 FILE --gemma3 FILE

For every case of lora_gguf.REAL_CASES it writes the adapter (deterministic from its spec and seed), runs
llama.cpp with `Llama(model, lora_path=adapter, lora_scale=scale, logits_all=True)` over each prompt
(teacher-forced), and stores per position the top-20 log-probabilities, plus a 16-token greedy
continuation with its top-1/top-2 margins, as <case>.jsonl next to this script.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "csrc" / "model"))
from lora_gguf import REAL_CASES, write_adapter  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three most important inventions of the twentieth century are",
]
TOP = 20
GREEDY = 16


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", required=True)
    ap.add_argument("--gemma3", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from llama_cpp import Llama

    bases = {"smollm2": args.smollm2, "gemma3": args.gemma3}
    for case, (model, spec, scale) in REAL_CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            adapter = Path(tmp) / f"{case}.gguf"
            write_adapter(adapter, Path(bases[model]), spec)
            llm = Llama(bases[model], lora_path=str(adapter), lora_scale=scale, logits_all=True, n_ctx=512,
                        n_threads=args.threads, n_batch=512, verbose=False, seed=0)
            lines = []
            for prompt in PROMPTS:
                ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
                llm.reset()
                llm.eval(ids)
                lp = log_softmax(np.array(llm.scores[: len(ids)]))
                positions = []
                for pos in range(len(ids)):
                    top = np.argsort(-lp[pos])[:TOP]
                    positions.append({"pos": pos, "top": [[int(t), float(lp[pos, t])] for t in top]})
                greedy, margins = [], []
                last = lp[-1]
                for _ in range(GREEDY):
                    order = np.argsort(-last)[:2]
                    greedy.append(int(order[0]))
                    margins.append(float(last[order[0]] - last[order[1]]))
                    llm.eval([int(order[0])])
                    last = log_softmax(np.array(llm.scores[llm.n_tokens - 1]))
                lines.append({"prompt": prompt, "ids": ids, "positions": positions, "greedy_ids": greedy,
                              "margins": margins})
            del llm
        out = HERE / f"{case}.jsonl"
        out.write_text("".join(json.dumps(rec) + "\n" for rec in lines), encoding="utf-8")
        print(f"{case}: {sum(len(r['positions']) for r in lines)} positions -> {out.name}")


if __name__ == "__main__":
    main()
