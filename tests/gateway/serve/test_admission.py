"""Admission: a model's capacity is replicas × sequence slots; beyond it requests wait in a
bounded FIFO queue (--max-queue, each wait bounded by --queue-timeout-s); beyond the queue, or
after the wait, 429 server_busy with Retry-After at once (the openai client would retry it; here
retries are off). Runs on the lanes' synthetic backend with one slot and a tiny queue."""
from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.cli.bench.synthetic import synthetic_text

LONG = {"model": "fake", "prompt": "Count:", "max_tokens": 1000, "stream": True}  # 20 s at 20 ms a step
SHORT = {"model": "fake", "prompt": "x", "max_tokens": 3}


def metric(client: httpx.Client, name: str, **labels) -> float | None:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def wait_metric(client, name: str, value: float, timeout_s: float = 10.0, **labels) -> None:
    deadline = time.monotonic() + timeout_s
    while metric(client, name, **labels) != value:
        assert time.monotonic() < deadline, f"{name}{labels} never became {value}: {metric(client, name, **labels)}"
        time.sleep(0.02)


class Holder:
    """A streaming request that takes the only slot until released (then disconnects)."""

    def __init__(self, base_url: str) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(base_url,), daemon=True)
        self.thread.start()
        assert self.started.wait(30), "the first request never started streaming"
        assert self.status == 200

    def _run(self, base_url: str) -> None:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            with client.stream("POST", "/v1/completions", json=LONG) as response:
                self.status = response.status_code
                if response.status_code != 200:
                    self.started.set()
                    return
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        self.started.set()
                    if self.release.is_set():
                        return  # closing the response disconnects: the request is cancelled

    def stop(self) -> None:
        self.release.set()
        self.thread.join(30)


def start(own_server, *args):
    srv = own_server("--model", "fake=synthetic:step_us=20000,n_ctx=1024", "--ctx-size", "1024", "--parallel", "1",
                     *args, real_model=False)
    srv.wait_ready()
    return srv


def test_requests_queue_when_every_slot_is_taken_and_429_once_the_queue_is_full(own_server):
    srv = start(own_server, "--max-queue", "1", "--queue-timeout-s", "60")
    with httpx.Client(base_url=srv.base_url, timeout=60) as http:
        assert metric(http, "laneserve_slots", model="fake") == 1
        holder = Holder(srv.base_url)
        queued_reply = {}
        queued = threading.Thread(target=lambda: queued_reply.update(r=http.post("/v1/completions", json=SHORT)),
                                  daemon=True)
        try:
            wait_metric(http, "laneserve_slots_in_use", 1, model="fake")
            queued.start()
            wait_metric(http, "laneserve_queue_depth", 1, model="fake")  # waits instead of a 429
            with httpx.Client(base_url=srv.base_url, timeout=60) as other:
                t0 = time.monotonic()
                response = other.post("/v1/chat/completions",
                                      json={"model": "fake", "messages": [{"role": "user", "content": "Hi"}]})
                assert time.monotonic() - t0 < 2.0  # fast rejection (loose bound for a loaded 2-core box)
                assert response.status_code == 429
                assert int(response.headers["retry-after"]) >= 1
                assert response.json()["error"]["code"] == "server_busy"
                assert "queue is full" in response.json()["error"]["message"]
                stream = other.post("/v1/completions", json={**LONG, "max_tokens": 2})
                assert stream.status_code == 429  # refused before any SSE byte
            with openai.OpenAI(base_url=srv.base_url + "/v1", api_key="x", max_retries=0, timeout=60) as oai:
                with pytest.raises(openai.RateLimitError):
                    oai.completions.create(model="fake", prompt="x", max_tokens=1)
            assert metric(http, "laneserve_rejected_total", model="fake", reason="server_busy") >= 3
            assert queued.is_alive()  # still waiting for the slot
        finally:
            holder.stop()
        queued.join(30)
        reply = queued_reply["r"]
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == synthetic_text(3)
        assert metric(http, "laneserve_queue_wait_seconds_count", model="fake") >= 1
        wait_metric(http, "laneserve_queue_depth", 0, model="fake")
        wait_metric(http, "laneserve_slots_in_use", 0, model="fake")
    assert srv.terminate() == 0


def test_a_queued_request_that_waits_too_long_gets_429(own_server):
    srv = start(own_server, "--max-queue", "4", "--queue-timeout-s", "0.5")
    with httpx.Client(base_url=srv.base_url, timeout=60) as http:
        holder = Holder(srv.base_url)
        try:
            t0 = time.monotonic()
            response = http.post("/v1/completions", json=SHORT)
            waited = time.monotonic() - t0
            assert response.status_code == 429 and response.json()["error"]["code"] == "server_busy"
            assert "0.5 s" in response.json()["error"]["message"] and "retry-after" in response.headers
            assert 0.45 <= waited < 5.0
            assert metric(http, "laneserve_queue_depth", model="fake") == 0  # it left the queue
        finally:
            holder.stop()
        wait_metric(http, "laneserve_slots_in_use", 0, model="fake")
        assert http.post("/v1/completions", json=SHORT).status_code == 200
    assert srv.terminate() == 0


def test_a_client_that_leaves_while_queued_frees_its_place(own_server):
    srv = start(own_server, "--max-queue", "1", "--queue-timeout-s", "60")
    with httpx.Client(base_url=srv.base_url, timeout=60) as http:
        holder = Holder(srv.base_url)
        try:
            with httpx.Client(base_url=srv.base_url, timeout=0.5) as impatient:
                with pytest.raises(httpx.ReadTimeout):
                    impatient.post("/v1/completions", json=SHORT)  # queued, then gone
            wait_metric(http, "laneserve_queue_depth", 0, model="fake")
            queued_reply = {}
            queued = threading.Thread(
                target=lambda: queued_reply.update(r=http.post("/v1/completions", json=SHORT)), daemon=True)
            queued.start()  # the place is free again: this one queues instead of a 429
            wait_metric(http, "laneserve_queue_depth", 1, model="fake")
        finally:
            holder.stop()
        queued.join(30)
        assert queued_reply["r"].status_code == 200
        wait_metric(http, "laneserve_slots_in_use", 0, model="fake")
    assert srv.terminate() == 0


def test_restarting_model_answers_503_at_once_instead_of_queueing(own_server):
    """R10: while the only lane restarts, new requests get 503 + Retry-After at once (they are not
    queued behind a restart of unknown length); the lane is back afterwards."""
    import os
    import signal

    srv = own_server("--model", "fake=synthetic:step_us=20000,load_ms=1500,n_ctx=1024", "--ctx-size", "1024",
                     "--parallel", "1", "--max-queue", "4", real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        pid = client.get("/health/ready").json()["models"]["fake"]["lanes"][0]["pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while client.get("/health/ready").json()["models"]["fake"]["lanes"][0]["state"] in ("ready", "busy"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        t0 = time.monotonic()
        r = client.post("/v1/completions", json=SHORT)
        elapsed = time.monotonic() - t0
        assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"]["code"] == "lane_unavailable"
        assert elapsed < 0.5, elapsed
        o = client.post("/api/generate", json={"model": "fake", "prompt": "x", "raw": True, "stream": False})
        assert o.status_code == 503 and set(o.json()) == {"error"}
        deadline = time.monotonic() + 20
        while client.get("/health/ready").status_code != 200 or \
                client.get("/health/ready").json()["models"]["fake"]["status"] != "ready":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.post("/v1/completions", json=SHORT).status_code == 200


def test_overload_burst_beyond_slots_and_queue_is_rejected_at_once(own_server):
    """R15: a burst of 10 × (slots + queue) requests: the excess gets 429 server_busy + Retry-After
    without waiting (measured per rejected request), every admitted request completes, and the
    rejections are counted."""
    import concurrent.futures

    srv = own_server("--model", "fake=synthetic:step_us=5000,n_ctx=1024", "--ctx-size", "1024",
                     "--parallel", "2", "--max-queue", "2", real_model=False)
    srv.wait_ready()
    body = {"model": "fake", "prompt": "x", "max_tokens": 40}

    def one(_):
        with httpx.Client(base_url=srv.base_url, timeout=60) as c:
            t0 = time.monotonic()
            r = c.post("/v1/completions", json=body)
            return r.status_code, time.monotonic() - t0, r.headers.get("retry-after")

    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as pool:
        results = list(pool.map(one, range(40)))
    ok = [r for r in results if r[0] == 200]
    busy = [r for r in results if r[0] == 429]
    assert len(ok) + len(busy) == 40 and len(ok) >= 4 and len(busy) >= 20
    assert all(retry for _, _, retry in busy)
    # a rejection costs no wait: far below one generation (40 steps × 5 ms)
    assert sorted(t for _, t, _ in busy)[len(busy) // 2] < 0.1
    with httpx.Client(base_url=srv.base_url) as c:
        assert metric(c, "laneserve_rejected_total", model="fake", reason="server_busy") == len(busy)
