"""Sampler semantics: greedy, filters, seeds, distribution, EOG masking, bias, penalties."""
import numpy as np
import pytest

import lanes._runtime as rt


def make(n_vocab, prompt=(), eog=(), **params):
    s = rt.Sampler(n_vocab)
    s.reset(params, list(prompt), list(eog))
    return s


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


# ---------------------------------------------------------------- greedy


def test_greedy_is_argmax(kernel_path):
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 33, 1000, 49152):
        s = make(n, temperature=0.0)
        for _ in range(5):
            logits = rng.standard_normal(n).astype(np.float32) * 3
            assert s.sample(logits, 0) == int(np.argmax(logits))


@pytest.mark.parametrize("positions", [[3, 7], [0, 9], [5, 6, 31], [17, 40, 41, 100]])
def test_greedy_ties_pick_lowest_id(kernel_path, positions):
    logits = np.zeros(128, dtype=np.float32)
    logits[positions] = 5.0
    assert make(128, temperature=0.0).sample(logits, 0) == min(positions)


def test_all_banned_is_deterministic(kernel_path):
    logits = np.full(50, -np.inf, dtype=np.float32)
    assert make(50, temperature=0.0).sample(logits, 0) == 0
    assert make(50, temperature=0.8, top_p=0.9, seed=1).sample(logits, 0) == 0


def test_nan_logits_are_never_picked(kernel_path):
    logits = np.full(64, np.nan, dtype=np.float32)
    logits[10], logits[20] = 1.0, 0.5
    assert make(64, temperature=0.0).sample(logits, 0) == 10
    for params in ({}, {"top_p": 0.9}, {"top_k": 5}, {"min_p": 0.01}):
        s = make(64, temperature=1.0, seed=3, **params)
        picks = {s.sample(logits, 0) for _ in range(200)}
        assert picks <= {10, 20}


def test_top_k_1_equals_greedy(kernel_path):
    rng = np.random.default_rng(1)
    for trial in range(200):
        n = int(rng.integers(2, 3000))
        logits = rng.integers(-3, 4, n).astype(np.float32)  # many ties
        s = make(n, temperature=float(rng.uniform(0.1, 2.0)), top_k=1, seed=trial)
        assert s.sample(logits, 0) == int(np.argmax(logits))


# ---------------------------------------------------------------- seeds


def _run(seed, n=2000, steps=200):
    rng = np.random.default_rng(42)  # the "model": same logits stream for every run
    s = make(n, temperature=0.9, top_p=0.95, top_k=50, seed=seed)
    out = []
    for i in range(steps):
        tok = s.sample(rng.standard_normal(n).astype(np.float32), i)
        s.accept(tok)
        out.append(tok)
    return out


def test_same_seed_same_sequence(kernel_path):
    assert _run(1234) == _run(1234)


def test_different_seeds_differ():
    assert _run(1) != _run(2)


def test_reset_restarts_the_seeded_stream():
    s = make(100, temperature=1.0, seed=7)
    logits = np.zeros(100, dtype=np.float32)
    first = [s.sample(logits, 0) for _ in range(50)]
    s.reset({"temperature": 1.0, "seed": 7}, [], [])
    assert [s.sample(logits, 0) for _ in range(50)] == first


def test_unseeded_generations_differ():
    logits = np.zeros(1000, dtype=np.float32)
    runs = {tuple(make(1000, temperature=1.0).sample(logits, 0) for _ in range(20)) for _ in range(3)}
    assert len(runs) == 3


# ---------------------------------------------------------------- distribution


def _chi2(counts, probs, draws):
    keep = probs * draws >= 5  # pool tiny cells so the chi-square approximation holds
    exp = np.append(probs[keep] * draws, probs[~keep].sum() * draws)
    obs = np.append(counts[keep], counts[~keep].sum())
    if exp[-1] == 0:
        exp, obs = exp[:-1], obs[:-1]
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"temperature": 1.0}, lambda l: softmax(l)),
        ({"temperature": 0.5}, lambda l: softmax(l / 0.5)),
        ({"temperature": 2.0}, lambda l: softmax(l / 2.0)),
        # top_k=4 then temperature: renormalized over the 4 best
        ({"temperature": 1.0, "top_k": 4}, lambda l: softmax(np.where(l >= np.sort(l)[-4], l, -np.inf))),
    ],
)
def test_empirical_frequencies_match_softmax(kernel_path, params, expected):
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, 0.2, 1.2, -3.0, 0.7], dtype=np.float32)
    probs = expected(logits.astype(np.float64))
    draws = 20000
    s = make(len(logits), seed=99, **params)
    counts = np.bincount([s.sample(logits, 0) for _ in range(draws)], minlength=len(logits))
    assert counts[probs == 0].sum() == 0
    stat, df = _chi2(counts, probs, draws)
    # chi-square critical value at p = 0.001 for df <= 11 is <= 31.3; fixed seed → not flaky
    assert stat < 31.3, (stat, df, counts, probs * draws)


def test_large_vocab_frequencies(kernel_path):
    # 262k vocab, no filters: the block-skipping cumulative search must still be exact.
    n = 262144
    rng = np.random.default_rng(5)
    logits = np.full(n, -30.0, dtype=np.float32)
    hot = rng.choice(n, 6, replace=False)
    logits[hot] = [3.0, 2.5, 2.0, 1.0, 0.0, 0.0]
    probs = softmax(logits.astype(np.float64))
    s = make(n, temperature=1.0, seed=11)
    draws = 2000
    picks = np.array([s.sample(logits, 0) for _ in range(draws)])
    counts = np.array([(picks == h).sum() for h in hot])
    assert counts.sum() >= draws - 2  # the cold mass is ~1e-8
    stat, _ = _chi2(counts, probs[hot] / probs[hot].sum(), counts.sum())
    assert stat < 20.5  # df 5, p = 0.001


# ---------------------------------------------------------------- EOG masking, min_tokens


def test_ignore_eos_never_returns_any_eog(kernel_path):
    eog = [2, 0, 7]
    logits = np.zeros(64, dtype=np.float32)
    logits[eog] = [50.0, 40.0, 30.0]
    s = make(64, eog=eog, temperature=0.0, ignore_eos=True)
    assert s.sample(logits, 0) not in eog
    s = make(64, eog=eog, temperature=1.5, ignore_eos=True, seed=3)
    assert not {s.sample(logits, i) for i in range(500)} & set(eog)


def test_min_tokens_masks_eog_until_reached():
    eog = [1, 5]
    logits = np.zeros(16, dtype=np.float32)
    logits[5] = 10.0
    s = make(16, eog=eog, temperature=0.0, min_tokens=3)
    assert [s.sample(logits, n) for n in range(5)] == [0, 0, 0, 5, 5]


def test_eog_is_allowed_by_default():
    logits = np.zeros(16, dtype=np.float32)
    logits[1] = 10.0
    assert make(16, eog=[1], temperature=0.0).sample(logits, 0) == 1


# ---------------------------------------------------------------- logit bias


def test_logit_bias_bans_and_forces(kernel_path):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal(500).astype(np.float32)
    top = int(np.argmax(logits))
    assert make(500, temperature=0.0, logit_bias={top: -100}).sample(logits, 0) != top
    assert make(500, temperature=0.0, logit_bias={top: float("-inf")}).sample(logits, 0) != top
    s = make(500, temperature=1.0, seed=1, logit_bias={top: -100})
    assert top not in {s.sample(logits, 0) for _ in range(300)}
    s = make(500, temperature=1.0, seed=1, logit_bias=[(123, 100.0)])
    assert {s.sample(logits, 0) for _ in range(300)} == {123}


# ---------------------------------------------------------------- penalties


def test_repetition_penalty_divides_positive_logits():
    logits = np.array([2.0, 1.9, 0.0, 0.0], dtype=np.float32)
    assert make(4, prompt=[0], temperature=0.0).sample(logits, 0) == 0
    # 2.0 / 1.2 = 1.67 < 1.9
    assert make(4, prompt=[0], temperature=0.0, repetition_penalty=1.2).sample(logits, 0) == 1
    # 2.0 / 1.04 = 1.92 > 1.9
    assert make(4, prompt=[0], temperature=0.0, repetition_penalty=1.04).sample(logits, 0) == 0


def test_repetition_penalty_multiplies_negative_logits():
    logits = np.array([-1.0, -1.1, -5.0], dtype=np.float32)
    # -1.0 * 1.2 = -1.2 < -1.1; a repeated token counts once, not per occurrence
    s = make(3, prompt=[0, 0, 0], temperature=0.0, repetition_penalty=1.2)
    assert s.sample(logits, 0) == 1
    s = make(3, prompt=[0, 0, 0], temperature=0.0, repetition_penalty=1.05)
    assert s.sample(logits, 0) == 0


def test_repetition_window_covers_prompt_and_generated():
    logits = np.array([2.0, 1.9, 0.0, 0.0, 0.0], dtype=np.float32)
    # token 0 is outside the last 2 tokens of the prompt → not penalized
    s = make(5, prompt=[0, 3, 4], temperature=0.0, repetition_penalty=1.5, repeat_last_n=2)
    assert s.sample(logits, 0) == 0
    # a generated 0 enters the window; then two more tokens push it out again
    s.accept(0)
    assert s.sample(logits, 1) == 1
    s.accept(3)
    s.accept(4)
    assert s.sample(logits, 3) == 0
    # repeat_last_n = 0 disables it
    s = make(5, prompt=[0], temperature=0.0, repetition_penalty=1.5, repeat_last_n=0)
    assert s.sample(logits, 0) == 0


def test_presence_and_frequency_penalties_count_generated_tokens_only():
    logits = np.array([3.0, 2.0, 0.0], dtype=np.float32)
    s = make(3, prompt=[0, 0, 0], temperature=0.0, presence_penalty=0.5, frequency_penalty=0.3)
    assert s.sample(logits, 0) == 0  # prompt tokens are not penalized
    s.accept(0)  # 3.0 - 0.5 - 0.3 = 2.2 > 2.0
    assert s.sample(logits, 1) == 0
    s.accept(0)  # 3.0 - 0.5 - 0.6 = 1.9 < 2.0
    assert s.sample(logits, 2) == 1
    # reset clears the counts
    s.reset({"temperature": 0.0, "presence_penalty": 0.5, "frequency_penalty": 0.3}, [], [])
    assert s.sample(logits, 0) == 0


def test_presence_penalty_alone_is_once_per_token():
    logits = np.array([3.0, 2.0], dtype=np.float32)
    s = make(2, temperature=0.0, presence_penalty=0.9)
    for _ in range(5):
        s.accept(0)
    assert s.sample(logits, 5) == 0  # 3.0 - 0.9 = 2.1 regardless of count


# ---------------------------------------------------------------- API validation


@pytest.mark.parametrize(
    "params",
    [{"temperature": -1}, {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": -0.1}, {"top_k": -1},
     {"repetition_penalty": 0.0}, {"logit_bias": {5000: 1.0}}, {"min_tokens": -1}],
)
def test_invalid_params_are_rejected(params):
    with pytest.raises(ValueError):
        rt.Sampler(100).reset(params, [], [])


def test_unknown_key_and_bad_ids_are_rejected():
    s = rt.Sampler(100)
    with pytest.raises(KeyError):
        s.reset({"temprature": 1.0}, [], [])
    with pytest.raises(ValueError):
        s.reset({}, [100], [])
    with pytest.raises(ValueError):
        s.reset({}, [], [-1])
    s.reset({}, [], [])
    with pytest.raises(ValueError):
        s.sample(np.zeros(99, dtype=np.float32), 0)
    with pytest.raises(IndexError):
        s.accept(100)
