"""Request control (gateway/serve/control.py, control_routes.py): POST /stop and
DELETE /v1/requests/{id} end queued and running requests at once, with each protocol's terminal
answer, record outcome `cancelled`, and never restart a lane. On the lanes' synthetic backend
(fast, deterministic) and on the real SmolLM2."""
from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import running_server

STEP_MS = 20  # synthetic step: every running sequence gets a token per step


@pytest.fixture(scope="module")
def ctl_server(tmp_path_factory):
    spec = f"synthetic:step_us={STEP_MS * 1000},n_ctx=4096"
    with running_server(tmp_path_factory.mktemp("control"), "--model", f"fake={spec}", "--model", f"other={spec}",
                        "--ctx-size", "4096", "--parallel", "8", "--max-queue", "4", real_model=False) as srv:
        yield srv


@pytest.fixture
def client(ctl_server):
    with httpx.Client(base_url=ctl_server.base_url, timeout=60) as c:
        yield c


class Stream(threading.Thread):
    """One request in a thread: `started` once its first content chunk arrived (stream) or once
    sent (non-stream); then its status, SSE events (dicts / "[DONE]") or body, and end time."""

    def __init__(self, base_url: str, request_id: str, body: dict, route: str = "/v1/completions") -> None:
        super().__init__(daemon=True)
        self.base_url, self.request_id, self.body, self.route = base_url, request_id, body, route
        self.started = threading.Event()
        self.status: int | None = None
        self.events: list = []
        self.json: dict | None = None
        self.ended_s: float | None = None
        self.start()

    def run(self) -> None:
        headers = {"X-Request-ID": self.request_id}
        with httpx.Client(base_url=self.base_url, timeout=120) as c:
            if not self.body.get("stream"):
                self.started.set()
                reply = c.post(self.route, json=self.body, headers=headers)
                self.status, self.json = reply.status_code, reply.json()
            else:
                with c.stream("POST", self.route, json=self.body, headers=headers) as r:
                    self.status = r.status_code
                    if r.status_code != 200:
                        r.read()
                        self.json = r.json()
                    else:
                        for line in r.iter_lines():
                            if not line.startswith("data: "):
                                continue
                            payload = line[len("data: "):]
                            self.events.append(payload if payload == "[DONE]" else json.loads(payload))
                            if isinstance(self.events[-1], dict) and self.events[-1].get("choices"):
                                self.started.set()
        self.ended_s = time.monotonic()
        self.started.set()

    def finish(self, timeout_s: float = 60) -> "Stream":
        self.join(timeout_s)
        assert not self.is_alive(), f"request {self.request_id} did not end"
        return self

    @property
    def cancelled_terminal(self) -> bool:
        """The stream ended with the cancellation error event, then [DONE]."""
        return (len(self.events) >= 2 and self.events[-1] == "[DONE]" and isinstance(self.events[-2], dict)
                and self.events[-2].get("error", {}).get("code") == "request_cancelled")

    @property
    def usage(self) -> dict | None:
        chunks = [e for e in self.events if isinstance(e, dict) and e.get("usage")]
        return chunks[-1]["usage"] if chunks else None


def start_streams(base_url: str, prefix: str, count: int, max_tokens, model: str = "fake", **extra) -> list[Stream]:
    """`count` concurrent streams, returned once each has streamed content."""
    sizes = max_tokens if isinstance(max_tokens, list) else [max_tokens] * count
    streams = [Stream(base_url, f"{prefix}-{k}", {"model": model, "prompt": f"request {k}", "max_tokens": sizes[k],
                                                   "stream": True, **extra})
               for k in range(count)]
    for s in streams:
        assert s.started.wait(60), f"{s.request_id} never streamed"
        assert s.status == 200, (s.status, s.json)
    return streams


def by_id(records: list[dict]) -> dict[str, dict]:
    return {r["request_id"]: r for r in records}


def metric(client, name: str, **labels) -> float | None:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def lane_identity(client, model: str = "fake") -> list:
    return [(lane["pid"], lane["restarts"]) for lane in client.get("/health/ready").json()["models"][model]["lanes"]]


def wait_idle(client, model: str = "fake", timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while metric(client, "laneserve_slots_in_use", model=model) or metric(client, "laneserve_queue_depth", model=model):
        assert time.monotonic() < deadline, "slots or queue still taken"
        time.sleep(0.02)


# --- synthetic backend --------------------------------------------------------------------------

def test_stop_model_ends_every_stream_within_1s(client, ctl_server):
    before = lane_identity(client)
    streams = start_streams(ctl_server.base_url, "stop-all", 8, 2000)  # 40 s each if left alone
    stopped_s = time.monotonic()
    reply = client.post("/stop", json={"model": "fake"})
    assert reply.status_code == 200
    body = reply.json()
    assert body["count"] == 8 and sorted(body["cancelled"]) == sorted(s.request_id for s in streams)
    for s in streams:
        s.finish(5)
        assert s.cancelled_terminal, s.events[-3:]
        assert s.ended_s - stopped_s < 1.0
        assert all("error" not in e for e in s.events[:-2] if isinstance(e, dict))
    found = by_id(ctl_server.records(*(s.request_id for s in streams)))
    assert {(r["outcome"], r["status"], r["error_code"]) for r in found.values()} == {
        ("cancelled", 200, "request_cancelled")} and len(found) == 8
    assert metric(client, "laneserve_requests_total", model="fake", outcome="cancelled") >= 8
    wait_idle(client)
    assert lane_identity(client) == before
    # the lane serves on
    ok = client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 3})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


def test_stop_without_body_cancels_every_model_and_reports_nothing_when_idle(client, ctl_server):
    assert client.post("/stop").json() == {"cancelled": [], "count": 0}
    streams = start_streams(ctl_server.base_url, "stop-nobody", 2, 2000)
    body = client.post("/stop").json()
    assert body["count"] == 2
    for s in streams:
        assert s.finish(5).cancelled_terminal


def test_stop_of_one_model_leaves_the_other_models_requests_alone(client, ctl_server):
    mine = start_streams(ctl_server.base_url, "stop-mine", 2, 2000)
    others = start_streams(ctl_server.base_url, "stop-other", 2, 40, model="other",
                           stream_options={"include_usage": True})
    assert sorted(client.post("/stop", json={"model": "fake"}).json()["cancelled"]) == ["stop-mine-0", "stop-mine-1"]
    for s in mine:
        assert s.finish(5).cancelled_terminal
    for s in others:
        assert s.finish(30).usage["completion_tokens"] == 40 and not s.cancelled_terminal
    wait_idle(client)


def test_cancel_two_of_eight_by_id_leaves_the_others_complete(client, ctl_server):
    sizes = [1000, 1000] + [60] * 6
    streams = start_streams(ctl_server.base_url, "by-id", 8, sizes, stream_options={"include_usage": True})
    for s in streams[:2]:
        reply = client.delete(f"/v1/requests/{s.request_id}")
        assert reply.status_code == 200 and reply.json() == {"id": s.request_id, "cancelled": True}
    for s in streams[:2]:
        assert s.finish(5).cancelled_terminal and s.usage is None
    for s in streams[2:]:
        s.finish(30)
        assert s.events[-1] == "[DONE]" and not any("error" in e for e in s.events if isinstance(e, dict))
        assert s.usage["completion_tokens"] == 60
        finishes = [e["choices"][0]["finish_reason"] for e in s.events if isinstance(e, dict) and e["choices"]]
        assert finishes[-1] == "length"
    found = by_id(ctl_server.records(*(s.request_id for s in streams)))
    assert [found[s.request_id]["outcome"] for s in streams] == ["cancelled"] * 2 + ["success"] * 6
    # a finished id is no longer cancellable
    assert client.delete(f"/v1/requests/{streams[2].request_id}").status_code == 404
    wait_idle(client)


def test_queued_requests_cancelled_by_id_leave_the_queue_at_once(client, ctl_server):
    running = start_streams(ctl_server.base_url, "fill", 8, 2000)
    queued_stream = Stream(ctl_server.base_url, "queued-stream",
                           {"model": "fake", "prompt": "q", "max_tokens": 5, "stream": True})
    queued_plain = Stream(ctl_server.base_url, "queued-plain", {"model": "fake", "prompt": "q", "max_tokens": 5})
    deadline = time.monotonic() + 5
    while metric(client, "laneserve_queue_depth", model="fake") != 2:
        assert time.monotonic() < deadline, "the two requests never queued"
        time.sleep(0.02)
    for q in (queued_stream, queued_plain):
        asked_s = time.monotonic()
        assert client.delete(f"/v1/requests/{q.request_id}").status_code == 200
        q.finish(5)
        assert q.ended_s - asked_s < 1.0
        assert q.status == 499 and q.json["error"]["code"] == "request_cancelled"
        assert q.json["error"]["type"] == "cancelled_error"
    assert metric(client, "laneserve_queue_depth", model="fake") == 0
    found = by_id(ctl_server.records("queued-stream", "queued-plain"))
    assert {(r["outcome"], r["status"], r["n_choices"]) for r in found.values()} == {("cancelled", 499, 0)}
    assert all(s.is_alive() for s in running)  # untouched
    assert client.post("/stop", json={"model": "fake"}).json()["count"] == 8
    for s in running:
        assert s.finish(5).cancelled_terminal
    wait_idle(client)


def test_running_non_stream_request_cancelled_answers_499(client, ctl_server):
    plain = Stream(ctl_server.base_url, "plain-running", {"model": "fake", "prompt": "x", "max_tokens": 2000})
    deadline = time.monotonic() + 5
    while not metric(client, "laneserve_slots_in_use", model="fake"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.delete("/v1/requests/plain-running").json() == {"id": "plain-running", "cancelled": True}
    plain.finish(5)
    assert plain.status == 499 and plain.json["error"]["code"] == "request_cancelled"
    assert by_id(ctl_server.records("plain-running"))["plain-running"]["outcome"] == "cancelled"
    wait_idle(client)


def test_openai_client_sees_cancellation_as_api_error(ctl_server, client):
    oai = openai.OpenAI(base_url=ctl_server.base_url + "/v1", api_key="x", max_retries=2, timeout=30)
    got = []

    def consume():
        try:
            for chunk in oai.completions.create(model="fake", prompt="x", max_tokens=2000, stream=True,
                                                extra_headers={"X-Request-ID": "oai-stream"}):
                got.append(chunk)
        except openai.APIError as exc:
            got.append(exc)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not got:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.delete("/v1/requests/oai-stream").status_code == 200
    t.join(5)
    assert isinstance(got[-1], openai.APIError) and got[-1].code == "request_cancelled"

    def stop_once_running():
        with httpx.Client(base_url=ctl_server.base_url, timeout=10) as c:
            deadline = time.monotonic() + 10
            while not metric(c, "laneserve_slots_in_use", model="fake") and time.monotonic() < deadline:
                time.sleep(0.02)
            c.post("/stop", json={"model": "fake"})

    stopper = threading.Thread(target=stop_once_running, daemon=True)
    stopper.start()
    with pytest.raises(openai.APIStatusError) as info:  # 499: not retried (max_retries=2 above)
        oai.completions.create(model="fake", prompt="x", max_tokens=2000)
    assert info.value.status_code == 499 and info.value.code == "request_cancelled"
    stopper.join(5)
    oai.close()
    wait_idle(client)


def test_errors_unknown_model_and_id_and_bad_bodies(client):
    reply = client.post("/stop", json={"model": "nope"})
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "model_not_found"
    reply = client.delete("/v1/requests/never-seen")
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "request_not_found"
    assert reply.headers["x-request-id"]
    assert client.post("/stop", json={"model": 3}).status_code == 400
    assert client.post("/stop", json={"bogus": 1}).json()["error"]["code"] == "unknown_parameter"
    assert client.post("/stop", content=b"[1]", headers={"content-type": "application/json"}).status_code == 400
    assert client.post("/stop", json={"model": None}).json() == {"cancelled": [], "count": 0}
    assert client.get("/stop").status_code == 405


# --- real SmolLM2 -------------------------------------------------------------------------------

CHAT = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]


@pytest.mark.real_model
def test_real_model_stop_ends_eight_streams_within_1s(server, http):
    before = lane_identity(http, "smollm2")
    streams = start_streams(server.base_url, "real-stop", 8, 400, model="smollm2", ignore_eos=True)
    stopped_s = time.monotonic()
    body = http.post("/stop", json={"model": "smollm2"}).json()
    assert body["count"] == 8 and sorted(body["cancelled"]) == sorted(s.request_id for s in streams)
    for s in streams:
        s.finish(5)
        assert s.cancelled_terminal and s.ended_s - stopped_s < 1.0
    found = by_id(server.records(*(s.request_id for s in streams)))
    assert len(found) == 8 and {r["outcome"] for r in found.values()} == {"cancelled"}
    wait_idle(http, "smollm2", 5.0)
    assert lane_identity(http, "smollm2") == before


@pytest.mark.real_model
def test_real_model_cancel_two_of_eight_others_complete_with_full_usage(server, http):
    sizes = [400, 400] + [24] * 6
    streams = start_streams(server.base_url, "real-by-id", 8, sizes, model="smollm2", ignore_eos=True,
                            stream_options={"include_usage": True})
    for s in streams[:2]:
        assert http.delete(f"/v1/requests/{s.request_id}").status_code == 200
    for s in streams[:2]:
        assert s.finish(5).cancelled_terminal
    for s in streams[2:]:
        s.finish(120)
        assert s.events[-1] == "[DONE]" and s.usage["completion_tokens"] == 24, s.events[-3:]
    found = by_id(server.records(*(s.request_id for s in streams)))
    assert [found[s.request_id]["outcome"] for s in streams] == ["cancelled"] * 2 + ["success"] * 6
    wait_idle(http, "smollm2", 5.0)
