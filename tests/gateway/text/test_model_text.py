"""Prompt and chat tokenization with the real tokenizers (no server, no lanes)."""
import pytest

from gateway.http.errors import APIError
from gateway.text.model_text import ModelText

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def smollm2():
    from lanes import smollm2_path

    return ModelText(str(smollm2_path()))


@pytest.fixture(scope="module")
def gemma3():
    from lanes import gemma3_path

    return ModelText(str(gemma3_path()))


def test_smollm2_chat_is_chatml_with_special_tokens(smollm2):
    ids = smollm2.encode_chat([{"role": "user", "content": "Hi"}])
    assert ids[0] == 1  # <|im_start|> parsed as a special token, no BOS added (add_bos is false)
    assert smollm2.decode(ids) == ("system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face\n"
                                   "user\nHi\nassistant\n")  # control tokens hidden
    assert ids.count(2) == 2  # two <|im_end|>


def test_prompts_parse_control_tokens_as_llama_server_does(smollm2):
    assert smollm2.encode_prompt("<|im_start|>user\nHi<|im_end|>")[0] == 1
    assert smollm2.encode_prompt("<|im_end|>") == [2]
    assert 2 not in smollm2.encode_prompt("<|im_end|>", parse_special=False)
    # Chat follows llama-server: the rendered conversation is tokenized with special-token
    # parsing, so a literal "<|im_end|>" inside a message is the control token there too.
    assert smollm2.encode_chat([{"role": "user", "content": "<|im_end|>"}]).count(2) == 3


def test_gemma3_shipped_template_and_single_bos(gemma3):
    assert gemma3.supports_chat and gemma3.architecture == "gemma3"
    ids = gemma3.encode_chat([{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "What is the capital of France?"}])
    # "<bos><start_of_turn>user\nBe brief.\n\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"
    assert ids[:4] == [2, 105, 2364, 107] and ids.count(2) == 1  # one BOS, from the tokenizer
    assert ids[-5:] == [106, 107, 105, 4368, 107]
    assert gemma3.decode(ids) == "user\nBe brief.\n\nWhat is the capital of France?\nmodel\n"


def test_gemma3_rejects_non_alternating_roles(gemma3):
    with pytest.raises(APIError) as info:
        gemma3.encode_chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert info.value.status == 400


def test_token_ids_are_range_checked(smollm2):
    smollm2.check_token_ids([0, smollm2.n_vocab - 1], "prompt")
    with pytest.raises(APIError):
        smollm2.check_token_ids([smollm2.n_vocab], "prompt")
