"""The paged K/V cache and its prefix tree (csrc/engine/page_pool.h, prefix_tree.h) with the real models:
any page layout gives the tokens a fresh engine gives (SmolLM2 and Gemma 3, past a 512-position chunk and
Gemma's sliding window); sequences sharing cached pages while both decode give what each gives alone; a
prefix hit maps pages by reference; a pool too small for everyone keeps choices waiting, evicts cached
pages and still gives every sequence its own tokens."""
import pytest

import lanes
from lanes import Model, _runtime

SEEDED = dict(temperature=0.9, top_p=0.95)
PAGE = 64  # kKvPagePositions


def run_all(eng, requests, max_steps=20_000):
    """requests: [(rid, ids, max_tokens, kwargs)] added at once → {rid: (text, reason, stats)}."""
    for rid, ids, max_tokens, kw in requests:
        eng.add(rid, 0, ids, max_tokens, **kw)
    return drain(eng, max_steps)


def drain(eng, max_steps=20_000, on_step=None):
    out = {}
    for _ in range(max_steps):
        if not eng.has_work():
            break
        for rid, _c, text, finished, reason, stats in eng.step():
            t, _, _ = out.get(rid, (b"", None, None))
            out[rid] = (t + text, reason if finished else None, stats if finished else None)
        if on_step:
            on_step(eng)
    assert not eng.has_work()
    return out


def alone(path, req, ctx=1024):
    """req on a fresh engine of its own: the reference."""
    eng = _runtime.BatchEngine(path, threads=2, ctx_size=ctx, num_slots=1, max_batch_tokens=128)
    return run_all(eng, [req])[req[0]]


def prompts(tok, n, long_tokens):
    """n prompts; the first is long enough for two attention chunks (and beyond Gemma's 512 window)."""
    topics = ["the sea", "a lighthouse keeper", "bread", "winter roads"]
    words = 40
    while len(long := tok.tokenize("Story: " + " ".join(f"w{i}" for i in range(words)) + "\nGo on:", True, True)) < long_tokens:
        words += 20
    out = [long]
    out += [tok.tokenize(f"Tell me about {topics[i % 4]} in detail, please ({i}).", True, True) for i in range(n - 1)]
    return out


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    path = str(lanes.smollm2_path() if request.param == "smollm2" else lanes.gemma3_path())
    return path, Model(path, threads=1, ctx_size=256)


def test_shuffled_pages_give_a_fresh_engines_tokens(model):
    path, tok = model
    ids = prompts(tok, 3, 600)
    assert 600 <= len(ids[0]) < 700
    reqs = [(i, p, 40, dict(SEEDED, seed=100 + i)) for i, p in enumerate(ids)]
    shuffled = _runtime.BatchEngine(path, threads=2, ctx_size=1024, num_slots=3, max_batch_tokens=96,
                                    page_shuffle_seed=12345)
    got = run_all(shuffled, reqs)
    for req in reqs:
        want = alone(path, req)
        assert got[req[0]][0] == want[0] and got[req[0]][2]["completion_tokens"] == want[2]["completion_tokens"]
    # A second round on the same engine: pages freed and reused in another order, cached prefixes mapped.
    again = run_all(shuffled, [(10 + r, p, n, kw) for r, p, n, kw in reversed(reqs)])
    assert {r: v[0] for r, v in again.items()} == {10 + r: got[r][0] for r in got}


def test_sequences_sharing_pages_decode_as_each_alone(model):
    path, tok = model
    system = tok.tokenize("Rules: " + "Answer plainly and keep to the point. " * 30, True, True)
    a = system + tok.tokenize("\nQuestion: what is rain?\nAnswer:", False, True)
    b = system + tok.tokenize("\nQuestion: why is the sky blue?\nAnswer:", False, True)
    eng = _runtime.BatchEngine(path, threads=2, ctx_size=1024, num_slots=4, max_batch_tokens=128)
    eng.add(1, 0, a, 48, ignore_eos=True, **SEEDED, seed=7)
    first_text = []
    while not first_text:  # until A has sampled its first token: its prompt pages are cached
        first_text = [t for r, _c, t, *_ in eng.step() if r == 1]
    eng.add(2, 0, b, 48, ignore_eos=True, **SEEDED, seed=8)
    eng.add(3, 0, a, 48, ignore_eos=True, **SEEDED, seed=9)  # all of A's prompt pages but the last token's
    got = drain(eng)
    got[1] = (first_text[0] + got[1][0], *got[1][1:])
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert got[2][2]["cached_tokens"] == common > 2 * PAGE
    assert got[3][2]["cached_tokens"] == len(a) - 1
    for rid, ids, seed in ((1, a, 7), (2, b, 8), (3, a, 9)):
        assert got[rid][0] == alone(path, (rid, ids, 48, dict(SEEDED, seed=seed, ignore_eos=True)))[0], rid


def test_n_choices_share_the_prompt_pages(path_smollm2, tok_smollm2):
    ids = tok_smollm2.tokenize("Facts: " + " ".join(f"f{i}" for i in range(200)) + "\nSummary:", True, True)
    eng = _runtime.BatchEngine(path_smollm2, threads=2, ctx_size=1024, num_slots=4, max_batch_tokens=128)
    for choice in range(3):
        eng.add(1, choice, ids, 16, temperature=0.0)
    seen = []
    for _ in range(1000):
        if not eng.has_work():
            break
        seen.extend((c, st) for _r, c, _t, done, _re, st in eng.step() if done)
    cached = sorted(st["cached_tokens"] for _c, st in seen)
    assert cached[0] == 0 and cached[1] == cached[2] == len(ids) - 1, cached


@pytest.fixture(scope="module")
def path_smollm2():
    return str(lanes.smollm2_path())


@pytest.fixture(scope="module")
def tok_smollm2(path_smollm2):
    return Model(path_smollm2, threads=1, ctx_size=256)


def test_a_prefix_hit_maps_pages_by_reference(path_smollm2, tok_smollm2):
    tok = tok_smollm2
    first = tok.tokenize("Notes: " + " ".join(f"n{i}" for i in range(300)) + "\nReply:", True, True)
    eng = _runtime.BatchEngine(path_smollm2, threads=2, ctx_size=2048, num_slots=2, max_batch_tokens=32,
                               prompt_cache_mib=64)
    answer = run_all(eng, [(1, first, 10, dict(temperature=0.0))])[1][0]
    second = first + tok.tokenize(answer.decode("utf-8", "replace") + "\nMore:", False, True)
    free_before = eng.prompt_cache_stats()["pages_free"]
    eng.add(2, 0, second, 4, temperature=0.0)
    eng.step()  # admission and the first 32-token chunk
    used = free_before - eng.prompt_cache_stats()["pages_free"]
    got = drain(eng)
    cached = got[2][2]["cached_tokens"]
    assert cached >= (len(first) // PAGE) * PAGE, cached
    # A copy would take cached / PAGE pages; by reference only the partly cached page (copied:
    # the sequence writes it) and the chunk's next page are new.
    assert used <= 2 < cached // PAGE, (used, cached)
    figures = eng.prompt_cache_stats()
    assert figures["hits"] == 1 and figures["hit_tokens"] == cached


def test_a_small_pool_keeps_choices_waiting_and_evicts_cached_pages(path_smollm2, tok_smollm2):
    tok = tok_smollm2
    bytes_per_page = 30 * 2 * 3 * 64 * 2 * PAGE  # SmolLM2: layers · (K, V) · kv heads · head dim · fp16
    kv_mib = 12
    assert (kv_mib << 20) // bytes_per_page == 8  # one context of 512 positions
    eng = _runtime.BatchEngine(path_smollm2, threads=2, ctx_size=512, num_slots=4, max_batch_tokens=64,
                               kv_cache_mib=kv_mib)
    ids = [tok.tokenize(f"Item {i}: " + " ".join(f"x{i}y{j}" for j in range(25)) + "\nDescribe it:", True, True)
           for i in range(6)]
    assert all(64 < len(p) < 128 for p in ids)
    reqs = [(i, p, 60, dict(SEEDED, seed=50 + i, ignore_eos=True)) for i, p in enumerate(ids)]  # 3 pages each
    peaks = {"active": 0, "waiting_with_free_slot": 0}

    def watch(e):
        peaks["active"] = max(peaks["active"], e.num_active)
        if e.num_waiting and e.num_active < e.num_slots:
            peaks["waiting_with_free_slot"] += 1
        assert e.prompt_cache_stats()["pages_free"] >= 0

    for rid, p, n, kw in reqs:
        eng.add(rid, 0, p, n, **kw)
    got = drain(eng, on_step=watch)
    assert peaks["active"] == 2 and peaks["waiting_with_free_slot"] > 0, peaks
    assert all(got[r][1] == "length" and got[r][2]["completion_tokens"] == 60 for r, *_ in reqs), got
    assert eng.prompt_cache_stats()["evictions"] > 0
    for req in reqs:
        assert got[req[0]][0] == alone(path_smollm2, req, ctx=512)[0], req[0]


def test_a_pool_smaller_than_one_context_is_refused(path_smollm2):
    with pytest.raises(ValueError, match="one whole context"):
        _runtime.BatchEngine(path_smollm2, threads=1, ctx_size=1024, num_slots=2, kv_cache_mib=4)
