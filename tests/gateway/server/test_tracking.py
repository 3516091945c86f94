"""Records and logs: one line per finished request, outcomes right, never prompt or output text."""
from __future__ import annotations

import time
import uuid

import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2


def test_records_and_logs_hold_no_prompt_or_output_text(server, http):
    marker = "zebra" + uuid.uuid4().hex[:12]
    request_id = "rec-" + uuid.uuid4().hex[:8]
    reply = http.post("/v1/chat/completions", headers={"x-request-id": request_id},
                      json={"model": "smollm2", "max_tokens": 8, "stop": ["qqq" + marker],
                            "messages": [{"role": "user", "content": f"Repeat after me: {marker}"}]})
    assert reply.status_code == 200
    output = reply.json()["choices"][0]["message"]["content"]
    http.post("/v1/completions", json={"model": "smollm2", "prompt": marker, "stream": True, "max_tokens": 3})
    time.sleep(0.2)
    text = server.records_path.read_text() + server.log_text()
    assert marker not in text
    if len(output.strip()) > 12:
        assert output.strip() not in text
    mine = server.records(request_id)
    assert len(mine) == 1
    record = mine[0]
    assert record["outcome"] == "success" and record["status"] == 200 and record["route"] == "chat"
    assert record["completion_tokens"] == reply.json()["usage"]["completion_tokens"]
    assert record["prompt_tokens"] == reply.json()["usage"]["prompt_tokens"]
    assert record["admission_ms"] >= 0 and record["total_ms"] >= record["model_ms"] > 0


def test_error_outcomes_are_recorded(server, http):
    request_id = "bad-" + uuid.uuid4().hex[:8]
    assert http.post("/v1/completions", headers={"x-request-id": request_id},
                     json={"model": "smollm2", "prompt": "x", "max_tokens": -1}).status_code == 400
    (record,) = server.records(request_id)
    assert record["outcome"] == "error" and record["status"] == 400 and record["error_code"] == "invalid_value"
