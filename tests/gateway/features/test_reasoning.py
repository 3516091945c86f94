"""Thinking models end to end: a real server on the tiny scripted Qwen3-template model
(thinking_gguf.py) next to SmolLM2 (no thinking), through the `openai` client and raw httpx.

The scripted model answers "<th" "ink>" "Hmm" "," " think" "ing" "</think>" "\\n\\n" "The" " answer"
" is" " 42" "." with thinking on, and "The answer is 42." when the template closed an empty block."""
from __future__ import annotations

import json

import httpx
import pytest

from .. import thinking_gguf as _gguf
from ..conftest import openai_for

CONTENT, REASONING = _gguf.CONTENT, _gguf.REASONING

GREEDY = {"temperature": 0}
USER = [{"role": "user", "content": "What is the answer?"}]


@pytest.fixture
def client(think_server):
    c = openai_for(think_server.base_url)
    yield c
    c.close()


@pytest.fixture
def raw(think_server):
    with httpx.Client(base_url=think_server.base_url, timeout=60.0) as c:
        yield c


def _chat(raw, **body):
    r = raw.post("/v1/chat/completions", json={"model": "think", "messages": USER, **GREEDY, **body})
    return r


def _stream(raw, **body) -> list[dict]:
    r = _chat(raw, stream=True, **body)
    assert r.status_code == 200, r.text
    events = [json.loads(b[6:]) for b in r.text.split("\n\n") if b.startswith("data: {")]
    return events


def test_non_stream_splits_reasoning_into_both_fields(client):
    reply = client.chat.completions.create(model="think", messages=USER, **GREEDY)
    message = reply.choices[0].message
    assert message.content == CONTENT
    assert message.reasoning_content == REASONING and message.reasoning == REASONING
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 13  # reasoning tokens count too


def test_stream_deltas_carry_reasoning_then_content_and_never_a_tag(client):
    reasoning, content = [], []
    for chunk in client.chat.completions.create(model="think", messages=USER, stream=True, **GREEDY):
        for choice in chunk.choices:
            d = choice.delta
            extra = d.model_extra or {}
            if "reasoning_content" in extra:
                assert extra["reasoning"] == extra["reasoning_content"]
                assert d.content is None
                reasoning.append(extra["reasoning_content"])
            elif d.content:
                assert not reasoning or "".join(reasoning) == REASONING  # content after the block
                content.append(d.content)
    assert "".join(reasoning) == REASONING and "".join(content) == CONTENT
    for piece in reasoning + content:
        assert "<" not in piece and ">" not in piece  # neither "<th" nor "ink>" nor "</think>" leaks


def test_raw_stream_fields_are_omitted_when_empty(raw):
    events = _stream(raw)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    for d in deltas[1:]:
        assert set(d) in ({"content"}, {"reasoning_content", "reasoning"}, set()), d
    off = _stream(raw, enable_thinking=False)
    assert all("reasoning_content" not in e["choices"][0]["delta"] for e in off if e["choices"])
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in off if e["choices"]) == CONTENT


@pytest.mark.parametrize("switch", [{"enable_thinking": False}, {"chat_template_kwargs": {"enable_thinking": False}},
                                    {"reasoning_effort": "none"}])
def test_thinking_off_is_content_only_without_reasoning_fields(raw, switch):
    r = _chat(raw, **switch)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": CONTENT}


@pytest.mark.parametrize("switch", [{"enable_thinking": True}, {"reasoning_effort": "high"}, {}])
def test_thinking_on_or_default(raw, switch):
    message = _chat(raw, **switch).json()["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"], message["reasoning"]) == (CONTENT, REASONING, REASONING)


def test_stop_strings_match_content_only_and_max_tokens_counts_reasoning(raw):
    body = _chat(raw, stop=["think", " 42"]).json()["choices"][0]
    assert body["message"]["reasoning_content"] == REASONING  # "think" inside the reasoning: no stop
    assert body["message"]["content"] == "The answer is" and body["finish_reason"] == "stop"
    short = _chat(raw, max_tokens=4).json()
    assert short["choices"][0]["finish_reason"] == "length" and short["usage"]["completion_tokens"] == 4
    assert short["choices"][0]["message"] == {"role": "assistant", "content": "", "reasoning_content": "Hmm,",
                                              "reasoning": "Hmm,"}


def test_n_choices_each_split(raw):
    choices = _chat(raw, n=2).json()["choices"]
    assert [c["message"]["reasoning"] for c in choices] == [REASONING, REASONING]
    events = _stream(raw, n=2)
    for i in range(2):
        text = "".join(e["choices"][0]["delta"].get("reasoning", "") for e in events
                       if e["choices"] and e["choices"][0]["index"] == i)
        assert text == REASONING


def test_history_reasoning_is_accepted_and_not_rendered(raw):
    history = USER + [{"role": "assistant", "content": "Earlier answer", "reasoning_content": "SECRET-A",
                       "reasoning": "SECRET-B", "thinking": "SECRET-C"}]
    r = raw.post("/tokenize", json={"model": "think", "messages": history, "with_pieces": True})
    assert r.status_code == 200, r.text
    rendered = "".join(t["piece"] for t in r.json()["tokens"])
    assert "Earlier answer" in rendered and "SECRET" not in rendered
    r = _chat(raw, messages=history + [{"role": "user", "content": "And now?"}])
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == CONTENT


def test_thinking_requested_of_a_model_without_thinking_is_400(raw):
    for switch, param in [({"enable_thinking": True}, "enable_thinking"), ({"reasoning_effort": "low"}, "reasoning_effort"),
                          ({"chat_template_kwargs": {"enable_thinking": True}}, "enable_thinking")]:
        r = _chat(raw, model="smollm2", max_tokens=2, **switch)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "thinking_not_supported" and error["param"] == param
        assert "does not support thinking" in error["message"]
    r = _chat(raw, model="smollm2", max_tokens=2, enable_thinking=False)
    assert r.status_code == 200 and "reasoning_content" not in r.json()["choices"][0]["message"]


def test_models_list_thinking_only_where_real(raw):
    cards = {m["id"]: m for m in raw.get("/v1/models").json()["data"]}
    assert "thinking" in cards["think"]["laneserve"]["capabilities"]
    assert "thinking" not in cards["smollm2"]["laneserve"]["capabilities"]
