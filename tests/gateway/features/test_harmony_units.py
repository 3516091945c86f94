"""gpt-oss (harmony) calls without a server: its template's call format and grammar, the parser reading
the calls the lane writes (csrc/engine/reasoning_splitter.h) however the text is split, and a call's
reasoning sent back in the history."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gateway.features.tool_calls import ToolCallParser, parse_all
from gateway.features.tools import HARMONY, HERMES, chat_for_template, parse_tools, template_tool_format, tool_grammar
from gateway.ollama.requests import parse_chat as ollama_chat
from gateway.openai.requests import parse_chat
from gateway.text.chat_template import ChatTemplate
from lanes.api import ReasoningMarkers

from .test_reasoning_units import GPT_OSS

# What the lane writes to content for a preamble and two calls (the second cut off at <|call|>, which
# ends the generation, so no closing marker).
LANE_TEXT = ('Checking.<|channel|>commentary to=functions.get_weather<|message|>{"city":"Paris"}<|call|>'
             '<|channel|>commentary to=functions.get_time<|message|>{"tz":"CET"}')


def _summary(events):
    content = "".join(e[1] for e in events if e[0] == "content")
    names = [e[3] for e in events if e[0] == "call"]
    args: dict[int, str] = {}
    for e in events:
        if e[0] == "arguments":
            args[e[1]] = args.get(e[1], "") + e[2]
    return content, list(zip(names, [args.get(i, "") for i in range(len(names))])), \
        [e[0] for e in events].count("end")


def _feed(pieces):
    parser = ToolCallParser(HARMONY)
    events = [e for p in pieces for e in parser.feed(p)]
    return events + parser.finish()


@pytest.mark.parametrize("choice", ["auto", "required"])
@pytest.mark.parametrize("parallel", [False, True])
def test_gpt_oss_template_is_the_harmony_format_and_its_grammar_names_tokens(choice, parallel):
    assert template_tool_format(GPT_OSS) is HARMONY
    body = {"tools": [{"type": "function", "function": {"name": n}} for n in ("f", 'q"x')],
            "tool_choice": choice, "parallel_tool_calls": parallel}
    tools = dataclasses.replace(parse_tools(body), fmt=HARMONY)
    by_name = json.loads(tool_grammar(tools))["grammars"][0]["lark_grammar"]
    assert "<|channel|>" in by_name and '" to=functions.q\\"x"' in by_name
    assert ("final" in by_name) == (choice == "auto") and ("<|end|>\" <|start|>" in by_name) == parallel
    by_id = json.loads(tool_grammar(tools, {"<|channel|>": (7, 9), "<|message|>": (8,)}))["grammars"][0]
    assert "<[7,9]>" in by_id["lark_grammar"] and "<[8]>" in by_id["lark_grammar"]
    assert "<|channel|>" not in by_id["lark_grammar"] and "<|start|>" in by_id["lark_grammar"]


def test_harmony_calls_parse_however_the_text_is_split():
    text = LANE_TEXT
    expected = ("Checking.", [("get_weather", '{"city":"Paris"}'), ("get_time", '{"tz":"CET"}')], 2)
    for cut in range(len(text) + 1):
        assert _summary(_feed([text[:cut], text[cut:]])) == expected, cut
    for cut in range(1, len(text)):
        assert _summary(_feed([text[:cut], text[cut:cut + 3], text[cut + 3:]])) == expected, cut
    assert _summary(_feed(list(text))) == expected
    content, calls = parse_all(text, HARMONY)
    assert content == "Checking." and [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert len({c["id"] for c in calls}) == 2 and calls[1]["function"]["arguments"] == '{"tz":"CET"}'


def test_harmony_text_without_calls_and_cut_off_calls():
    assert parse_all("It is <|channel 42", HARMONY) == ("It is <|channel 42", [])
    assert parse_all("<|channel|>commentary to=functions.f", HARMONY) == ("<|channel|>commentary to=functions.f", [])
    content, calls = parse_all('<|channel|>commentary to=functions.f<|message|>{"a":', HARMONY)
    assert content is None and calls[0]["function"] == {"name": "f", "arguments": '{"a":'}


def test_calls_flag_only_with_harmony():
    assert ReasoningMarkers("", "", harmony=True, calls=True).calls
    with pytest.raises(ValueError):
        ReasoningMarkers("<think>", "</think>", calls=True)


def test_a_tool_call_turns_reasoning_renders_for_gpt_oss_only():
    call = {"function": {"name": "f", "arguments": {}}}
    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "said", "thinking": "thought",
                                                 "tool_calls": [call]},
             {"role": "tool", "content": "r", "tool_name": "f"}, {"role": "assistant", "content": "a", "thinking": "t"}]
    messages = list(ollama_chat({"model": "m", "messages": turns}).messages)
    assert messages[1]["thinking"] == "thought" and "thinking" not in messages[3]  # only a call's reasoning stays
    harmony, _ = chat_for_template(messages[:3], {}, None, HARMONY)  # (a later answer drops it: the template's rule)
    rendered = ChatTemplate(GPT_OSS).render(harmony, {})
    assert "<|channel|>analysis<|message|>thought<|end|>" in rendered and "said" not in rendered
    other, _ = chat_for_template(messages, {}, None, HERMES)
    assert "thinking" not in other[1] and other[1]["content"] == "said"
    chat = parse_chat({"model": "m", "messages": [{"role": "assistant", "content": "a", "reasoning_content": "t"}]},
                      lenient=False)
    assert "thinking" not in chat.messages[0]
