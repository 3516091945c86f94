"""The in-process Model takes what the server's --model takes, renders the model's chat template
as the server does and embeds texts as the lanes do."""
import sys
from pathlib import Path

import numpy as np
import pytest

import lanes
from lanes import Model, _runtime
from lanes.registry import ModelNotInstalled

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "csrc" / "model"))
from tiny_gguf import TinyConfig, write_tiny_gguf

SMOLLM2_HI = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def installed(locate) -> bool:
    try:
        locate()
        return True
    except ModelNotInstalled:
        return False


needs_smollm2 = pytest.mark.skipif(not installed(lanes.smollm2_path), reason="SmolLM2 is not installed")
needs_gemma3 = pytest.mark.skipif(not installed(lambda: lanes.gemma3_path(assemble=False)),
                                  reason="Gemma 3 is not installed and assembled")


@pytest.fixture(scope="module")
def smollm2():
    return Model("smollm2", threads=1, ctx_size=256)


@needs_smollm2
def test_alias_loads_the_same_file_as_the_server(smollm2):
    assert smollm2.path == str(lanes.smollm2_path())
    assert smollm2.arch == "llama"


@needs_smollm2
def test_chat_renders_the_gguf_template_as_llama_server_does(smollm2):
    assert smollm2.render_chat([{"role": "user", "content": "Hi"}]) == SMOLLM2_HI


@needs_smollm2
def test_chat_generates_from_the_rendered_prompt(smollm2):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    gen = smollm2.chat(messages, max_tokens=12, temperature=0.0)
    text = "".join(gen)
    assert gen.stats.prompt_tokens == len(smollm2.tokenize(smollm2.render_chat(messages), True, True))
    # Same tokens as generate() on the rendered prompt (which tokenizes with parse_special).
    again = smollm2.generate(smollm2.render_chat(messages), max_tokens=12, temperature=0.0)
    assert "".join(again) == text and "Paris" in text


@needs_gemma3
def test_gemma3_without_embedded_template_uses_ours():
    model = Model("gemma3", threads=1, ctx_size=128)
    text = model.render_chat([{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "What is the capital of France?"}])
    assert text == ("<start_of_turn>user\nBe brief.\n\nWhat is the capital of France?<end_of_turn>\n"
                    "<start_of_turn>model\n")
    with pytest.raises(ValueError, match="roles must alternate"):
        model.render_chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_unknown_name_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="neither a known model .* nor a GGUF file"):
        Model("no-such-model")


def test_path_still_works_and_a_model_without_template_cannot_chat(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, TinyConfig())
    model = Model(path, threads=1, ctx_size=32)
    assert model.path == str(path)
    with pytest.raises(ValueError, match="has no chat template"):
        model.chat([{"role": "user", "content": "Hi"}], max_tokens=1)


def lane_embedding(path, ids):
    """The vector a lane computes for ids (BatchEngine.add_embedding: what /v1/embeddings returns)."""
    engine = _runtime.BatchEngine(str(path), threads=1, ctx_size=256, num_slots=2, max_batch_tokens=16)
    engine.add_embedding(1, 0, ids)
    for _ in range(1000):
        for _rid, _c, _text, finished, _reason, _stats, vector in engine.step(with_embeddings=True):
            if finished:
                return vector
    raise AssertionError("the embedding never finished")


@needs_smollm2
def test_embed_equals_the_lanes_vectors_bit_for_bit(smollm2):
    texts = ["The cat is sleeping on the sofa.", "A cat naps on the couch.", "Stock markets fell sharply."]
    vectors = smollm2.embed(texts)
    assert vectors.shape == (3, smollm2._engine.n_embd) and vectors.dtype == np.float32
    for text, vec in zip(texts, vectors):
        ids = smollm2.tokenize(text, True, False)  # as the server's /v1/embeddings tokenizes an input
        assert np.array_equal(vec, lane_embedding(smollm2.path, ids))  # chunked over 16-token steps there
    assert np.array_equal(smollm2.embed(texts[0])[0], vectors[0])
    ids = smollm2.tokenize(texts[1], True, False)
    assert np.array_equal(smollm2.embed([ids])[0], vectors[1])
    cos = vectors @ vectors.T
    assert cos[0, 1] > cos[0, 2]  # the paraphrase is nearer than the unrelated text


@needs_smollm2
def test_embed_refuses_empty_and_too_long_inputs(smollm2):
    with pytest.raises(ValueError, match="input 1 is empty"):
        smollm2.embed(["fine", []])
    with pytest.raises(ValueError, match="context is 256 tokens"):
        smollm2.embed([[1000] * 257])
