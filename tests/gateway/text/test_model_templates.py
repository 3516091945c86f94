"""The chat templates of the model families laneserve runs (Llama 3.1 / 3.2, Mistral Nemo, Qwen 2.5,
Qwen 3, Phi-3.5, Granite 3.3, SmolLM3, OLMo 2: tests/data/templates/*.jinja, as their GGUFs carry them)
render in our jinja2 sandbox exactly as llama-server's own template engine renders them
(tests/data/templates/rendered.json, from make_reference.py: POST /apply-template), on a
conversation with a system prompt, a lone user turn and a multi-turn one with non-ASCII text.
`strftime_now` is pinned to the day the reference was made (Granite and Llama 3.2 print it).
Templates that render tools (gpt-oss) also render an OpenAI request with tools, an assistant's call
and its result, and a reasoning level (tool_turns.json) as llama-server does, through the gateway's
own request parsing and tool handling."""
from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

import pytest

from gateway.features.tools import chat_for_template, template_tool_format
from gateway.openai.requests import parse_chat
from gateway.text import chat_template
from gateway.text.chat_template import ChatTemplate

DATA = Path(__file__).resolve().parents[2] / "data" / "templates"
REFERENCE = json.loads((DATA / "rendered.json").read_text(encoding="utf-8"))
TOOL_TURNS = json.loads((DATA / "tool_turns.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(REFERENCE["templates"]))
def test_template_renders_as_llama_server(name, monkeypatch):
    day = datetime.datetime.fromisoformat(REFERENCE["date"])
    monkeypatch.setattr(chat_template, "_strftime_now", lambda fmt: day.strftime(fmt))
    ref = REFERENCE["templates"][name]
    template = ChatTemplate((DATA / name).read_text(encoding="utf-8"), bos_token=ref["bos_token"],
                            eos_token=ref["eos_token"])
    for case in ref["cases"]:
        assert template.render(case["messages"]) == case["prompt"], case["messages"]


def test_every_template_file_has_a_reference():
    assert sorted(p.name for p in DATA.glob("*.jinja")) == sorted(REFERENCE["templates"])


@pytest.mark.parametrize("name", sorted(TOOL_TURNS["templates"]))
def test_tool_turns_render_as_llama_server(name, monkeypatch):
    day = datetime.datetime.fromisoformat(TOOL_TURNS["date"])
    monkeypatch.setattr(chat_template, "_strftime_now", lambda fmt: day.strftime(fmt))
    ref = TOOL_TURNS["templates"][name]
    source = (DATA.parent / "arch" / name).read_text(encoding="utf-8")
    template = ChatTemplate(source, bos_token=ref["bos_token"], eos_token=ref["eos_token"])
    for case in ref["cases"]:
        chat = parse_chat({"model": "m", **case["body"]}, lenient=False)
        fmt = template_tool_format(source)
        tools = dataclasses.replace(chat.tools, fmt=fmt)
        messages, kwargs = chat_for_template(list(chat.messages), chat.template_kwargs, tools, fmt)
        assert template.render(messages, kwargs) == case["prompt"], case["body"]
