"""The vision encoder (csrc/vision/) and the gateway's preprocessing against llama.cpp's mtmd, on the random-weight
projectors of mmproj_gguf.SPECS (reference data: tests/data/vision/make_reference.py).

Tolerance: llama.cpp's own two attention paths (flash attention off: fp32; on, its CPU default: K and V in fp16)
give embeddings that differ by up to ~1.1e-3–2.2e-3 (max abs, embeddings of RMS ~1) on the same preprocessed
image; our encoder computes with the same roundings but other accumulation orders, so each image input's max and
RMS difference to the flash-attention-off reference must stay within 2× that spread, measured per input (we
measure 0.6–1.1×). A preprocessing slip (the two resampling passes in the other order: pixels off by up to 6
levels) gives ~28× the spread, channel-swapped mean/std ~490×, CLIP's mean/std replaced by 0.5 ~880×.
"""

import numpy as np
import pytest
from PIL import Image

import mmproj_gguf
from reference import ARRAYS, REF
from gateway.vision.layout import image_layout
from gateway.vision.preprocess import VisionConfig, preprocess
from lanes import _runtime as rt

SPREAD_FACTOR = 2.0
CASES = [(name, img) for name in mmproj_gguf.SPECS for img in mmproj_gguf.IMAGES[name]]


@pytest.fixture(scope="module")
def encoders(mmproj_files):
    return {name: rt.VisionEncoder(str(p), n_threads=2) for name, p in mmproj_files.items()}


def _inputs(name, img, enc):
    return preprocess(Image.fromarray(mmproj_gguf.image_pixels(img)), VisionConfig.from_encoder(enc))


@pytest.mark.parametrize("name, img", CASES, ids=[f"{n}-{i.name}" for n, i in CASES])
def test_embeddings_match_mtmd(name, img, encoders):
    enc = encoders[name]
    ref = REF["projectors"][name]["images"][img.name]
    chunks = [c for c in ref["layout"] if c["type"] == "image"]
    pre = _inputs(name, img, enc)
    assert len(pre.inputs) == len(chunks), "tile count differs from mtmd's"
    for chunk, x in zip(chunks, pre.inputs):
        emb = enc.encode(x)
        assert emb.shape == (chunk["n_tokens"], enc.n_embd_out)
        want = ARRAYS[chunk["key"] + "/rows"]
        diff = np.abs(emb[chunk["rows"]] - want)
        assert diff.max() <= SPREAD_FACTOR * chunk["fa_max_abs_diff"], (chunk["key"], diff.max())
        assert np.sqrt((diff ** 2).mean()) <= SPREAD_FACTOR * chunk["fa_rms_diff"], chunk["key"]
        norms = np.linalg.norm(emb, axis=1)
        assert np.abs(norms - ARRAYS[chunk["key"] + "/norms"]).max() <= \
            SPREAD_FACTOR * chunk["fa_max_abs_diff"] * np.sqrt(enc.n_embd_out), chunk["key"]


@pytest.mark.parametrize("name", list(mmproj_gguf.SPECS))
def test_bit_identical_across_thread_counts(name, mmproj_files):
    img = mmproj_gguf.IMAGES[name][1]
    one = rt.VisionEncoder(str(mmproj_files[name]), n_threads=1)
    two = rt.VisionEncoder(str(mmproj_files[name]), n_threads=2)
    x = _inputs(name, img, one).inputs[0]
    a, b = one.encode(x), two.encode(x)
    assert np.array_equal(a, b) and np.array_equal(a, one.encode(x))


@pytest.mark.parametrize("name", list(mmproj_gguf.SPECS))
def test_prompt_tokens_match_mtmd(name, encoders, text_models):
    """Marker text and image token counts, laid out as mtmd does: the text on each side of the image marker
    tokenized on its own (BOS only at the start), every marker piece tokenized with special tokens parsed."""
    tok = rt.Tokenizer(str(text_models[name]))
    enc = encoders[name]
    before, after = REF["prompt"][name].split(REF["marker"])
    for img in mmproj_gguf.IMAGES[name]:
        ref = REF["projectors"][name]["images"][img.name]
        want = []
        for c in ref["layout"]:
            want += c["tokens"] if c["type"] == "text" else [-1] * c["n_tokens"]
        pre = _inputs(name, img, enc)
        got = list(tok.encode(before, True, True))
        for seg in image_layout(name, pre):
            got += list(tok.encode(seg, False, True)) if isinstance(seg, str) else [-1] * enc.tokens_per_image
        got += list(tok.encode(after, False, True))
        assert got == want, img.name
        assert len(got) == ref["n_prompt_tokens"]


def test_unsupported_projector_type_is_a_clear_error(tmp_path):
    spec = mmproj_gguf.SPECS["gemma3"]
    path = mmproj_gguf.write_mmproj(tmp_path / "mlp.gguf", spec)
    data = path.read_bytes().replace(b"gemma3", b"ldpv2x", 1)
    path.write_bytes(data)
    with pytest.raises(ValueError, match="unsupported projector type 'ldpv2x'"):
        rt.VisionEncoder(str(path))


def test_output_size_must_match_the_text_model(mmproj_files):
    with pytest.raises(ValueError, match="outputs 640-wide embeddings but the text model's n_embd is 576"):
        rt.VisionEncoder(str(mmproj_files["gemma3"]), text_n_embd=576)
    assert rt.VisionEncoder(str(mmproj_files["gemma3"]), text_n_embd=640).n_embd_out == 640


def test_wrong_input_shape_is_refused(encoders):
    with pytest.raises(ValueError, match=r"shape \(3, 96, 96\)"):
        encoders["gemma3"].encode(np.zeros((3, 64, 64), np.float32))
