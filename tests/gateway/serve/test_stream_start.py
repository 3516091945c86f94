"""Every streamed response begins with its status line and is chunked correctly to its end.

A streamed response has several writers (Sanic's status line and headers, the native relay on a
dup of the socket, the transport for a direct batch's unsent tail, the keep-alive watchdog); the
pipeline opens the response and only then lets the relay write (gateway.serve.response). Checked on
raw sockets, 50 concurrent requests per route: against lanes that answer instantly (the synthetic
backend with zero step time, where a relay write racing the status line would show first),
with requests queued and kept alive, with errors before and after the response started, and
against the real models (SmolLM2 here; Whisper in tests/gateway/audio/test_audio_server.py)."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from ..raw_http import RawResponse, exchange, ndjson_lines, request_bytes, sse_events, sse_frames

TRIES = 50
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
USER = [{"role": "user", "content": "Say something."}]


def post(path: str, body: dict, **headers) -> bytes:
    return request_bytes("POST", path, orjson.dumps(body), {"Content-Type": "application/json", **headers})


def many(port: int, make_request, tries: int = TRIES, timeout_s: float = 120.0) -> list[RawResponse]:
    """`tries` concurrent exchanges; make_request(i) → raw request bytes."""
    async def run():
        return await asyncio.gather(*(exchange(port, make_request(i), timeout_s) for i in range(tries)))
    return asyncio.run(run())


def check_openai_stream(r: RawResponse, expect_done: bool = True) -> list:
    assert r.status == 200 and r.chunked, (r.status, r.headers, r.body[:200])
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.body)
    assert events[-1] == "[DONE]" and all(e != "[DONE]" for e in events[:-1])
    if expect_done:
        assert not any("error" in e for e in events[:-1]), events
    return events[:-1]


def check_ollama_stream(r: RawResponse) -> list:
    assert r.status == 200 and r.chunked and r.headers["content-type"].startswith("application/x-ndjson")
    lines = ndjson_lines(r.body)
    assert lines[-1].get("done") is True or set(lines[-1]) == {"error"}, lines[-1]
    return lines


OPENAI_CASES = {
    "completions": ("/v1/completions", {"prompt": "Once upon", "max_tokens": 12}),
    "completions_n_prompts": ("/v1/completions", {"prompt": ["a", "b"], "n": 3, "max_tokens": 6}),
    "chat_n_usage": ("/v1/chat/completions", {"messages": USER, "n": 2, "max_tokens": 10,
                                              "stream_options": {"include_usage": True}}),
    "chat_logprobs": ("/v1/chat/completions", {"messages": USER, "max_tokens": 8, "logprobs": True,
                                               "top_logprobs": 2}),
    "chat_tools": ("/v1/chat/completions", {"messages": USER, "max_tokens": 16, "tools": TOOLS}),
    "chat_structured": ("/v1/chat/completions", {"messages": USER, "max_tokens": 16,
                                                 "response_format": {"type": "json_object"}}),
}
ANTHROPIC_CASES = {
    "messages": {"messages": USER, "max_tokens": 12},
    "messages_tools": {"messages": USER, "max_tokens": 16, "tools": [{
        "name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]},
    "messages_stop": {"messages": USER, "max_tokens": 16, "stop_sequences": ["7"]},
}
OLLAMA_CASES = {
    "ollama_chat": ("/api/chat", {"messages": USER, "options": {"num_predict": 10}}),
    "ollama_generate": ("/api/generate", {"prompt": "Once upon", "options": {"num_predict": 10}}),
}


@pytest.fixture(scope="module")
def instant_server(tmp_path_factory):
    """Lanes that answer at once, few slots (most requests queue), keep-alives after 20 ms."""
    from ..conftest import running_server

    with running_server(tmp_path_factory.mktemp("instant"), "--model",
                        "fake=synthetic:step_us=0,prefill_us_per_token=0,n_ctx=1024", "--ctx-size", "1024",
                        "--parallel", "4", "--max-queue", "256", "--keepalive-interval-s", "0.02",
                        real_model=False) as srv:
        yield srv


@pytest.mark.parametrize("case", sorted(OPENAI_CASES))
def test_openai_streams_start_with_the_status_line(instant_server, case):
    path, body = OPENAI_CASES[case]
    responses = many(instant_server.port, lambda i: post(path, {"model": "fake", "stream": True, **body}))
    for r in responses:
        events = check_openai_stream(r)
        assert events and all(e["object"] in ("chat.completion.chunk", "text_completion") for e in events)


def named_events(r: RawResponse) -> list:
    """SSE events with an `event:` line equal to their data's type (comments skipped)."""
    assert r.status == 200 and r.chunked and r.headers["content-type"].startswith("text/event-stream")
    frames = sse_frames(r.body)
    assert all(name is not None for name, _ in frames), frames
    return [data for _, data in frames]


def check_anthropic_stream(r: RawResponse) -> list:
    """Each event named by its type, message_start first, message_stop last."""
    events = named_events(r)
    types = [e["type"] for e in events if e["type"] != "ping"]
    assert types[0] == "message_start" and types[-1] == "message_stop", types
    return events


@pytest.mark.parametrize("case", sorted(ANTHROPIC_CASES))
def test_anthropic_streams_start_with_the_status_line(instant_server, case):
    body = {"model": "fake", "stream": True, **ANTHROPIC_CASES[case]}
    for r in many(instant_server.port, lambda i: post("/v1/messages", body)):
        check_anthropic_stream(r)


RESPONSES_CASES = {
    "responses": {"input": "Say something.", "max_output_tokens": 12},
    "responses_tools": {"input": USER, "max_output_tokens": 16, "tools": [{"type": "function", **TOOLS[0]["function"]}]},
    "responses_json": {"input": USER, "max_output_tokens": 16, "text": {"format": {"type": "json_object"}}},
}


def check_responses_stream(r: RawResponse, ends=("response.completed", "response.incomplete")) -> list:
    """Numbered from 0 without gaps, response.created first, the response's end last."""
    events = named_events(r)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ends, events[-1]
    return events


@pytest.mark.parametrize("case", sorted(RESPONSES_CASES))
def test_responses_streams_start_with_the_status_line(instant_server, case):
    body = {"model": "fake", "stream": True, **RESPONSES_CASES[case]}
    for r in many(instant_server.port, lambda i: post("/v1/responses", body)):
        check_responses_stream(r)


@pytest.mark.parametrize("case", sorted(OLLAMA_CASES))
def test_ollama_streams_start_with_the_status_line(instant_server, case):
    path, body = OLLAMA_CASES[case]
    for r in many(instant_server.port, lambda i: post(path, {"model": "fake", **body})):
        assert check_ollama_stream(r)[-1]["done"] is True


def test_errors_before_the_stream_are_whole_responses(instant_server):
    """Refused before anything was sent: a complete response with its status, in each protocol's shape."""
    bodies = [("/v1/chat/completions", {"model": "nope", "messages": USER, "stream": True}, 404),
              ("/v1/completions", {"model": "fake", "prompt": "x", "stream": True, "n": 99}, 400),
              ("/api/chat", {"model": "nope", "messages": USER}, 404)]
    responses = many(instant_server.port, lambda i: post(bodies[i % 3][0], bodies[i % 3][1]))
    for i, r in enumerate(responses):
        assert r.status == bodies[i % 3][2] and not r.chunked and "error" in orjson.loads(r.body)


@pytest.fixture(scope="module")
def queueing_server(tmp_path_factory):
    """One slot, 4 ms steps, a 0.3 s queue timeout and 20 ms keep-alives: queued streams are
    opened and kept alive, and most then end in-band with the queue timeout."""
    from ..conftest import running_server

    with running_server(tmp_path_factory.mktemp("queueing"), "--model",
                        "fake=synthetic:step_us=4000,prefill_us_per_token=0,n_ctx=1024", "--ctx-size", "1024",
                        "--parallel", "1", "--max-queue", "256", "--queue-timeout-s", "0.3",
                        "--keepalive-interval-s", "0.02",
                        real_model=False) as srv:
        yield srv


def test_queued_streams_and_errors_after_the_start(queueing_server):
    """Kept alive while queued (opened before a slot was free), then either relayed or ended
    in-band with the queue timeout (`server_busy`): every response still starts with its status
    line and ends with its terminating chunk."""
    body = {"model": "fake", "messages": USER, "max_tokens": 20, "stream": True}
    responses = many(queueing_server.port, lambda i: post("/v1/chat/completions", body))
    ended = {"finished": 0, "in_band": 0}
    for r in responses:
        events = check_openai_stream(r, expect_done=False)
        kept_alive = r.body.startswith(b": keep-alive")
        if "error" in events[-1]:
            assert events[-1]["error"]["code"] == "server_busy" and kept_alive
            ended["in_band"] += 1
        else:
            ended["finished"] += 1
    assert ended["finished"] >= 1 and ended["in_band"] >= 1, ended
    lines = [check_ollama_stream(r) for r in many(
        queueing_server.port, lambda i: post("/api/chat", {"model": "fake", "messages": USER,
                                                           "options": {"num_predict": 20}}))]
    assert any("error" in ls[-1] for ls in lines) and any(ls[-1].get("done") for ls in lines)
    body = {"model": "fake", "input": "x", "max_output_tokens": 20, "stream": True}
    ends = [check_responses_stream(r, ends=("response.incomplete", "response.failed"))[-1] for r in many(
        queueing_server.port, lambda i: post("/v1/responses", body))]
    failed = [e["response"] for e in ends if e["type"] == "response.failed"]
    assert failed and len(failed) < len(ends) and all(f["error"]["code"] == "server_busy" for f in failed)


def test_real_model_streams_start_with_the_status_line(server):
    """SmolLM2 (one lane, one thread): chat, completions, Ollama chat, Messages and Responses, 50 at once each."""
    cases = [("/v1/chat/completions", {"messages": USER, "max_tokens": 3, "stream": True}, check_openai_stream),
             ("/v1/completions", {"prompt": "Hello", "max_tokens": 3, "stream": True}, check_openai_stream),
             ("/api/chat", {"messages": USER, "options": {"num_predict": 3}}, check_ollama_stream),
             ("/v1/messages", {"messages": USER, "max_tokens": 3, "stream": True}, check_anthropic_stream),
             ("/v1/responses", {"input": USER, "max_output_tokens": 3, "stream": True}, check_responses_stream)]
    for path, body, check in cases:
        for r in many(server.port, lambda i: post(path, {"model": "smollm2", **body}), timeout_s=300.0):
            check(r)


def test_streams_cancelled_after_their_first_tokens(queueing_server):
    """POST /stop while 50 streams run or wait: the running one ends in-band after its first
    tokens, the queued ones (opened and kept alive) in-band too; every response is still whole."""
    body = {"model": "fake", "messages": USER, "max_tokens": 200, "stream": True}

    async def run():
        streams = [asyncio.ensure_future(exchange(queueing_server.port, post("/v1/chat/completions", body)))
                   for _ in range(TRIES)]
        await asyncio.sleep(0.15)  # one stream is generating, the rest are queued and opened
        stop = await exchange(queueing_server.port, post("/stop", {}))
        return stop, await asyncio.gather(*streams)

    stop, responses = asyncio.run(run())
    assert stop.status == 200 and orjson.loads(stop.body)["count"] >= 1
    after_tokens = 0
    for r in responses:
        events = check_openai_stream(r, expect_done=False)
        if "error" in events[-1]:
            assert events[-1]["error"]["code"] in ("request_cancelled", "server_busy"), events[-1]
            after_tokens += any(e.get("choices") and e["choices"][0]["delta"].get("content") for e in events[:-1])
    assert after_tokens >= 1


def test_responses_streams_cancelled_mid_answer_stay_numbered(queueing_server):
    """A Responses stream stopped after its relay-numbered deltas: the error and response.failed
    events carry on from the relay's count (no gap, no repeat)."""
    body = {"model": "fake", "input": "x", "max_output_tokens": 300, "stream": True}

    async def run():
        stream = asyncio.ensure_future(exchange(queueing_server.port, post("/v1/responses", body)))
        await asyncio.sleep(0.2)  # some 50 deltas framed natively
        await exchange(queueing_server.port, post("/stop", {}))
        return await stream

    events = check_responses_stream(asyncio.run(run()), ends=("response.failed",))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) >= 5 and events[-2]["type"] == "error" and events[-2]["code"] == "request_cancelled"
