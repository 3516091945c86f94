"""A request cut short — client disconnect mid-stream, DELETE /v1/requests/{id} — is recorded and
metered with the work its lane did (the lane's cancel DONEs carry prompt and generated tokens and
timings): not zeros. The outcome stays `disconnect` / `cancelled`. On the real SmolLM2."""
from __future__ import annotations

import json
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.real_model

MODEL = "smollm2"
COUNTERS = ("laneserve_prompt_tokens_total", "laneserve_completion_tokens_total",
            "laneserve_time_to_first_token_seconds_count")


def totals(http) -> dict[str, float]:
    found = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for s in family.samples:
            if s.name in found and s.labels.get("model") == MODEL:
                found[s.name] += s.value
    return found


def assert_counted(record: dict, received: int, outcome: str, before: dict, after: dict) -> None:
    assert record["outcome"] == outcome, record
    assert record["prompt_tokens"] > 0, record
    assert record["completion_tokens"] >= received, (received, record)
    assert record["ttft_ms"] is not None and record["ttft_ms"] > 0, record
    assert record["prefill_ms"] is not None and record["decode_ms"] is not None, record
    assert after["laneserve_prompt_tokens_total"] - before["laneserve_prompt_tokens_total"] >= record["prompt_tokens"]
    assert (after["laneserve_completion_tokens_total"] - before["laneserve_completion_tokens_total"]
            >= record["completion_tokens"])
    assert after["laneserve_time_to_first_token_seconds_count"] > before["laneserve_time_to_first_token_seconds_count"]


def test_disconnect_mid_stream_records_the_lanes_work(server, http):
    request_id = "acct-disc-" + uuid.uuid4().hex[:8]
    before = totals(http)
    received = 0
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        body = {"model": MODEL, "prompt": "Write a long story about a dragon", "options": {"num_predict": 400}}
        with client.stream("POST", "/api/generate", json=body, headers={"x-request-id": request_id}) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():
                if line.strip():
                    assert not json.loads(line).get("done"), "the stream ended before the disconnect"
                    received += 1
                if received >= 50:
                    break  # leaving the block closes the connection mid-stream
    (record,) = server.records(request_id, timeout_s=10)
    assert record["status"] == 499
    assert_counted(record, received, "disconnect", before, totals(http))


def test_delete_mid_stream_records_the_lanes_work(server, http):
    request_id = "acct-del-" + uuid.uuid4().hex[:8]
    before = totals(http)
    received, events = 0, []
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "stream": True}
        with client.stream("POST", "/v1/completions", json=body, headers={"x-request-id": request_id}) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
                if isinstance(events[-1], dict) and events[-1].get("choices"):
                    received += 1
                if received == 50:
                    assert http.delete(f"/v1/requests/{request_id}").status_code == 200
                    received += 1  # once
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "request_cancelled"
    (record,) = server.records(request_id, timeout_s=10)
    assert_counted(record, received - 1, "cancelled", before, totals(http))
