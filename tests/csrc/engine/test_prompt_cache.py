"""The prompt cache (csrc/engine/prefix_tree.h: cached K/V pages no running sequence maps, within
prompt_cache_mib) with the real SmolLM2: a conversation whose slot went to another one keeps its
prefill for its next turn, the cached K/V give exactly the tokens a fresh prefill gives, and the
cache stays within its budget (least recently used pages go)."""
import pytest

import lanes
from lanes import Model, _runtime

from .conftest import run_alone

SYSTEM = "<|im_start|>system\nYou are {} and you answer in one short sentence. {}<|im_end|>\n"
TURN = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PERSONAS = ["a ship's navigator", "a baker in Lyon", "a retired astronomer", "a beekeeper"]
FILLER = "Remember the rules of the house, speak plainly and never use lists. " * 8
SEEDED = dict(temperature=0.8, seed=4321)


@pytest.fixture(scope="module")
def path():
    return str(lanes.smollm2_path())


@pytest.fixture(scope="module")
def tok(path):
    return Model(path, threads=1, ctx_size=256)


def engine(path, cache_mib, slots=2):
    return _runtime.BatchEngine(path, threads=2, ctx_size=1024, num_slots=slots, max_batch_tokens=128,
                                prompt_cache_mib=cache_mib)


def run(eng, rid, ids, max_tokens=12, **kw):
    """One request alone to its end: (text, stats)."""
    return run_alone(eng, rid, ids, max_tokens, **kw)


def first_turns(tok, n):
    return [tok.tokenize(SYSTEM.format(PERSONAS[i], FILLER) + TURN.format("Where are you?"), False, True)
            for i in range(n)]


def second_turn(tok, first_ids, answer: bytes):
    follow = answer.decode("utf-8", "replace") + "<|im_end|>\n" + TURN.format("And why?")
    return first_ids + tok.tokenize(follow, False, True)


def test_a_conversation_that_lost_its_slot_keeps_its_prefill(path, tok):
    eng = engine(path, cache_mib=64)
    firsts = first_turns(tok, 3)
    answers = [run(eng, i, ids, temperature=0.0)[0] for i, ids in enumerate(firsts)]  # the third takes A's slot
    assert eng.prompt_cache_stats()["stores"] >= 1
    a2 = second_turn(tok, firsts[0], answers[0])
    text, stats = run(eng, 10, a2, **SEEDED)
    # Everything conversation A had in its slot (its first prompt and the answer's K/V) came back.
    assert stats["cached_tokens"] >= len(firsts[0]) + 4, stats
    figures = eng.prompt_cache_stats()
    assert figures["hits"] == 1 and figures["hit_tokens"] == stats["cached_tokens"], figures
    # Exactly the tokens a fresh prefill gives.
    fresh_text, fresh_stats = run(engine(path, cache_mib=0, slots=1), 10, a2, **SEEDED)
    assert fresh_stats["cached_tokens"] == 0 and fresh_text == text


def test_without_the_cache_the_displaced_conversation_is_prefilled_again(path, tok):
    eng = engine(path, cache_mib=0)
    firsts = first_turns(tok, 3)
    answers = [run(eng, i, ids, temperature=0.0)[0] for i, ids in enumerate(firsts)]
    _, stats = run(eng, 10, second_turn(tok, firsts[0], answers[0]), temperature=0.0)
    assert stats["cached_tokens"] < 16  # at most the chat template's opening tokens, shared by every prompt
    assert eng.prompt_cache_stats()["hits"] == 0


def test_the_budget_holds_and_the_least_recently_used_pages_go(path, tok):
    firsts = first_turns(tok, 4)
    page_bytes = 30 * 2 * 3 * 64 * 2 * 64  # SmolLM2: layers · (K, V) · kv heads · head dim · fp16 · page positions
    pages_each = [-(-(len(f) + 12) // 64) for f in firsts]  # prompt and answer, the last page partly filled
    assert all(n == pages_each[0] for n in pages_each)
    budget_pages = 2 * pages_each[0]  # two conversations, not three (beyond the last one's, which one slot keeps)
    budget_mib = -(-budget_pages * page_bytes // (1 << 20))
    assert (budget_mib << 20) // page_bytes < 3 * pages_each[0]
    eng = engine(path, cache_mib=budget_mib, slots=1)
    answers = [run(eng, i, ids, temperature=0.0)[0] for i, ids in enumerate(firsts)]
    # One slot, four conversations: D's pages are kept as a free slot kept its K/V; of A, B and C, the
    # least recently used pages (all of A's) went for the budget.
    figures = eng.prompt_cache_stats()
    max_pages = (budget_mib << 20) // page_bytes
    assert figures["evictions"] >= pages_each[0] and figures["entries"] <= max_pages + pages_each[0], figures
    assert figures["stores"] == figures["entries"] + figures["evictions"], figures
    assert figures["bytes_used"] <= max_pages * page_bytes <= figures["max_bytes"] == budget_mib << 20, figures
    _, c_stats = run(eng, 20, second_turn(tok, firsts[2], answers[2]), temperature=0.0)
    assert c_stats["cached_tokens"] >= len(firsts[2]), c_stats
    _, a_stats = run(eng, 21, second_turn(tok, firsts[0], answers[0]), temperature=0.0)
    assert a_stats["cached_tokens"] < 16, a_stats
    assert eng.prompt_cache_stats()["bytes_used"] <= budget_mib << 20


def test_a_prompt_sharing_only_part_of_an_entry_gets_the_fresh_tokens(path, tok):
    """A hit shorter than what is cached (an edited turn: same system prompt, another question) maps the shared
    whole pages and copies the shared part of the page where they differ; the rest is prefilled."""
    eng = engine(path, cache_mib=64, slots=1)
    first = first_turns(tok, 1)[0]
    run(eng, 1, first, temperature=0.0)
    run(eng, 2, tok.tokenize(TURN.format("Something unrelated."), False, True), temperature=0.0)  # displaces it
    edited = first[:-12] + tok.tokenize(TURN.format("Who are you, really?"), False, True)
    text, stats = run(eng, 3, edited, **SEEDED)
    assert 32 <= stats["cached_tokens"] < len(first) - 4, stats
    fresh_text, _ = run(engine(path, cache_mib=0, slots=1), 3, edited, **SEEDED)
    assert text == fresh_text
