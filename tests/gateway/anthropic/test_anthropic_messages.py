"""/v1/messages and /v1/messages/count_tokens through the real `anthropic` client against the
session's SmolLM2 server: plain, multi-turn, system prompts, streams (event order, the final message
equal to the deltas), stop sequences, max_tokens, a forced tool call and its result, token counts,
errors in Anthropic's shape, and the same greedy answer as /v1/chat/completions."""
from __future__ import annotations

import json

import anthropic
import httpx
import pytest

MODEL = "smollm2"
USER = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}  # anthropic 2.15's create() has no temperature argument: it goes in the body
TOOLS = [{"name": "get_weather", "description": "the weather of a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
FORCED = {"type": "tool", "name": "get_weather"}


@pytest.fixture
def client(base_url):
    with anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0, timeout=120.0) as c:
        yield c


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_plain_answer_and_usage(client):
    reply = client.messages.create(model=MODEL, max_tokens=24, messages=USER, extra_body=GREEDY)
    assert reply.id.startswith("msg_") and reply.type == "message" and reply.role == "assistant"
    assert reply.model == MODEL and [b.type for b in reply.content] == ["text"] and text_of(reply)
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.stop_sequence is None
    assert 0 < reply.usage.output_tokens <= 24 and reply.usage.cache_creation_input_tokens == 0
    count = client.messages.count_tokens(model=MODEL, messages=USER)
    assert count.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens


def test_multi_turn_and_system_as_string_and_blocks(client):
    turns = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hello Ada!"},
             {"role": "user", "content": [{"type": "text", "text": "What is my name?"}]}]
    as_string = client.messages.create(model=MODEL, max_tokens=16, messages=turns, system="You are terse.",
                                       extra_body=GREEDY)
    as_blocks = client.messages.create(model=MODEL, max_tokens=16, messages=turns, extra_body=GREEDY,
                                       system=[{"type": "text", "text": "You are "}, {"type": "text", "text": "terse."}])
    assert text_of(as_string) == text_of(as_blocks) and text_of(as_string)
    counted = client.messages.count_tokens(model=MODEL, messages=turns, system="You are terse.")
    assert counted.input_tokens == as_string.usage.input_tokens + as_string.usage.cache_read_input_tokens
    without = client.messages.count_tokens(model=MODEL, messages=turns)
    assert without.input_tokens != counted.input_tokens  # SmolLM2's template has a default system prompt


def test_stream_event_order_and_final_message(client):
    with client.messages.stream(model=MODEL, max_tokens=20, messages=USER, extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    raw = [e.type for e in events if e.type in ("message_start", "content_block_start", "content_block_delta",
                                                 "content_block_stop", "message_delta", "message_stop")]
    deltas = raw.count("content_block_delta")
    assert raw == ["message_start", "content_block_start", *["content_block_delta"] * deltas, "content_block_stop",
                   "message_delta", "message_stop"] and deltas > 0
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == text_of(final) and final.stop_reason in ("end_turn", "max_tokens")
    whole = client.messages.create(model=MODEL, max_tokens=20, messages=USER, extra_body=GREEDY)
    assert text_of(whole) == text
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequences_and_max_tokens(client):
    free = text_of(client.messages.create(model=MODEL, max_tokens=24, messages=USER, extra_body=GREEDY))
    word = free.split()[2]  # a word the greedy answer reaches
    for stream in (False, True):
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=24, messages=USER, stop_sequences=["zzz", word],
                                        extra_body=GREEDY) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(model=MODEL, max_tokens=24, messages=USER, stop_sequences=["zzz", word],
                                           extra_body=GREEDY)
        assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", word)
        assert free.startswith(text_of(reply)) and word not in text_of(reply)
    short = client.messages.create(model=MODEL, max_tokens=3, messages=USER, extra_body=GREEDY)
    assert (short.stop_reason, short.usage.output_tokens) == ("max_tokens", 3)
    ended = client.messages.create(model=MODEL, max_tokens=200, messages=USER, stop_sequences=["zzz"],
                                   extra_body=GREEDY)
    assert (ended.stop_reason, ended.stop_sequence) == ("end_turn", None)


def test_forced_tool_call_then_its_result(client):
    reply = client.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, tool_choice=FORCED, extra_body=GREEDY,
                                   messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    assert reply.stop_reason == "tool_use"
    call = reply.content[-1]
    assert call.type == "tool_use" and call.id.startswith("toolu_") and call.name == "get_weather"
    assert isinstance(call.input, dict) and isinstance(call.input["city"], str)
    second = client.messages.create(model=MODEL, max_tokens=24, tools=TOOLS, extra_body=GREEDY, messages=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": reply.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]}])
    assert second.content and second.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_streamed_tool_use_input_json_deltas(client):
    with client.messages.stream(model=MODEL, max_tokens=64, tools=TOOLS, tool_choice=FORCED, extra_body=GREEDY,
                                messages=[{"role": "user", "content": "Weather in Rome?"}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["tool_use"] and starts[0].content_block.input == {}
    partial = "".join(e.delta.partial_json for e in events
                      if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    assert json.loads(partial) == final.content[0].input and "city" in final.content[0].input
    assert final.stop_reason == "tool_use" and final.content[0].id == starts[0].content_block.id


def test_same_greedy_answer_as_chat_completions(client, openai_client):
    turns = [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Apple."},
             {"role": "user", "content": "Another one?"}]
    chat = openai_client.chat.completions.create(model=MODEL, max_tokens=20, temperature=0,
                                                 messages=[{"role": "system", "content": "Be brief."}, *turns])
    reply = client.messages.create(model=MODEL, max_tokens=20, system="Be brief.", messages=turns, extra_body=GREEDY)
    assert text_of(reply) == chat.choices[0].message.content
    assert reply.usage.output_tokens == chat.usage.completion_tokens


def test_errors_in_anthropic_shape(client, base_url):
    with pytest.raises(anthropic.BadRequestError) as info:
        client.post("/v1/messages", cast_to=object, body={"model": MODEL, "messages": USER})
    assert info.value.status_code == 400
    assert info.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                          "message": "'max_tokens' is required"}}
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=5, messages=USER, extra_body={"frequency_penalty": 1})
    assert info.value.body["error"]["type"] == "invalid_request_error" and "frequency_penalty" in info.value.message
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="nope", max_tokens=5, messages=USER)
    assert info.value.status_code == 404 and info.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert "image" in info.value.body["error"]["message"]
    raw = httpx.post(base_url + "/v1/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert raw.status_code == 400 and raw.json()["type"] == "error"
    big = httpx.post(base_url + "/v1/messages", content=b" " * (9 << 20), headers={"content-type": "application/json"})
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"


def test_headers_of_anthropic_clients_are_accepted(http):
    reply = http.post("/v1/messages", json={"model": MODEL, "max_tokens": 2, "messages": USER},
                      headers={"anthropic-version": "2026-10-21", "anthropic-beta": "tools-2024-04-04",
                               "x-api-key": "whatever"})
    assert reply.status_code == 200 and reply.json()["type"] == "message"


def test_records_and_metrics_carry_the_route_name(server, http):
    body = {"model": MODEL, "max_tokens": 3, "messages": USER}
    assert http.post("/v1/messages", json=body, headers={"X-Request-ID": "anthropic-rec-1"}).status_code == 200
    assert http.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": USER},
                     headers={"X-Request-ID": "anthropic-rec-2"}).status_code == 200
    first, second = server.records("anthropic-rec-1", "anthropic-rec-2")
    assert (first["route"], first["outcome"], first["completion_tokens"]) == ("anthropic_messages", "success", 3)
    assert (second["route"], second["outcome"]) == ("anthropic_count_tokens", "success")
    metrics = http.get("/metrics").text
    assert 'route="anthropic_messages"' in metrics and 'route="anthropic_count_tokens"' in metrics
