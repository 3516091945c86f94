"""/v1/models, /health/live, /health/ready and /metrics on the real server."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2


def test_models_list_has_ids_root_and_capabilities(http, openai_client):
    data = http.get("/v1/models").json()
    assert data["object"] == "list"
    (card,) = data["data"]
    assert card["id"] == card["root"] == "smollm2" and card["owned_by"] == "laneserve"
    assert card["laneserve"]["streaming"] == "incremental"
    assert card["laneserve"]["capabilities"] == ["completion", "chat", "tools"]
    assert card["laneserve"]["ready_replicas"] == card["laneserve"]["replicas"] == 1
    assert card["max_model_len"] == 512 and card["laneserve"]["context_length"] == 512
    assert card["laneserve"]["slots_per_replica"] == 8  # --parallel 0: automatic, 8 for a small K/V cache
    assert [m.id for m in openai_client.models.list()] == ["smollm2"]
    assert openai_client.models.retrieve("smollm2").id == "smollm2"
    assert http.get("/v1/models/nope").status_code == 404


def test_health(http):
    assert http.get("/health/live").json() == {"status": "ok"}
    ready = http.get("/health/ready")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready"
    (lane,) = body["models"]["smollm2"]["lanes"]
    assert lane["state"] in ("ready", "busy") and lane["pid"] > 0 and lane["restarts"] == 0
    model = body["models"]["smollm2"]
    assert model["slots"] == lane["slots"] == 8 and model["ctx_per_slot"] == 512
    assert 0 <= model["slots_in_use"] == lane["slots_in_use"] <= 8 and model["queued"] == 0
    assert lane["kv_cache_bytes"] > 0  # reserved for all slots of the real engine
    for path in ("/health", "/v1/health"):  # llama-server's check, which its clients poll
        assert http.get(path).json() == {"status": "ok"}


def test_metrics_are_prometheus_with_prefix(http):
    http.post("/v1/completions", json={"model": "smollm2", "prompt": "Hi", "max_tokens": 2})
    text = http.get("/metrics").text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names and all(n.startswith("laneserve_") for n in names if not n.startswith(("python_", "process_")))
    for expected in ("laneserve_requests", "laneserve_admission_seconds", "laneserve_inference_seconds",
                     "laneserve_lane_prefill_seconds", "laneserve_lane_decode_seconds", "laneserve_lanes",
                     "laneserve_lane_restarts", "laneserve_active_requests", "laneserve_slots",
                     "laneserve_slots_in_use", "laneserve_queue_depth", "laneserve_queue_wait_seconds",
                     "laneserve_step_seconds", "laneserve_batch_tokens", "laneserve_cached_prompt_tokens"):
        assert expected in names, expected
    assert 'laneserve_requests_total{adapter="",model="smollm2",outcome="success",route="completions"}' in text
    assert 'laneserve_slots{model="smollm2"} 8.0' in text
