"""Admission: each replica runs one request at a time; a busy model answers 429 server_busy with
Retry-After at once (the openai client would retry it; here retries are off)."""
from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2

LONG = {"model": "smollm2", "prompt": "Count:", "max_tokens": 400, "ignore_eos": True, "stream": True}


def hold_the_lane(base_url: str, started: threading.Event, release: threading.Event) -> None:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json=LONG) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    started.set()
                if release.is_set():
                    return  # closing the response disconnects: the lane is cancelled


def test_busy_replica_gives_429_with_retry_after(base_url, openai_client, http):
    started, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_the_lane, args=(base_url, started, release), daemon=True)
    holder.start()
    try:
        assert started.wait(30), "the first request never started streaming"
        t0 = time.monotonic()
        response = http.post("/v1/chat/completions",
                             json={"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]})
        assert time.monotonic() - t0 < 0.5  # fast rejection (loose bound for a loaded 2-core CI box)
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["code"] == "server_busy"
        with pytest.raises(openai.RateLimitError):
            openai_client.completions.create(model="smollm2", prompt="x", max_tokens=1)
        stream = http.post("/v1/completions", json={**LONG, "max_tokens": 2})
        assert stream.status_code == 429  # refused before any SSE byte
        metrics = http.get("/metrics").text
        assert 'laneserve_rejected_total{model="smollm2",reason="server_busy"}' in metrics
    finally:
        release.set()
        holder.join(30)
    deadline = time.monotonic() + 5
    while http.post("/v1/completions", json={"model": "smollm2", "prompt": "x", "max_tokens": 1}).status_code == 429:
        assert time.monotonic() < deadline, "the lane was never freed"
        time.sleep(0.05)
