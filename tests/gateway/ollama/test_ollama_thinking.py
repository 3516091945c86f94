"""Ollama `think` on the tiny scripted thinking model (thinking_gguf.py) through the real `ollama`
client: `message.thinking` / `thinking` carry the reasoning (the split `<th` + `ink>` marker never
leaks), content carries the answer, streamed and not; `think: false` gives content only."""
from __future__ import annotations

import json

import httpx
import ollama
import pytest

from .. import thinking_gguf as _gguf

USER = [{"role": "user", "content": "What is the answer?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def think_url(thinking_server):
    return thinking_server.base_url


def test_chat_think_stream_and_not(think_url):
    client = ollama.Client(host=think_url, timeout=60)
    reply = client.chat(model="think", messages=USER, think=True, options=GREEDY)
    assert reply.message.thinking == "Hmm, thinking" and reply.message.content == "The answer is 42."
    parts = list(client.chat(model="think", messages=USER, think=True, stream=True, options=GREEDY))
    assert "".join(p.message.thinking or "" for p in parts) == "Hmm, thinking"
    assert "".join(p.message.content for p in parts) == "The answer is 42."
    assert all("<" not in (p.message.thinking or "") + p.message.content for p in parts)
    assert parts[-1].done and parts[-1].eval_count > 0
    off = client.chat(model="think", messages=USER, think=False, options=GREEDY)
    assert off.message.content == "The answer is 42." and not off.message.thinking


def test_generate_think_and_capabilities(think_url):
    client = ollama.Client(host=think_url, timeout=60)
    reply = client.generate(model="think", prompt="What is the answer?", think=True, options=GREEDY)
    assert reply.thinking == "Hmm, thinking" and reply.response == "The answer is 42."
    assert client.show("think").capabilities == ["completion", "tools", "thinking"]
    with httpx.stream("POST", think_url + "/api/generate", json={"model": "think", "prompt": "What is the answer?",
                                                                  "think": True, "options": GREEDY}) as r:
        objs = [json.loads(line) for line in r.iter_lines() if line]
    assert "".join(o.get("thinking", "") for o in objs) == "Hmm, thinking"
    assert "".join(o["response"] for o in objs) == "The answer is 42."
