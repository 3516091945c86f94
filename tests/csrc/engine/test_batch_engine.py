"""BatchEngine (continuous batching) with the real SmolLM2: a sequence's tokens do not depend on
its batchmates, arrival order or thread count; golden fidelity holds when batched; slots are
freed by cancel and reused; prefix reuse across slots; chunked prefill keeps decoders moving."""
import random
import sys
from pathlib import Path

import pytest

import lanes
from lanes import Model, _runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from golden import SMOLLM2, first_near_tie, load  # noqa: E402

MARGIN = 0.5
CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def path():
    return str(lanes.smollm2_path())


@pytest.fixture(scope="module")
def engine(path):
    return _runtime.BatchEngine(path, threads=2, ctx_size=1024, num_slots=8, max_batch_tokens=128)


@pytest.fixture(scope="module")
def tok(path):
    return Model(path, threads=1, ctx_size=256)


def ids_of(tok, text):
    return tok.tokenize(text, False, True)


def run(engine, requests):
    """requests: [(rid, prompt_ids, max_tokens, kwargs)] added in order → {rid: (text, reason, stats)}."""
    for rid, ids, max_tokens, kw in requests:
        engine.add(rid, 0, ids, max_tokens, **kw)
    out = {}
    for _ in range(10_000):
        if not engine.has_work():
            break
        for rid, _choice, text, finished, reason, stats in engine.step():
            t, _, _ = out.get(rid, (b"", None, None))
            out[rid] = (t + text, reason if finished else None, stats if finished else None)
    assert not engine.has_work()
    return out


def others(tok, rng, n):
    topics = ["the sea", "a robot", "bread", "winter", "a city at night", "mathematics", "music", "trees"]
    return [(100 + i, ids_of(tok, CHAT.format(f"Tell me about {rng.choice(topics)} ({i}).")), rng.randrange(8, 40),
             dict(temperature=0.9, top_p=0.95, seed=rng.randrange(1 << 30))) for i in range(n)]


def test_seeded_request_is_identical_alone_and_amid_seven_in_any_order(engine, tok):
    target = (1, ids_of(tok, CHAT.format("Write a haiku about rain.")), 48, dict(temperature=0.8, seed=1234))
    alone = run(engine, [target])[1]
    rng = random.Random(5)
    for trial in range(3):
        batch = others(tok, rng, 7)
        batch.insert(rng.randrange(len(batch) + 1), target)
        together = run(engine, batch)
        assert together[1][0] == alone[0], f"trial {trial}"
        assert together[1][2]["completion_tokens"] == alone[2]["completion_tokens"]
        assert len({together[r][0] for r, *_ in batch}) > 4  # the others really sampled their own text


def test_thread_count_does_not_change_batched_tokens(path, engine, tok):
    one_thread = _runtime.BatchEngine(path, threads=1, ctx_size=512, num_slots=4, max_batch_tokens=64)
    batch = others(tok, random.Random(9), 4)
    assert {r: v[0] for r, v in run(one_thread, batch).items()} == {r: v[0] for r, v in run(engine, batch).items()}


def test_golden_greedy_holds_when_batched(engine, tok):
    records = load(SMOLLM2, "greedy")
    rng = random.Random(11)
    followed = 0
    for i, rec in enumerate(records):
        k = first_near_tie(rec["margins"], MARGIN)
        gen = rec["greedy_ids"][:k]
        eog_at_end = rec["stop_reason"] == "eog" and k == len(rec["greedy_ids"])
        expect = tok.detokenize(gen[:-1] if eog_at_end else gen).encode()
        batch = others(tok, rng, 5)
        batch.insert(rng.randrange(6), (1, rec["ids"], max(k, 1), dict(temperature=0.0)))
        text = run(engine, batch)[1][0]
        if k == 0 or text == expect or (not eog_at_end and text.startswith(expect)):
            followed += 1
    assert followed >= 9 * len(records) // 10, followed


def test_cancel_frees_the_slot_and_others_continue(engine, tok):
    ids = ids_of(tok, CHAT.format("Count to one hundred."))
    for rid in range(1, 9):
        engine.add(rid, 0, ids, 200, temperature=0.0, ignore_eos=True)
    for _ in range(3):
        engine.step()
    assert engine.num_active == 8
    assert engine.cancel(4) == 1
    engine.add(9, 0, ids, 5, temperature=0.0)
    finished = {}
    while engine.has_work():
        for rid, _c, _t, done, reason, stats in engine.step():
            assert rid != 4
            if done:
                finished[rid] = stats["completion_tokens"]
    assert finished == {**{r: 200 for r in (1, 2, 3, 5, 6, 7, 8)}, 9: 5}


def test_prefix_is_reused_across_slots(engine, tok):
    system = "<|im_start|>system\n" + "You are a careful assistant who answers briefly. " * 12 + "<|im_end|>\n"
    a = ids_of(tok, system + "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n")
    b = ids_of(tok, system + "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
    # A is running when B arrives: B copies A's computed system-prompt K/V into its own slot.
    engine.add(1, 0, a, 20, temperature=0.0, ignore_eos=True)
    engine.step()
    engine.add(2, 0, b, 4, temperature=0.0)
    stats = {}
    while engine.has_work():
        for rid, _c, _t, done, _r, st in engine.step():
            if done:
                stats[rid] = st
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert stats[2]["cached_tokens"] == common > 100
    # The reused prefix gives the same tokens as computing it.
    fresh = _runtime.BatchEngine(str(lanes.smollm2_path()), threads=2, ctx_size=512, num_slots=1, max_batch_tokens=64)
    assert run(fresh, [(2, b, 12, dict(temperature=0.0))])[2][0] == run(engine, [(3, b, 12, dict(temperature=0.0))])[3][0]


def test_long_prompt_is_chunked_and_decoders_get_a_token_every_step(engine, tok):
    short = ids_of(tok, CHAT.format("Say hello."))
    engine.add(1, 0, short, 60, temperature=0.0, ignore_eos=True)
    engine.add(2, 0, short, 60, temperature=0.0, ignore_eos=True)
    for _ in range(3):
        engine.step()
    long_ids = ids_of(tok, CHAT.format(" ".join(f"word{i}" for i in range(160))))
    assert len(long_ids) > 4 * engine.max_batch_tokens
    engine.add(3, 0, long_ids, 2, temperature=0.0)
    prefill_steps = 0
    while engine.has_work():
        events = {rid for rid, *_ in engine.step()}
        assert engine.last_batch_tokens <= engine.max_batch_tokens
        if 3 not in events and engine.num_active == 3:
            prefill_steps += 1
            assert {1, 2} <= events  # the running streams advance on every prefill chunk
    assert prefill_steps >= 4


def test_cancel_reports_each_dropped_choices_work(engine, tok):
    """What a lane's cancel DONE carries: prompt positions fed so far (mid-prompt: fewer than the
    prompt), tokens generated, and prefill/decode time up to the cancel."""
    words = " ".join(f"w{k * 7919 % 100003}" for k in range(60))  # unlike any cached prompt
    long_ids = ids_of(tok, CHAT.format("Summarise: " + words))
    assert 2 * 128 < len(long_ids) < 1024  # several prefill steps at max_batch_tokens=128
    short_ids = ids_of(tok, CHAT.format("Count to fifty, one number per line."))
    engine.add(31, 0, short_ids, 500, temperature=0.0, ignore_eos=True)
    generated = 0
    for _ in range(6):
        generated += sum(1 for ev in engine.step() if ev[0] == 31 and ev[2])
    engine.add(32, 0, long_ids, 50, temperature=0.0)
    engine.step()  # a first prompt chunk fed (a step feeds at most 128 tokens)
    ((choice, ran),) = engine.cancel_with_stats(31)
    assert choice == 0 and ran["prompt_tokens"] == len(short_ids) and ran["completion_tokens"] >= generated > 0
    assert ran["prefill_ns"] > 0 and ran["decode_ns"] > 0
    ((_, fed),) = engine.cancel_with_stats(32)
    assert 0 < fed["prompt_tokens"] < len(long_ids) and fed["completion_tokens"] == 0 and fed["prefill_ns"] > 0
    assert engine.cancel_with_stats(33) == [] and not engine.has_work()
