"""SmolLM2 (llama family) against llama.cpp's golden dev outputs — statistical, never elementwise
(see the golden README's "Numerical variation": llama.cpp itself moves by ~0.24 median)."""
import pytest

import lanes
from lanes import Model

from golden import GATES, decisive_greedy_agreement, SMOLLM2, compare_logits, first_near_tie, load

GATE = GATES[SMOLLM2]
MARGIN = GATE.margin  # golden top-1/top-2 logit gap below which another implementation may differ


@pytest.fixture(scope="module")
def model():
    return Model(lanes.smollm2_path(), threads=2)


def test_model_facts(model):
    assert model.n_vocab == 49152 and model.n_ctx_train == 8192 and model.arch == "llama"
    assert set(model.eog_ids) >= {0, 2}
    assert "<|im_start|>" in model.chat_template


def test_teacher_forced_logits_match_llama_cpp(model):
    top1, kl, n = compare_logits(model, load(SMOLLM2, "logits"))
    assert n > GATE.min_positions
    assert top1 >= GATE.min_top1, top1
    assert kl <= GATE.max_kl, kl


def test_greedy_argmax_agrees_where_golden_is_decisive(model):
    agree, decisive = decisive_greedy_agreement(model, load(SMOLLM2, "greedy"), MARGIN)
    assert decisive > GATE.min_decisive
    assert agree / decisive >= GATE.min_greedy, agree / decisive


def test_generate_follows_golden_up_to_first_near_tie(model):
    followed = 0
    records = load(SMOLLM2, "greedy")
    for rec in records:
        k = first_near_tie(rec["margins"], MARGIN)
        gen = rec["greedy_ids"][:k]
        eog_at_end = rec["stop_reason"] == "eog" and k == len(rec["greedy_ids"])
        expect = model.detokenize(gen[:-1] if eog_at_end else gen)
        g = model.generate(rec["ids"], max_tokens=max(k, 1), temperature=0.0)
        text = "".join(g)
        if k == 0 or text == expect or (not eog_at_end and text.startswith(expect)):
            followed += 1
    assert followed >= 9 * len(records) // 10, followed
