"""Generation through the engine with the real SmolLM2: sampling modes, determinism, stops, UTF-8."""
import pytest

import lanes
from lanes import Model

PROMPT = "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model():
    return Model(lanes.smollm2_path(), threads=2, ctx_size=1024)


def run(model, prompt=PROMPT, **kw):
    g = model.generate(prompt, **kw)
    deltas = list(g)
    return "".join(deltas), deltas, g


def test_greedy_is_deterministic_and_top_k_1_equals_greedy(model):
    greedy, _, g = run(model, max_tokens=40, temperature=0.0)
    again, _, _ = run(model, max_tokens=40, temperature=0.0)
    topk1, _, _ = run(model, max_tokens=40, temperature=1.0, top_k=1, seed=123)
    assert greedy == again == topk1
    assert g.stats.completion_tokens > 0 and g.stats.prompt_tokens == len(model.tokenize(PROMPT, True, True))


def test_seeded_sampling_reproducible_across_thread_counts(model):
    other = Model(lanes.smollm2_path(), threads=1, ctx_size=1024)
    kw = dict(max_tokens=48, temperature=0.9, top_p=0.95, seed=42)
    a, _, _ = run(model, **kw)
    b, _, _ = run(other, **kw)
    c, _, _ = run(model, **kw)
    assert a == b == c
    different = {run(model, max_tokens=48, temperature=0.9, top_p=0.95, seed=s)[0] for s in (1, 2, 3)}
    assert len(different) > 1


def test_max_tokens_gives_length(model):
    _, _, g = run(model, max_tokens=5, temperature=0.0, ignore_eos=True)
    assert g.stats.finish_reason == "length" and g.stats.completion_tokens == 5


def test_eos_stops_with_stop_reason(model):
    chat = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    text, _, g = run(model, chat, max_tokens=64, temperature=0.0)
    assert g.stats.finish_reason == "stop" and "Paris" in text
    assert g.token_ids[-1] in model.eog_ids and "<|im_end|>" not in text


def test_ignore_eos_and_min_tokens_suppress_end_of_generation(model):
    chat = "<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\n"
    _, _, short = run(model, chat, max_tokens=64, temperature=0.0)
    assert short.stats.finish_reason == "stop"
    n = short.stats.completion_tokens
    _, _, forced = run(model, chat, max_tokens=n + 10, temperature=0.0, ignore_eos=True)
    assert forced.stats.completion_tokens == n + 10 and not set(forced.token_ids) & set(model.eog_ids)
    _, _, minimum = run(model, chat, max_tokens=n + 30, temperature=0.0, min_tokens=n + 5)
    assert minimum.stats.completion_tokens >= n + 5


def test_stop_string_split_across_tokens_is_held_back_and_removed(model):
    full, _, _ = run(model, max_tokens=60, temperature=0.0, ignore_eos=True)
    # A stop string that starts mid-token and spans a token boundary somewhere in the middle.
    ids = model.tokenize(full, add_special=False)
    cut = len(model.detokenize(ids[: len(ids) // 2]))
    stop = full[cut - 2 : cut + 3]
    assert len(stop) == 5 and stop in full
    text, deltas, g = run(model, max_tokens=60, temperature=0.0, ignore_eos=True, stop=[stop])
    assert g.stats.finish_reason == "stop"
    assert text == full[: full.index(stop)]
    assert all(stop not in d for d in deltas)
    # A prefix of the stop string that does not complete is released later, unchanged.
    text2, _, g2 = run(model, max_tokens=60, temperature=0.0, ignore_eos=True, stop=[stop + "\u2603never"])
    assert text2 == full and g2.stats.finish_reason == "length"


def test_multibyte_characters_stream_whole(model):
    prompt = "<|im_start|>user\nTranslate to Japanese: good morning, my friend<|im_end|>\n<|im_start|>assistant\n"
    text, deltas, _ = run(model, prompt, max_tokens=40, temperature=0.0)
    assert any(ord(ch) > 0x7F for ch in text)
    assert "\ufffd" not in text
    assert "".join(deltas) == text


def test_logit_bias_and_penalties(model):
    greedy, _, g = run(model, max_tokens=10, temperature=0.0, ignore_eos=True)
    first = g.token_ids[0]
    _, _, banned = run(model, max_tokens=10, temperature=0.0, ignore_eos=True, logit_bias={first: -1e9})
    assert banned.token_ids[0] != first
    _, _, forced = run(model, max_tokens=3, temperature=0.0, ignore_eos=True, logit_bias={1234: 100.0})
    assert forced.token_ids == [1234, 1234, 1234]
    _, _, pen = run(model, max_tokens=3, temperature=0.0, ignore_eos=True, logit_bias={1234: 5.0},
                    frequency_penalty=2.0)
    assert pen.token_ids.count(1234) < 3 or forced.token_ids != pen.token_ids


def test_bad_requests_are_value_errors_not_crashes(model):
    with pytest.raises(ValueError, match="empty"):
        model.generate([], max_tokens=4)
    with pytest.raises(ValueError, match="out of range"):
        model.generate([10**6], max_tokens=4)
    with pytest.raises(ValueError, match="context"):
        model.generate([100] * 2000, max_tokens=4)
    with pytest.raises(ValueError, match="max_tokens"):
        model.generate([100], max_tokens=0)
    # The model still works afterwards.
    assert run(model, max_tokens=3, temperature=0.0)[2].stats.completion_tokens >= 1


def test_cancel_mid_generation(model):
    g = model.generate(PROMPT, max_tokens=100, temperature=0.0, ignore_eos=True)
    next(g)
    g.close()
    assert g.stats.finish_reason == "cancelled"
    assert run(model, max_tokens=3, temperature=0.0)[2].stats.completion_tokens >= 1


def test_prompt_prefix_reuse_is_exact(model):
    model.logits([5, 6, 7])  # leave unrelated tokens in the cache
    cold, _, g1 = run(model, max_tokens=24, temperature=0.0)
    assert g1.stats.cached_tokens == 0
    warm, _, g2 = run(model, max_tokens=24, temperature=0.0)
    n = g2.stats.prompt_tokens
    assert g2.stats.cached_tokens == n - 1 and warm == cold
    # A longer conversation that extends the previous prompt + answer reuses all of it.
    follow = PROMPT + cold + "<|im_end|>\n<|im_start|>user\nAnother one.<|im_end|>\n<|im_start|>assistant\n"
    text, _, g3 = run(model, follow, max_tokens=16, temperature=0.0)
    assert g3.stats.cached_tokens >= n
    model.logits([5, 6, 7])
    fresh, _, g4 = run(model, follow, max_tokens=16, temperature=0.0)
    assert g4.stats.cached_tokens == 0 and fresh == text


def test_one_model_from_two_threads_is_serialised_not_a_crash(model):
    import threading

    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append(model.logits([100, 200, 300, 400] * 8)[-1].argmax())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 6 and len(set(int(r) for r in results)) == 1


def test_bad_construction_and_seed_are_clear_errors():
    with pytest.raises(ValueError, match="exceeds the model's training context 8192"):
        Model(lanes.smollm2_path(), threads=1, ctx_size=10**7)
    with pytest.raises(ValueError, match="threads"):
        Model(lanes.smollm2_path(), threads=10_000)
    m = Model(lanes.smollm2_path(), threads=1, ctx_size=256)
    for seed in (-1, 2**70, 1.5):
        with pytest.raises(ValueError, match="seed"):
            m.generate([100], max_tokens=2, seed=seed)


def test_logits_during_a_generation_ends_it_clearly(model):
    g = model.generate(PROMPT, max_tokens=10, temperature=0.0)
    next(g)
    model.logits([100, 200])
    with pytest.raises(RuntimeError, match="another generation"):
        next(g)


def test_long_prompt_prefills_in_several_steps_with_identical_results(model):
    small_batch = Model(lanes.smollm2_path(), threads=2, ctx_size=1024, max_batch=16)
    prompt = PROMPT * 4  # ~80 tokens: 5+ prefill steps of 16
    a, _, ga = run(model, prompt, max_tokens=12, temperature=0.0)
    b, _, gb = run(small_batch, prompt, max_tokens=12, temperature=0.0)
    assert a == b and ga.token_ids == gb.token_ids
    assert gb.stats.prompt_tokens > 64 and gb.stats.prefill_ns > 0
    # Cancelling between prefill steps works and leaves the model usable.
    g = small_batch.generate(prompt, max_tokens=12, temperature=0.0)
    g.close()
    assert g.stats.finish_reason == "cancelled"
    assert run(small_batch, prompt, max_tokens=12, temperature=0.0)[0] == a
