"""Chat prompts around one test image, laid out as mtmd does, with the image's embeddings and content hash: what
the engine and pool tests feed BatchEngine (the gateway builds the same from a request)."""
import hashlib

from PIL import Image

import mmproj_gguf
from gateway.vision.layout import image_layout
from gateway.vision.preprocess import VisionConfig, preprocess

TURN = {"gemma3": ("<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n"),
        "idefics3": ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")}


def image_prompt(name, tokenize, enc, img, question):
    """(ids, [(pos, embeddings, non_causal, content hash)]) for one image followed by the question.
    tokenize(text, add_special, parse_special) → ids; enc: lanes._runtime.VisionEncoder."""
    pixels = mmproj_gguf.image_pixels(img)
    pre = preprocess(Image.fromarray(pixels), VisionConfig.from_encoder(enc))
    digest = int.from_bytes(hashlib.sha256(pixels.tobytes()).digest()[:8], "little")
    before, after = TURN[name]
    ids = list(tokenize(before, True, True))
    images = []
    for seg in image_layout(name, pre):
        if isinstance(seg, str):
            ids += list(tokenize(seg, False, True))
        else:
            # Each encoder input (idefics3 tile) is its own span; one image's tiles share its digest (+ index).
            images.append((len(ids), enc.encode(pre.inputs[seg]), name == "gemma3", (digest + seg) % (1 << 64)))
            ids += [0] * enc.tokens_per_image
    ids += list(tokenize(f"{question}{after}", False, True))
    return ids, images
