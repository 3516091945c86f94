"""Image embeddings through the lane pool on a real Gemma 3 270M lane with a random-weight gemma3 projector: a
request's images cross the request ring (wire.h kRequestImages) into the lane's BatchEngine and give the same
tokens as the engine in-process; requests with different images and text-only ones at once each equal their
result alone; a bad image span is the request's bad_request error, not the lane's end."""
import asyncio
import json
import sys
from pathlib import Path

import pytest

from lanes import _runtime, gemma3_path
from lanes.api import GenerationParams, LaneError, LaneModelSpec, PromptImage

from .conftest import text_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "csrc" / "vision"))
import mmproj_gguf  # noqa: E402
from image_prompts import image_prompt  # noqa: E402

pytestmark = pytest.mark.real_model
RAW = [(0, 0, b"", b"")]
# Seeded sampling at temperature 1: random-weight projectors move the logits but rarely the greedy pick.
SAMPLED = dict(max_tokens=16, temperature=1.0, seed=7, ignore_eos=True)
QUESTIONS = ["Describe this image.", "What colour dominates here?", "Is there a face in it?", "Count the shapes."]
SLOTS, BATCH = 8, 64


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    mmproj = mmproj_gguf.write_mmproj(tmp_path_factory.mktemp("mmproj") / "gemma3.gguf", mmproj_gguf.SPECS["gemma3"])
    tok = _runtime.Tokenizer(str(gemma3_path()))
    enc = _runtime.VisionEncoder(str(mmproj), n_threads=1)
    return [image_prompt("gemma3", tok.encode, enc, img, QUESTIONS[i % len(QUESTIONS)])
            for i, img in enumerate(mmproj_gguf.IMAGES["gemma3"])]


def params(images):
    return GenerationParams(**SAMPLED, images=tuple(PromptImage(*im) for im in images))


def in_process(ids, images):
    eng = _runtime.BatchEngine(str(gemma3_path()), threads=1, ctx_size=1024, num_slots=SLOTS, max_batch_tokens=BATCH)
    eng.add(1, 0, ids, SAMPLED["max_tokens"], temperature=1.0, seed=7, ignore_eos=True, images=images)
    out = b""
    while eng.has_work():
        out += b"".join(t for _r, _c, t, *_ in eng.step())
    return out


async def test_images_through_the_lane(make_pool, prompts):
    pool = make_pool([LaneModelSpec("gemma3", str(gemma3_path()), threads=1, ctx_size=1024, num_slots=SLOTS,
                                    max_batch_tokens=BATCH)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    ids0, im0 = prompts[0]
    alone = await text_of(pool.submit("gemma3", ids0, params(im0), 1, framings=RAW))
    assert json.loads(b'"' + alone + b'"') == in_process(ids0, im0).decode()  # the lane escapes text for JSON
    singles = [await text_of(pool.submit("gemma3", ids, params(im), 10 + k, framings=RAW))
               for k, (ids, im) in enumerate(prompts)]
    assert len(set(singles)) == len(singles)  # each image its own text
    tok = _runtime.Tokenizer(str(gemma3_path()))
    texts = [tok.encode(f"Tell me about {t}.", True, False) for t in ("the sea", "bread")]
    text_alone = [await text_of(pool.submit("gemma3", t, GenerationParams(**SAMPLED), 20 + k, framings=RAW))
                  for k, t in enumerate(texts)]
    mixed = await asyncio.gather(
        *(text_of(pool.submit("gemma3", ids, params(im), 30 + k, framings=RAW)) for k, (ids, im) in enumerate(prompts)),
        *(text_of(pool.submit("gemma3", t, GenerationParams(**SAMPLED), 40 + k, framings=RAW))
          for k, t in enumerate(texts)))
    assert mixed == singles + text_alone
    pos, emb, nc, h = im0[0]
    with pytest.raises(LaneError) as err:
        await text_of(pool.submit("gemma3", ids0, params([(len(ids0) - 2, emb, nc, h)]), 50, framings=RAW))
    assert err.value.code == "bad_request" and "outside the prompt" in str(err.value)
    assert await text_of(pool.submit("gemma3", ids0, params(im0), 51, framings=RAW)) == alone
