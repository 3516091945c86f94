"""gateway.vision.prompt on Gemma 3 270M and the random-weight gemma3 projector: a chat template's rendering with
an image marker becomes the same ids and embeddings as the golden tests' mtmd layout; the embedding cache serves a
repeated image without encoding it again; a template that drops a marker, or a text model lacking the projector's
marker tokens, is a ValueError (the routes' 400)."""
import numpy as np
import pytest
from PIL import Image

import lanes
import mmproj_gguf
from gateway.text.model_text import ModelText
from gateway.vision.parts import IMAGE_MARKER
from gateway.vision.prompt import VisionModel, build_image_prompt
from image_prompts import image_prompt

QUESTION = "Describe this image."


def encoders(text: ModelText):
    tok = text.tokenizer
    return (text.encode_rendered, lambda s: list(tok.encode(s, False, True)),
            lambda t: len(tok.encode(t, False, True)) == 1)


@pytest.fixture(scope="module")
def gemma(mmproj_files):
    text = ModelText(str(lanes.gemma3_path()))
    return text, VisionModel(str(mmproj_files["gemma3"]), text_n_embd=640)


def test_rendered_chat_matches_the_mtmd_layout(gemma):
    text, vision = gemma
    img = mmproj_gguf.IMAGES["gemma3"][0]
    rendered = text.render_chat([{"role": "user", "content": IMAGE_MARKER + QUESTION}])
    pil = Image.fromarray(mmproj_gguf.image_pixels(img))
    ids, spans = build_image_prompt(rendered, [pil], vision, *encoders(text))
    want_ids, want_spans = image_prompt("gemma3", text.tokenizer.encode, vision.encoder, img, QUESTION)
    assert ids == want_ids
    assert [(p, nc) for p, _, nc, _ in spans] == [(p, nc) for p, _, nc, _ in want_spans]
    assert np.array_equal(spans[0][1], want_spans[0][1])
    misses = vision.misses
    again, spans2 = build_image_prompt(rendered, [pil], vision, *encoders(text))
    assert again == ids and vision.misses == misses and spans2[0][3] == spans[0][3]  # cached, same hash
    other = Image.fromarray(mmproj_gguf.image_pixels(mmproj_gguf.IMAGES["gemma3"][1]))
    assert build_image_prompt(rendered, [other], vision, *encoders(text))[1][0][3] != spans[0][3]


def test_refusals(gemma, mmproj_files):
    text, vision = gemma
    pil = Image.fromarray(mmproj_gguf.image_pixels(mmproj_gguf.IMAGES["gemma3"][0]))
    rendered = text.render_chat([{"role": "user", "content": QUESTION}])
    with pytest.raises(ValueError, match="kept 0 of 1 image markers"):
        build_image_prompt(rendered, [pil], vision, *encoders(text))
    stock = ModelText(str(lanes.smollm2_path()))  # SmolLM2 without SmolVLM's marker tokens
    idefics = VisionModel(str(mmproj_files["idefics3"]), text_n_embd=576)
    rendered = stock.render_chat([{"role": "user", "content": IMAGE_MARKER + QUESTION}])
    with pytest.raises(ValueError, match="lacks the image marker token"):
        build_image_prompt(rendered, [pil], idefics, *encoders(stock))
