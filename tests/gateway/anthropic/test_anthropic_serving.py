"""Messages routes on servers of their own: thinking blocks on the scripted thinking model
(tests/gateway/thinking_gguf.py), the API key through both header styles, and a full queue as
rate_limit_error with Retry-After."""
from __future__ import annotations

import threading

import anthropic
import httpx
import pytest

from .. import thinking_gguf as _gguf

USER = [{"role": "user", "content": "What is the answer?"}]
GREEDY = {"temperature": 0}
THINK = {"type": "enabled", "budget_tokens": 1024}
KEY = "anthropic-test-key-0123456789"


@pytest.fixture(scope="module")
def think_url(think_server):
    return think_server.base_url


def test_thinking_blocks_then_text(think_url):
    client = anthropic.Anthropic(base_url=think_url, api_key="x", max_retries=0, timeout=60)
    reply = client.messages.create(model="think", max_tokens=2048, messages=USER, thinking=THINK, extra_body=GREEDY)
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert reply.content[0].thinking == _gguf.REASONING and reply.content[0].signature
    assert reply.content[1].text == _gguf.CONTENT and reply.stop_reason == "end_turn"
    with client.messages.stream(model="think", max_tokens=2048, messages=USER, thinking=THINK,
                                extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [(e.type, e.delta.type if e.type == "content_block_delta" else
              e.content_block.type if e.type == "content_block_start" else None) for e in events
             if e.type.startswith("content_block")]
    first_text = kinds.index(("content_block_start", "text"))
    assert kinds[0] == ("content_block_start", "thinking")
    assert kinds[first_text - 2:first_text] == [("content_block_delta", "signature_delta"), ("content_block_stop", None)]
    assert "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                   and e.delta.type == "thinking_delta") == _gguf.REASONING
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta"
                   and e.delta.type == "text_delta") == _gguf.CONTENT
    assert [b.type for b in final.content] == ["thinking", "text"] and final.content[1].text == _gguf.CONTENT
    assert final.content[0].signature == reply.content[0].signature
    off = client.messages.create(model="think", max_tokens=64, messages=USER, thinking={"type": "disabled"},
                                 extra_body=GREEDY)
    assert [b.type for b in off.content] == ["text"] and off.content[0].text == _gguf.CONTENT


def test_thinking_asked_of_a_model_without_it(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0, timeout=60)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="smollm2", max_tokens=2048, messages=USER, thinking=THINK)
    assert info.value.body["error"]["type"] == "invalid_request_error"


def test_api_key_through_both_header_styles(own_server):
    srv = own_server("--model", "fake=synthetic:step_us=1000,prefill_us_per_token=0,n_ctx=1024", "--ctx-size",
                     "1024", "--api-key", KEY, real_model=False)
    srv.wait_ready()
    body = {"model": "fake", "max_tokens": 2, "messages": USER}
    for headers in ({"api_key": KEY}, {"api_key": None, "default_headers": {"x-api-key": KEY}}):
        client = anthropic.Anthropic(base_url=srv.base_url, max_retries=0, **headers)
        assert client.messages.create(**body).type == "message"
        assert client.messages.count_tokens(model="fake", messages=USER).input_tokens > 0
    for headers in ({"api_key": "wrong"}, {"api_key": None, "default_headers": {"x-api-key": "wrong"}}):
        client = anthropic.Anthropic(base_url=srv.base_url, max_retries=0, **headers)
        with pytest.raises(anthropic.AuthenticationError) as info:
            client.messages.create(**body)
        assert info.value.status_code == 401
        assert info.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                              "message": "Invalid API key"}}
    missing = httpx.post(srv.base_url + "/v1/messages", json=body)
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    # Only the Messages routes read X-Api-Key.
    other = httpx.post(srv.base_url + "/v1/chat/completions", json={"model": "fake", "messages": USER},
                       headers={"x-api-key": KEY})
    assert other.status_code == 401 and "error" in other.json() and "type" not in other.json()


def test_full_queue_is_rate_limit_error_then_a_cancel_ends_the_stream_with_an_error_event(own_server):
    """One slot, no queue: a second request is a 429 rate_limit_error with Retry-After; POST /stop
    then ends the running stream in-band with `event: error` (the client raises it)."""
    srv = own_server("--model", "fake=synthetic:step_us=20000,prefill_us_per_token=0,n_ctx=1024", "--ctx-size",
                     "1024", "--parallel", "1", "--max-queue", "0", "--retry-after-s", "3", real_model=False)
    srv.wait_ready()
    client = anthropic.Anthropic(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
    started, outcome = threading.Event(), {}

    def hold_the_slot():
        try:
            with client.messages.stream(model="fake", max_tokens=500, messages=USER) as stream:
                for event in stream:
                    if event.type == "content_block_delta":
                        started.set()
        except anthropic.APIStatusError as exc:
            outcome["error"] = exc

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    try:
        assert started.wait(30)
        with pytest.raises(anthropic.RateLimitError) as info:
            client.messages.create(model="fake", max_tokens=2, messages=USER)
        assert info.value.status_code == 429 and info.value.response.headers["retry-after"] == "3"
        assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "rate_limit_error"
        assert httpx.post(srv.base_url + "/stop", json={}).status_code == 200
    finally:
        holder.join(60)
    body = outcome["error"].body
    assert body["type"] == "error" and "cancelled" in body["error"]["message"]
