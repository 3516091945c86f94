"""Two real laneserve instances (SmolLM2) behind a real HAProxy running deploy/haproxy/haproxy.cfg
as shipped: streams identical to direct ones, 429 handed through when every instance is full,
client aborts reaching the lane, instance failures invisible to new requests, a SIGTERM drain
without a failed request, and session affinity."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time

import httpx
import pytest

from balancers import DRAIN_DELAY_S, free_port, start_haproxy, start_pair

pytestmark = pytest.mark.real_model

# Values that legitimately differ between two runs of one request: ids, clocks, speeds, and what
# the prefix cache happened to hold (the same prompt may be cached on one instance, not the other).
VOLATILE = re.compile(
    rb'"(id|created|created_at|ttft|tps|total_duration|load_duration|prompt_eval_duration|eval_duration|'
    rb'prompt_ms|prompt_per_token_ms|prompt_per_second|predicted_ms|predicted_per_token_ms|'
    rb'predicted_per_second|cache_n|prompt_n|cached_tokens)":("[^"]*"|[-0-9.eE+]+)')

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24,
        "temperature": 0, "seed": 1, "stream": True, "stream_options": {"include_usage": True}}
COMPLETION = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0,
              "stream": True}
OLLAMA_CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hello."}],
               "options": {"temperature": 0, "num_predict": 16, "seed": 1}}


def _normalized(body: bytes) -> bytes:
    return VOLATILE.sub(rb'"\1":_', body)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    # Two slots per instance and no queue: four long streams saturate both (the 429 test).
    pair = start_pair(tmp_path_factory.mktemp("pair"), "--parallel", "2", "--max-queue", "0")
    yield pair
    pair.stop()


@pytest.fixture(scope="module")
def haproxy(pair, tmp_path_factory):
    balancer = start_haproxy(tmp_path_factory.mktemp("haproxy"), pair.addresses)
    yield balancer
    balancer.stop()


def _slots_in_use(base_url: str) -> int:
    body = httpx.get(base_url + "/health/ready", timeout=5).json()
    return sum(m["slots_in_use"] for m in body["models"].values())


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_streams_through_haproxy_are_byte_identical_to_direct(pair, haproxy):
    for route, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION),
                        ("/api/chat", OLLAMA_CHAT)):
        bodies = []
        for base in [haproxy.base_url] + [srv.base_url for srv in pair.instances]:
            r = httpx.post(base + route, json=body, timeout=60)
            assert r.status_code == 200, r.text
            bodies.append((r.headers["content-type"], _normalized(r.content)))
        assert bodies[0][1].count(b"\n") > 3, bodies[0]  # streamed in many events
        assert bodies[0] == bodies[1] == bodies[2], (route, bodies)


def test_saturated_instances_answer_429_through_haproxy_and_aborts_reach_the_lanes(pair, haproxy):
    long_stream = {"model": "smollm2", "prompt": "Count:", "max_tokens": 400, "ignore_eos": True, "stream": True}
    before = [len([r for r in pair.records(i) if r["outcome"] == "disconnect"]) for i in range(2)]
    with httpx.Client(base_url=haproxy.base_url, timeout=30) as client, contextlib.ExitStack() as streams:
        lines = []  # kept: closing a line iterator closes its response
        for _ in range(4):  # leastconn: two per instance, every slot taken
            r = streams.enter_context(client.stream("POST", "/v1/completions", json=long_stream))
            assert r.status_code == 200
            lines.append(r.iter_lines())
            next(line for line in lines[-1] if line.startswith("data: "))  # admitted and generating
        assert [_slots_in_use(srv.base_url) for srv in pair.instances] == [2, 2]
        busy = httpx.post(haproxy.base_url + "/v1/completions", json={**long_stream, "stream": False}, timeout=30)
        assert busy.status_code == 429, busy.text
        assert busy.headers["retry-after"] == "1" and busy.json()["error"]["code"] == "server_busy"
    # The clients closed mid-stream: HAProxy closed its server connections, each lane cancelled.
    _wait(lambda: all(_slots_in_use(srv.base_url) == 0 for srv in pair.instances), 10, "slots still in use")
    after = [len([r for r in pair.records(i) if r["outcome"] == "disconnect"]) for i in range(2)]
    assert [a - b for a, b in zip(after, before)] == [2, 2]


def test_no_instance_up_is_an_openai_503_with_retry_after(tmp_path):


    balancer = start_haproxy(tmp_path, [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"], wait_up=False)
    try:
        _wait(lambda: set(balancer.server_states().values()) == {"DOWN"}, 10, "servers not marked down")
        r = httpx.post(balancer.base_url + "/v1/completions", json=COMPLETION, timeout=10)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "no_instance_available"
    finally:
        balancer.stop()


def test_session_affinity_keeps_a_conversation_on_one_instance(pair, tmp_path):
    balancer = start_haproxy(tmp_path, pair.addresses, affinity=True)
    try:
        with httpx.Client(base_url=balancer.base_url, timeout=60) as client:
            messages = [{"role": "system", "content": "You are a terse assistant. " * 8}]
            served, cached = set(), []
            for turn in range(3):
                messages.append({"role": "user", "content": f"Question {turn}: what is {turn} + {turn}?"})
                request_id = f"affine-turn-{turn}"
                r = client.post("/v1/chat/completions", headers={"X-Session-ID": "chat-7", "X-Request-ID": request_id},
                                json={"model": "smollm2", "messages": messages, "max_tokens": 12, "temperature": 0})
                assert r.status_code == 200, r.text
                messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
                cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
                served.add(pair.served_by(request_id))
            assert len(served) == 1, served
            assert cached[1] > 0 and cached[2] > cached[1], cached  # each turn reuses the last one's prefix
            spread = set()
            for session in range(16):
                request_id = f"affine-spread-{session}"
                r = client.post("/v1/completions", headers={"X-Session-ID": f"user-{session}", "X-Request-ID": request_id},
                                json={"model": "smollm2", "prompt": "Hi", "max_tokens": 1})
                assert r.status_code == 200, r.text
                spread.add(pair.served_by(request_id))
            assert spread == {0, 1}
    finally:
        balancer.stop()


def _read_stream(response: httpx.Response) -> dict:
    """Events of an SSE stream until it ends, cleanly or not."""
    out = {"events": [], "done": False, "error": None, "transport_error": None}
    try:
        for line in response.iter_lines():
            if line == "data: [DONE]":
                out["done"] = True
            elif line.startswith("data: "):
                out["events"].append(line)
                if '"error"' in line and line.startswith('data: {"error"'):
                    out["error"] = line
    except httpx.HTTPError as exc:
        out["transport_error"] = type(exc).__name__
    return out


def _serving_instance(pair) -> int:
    busy = []
    _wait(lambda: busy.extend(i for i, srv in enumerate(pair.instances) if _slots_in_use(srv.base_url)) or busy,
          10, "no instance has the stream")
    return busy[0]


def _requests_all_succeed(base_url: str, count: int) -> None:
    for i in range(count):
        r = httpx.post(base_url + "/v1/completions", json={**COMPLETION, "stream": False, "max_tokens": 4}, timeout=30)
        assert r.status_code == 200, (i, r.status_code, r.text)


def test_sigkill_mid_stream_ends_that_stream_and_new_requests_go_elsewhere(tmp_path):
    pair = start_pair(tmp_path, "--parallel", "2", "--max-queue", "16")
    balancer = start_haproxy(tmp_path, pair.addresses)
    long_stream = {**COMPLETION, "max_tokens": 400, "ignore_eos": True}
    try:
        with httpx.Client(timeout=30) as client:
            # 1. A lane dies: its gateway ends the stream with the terminal error event.
            with client.stream("POST", balancer.base_url + "/v1/completions", json=long_stream) as r:
                victim = pair.instances[_serving_instance(pair)]
                [lane_pid] = [lane["pid"] for m in httpx.get(victim.base_url + "/health/ready").json()["models"].values()
                              for lane in m["lanes"]]

                os.kill(lane_pid, signal.SIGKILL)
                result = _read_stream(r)
            assert result["done"] and result["error"] and "lane_died" in result["error"], result
            _requests_all_succeed(balancer.base_url, 6)
            # 2. A whole instance dies: the cut is visible (no [DONE], the chunked body never ends).
            with client.stream("POST", balancer.base_url + "/v1/completions", json=long_stream) as r:
                index = _serving_instance(pair)
                pair.instances[index].kill()
                result = _read_stream(r)
            assert not result["done"] and result["transport_error"], result
            _requests_all_succeed(balancer.base_url, 6)
            _wait(lambda: balancer.server_states()[f"lane{index + 1}"] == "DOWN", 10, "dead instance still UP")
    finally:
        balancer.stop()
        pair.stop()


def test_sigterm_under_closed_loop_load_fails_no_request(tmp_path):
    pair = start_pair(tmp_path, "--parallel", "4", "--max-queue", "16")
    balancer = start_haproxy(tmp_path, pair.addresses)
    stop = threading.Event()
    outcomes: list[tuple[float, str]] = []

    def client_loop(worker: int) -> None:
        with httpx.Client(base_url=balancer.base_url, timeout=30) as client:
            n = 0
            while not stop.is_set():
                n += 1
                stream = n % 2 == 0
                body = {**COMPLETION, "max_tokens": 8, "stream": stream}
                try:
                    if stream:
                        with client.stream("POST", "/v1/completions", json=body) as r:
                            result = _read_stream(r) if r.status_code == 200 else {"done": False, "error": r.status_code}
                        ok = result["done"] and not result["error"] and not result.get("transport_error")
                        what = "ok" if ok else f"stream {result}"
                    else:
                        r = client.post("/v1/completions", json=body)
                        what = "ok" if r.status_code == 200 else f"status {r.status_code} {r.text[:200]}"
                except httpx.HTTPError as exc:
                    what = f"transport {type(exc).__name__}"
                outcomes.append((time.monotonic(), what))

    workers = [threading.Thread(target=client_loop, args=(w,), daemon=True) for w in range(4)]
    try:
        for w in workers:
            w.start()
        time.sleep(1.5)
        victim = pair.instances[0]
        t_term = time.monotonic()
        victim.proc.send_signal(signal.SIGTERM)
        code = victim.proc.wait(DRAIN_DELAY_S + 20)
        exit_s = time.monotonic() - t_term
        time.sleep(1.0)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
        balancer.stop()
        pair.stop()
    failures = [o for o in outcomes if o[1] != "ok"]
    assert not failures, failures[:5]
    assert code == 0 and DRAIN_DELAY_S - 0.5 < exit_s < DRAIN_DELAY_S + 10, (code, exit_s)
    victim_records = pair.records(0)
    # The balancer stopped sending before the instance began to refuse: not one 503 there.
    assert victim_records and not [r for r in victim_records if r["status"] == 503], victim_records[-5:]
    after = [o for o in outcomes if o[0] > t_term + exit_s]
    assert len(after) > 4 and len(outcomes) > 40, (len(after), len(outcomes))
