"""Validation of Messages bodies into the neutral chat request, the pre-rendered frames, the blocks
Python frames, which stop sequence matched, and the error shape — without a model."""
from __future__ import annotations

import json

import orjson
import pytest

from gateway.anthropic import frames
from gateway.anthropic.blocks import Blocks
from gateway.anthropic.errors import body as error_body
from gateway.anthropic.errors import is_messages_path
from gateway.anthropic.requests import parse_messages_request
from gateway.features.tools import HERMES
from gateway.http.errors import APIError
from gateway.serve.output import marked_pieces

USER = [{"role": "user", "content": "Hi"}]
TOOL = {"name": "get_weather", "description": "weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def parse(**body):
    return parse_messages_request({"model": "m", "max_tokens": 8, "messages": USER, **body}, lenient=False)


def refused(body: dict, param: str, **kwargs) -> APIError:
    with pytest.raises(APIError) as info:
        parse_messages_request(body, lenient=False, **kwargs)
    assert info.value.status == 400 and info.value.param == param, (info.value.param, info.value.message)
    return info.value


def test_max_tokens_is_required_and_unknown_fields_are_named():
    refused({"model": "m", "messages": USER}, "max_tokens")
    assert "'frequency_penalty'" in refused({"model": "m", "max_tokens": 8, "messages": USER,
                                             "frequency_penalty": 1}, "frequency_penalty").message
    # count_tokens has no max_tokens (nor stop_sequences)
    assert parse_messages_request({"model": "m", "messages": USER}, lenient=False, count_only=True).chat
    refused({"model": "m", "messages": USER, "max_tokens": 3}, "max_tokens", count_only=True)
    lenient = parse_messages_request({"model": "m", "max_tokens": 8, "messages": USER, "x": 1}, lenient=True)
    assert lenient.ignored_fields == ("x",)


def test_system_blocks_tool_use_and_tool_result_become_chat_turns():
    chat = parse(system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}], messages=[
        {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Paris?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "sunny"}]},
                                     {"type": "text", "text": "And tomorrow?"}]},
    ], tools=[TOOL]).chat
    assert list(chat.messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "toolu_1", "name": "get_weather"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert parse(system="S").chat.messages[0] == {"role": "system", "content": "S"}


def test_image_blocks():
    """Base64 image blocks become a marker in the user turn and a RequestImage naming the block; a url source is
    refused (never fetched), as are empty data and document blocks."""
    import base64

    data = base64.b64encode(b"png bytes").decode()
    chat = parse(messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is "},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "text", "text": "?"}]}]).chat
    assert chat.messages[0]["content"] == "What is <__media__>?"
    assert chat.images == (("messages[0].content[1]", b"png bytes"),)
    for source, message in (({"type": "base64", "media_type": "image/png", "data": ""}, "expected a base64 image"),
                            ({"type": "url", "url": "http://127.0.0.1:9/a.png"}, "image URLs are not fetched")):
        error = refused({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
            {"type": "image", "source": source}]}]}, "messages[0].content[0]")
        assert message in error.message and error.code == "invalid_image"
    error = refused({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AAAA"}}]}]},
        "messages[0].content[0]")
    assert "document" in error.message and error.code == "unsupported_content"


def test_tool_choice_maps_to_the_shared_tools():
    assert parse(tools=[TOOL]).chat.tools.choice == "auto"
    assert parse(tools=[TOOL], tool_choice={"type": "any"}).chat.tools.choice == "required"
    named = parse(tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"}).chat.tools
    assert (named.choice, named.name, named.parallel) == ("named", "get_weather", False)
    assert not parse(tools=[TOOL], tool_choice={"type": "none"}).chat.tools.active
    assert parse(tools=[TOOL], tool_choice={"type": "auto", "disable_parallel_tool_use": False}).chat.tools.parallel
    refused({"model": "m", "max_tokens": 8, "messages": USER, "tools": [TOOL],
             "tool_choice": {"type": "tool", "name": "other"}}, "tool_choice")
    refused({"model": "m", "max_tokens": 8, "messages": USER, "tools": [{"name": "f"}]}, "tools[0].input_schema")


def test_thinking_metadata_stop_sequences_and_sampling():
    assert parse(thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2048).chat.think is True
    assert parse(thinking={"type": "disabled"}).chat.think is False
    assert parse().chat.think is None
    refused({"model": "m", "max_tokens": 1024, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 1024}},
            "thinking.budget_tokens")
    assert parse(metadata={"user_id": "u-1"}).chat
    refused({"model": "m", "max_tokens": 8, "messages": USER, "metadata": {"other": 1}}, "metadata")
    request = parse(stop_sequences=["\n\n", "END"], temperature=0.0, top_k=5, top_p=0.5)
    sampling = request.chat.sampling
    assert request.stop_sequences == ("\n\n", "END") and sampling.stop == ("\n\n", "END")
    assert (sampling.temperature, sampling.top_k, sampling.top_p) == (0.0, 5, 0.5)
    assert sampling.logprobs is None  # the lane says which stop string ended it (ChoiceDone.stop_index)


def test_text_delta_framing_wraps_escaped_text():
    prefix, suffix = frames.text_delta_framing(0)
    escaped = orjson.dumps('say "hi"\n')[1:-1]
    event = prefix + escaped + suffix
    head, data = event.decode().rstrip("\n").split("\n")
    assert head == "event: content_block_delta"
    assert json.loads(data.removeprefix("data: ")) == {
        "type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 'say "hi"\n'}}


def _events(raw: bytes) -> list[dict]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            obj = json.loads(data.removeprefix("data: "))
            assert name == f"event: {obj['type']}"
            out.append(obj)
    return out


def test_blocks_thinking_then_text_then_tool_use_in_index_order():
    blocks = Blocks(stream=True, tool_format=HERMES)
    blocks.thinking("Hmm")
    blocks.text("Let me look.\n<tool_")
    blocks.text('call>\n{"name":"get_weather","arguments":{"city":')
    blocks.text('"Paris"}}\n</tool_call>')
    events = _events(blocks.take() + blocks.finish())
    kinds = [(e["type"], e.get("delta", e.get("content_block", {})).get("type")) for e in events]
    assert kinds == [("content_block_start", "thinking"), ("content_block_delta", "thinking_delta"),
                     ("content_block_delta", "signature_delta"), ("content_block_stop", None),
                     ("content_block_start", "text"), ("content_block_delta", "text_delta"),
                     ("content_block_stop", None), ("content_block_start", "tool_use"),
                     ("content_block_delta", "input_json_delta"), ("content_block_delta", "input_json_delta"),
                     ("content_block_stop", None)]
    assert [e["index"] for e in events if e["type"] == "content_block_start"] == [0, 1, 2]
    assert events[7]["content_block"]["input"] == {} and events[7]["content_block"]["id"].startswith("toolu_")
    partial = "".join(e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert blocks.content[2]["input"] == {"city": "Paris"} and blocks.num_calls == 1
    assert blocks.content[0]["signature"] and blocks.content[1]["text"] == "Let me look.\n"


def test_marked_pieces_split_channels():
    data = b"\x01Hmm\x01, th\x00The \x00\\\"answer\\\""
    assert marked_pieces(data) == [(True, "Hmm, th"), (False, 'The "answer"')]


def test_error_shape_and_paths():
    assert orjson.loads(error_body(APIError(429, "busy", type="rate_limit_error"))) == {
        "type": "error", "error": {"type": "rate_limit_error", "message": "busy"}}
    for status, kind in ((400, "invalid_request_error"), (401, "authentication_error"), (404, "not_found_error"),
                         (413, "request_too_large"), (415, "invalid_request_error"), (503, "overloaded_error"),
                         (500, "api_error")):
        assert orjson.loads(error_body(APIError(status, "m")))["error"]["type"] == kind
    assert is_messages_path("/v1/messages") and is_messages_path("/v1/messages/count_tokens")
    assert not is_messages_path("/v1/messagesx") and not is_messages_path("/v1/chat/completions")
