"""Images in BatchEngine (the lane's batched step) on the random-weight projectors with their real text models: an
image request gives the same tokens as the one-batch reference path (Engine.last_logits_with_images), alone and
batched with other images and text (a gemma3 image is never split across steps, even when the step budget would
cut it), and prefix reuse / the prompt cache never match one image's K/V to another image at the same ids."""
import numpy as np
import pytest

import mmproj_gguf
from image_prompts import image_prompt
from lanes import _runtime as rt

GREEDY = dict(temperature=0.0, ignore_eos=True)
# Random-weight projectors move the logits but rarely the greedy pick: seeded sampling at temperature 1 turns any
# change of the logits (another image's K/V reused) into other text within a few tokens.
SAMPLED = dict(temperature=1.0, seed=7, ignore_eos=True)
N_GEN = 16
QUESTIONS = ["Describe this image.", "What colour dominates here?", "Is there a face in it?", "Count the shapes."]


def reference_greedy(model, ids, images):
    """N_GEN greedy tokens by the one-batch reference path, detokenized."""
    got = []
    for _ in range(N_GEN):
        got.append(int(np.argmax(model._engine.last_logits_with_images(ids + got, [im[:3] for im in images]))))
    return model._engine.detokenize(got)


def run(eng, requests, sampling=SAMPLED):
    """requests: [(rid, ids, kwargs)] added in order → {rid: (text bytes, final stats)}."""
    for rid, ids, kw in requests:
        eng.add(rid, 0, ids, N_GEN, **sampling, **kw)
    out = {}
    for _ in range(10_000):
        if not eng.has_work():
            break
        for rid, _choice, text, finished, _reason, stats in eng.step():
            t, _ = out.get(rid, (b"", None))
            out[rid] = (t + text, stats if finished else None)
    assert not eng.has_work()
    return out


def engine(model_path, **kw):
    opts = dict(threads=2, ctx_size=1024, num_slots=4, max_batch_tokens=64)
    opts.update(kw)
    return rt.BatchEngine(str(model_path), **opts)


@pytest.fixture(scope="module")
def prompts(runtimes):
    """Per projector: one image prompt per test image (different images and questions)."""
    out = {}
    for name in mmproj_gguf.SPECS:
        model, enc = runtimes[name]
        out[name] = [image_prompt(name, model._engine.tokenize, enc, img, QUESTIONS[i % len(QUESTIONS)])
                     for i, img in enumerate(mmproj_gguf.IMAGES[name])]
    return out


@pytest.mark.parametrize("name", list(mmproj_gguf.SPECS))
def test_alone_matches_reference_and_batched(name, runtimes, prompts, text_models):
    model, _enc = runtimes[name]
    eng = engine(text_models[name])
    alone = {}
    for i, (ids, images) in enumerate(prompts[name]):
        text, stats = run(eng, [(i, ids, dict(images=images))], GREEDY)[i]
        assert text.decode("utf-8", "replace") == reference_greedy(model, ids, images), i
        assert stats["prompt_tokens"] == len(ids)  # image positions count as prompt tokens
        alone[i] = run(eng, [(10 + i, ids, dict(images=images))])[10 + i][0]
    assert len(set(alone.values())) == len(alone)  # each image its own text
    # All images at once, interleaved with text-only requests, in a 64-token step budget: chunks stop before a
    # gemma3 image (36 tokens) rather than split it.
    fresh = engine(text_models[name])
    texts = [(100 + k, list(model._engine.tokenize(f"Tell me about {t}.", True, True)), {})
             for k, t in enumerate(["the sea", "bread", "winter", "music"])]
    text_alone = {rid: run(engine(text_models[name]), [(rid, ids, kw)])[rid][0] for rid, ids, kw in texts}
    mixed = []
    for i, (ids, images) in enumerate(prompts[name]):
        mixed += [texts[i], (10 + i, ids, dict(images=images))]
    got = run(fresh, mixed)
    for i in alone:
        assert got[10 + i][0] == alone[i], i
    for rid in text_alone:
        assert got[rid][0] == text_alone[rid], rid


def test_prefix_reuse_tells_images_apart(prompts, text_models):
    """Two prompts with the same ids but different images: the second reuses only the text before the image; the
    same image again reuses past it."""
    (ids_a, im_a), (_, im_b) = prompts["gemma3"][0], prompts["gemma3"][1]
    ids_b_same_text = ids_a
    im_b_at_a = [(im_a[0][0], im_b[0][1], True, im_b[0][3])]  # image B where A's image sits
    alone_b = run(engine(text_models["gemma3"]), [(1, ids_b_same_text, dict(images=im_b_at_a))])[1][0]
    eng = engine(text_models["gemma3"], num_slots=1)
    assert run(eng, [(1, ids_a, dict(images=im_a))])[1][0] != alone_b  # the images' texts differ
    text, stats = run(eng, [(2, ids_b_same_text, dict(images=im_b_at_a))])[2]
    assert text == alone_b
    assert stats["cached_tokens"] <= im_a[0][0]
    again_text, again = run(eng, [(3, ids_b_same_text, dict(images=im_b_at_a))])[3]
    assert again_text == alone_b and again["cached_tokens"] > im_a[0][0] + len(im_b[0][1])


def test_prompt_cache_tells_images_apart(prompts, text_models, runtimes):
    """One slot: image A's conversation is displaced into the prompt cache by a text request; the same ids with
    image B must not attach to A's entry past the image."""
    model, _ = runtimes["gemma3"]
    (ids_a, im_a), (_, im_b) = prompts["gemma3"][0], prompts["gemma3"][1]
    im_b_at_a = [(im_a[0][0], im_b[0][1], True, im_b[0][3])]
    alone_b = run(engine(text_models["gemma3"]), [(1, ids_a, dict(images=im_b_at_a))])[1][0]
    eng = engine(text_models["gemma3"], num_slots=1, prompt_cache_mib=64)
    assert run(eng, [(1, ids_a, dict(images=im_a))])[1][0] != alone_b  # the images' texts differ
    run(eng, [(2, list(model._engine.tokenize("An unrelated text prompt.", True, True)), {})])
    assert eng.prompt_cache_stats()["entries"] >= 1
    text, stats = run(eng, [(3, ids_a, dict(images=im_b_at_a))])[3]
    assert text == alone_b and stats["cached_tokens"] <= im_a[0][0]
    run(eng, [(4, list(model._engine.tokenize("Another unrelated text prompt.", True, True)), {})])
    text, stats = run(eng, [(5, ids_a, dict(images=im_a))])[5]  # image A again: its entry serves past the image
    assert stats["cached_tokens"] > im_a[0][0] + len(im_a[0][1])


def test_bad_images_are_refused(prompts, text_models):
    ids, images = prompts["gemma3"][0]
    eng = engine(text_models["gemma3"], num_slots=4, max_batch_tokens=32)  # 36-token image > 32 - 4
    with pytest.raises(ValueError, match="max_batch_tokens"):
        eng.add(1, 0, ids, 4, images=images)
    eng = engine(text_models["gemma3"])
    pos, emb, nc, h = images[0]
    with pytest.raises(ValueError, match="outside the prompt"):
        eng.add(1, 0, ids, 4, images=[(len(ids) - 2, emb, nc, h)])
    with pytest.raises(ValueError, match="floats"):
        eng.add(1, 0, ids, 4, images=[(pos, emb[:, :-1], nc, h)])
    assert not eng.has_work()
