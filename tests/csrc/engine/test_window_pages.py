"""Gemma 3's sliding-window layers keep only their window's pages (csrc/engine/window_pages.h): a long
sequence holds a window's worth of window-group pages while it runs, in a K/V budget smaller than one
whole context of every layer, and gives the tokens of the single-sequence engine (whose cache keeps every
layer's every position); a cached prefix is reused only where its window is still held, always with the
same tokens; a long prefix written to the disk tier comes back whole after a restart."""
import gc

import pytest

import lanes
from lanes import Model, _runtime

from .conftest import run_alone

PAGE = 64  # kKvPagePositions
WINDOW = 512  # Gemma 3 270M's sliding window
CTX = 4096
MAX_BATCH = 128
# Window pages one sequence holds at most: a step's tokens and the window before the first of them.
MAX_WINDOW_PAGES = (WINDOW - 1 + MAX_BATCH + PAGE - 1) // PAGE + 1
GREEDY = dict(temperature=0.0)


@pytest.fixture(scope="module")
def path():
    return str(lanes.gemma3_path())


@pytest.fixture(scope="module")
def reference(path):
    """The single-sequence engine: one cache region of every layer for every position."""
    return Model(path, threads=2, ctx_size=CTX)


def long_prompt(tok, n_tokens, topic="harbour"):
    words = " ".join(f"{topic}{i % 97}" for i in range(n_tokens))
    ids = tok.tokenize("Log of the " + topic + ": " + words, True, True)[:n_tokens - 8]
    return ids + tok.tokenize("\nSummarise the log:", False, True)


def expected(reference, ids, max_tokens):
    return "".join(reference.generate(ids, max_tokens=max_tokens, **GREEDY)).encode()


def engine(path, **kw):
    return _runtime.BatchEngine(path, threads=2, ctx_size=CTX, num_slots=kw.pop("num_slots", 1),
                                max_batch_tokens=MAX_BATCH, **kw)


def window_pages_used(eng):
    st = eng.prompt_cache_stats()
    return st["window_pages_total"] - st["window_pages_free"]


def test_a_long_sequence_holds_only_its_windows_pages(path, reference):
    ids = long_prompt(reference, 3000)
    # 40 MiB: less than one context of every layer (18 layers · 2 · 256 · fp16 · 4096 = 72 MiB).
    eng = engine(path, kv_cache_mib=40)
    st = eng.prompt_cache_stats()
    assert st["window_pages_total"] > 0 and st["pages_total"] >= CTX // PAGE, st
    eng.add(1, 0, ids, 16, **GREEDY)
    text, peak = b"", 0
    for _ in range(1000):
        if not eng.has_work():
            break
        for _r, _c, t, _done, _reason, _st in eng.step():
            text += t
        peak = max(peak, window_pages_used(eng))
    assert 0 < peak <= MAX_WINDOW_PAGES, peak
    assert text == expected(reference, ids, 16)


def test_a_long_cached_prefix_is_hit_with_the_same_tokens(path, reference):
    first = long_prompt(reference, 3000)
    eng = engine(path, prompt_cache_mib=64)
    answer, _ = run_alone(eng, 1, first, 12, **GREEDY)
    second = first + reference.tokenize(answer.decode("utf-8", "replace") + "\nAnd then?", False, True)
    text, stats = run_alone(eng, 2, second, 12, **GREEDY)
    assert stats["cached_tokens"] >= (len(first) // PAGE) * PAGE, stats
    assert text == expected(reference, second, 12)


def test_a_prefix_whose_window_is_gone_is_recomputed_with_the_same_tokens(path, reference):
    first = long_prompt(reference, 2000)
    eng = engine(path, prompt_cache_mib=64)
    run_alone(eng, 1, first, 4, **GREEDY)
    # Shares the first 1000 positions only: the first sequence let their window pages go while it ran.
    other = first[:1000] + reference.tokenize("\nWhat came first?", False, True)
    text, stats = run_alone(eng, 2, other, 12, **GREEDY)
    assert stats["cached_tokens"] < 1000 - WINDOW, stats
    assert text == expected(reference, other, 12)


def test_sequences_on_shuffled_pages_decode_as_alone(path, reference):
    prompts = [long_prompt(reference, n, topic) for n, topic in ((1500, "mill"), (700, "ferry"), (90, "bell"))]
    eng = engine(path, num_slots=3, page_shuffle_seed=7)
    for rid, ids in enumerate(prompts):
        eng.add(rid, 0, ids, 40, **GREEDY)
    out = {}
    for _ in range(2000):
        if not eng.has_work():
            break
        for rid, _c, t, _done, _reason, _st in eng.step():
            out[rid] = out.get(rid, b"") + t
        assert window_pages_used(eng) <= 3 * MAX_WINDOW_PAGES
    for rid, ids in enumerate(prompts):
        assert out[rid] == expected(reference, ids, 40), rid


def test_a_model_without_sliding_layers_keeps_one_group():
    eng = _runtime.BatchEngine(str(lanes.smollm2_path()), threads=1, ctx_size=512, num_slots=1)
    st = eng.prompt_cache_stats()
    assert st["window_pages_total"] == st["window_pages_free"] == 0 and st["pages_total"] == 512 // PAGE


def test_a_long_prompt_comes_back_from_disk_whole(path, reference, tmp_path):
    """Pages go to disk as they fill, before their window part is let go: a new engine (a restart)
    reads back a 2000-token prefix, window layers included."""
    ids = long_prompt(reference, 2000)
    first = engine(path, prefix_cache_dir=str(tmp_path))
    run_alone(first, 1, ids, 4, **GREEDY)
    del first  # its disk writer finishes the queued pages
    gc.collect()
    again = engine(path, prefix_cache_dir=str(tmp_path))
    text, stats = run_alone(again, 1, ids, 12, **GREEDY)
    assert stats["cached_tokens"] >= (len(ids) // PAGE - 1) * PAGE, stats
    assert again.prompt_cache_stats()["disk_reads"] >= len(ids) // PAGE - 1
    assert text == expected(reference, ids, 12)
