"""Two real laneserve instances (SmolLM2) behind a real HAProxy running deploy/haproxy/haproxy.cfg
as shipped: streams identical to direct ones, 429 handed through when every instance is full,
client aborts reaching the lane, instance failures invisible to new requests, a SIGTERM drain
without a failed request, and session affinity."""
from __future__ import annotations

import contextlib
import os
import signal
import time

import httpx
import pytest

from balancers import (CHAT, COMPLETION, DRAIN_DELAY_S, ClosedLoad, assert_first_event_not_held_back,
                       assert_long_prompt_reaches_laneserve,
                       assert_streams_identical, free_port, read_stream, start_haproxy, start_pair)

pytestmark = pytest.mark.real_model


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
    assert_streams_identical(haproxy, pair)
    assert_first_event_not_held_back(haproxy, pair)
    assert_long_prompt_reaches_laneserve(haproxy)


def test_openai_client_streams_the_same_text_through_haproxy(pair, haproxy):
    from openai import OpenAI

    texts = []
    for base in (haproxy.base_url, pair.instances[0].base_url):
        with OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
            stream = client.chat.completions.create(model="smollm2", messages=CHAT["messages"], max_tokens=24,
                                                    temperature=0, seed=1, stream=True,
                                                    extra_headers={"X-Session-ID": "sdk-1"})
            texts.append("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
    assert texts[0] and texts[0] == texts[1], texts


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
            without = set()
            for i in range(8):  # no header: round robin
                r = client.post("/v1/completions", headers={"X-Request-ID": f"affine-anon-{i}"},
                                json={"model": "smollm2", "prompt": "Hi", "max_tokens": 1})
                assert r.status_code == 200, r.text
                without.add(pair.served_by(f"affine-anon-{i}"))
            assert without == {0, 1}
    finally:
        balancer.stop()


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
                result = read_stream(r)
            assert result["done"] and result["error"] and "lane_died" in result["error"], result
            _requests_all_succeed(balancer.base_url, 6)
            # The next scenario kills the other instance: this one's lane must be back to take over.
            _wait(lambda: httpx.get(victim.base_url + "/health/ready").status_code == 200, 30, "lane not respawned")
            # 2. A whole instance dies: the cut is visible (no [DONE], the chunked body never ends).
            with client.stream("POST", balancer.base_url + "/v1/completions", json=long_stream) as r:
                index = _serving_instance(pair)
                pair.instances[index].kill()
                result = read_stream(r)
            assert not result["done"] and result["transport_error"], result
            _requests_all_succeed(balancer.base_url, 6)
            _wait(lambda: balancer.server_states()[f"lane{index + 1}"] == "DOWN", 10, "dead instance still UP")
    finally:
        balancer.stop()
        pair.stop()


def test_sigterm_under_closed_loop_load_fails_no_request(tmp_path):
    pair = start_pair(tmp_path, "--parallel", "4", "--max-queue", "16")
    balancer = start_haproxy(tmp_path, pair.addresses)
    try:
        with ClosedLoad(balancer.base_url) as load:
            time.sleep(1.5)
            victim = pair.instances[0]
            t_term = time.monotonic()
            victim.proc.send_signal(signal.SIGTERM)
            code = victim.proc.wait(DRAIN_DELAY_S + 20)
            exit_s = time.monotonic() - t_term
            time.sleep(1.0)
    finally:
        balancer.stop()
        pair.stop()
    assert not load.failures, load.failures[:5]
    assert code == 0 and DRAIN_DELAY_S - 0.5 < exit_s < DRAIN_DELAY_S + 10, (code, exit_s)
    victim_records = pair.records(0)
    # The balancer stopped sending before the instance began to refuse: not one 503 there.
    assert victim_records and not [r for r in victim_records if r["status"] == 503], victim_records[-5:]
    after = [o for o in load.outcomes if o[0] > t_term + exit_s]
    assert len(after) > 4 and len(load.outcomes) > 40, (len(after), len(load.outcomes))
