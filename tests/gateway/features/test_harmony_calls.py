"""gpt-oss tool calls end to end: a real server on the tiny scripted gpt-oss model that answers with
calls (harmony_gguf.write_harmony_tools_gguf) through the `openai` (Chat Completions and Responses),
`anthropic` and `ollama` clients, streamed and not. Its greedy answer is an analysis message
(reasoning), a commentary preamble (content) and two calls, one with its recipient in the role and
one in the channel header. The grammar (gateway.features.tools) lets both through with
parallel_tool_calls, ends the answer after the first call without; without tools the same text is
content without the control text."""
from __future__ import annotations

import json

import anthropic
import ollama
import pytest

from .. import harmony_gguf as _gguf
from .test_harmony import client  # noqa: F401  (the openai client fixture on harmony_server)

MODEL = "harmony-tools"
GREEDY = {"temperature": 0}
PARALLEL = {"temperature": 0, "parallel_tool_calls": True}
USER = [{"role": "user", "content": "Weather and time in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": name, "description": name.replace("_", " "), "parameters": {
    "type": "object", "properties": {key: {"type": "string"}}, "required": [key]}}}
    for name, key in (("get_weather", "city"), ("get_time", "tz"))]
CALLS = _gguf.CALLS  # [(name, arguments as written)]


def test_chat_calls_with_reasoning_and_preamble(client):
    reply = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, **PARALLEL)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == CALLS
    assert all(c.id.startswith("call_") and c.type == "function" for c in choice.message.tool_calls)
    assert choice.message.content == _gguf.TOOLS_CONTENT
    assert choice.message.model_extra["reasoning_content"] == _gguf.TOOLS_REASONING


def test_streamed_calls_accumulate_to_the_same_answer(client):
    calls: dict[int, list[str]] = {}
    content, reasoning, finish = [], [], None
    for chunk in client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, stream=True, **PARALLEL):
        for choice in chunk.choices:
            delta = choice.delta
            reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
            content.append(delta.content or "")
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", ""])
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and [tuple(calls[i]) for i in sorted(calls)] == CALLS
    assert "".join(content) == _gguf.TOOLS_CONTENT and "".join(reasoning) == _gguf.TOOLS_REASONING


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_one_call_without_parallel_calls(client, choice):
    reply = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice=choice, **GREEDY)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls" and message.content == _gguf.TOOLS_CONTENT
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == CALLS[:1]


@pytest.mark.parametrize("tools", [{}, {"tools": TOOLS, "tool_choice": "none"}])
def test_without_tools_the_calls_stay_content(client, tools):
    reply = client.chat.completions.create(model=MODEL, messages=USER, **tools, **GREEDY)
    assert reply.choices[0].finish_reason == "stop" and not reply.choices[0].message.tool_calls
    assert reply.choices[0].message.content == _gguf.TOOLS_CONTENT + "".join(args for _, args in CALLS)


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_call_items(client, stream):
    flat = [{"type": "function", **t["function"]} for t in TOOLS]
    if stream:
        with client.responses.stream(model=MODEL, input=USER, tools=flat, **PARALLEL) as events:
            list(events)
            response = events.get_final_response()
    else:
        response = client.responses.create(model=MODEL, input=USER, tools=flat, **PARALLEL)
    calls = [(item.name, item.arguments) for item in response.output if item.type == "function_call"]
    assert calls == CALLS and response.output_text == _gguf.TOOLS_CONTENT
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call", "function_call"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_use_blocks(harmony_server, stream):
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    with anthropic.Anthropic(base_url=harmony_server.base_url, api_key="unused", max_retries=0, timeout=60) as c:
        kwargs = dict(model=MODEL, max_tokens=64, messages=USER, tools=tools, extra_body=GREEDY,
                      tool_choice={"type": "auto", "disable_parallel_tool_use": False})
        if stream:
            with c.messages.stream(**kwargs) as events:
                list(events)
                reply = events.get_final_message()
        else:
            reply = c.messages.create(**kwargs)
    assert reply.stop_reason == "tool_use"
    uses = [(b.name, b.input) for b in reply.content if b.type == "tool_use"]
    assert uses == [(name, json.loads(args)) for name, args in CALLS]
    assert "".join(b.text for b in reply.content if b.type == "text") == _gguf.TOOLS_CONTENT


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_message_tool_calls(harmony_server, stream):
    api = ollama.Client(host=harmony_server.base_url, timeout=60)
    answer = api.chat(model=MODEL, messages=USER, tools=TOOLS, stream=stream, options=GREEDY)
    parts = list(answer) if stream else [answer]
    calls = [(c.function.name, dict(c.function.arguments)) for p in parts for c in p.message.tool_calls or []]
    assert calls == [(name, json.loads(args)) for name, args in CALLS[:1]]  # Ollama: no parallel calls
    assert "".join(p.message.content or "" for p in parts) == _gguf.TOOLS_CONTENT
    assert "".join(p.message.thinking or "" for p in parts) == _gguf.TOOLS_REASONING

