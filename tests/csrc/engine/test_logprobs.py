"""engine/logprobs.h without a model: the log-softmax and top-k the engine reports for a raw
logits row (float64 numpy as the reference), ties, -inf and NaN logits, vocabulary sizes of
SmolLM2 and Gemma 3."""
import math

import numpy as np
import pytest

from lanes import _runtime


def reference(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    finite = x[np.isfinite(x)] if np.isfinite(x).any() else x
    m = finite.max()
    return x - (m + np.log(np.exp(finite - m).sum()))


@pytest.mark.parametrize("n_vocab", [8, 49152, 262144])
def test_values_are_log_softmax_and_top_is_sorted(n_vocab):
    rng = np.random.default_rng(n_vocab)
    logits = (rng.standard_normal(n_vocab) * 4).astype(np.float32)
    ref = reference(logits)
    num_top = min(20, n_vocab)
    for token in (0, n_vocab // 2, n_vocab - 1):
        (tok, lp), top = _runtime.score_logprobs(logits, token, num_top)
        assert tok == token and abs(lp - ref[token]) < 1e-5
        expected = np.argsort(-ref, kind="stable")[:num_top]
        assert [t for t, _ in top] == list(expected)
        assert np.allclose([v for _, v in top], ref[expected], atol=1e-5, rtol=0)
    assert abs(np.exp(ref).sum() - 1.0) < 1e-9


def test_ties_keep_the_lower_id_and_missing_alternatives_are_marked():
    logits = np.array([1.0, 3.0, 3.0, -np.inf, 3.0], dtype=np.float32)
    (tok, lp), top = _runtime.score_logprobs(logits, 3, 5)
    assert tok == 3 and lp == -math.inf
    assert [t for t, _ in top] == [1, 2, 4, 0, 3]
    assert top[0][1] == top[1][1] == top[2][1] == pytest.approx(reference(logits)[1], abs=1e-6)
    (_, _), top = _runtime.score_logprobs(np.array([0.0, np.nan], dtype=np.float32), 0, 2)
    assert top[0] == (0, pytest.approx(0.0, abs=1e-7)) and top[1][0] == -1 and math.isnan(top[1][1])


def test_zero_alternatives():
    (tok, lp), top = _runtime.score_logprobs(np.zeros(4, dtype=np.float32), 2, 0)
    assert (tok, top) == (2, []) and lp == pytest.approx(-math.log(4))
    with pytest.raises(ValueError):
        _runtime.score_logprobs(np.zeros(4, dtype=np.float32), 4, 1)
    with pytest.raises(ValueError):
        _runtime.score_logprobs(np.zeros(4, dtype=np.float32), 0, 21)
