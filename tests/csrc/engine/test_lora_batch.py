"""BatchEngine with LoRA adapters on the real SmolLM2: several adapters and the base model in one
batch, each sequence's tokens bit-identical to running alone; the prefix cache never mixes adapters;
unloading never disturbs a running sequence."""
import random
import sys
from pathlib import Path

import pytest

import lanes
from lanes import _runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from lora_gguf import ATTENTION, AdapterSpec, Q, cached_adapter  # noqa: E402

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
ALL_R16 = AdapterSpec(rank=16, a_type=Q.F16, b_type=Q.F16, seed=31)
ATTN_R64 = AdapterSpec(rank=64, targets=ATTENTION, a_type=Q.Q8_0, b_type=Q.Q8_0, rel_norm=0.15, seed=32)


@pytest.fixture(scope="module")
def path():
    return str(lanes.smollm2_path())


@pytest.fixture(scope="module")
def adapters(path):
    return {1: str(cached_adapter(Path(path), ALL_R16)), 2: str(cached_adapter(Path(path), ATTN_R64))}


@pytest.fixture(scope="module")
def tok(path):
    return _runtime.Tokenizer(path)


def new_engine(path, adapters, **kw):
    e = _runtime.BatchEngine(path, threads=2, ctx_size=512, num_slots=8, max_batch_tokens=kw.pop("max_batch", 128))
    for i, p in adapters.items():
        assert e.load_adapter(i, p) > 0
    return e


def run(engine, requests, between=None):
    """requests: [(rid, ids, max_tokens, kwargs)] → {rid: (text, reason)}; between(step) runs after each step."""
    for rid, ids, max_tokens, kw in requests:
        engine.add(rid, 0, ids, max_tokens, **kw)
    out = {}
    for step in range(10_000):
        if not engine.has_work():
            break
        for rid, _c, text, finished, reason, _stats in engine.step():
            t, _ = out.get(rid, (b"", None))
            out[rid] = (t + text, reason if finished else None)
        if between:
            between(step)
    return out


def eight(tok):
    """4 sequences on two different adapters, 4 on the base; seeded, temperature 0.8."""
    topics = ["rain", "the sea", "bread", "winter", "a robot", "music", "trees", "a city"]
    reqs = []
    for i, topic in enumerate(topics):
        lora = [(1, 1.0)] if i < 2 else [(2, 0.7)] if i < 4 else []
        ids = tok.encode(CHAT.format(f"Write two sentences about {topic}."), False, True)
        reqs.append((i + 1, ids, 24, dict(temperature=0.8, seed=100 + i, ignore_eos=True, adapters=lora)))
    return reqs


def test_mixed_adapters_in_one_batch_are_identical_to_alone(path, adapters, tok):
    engine = new_engine(path, adapters)
    reqs = eight(tok)
    alone = {r[0]: run(new_engine(path, adapters), [r])[r[0]] for r in reqs}
    for trial in range(2):
        order = reqs[:]
        random.Random(trial).shuffle(order)
        together = run(engine, order)
        assert together == alone, trial
    # The adapters matter: the same prompt and seed without the adapter give other text.
    rid, ids, n, kw = reqs[0]
    base = run(engine, [(50, ids, n, {**kw, "adapters": []})])[50]
    assert base[0] != alone[rid][0]


def test_many_rows_of_one_adapter_are_identical_to_alone(path, adapters, tok):
    """Seven sequences of one adapter at different scales, so the kernels take its rows in chunks of
    four, in pairs and alone, plus one sequence using both adapters: each is identical to alone."""
    topics = ["rain", "the sea", "bread", "winter", "a robot", "music", "trees", "a city"]
    reqs = []
    for i, topic in enumerate(topics):
        lora = [(1, 0.6 + 0.1 * i)] if i < 7 else [(1, 1.0), (2, 0.7)]
        ids = tok.encode(CHAT.format(f"Write two sentences about {topic}."), False, True)
        reqs.append((i + 1, ids, 16, dict(temperature=0.8, seed=200 + i, ignore_eos=True, adapters=lora)))
    alone = {r[0]: run(new_engine(path, adapters), [r])[r[0]] for r in reqs}
    together = run(new_engine(path, adapters), reqs[::-1])
    assert together == alone


def test_prefix_cache_never_reuses_another_adapters_kv(path, adapters, tok):
    rid, ids, n, kw = eight(tok)[0]  # adapter 1
    fresh = run(new_engine(path, adapters), [(1, ids, n, kw)])[1]
    engine = new_engine(path, adapters)
    run(engine, [(2, ids, n, {**kw, "adapters": []})])           # base K/V of this prompt cached
    run(engine, [(3, ids, n, {**kw, "adapters": [(1, 0.5)]})])   # same adapter, other scale
    assert run(engine, [(4, ids, n, kw)])[4] == fresh


def test_unload_does_not_disturb_running_sequences(path, adapters, tok):
    reqs = eight(tok)[:3]
    alone = {r[0]: run(new_engine(path, adapters), [r])[r[0]] for r in reqs}
    engine = new_engine(path, adapters)

    def unload(step):
        if step == 3:
            assert engine.unload_adapter(1) and engine.unload_adapter(2)
            assert engine.adapter_ids == []
    assert run(engine, reqs, unload) == alone
    with pytest.raises(ValueError, match="not loaded"):
        engine.add(9, 0, reqs[0][1], 4, adapters=[(1, 1.0)])
    # Loading again (a new id for the same file) works.
    engine.load_adapter(3, adapters[1])
    assert run(engine, [(10, reqs[0][1], reqs[0][2], {**reqs[0][3], "adapters": [(3, 1.0)]})])[10] == alone[1]


def test_request_errors(path, adapters, tok):
    engine = new_engine(path, adapters)
    ids = tok.encode("Hello", False, False)
    with pytest.raises(ValueError, match="named twice"):
        engine.add(1, 0, ids, 4, adapters=[(1, 1.0), (1, 0.5)])
    with pytest.raises(ValueError, match="in use"):
        engine.load_adapter(1, adapters[1])
    engine.add(2, 0, ids, 2, adapters=[(77, 0.0)])  # scale 0: left out, even when unknown
    run(engine, [])
