"""The in-process Model takes what the server's --model takes and renders the model's chat template
as the server does."""
import sys
from pathlib import Path

import pytest

import lanes
from lanes import Model
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
