"""Gemma 3 270M (gemma3 family: SWA, sandwich norms, GeGLU, MQA, SPM) against llama.cpp's golden
dev outputs. Gemma is far more rounding-sensitive than SmolLM2 (golden README: llama.cpp's own
execution paths disagree by KL ≈ 0.018), so the project gates are top-1 ≥ 95%, KL ≤ 0.02."""
import numpy as np
import pytest

import lanes
from lanes import Model

from golden import GATES, decisive_greedy_agreement, GEMMA3, compare_logits, first_near_tie, load

GATE = GATES[GEMMA3]
MARGIN = GATE.margin  # Gemma's step-vs-batch variation is ~1.2–1.4 at p99


@pytest.fixture(scope="module")
def model():
    return Model(lanes.gemma3_path(), threads=2, ctx_size=2048)


def test_model_facts(model):
    assert model.n_vocab == 262144 and model.arch == "gemma3" and model.bos_id == 2
    assert {1, 106} <= set(model.eog_ids)


def test_capital_of_france_reference(model):
    ids = [2, 818, 5279, 529, 7001, 563]
    assert model.tokenize("The capital of France is") == ids
    row = model.logits(ids)[-1].astype(np.float64)
    p = np.exp(row - row.max())
    p /= p.sum()
    top5 = list(np.argsort(-p)[:5])
    assert model.detokenize([int(top5[0])]) == " the"
    assert 0.05 < p[model.tokenize(" Paris", add_special=False)[0]] < 0.13


def test_teacher_forced_logits_match_llama_cpp(model):
    top1, kl, n = compare_logits(model, load(GEMMA3, "logits"))
    assert n > GATE.min_positions
    assert top1 >= GATE.min_top1, top1
    assert kl <= GATE.max_kl, kl


def test_greedy_argmax_agrees_where_golden_is_decisive(model):
    agree, decisive = decisive_greedy_agreement(model, load(GEMMA3, "greedy"), MARGIN)
    assert decisive > GATE.min_decisive
    assert agree / decisive >= GATE.min_greedy, agree / decisive
