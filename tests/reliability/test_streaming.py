"""Stream format: R16 split code points, R17 SSE conformance and keep-alive. (R18, ring
integrity under 64 streams with seq + CRC per delta and a slow consumer, is
tests/csrc/ring/test_ring.py.)"""
from __future__ import annotations

import concurrent.futures
import threading
import time

import httpx
import openai
import orjson
import pytest

from harness import ready_body

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
    def whole(body: dict) -> str:
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200
        r.content.decode("utf-8", errors="strict")
        return r.json()["choices"][0]["text"]

    def streamed(body: dict) -> str:
        with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            events = _sse_events(r)
        assert events[-1] == b"[DONE]"
        return "".join(orjson.loads(e.decode("utf-8", errors="strict"))["choices"][0]["text"] for e in events[:-1])

    bodies = [{"model": "smollm2", "prompt": prompt, "max_tokens": n, "temperature": 0} for n in range(1, 11)]
    # Two workers: the battery server's two lanes each take one request at a time.
    with httpx.Client(base_url=battery.base_url, timeout=60) as client, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        pairs = [(pool.submit(whole, body), pool.submit(streamed, body)) for body in bodies]
        for body, (w, st) in zip(bodies, pairs):
            assert st.result() == w.result(), (prompt, body["max_tokens"])


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


def _read_stream(base_url: str, path: str, body: dict, out: dict, leave_after_s: float | None = None) -> None:
    """Status, the keep-alive frames before the first content, the content lines, the error and
    the end of one stream, with the seconds each arrived after the request was sent; with
    `leave_after_s` the client disconnects then."""
    out.update(keepalives=0, first_data_s=None, data=[], error=None, ended=False)
    t0 = time.monotonic()
    with httpx.Client(base_url=base_url, timeout=30) as client:
        with client.stream("POST", path, json=body) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if leave_after_s is not None and time.monotonic() - t0 > leave_after_s:
                    break
                if not line:
                    continue
                if line.startswith(":") or _empty_ndjson(line):
                    out["keepalives"] += out["first_data_s"] is None
                    continue
                if line == "data: [DONE]" or '"done":true' in line:
                    out["ended"] = True
                    continue
                payload = orjson.loads(line.removeprefix("data: "))
                if "error" in payload:
                    out["error"] = payload["error"]
                    out["ended"] |= not line.startswith("data: ")  # Ollama: the error line is the last
                    continue
                out["data"].append(payload)
                if out["first_data_s"] is None:
                    out["first_data_s"] = time.monotonic() - t0
    out["end_s"] = time.monotonic() - t0


def _empty_ndjson(line: str) -> bool:
    """Ollama's keep-alive: a progress line with no text (NDJSON has no comments)."""
    if not line.startswith("{"):
        return False
    obj = orjson.loads(line)
    return obj.get("done") is False and obj.get("response", obj.get("message", {}).get("content")) == ""


# One slot per model, so later requests really wait in the queue. Sanic's RESPONSE_TIMEOUT (1 s;
# checked every 0.5 s) is well below the survivor's wait (the holder leaves after 2 s), the queue
# timeout (3 s) above it; the request behind the survivor (which then holds the slot 1.8 s) passes
# the queue timeout.
RESPONSE_TIMEOUT_S = 1.0
KEEPALIVE_S = 0.3
QUEUE_TIMEOUT_S = 3.0
HOLD_S = 2.0


@pytest.fixture(scope="module")
def one_slot_models(synthetic_factory):
    return synthetic_factory("--model", "b=synthetic:step_us=20000,slots=1,prefill_us_per_token=5000",
                             "--keepalive-interval-s", str(KEEPALIVE_S), "--response-timeout-s", str(RESPONSE_TIMEOUT_S),
                             "--queue-timeout-s", str(QUEUE_TIMEOUT_S), model="a", step_us=20_000, slots=1,
                             prefill_us_per_token=5000)


def _openai(model: str, max_tokens: int) -> tuple[str, dict]:
    return "/v1/completions", {"model": model, "prompt": "x", "max_tokens": max_tokens, "stream": True,
                               "ignore_eos": True}


def _ollama(model: str, max_tokens: int) -> tuple[str, dict]:
    return "/api/generate", {"model": model, "prompt": "x", "raw": True,
                             "options": {"num_predict": max_tokens, "ignore_eos": True}}


def _start(target, *args, **kwargs) -> threading.Thread:
    t = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    t.start()
    return t


def test_keepalive_while_queued_beyond_the_response_timeout(one_slot_models):
    """R17 (keep-alive while queued): the one slot is taken for 2 s, so a streamed request waits
    in the queue longer than Sanic's RESPONSE_TIMEOUT (1 s here). Its response opens after one
    keep-alive interval and carries keep-alive frames (`: keep-alive` for SSE, empty progress
    lines for Ollama's NDJSON) until it holds a slot, then all its tokens — no 503 (what Sanic
    answered before gateway.serve.queued), no client timeout. The request queued behind it,
    whose wait passes --queue-timeout-s (3 s), ends in-band with the protocol's error frame and
    its end. Model a: OpenAI survives, Ollama times out; model b the other way round (both
    models at once: one round of ~3 s)."""
    base = one_slot_models.base_url
    rounds = {"a": (_openai, _ollama), "b": (_ollama, _openai)}
    results = {model: ({}, {}, {}) for model in rounds}
    threads = [_start(_read_stream, base, *_openai(model, 400), results[model][0], leave_after_s=HOLD_S)
               for model in rounds]
    deadline = time.monotonic() + 5
    while not all(m["slots_in_use"] for m in ready_body(base)["models"].values()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    threads += [_start(_read_stream, base, *survivor(model, 90), results[model][1])
                for model, (survivor, _) in rounds.items()]
    time.sleep(0.1)  # queue order: the survivors first
    threads += [_start(_read_stream, base, *timed_out(model, 3), results[model][2])
                for model, (_, timed_out) in rounds.items()]
    for t in threads:
        t.join(30)
    for model, (_, first, second) in results.items():
        # The survivor: opened while queued, kept alive past the response timeout, then served.
        assert first["status"] == 200 and first["error"] is None and first["ended"], (model, first)
        assert first["first_data_s"] > RESPONSE_TIMEOUT_S + 0.2, (model, first["first_data_s"])
        assert first["keepalives"] >= 3, (model, first["keepalives"])
        assert len(first["data"]) >= 90, (model, len(first["data"]))
        # Behind it: the queue timeout, in-band, after keep-alives, never a token.
        assert second["status"] == 200 and second["keepalives"] >= 3 and not second["data"], (model, second)
        assert second["ended"] and QUEUE_TIMEOUT_S - 0.3 < second["end_s"] < QUEUE_TIMEOUT_S + 3.0, (model, second)
        error = second["error"]
        assert error == {**error, "code": "server_busy"} if isinstance(error, dict) else "busy" in error, second


def test_keepalive_comments_while_prefill_runs(one_slot_models):
    """R17 (keep-alive while prefilling): a stream whose prompt takes ~1.5 s to read — longer than
    Sanic's RESPONSE_TIMEOUT (1 s here) — receives `: keep-alive` comments every
    --keepalive-interval-s before its first token, and then its tokens."""
    out = {}
    _read_stream(one_slot_models.base_url, "/v1/completions",
                 {"model": "a", "prompt": "hello " * 300, "max_tokens": 3, "stream": True}, out)
    assert out["status"] == 200 and out["ended"] and out["error"] is None, out
    assert out["first_data_s"] is not None and out["first_data_s"] > RESPONSE_TIMEOUT_S + 0.3  # the prompt took ~1.5 s
    assert out["keepalives"] >= 2, out["keepalives"]
