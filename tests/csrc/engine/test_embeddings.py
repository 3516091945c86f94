"""BatchEngine embeddings with the real SmolLM2: the vector equals a numpy reference (mean of the
in-process Engine's final hidden states, L2-normalised), is bit-identical alone, chunked or
batched with generating sequences, never reuses a cached prefix yet leaves its K/V for others,
and — within what a 135M chat model can do — places a paraphrase nearer than an unrelated text."""
import numpy as np
import pytest

import lanes
from lanes import _runtime

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
TEXT = "The cat sat on the warm mat by the fire."


@pytest.fixture(scope="module")
def path():
    return str(lanes.smollm2_path())


@pytest.fixture(scope="module")
def ref(path):
    return _runtime.Engine(path, threads=2, ctx_size=512, max_batch=64)


def new_engine(path, max_batch_tokens=128, num_slots=4):
    return _runtime.BatchEngine(path, threads=2, ctx_size=512, num_slots=num_slots,
                                max_batch_tokens=max_batch_tokens)


def ids_of(ref, text):
    return list(ref.tokenize(text, False, False))


def run(engine, embeds=(), generations=()):
    """embeds: [(rid, ids)], generations: [(rid, ids, max_tokens)] → ({rid: vector}, {rid: (text, stats)})."""
    for rid, ids, max_tokens in generations:
        engine.add(rid, 0, ids, max_tokens, temperature=0.0)
    for rid, ids in embeds:
        engine.add_embedding(rid, 0, ids)
    vectors, texts = {}, {}
    for _ in range(10_000):
        if not engine.has_work():
            break
        for rid, _c, text, finished, _reason, stats, vector in engine.step(with_embeddings=True):
            if vector is not None:
                assert finished and text == b"" and rid not in vectors
                vectors[rid] = (np.array(vector), stats)
            else:
                t, _ = texts.get(rid, (b"", None))
                texts[rid] = (t + text, stats if finished else None)
    assert not engine.has_work()
    return vectors, texts


def reference(ref, ids):
    h = ref.hidden_states(ids).astype(np.float64)  # [n, n_embd], after the output norm
    mean = h.mean(axis=0)
    return mean / np.linalg.norm(mean)


def test_matches_the_mean_of_final_hidden_states(path, ref):
    engine = new_engine(path)
    ids = ids_of(ref, TEXT)
    (vec, stats), = run(engine, embeds=[(1, ids)])[0].values()
    assert vec.shape == (engine.n_embd,) == (ref.n_embd,) and vec.dtype == np.float32
    assert abs(np.linalg.norm(vec.astype(np.float64)) - 1.0) < 1e-6
    np.testing.assert_allclose(vec, reference(ref, ids), rtol=0, atol=2e-6)
    assert stats["prompt_tokens"] == len(ids) and stats["cached_tokens"] == 0
    assert stats["completion_tokens"] == 0 and stats["prefill_ns"] > 0


def test_bit_identical_alone_chunked_and_amid_generation(path, ref):
    ids = ids_of(ref, TEXT * 6)  # several prefill chunks at a 32-token budget
    alone = run(new_engine(path), embeds=[(1, ids)])[0][1][0]
    chunked = run(new_engine(path, max_batch_tokens=32), embeds=[(1, ids)])[0][1][0]
    assert alone.tobytes() == chunked.tobytes()
    engine = new_engine(path, max_batch_tokens=48, num_slots=6)
    gens = [(10 + i, ids_of(ref, CHAT.format(f"Count to {i + 3}.")), 12) for i in range(4)]
    solo_texts = run(new_engine(path), generations=gens)[1]
    vectors, texts = run(engine, embeds=[(1, ids), (2, ids_of(ref, "Dogs bark."))], generations=gens)
    assert vectors[1][0].tobytes() == alone.tobytes()
    # generation is unchanged by embedding sequences in its batches
    assert {rid: t for rid, (t, _) in texts.items()} == {rid: t for rid, (t, _) in solo_texts.items()}


def test_never_reuses_a_prefix_but_leaves_its_kv(path, ref):
    engine = new_engine(path, num_slots=2)
    prompt = ids_of(ref, CHAT.format("Tell me a story about a lighthouse keeper."))
    first = run(engine, embeds=[(1, prompt)])[0][1]
    again = run(engine, embeds=[(2, prompt)])[0][2]
    assert again[1]["cached_tokens"] == 0 and again[0].tobytes() == first[0].tobytes()
    _, texts = run(engine, generations=[(3, prompt, 4)])
    assert texts[3][1]["cached_tokens"] == len(prompt) - 1  # the embedding's K/V were reused


def test_refuses_bad_inputs(path):
    engine = new_engine(path)
    with pytest.raises(ValueError, match="empty"):
        engine.add_embedding(1, 0, [])
    with pytest.raises(ValueError, match="context"):
        engine.add_embedding(1, 0, [1] * 513)
    with pytest.raises(ValueError, match="out of range"):
        engine.add_embedding(1, 0, [1, 10**6])
    engine.add_embedding(1, 0, [1] * 512)  # a full context fits (no token is generated)
    assert len(run(engine)[0][1][0]) == engine.n_embd


def cosine(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b)  # both have norm 1


def test_paraphrase_nearer_than_unrelated(path, ref):
    """A generative 135M model is a weak embedder: mean-pooled vectors of any two English texts
    are very similar (cosine ~0.9). Only the ordering is asserted, on clear-cut pairs."""
    texts = {
        "a": "The cat is sleeping on the sofa.",
        "a2": "A cat naps on the couch.",
        "b": "Quarterly revenue rose by twelve percent.",
        "c": "How do I reset my router password?",
        "c2": "What is the way to change the password of my wifi router?",
    }
    vectors, _ = run(new_engine(path), embeds=[(i, ids_of(ref, t)) for i, t in enumerate(texts.values())])
    v = dict(zip(texts, (vectors[i][0] for i in range(len(texts)))))
    assert cosine(v["a"], v["a2"]) > cosine(v["a"], v["b"])
    assert cosine(v["a"], v["a2"]) > cosine(v["a"], v["c"])
    assert cosine(v["c"], v["c2"]) > cosine(v["c"], v["b"])
    assert cosine(v["c"], v["c2"]) > cosine(v["c"], v["a"])
    assert len({x.tobytes() for x in v.values()}) == len(v)


def test_gemma3_matches_its_reference_too():
    """Gemma 3 (embedding scale, sandwich norms, sliding-window layers, BOS): same reference check."""
    path = str(lanes.gemma3_path())
    ref = _runtime.Engine(path, threads=2, ctx_size=512, max_batch=64)
    ids = list(ref.tokenize(TEXT * 4, True, False))
    engine = _runtime.BatchEngine(path, threads=2, ctx_size=512, num_slots=2, max_batch_tokens=32)
    vectors, _ = run(engine, embeds=[(1, ids)], generations=[(2, ids[:10], 8)])
    vec = vectors[1][0]
    assert vec.shape == (640,)
    np.testing.assert_allclose(vec, reference(ref, ids), rtol=0, atol=2e-6)
