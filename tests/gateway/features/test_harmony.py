"""gpt-oss's harmony output end to end: a real server on the tiny scripted gpt-oss model
(harmony_gguf.py) through the `openai` client. Its greedy answer is an analysis message then a final
one; the analysis channel comes back as reasoning, the final channel as content, no control text."""
from __future__ import annotations

import pytest

from .. import harmony_gguf as _gguf
from ..conftest import openai_for

CONTENT, REASONING = _gguf.CONTENT, _gguf.REASONING
GREEDY = {"temperature": 0}
USER = [{"role": "user", "content": "What is 6*7?"}]


@pytest.fixture
def client(harmony_server):
    c = openai_for(harmony_server.base_url)
    yield c
    c.close()


def test_non_stream_analysis_is_reasoning_final_is_content(client):
    reply = client.chat.completions.create(model="harmony", messages=USER, **GREEDY)
    message = reply.choices[0].message
    assert message.content == CONTENT
    assert message.reasoning_content == REASONING and message.reasoning == REASONING
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == len(_gguf.SCRIPT) - 2  # every token but the prompt's and <|return|>


def test_stream_never_carries_control_text(client):
    reasoning, content = [], []
    for chunk in client.chat.completions.create(model="harmony", messages=USER, stream=True, **GREEDY):
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if "reasoning_content" in extra:
                reasoning.append(extra["reasoning_content"])
            elif choice.delta.content:
                content.append(choice.delta.content)
    assert "".join(reasoning) == REASONING and "".join(content) == CONTENT
    for piece in reasoning + content:
        assert "<|" not in piece and "assistant" not in piece and "final" not in piece


@pytest.mark.parametrize("switch", [{"reasoning_effort": "none"},
                                    {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}])
def test_thinking_off_is_all_content_without_control_text(client, switch):
    reply = client.chat.completions.create(model="harmony", messages=USER, **GREEDY, **switch)
    message = reply.choices[0].message
    assert message.content == REASONING + CONTENT and not (message.model_extra or {}).get("reasoning_content")
    chunks = client.chat.completions.create(model="harmony", messages=USER, stream=True, **GREEDY, **switch)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REASONING + CONTENT


def test_reasoning_levels_reach_the_template_from_every_api(client, harmony_server):
    """The tiny model's vocabulary is byte-level, so the prompt grows by a byte per letter of the
    level the template prints ("Reasoning: low" / "medium" / "high")."""
    import ollama

    def chat(**kw):
        return client.chat.completions.create(model="harmony", messages=USER, max_tokens=1, **kw).usage.prompt_tokens

    def responses(**kw):
        return client.responses.create(model="harmony", input=USER, max_output_tokens=1, **kw).usage.input_tokens

    api = ollama.Client(host=harmony_server.base_url, timeout=60)

    def ollama_chat(think):
        return api.chat(model="harmony", messages=USER, think=think, options={"num_predict": 1}).prompt_eval_count

    medium = chat()
    assert [chat(reasoning_effort=e) - medium for e in ("low", "medium", "high")] == [-3, 0, -2]
    assert [responses(reasoning={"effort": e}) - responses() for e in ("low", "high")] == [-3, -2]
    assert [ollama_chat(t) - ollama_chat(True) for t in ("low", "medium", "high")] == [-3, 0, -2]
