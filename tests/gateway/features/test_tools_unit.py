"""gateway.features.tools, gateway.features.tool_calls, gateway.openai.tool_stream and gateway.features.structured without a model:
validation, grammars that compile, the generic-mode history rewrite, and the incremental parser
agreeing with the whole-text parser however the text is split."""
from __future__ import annotations

import dataclasses
import json
import random

import orjson
import pytest

from gateway.http.errors import APIError
from gateway.serve.output import REASONING_MARK
from gateway.openai.frames import StreamFrames
from gateway.ollama.frames import OllamaFrames
from gateway.ollama.tools import OllamaToolStream, final_message
from gateway.features.structured import bound_integers, from_ollama_format, from_openai
from gateway.features.tool_calls import ToolCallParser, parse_all
from gateway.openai.tool_stream import TOOL_TEXT_FRAMING, ToolStreamRewriter
from gateway.features.tools import HERMES, LLAMA3, chat_for_template, generic_messages, parse_tools, template_tool_format, tool_grammar

FN = {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                   "properties": {"a": {"type": "integer"}}}}}
TEXT = ('Let me check.<tool_call>\n{"name":"f","arguments":{"a":1,"s":"x}</tool_call>\\"y"}}\n</tool_call>\n'
        '<tool_call>\n{"name":"g","arguments":{}}\n</tool_call>')


def test_parse_tools_defaults_and_choices():
    tools = parse_tools({"tools": [FN]})
    assert tools.choice == "auto" and tools.parallel is False and tools.active
    assert parse_tools({"tools": [FN], "tool_choice": "none"}).active is False
    named = parse_tools({"tools": [FN], "tool_choice": {"type": "function", "function": {"name": "f"}}})
    assert named.choice == "named" and named.allowed()[0]["name"] == "f"
    assert parse_tools({}) is None and parse_tools({"tools": []}) is None
    for body in ({"tools": [FN], "tool_choice": "always"}, {"tool_choice": "required"}, {"tools": "f"},
                 {"tools": [{"type": "retrieval"}]}, {"tools": [FN], "parallel_tool_calls": 1}):
        with pytest.raises(APIError):
            parse_tools(body)


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "f"}}])
@pytest.mark.parametrize("parallel", [False, True])
def test_tool_grammars_compile(choice, parallel):
    grammar = tool_grammar(parse_tools({"tools": [FN], "tool_choice": choice, "parallel_tool_calls": parallel}))
    assert "%json" in json.loads(grammar)["grammars"][0]["lark_grammar"]  # the call schema, embedded


def test_generic_history_rewrite_alternates_roles():
    tools = parse_tools({"tools": [FN]})
    history = [{"role": "user", "content": "q"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
               {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]
    out = generic_messages(history, tools)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert '"name": "f"' in out[2]["content"] and out[3]["content"].count("<tool_response>") == 2
    assert "You can call these functions" in out[0]["content"]
    messages, kwargs = chat_for_template(history, {}, tools, HERMES)
    assert messages == history and kwargs["tools"][0]["function"]["name"] == "f"
    plain = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert chat_for_template(plain, {}, None, None)[0] == plain  # untouched without tools


def test_parser_agrees_however_the_text_is_split():
    content, calls = parse_all(TEXT)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["f", "g"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "s": 'x}</tool_call>"y'}
    rng = random.Random(5)
    for _ in range(50):
        parser = ToolCallParser()
        events, i = [], 0
        while i < len(TEXT):
            j = i + rng.randint(1, 7)
            events += parser.feed(TEXT[i:j])
            i = j
        events += parser.finish()
        args = {}
        for e in events:
            if e[0] == "arguments":
                args[e[1]] = args.get(e[1], "") + e[2]
        assert [args[0], args[1]] == [c["function"]["arguments"] for c in calls]
        assert [e[0] for e in events].count("end") == 2


def test_cut_short_call_and_text_that_only_looks_like_a_marker():
    assert parse_all("a <tool and more")[0] == "a <tool and more"
    cut = '<tool_call>\n{"name":"f","arguments":{"a":'
    _, calls = parse_all(cut, finish_reason="length")  # OpenAI keeps a call the token limit cut
    assert calls[0]["function"]["arguments"] == '{"a":'
    # Cut by a stop string (or an end token): not a call anyone can run, so the answer is text.
    assert parse_all(cut) == (cut, [])
    assert parse_all(TEXT + cut) == (TEXT + cut, [])


def _rewritten(text: str, reason: str) -> tuple[str, str]:
    rewriter = ToolStreamRewriter(StreamFrames("chatcmpl-x", 1, "m", True, False))
    data = rewriter.chunk(0, _marked(text))
    tail, finish = rewriter.finish(0, reason)
    return (data + tail).decode(), finish


def test_a_stream_cut_inside_a_call_does_not_finish_with_tool_calls():
    cut = '<tool_call>\n{"name":"f","arguments":{"a":'
    assert _rewritten(TEXT, "stop")[1] == "tool_calls"
    assert _rewritten(cut, "stop")[1] == "stop" and _rewritten(cut, "length")[1] == "length"
    # Arguments closed, the closing marker cut: the call is whole.
    assert _rewritten('<tool_call>\n{"name":"f","arguments":{"a":1}', "stop")[1] == "tool_calls"


def test_anthropic_stop_reason_of_a_call_cut_by_a_stop_sequence():
    from types import SimpleNamespace
    from gateway.anthropic.output import MessagesOutput
    from gateway.features.tools import HERMES

    tracker = SimpleNamespace(record=SimpleNamespace(prompt_tokens=3, completion_tokens=5, cached_tokens=0))
    for text, stop_index, expected in (('<tool_call>\n{"name":"f","arguments":{"a":', 0, ("stop_sequence", "Paris")),
                                       ('<tool_call>\n{"name":"f","arguments":{"a":1}}\n</tool_call>', -1,
                                        ("tool_use", None))):
        out = MessagesOutput(0, "m", 3, stream=False, direct=False, tool_format=HERMES, stops=("Paris",))
        out.collect_done(0, SimpleNamespace(finish_reason="stop", stop_index=stop_index, reasoning=b"",
                                            text=_escaped(text)))
        message = json.loads(out.body(tracker)[0])
        assert (message["stop_reason"], message["stop_sequence"]) == expected


# Found by benchmarks/fuzz.py tool_calls: a name the model wrote with a raw control character,
# a bad escape or a lone surrogate raised JSONDecodeError out of the stream (tests/data/fuzz/tool_calls).
@pytest.mark.parametrize("split", [1, 3, 1000])
def test_names_json_cannot_carry_are_text_and_control_characters_are_kept(split):
    def parse(text, fmt=HERMES):
        parser = ToolCallParser(fmt)
        events = [e for i in range(0, len(text), split) for e in parser.feed(text[i:i + split])]
        return events + parser.finish()

    events = parse('<tool_call>\n{"name": "get\x00_w", "arguments": {"a": 1}}\n</tool_call>')
    assert [e[3] for e in events if e[0] == "call"] == ["get\x00_w"]
    for bad in ('"a\\q"', '"\\ud800"', '"\\u12"'):
        text = '<tool_call>\n{"name": ' + bad + ', "arguments": {}}\n</tool_call> then <tool_call>\n' \
               '{"name": "ok", "arguments": {}}\n</tool_call>'
        events = parse(text)
        assert [e[3] for e in events if e[0] == "call"] == ["ok"]  # the bad head is text, the next call is read
        content = "".join(e[1] for e in events if e[0] == "content")
        assert content.startswith("<tool_call>\n{\"name\": " + bad) and orjson.dumps(content)
        llama = parse('{"name": ' + bad + ', "parameters": {}}', LLAMA3)
        assert all(e[0] == "content" for e in llama)


def _escaped(text: str) -> bytes:
    return orjson.dumps(text)[1:-1]


def _marked(text: str) -> bytes:
    """Content as the lane frames it for a tools stream (TOOL_TEXT_FRAMING)."""
    return TOOL_TEXT_FRAMING[0] + _escaped(text) + TOOL_TEXT_FRAMING[1]


def test_openai_rewriter_chunks_accumulate_like_the_client():
    frames = StreamFrames("chatcmpl-x", 1, "m", True, False)
    rewriter = ToolStreamRewriter(frames)
    # One relay chunk may carry deltas of both channels: reasoning is framed here, content parsed.
    data = rewriter.chunk(0, REASONING_MARK[0] + b"wh" + _marked(TEXT[:5]) + REASONING_MARK[0] + b"y")
    data += b"".join(rewriter.chunk(0, _marked(TEXT[i:i + 5])) for i in range(5, len(TEXT), 5))
    tail, reason = rewriter.finish(0, "stop")
    assert reason == "tool_calls"
    calls, content, reasoning = {}, "", ""
    for line in (data + tail).split(b"\n\n"):
        if not line:
            continue
        delta = json.loads(line[len(b"data: "):])["choices"][0]["delta"]
        content += delta.get("content") or ""
        reasoning += delta.get("reasoning_content") or ""
        assert delta.get("reasoning_content") == delta.get("reasoning")
        for tc in delta.get("tool_calls", []):
            entry = calls.setdefault(tc["index"], {"name": "", "arguments": "", "ids": 0})
            entry["ids"] += "id" in tc
            entry["name"] += tc.get("function", {}).get("name", "")
            entry["arguments"] += tc.get("function", {}).get("arguments", "")
    expected = parse_all(TEXT)[1]
    assert content == "Let me check." and reasoning == "why"
    assert [calls[i]["arguments"] for i in range(2)] == [c["function"]["arguments"] for c in expected]
    assert all(calls[i]["ids"] == 1 for i in range(2))


def test_ollama_shapes():
    content, calls = final_message(_escaped(TEXT))
    assert content == "Let me check." and calls[0]["function"]["arguments"]["a"] == 1
    stream = OllamaToolStream(OllamaFrames("m", True))
    lines = (stream.chunk(REASONING_MARK[0] + b"why" + _marked(TEXT[:30]) + _marked(TEXT[30:])) + stream.finish()).splitlines()
    assert json.loads(lines[0])["message"] == {"role": "assistant", "content": "", "thinking": "why"}
    with_calls = [json.loads(x) for x in lines if b"tool_calls" in x]
    assert len(with_calls) == 2 and all(len(o["message"]["tool_calls"]) == 1 for o in with_calls)


def test_structured_names_and_errors():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    for body in ({"response_format": {"type": "json_object"}}, {"json_schema": schema}, {"guided_json": json.dumps(schema)},
                 {"guided_regex": "a+"}, {"grammar": 'root ::= "a"'}, {"guided_grammar": 'start: "a"'},
                 {"guided_choice": ["a", "b"]}, {"structured_outputs": {"json_object": True}},
                 {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": False}}}):
        grammar, param = from_openai(body)
        assert grammar and param == next(iter(body))
    assert from_openai({"response_format": {"type": "text"}}) == (None, None)
    assert from_openai({}) == (None, None)
    assert from_ollama_format("json") and from_ollama_format(schema) and from_ollama_format("") is None
    with pytest.raises(APIError) as info:
        from_openai({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "format": "nope"}}}})
    assert info.value.param == "response_format.json_schema.schema" and "nope" in info.value.message
    # strict false: an unknown format is ignored instead of refused
    assert from_openai({"response_format": {"type": "json_schema", "json_schema": {
        "schema": {"type": "string", "format": "nope"}, "strict": False}}})[0]


def test_generation_schema_bounds():
    out = bound_integers({"type": "object", "properties": {"n": {"type": "integer"}, "m": {"type": "integer", "minimum": 0}},
                          "enum": [{"type": "integer"}]})
    assert out["properties"]["n"]["maximum"] == 2**53 - 1 and out["properties"]["m"]["minimum"] == 0
    assert out["additionalProperties"] is False and out["enum"] == [{"type": "integer"}]
    assert "additionalProperties" not in bound_integers({"type": "object"})


LLAMA3_TEMPLATE = ('{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}'
                   '{# {"name": function name, "parameters": ...} <|python_tag|> #}')


def test_llama3_format():
    assert template_tool_format(LLAMA3_TEMPLATE) is LLAMA3
    assert template_tool_format("{{ tools }} <tool_call>") is not LLAMA3 and template_tool_format("x") is None
    tools = dataclasses.replace(parse_tools({"tools": [FN], "tool_choice": "required"}), fmt=LLAMA3)
    lark = json.loads(tool_grammar(tools))["grammars"][0]["lark_grammar"]
    assert '"parameters"' in lark and "tool_call" not in lark
    auto = dataclasses.replace(tools, choice="auto")
    assert "TEXT" in json.loads(tool_grammar(auto))["grammars"][0]["lark_grammar"]
    call = ' {"name":"f","parameters":{"a":"}{","b":[1]}}'
    content, calls = parse_all(call, LLAMA3)
    assert content is None and calls[0]["function"]["arguments"] == '{"a":"}{","b":[1]}'
    assert parse_all("Paris is sunny {not a call}", LLAMA3) == ("Paris is sunny {not a call}", [])
    parser, events = ToolCallParser(LLAMA3), []
    for ch in call:
        events += parser.feed(ch)
    events += parser.finish()
    assert [e[0] for e in events if e[0] != "arguments"] == ["call", "end"]
