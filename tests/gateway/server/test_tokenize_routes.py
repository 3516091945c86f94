"""/tokenize and /detokenize in the vLLM and llama.cpp shapes."""
from __future__ import annotations
import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2


def test_vllm_shape_round_trip(http):
    out = http.post("/tokenize", json={"model": "smollm2", "prompt": "Hello world"}).json()
    assert out["count"] == len(out["tokens"]) > 0 and out["max_model_len"] == 512
    back = http.post("/detokenize", json={"model": "smollm2", "tokens": out["tokens"]}).json()
    assert back["prompt"] == "Hello world"


def test_llama_cpp_shape_with_pieces(http):
    out = http.post("/tokenize", json={"content": "Hello world", "with_pieces": True}).json()
    assert "".join(p["piece"] for p in out["tokens"]) == "Hello world"
    assert http.post("/detokenize", json={"tokens": [p["id"] for p in out["tokens"]]}).json()["content"] == \
        "Hello world"


def test_chat_messages_count_matches_usage(http):
    messages = [{"role": "user", "content": "Hi"}]
    count = http.post("/tokenize", json={"model": "smollm2", "messages": messages}).json()["count"]
    usage = http.post("/v1/chat/completions", json={"model": "smollm2", "messages": messages,
                                                    "max_tokens": 1}).json()["usage"]
    assert usage["prompt_tokens"] == count


def test_bad_tokens_are_400(http):
    assert http.post("/detokenize", json={"tokens": [10 ** 9]}).status_code == 400
    assert http.post("/detokenize", json={"tokens": "abc"}).status_code == 400
    assert http.post("/tokenize", json={"prompt": 5}).status_code == 400


def test_every_field_is_checked_whichever_branch_runs(http):
    """Found by schemathesis (R19): with `messages`, a wrong-typed prompt flag used to pass unread."""
    messages = [{"role": "user", "content": "Hi"}]
    for extra in ({"add_special": {}}, {"add_special_tokens": "yes"}, {"with_pieces": 1}, {"prompt": 5},
                  {"chat_template_kwargs": []}):
        response = http.post("/tokenize", json={"messages": messages, **extra})
        assert response.status_code == 400, extra
        assert response.json()["error"]["param"] == next(iter(extra))
