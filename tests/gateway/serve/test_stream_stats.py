"""Generation statistics (gateway/serve/stats.py): `ttft`, `tps`, `generated_tokens` and
llama-server's `timings` on the last event of an OpenAI stream, `timings` on non-stream bodies,
Ollama's durations from the same numbers — sane and consistent, and invisible to the openai client's
own fields. Unit tests first, then the synthetic backend (known step times), then SmolLM2."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import httpx
import openai
import pytest

from gateway.server.records import RequestRecord
from gateway.serve.stats import RequestStats

TIMINGS_KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
STATS_KEYS = {"ttft", "tps", "generated_tokens", "timings"}


@dataclass
class FakeTracker:
    record: RequestRecord = field(default_factory=lambda: RequestRecord("r", "chat"))
    times: tuple = (0, None, 0, 0)

    def timing_ns(self):
        return self.times


def test_shapes_from_tracker_numbers():
    rec = RequestRecord("r", "chat", prompt_tokens=100, cached_tokens=40, completion_tokens=21, n_choices=1,
                        ttft_ms=250.0)
    stats = RequestStats.from_tracker(FakeTracker(rec, (0, 1_000_000, 120_000_000, 400_000_000)))
    assert stats.ttft_ns == 250_000_000 and stats.total_ns > 0
    t = stats.timings()
    assert set(t) == TIMINGS_KEYS
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (40, 60, 21)
    assert (t["prompt_ms"], t["prompt_per_token_ms"], t["prompt_per_second"]) == (120.0, 2.0, 500.0)
    assert (t["predicted_ms"], t["predicted_per_token_ms"], t["predicted_per_second"]) == (400.0, 19.048, 52.5)
    fields = stats.openai_stream_fields()
    assert fields["ttft"] == 0.25 and fields["tps"] == 52.5 and fields["generated_tokens"] == 21
    assert stats.openai_body_fields() == {"timings": t}
    ollama = stats.ollama_fields()
    assert ollama["prompt_eval_count"] == 100 and ollama["prompt_eval_duration"] == 120_000_000
    assert ollama["eval_count"] == 21 and ollama["eval_duration"] == 400_000_000 and ollama["load_duration"] == 0
    assert all(type(v) is int for k, v in ollama.items() if k not in ("ttft", "tps"))


def test_no_decode_time_and_no_token_give_zeros_not_errors():
    rec = RequestRecord("r", "completions", prompt_tokens=3, completion_tokens=1, n_choices=1)
    stats = RequestStats.from_tracker(FakeTracker(rec, (0, 5_000_000, 7_000_000, 0)))
    assert stats.tps == 0.0 and stats.ttft_ns == 12_000_000  # non-stream: admission + prompt processing
    empty = RequestStats.from_tracker(FakeTracker(RequestRecord("r", "chat"), (0, None, 0, 0)))
    assert empty.ttft_ns is None and empty.openai_stream_fields()["ttft"] is None
    assert empty.timings()["prompt_per_token_ms"] == 0.0 and empty.timings()["predicted_per_second"] == 0.0


def check_stats(fields: dict, usage: dict) -> dict:
    """Sane and self-consistent stats for a response with this usage; returns timings."""
    assert STATS_KEYS <= set(fields)
    t = fields["timings"]
    assert set(t) == TIMINGS_KEYS
    assert fields["generated_tokens"] == usage["completion_tokens"] == t["predicted_n"]
    assert t["prompt_n"] + t["cache_n"] == usage["prompt_tokens"]
    assert t["cache_n"] == usage["prompt_tokens_details"]["cached_tokens"]
    assert fields["ttft"] > 0 and fields["tps"] > 0 and fields["tps"] == t["predicted_per_second"]
    assert fields["ttft"] * 1000 >= t["prompt_ms"] * 0.99  # arrival → first token includes the prompt
    assert t["predicted_ms"] > 0 and t["prompt_ms"] > 0
    assert t["predicted_per_second"] == pytest.approx(t["predicted_n"] / t["predicted_ms"] * 1000, rel=1e-3)
    assert t["predicted_per_token_ms"] == pytest.approx(t["predicted_ms"] / t["predicted_n"], rel=1e-3, abs=1e-3)
    if t["prompt_n"]:
        assert t["prompt_per_second"] == pytest.approx(t["prompt_n"] / t["prompt_ms"] * 1000, rel=1e-3)
    return t


def sse_events(response: httpx.Response) -> list:
    return [json.loads(line[6:]) for line in response.text.split("\n\n") if line.startswith("data: {")]


# --- synthetic backend: 2 ms per step, 1 ms per prompt token -------------------------------------

@pytest.fixture
def client(synthetic_server):
    with httpx.Client(base_url=synthetic_server.base_url, timeout=60) as c:
        yield c


def test_usage_chunk_carries_the_stats_and_nothing_else_does(client):
    body = {"model": "fake", "prompt": [216] * 50, "max_tokens": 20, "stream": True,
            "stream_options": {"include_usage": True}}
    events = sse_events(client.post("/v1/completions", json=body))
    last = events[-1]
    assert last["choices"] == [] and STATS_KEYS <= set(last)
    assert all(not STATS_KEYS & set(e) for e in events[:-1])
    t = check_stats(last, last["usage"])
    assert t["prompt_ms"] >= 50 * 0.9 and t["predicted_ms"] >= 19 * 2 * 0.9  # the synthetic lane's own pace


def test_without_usage_the_last_finish_chunk_carries_the_stats(client, synthetic_server):
    body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "n": 2,
            "stream": True}
    events = sse_events(client.post("/v1/chat/completions", json=body))
    finishes = [e for e in events if e["choices"][0]["finish_reason"]]
    assert len(finishes) == 2 and STATS_KEYS <= set(finishes[-1]) and events[-1] is finishes[-1]
    assert all(not STATS_KEYS & set(e) for e in events[:-1])
    prompt_tokens = client.post("/tokenize", json={"model": "fake", "messages": body["messages"],
                                                   "add_generation_prompt": True}).json()["count"]
    check_stats(finishes[-1], {"completion_tokens": 24, "prompt_tokens": prompt_tokens,
                               "prompt_tokens_details": {"cached_tokens": finishes[-1]["timings"]["cache_n"]}})


def test_non_stream_body_has_timings(client, synthetic_server):
    request_id = "stats-" + uuid.uuid4().hex[:8]
    reply = client.post("/v1/completions", json={"model": "fake", "prompt": [216] * 30, "max_tokens": 10},
                        headers={"X-Request-ID": request_id}).json()
    t = reply["timings"]
    assert set(t) == TIMINGS_KEYS and t["predicted_n"] == reply["usage"]["completion_tokens"] == 10
    assert t["prompt_n"] + t["cache_n"] == reply["usage"]["prompt_tokens"] and t["predicted_per_second"] > 0
    assert "ttft" not in reply


def test_openai_client_parses_the_stream_and_keeps_the_extras(synthetic_server):
    oai = openai.OpenAI(base_url=synthetic_server.base_url + "/v1", api_key="x", max_retries=0, timeout=60)
    chunks = list(oai.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=8, stream=True, stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.usage.completion_tokens == 8 and last.choices == []
    check_stats(last.model_extra, last.usage.model_dump())
    plain = list(oai.completions.create(model="fake", prompt="x", max_tokens=5, stream=True))
    assert plain[-1].choices[0].finish_reason == "length" and plain[-1].model_extra["generated_tokens"] == 5
    reply = oai.completions.create(model="fake", prompt="x", max_tokens=5)
    assert reply.usage.completion_tokens == 5 and reply.model_extra["timings"]["predicted_n"] == 5
    oai.close()


# --- real SmolLM2 ------------------------------------------------------------------------------

@pytest.mark.real_model
def test_real_model_stats_through_httpx_and_openai(server, http, openai_client):
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 16,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    last = sse_events(http.post("/v1/chat/completions", json=body))[-1]
    check_stats(last, last["usage"])
    chunks = list(openai_client.chat.completions.create(
        model="smollm2", messages=body["messages"], max_tokens=16, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check_stats(chunks[-1].model_extra, chunks[-1].usage.model_dump())
    reply = openai_client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=12,
                                             extra_body={"ignore_eos": True})
    t = reply.model_extra["timings"]
    assert t["predicted_n"] == reply.usage.completion_tokens == 12 and t["prompt_ms"] > 0 and t["predicted_ms"] > 0
