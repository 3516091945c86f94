"""Two real laneserve instances behind a real nginx running deploy/nginx/nginx.conf.template as
rendered by envsubst: streams identical to direct ones, a SIGTERM drain and a SIGKILL without a
failed request (nginx's passive health: a 503 or a refused connection moves the request on),
session affinity, and its own 503 envelope when no instance is reachable."""
from __future__ import annotations

import signal
import time

import httpx
import pytest

from balancers import (DRAIN_DELAY_S, ClosedLoad, assert_first_event_not_held_back,
                       assert_long_prompt_reaches_laneserve, assert_streams_identical, start_nginx, start_pair)

pytestmark = pytest.mark.real_model


def test_streams_identical_then_drain_and_kill_fail_no_request(tmp_path):
    pair = start_pair(tmp_path, "--parallel", "4", "--max-queue", "16")
    balancer = start_nginx(tmp_path, pair.addresses)
    try:
        assert_streams_identical(balancer, pair)
        assert_first_event_not_held_back(balancer, pair)
        assert_long_prompt_reaches_laneserve(balancer)
        with ClosedLoad(balancer.base_url) as load:
            time.sleep(1.0)
            t_term = time.monotonic()
            pair.instances[0].proc.send_signal(signal.SIGTERM)
            code = pair.instances[0].proc.wait(DRAIN_DELAY_S + 20)
            exit_s = time.monotonic() - t_term
            time.sleep(1.0)
        assert code == 0 and exit_s > DRAIN_DELAY_S - 0.5, (code, exit_s)
        assert not load.failures, load.failures[:5]
        assert len([o for o in load.outcomes if o[0] > t_term + exit_s]) > 4
        # The survivor is SIGKILLed: nothing is left, and nginx says so in the OpenAI envelope.
        pair.instances[1].kill()
        r = httpx.post(balancer.base_url + "/v1/completions", json={"model": "smollm2", "prompt": "x"}, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", (r.status_code, r.text)
        assert r.json()["error"]["code"] == "no_instance_available"
    finally:
        balancer.stop()
        pair.stop()


def test_sigkill_of_one_instance_is_invisible_to_new_requests(tmp_path):
    pair = start_pair(tmp_path, "--parallel", "4", "--max-queue", "16")
    balancer = start_nginx(tmp_path, pair.addresses)
    try:
        with ClosedLoad(balancer.base_url) as load:
            time.sleep(1.0)
            t_kill = time.monotonic()
            pair.instances[1].kill()
            time.sleep(2.0)
        # Requests on the killed instance's connections at that moment are cut (the client sees
        # it: no [DONE] or a transport error); every request started after the kill succeeds.
        later = [o for o in load.outcomes if o[0] > t_kill + 0.5]
        assert later and all(o[1] == "ok" for o in later), [o for o in later if o[1] != "ok"][:5]
    finally:
        balancer.stop()
        pair.stop()


def test_session_affinity_by_consistent_hash(tmp_path):
    pair = start_pair(tmp_path, "--parallel", "2", "--max-queue", "4")
    balancer = start_nginx(tmp_path, pair.addresses, affinity=True)
    try:
        with httpx.Client(base_url=balancer.base_url, timeout=60) as client:
            def served(session: str, request_id: str) -> int:
                r = client.post("/v1/completions", headers={"X-Session-ID": session, "X-Request-ID": request_id},
                                json={"model": "smollm2", "prompt": "Hi", "max_tokens": 1})
                assert r.status_code == 200, r.text
                return pair.served_by(request_id)
            assert len({served("chat-7", f"nginx-same-{i}") for i in range(6)}) == 1
            assert {served(f"user-{i}", f"nginx-spread-{i}") for i in range(16)} == {0, 1}
            without = set()
            for i in range(8):  # no header: round robin
                r = client.post("/v1/completions", headers={"X-Request-ID": f"nginx-anon-{i}"},
                                json={"model": "smollm2", "prompt": "Hi", "max_tokens": 1})
                assert r.status_code == 200, r.text
                without.add(pair.served_by(f"nginx-anon-{i}"))
            assert without == {0, 1}
    finally:
        balancer.stop()
        pair.stop()
