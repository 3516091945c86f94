"""R19 schema fuzz: schemathesis against a real server from its own /openapi.json, plus Hypothesis
property tests of the request parsers and the SSE framing. The long form (≥ 100 examples per
operation, every phase) is benchmarks/schemathesis_run.py."""
from __future__ import annotations

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.http.errors import APIError
from gateway.openai.frames import StreamFrames
from gateway.ollama.requests import parse_chat as ollama_chat, parse_generate as ollama_generate
from gateway.openai.requests import parse_chat, parse_completion
from harness import benchmark_module

runner = benchmark_module("schemathesis_run")

CI_EXAMPLES = 10
SEED = 42


def test_schemathesis_finds_no_failure(battery, tmp_path):
    """R19: fixed seed, a few examples per operation, positive and negative data: no 5xx, every
    answer as documented (status, content type, headers, body, SSE events), invalid data → 4xx."""
    result = runner.fuzz(battery.base_url, CI_EXAMPLES, SEED, str(tmp_path), timeout_s=300, phases="examples,fuzzing")
    assert result["returncode"] == 0, result["output"][-15000:]
    assert result["cases"] >= 22 * 3  # every operation ran (Hypothesis drops duplicate cases)


def test_found_by_fuzzing_show_checks_both_name_fields(battery):
    """R19 regression: /api/show used `model` and let a wrong-typed `name` beside it pass."""
    url = battery.base_url + "/api/show"
    assert httpx.post(url, json={"model": "smollm2", "name": 5}).status_code == 400
    assert httpx.post(url, json={"model": "smollm2", "name": None}).status_code == 400
    assert httpx.post(url, json={"model": "smollm2", "name": "x"}).status_code == 200


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                     max_leaves=12)
_field_names = st.sampled_from(["model", "prompt", "messages", "max_tokens", "temperature", "stop", "n", "stream",
                                "stream_options", "logit_bias", "seed", "options", "tools", "response_format",
                                "top_k", "min_tokens", "enable_thinking", "reasoning_effort", "context", "raw"])
_bodies = st.dictionaries(_field_names | st.text(max_size=8), _json, max_size=8)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies)
def test_parsers_answer_any_json_object_with_a_result_or_a_400(body):
    """R19 (property): arbitrary JSON objects never crash a parser; a refusal is a 400 APIError."""
    for parse in (lambda b: parse_completion(b, lenient=False), lambda b: parse_chat(b, lenient=False),
                  lambda b: parse_chat(b, lenient=True), ollama_chat, ollama_generate):
        try:
            parse(body)
        except APIError as exc:
            assert exc.status == 400
            orjson.dumps(exc.envelope())  # the message is always encodable


@settings(max_examples=300, deadline=None)
@given(st.text(), st.booleans())
def test_sse_framing_round_trips_any_text(text, chat):
    """R19 (property): framed delta text is one strict-UTF-8 JSON event whose text is the input."""
    frames = StreamFrames("id", 0, "m", chat, include_usage=False)
    prefix, suffix = frames.content_framing(0)
    event = prefix + orjson.dumps(text)[1:-1] + suffix
    assert event.startswith(b"data: ") and event.endswith(b"\n\n") and b"\n\n" not in event[:-2]
    choice = orjson.loads(event[6:].decode("utf-8", errors="strict"))["choices"][0]
    assert (choice["delta"]["content"] if chat else choice["text"]) == text


def test_found_by_fuzzing_engine_bounds_are_checked_in_float32(battery):
    """R19 regression (100 examples per operation): repetition_penalty 5e-324 passed the gateway's
    "> 0" and became 0 in the engine's float32 (503 engine_error); top_p 0, valid for OpenAI and
    Ollama clients, hit the engine's "(0, 1]" the same way. Now the first is a 400 and top_p 0 means
    "only the most likely token": the same text as greedy decoding."""
    with httpx.Client(base_url=battery.base_url, timeout=60) as client:
        body = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 6}
        bad = client.post("/v1/completions", json={**body, "repetition_penalty": 5e-324})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "repetition_penalty"
        greedy = client.post("/v1/completions", json={**body, "temperature": 0}).json()["choices"][0]["text"]
        top_p0 = client.post("/v1/completions", json={**body, "top_p": 0, "seed": 7})
        assert top_p0.status_code == 200, top_p0.text
        assert top_p0.json()["choices"][0]["text"] == greedy
        ollama = client.post("/api/generate", json={"model": "smollm2", "prompt": "Hi", "stream": False,
                                                    "options": {"num_predict": 3, "top_p": 0, "repeat_penalty": 1e-50}})
        assert ollama.status_code == 200, ollama.text
