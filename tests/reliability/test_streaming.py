"""Stream format: R16 split code points, R17 SSE conformance and keep-alive. (R18, ring
integrity under 64 streams with seq + CRC per delta and a slow consumer, is
tests/csrc/ring/test_ring.py.)"""
from __future__ import annotations

import time

import httpx
import openai
import orjson
import pytest

pytestmark = pytest.mark.real_model

PROMPTS = ("😀🎉🚀😀🎉🚀😀🎉", "你好世界，你好世界，你好", "emoji: 👩‍👩‍👧 🏳️‍🌈 and 𝄞𝄞𝄞")


def _sse_events(response: httpx.Response) -> list[bytes]:
    """The raw `data:` payloads; asserts the framing: `data: …` lines each followed by a blank line,
    `:` comments allowed between events."""
    raw = response.read()
    events = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        lines = block.split(b"\n")
        assert len(lines) == 1, block[:200]
        if lines[0].startswith(b":"):
            continue
        assert lines[0].startswith(b"data: "), lines[0][:200]
        events.append(lines[0][6:])
    assert raw.endswith(b"\n\n")
    return events


@pytest.mark.parametrize("prompt", PROMPTS)
def test_split_code_points_stream_equals_non_stream(battery, prompt):
    """R16: 4-byte emoji, ZWJ sequences and CJK whose bytes span several tokens, cut at every
    max_tokens from 1 to 10: each SSE event is strict-UTF-8 JSON, and the concatenated stream text
    equals the non-stream text (a trailing partial code point is handled the same way in both)."""
    with httpx.Client(base_url=battery.base_url, timeout=60) as client:
        for max_tokens in range(1, 11):
            body = {"model": "smollm2", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
            whole = client.post("/v1/completions", json=body)
            assert whole.status_code == 200
            whole.content.decode("utf-8", errors="strict")
            with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
                events = _sse_events(r)
            assert events[-1] == b"[DONE]"
            text = "".join(orjson.loads(e.decode("utf-8", errors="strict"))["choices"][0]["text"] for e in events[:-1])
            assert text == whole.json()["choices"][0]["text"], (prompt, max_tokens)


@pytest.mark.parametrize("include_usage", [False, True])
def test_sse_conformance(battery, include_usage):
    """R17: text/event-stream; `data: <json>\\n\\n` events with one id; the first chunk carries the
    role, the last choice chunk the finish_reason; a usage chunk iff stream_options.include_usage;
    `data: [DONE]` last; the openai SDK parses the same stream without error."""
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    with httpx.Client(base_url=battery.base_url, timeout=60) as client:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = _sse_events(r)
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    with_choices = [c for c in chunks if c["choices"]]
    assert with_choices[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in with_choices[:-1])
    usage = [c for c in chunks if not c["choices"]]
    if include_usage:
        assert len(usage) == 1 and usage[0] is chunks[-1] and usage[0]["usage"]["completion_tokens"] >= 1
    else:
        assert not usage and all("usage" not in c or c["usage"] is None for c in chunks)
    sdk = openai.OpenAI(base_url=battery.base_url + "/v1", api_key="x", max_retries=0)
    stream = sdk.chat.completions.create(**{k: v for k, v in body.items() if k != "stream"}, stream=True)
    text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
    assert isinstance(text, str)


def test_keepalive_comments_while_prefill_runs(synthetic_factory):
    """R17 (keep-alive): a stream whose prompt takes ~2 s to read receives `: keep-alive` comments
    every --keepalive-interval-s before its first token, so proxies and clients with idle timeouts
    keep it. (A request waiting in the queue gets its status first — 429 when the queue is full or
    its wait passes --queue-timeout-s, which is far below Sanic's RESPONSE_TIMEOUT — and its
    response, comments included, starts once it holds a slot.)"""
    srv = synthetic_factory("--keepalive-interval-s", "0.5", step_us=5000, slots=1, prefill_us_per_token=5000)
    comments = 0
    first_data_t = None
    t0 = time.monotonic()
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        with client.stream("POST", "/v1/completions", json={"model": "m", "prompt": "hello " * 400, "max_tokens": 3,
                                                           "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith(":") and first_data_t is None:
                    comments += 1
                elif line.startswith("data: {") and first_data_t is None:
                    first_data_t = time.monotonic() - t0
    assert first_data_t is not None and first_data_t > 1.5  # the prompt did take ~2 s
    assert comments >= 2, comments
