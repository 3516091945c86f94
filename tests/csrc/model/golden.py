"""Loading the llama.cpp golden data copied into tests/data/golden and comparing against it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
SMOLLM2 = "smollm2-135m-instruct-q4_1"
GEMMA3 = "gemma3-270m-q4_k_m"


@dataclass(frozen=True)
class Gates:
    """How far another implementation may be from llama.cpp on a model: statistical, over many
    positions, never elementwise (the golden README's "Numerical variation")."""
    min_positions: int     # teacher-forced positions, so that one near-tie weighs ~0.1%
    min_top1: float        # top-1 agreement over them
    max_kl: float          # mean KL(llama.cpp ‖ ours) over llama.cpp's top-20
    margin: float          # greedy: llama.cpp's top-1/top-2 logit gap below which another pick is fine
    min_decisive: int      # greedy steps at least `margin` apart
    min_greedy: float      # agreement over those steps


GATES = {
    SMOLLM2: Gates(1000, 0.96, 0.006, 0.5, 300, 0.99),
    GEMMA3: Gates(1000, 0.95, 0.02, 1.0, 200, 0.98),  # far more rounding-sensitive (llama.cpp's own KL ≈ 0.018)
}


def load(model_dir: str, kind: str) -> list[dict]:
    with open(GOLDEN / model_dir / "dev" / f"{kind}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def compare_logits(model, records: list[dict]) -> tuple[float, float, int]:
    """(top-1 agreement, mean KL(golden ‖ ours) over the golden top-20, positions)."""
    agree, kls = 0, []
    for rec in records:
        ours = log_softmax(model.logits(rec["ids"]))
        for pos in rec["positions"]:
            top = pos["top"]
            ids = np.array([t[0] for t in top])
            lp_gold = np.array([t[1] for t in top])
            lp_ours = ours[pos["pos"], ids]
            kls.append(float(np.sum(np.exp(lp_gold) * (lp_gold - lp_ours))))
            agree += int(np.argmax(ours[pos["pos"]]) == top[0][0])
    return agree / len(kls), float(np.mean(kls)), len(kls)


def first_near_tie(margins: list[float], threshold: float) -> int:
    for i, m in enumerate(margins):
        if m < threshold:
            return i
    return len(margins)


def decisive_greedy_agreement(model, records: list[dict], margin: float) -> tuple[int, int]:
    """Teacher-forces prompt + golden greedy ids; (agreeing, decisive) over the steps whose golden
    top-1/top-2 margin is at least `margin`."""
    decisive = agree = 0
    for rec in records:
        ids, gen = rec["ids"], rec["greedy_ids"]
        logits = model.logits(ids + gen[:-1])
        for step, (token, m) in enumerate(zip(gen, rec["margins"])):
            if m >= margin:
                decisive += 1
                agree += int(np.argmax(logits[len(ids) - 1 + step]) == token)
    return agree, decisive
